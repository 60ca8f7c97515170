"""One client never harms another (issue 25 item 3): the hostile cases of benchmarks/proxy_cases.py with
assertions, each against `arc-ref proxy` in a thread in front of a fake upstream whose replies the case sets."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_ref.persist import DurableStore, StoreError  # noqa: E402
from benchmarks.proxy_cases import FakeUpstream, completion, fake_upstream, task  # noqa: E402

pytestmark = needs_qwen3
WINDOW = 16384


@contextlib.contextmanager
def proxy(upstream: FakeUpstream, store: Path | None = None, **settings: Any) -> Iterator[str]:
    """`arc-ref proxy` with no --set (budgets from the window and each prefix) in front of ``upstream``."""
    configured = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", store=store,
                               context_limit=WINDOW, **settings)
    with serve_app(build_app(configured)) as base_url:
        yield base_url


def post(base_url: str, messages: list[dict[str, Any]], headers: dict[str, str] | None = None,
         **extra: Any) -> httpx.Response:
    return httpx.post(f"{base_url}/chat/completions", json={"model": "fake", "messages": messages, **extra},
                      headers=headers, timeout=120)


def call_reply(call_id: str = "c1") -> tuple[int, bytes]:
    calls = [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
    return 200, json.dumps(completion("", calls)).encode()


MALFORMED = {
    "list": b"[]",
    "string": b'"hello"',
    "choices_null": b'{"choices": [null]}',
    "usage_list": json.dumps({**completion(), "usage": [1]}).encode(),
    "empty_object": b"{}",
    "not_json": b"<html>",
    "deep": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_reply_that_is_not_a_completion_is_502_and_nothing_is_recorded(case: str) -> None:
    """Before: 500 AttributeError ([], a string, choices [null], usage a list), and 200 with finish_reason null
    for {} with an empty assistant turn recorded (the agent's retry then forked the conversation)."""
    with fake_upstream() as upstream, proxy(upstream) as base_url:
        upstream.reply = lambda body: call_reply()
        first = post(base_url, task(1), tools=[BASH_TOOL])
        assert first.status_code == 200, first.text
        history = [*task(1), first.json()["choices"][0]["message"],
                   {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]
        upstream.reply = lambda body: (200, MALFORMED[case])
        failed = post(base_url, history, tools=[BASH_TOOL])
        assert failed.status_code == 502, failed.text
        assert failed.json()["error"]["type"] == "upstream_malformed"
        upstream.reply = lambda body: (200, json.dumps(completion("done")).encode())
        retry = post(base_url, history, tools=[BASH_TOOL])
    assert retry.status_code == 200 and retry.json()["choices"][0]["message"]["content"] == "done"
    # resumed in place: nothing of the failed round was recorded (a recorded turn makes the retry fork)
    assert retry.headers["x-arc-conversation"] == first.headers["x-arc-conversation"]


@pytest.mark.parametrize("extra, named", [
    ({"n": 3}, "n=3"),
    ({"tool_choice": {"type": "function", "function": {"name": "_recall"}}}, "'_recall'"),
    ({"max_tokens": True}, "max_tokens must be a positive integer"),
    ({"max_completion_tokens": 0}, "max_completion_tokens must be a positive integer"),
    ({"stream": "yes"}, "stream must be true or false"),
])
def test_options_the_proxy_cannot_pass_on_are_refused_before_the_upstream_is_asked(extra: dict[str, Any],
                                                                                    named: str) -> None:
    """Before: n=3 forwarded (3 generated, 1 returned), tool_choice _recall made 9 upstream calls and returned
    null content, max_tokens true forwarded as is."""
    with fake_upstream() as upstream, proxy(upstream) as base_url:
        response = post(base_url, task(1), **extra)
    assert response.status_code == 400 and named in response.json()["error"]["message"], response.text
    assert upstream.requests == []


def test_a_stream_cut_after_a_keepalive_ends_with_an_error_event_and_done() -> None:
    """Before: ': keepalive', one data line, and no [DONE]."""
    with fake_upstream() as upstream, proxy(upstream, keepalive_s=0.2) as base_url:
        upstream.delay_s = 0.6
        upstream.reply = lambda body: "cut"
        with httpx.stream("POST", f"{base_url}/chat/completions", timeout=60,
                          json={"model": "fake", "messages": task(1), "stream": True}) as response:
            assert response.status_code == 200
            lines = [line for line in response.iter_lines() if line]
    assert lines[0] == ": keepalive"
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]" and len(data) == 2, lines
    assert json.loads(data[0])["error"]["type"] == "upstream_unreachable"


def test_models_with_the_upstream_down_is_502_typed() -> None:
    with fake_upstream() as upstream:
        url = upstream.url
    configured = ProxySettings(upstream=url, tokenizer=f"hf-dir:{QWEN3}", context_limit=WINDOW)
    with serve_app(build_app(configured)) as base_url:
        models = httpx.get(f"{base_url}/models", timeout=60)
        chat = post(base_url, task(1))
    assert models.status_code == 502 and models.json()["error"]["type"] == "upstream_unreachable"
    assert chat.status_code == 502 and chat.json()["error"]["type"] == "upstream_unreachable"


def test_a_body_over_the_limit_is_413_and_others_are_served() -> None:
    """Before: no limit (a 100 MB body took 390 s, RSS 168 -> 912 MiB)."""
    with fake_upstream() as upstream, proxy(upstream, max_body_bytes=2**20) as base_url:
        big = post(base_url, [{"role": "user", "content": "x" * (2 * 2**20)}])
        small = post(base_url, task(2))
    assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
    assert small.status_code == 200


def test_the_upstream_key_or_the_clients_authorization_goes_upstream() -> None:
    """Before: the client's Authorization was dropped (401 from an upstream that needs a key)."""
    with fake_upstream(require_key="sk-up") as upstream:
        with proxy(upstream) as base_url:
            forwarded = post(base_url, task(1), headers={"Authorization": "Bearer sk-up"})
            models = httpx.get(f"{base_url}/models", headers={"Authorization": "Bearer sk-up"}, timeout=60)
            missing = post(base_url, task(2))
        with proxy(upstream, upstream_api_key="sk-up") as base_url:
            own = post(base_url, task(3), headers={"Authorization": "Bearer client-key"})
    assert forwarded.status_code == 200 and models.status_code == 200, forwarded.text
    assert missing.status_code == 401  # the upstream's own answer, unchanged
    sent = {name.lower(): value for name, value in upstream.headers[-1].items()}
    assert own.status_code == 200 and sent["authorization"] == "Bearer sk-up"


def test_a_store_that_fails_to_write_is_503_retryable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Before: a full disk reached the client as 400 'refused, do not retry'."""
    with fake_upstream() as upstream, proxy(upstream, store=tmp_path / "store") as base_url:
        upstream.reply = lambda body: call_reply()
        first = post(base_url, task(1), tools=[BASH_TOOL])
        history = [*task(1), first.json()["choices"][0]["message"],
                   {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]

        def full(self: DurableStore, *args: Any, **kwargs: Any) -> Any:
            raise StoreError("No space left on device")

        with monkeypatch.context() as patched:
            patched.setattr(DurableStore, "append", full)
            failed = post(base_url, history, tools=[BASH_TOOL])
        upstream.reply = lambda body: (200, json.dumps(completion("done")).encode())
        retry = post(base_url, history, tools=[BASH_TOOL])
    assert failed.status_code == 503 and failed.headers["retry-after"] == "5", failed.text
    assert failed.json()["error"]["type"] == "store_unavailable"
    assert retry.status_code == 200 and retry.headers["x-arc-conversation"] == first.headers["x-arc-conversation"]


def damage_ack(folder: Path) -> None:
    ack = folder / "task.arc.ack"
    ack.write_bytes(ack.read_bytes()[: len(ack.read_bytes()) // 2 - 1])


def damage_marks(folder: Path) -> None:
    with open(folder / "marks.jsonl", "a", encoding="utf-8") as marks:
        marks.write("{}\n")


def damage_task(folder: Path) -> None:
    (folder / "task.arc").unlink()


def remove_folder(folder: Path) -> None:
    """How a conversation leaves a --store directory (README): its folder removed while no proxy runs."""
    shutil.rmtree(folder)


@pytest.mark.parametrize("damage", [damage_ack, damage_marks, damage_task, remove_folder], ids=lambda f: f.__name__)
def test_a_damaged_conversation_is_set_aside_and_every_other_is_served(damage: Any, tmp_path: Path,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    """Before: one damaged conversation (a truncated ack, a {} line in marks.jsonl, a folder without task.arc)
    and the proxy never started (exit 3, a traceback)."""
    store = tmp_path / "store"
    with fake_upstream() as upstream:
        with proxy(upstream, store=store) as base_url:
            answers = {number: post(base_url, task(number)) for number in (1, 2)}
        keys = {number: answer.headers["x-arc-conversation"] for number, answer in answers.items()}
        damage(store / keys[1])
        histories = {number: [*task(number), answers[number].json()["choices"][0]["message"],
                              {"role": "user", "content": "next"}] for number in (1, 2)}
        with proxy(upstream, store=store) as base_url:
            healthy = post(base_url, histories[2])
            damaged = post(base_url, histories[1])
    assert healthy.status_code == 200 and healthy.headers["x-arc-conversation"] == keys[2]
    assert damaged.status_code == 200 and damaged.headers["x-arc-conversation"] not in keys.values()
    assert f"conversation {keys[1]} set aside" in capfd.readouterr().err
    shutil.rmtree(store)


def test_a_task_of_megabytes_is_refused_before_it_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a 10 MB task was tokenized (30 s, other clients waited as long) and then refused. Now the floor
    of its tokens (its characters over the most one token covers) already passes the window: refused at once."""
    from arc_ref.frontends import proxy as proxy_module

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the task was counted")

    with fake_upstream() as upstream, proxy(upstream) as base_url:
        monkeypatch.setattr(proxy_module, "conversation_config", never)
        big = post(base_url, [{"role": "user", "content": "word " * (2 * 2**20)}])
        monkeypatch.undo()
        small = post(base_url, task(2))
    assert big.status_code == 400 and "at least" in big.json()["error"]["message"], big.text
    assert "more than the window L_ctx = 16384" in big.json()["error"]["message"]
    assert small.status_code == 200


def test_with_client_keys_each_key_has_its_own_conversations_and_rounds() -> None:
    """Before: anyone reaching the port read every conversation at GET /arc/rounds, and a client replaying
    another's history continued that conversation in place (the owner's moved to a fork)."""
    alice, bob = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    with fake_upstream() as upstream, proxy(upstream, client_keys=frozenset({"key-a", "key-b"}),
                                            upstream_api_key="sk-up") as base_url:
        rounds_url = base_url.removesuffix("/v1") + "/arc/rounds"
        refused = [post(base_url, task(1)), post(base_url, task(1), headers={"Authorization": "Bearer nope"}),
                   httpx.get(rounds_url, timeout=30), httpx.get(f"{base_url}/models", timeout=30)]
        first = post(base_url, task(1), headers=alice)
        history = [*task(1), first.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
        replayed = post(base_url, history, headers=bob)
        continued = post(base_url, history, headers=alice)
        seen = {name: httpx.get(rounds_url, headers=headers, timeout=30).json()
                for name, headers in (("alice", alice), ("bob", bob))}
        stats_url = base_url.removesuffix("/v1") + "/arc/stats"
        refused.append(httpx.get(stats_url, timeout=30))
        stats = httpx.get(stats_url, headers=bob, timeout=30)  # every client's activity: not for a client (h15 F5)
    assert stats.status_code == 403 and "--client-keys" in stats.json()["error"]["message"], stats.text
    assert [response.status_code for response in refused] == [401, 401, 401, 401, 401]
    assert refused[0].json()["error"]["type"] == "unauthorized" and len(upstream.requests) == 3
    assert all(response.headers.get("www-authenticate") == 'Bearer realm="arc-ref proxy"' for response in refused)
    ours = first.headers["x-arc-conversation"]
    assert replayed.headers["x-arc-conversation"] != ours  # bob's own conversation
    assert continued.headers["x-arc-conversation"] == ours  # alice's resumed in place, not forked
    assert {record["conversation"] for record in seen["alice"]} == {ours}
    assert {record["conversation"] for record in seen["bob"]} == {replayed.headers["x-arc-conversation"]}
    assert all("owner" not in record for record in seen["alice"])
    sent = {name.lower(): value for name, value in upstream.headers[-1].items()}
    assert sent["authorization"] == "Bearer sk-up"  # the upstream's key, never a client's


def test_min_tokens_above_the_proxy_s_cap_is_lowered_with_max_tokens() -> None:
    """Review h30 F10: max_tokens capped to the reserve while min_tokens stayed above it: vLLM's own 400
    'min_tokens must be less than or equal to max_tokens', for a request vLLM alone accepts."""
    seen: list[dict[str, Any]] = []

    def reply(body: Any) -> tuple[int, bytes]:
        seen.append(json.loads(body) if isinstance(body, (bytes, str)) else body)
        return 200, json.dumps(completion("done")).encode()

    with fake_upstream() as upstream, proxy(upstream) as base_url:
        upstream.reply = reply
        answered = post(base_url, task(1), max_tokens=100_000, min_tokens=90_000)
        small = post(base_url, task(2), max_tokens=100_000, min_tokens=5)
        unasked = post(base_url, task(3), min_tokens=90_000)
        inconsistent = post(base_url, task(4), max_tokens=10, min_tokens=3000)
    assert [response.status_code for response in (answered, small, unasked, inconsistent)] == [200] * 4
    capped, kept, capped_alone, as_sent = seen
    assert capped["max_tokens"] < 90_000 and capped["min_tokens"] == capped["max_tokens"], capped
    assert kept["min_tokens"] == 5
    assert capped_alone["min_tokens"] == capped_alone["max_tokens"] < 90_000, capped_alone
    # the client's own inconsistency is not rewritten: the upstream answers it (vLLM: 400), as without the proxy
    # (review h34 F7: it was lowered to 10 and answered 200)
    assert (as_sent["max_tokens"], as_sent["min_tokens"]) == (10, 3000), as_sent


def test_the_upstream_s_cached_tokens_reach_the_agent_and_the_rounds() -> None:
    """Review h30 F4: usage kept prompt_tokens, completion_tokens and total_tokens only, and /arc/rounds no cached
    count: what the server's prefix cache served was invisible through the proxy. Now its sum over the request's
    rounds is the reply's usage.prompt_tokens_details.cached_tokens (streamed too), and each round's is in
    /arc/rounds; an upstream that does not say adds nothing."""
    def cached(body: Any) -> tuple[int, bytes]:
        done = completion("done")
        done["usage"]["prompt_tokens_details"] = {"cached_tokens": 7}
        return 200, json.dumps(done).encode()

    with fake_upstream() as upstream, proxy(upstream) as base_url:
        upstream.reply = cached
        plain = post(base_url, task(1))
        streamed = httpx.post(f"{base_url}/chat/completions", timeout=120, json={
            "model": "fake", "messages": task(2), "stream": True, "stream_options": {"include_usage": True}})
        upstream.reply = lambda body: (200, json.dumps(completion("done")).encode())
        silent = post(base_url, task(3))
        rounds = httpx.get(base_url.removesuffix("/v1") + "/arc/rounds").json()
    assert plain.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 7}
    usage_lines = [json.loads(line[6:])["usage"] for line in streamed.text.splitlines()
                   if line.startswith("data: {") and json.loads(line[6:]).get("usage")]
    assert usage_lines and usage_lines[-1]["prompt_tokens_details"] == {"cached_tokens": 7}, streamed.text
    assert "prompt_tokens_details" not in silent.json()["usage"]
    assert [record["upstream_cached_tokens"] for record in rounds] == [7, 7, None]


def test_an_upstream_count_that_differs_from_the_proxy_s_is_said_once_and_counted(
        capfd: pytest.CaptureFixture[str]) -> None:
    """Review h30 F6: a --tokenizer whose template differs from the served one undercounted every call, and the
    proxy, which has both numbers, said nothing. Now the first difference is one warning line, and /arc/stats
    counts them (this fake upstream says 10 prompt tokens for every prompt)."""
    with fake_upstream() as upstream, proxy(upstream) as base_url:
        upstream.reply = lambda body: (200, json.dumps(completion("done")).encode())
        for number in (1, 2):
            assert post(base_url, task(number)).status_code == 200
        stats = httpx.get(base_url.removesuffix("/v1") + "/arc/stats").json()
    assert stats["counts_differing"] == 2
    said = capfd.readouterr().err
    assert said.count("the upstream counted 10 prompt tokens where the proxy counted") == 1, said


def test_the_upstream_s_errors_and_the_proxy_s_failures_are_logged_one_line_each(
        capfd: pytest.CaptureFixture[str]) -> None:
    """Review h30 F9: the log held the start line alone, with the upstream answering its context-length 400 or
    gone (502). Now each is one stderr line; the client's own refusals are not logged."""
    too_long = {"error": {"message": "This model's maximum context length is 2048 tokens.\nHowever, ...",
                          "type": "BadRequestError", "code": 400}}
    with fake_upstream() as upstream, proxy(upstream) as base_url:
        upstream.reply = lambda body: (400, json.dumps(too_long).encode())
        assert post(base_url, task(1)).status_code == 400
        upstream.reply = lambda body: (200, b"<html>")
        assert post(base_url, task(2)).status_code == 502
        assert post(base_url, [{"role": "user", "content": "x"}], n=3).status_code == 400  # refused: not logged
    said = capfd.readouterr().err
    # the line names the conversation whose call it answered (review h34 F8: an operator could not tell which)
    assert re.search(r"arc-ref proxy: the upstream answered 400 \(conversation \w+\): This model's maximum context"
                     r" length is 2048 tokens.\\nHowever", said), said
    assert "arc-ref proxy: 502 upstream_malformed: " in said
    assert said.count("arc-ref proxy:") == 2 + said.count("warning: the upstream counted"), said
