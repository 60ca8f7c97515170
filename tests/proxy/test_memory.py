"""Memory bounded by a stated limit (issue 25 item 3): at most --max-conversations conversations in memory, the
least recently used leaving first; with --store one comes back from its store on its next request, its upstream
views unchanged; without one its agent's next request (the whole history) builds it again."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
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
    return second_turns(base_url, first, same_key), view_digests(base_url)


def second_turns(base_url: str, first: dict[int, httpx.Response], same_key: bool) -> list[str]:
    """Each conversation's second request (its first reply and a tool output), in order: their conversation keys;
    with ``same_key`` each is asserted to be the first's (resumed in place; without a store an evicted
    conversation is built again: a new key)."""
    keys = []
    for number, answered in first.items():
        history = [*task(number), answered.json()["choices"][0]["message"],
                   {"role": "tool", "tool_call_id": "c1", "content": f"output {number}\n" * 50}]
        second = post(base_url, history, tools=[BASH_TOOL])
        assert second.status_code == 200, second.text
        if same_key:
            assert second.headers["x-arc-conversation"] == answered.headers["x-arc-conversation"]
        keys.append(second.headers["x-arc-conversation"])
    return keys


def view_digests(base_url: str) -> list[str]:
    """The digest of every upstream view the proxy sent, in order (GET /arc/rounds)."""
    return [record["view_digest"]
            for record in httpx.get(base_url.removesuffix("/v1") + "/arc/rounds", timeout=30).json()]


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


def test_a_restart_opens_no_conversation_and_each_request_opens_only_its_own(tmp_path: Path) -> None:
    """Stores opened lazily (issue 25 item 3): a restart reads the shared index (no store opened, none in memory,
    no store file held open); a request opens its own conversation's store, and releases it after. Before: the
    restart opened every stored conversation (and kept up to --max-conversations of them open)."""
    store = tmp_path / "store"
    with fake_upstream() as upstream:
        with proxy(upstream, store=store) as (base_url, _):
            first = {number: post(base_url, task(number)) for number in (1, 2, 3)}
        with proxy(upstream, store=store, max_conversations=2) as (base_url, held):
            at_start = (len(held.conversations.by_key), held.conversations.opened, open_stores(store))
            again = {number: post(base_url, [*task(number), first[number].json()["choices"][0]["message"],
                                             {"role": "user", "content": "go on"}]) for number in (1, 2, 3)}
            after = (len(held.conversations.by_key), held.conversations.opened, open_stores(store))
    assert at_start == (0, 0, 0)
    assert after == (2, 3, 0)  # each opened once, two kept in memory, no store left open (nor locked)
    for number in (1, 2, 3):  # each resumed in its own stored conversation
        assert again[number].headers["x-arc-conversation"] == first[number].headers["x-arc-conversation"]


def open_stores(store: Path) -> int:
    """This process's open descriptors on a conversation's store (DIR/KEY/task.arc) under ``store``."""
    count = 0
    for descriptor in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{descriptor}")
            count += target.startswith(str(store.resolve())) and target.endswith("task.arc")
    return count


@pytest.mark.parametrize("stored", [True, False], ids=["store", "memory"])
def test_an_idle_conversation_leaves_memory_and_comes_back_unchanged(stored: bool, tmp_path: Path) -> None:
    """--idle-seconds (issue 25 item 3): a conversation without a request for that long leaves memory, also when
    no request comes (the sweep); with --store its next request reads it from its store (the same conversation,
    the same upstream views as one never evicted); without one its agent's next request builds it again."""
    numbers = (1, 2)
    with fake_upstream() as upstream:
        upstream.reply = lambda body: call_reply()
        with proxy(upstream, store=tmp_path / "kept" if stored else None) as (base_url, _):
            _, expected = three_turns(base_url, numbers)
        with proxy(upstream, store=tmp_path / "idle" if stored else None, idle_seconds=1) as (base_url, held):
            first = {number: post(base_url, task(number), tools=[BASH_TOOL]) for number in numbers}
            deadline = time.monotonic() + 30
            while held.conversations.by_key and time.monotonic() < deadline:
                time.sleep(0.1)
            emptied = (len(held.conversations.by_key), held.conversations.evicted)
            second_turns(base_url, first, same_key=stored)
            views = view_digests(base_url)
    assert emptied == (0, 2)  # both left memory while no request came
    assert views == expected


@contextlib.contextmanager
def held_by_another_process(store: Path) -> Iterator[None]:
    """The conversation store ``store`` held for writing by another process (as a proxy inside a request holds it)
    until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom arc_ref.persist import DurableStore\n"
         "store = DurableStore.open(sys.argv[1])\nprint('held', flush=True)\nsys.stdin.readline()\n",
         str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.communicate("done\n", timeout=30)


def first_then_go_on(base_url: str) -> tuple[str, list[dict[str, Any]]]:
    """Task 1's first request: its conversation, and the history of its next request (the reply, "go on")."""
    first = post(base_url, task(1))
    return first.headers["x-arc-conversation"], [*task(1), first.json()["choices"][0]["message"],
                                                 {"role": "user", "content": "go on"}]


def test_a_conversation_another_process_holds_is_forked_at_once_with_the_view_it_would_give(tmp_path: Path) -> None:
    """Locked only while a request holds it, and never waited for: a request for a conversation whose store
    another process holds is answered at once on a fork at its deepest mark (its marks and rows up to it read
    without the lock), with the upstream view the conversation gives when nobody holds it."""
    store = tmp_path / "store"
    with fake_upstream() as upstream:
        with proxy(upstream, store=store, lock_wait_s=60) as (base_url, _):
            key, history = first_then_go_on(base_url)
            with held_by_another_process(store / key / "task.arc"):
                started = time.monotonic()
                forked = post(base_url, history)
                took = time.monotonic() - started
            held_view = upstream.requests[-1]["messages"]
            again = post(base_url, history)  # nobody holds anything now
    assert forked.status_code == 200 and forked.headers["x-arc-conversation"] != key, forked.text
    assert took < 30  # not the 60 s lock_wait_s: the fork did not wait
    assert again.status_code == 200 and upstream.requests[-1]["messages"] == held_view


def test_a_held_conversation_without_a_mark_to_fork_at_is_waited_for_then_503_store_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the held conversation gives no mark to fork at without its lock (here: none read, as when its marks do
    not match its rows), the request waits for it up to lock_wait_s, then is answered 503 store_busy with
    retry-after, nothing changed; once that process lets go, the same request is answered in the same
    conversation."""
    from arc_ref.frontends.proxy import Conversations

    monkeypatch.setattr(Conversations, "fork_unheld", lambda self, key, hashes: None)
    store = tmp_path / "store"
    with fake_upstream() as upstream:
        with proxy(upstream, store=store, lock_wait_s=0.5) as (base_url, _):
            key, history = first_then_go_on(base_url)
            with held_by_another_process(store / key / "task.arc"):
                busy = post(base_url, history)
            answered = post(base_url, history)
    assert busy.status_code == 503 and busy.json()["error"]["type"] == "store_busy", busy.text
    assert busy.headers["retry-after"] == "1"
    assert answered.status_code == 200 and answered.headers["x-arc-conversation"] == key


def test_the_same_new_history_at_once_leaves_no_store_behind(tmp_path: Path) -> None:
    """A new conversation's store is made outside the lock every new conversation takes; when the same history
    arrived meanwhile, the one made for nothing is removed: every conversation directory is one a reply named."""
    import concurrent.futures

    store = tmp_path / "store"
    with fake_upstream() as upstream, proxy(upstream, store=store) as (base_url, held):
        upstream.delay_s = 0.2
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: post(base_url, task(1)), range(6)))
        in_memory = set(held.conversations.by_key)
    keys = {answer.headers["x-arc-conversation"] for answer in answers}
    assert all(answer.status_code == 200 for answer in answers)
    assert {path.name for path in store.iterdir() if path.is_dir()} == keys == in_memory


def test_what_a_worker_thread_opened_for_a_cancelled_request_is_closed() -> None:
    """A request cancelled while a worker thread opens its store (its client gone, the server stopping): the
    thread finishes, and what it opened is closed then (before, the store stayed open and locked)."""
    import asyncio
    import threading

    from arc_ref.frontends.proxy import in_thread_undone_if_cancelled

    opened, closed = threading.Event(), []

    def open_slowly() -> str:
        opened.wait(5)
        return "store"

    async def scenario() -> None:
        request = asyncio.ensure_future(in_thread_undone_if_cancelled(open_slowly, closed.append))
        await asyncio.sleep(0.05)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
        assert closed == []  # the thread is still opening it
        opened.set()
        for _ in range(100):
            if closed:
                break
            await asyncio.sleep(0.02)

    asyncio.run(scenario())
    assert closed == ["store"]
