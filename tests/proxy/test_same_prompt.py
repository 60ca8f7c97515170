"""Agents that start alike (best-of-n, pass@k: one system prompt, tools and task) never wait for each other: the
second's first request forks the first's conversation at their shared prefix while the first's upstream call is
still out, in one process and across two processes on one --store; each agent's upstream prompts are those of a
run of it alone, its later requests resume the conversation that holds its own messages, and with --store a
restart loses and mixes nothing."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import BASH_TOOL, BUDGETS, QWEN3, needs_qwen3

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import Proxy, ProxySettings, Reply  # noqa: E402
from arc_ref.frontends.proxy_app import decode_body  # noqa: E402

pytestmark = needs_qwen3
AGENT: contextvars.ContextVar[str] = contextvars.ContextVar("agent", default="")
SYSTEM = "You run one bash command per turn."
TASK = "List the files, then say what they hold."
TURNS = 3
loop: asyncio.AbstractEventLoop  # the running scenario's (the eviction test calls into it from a thread)
B_WITHIN_S = 30  # B's first request is answered within this, while A's upstream call is held


class Upstream:
    """A deterministic fake upstream (its reply is a function of the view it is shown: one bash call whose id is a
    digest of the view) that records each view under the agent that caused it, and holds its call number
    ``hold_call`` (the first when ``hold_first``) until ``release`` is set."""

    def __init__(self, hold_first: bool, hold_call: int = 1) -> None:
        self.views: dict[str, list[str]] = {}
        self.release = asyncio.Event()
        self.first_arrived = asyncio.Event()  # the held call arrived
        if not hold_first:
            self.release.set()
        self.hold_call = hold_call
        self.calls = 0

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        shown = json.dumps({"messages": body["messages"], "tools": body["tools"]}, sort_keys=True)
        digest = hashlib.sha256(shown.encode()).hexdigest()
        self.views.setdefault(AGENT.get(), []).append(digest)
        self.calls += 1
        if self.calls == self.hold_call:
            self.first_arrived.set()
            await self.release.wait()
        number = len(body["messages"])
        message = {"role": "assistant", "content": f"step {number}", "tool_calls": [
            {"id": f"call_{digest[:12]}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": f"ls {number}"})}}]}
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


class Agent:
    """An agent that resends its whole history every turn; its tool outputs name it (A's and B's differ)."""

    def __init__(self, name: str, says: str | None = None) -> None:
        self.name = name
        self.says = says or name  # what its tool outputs say (two agents saying the same stay identical)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                               {"role": "user", "content": TASK}]
        self.keys: list[str] = []
        self.replies: list[tuple[str, int]] = []  # (the reply's text and calls, the view's count)

    async def ask(self, proxy: Proxy) -> Reply:
        AGENT.set(self.name)
        body = json.dumps({"model": "m", "messages": self.messages, "tools": [BASH_TOOL]}).encode()
        reply = await proxy.complete(decode_body(body, proxy.known), None)
        message = reply.completion["choices"][0]["message"]
        self.keys.append(reply.conversation)
        self.replies.append((json.dumps(message, sort_keys=True), reply.view_tokens))
        call = message["tool_calls"][0]
        self.messages += [message, {"role": "tool", "tool_call_id": call["id"],
                                    "content": f"{self.says}: file_{len(self.messages)}.py\n" * 60}]
        return reply


def make_proxy(client: httpx.AsyncClient, store: Path | None) -> Proxy:
    """A proxy (with ``store``: as one process on it) that would wait for a held store far longer than B may take."""
    return Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=store,
                               lock_wait_s=4 * B_WITHIN_S), client)


def one_conversation_proxy(client: httpx.AsyncClient) -> Proxy:
    """A proxy in memory that keeps one conversation at most (--max-conversations 1): every other is evicted as
    soon as nothing holds it."""
    return Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, max_conversations=1), client)


async def alone(name: str, says: str | None = None) -> tuple[list[str], list[tuple[str, int]]]:
    """The upstream views and replies of agent ``name`` run alone (in memory, nothing held)."""
    upstream = Upstream(hold_first=False)
    agent = Agent(name, says)
    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
        proxy = make_proxy(client, None)
        try:
            for _ in range(TURNS):
                await agent.ask(proxy)
        finally:
            await proxy.close()
    return upstream.views[name], agent.replies


async def together(store: Path | None, processes: int, restart: bool) -> tuple[Upstream, Agent, Agent]:
    """A's first request held at the upstream while B's (the same history) must be answered; then each goes on,
    turn by turn (A's requests to the first proxy, B's to the last: with ``processes`` 2, two proxies on one
    --store, as two processes are: a store one holds is locked for the other); with ``restart`` the proxies are
    closed and made again on the store before the last turn."""
    upstream = Upstream(hold_first=True)
    a, b = Agent("A"), Agent("B")
    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
        proxies = [make_proxy(client, store) for _ in range(processes)]
        try:
            first = asyncio.ensure_future(a.ask(proxies[0]))
            await asyncio.wait_for(upstream.first_arrived.wait(), 60)
            await asyncio.wait_for(b.ask(proxies[-1]), B_WITHIN_S)  # B answered while A's upstream call is held
            assert not first.done(), "A's upstream call is still held: B did not wait for it"
            upstream.release.set()
            await first
            for turn in range(1, TURNS):
                if restart and turn == TURNS - 1:
                    for proxy in proxies:
                        await proxy.close()
                    proxies = [make_proxy(client, store) for _ in range(processes)]
                await a.ask(proxies[0])
                await b.ask(proxies[-1])
        finally:
            for proxy in proxies:
                await proxy.close()
    return upstream, a, b


@pytest.mark.parametrize("where", ["memory", "store", "store-restarted", "two-processes"])
def test_agents_that_start_alike_fork_at_once_and_each_sees_its_lone_run(where: str, tmp_path: Path) -> None:
    store = None if where == "memory" else tmp_path / "store"
    upstream, a, b = asyncio.run(together(store, 2 if where == "two-processes" else 1, where == "store-restarted"))
    views_a, replies_a = asyncio.run(alone("A"))
    views_b, replies_b = asyncio.run(alone("B"))
    assert upstream.views["A"] == views_a and upstream.views["B"] == views_b  # the upstream prompts of lone runs
    assert a.replies == replies_a and b.replies == replies_b  # the replies (ids, calls) and counts of lone runs
    assert a.keys[0] != b.keys[0]  # B did not wait to fork A's conversation: it went on on its own at once
    # once their messages differ each resumes the conversation that holds its own (one each, never the other's)
    assert len(set(a.keys[1:])) == 1 and len(set(b.keys[1:])) == 1 and a.keys[-1] != b.keys[-1]
    if store is not None:
        directories = {path.name for path in store.iterdir() if path.is_dir()}
        assert set(a.keys) | set(b.keys) <= directories


def test_a_burst_of_forks_copies_one_at_a_time_on_the_fork_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five copies of A's history while A's upstream call is held: each forks at once, but the copies run one at
    a time on the proxy's fork threads, never on the worker threads every other client's requests need (before,
    a burst of them took the whole pool: an unrelated client waited seconds)."""
    from arc_ref.frontends.proxy import Conversations

    running, most, threads = [0], [0], set()
    fork_unheld = Conversations.fork_unheld

    def watched(self: Conversations, key: str, hashes: Any) -> Any:
        running[0] += 1
        most[0] = max(most[0], running[0])
        threads.add(threading.current_thread().name)
        try:
            time.sleep(0.1)  # a long history's copy
            return fork_unheld(self, key, hashes)
        finally:
            running[0] -= 1

    monkeypatch.setattr(Conversations, "fork_unheld", watched)

    async def scenario() -> list[str]:
        upstream = Upstream(hold_first=True)
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            proxy = make_proxy(client, None)
            try:
                first = asyncio.ensure_future(Agent("A").ask(proxy))
                await asyncio.wait_for(upstream.first_arrived.wait(), 60)
                copies = [Agent(f"B{number}") for number in range(5)]
                await asyncio.wait_for(asyncio.gather(*(copy.ask(proxy) for copy in copies)), B_WITHIN_S)
                assert not first.done()
                upstream.release.set()
                await first
                return [copy.keys[0] for copy in copies]
            finally:
                await proxy.close()

    keys = asyncio.run(scenario())
    assert len(set(keys)) == 5  # each its own fork
    assert most[0] == 1 and all(name.startswith("arc-proxy-fork") for name in threads), (most, threads)


class HeldAgents(Upstream):
    """`Upstream` holding every call of the agents ``names`` until ``gate`` is set (``arrived`` tells they came)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__(hold_first=False)
        self.gate = asyncio.Event()
        self.arrived = {name: asyncio.Event() for name in names}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        name = AGENT.get()
        if name in self.arrived:
            self.arrived[name].set()
            await self.gate.wait()
        return await super().handle(request)


def test_a_burst_of_forks_of_one_history_never_delays_the_fork_of_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five copies of A's history fork A's held conversation (each copy slow), then one copy of C's (another task)
    forks C's: C's copy does not wait behind A's burst (the forks of one conversation one at a time, beside those
    of another; before, every fork of every client waited in one queue: C's copy came last, after A's five)."""
    from arc_ref.frontends.proxy import Conversations

    done: list[str] = []  # the parent conversation of each copy, in the order the copies finished
    fork_unheld = Conversations.fork_unheld

    def slow(self: Conversations, key: str, hashes: Any) -> Any:
        time.sleep(0.2)  # a long history's copy
        made = fork_unheld(self, key, hashes)
        done.append(key)
        return made

    monkeypatch.setattr(Conversations, "fork_unheld", slow)

    def of_c(name: str) -> Agent:
        agent = Agent(name)
        agent.messages[1] = {"role": "user", "content": TASK + " Then count them."}
        return agent

    async def scenario() -> tuple[str, str]:
        upstream = HeldAgents(("A", "C"))
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            proxy = make_proxy(client, None)
            try:
                a, c = Agent("A"), of_c("C")
                firsts = [asyncio.ensure_future(a.ask(proxy)), asyncio.ensure_future(c.ask(proxy))]
                await asyncio.wait_for(asyncio.gather(*(event.wait() for event in upstream.arrived.values())), 60)
                burst = [asyncio.ensure_future(Agent(f"B{number}").ask(proxy)) for number in range(5)]
                while not done:  # A's first copy is being made: the other four wait for it
                    await asyncio.sleep(0.01)
                await asyncio.wait_for(of_c("D").ask(proxy), B_WITHIN_S)
                await asyncio.wait_for(asyncio.gather(*burst), B_WITHIN_S)
                upstream.gate.set()
                await asyncio.gather(*firsts)
                return a.keys[0], c.keys[0]
            finally:
                await proxy.close()

    a_key, c_key = asyncio.run(scenario())
    assert done.count(a_key) == 5 and done.count(c_key) == 1
    assert done.index(c_key) <= 2, done  # after at most the copies of A under way when it came


def test_a_fresh_fork_is_not_evicted_before_its_request_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """In memory with --max-conversations 1: another request ending (evict) right after a fork was made, before its
    request holds it, leaves the fork alone (before: it was evicted and the request failed with
    ConversationGone, an HTTP 500)."""
    from arc_ref.frontends.proxy import Conversations

    fork_unheld = Conversations.fork_unheld

    def then_evicted(self: Conversations, key: str, hashes: Any) -> Any:
        made = fork_unheld(self, key, hashes)
        loop.call_soon_threadsafe(self.evict)  # "another request ended now"
        return made

    monkeypatch.setattr(Conversations, "fork_unheld", then_evicted)

    async def scenario() -> tuple[Agent, Agent]:
        global loop
        loop = asyncio.get_running_loop()
        upstream = Upstream(hold_first=True)
        a, b = Agent("A"), Agent("B")
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            proxy = one_conversation_proxy(client)
            try:
                first = asyncio.ensure_future(a.ask(proxy))
                await asyncio.wait_for(upstream.first_arrived.wait(), 60)
                await asyncio.wait_for(b.ask(proxy), B_WITHIN_S)
                upstream.release.set()
                await first
            finally:
                await proxy.close()
        return a, b

    a, b = asyncio.run(scenario())
    assert a.keys[0] != b.keys[0] and b.replies == asyncio.run(alone("B"))[1][:1]


def test_a_fork_is_counted_held_before_eviction_can_see_it() -> None:
    """In memory with --max-conversations 1: an eviction run the moment a fork enters the conversations (here:
    from the dict's own insertion) leaves it alone, since it is counted as held before it is inserted (before, the
    count came just after: a few bytecodes in which another request's eviction dropped it, an HTTP 500)."""
    from arc_ref.frontends.proxy import Conversations

    class EvictingAtInsertion(dict[str, Any]):
        conversations: Conversations

        def __setitem__(self, key: str, value: Any) -> None:
            super().__setitem__(key, value)
            self.conversations.evict()  # "another request ended now", on the loop, in the worst place

    async def scenario() -> tuple[Agent, Agent]:
        upstream = Upstream(hold_first=False)
        a, b = Agent("A"), Agent("B")
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            proxy = one_conversation_proxy(client)
            try:
                await a.ask(proxy)  # A's conversation moved on past the shared prefix
                evicting = EvictingAtInsertion(proxy.conversations.by_key)
                evicting.conversations = proxy.conversations
                proxy.conversations.by_key = evicting
                await asyncio.wait_for(b.ask(proxy), B_WITHIN_S)  # B's history forks A's at the prefix
            finally:
                await proxy.close()
        return a, b

    a, b = asyncio.run(scenario())
    assert a.keys[0] != b.keys[0] and b.replies == asyncio.run(alone("B"))[1][:1]


def test_with_postgresql_agents_that_start_as_an_earlier_run_did_fork_at_once(pg_url: str) -> None:
    """With a PostgreSQL --store: an earlier run (E) left the conversation of this system prompt and task; B's first
    request forks it and holds its head row's lock for its whole request (its upstream call held); C's (the same
    history) does not wait for that lock: it forks at the same mark as committed. Each one's upstream views and
    replies are those of a run of it alone."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
    from arc_ref.frontends.proxy_shared import SharedProxy

    async def scenario() -> tuple[Upstream, Agent, Agent]:
        upstream = Upstream(hold_first=True, hold_call=TURNS + 1)
        earlier, b, c = Agent("E"), Agent("B"), Agent("C")
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            settings = ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, database=pg_url)
            proxies = [SharedProxy(settings, client) for _ in range(2)]
            try:
                for _ in range(TURNS):
                    await earlier.ask(proxies[0])
                first = asyncio.ensure_future(b.ask(proxies[0]))
                await asyncio.wait_for(upstream.first_arrived.wait(), 60)
                await asyncio.wait_for(c.ask(proxies[1]), B_WITHIN_S)  # while B holds the conversation's head
                assert not first.done(), "B's upstream call is still held: C did not wait for it"
                upstream.release.set()
                await first
                for _ in range(1, TURNS):
                    await b.ask(proxies[0])
                    await c.ask(proxies[1])
            finally:
                for proxy in proxies:
                    await proxy.close()
        return upstream, b, c

    upstream, b, c = asyncio.run(scenario())
    views_b, replies_b = asyncio.run(alone("B"))
    views_c, replies_c = asyncio.run(alone("C"))
    assert upstream.views["B"] == views_b and upstream.views["C"] == views_c
    assert b.replies == replies_b and c.replies == replies_c
    assert b.keys[0] != c.keys[0]
    assert len(set(b.keys[1:])) == 1 and len(set(c.keys[1:])) == 1 and b.keys[-1] != c.keys[-1]


@pytest.mark.parametrize("where", ["memory", "store"])
def test_agents_whose_histories_stay_identical_each_go_on_in_a_conversation_of_its_own(where: str,
                                                                                     tmp_path: Path) -> None:
    """Two agents with identical replies and tool outputs (greedy decoding, deterministic tools), turn by turn: a
    request whose deepest message the other agent's conversation already moved past resumes its own, still at its
    last reply, and applies its new tool output there (no hidden round lies before a tool output), instead of
    copying the other's (before: a fork every turn, 1 + TURNS conversations for two agents). Views as alone."""
    store = None if where == "memory" else tmp_path / "store"

    async def scenario() -> tuple[Upstream, Agent, Agent, int]:
        upstream = Upstream(hold_first=False)
        a, b = Agent("A", "X"), Agent("B", "X")
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream.handle)) as client:
            proxy = make_proxy(client, store)
            try:
                for _ in range(TURNS):
                    await a.ask(proxy)
                    await b.ask(proxy)
                return upstream, a, b, len(proxy.conversations.by_key)
            finally:
                await proxy.close()

    upstream, a, b, in_memory = asyncio.run(scenario())
    views, replies = asyncio.run(alone("A", "X"))
    assert upstream.views["A"] == views and upstream.views["B"] == views
    assert a.replies == replies and b.replies == replies
    conversations = in_memory if store is None else sum(1 for path in store.iterdir() if path.is_dir())
    assert conversations == 2 and len(set(a.keys[1:])) == 1 and len(set(b.keys[1:])) == 1, (a.keys, b.keys)
