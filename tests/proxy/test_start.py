"""`arc-ref proxy` out of the box (issue 25 item 1): the window from the upstream, budgets from each conversation's
prefix (arc_ref.budgets.fit_to_window), and every option that cannot work refused at start with one line and exit
status 2, nothing created."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app, serve_upstream

import attrs  # noqa: E402
import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.budgets import RESERVE_FLOOR, WindowTooSmall  # noqa: E402
from arc_ref.frontends.proxy import ProxySettings, StartRefused, conversation_config, prepare  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_eval.agent.recall_then_submit import RecallThenSubmitPolicy  # noqa: E402
from arc_eval.backends.scripted_server import build_app as build_upstream  # noqa: E402
from arc_eval.backends.scripted_server import serve_in_thread  # noqa: E402

pytestmark = needs_qwen3
REPO = Path(__file__).resolve().parents[2]


def mini_prefix() -> list[dict[str, Any]]:
    """mini-swe-agent's first request (its mini.yaml system prompt and instance template, ~1.5k Qwen3 tokens)."""
    found = importlib.util.find_spec("minisweagent")  # located, not imported (its import prints a banner)
    if found is None or not found.submodule_search_locations:
        pytest.skip("mini-swe-agent is not installed (the extra 'agents')")
    import yaml

    folder = Path(list(found.submodule_search_locations)[0]) / "config"
    loaded = yaml.safe_load((folder / "mini.yaml").read_text(encoding="utf-8"))
    instance = loaded["agent"]["instance_template"].replace("{{task}}", "Count the lines of notes.txt.")
    return [{"role": "system", "content": loaded["agent"]["system_template"]}, {"role": "user", "content": instance}]


def long_prefix() -> list[dict[str, Any]]:
    """A system prompt and task the project makes, as long as mini-swe-agent's through the proxy (its smallest view
    needs 2,216 Qwen3 tokens with the bash tool, as mini's does): the tests of the reserve run where mini is not
    installed (CI's default step)."""
    rules = "\n".join(f"Rule {number}: before you run command {number}, read the file it changes and say why in one"
                      " line." for number in range(1, 30))
    return [{"role": "system", "content": f"You are a careful software agent working in a shell.\n{rules}"},
            {"role": "user", "content": "Count the lines of notes.txt and submit the number."}]


def zero_config_offline() -> ProxySettings:
    """The README's settings without an upstream to ask: the window set per test."""
    return ProxySettings(upstream="http://127.0.0.1:9/v1", tokenizer=f"hf-dir:{QWEN3}")


def zero_config(upstream_url: str, **extra: Any) -> ProxySettings:
    """The README's `arc-ref proxy --upstream URL --tokenizer hf-dir:DIR` and nothing else, prepared."""
    return prepare(ProxySettings(upstream=upstream_url, tokenizer=f"hf-dir:{QWEN3}", **extra))


@pytest.mark.parametrize("window", [16384, 8192, 4096, 3072])
def test_mini_swe_agents_prefix_is_served_with_no_budget_given(window: int) -> None:
    """Before: 400 'K = 1498 + 2048 + 4096 + 1024 + 4096 + 64 = 12826 exceeds L = 12288' (16384), and at 8192
    page_size as well. Now the window comes from GET /models and the budgets from the prefix. At 4096 and 3072
    (review h54 F6: refused, G_max = L_ctx // 2 left the prefix no room) the reserve is lowered to half of what the
    prefix's smallest view leaves, and max_tokens is capped there."""
    upstream = build_upstream(RecallThenSubmitPolicy(), max_model_len=window, tokenizer=str(QWEN3),
                              model_name="scripted")
    with serve_in_thread(upstream) as upstream_url:
        settings = zero_config(upstream_url)
        assert settings.context_limit == window
        with serve_app(build_app(settings)) as base_url:
            response = httpx.post(f"{base_url}/chat/completions", timeout=120,
                                  json={"model": "scripted", "messages": mini_prefix(), "tools": [BASH_TOOL]})
            assert response.status_code == 200, response.text
            rounds = httpx.get(base_url.removesuffix("/v1") + "/arc/rounds").json()
    assert rounds and all(record["limit"] + record["max_tokens"] <= window for record in rounds)
    assert all(record["upstream_prompt_tokens"] == record["view_tokens"] <= record["budget"] <= record["limit"]
               for record in rounds)
    reserve = rounds[0]["max_tokens"]  # the request asks none: the cap, G_max
    assert RESERVE_FLOOR <= reserve <= 4096 and rounds[0]["limit"] == window - reserve
    assert reserve == 4096 if window == 16384 else reserve < window // 2


def test_the_rounds_say_what_max_tokens_the_client_asked_and_the_reserve_that_capped_it() -> None:
    """Review h70 F2: an agent asking max_tokens 3000 at a 4,096 window got a reply cut at G_max, and /arc/rounds
    showed only the max_tokens sent; now each round also gives the client's own and the conversation's G_max."""
    upstream = build_upstream(RecallThenSubmitPolicy(), max_model_len=4096, tokenizer=str(QWEN3),
                              model_name="scripted")
    with serve_in_thread(upstream) as upstream_url, serve_app(build_app(zero_config(upstream_url))) as base_url:
        for asked in ({"max_tokens": 3000}, {"max_completion_tokens": 96}, {}):
            response = httpx.post(f"{base_url}/chat/completions", timeout=120,
                                  json={"model": "scripted", "messages": long_prefix(), "tools": [BASH_TOOL],
                                        **asked, "metadata": {"conversation_id": f"c-{len(asked)}-{asked}"}})
            assert response.status_code == 200, response.text
        rounds = httpx.get(base_url.removesuffix("/v1") + "/arc/rounds").json()
    firsts = [record for record in rounds if not record["hidden"]]
    reserve = firsts[0]["completion_reserve"]
    assert RESERVE_FLOOR <= reserve < 3000 and all(record["completion_reserve"] == reserve for record in rounds)
    assert [(record["asked_max_tokens"], record["max_tokens"]) for record in firsts] == [
        (3000, reserve), (96, 96), (None, reserve)]


def test_a_larger_window_never_gives_a_smaller_reserve_view_or_chunk() -> None:
    """Review h70 F1: the reserve was min(4096, L_ctx // 2), lowered only where that left the prefix no room, so
    one token of window past that point dropped K to the smallest view's (mini's prefix: K 3306 and chunks of 243
    tokens at 4,430, K 2216 and one-token chunks at 4,431, back only at ~6,640). Now G_max, K and the recall chunk
    never decrease as the window grows (a prefix as long as mini's, windows 2,600 to 20,000)."""
    messages = long_prefix()
    settings = zero_config_offline()
    seen: list[tuple[int, int, int, int]] = []
    for window in range(2600, 20000, 37):
        try:
            config = conversation_config(attrs.evolve(settings, context_limit=window), messages[0]["content"],
                                         messages[1]["content"], [BASH_TOOL], ())
        except WindowTooSmall as refused:
            assert not seen and window < refused.smallest_window  # refused below the window it names, only there
            continue
        view = (config.summary_budget + config.recent_budget + config.page_budget + config.recall_budget
                + config.overhead)
        seen.append((window, config.max_completion, view, config.chunk_tokens))
    assert len(seen) > 400
    for (window, *before), (larger, *after) in zip(seen, seen[1:]):
        assert all(a >= b for a, b in zip(after, before)), (window, before, larger, after)
    assert seen[-1][3] == 1920 and seen[-1][1] == 4096  # the preferred chunk and the preset's reserve


def test_a_prefix_that_cannot_fit_the_window_is_refused_naming_the_numbers() -> None:
    upstream = build_upstream(RecallThenSubmitPolicy(), max_model_len=2500, tokenizer=str(QWEN3),
                              model_name="scripted")
    with serve_in_thread(upstream) as upstream_url, serve_app(build_app(zero_config(upstream_url))) as base_url:
        response = httpx.post(f"{base_url}/chat/completions", timeout=120,
                              json={"model": "scripted", "messages": long_prefix(), "tools": [BASH_TOOL]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "arc_refused" and error["code"] == "configuration"
    assert "a window of at least" in error["message"] and "L_ctx = 2500 leaves" in error["message"]
    needed, smallest = error["budget"]["needed"], error["budget"]["smallest_window"]  # (review h70 F6: was {})
    assert f"its smallest view needs {needed} tokens" in error["message"] and smallest == needed + 2 * RESERVE_FLOOR


def test_the_window_comes_from_the_upstream_and_a_larger_one_is_refused() -> None:
    with serve_upstream() as (_, upstream_url):
        assert zero_config(upstream_url).context_limit == 16384
        assert zero_config(upstream_url, context_limit=8000).context_limit == 8000
        with pytest.raises(StartRefused, match="more than the window the upstream serves"):
            zero_config(upstream_url, context_limit=32768)
    with pytest.raises(StartRefused, match="does not answer GET /models"):
        zero_config(upstream_url)  # stopped: no window known


def test_an_upstream_url_without_its_api_path_is_refused_at_start_even_with_a_window_given() -> None:
    """Review h30 F11: ``--upstream http://host:8000`` (no /v1): the advice was --context-limit, which started a
    proxy whose every request was a 404."""
    with serve_upstream() as (_, upstream_url):
        base = upstream_url.removesuffix("/v1")
        for window in (None, 8000):
            with pytest.raises(StartRefused, match="answered 404: --upstream is not the base of an OpenAI-compatible"):
                zero_config(base, context_limit=window)
        # many instances on one database with the window given (review h34 F5: the upstream was not asked at all)
        with pytest.raises(StartRefused, match="answered 404: --upstream is not the base of an OpenAI-compatible"):
            zero_config(base, context_limit=8000, database="postgresql://arc@127.0.0.1:9/arc")
    # an upstream that is not there yet still leaves a window given to stand, with a database too
    assert zero_config(base, context_limit=8000, database="postgresql://arc@127.0.0.1:9/arc").context_limit == 8000


def run_proxy(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", *arguments]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    environment.pop("ARC_UPSTREAM_API_KEY", None)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, env=environment)


BAD_OPTIONS: dict[str, tuple[list[str], str]] = {
    "tokenizer_missing_dir": (["--tokenizer", "hf-dir:/nonexistent/model"], "no such directory"),
    "tokenizer_bytes": (["--tokenizer", "bytes"], "give its directory (hf-dir:DIR)"),
    # review h72: the README's own ../shared/data/qwen3-tokenizer from a clone not beside shared/ was told to give
    # a directory (hf-dir:DIR), which it had; it is a path to nothing
    "tokenizer_missing_plain_dir": (["--tokenizer", "../shared-absent/qwen3-tokenizer"],
                                    "'../shared-absent/qwen3-tokenizer': no such directory"),
    "recent_budget_negative": (["--set", "recent_budget=-5"], "recent_budget must be >= 1"),
    "upstream_not_a_url": (["--upstream", "notaurl"], "is not an http(s) URL"),
    "port_70000": (["--port", "70000"], "expected an integer from 0 to 65535"),
    "port_minus_1": (["--port", "-1"], "expected an integer from 0 to 65535"),
    "store_dev_null": (["--store", "/dev/null"], "is not a directory"),
    "flag_twice": (["--max-hidden-rounds", "3", "--max-hidden-rounds", "4"], "given more than once"),
    "set_twice": (["--set", "recent_budget=900", "--set", "recent_budget=901"], "given more than once"),
    "window_too_small": (["--context-limit", "100"], "a window of at least"),
    "no_window": (["--context-limit", "DROP"], "does not answer GET /models"),
    "client_keys_unreadable": (["--client-keys", "/nonexistent/keys"], "cannot be read"),
    "idle_seconds_0": (["--idle-seconds", "0"], "--idle-seconds"),
    "idle_seconds_text": (["--idle-seconds", "soon"], "--idle-seconds"),
    "body_memory_minus_1": (["--body-memory-mb", "-1"], "--body-memory-mb"),
    "bodies_in_flight_below_max_body": (["--max-body-mb", "64", "--bodies-in-flight-mb", "32"],
                                        "--bodies-in-flight-mb 32 is below --max-body-mb 64"),
    "upstream_timeout_0": (["--upstream-timeout", "0"], "--upstream-timeout"),
    "running_lease_0": (["--running-lease", "0"], "--running-lease"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_a_bad_option_is_refused_at_start_in_one_line_and_nothing_is_created(case: str, tmp_path: Path) -> None:
    """Before: the proxy listened and answered every request 400 (a bad tokenizer, a negative budget, not a URL),
    exited 70 'internal error' (--port 70000) or with a traceback (--store /dev/null)."""
    extra, expected = BAD_OPTIONS[case]
    given = {"--upstream": "http://127.0.0.1:9/v1", "--tokenizer": f"hf-dir:{QWEN3}", "--context-limit": "16384",
             "--store": str(tmp_path / "store"), "--port": "0"}
    for flag, value in zip(extra[::2], extra[1::2]):
        if flag in given:
            given[flag] = value
    if given["--context-limit"] == "DROP":
        del given["--context-limit"]
    arguments = [item for flag, value in given.items() for item in (flag, value)]
    arguments += [item for flag, value in zip(extra[::2], extra[1::2]) if flag not in given and value != "DROP"
                  for item in (flag, value)]
    done = run_proxy(*arguments, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("arc-ref proxy: ") and expected in lines[0], lines
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == [], "the refused start created files"


def test_a_port_in_use_is_refused_at_start_in_one_line_and_nothing_is_created(tmp_path: Path) -> None:
    """Review h54: the port was bound after the checks that create things, so a port in use (exit 2, one line) left
    the --store directory and its hashes.sqlite behind, where the README says "nothing created"."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = run_proxy("--upstream", "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{QWEN3}", "--context-limit",
                         "16384", "--store", str(tmp_path / "store"), "--port", str(taken.getsockname()[1]),
                         cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("arc-ref proxy: cannot listen on 127.0.0.1:"), lines
    assert sorted(path.name for path in tmp_path.iterdir()) == [], "the refused start created files"


def test_a_damaged_conversations_index_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    """--store DIR whose hashes.sqlite is not a database: exit 2 and one line naming it, before listening (before:
    a traceback and exit 3 when the application started)."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "hashes.sqlite").write_bytes(b"not a database " * 100)
    done = run_proxy("--upstream", "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{QWEN3}", "--context-limit",
                     "16384", "--store", str(store), "--port", "0", cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "hashes.sqlite" in lines[0] and "cannot be opened" in lines[0], lines


def test_a_path_the_proxy_does_not_serve_is_a_json_error_naming_what_it_serves() -> None:
    """Review h30 F7: the OpenAI Agents SDK's default (the Responses API) got a bare-text 'Not Found'."""
    with serve_upstream() as (_, upstream_url), serve_app(build_app(zero_config(upstream_url))) as base_url:
        responses = httpx.post(f"{base_url}/responses", json={"model": "m", "input": "hi"}, timeout=30)
        wrong_method = httpx.get(f"{base_url}/chat/completions", timeout=30)
    assert responses.status_code == 404 and wrong_method.status_code == 405
    for response in (responses, wrong_method):
        error = response.json()["error"]
        assert "is not served by arc-ref proxy" in error["message"] and "chat_completions" in error["message"], error
    assert responses.json()["error"]["type"] == "not_found"
    assert wrong_method.headers.get("allow") == "POST"  # (review h34 F6: RFC 9110 15.5.6; the handler dropped it)


def test_health_answers_without_a_key_and_without_asking_the_upstream() -> None:
    """GET /health for a load balancer's or an orchestrator's liveness check: 200 with client keys required and
    the upstream gone (it asks neither the upstream nor the store)."""
    with serve_upstream() as (_, upstream_url):
        settings = attrs.evolve(zero_config(upstream_url), client_keys=frozenset({"sk-team"}))
    with serve_app(build_app(settings)) as base_url:
        root = base_url.removesuffix("/v1")
        health = httpx.get(f"{root}/health", timeout=30)
        refused = httpx.get(f"{base_url}/models", timeout=30)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert refused.status_code == 401  # the other paths still need a key


def test_the_smallest_window_a_refusal_names_is_the_smallest_the_proxy_serves() -> None:
    """Review h30 F3: the core's figure keeps G_max fixed, but the proxy's reserve is min(4096, window // 2): at
    the window it named the prefix was refused again, naming another. Now the window named serves the prefix and
    one token less does not, and the refusal names --set max_completion."""
    import re

    def first_request(window: int) -> httpx.Response:
        upstream = build_upstream(RecallThenSubmitPolicy(), max_model_len=window, tokenizer=str(QWEN3),
                                  model_name="scripted")
        with serve_in_thread(upstream) as upstream_url, serve_app(build_app(zero_config(upstream_url))) as base_url:
            return httpx.post(f"{base_url}/chat/completions", timeout=120,
                              json={"model": "scripted", "messages": long_prefix(), "tools": [BASH_TOOL]})

    refused = first_request(2500)
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert "--set max_completion=N" in message, message
    smallest = int(re.search(r"a window of at least (\d+) tokens", message).group(1))
    assert first_request(smallest - 1).status_code == 400
    assert first_request(smallest).status_code == 200


def test_the_upstream_timeout_and_the_allowance_for_bodies_in_flight_reach_the_settings() -> None:
    """--upstream-timeout S (review h40 F8: 600 s was fixed) and --bodies-in-flight-mb (F6), whose default is
    four bodies of --max-body-mb."""
    import argparse

    from arc_ref.frontends.cli import _parse_setting
    from arc_ref.frontends.proxy import settings_from
    from arc_ref.frontends.proxy_options import add_proxy_flags, proxy_options

    def settings(*extra: str) -> ProxySettings:
        parser = argparse.ArgumentParser()
        add_proxy_flags(parser)
        arguments = parser.parse_args(["--upstream", "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{QWEN3}",
                                       *extra])
        return settings_from(proxy_options(arguments), _parse_setting)

    default = settings()
    assert (default.timeout_s, default.bodies_in_flight_bytes) == (600.0, 4 * default.max_body_bytes)
    given = settings("--upstream-timeout", "45", "--max-body-mb", "8", "--bodies-in-flight-mb", "100")
    assert (given.timeout_s, given.max_body_bytes, given.bodies_in_flight_bytes) == (45.0, 8 * 2**20, 100 * 2**20)
    assert settings("--max-body-mb", "8").bodies_in_flight_bytes == 32 * 2**20
    assert (default.running_lease_s, settings("--running-lease", "40").running_lease_s) == (15.0, 40.0)  # (h51 F4)
