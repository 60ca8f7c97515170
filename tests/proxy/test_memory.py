"""Memory bounded by a stated limit (issue 25 item 3): at most --max-conversations conversations in memory, the
least recently used leaving first; with --store one comes back from its store on its next request, its upstream
views unchanged; without one its agent's next request (the whole history) builds it again."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from benchmarks.proxy_cases import FakeUpstream, fake_upstream, task  # noqa: E402
from tests.proxy.test_hostile import call_reply, post  # noqa: E402

pytestmark = needs_qwen3


@contextlib.contextmanager
def proxy(upstream: FakeUpstream, **settings: Any) -> Iterator[tuple[str, Any]]:
    app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                  **settings))
    with serve_app(app) as base_url:
        yield base_url, app.state.proxy


def three_turns(base_url: str, numbers: tuple[int, ...], same_key: bool = True) -> tuple[list[str], list[str]]:
    """Each conversation's first request, then the others', then each one's second: the conversation keys of
    the second requests and the digests of every upstream view, in order."""
    first = {number: post(base_url, task(number), tools=[BASH_TOOL]) for number in numbers}
    keys = []
    for number in numbers:
        history = [*task(number), first[number].json()["choices"][0]["message"],
                   {"role": "tool", "tool_call_id": "c1", "content": f"output {number}\n" * 50}]
        second = post(base_url, history, tools=[BASH_TOOL])
        assert second.status_code == 200, second.text
        if same_key:  # resumed in place (without a store an evicted conversation is built again: a new key)
            assert second.headers["x-arc-conversation"] == first[number].headers["x-arc-conversation"]
        keys.append(second.headers["x-arc-conversation"])
    rounds = httpx.get(base_url.removesuffix("/v1") + "/arc/rounds", timeout=30).json()
    return keys, [record["view_digest"] for record in rounds]


@pytest.mark.parametrize("stored", [True, False], ids=["store", "memory"])
def test_conversations_leave_memory_past_the_limit_and_come_back_unchanged(stored: bool, tmp_path: Path) -> None:
    numbers = (1, 2, 3)
    with fake_upstream() as upstream:
        upstream.reply = lambda body: call_reply()
        with proxy(upstream, store=tmp_path / "unbounded" if stored else None) as (base_url, _):
            _, expected = three_turns(base_url, numbers)
        with proxy(upstream, store=tmp_path / "bounded" if stored else None, max_conversations=1) as (base_url,
                                                                                                        held):
            _, views = three_turns(base_url, numbers, same_key=stored)
            in_memory, evicted = len(held.conversations.by_key), held.conversations.evicted
    assert views == expected  # every upstream view the same as with every conversation kept
    assert in_memory == 1 and evicted >= 4


def test_a_restart_keeps_at_most_the_limit_in_memory_and_reopens_the_rest_on_demand(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with fake_upstream() as upstream:
        with proxy(upstream, store=store) as (base_url, _):
            first = {number: post(base_url, task(number)) for number in (1, 2, 3)}
        with proxy(upstream, store=store, max_conversations=1) as (base_url, held):
            in_memory = len(held.conversations.by_key)
            again = {number: post(base_url, [*task(number), first[number].json()["choices"][0]["message"],
                                             {"role": "user", "content": "go on"}]) for number in (1, 2, 3)}
    assert in_memory == 1
    for number in (1, 2, 3):  # each resumed in its own stored conversation
        assert again[number].headers["x-arc-conversation"] == first[number].headers["x-arc-conversation"]
