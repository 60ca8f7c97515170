"""The server contract (issue 8.2): `check_server` fails fast on each misconfiguration a new user
makes, and a server that misbehaves mid-run is a `BackendError` naming the fix, never a score.

Every server here is `serve-scripted` answering as a misconfigured vLLM would (its texts are
vLLM's own; see arc_eval.backends.overflow and faults)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import httpx
import pytest

from arc_eval.backends.openai_backend import OpenAIBackend
from tests.eval.helpers import openai_backend
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.scripted_server import (
    NO_ROOM_MESSAGE,
    build_app,
    prompt_overflow_message,
    serve_in_thread,
)
from arc_eval.types import (
    BackendError,
    BackendRequestError,
    BackendUnavailable,
    ChatRequest,
    ContextOverflow,
    Message,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "_recall",
            "description": "Fetch a stored observation by its id.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
]


def policy(messages: Sequence[Message]) -> str:
    return "Thought: look.\nAction: ls"


def client(url: str, **options: Any) -> OpenAIBackend:
    settings: dict[str, Any] = {
        "context_limit": 2048,
        "max_tokens": 256,
        "backoff_base_s": 0.01,
        "api_key": "",
    }
    settings.update(options)
    model = settings.pop("model", "scripted")
    return openai_backend(url, model, **settings)


def ask(text: str = "go") -> ChatRequest:
    return ChatRequest((Message("system", "You are an agent."), Message("user", text)))


def check(url: str, **options: Any) -> Any:
    async def run() -> Any:
        async with client(url, **options) as backend:
            return await backend.check_server()

    return asyncio.run(run())


def test_a_healthy_server_passes_and_says_what_it_is() -> None:
    app = build_app(policy, max_model_len=2048)
    with serve_in_thread(app) as url:
        infos = check(url)
    assert [(info.kind, info.window, info.window_field) for info in infos] == [
        ("vllm", 2048, "max_model_len")
    ]
    assert infos[0].label == "arc-eval serve-scripted (answers as vLLM)"  # what the plan says (issue 31 item 5)
    assert app.stats.chat_requests == 1  # the 1-token probe


def test_a_window_smaller_than_the_context_limit_is_an_error_naming_both_fixes() -> None:
    app = build_app(policy, max_model_len=1024)
    with serve_in_thread(app) as url:
        with pytest.raises(BackendRequestError) as caught:
            check(url, context_limit=2048)
    message = str(caught.value)
    assert "the server's window is 1024 tokens (max_model_len), smaller than --context-limit 2048" in message
    assert "Fix: pass --context-limit 1024" in message and "--max-model-len" in message
    assert app.stats.chat_requests == 0  # failed before any chat request


def test_a_larger_window_is_said_once_and_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    app = build_app(policy, max_model_len=4096)
    with serve_in_thread(app) as url:
        check(url, context_limit=2048)
    assert "the server's window is 4096 tokens (max_model_len); the run keeps" in capsys.readouterr().err


def test_an_api_key_is_required_sent_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = build_app(policy, max_model_len=2048, api_key="sesame")
    with serve_in_thread(app) as url:
        with pytest.raises(BackendRequestError) as caught:
            check(url)
        assert caught.value.status == 401
        assert "HTTP 401: Unauthorized. Fix: pass the server's key with --api-key KEY" in str(caught.value)
        with pytest.raises(BackendRequestError, match="HTTP 401"):
            check(url, api_key="wrong")
        assert check(url, api_key="sesame")[0].kind == "vllm"
        monkeypatch.setenv("OPENAI_API_KEY", "sesame")
        assert check(url, api_key=None)[0].kind == "vllm"
    assert app.stats.unauthorized == 2  # no key, the wrong key


def test_tool_mode_switched_off_on_the_server_is_found_by_the_probe() -> None:
    app = build_app(policy, max_model_len=4096, auto_tool_choice=False)
    with serve_in_thread(app) as url:
        assert check(url, context_limit=4096)[0].kind == "vllm"  # text mode needs no tool parser
        with pytest.raises(BackendRequestError) as caught:
            check(url, context_limit=4096, tools=TOOLS)
    message = str(caught.value)
    assert '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser' in message
    assert "Fix: restart vLLM with --enable-auto-tool-choice --tool-call-parser hermes" in message


def test_a_server_refusing_every_prompt_as_too_long_is_reported_not_scored() -> None:
    app = build_app(policy, max_model_len=2048, overflow_every_request=True)
    with serve_in_thread(app) as url:
        with pytest.raises(BackendRequestError, match="refused a 1-token probe .* far smaller than it says"):
            check(url)

        async def mid_run(count_with: str) -> None:
            async with client(url, count_with=count_with) as backend:
                await backend.complete(ask())

        # without check_server, the first call finds it: a prompt far under the window
        for count_with in ("auto", "local"):
            with pytest.raises(BackendRequestError) as caught:
                asyncio.run(mid_run(count_with))
            assert "refused as too long a prompt of" in str(caught.value)
            assert "reports a window of 2048 tokens" in str(caught.value)


def test_a_credible_overflow_is_still_an_overflow() -> None:
    """A prompt the server's window cannot hold (the harness believed a larger window) is an
    overflow for reactive compaction, not a fault."""
    app = build_app(policy, max_model_len=600)
    with serve_in_thread(app) as url:

        async def run() -> None:
            async with client(url, context_limit=4096, count_with="local") as backend:
                with pytest.raises(ContextOverflow, match="maximum context length is 600"):
                    await backend.complete(ask("lorem ipsum " * 400))

        asyncio.run(run())


def test_a_server_that_never_answers_is_unavailable_within_the_stated_budget() -> None:
    app = build_app(policy, max_model_len=2048, never_answer=True)
    with serve_in_thread(app) as url:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            check(url, probe_timeout_s=0.5)
        assert "gave up after 2 attempts; last error: no answer within 0.5" in str(caught.value)
        assert time.monotonic() - started < 10

        async def mid_run() -> str:
            async with client(url, request_timeout_s=0.4, call_budget_s=1.5, max_retries=6) as backend:
                policy_text = backend.retry_policy()
                with pytest.raises(BackendUnavailable, match="no answer within"):
                    await backend.complete(ask())
                return policy_text

        started = time.monotonic()
        stated = asyncio.run(mid_run())
        assert time.monotonic() - started < 5  # the call budget, not 7 x the request timeout
    assert "whole request 0.4 s" in stated and "gives up after 1.5 s at most" in stated
    assert app.stats.stalled >= 4


def test_max_tokens_must_be_at_least_one_is_an_overflow() -> None:
    assert is_context_overflow(400, NO_ROOM_MESSAGE)
    assert is_context_overflow(400, prompt_overflow_message(2048, 3000))
    assert "at least 2049 input tokens" in prompt_overflow_message(2048, 3000)
    assert "contains 2049 input tokens" in prompt_overflow_message(2048, 2049)


def test_a_prompt_of_exactly_the_window_gets_vllms_no_room_refusal() -> None:
    messages = [{"role": "user", "content": "x"}]
    size = len(build_app(policy, max_model_len=2048).count_messages(messages, None))
    exact = build_app(policy, max_model_len=size)
    with serve_in_thread(exact) as url:
        answer = httpx.post(f"{url}/chat/completions", json={"model": "scripted", "messages": messages})
    assert answer.status_code == 400 and answer.json()["error"]["message"] == NO_ROOM_MESSAGE


def test_every_backend_fault_is_one_error_family() -> None:
    for error in (BackendRequestError("x"), BackendUnavailable("y")):
        assert isinstance(error, BackendError)
