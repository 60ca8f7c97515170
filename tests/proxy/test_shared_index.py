"""The shared index of --store (DIR/hashes.sqlite) is read and written in the request's worker-thread hand-offs,
never on the event loop: a busy index (another connection holding its write lock) stalls the requests that
write to it, in their threads, while the event loop serves everything else; and a continuing request of a stored
conversation makes no more hand-offs than before (issue 28: one per step of the request, not more)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import BASH_TOOL, BUDGETS, QWEN3, bash_call_reply, count_hand_offs, needs_qwen3

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import Proxy, ProxySettings, Reply  # noqa: E402
from arc_ref.frontends.proxy_app import decode_body  # noqa: E402
from arc_ref.persist.hash_index import HASH_INDEX_FILE  # noqa: E402

pytestmark = needs_qwen3
# a continuing request of a stored conversation: the index asked, the store taken, the new messages applied, the
# reply applied (its mark written and the store released); before: the store taken, applied, applied, released
STORED_HOPS_PER_TURN = 4


def ask(proxy: Proxy, messages: list[dict[str, Any]]) -> Any:
    body = json.dumps({"model": "m", "messages": messages, "tools": [BASH_TOOL]}).encode()
    return proxy.complete(decode_body(body, proxy.known), None)


def next_history(messages: list[dict[str, Any]], reply: Reply) -> list[dict[str, Any]]:
    message = reply.completion["choices"][0]["message"]
    return [*messages, message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                 "content": "a.py\nb.py\n" * 20}]


def test_a_busy_index_stalls_only_the_requests_that_write_to_it(tmp_path: Path) -> None:
    """Another connection holds hashes.sqlite's write lock: a stored conversation's next request waits for it in
    its worker thread (and is answered once the lock goes), while a conversation of a proxy without a store on
    the same event loop is answered at once."""
    store = tmp_path / "store"

    async def scenario() -> tuple[float, bool, Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(bash_call_reply)) as client:
            stored = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=store), client)
            in_memory = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            try:
                task = [{"role": "system", "content": "S"}, {"role": "user", "content": "list the files"}]
                first = await ask(stored, task)
                locker = sqlite3.connect(store / HASH_INDEX_FILE, isolation_level=None, check_same_thread=False)
                locker.execute("BEGIN EXCLUSIVE")
                try:
                    started = time.monotonic()
                    waiting = asyncio.ensure_future(ask(stored, next_history(task, first)))
                    await asyncio.sleep(0.5)  # it reaches the index write, and waits there
                    await asyncio.wait_for(ask(in_memory, [{"role": "user", "content": "another task"}]), 25)
                    took = time.monotonic() - started
                    stalled = not waiting.done()
                finally:
                    locker.execute("ROLLBACK")
                    locker.close()
                return took, stalled, (await asyncio.gather(waiting, return_exceptions=True))[0]
            finally:
                await stored.close()
                await in_memory.close()

    took, stalled, answered = asyncio.run(scenario())
    assert took < 10, took  # not the index's 30 s busy timeout
    assert stalled, answered  # the stored request was still waiting for the index when the other was answered
    assert isinstance(answered, Reply) and answered.completion["choices"][0]["message"]["tool_calls"], answered
    # answered once the lock went


def test_a_continuing_stored_request_makes_no_more_hand_offs_than_before(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    hops = count_hand_offs(monkeypatch)

    async def scenario() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(bash_call_reply)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                        store=tmp_path / "store"), client)
            try:
                messages: list[dict[str, Any]] = [{"role": "system", "content": "S"},
                                                  {"role": "user", "content": "list the files"}]
                per_turn = []
                keys = set()
                for _ in range(5):
                    before = hops[0]
                    reply = await ask(proxy, messages)
                    per_turn.append(hops[0] - before)
                    keys.add(reply.conversation)
                    messages = next_history(messages, reply)
                assert len(keys) == 1  # resumed in place every turn
                return per_turn
            finally:
                await proxy.close()

    per_turn = asyncio.run(scenario())
    assert all(count <= STORED_HOPS_PER_TURN for count in per_turn[1:]), per_turn


def test_the_store_directory_its_index_and_conversations_are_owner_only(tmp_path: Path) -> None:
    """Under the usual umask 022, everything a proxy creates in --store DIR is its owner's alone: DIR, each
    conversation's directory, and the shared index with its WAL files (their rows hold the conversations' keys, the
    value of X-Arc-Conversation), as every file of a conversation already was (review h54 F8: hashes.sqlite and its
    -wal and -shm were 0644, the directories 0755)."""
    import os
    import stat

    store = tmp_path / "store"

    async def scenario() -> dict[str, str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(bash_call_reply)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=store), client)
            try:
                task = [{"role": "system", "content": "S"}, {"role": "user", "content": "list the files"}]
                await ask(proxy, next_history(task, await ask(proxy, task)))
                made = [store, *store.rglob("*")]  # while it runs: the index's WAL files are there
                assert {path.name for path in made} >= {HASH_INDEX_FILE, HASH_INDEX_FILE + "-wal", "task.arc"}
                return {str(path.relative_to(tmp_path)): oct(stat.S_IMODE(path.stat().st_mode)) for path in made}
            finally:
                await proxy.close()

    before = os.umask(0o022)
    try:
        modes = asyncio.run(scenario())
    finally:
        os.umask(before)
    assert all(mode in ("0o600", "0o700") for mode in modes.values()), modes
