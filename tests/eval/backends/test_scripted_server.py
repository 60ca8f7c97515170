"""The `serve-scripted` server on its own: routes, vLLM-shaped errors, clamping, the CLI."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
from typing import Any, Sequence

import httpx
import pytest

from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.scripted_server import (
    build_app,
    load_policy,
    overflow_message,
    serve_in_thread,
    serve_main,
)
from arc_eval.types import Message
from tests.waiting import http_ok, scaled_ceiling, wait_until


def constant_policy(messages: Sequence[Message]) -> str:
    return "Thought: done.\nAction: submit NEEDLE=ABC"


def failing_policy(messages: Sequence[Message]) -> str:
    raise RuntimeError("policy bug")


def chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": messages, **extra}


USER = [{"role": "user", "content": "hello"}]


def test_routes_health_models_stats_and_unknown_paths() -> None:
    app = build_app(constant_policy, max_model_len=1000, model_name="Qwen/Qwen3-8B")
    with serve_in_thread(app) as url, httpx.Client() as client:
        root = url[: -len("/v1")]
        health = client.get(f"{root}/health")
        assert health.status_code == 200 and health.content == b""
        models = client.get(f"{url}/models").json()
        assert models["data"][0]["id"] == "Qwen/Qwen3-8B"
        assert models["data"][0]["max_model_len"] == 1000
        assert client.get(f"{url}/nothing").status_code == 404
        assert client.get(f"{url}/chat/completions").status_code == 405
        stats = client.get(f"{root}/stats").json()
        assert stats["requests"] == 5 and stats["max_in_flight"] == 0


def test_tokenize_counts_exactly_what_chat_charges() -> None:
    app = build_app(constant_policy, max_model_len=1000)
    with serve_in_thread(app) as url, httpx.Client() as client:
        root = url[: -len("/v1")]
        messages = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi there"},
        ]
        counted = client.post(
            f"{root}/tokenize", json={"model": "scripted", "messages": messages}
        ).json()
        assert counted["max_model_len"] == 1000 and counted["count"] == len(counted["tokens"])
        reply = client.post(f"{url}/chat/completions", json=chat(messages, max_tokens=50)).json()
        assert reply["usage"]["prompt_tokens"] == counted["count"]
        assert reply["choices"][0]["message"]["content"] == constant_policy([])
        assert reply["choices"][0]["finish_reason"] == "stop"
        assert (
            reply["usage"]["total_tokens"] == counted["count"] + reply["usage"]["completion_tokens"]
        )
        plain = client.post(f"{root}/tokenize", json={"prompt": "hello world"}).json()
        assert plain["count"] == app.tokenizer.count("hello world")


def test_over_long_prompt_is_answered_like_vllm() -> None:
    app = build_app(constant_policy, max_model_len=50)
    with serve_in_thread(app) as url, httpx.Client() as client:
        response = client.post(
            f"{url}/chat/completions",
            json=chat([{"role": "user", "content": "many words " * 40}], max_tokens=16),
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "BadRequestError" and error["code"] == 400
        assert error["message"].startswith(
            "This model's maximum context length is 50 tokens. However"
        )
        assert is_context_overflow(400, error["message"])
    prompt = app.stats.as_json()
    assert prompt["overflows"] == 1 and prompt["completed"] == 0
    assert "you requested 16 output tokens" in overflow_message(50, 16, 60)


def test_clamp_versus_reject_long_completion() -> None:
    messages = [{"role": "user", "content": "hello"}]
    clamping = build_app(constant_policy, max_model_len=30)
    with serve_in_thread(clamping) as url, httpx.Client() as client:
        reply = client.post(f"{url}/chat/completions", json=chat(messages, max_tokens=4096)).json()
        prompt = reply["usage"]["prompt_tokens"]
        assert reply["usage"]["completion_tokens"] == min(30 - prompt, 13)
        assert clamping.stats.clamped == 1
    rejecting = build_app(constant_policy, max_model_len=30, reject_long_completion=True)
    with serve_in_thread(rejecting) as url, httpx.Client() as client:
        response = client.post(f"{url}/chat/completions", json=chat(messages, max_tokens=4096))
        assert response.status_code == 400
        assert "you requested 4096 output tokens" in response.json()["error"]["message"]


def test_bad_requests_and_policy_failures() -> None:
    app = build_app(failing_policy, max_model_len=1000)
    with serve_in_thread(app) as url, httpx.Client() as client:
        post = f"{url}/chat/completions"
        assert client.post(post, content=b"{not json").status_code == 400
        assert client.post(post, json=chat([])).status_code == 400
        assert client.post(post, json=chat([{"role": "wizard", "content": "x"}])).status_code == 400
        assert client.post(post, json=chat(USER, max_tokens=0)).status_code == 400
        wrong = client.post(post, json={"model": "other", "messages": USER})
        assert wrong.status_code == 404 and "does not exist" in wrong.json()["error"]["message"]
        failed = client.post(post, json=chat(USER))
        assert failed.status_code == 500 and "policy bug" in failed.json()["error"]["message"]


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        build_app(constant_policy, max_model_len=100, concurrency=0)
    with pytest.raises(ValueError, match="fault"):
        build_app(constant_policy, max_model_len=100, faults=["explode"])
    with pytest.raises(ValueError, match="max_model_len"):
        build_app(constant_policy, max_model_len=1)


def test_load_policy_errors_are_clear() -> None:
    assert load_policy("builtins:repr") is repr
    with pytest.raises(ValueError, match="module:attribute"):
        load_policy("nocolon")
    with pytest.raises(ValueError, match="cannot import"):
        load_policy("no_such_module_xyz:Policy")
    with pytest.raises(ValueError, match="has no"):
        load_policy("builtins:NoSuchPolicy")


def test_cli_bad_arguments_exit_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main(["--policy", "no_such_module_xyz:P"]) == 2
    assert "cannot import the policy module" in capsys.readouterr().err
    assert serve_main(["--inject-faults", "boom", "--policy", "builtins:repr"]) == 2


def test_cli_says_a_tokenizer_directory_that_is_not_there_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    """Review h72: the README's ``--tokenizer ../shared/data/qwen3-tokenizer`` from a clone not beside shared/ was
    refused as an "unknown tokenizer" with a list of tokenizer names, not as a directory that is not there."""
    assert serve_main(["--tokenizer", "../shared-absent/qwen3-tokenizer", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "'../shared-absent/qwen3-tokenizer' is not a directory" in err and "unknown tokenizer" not in err


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_cli_refuses_a_port_outside_0_to_65535(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert serve_main(["--port", port]) == 2
    err = capsys.readouterr().err
    assert f"argument --port: expected an integer from 0 to 65535{' (ASCII digits only)' if port == 'http' else ''}, got {port!r}" in err
    assert "Traceback" not in err


@pytest.mark.skipif(
    importlib.util.find_spec("arc_eval.agent.scripted") is None,
    reason="the default scripted policy (eval/agent/scripted.py) is not in this tree yet",
)
def test_default_policy_loads() -> None:
    policy = load_policy("arc_eval.agent.scripted:ScriptedPolicy")
    assert callable(policy)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_cli_serves_until_sigterm() -> None:
    port = free_port()
    command = [
        sys.executable,
        "-c",
        "import sys; from arc_eval.backends.scripted_server import serve_main; "
        "sys.exit(serve_main(sys.argv[1:]))",
        "--port",
        str(port),
        "--max-model-len",
        "512",
        "--policy",
        "builtins:repr",
        "--concurrency",
        "2",
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(http_ok(f"{url}/health"), server, "serve-scripted")
        reply = httpx.post(f"{url}/v1/chat/completions", json=chat(USER, max_tokens=400)).json()
        assert reply["choices"][0]["message"]["content"].startswith("[Message(role='user'")
    finally:
        os.kill(server.pid, signal.SIGTERM)
        out, err = server.communicate(timeout=scaled_ceiling(60))
    assert server.returncode == 0, err
    assert f"serve-scripted: http://127.0.0.1:{port}/v1" in out and "stopped" in out


def test_a_served_template_renders_with_the_request_s_own_template_kwargs() -> None:
    """As vLLM: no chat_template_kwargs leaves Qwen3's enable_thinking undefined (no empty think block, 4 tokens
    fewer than enable_thinking false); reasoning_effort 'none' turns thinking off (the proxy's count relies on it)."""
    from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

    directory = qwen3_dir()
    if directory is None:
        pytest.skip(QWEN3_ABSENT)
    app = build_app(constant_policy, max_model_len=4000, tokenizer=str(directory))
    with serve_in_thread(app) as url, httpx.Client() as client:
        root = url[: -len("/v1")]
        counts = []
        for extra in ({}, {"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
            tokenized = client.post(f"{root}/tokenize", json=chat(USER, **extra)).json()["count"]
            charged = client.post(f"{url}/chat/completions", json=chat(USER, max_tokens=5, **extra)).json()
            assert charged["usage"]["prompt_tokens"] == tokenized
            counts.append(tokenized)
        refused = client.post(f"{url}/chat/completions", json=chat(USER, chat_template_kwargs=[1]))
    assert counts[1] - counts[0] == 4 and counts[2] == counts[1]
    assert refused.status_code == 400
