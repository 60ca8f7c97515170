"""Which stored conversation a request continues (review h63, a mutation sweep of that part of `arc-ref proxy`):
the retry of an answered request, the conversation's name from ``metadata.conversation_id``, over a mock upstream
(`Proxy` in this process) and over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import (BASH_TOOL, BUDGETS, QWEN3, needs_qwen3, serve_proxy, serve_upstream,
                                task_text)

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import Proxy, ProxySettings  # noqa: E402

pytestmark = needs_qwen3


def mock_upstream(seen: list[dict[str, Any]]) -> Any:
    """An httpx.MockTransport handler: each request's body noted in ``seen``, one bash call named by its number."""

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        number = len(seen)
        message = {"role": "assistant", "content": f"reply {number}", "tool_calls": [
            {"id": f"b{number}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
        return httpx.Response(200, json={"id": f"x{number}", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    return reply


def test_a_retry_of_a_request_whose_last_message_differs_is_asked_anew() -> None:
    """A client's retry is answered with the conversation's latest reply only when it repeats that reply's request:
    the same last message (its chain hash), not only the same history before it. A retry whose last message (a tool
    result here) differs from the answered request's is another request: a fork asked of the upstream (a mark
    before the last one, or the task's, would have handed it the reply to the other tool result)."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            first = await proxy.complete(body, None)
            reply = first.completion["choices"][0]["message"]
            history = [*body["messages"], reply]
            second = await proxy.complete(
                {**body, "messages": [*history, {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]}, None)
            assert second.conversation == first.conversation and len(seen) == 2
            edited = {**body, "messages": [*history, {"role": "tool", "tool_call_id": "b1", "content": "b.txt"}]}
            retried = await proxy.complete(edited, None, retry=True)
            assert len(seen) == 3  # asked of the upstream: not the reply to "a.txt"
            assert retried.completion != second.completion and retried.conversation != first.conversation
            assert seen[-1]["messages"][-1]["content"].endswith("b.txt")
            # the task alone, sent again as a retry after the conversation went on: also a fork asked anew
            again = await proxy.complete(json.loads(json.dumps(body)), None, retry=True)
            assert len(seen) == 4 and again.conversation not in (first.conversation, retried.conversation)

    asyncio.run(scenario())


def test_a_conversation_id_of_its_own_in_metadata_is_not_sent_upstream() -> None:
    """``metadata.conversation_id`` is the proxy's: the upstream gets the rest of the metadata, and no metadata at
    all when the name was all it held (never ``"metadata": null`` or ``{}``)."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            await proxy.complete({**body, "metadata": {"conversation_id": "n-1"}}, "n-1")
            assert "metadata" not in seen[-1]
            await proxy.complete({**body, "metadata": {"conversation_id": "n-2", "user": "u"}}, "n-2")
            assert seen[-1]["metadata"] == {"user": "u"}
            await proxy.complete({**body, "metadata": {"user": "v"}}, None)
            assert seen[-1]["metadata"] == {"user": "v"}

    asyncio.run(scenario())


def test_metadata_conversation_id_names_the_conversation_as_the_header_does_and_the_header_wins(
        tmp_path: Path) -> None:
    """Over HTTP: ``metadata.conversation_id`` names a conversation as ``X-Arc-Conversation`` does (a history
    named by the header goes on when the next request names it in its metadata); with both, the header's name is
    the conversation's; a conversation_id that is not a string names nothing."""
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url) as base_url:
        def ask(messages: list[dict[str, Any]], metadata: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None) -> httpx.Response:
            body: dict[str, Any] = {"model": "scripted", "messages": messages, "tools": [BASH_TOOL]}
            if metadata is not None:
                body["metadata"] = metadata
            response = httpx.post(f"{base_url}/chat/completions", json=body, headers=headers or {}, timeout=60)
            assert response.status_code == 200, response.text
            return response

        def made() -> int:  # conversations made new (not forks), from /metrics
            text = httpx.get(base_url.removesuffix("/v1") + "/metrics").text
            found = re.search(r'^arc_conversations_created_total\{how="new"\} (\S+)$', text, re.MULTILINE)
            return int(float(found.group(1))) if found else 0

        start = [{"role": "system", "content": "S"}, {"role": "user", "content": task_text(tmp_path / "none.log")}]
        first = ask(start, headers={"X-Arc-Conversation": "run-1"})
        key = first.headers["x-arc-conversation"]

        def continued(reply: httpx.Response, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
            message = reply.json()["choices"][0]["message"]
            return [*messages, message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                         "content": "no such file"}]

        history = continued(first, start)
        second = ask(history, metadata={"conversation_id": "run-1"})
        assert second.headers["x-arc-conversation"] == key  # the same name: the same conversation, resumed
        history = continued(second, history)
        third = ask(history, metadata={"conversation_id": "run-2"}, headers={"X-Arc-Conversation": "run-1"})
        assert third.headers["x-arc-conversation"] == key  # the header's name, not the metadata's
        new_before = made()
        unnamed = ask(start)
        assert unnamed.headers["x-arc-conversation"] != key and made() == new_before + 1
        resumed = ask(continued(unnamed, start), metadata={"conversation_id": 7})  # not a name: unnamed
        assert resumed.headers["x-arc-conversation"] == unnamed.headers["x-arc-conversation"]
        named = ask(start, metadata={"conversation_id": "run-3"})
        assert named.headers["x-arc-conversation"] not in (key, unnamed.headers["x-arc-conversation"])
        assert made() == new_before + 2  # its own conversation, not a fork of the unnamed one


def conversations_passing(*passed: tuple[str, list[str], int, int]) -> Any:
    """Conversations in memory (no ARC state: `Conversations.deepest` reads their marks only): each
    (key, the chain hashes it passed in order, its position now, the requests holding it), added in that order."""
    from arc_ref.frontends.proxy import Conversation, Conversations, Mark

    conversations = Conversations(ProxySettings("http://up/v1", "bytes"))
    for key, hashes, position, requests in passed:
        conversation = Conversation(key, None, None, None, position=position, requests=requests)
        conversations.by_key[key] = conversation
        for depth, chain_hash in enumerate(hashes, start=1):
            conversations.add(chain_hash, conversation, Mark(depth, depth + 1, None, chain_hash))
    return conversations


def test_the_deepest_conversation_is_the_one_in_place_else_one_still_there_else_the_latest() -> None:
    """`Conversations.deepest` on hand-made marks: the conversation that passed the deepest hash (not one that
    passed only a shallower one, down to the task's hash); one a request holds there when none is idle there; the
    latest when none is still there; never one set aside, nor one at a hash whose mark it lost."""
    moved_on = conversations_passing(("x", ["h1", "h2", "h3"], 4, 0), ("y", ["h1", "h2"], 5, 0))
    assert moved_on.deepest(["h1", "h2", "h3"]) == ("x", 3)  # y passed h2 only: x is the one to fork at h3
    assert moved_on.deepest(["h1", "h2", "h9"]) == ("y", 2)  # both passed h2, none is there: the latest
    assert moved_on.deepest(["h1", "h7"]) == ("y", 1) and moved_on.deepest(["h8"]) is None
    moved_on.set_aside["y"] = "damaged"  # a conversation set aside is matched no more
    moved_on.ignored.add(("h3", "x"))  # nor one at a hash whose mark it lost
    assert moved_on.deepest(["h1", "h2", "h9"]) == ("x", 2) and moved_on.deepest(["h1", "h2", "h3"]) == ("x", 2)
    held = conversations_passing(("a", ["h1", "h2", "h3"], 3, 1), ("b", ["h1"], 1, 0), ("c", ["h1", "h2", "h3"], 9, 0))
    assert held.deepest(["h1", "h2", "h3"]) == ("a", 3)  # still at h3 but held: before the latest (c)
    idle = conversations_passing(("a", ["h1", "h2", "h3"], 3, 1), ("d", ["h1", "h2", "h3"], 3, 0))
    assert idle.deepest(["h1", "h2", "h3"]) == ("d", 3)
    # a conversation in memory whose marks are not read yet (with --store: `held` put it there, its store is
    # being opened) is not in place at a hash the index names it for
    from arc_ref.frontends.proxy import Conversation

    unread = conversations_passing(("f", ["h1"], 1, 0))
    unread.by_key["p"] = Conversation("p", None, None, None, position=1)
    unread.keys_of["h1"].insert(0, "p")
    assert unread.deepest(["h1"]) == ("f", 1)


def test_a_shallower_conversation_in_place_is_resumed_only_across_messages_that_are_no_reply() -> None:
    """When the conversation at the deepest hash is held, one idle in place at a shallower hash goes on instead
    only when no message from there on is the model's reply (``no_reply_at``), down to the task's own hash; across
    an assistant message the held one is named (and forked), never the shallower one."""
    def roles(*names: str) -> Any:
        return lambda depth: names[depth - 1] != "assistant"

    conversations = conversations_passing(("a", ["h1", "h2", "h3"], 3, 1), ("b", ["h1"], 1, 0))
    hashes = ["h1", "h2", "h3"]
    assert conversations.deepest(hashes, roles("user", "user", "tool")) == ("b", 1)  # down to the task's hash
    assert conversations.deepest(hashes, roles("user", "assistant", "tool")) == ("a", 3)
    assert conversations.deepest(hashes) == ("a", 3)
    alone = conversations_passing(("a", ["h1", "h2", "h3"], 3, 1))
    assert alone.deepest(hashes, roles("user", "user", "tool")) == ("a", 3)  # none shallower: the held one
    at_two = conversations_passing(("a", ["h1", "h2", "h3"], 3, 1), ("e", ["h1", "h2"], 2, 0), ("b", ["h1"], 1, 0))
    assert at_two.deepest(hashes, roles("user", "user", "tool")) == ("e", 2)  # the deepest of those in place


def test_a_conversation_the_index_names_for_a_mark_it_lost_is_passed_over(tmp_path: Path) -> None:
    """With --store, the shared index may name a conversation for a hash its marks file lost (the index row
    written, the mark cut by a crash): the request that finds it there looks again without that row, and goes on
    as if it were not there (here: a new conversation), neither failing nor looking for ever."""
    from arc_ref.frontends.proxy import parse_request

    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                        store=tmp_path / "store"), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            first = await proxy.complete(body, None)
            other = {**body, "messages": [{"role": "user", "content": "another task"}]}
            hashes = parse_request(other, None)[3]
            index = proxy.conversations.hash_index
            assert index is not None
            index.add([(hashes[0], first.conversation)])  # a row whose mark the conversation does not hold
            answered = await asyncio.wait_for(proxy.complete(other, None), 30)
            assert answered.conversation != first.conversation and len(seen) == 2
            assert seen[-1]["messages"][-1]["content"] == "another task"
            again = await asyncio.wait_for(proxy.complete(body, None), 30)  # the first goes on: a fork of it
            assert again.conversation != first.conversation and len(seen) == 3
            await proxy.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("model", [7, None, ["m"]])
def test_a_model_that_is_not_a_string_is_refused_whatever_else_the_request_holds(model: Any) -> None:
    """The model is part of the chain's root: a request whose model is not a string is refused (400), also when
    its messages are well formed (the check before the messages', in `_parse`, not only in `_refusal`)."""
    from arc_ref.frontends.proxy import Refused, parse_request

    with pytest.raises(Refused, match="model must be a string"):
        parse_request({"model": model, "messages": [{"role": "user", "content": "go"}]}, None)


def test_the_chain_hashes_tell_apart_what_identifies_a_message_and_stay_what_stores_hold() -> None:
    """A message's chain hash depends on its tool_call_id and name (a tool result answering another call, or a
    message of another participant, is another message: never resumed as the same one), and the hashes are those
    the marks files and the shared index of a --store already hold (a change of `AgentMessage.canonical` or
    `chain_root` would make every stored conversation's next request a new conversation)."""
    from arc_ref.frontends.proxy import agent_message, chain_next, chain_root

    root = chain_root("m", [], "S", None)
    assert root == "386f40b9d0fea0268756d2c898670028b1fb54e0dfbb433ec15c23a4da85b082"

    def hashed(message: dict[str, Any]) -> str:
        return chain_next(root, agent_message(message, 1))

    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    assert [hashed(message) for message in (
        {"role": "user", "content": "go"}, {"role": "assistant", "content": "x", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "user", "content": "hi", "name": "ann"})] == [
        "5e1f598c8d8c94afb67dbf23f9430ba8abb8a921c6c3c5a48228a27fdeaa3d3e",
        "186e4741d6dcf423b32fd8a3a3cb8deb0d3af58219ce002fac5e128bc78bff56",
        "3c303ce8854038fb1d53b909d730363202f00cc5967e9007424174af20e146d3",
        "5763f3e6472970df8cdda592a938319bf2f37769559830d6f950f758a0ef85db"]
    assert hashed({"role": "tool", "tool_call_id": "c2", "content": "a.txt"}) != hashed(
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"})
    assert hashed({"role": "user", "content": "hi", "name": "bob"}) != hashed(
        {"role": "user", "content": "hi", "name": "ann"}) != hashed({"role": "user", "content": "hi"})
    assert chain_root("m", [], "S", "run-1") != root != chain_root("m2", [], "S", None)


def test_a_retry_with_no_reply_of_its_own_on_record_is_a_fork(tmp_path: Path) -> None:
    """A retry (``x-stainless-retry-count``) of a request whose conversation went on, where this process has no
    reply on record for it (a restarted proxy on the same --store; or the latest request failed upstream after
    its messages were applied, so the latest reply is no longer the head's), is a fork asked of the upstream,
    never a stale reply nor a failure."""
    seen: list[dict[str, Any]] = []
    failing = mock_upstream(seen)

    def upstream(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["messages"][-1]["content"].endswith("fail"):
            return httpx.Response(503, json={"error": {"message": "down"}})
        return failing(request)  # type: ignore[no-any-return]

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            settings = ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=tmp_path / "store")
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            proxy = Proxy(settings, client)
            first = await proxy.complete(body, None)
            await proxy.close()
            restarted = Proxy(settings, client)
            retried = await restarted.complete(json.loads(json.dumps(body)), None, retry=True)
            assert retried.conversation != first.conversation and len(seen) == 2
            # the latest reply answered `body`; a later request failed upstream after its tool message was applied
            reply = retried.completion["choices"][0]["message"]
            failed = {**body, "messages": [*body["messages"], reply,
                                           {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"],
                                            "content": "fail"}]}
            with pytest.raises(Exception):
                await restarted.complete(failed, None)
            again = await restarted.complete(json.loads(json.dumps(body)), None, retry=True)
            assert again.conversation not in (first.conversation, retried.conversation) and len(seen) == 3
            await restarted.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("messages", [
    [{"role": "system", "content": "s"}],
    [{"role": "system", "content": "s"}, {"role": "system", "content": "t"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
    [{"role": "assistant", "content": "a"}, {"role": "user", "content": "go"}]])
@pytest.mark.parametrize("known", [False, True])
def test_a_request_without_a_user_task_after_its_system_messages_is_refused(
        messages: list[dict[str, Any]], known: bool) -> None:
    """The task is the first message after the system prompt: a request of system messages only, or whose first
    message after them is not the user's, is refused (400 bad_message), never a failure of the proxy (review h76:
    `_parse`'s walk over the system messages reading past the last one raised IndexError)."""
    from arc_ref.frontends.proxy import KnownMessages, Refused, parse_request
    from arc_ref.frontends.proxy_app import decode_body

    raw = json.dumps({"model": "m", "messages": messages}).encode()
    store = KnownMessages() if known else None
    with pytest.raises(Refused, match="must be the user's task") as refused:
        parse_request(decode_body(raw, store) if store is not None else json.loads(raw), None, store)
    assert refused.value.code == "bad_message"


@pytest.mark.parametrize("durable", [False, True])
def test_a_new_conversation_made_when_the_same_history_arrived_meanwhile_gives_way_unless_that_one_is_held(
        durable: bool, tmp_path: Path) -> None:
    """`Proxy._made` (a request whose history no conversation passed): the new conversation is at its task (its
    position and its first mark's, 1: the system prompt and the task, as the marks file says) and named for the
    task's hash. When the same history arrived meanwhile (another request made a conversation for it first), the
    new one is dropped and that one named, unless a request holds that one: then the new one goes on beside it,
    as good as a fork (agents that start alike run at once). Review h76: making a second conversation always, or
    waiting on the held one, passed the proxy tests."""
    from arc_ref.frontends.proxy import parse_request
    from arc_ref.persist.marks import read_marks

    settings = ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                             store=tmp_path / "store" if durable else None)
    proxy = Proxy(settings, httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream([]))))
    body = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}],
            "tools": [BASH_TOOL]}
    messages, tools, system, hashes, template_kwargs = parse_request(body, None)

    def made() -> Any:
        return proxy._made(hashes, system, messages[0].text, tools, template_kwargs)

    conversation, key = made()
    assert conversation is not None and key == conversation.key
    assert conversation.position == 1 and conversation.marks[hashes[0]].position == 1
    if durable:
        assert [(mark.chain_hash, mark.position) for mark in read_marks(tmp_path / "store" / key)] == [(hashes[0], 1)]
    assert proxy._found(hashes) == key
    again, named = made()  # the same history arrived first: that conversation goes on, the new one is dropped
    assert again is None and named == key and list(proxy.conversations.by_key) == [key]
    if durable:
        assert [path.name for path in (tmp_path / "store").iterdir() if path.is_dir()] == [key]
    conversation.requests = 1  # a request holds it: the new one goes on beside it
    beside, other = made()
    assert beside is not None and other == beside.key != key
    assert sorted(proxy.conversations.by_key) == sorted([key, other])
    # a history the proxy never saw, sent whole (a proxy restarted without --store): made at its task, named for
    # the task's hash only (its later messages are applied by the request, each marked then)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    longer = {**body, "messages": [*body["messages"][:1], {"role": "user", "content": "another task"}, call,
                                   {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]}
    messages, tools, system, hashes, template_kwargs = parse_request(longer, None)
    whole, _ = made()
    assert whole is not None and list(whole.marks) == [hashes[0]] and whole.position == 1
    assert proxy._found(hashes[:1]) == whole.key and proxy._found(hashes[1:]) is None
    proxy.conversations.close()


def test_a_new_conversation_whose_first_mark_cannot_be_written_is_dropped_and_only_a_store_fault_is_503(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Proxy._made`: when the new conversation's first mark (the shared index's row) cannot be written, the
    conversation is dropped (nothing names it) and the request fails 503 store_unavailable, to be tried again;
    any other fault there is raised as it is, never passed off as the store's (review h76: every fault taken for
    the store's passed the proxy tests)."""
    from arc_ref.frontends.proxy import Failed, parse_request
    from arc_ref.persist.errors import StoreError

    proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=tmp_path / "store"),
                  httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream([]))))
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
    messages, tools, system, hashes, template_kwargs = parse_request(body, None)
    for fault in (StoreError("the index is gone"), RuntimeError("a bug")):
        def add(*args: Any, fault: Exception = fault) -> None:
            raise fault

        monkeypatch.setattr(proxy.conversations, "add", add)
        with pytest.raises(Failed if isinstance(fault, StoreError) else RuntimeError) as raised:
            proxy._made(hashes, system, messages[0].text, tools, template_kwargs)
        if isinstance(fault, StoreError):
            assert isinstance(raised.value, Failed) and raised.value.status == 503
            assert raised.value.code == "store_unavailable" and "the index is gone" in str(raised.value)
        else:
            assert raised.value is fault
        assert not proxy.conversations.by_key
        assert not [path for path in (tmp_path / "store").iterdir() if path.is_dir()]
    proxy.conversations.close()


def test_a_request_cancelled_while_its_new_conversation_is_made_leaves_it_released(tmp_path: Path) -> None:
    """With --store, a request cancelled (its client gone) while a worker thread makes its new conversation: the
    thread finishes, and the conversation it made is released (its store closed, its lock dropped), not left open
    and locked in memory; the next request of that history goes on in it. Cancelled when the same history arrived
    meanwhile (`_made` made none of its own): nothing is undone, nothing fails. Review h76: `_resume`'s undo,
    dropped, given the wrong part of what `_made` returned, or applied to none, passed every proxy test."""
    import threading

    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                        store=tmp_path / "store"), client)
            entered, gate, returned = threading.Event(), threading.Event(), threading.Event()
            made: list[Any] = []
            real = proxy._made

            def slow(*args: Any) -> Any:
                entered.set()
                gate.wait()
                try:
                    result = real(*args)
                    made.append(result[0])
                    return result
                finally:
                    returned.set()

            async def cancelled_while_made(body: dict[str, Any]) -> None:
                """A request of ``body`` cancelled while `_made` runs in its thread; back once that returned."""
                request = asyncio.ensure_future(proxy.complete(body, None))
                await asyncio.to_thread(entered.wait)
                request.cancel()
                gate.set()
                with pytest.raises(asyncio.CancelledError):
                    await request
                await asyncio.to_thread(returned.wait)

            proxy._made = slow  # type: ignore[method-assign,assignment]
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            await cancelled_while_made(body)
            for _ in range(3000):  # the thread's result, then the undo, on the loop (waited for, up to 30 s)
                if made and made[0].store is None:
                    break
                await asyncio.sleep(0.01)
            assert made and made[0] is not None and made[0].store is None and not seen
            proxy._made = real  # type: ignore[method-assign]
            answered = await asyncio.wait_for(proxy.complete(body, None), 30)
            assert answered.conversation == made[0].key and len(seen) == 1
            # cancelled while the same history arrived meanwhile (`_made` gives way: nothing of its own to undo)
            other = {**body, "messages": [{"role": "user", "content": "another task"}]}
            problems: list[dict[str, Any]] = []
            asyncio.get_running_loop().set_exception_handler(lambda loop, context: problems.append(context))
            for event in (entered, gate, returned):
                event.clear()
            given: list[Any] = []

            def meanwhile(*args: Any) -> Any:
                entered.set()
                gate.wait()
                try:
                    real(*args)  # another request of that history made it first
                    given.append(real(*args))
                    return given[-1]
                finally:
                    returned.set()

            proxy._made = meanwhile  # type: ignore[method-assign,assignment]
            await cancelled_while_made(other)
            for _ in range(100):
                await asyncio.sleep(0.01)  # the thread's result, then the undo, on the loop
            assert given and given[0][0] is None and not problems
            proxy._made = real  # type: ignore[method-assign]
            await proxy.close()

    asyncio.run(scenario())


def test_a_fork_of_a_stored_conversation_asks_what_the_same_fork_in_memory_asks(tmp_path: Path) -> None:
    """With --store, a fork (a tool result edited after the conversation went on: a new conversation from the
    mark before it) is made from the stored rows up to that mark: every request the upstream gets, the fork's
    included, is the one the same requests get from a proxy in memory (review h76: a fork that skipped the first
    stored event, the task's, passed every proxy test; so did a fork in memory whose rows count (the
    rounds' seq) starts again, or whose marks do not say the messages before them (their position))."""
    def run(store: Path | None) -> tuple[list[dict[str, Any]], list[tuple[bool, int, int]], list[int]]:
        seen: list[dict[str, Any]] = []
        rounds: list[tuple[bool, int, int]] = []
        positions: list[int] = []

        async def scenario() -> None:
            async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
                proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, store=store),
                              client)
                body = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                                   {"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
                history = list(body["messages"])
                for turn in range(3):
                    reply = (await proxy.complete({**body, "messages": history}, None)).completion
                    history += [reply["choices"][0]["message"],
                                {"role": "tool", "tool_call_id": f"b{turn + 1}", "content": f"out {turn}"}]
                edited = [*history[:3], {"role": "tool", "tool_call_id": "b1", "content": "edited"}]
                forked = await proxy.complete({**body, "messages": edited}, None)
                assert forked.conversation != (await proxy.complete({**body, "messages": history}, None)).conversation
                # each round's conversation (the first or the fork), its rows then; the fork's marks' positions
                rounds.extend((record.conversation == forked.conversation, record.seq, record.view_tokens)
                              for record in proxy.rounds)
                child = proxy.conversations.by_key[forked.conversation]
                positions.extend(sorted(mark.position for mark in child.marks.values()))
                await proxy.close()

        asyncio.run(scenario())
        return seen, rounds, positions

    in_memory, stored = run(None), run(tmp_path / "store")
    assert len(stored[0]) == 5 and stored == in_memory
    assert stored[0][3]["messages"][-1]["content"].endswith("edited")
    assert [fork for fork, _, _ in stored[1]] == [False, False, False, True, False] and stored[2] == [2, 3, 4]


def test_a_stored_conversation_is_forked_unheld_only_at_a_mark_its_marks_file_holds(tmp_path: Path) -> None:
    """With --store, `Conversations.fork_unheld` (a request forking a conversation another request holds, from its
    marks file and rows, without its lock): at the deepest of the request's hashes that file holds, and None (the
    request waits for the conversation instead) when it holds none of them (the index named the conversation for
    a mark a crash cut), never a failure (review h76: the depth-0 return dropped, or no-mark read as depth 1,
    passed the proxy tests; so did reading the rows past the mark, which made a fork at an earlier mark wait)."""
    from arc_ref.frontends.proxy import parse_request

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream([]))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                        store=tmp_path / "store"), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            first = await proxy.complete(body, None)
            history = [*body["messages"], first.completion["choices"][0]["message"],
                       {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]
            hashes = parse_request({**body, "messages": history}, None)[3]
            conversations = proxy.conversations
            unheld = conversations.fork_unheld(first.conversation, hashes)
            assert unheld is not None and unheld[1] == 2  # at the reply's mark (the tool result is new)
            conversations.let_go_of_fork(unheld[0])
            assert unheld[0].position == 2 and list(unheld[0].marks) == [hashes[1]]
            at_task = conversations.fork_unheld(first.conversation, hashes[:1])  # a mark the rows went on from
            assert at_task is not None and at_task[1] == 1 and list(at_task[0].marks) == [hashes[0]]
            conversations.let_go_of_fork(at_task[0])
            other = parse_request({**body, "messages": [{"role": "user", "content": "another task"}]}, None)[3]
            assert conversations.fork_unheld(first.conversation, other) is None
            longer = parse_request({**body, "messages": [{"role": "user", "content": "another task"}, *history[1:]]},
                                   None)[3]
            assert conversations.fork_unheld(first.conversation, longer) is None
            await proxy.close()

    asyncio.run(scenario())


def test_what_the_proxy_remembers_of_message_texts_stays_within_its_limit() -> None:
    """`KnownMessages` keeps at most ``limit`` digests and links: nothing forgotten up to the limit, the oldest
    first past it (review h76: never forgetting, or forgetting at the limit, passed the proxy tests)."""
    from arc_ref.frontends.proxy import KnownMessages

    known = KnownMessages(limit=8)
    for number in range(8):
        known.valid(bytes([number]), "user")
        known.link(f"h{number}", bytes([number]), f"h{number + 1}")
    assert len(known.roles) == len(known.links) == 8  # up to the limit: all kept
    for number in range(8, 100):
        known.valid(bytes([number]), "tool")
        known.link(f"h{number}", bytes([number]), f"h{number + 1}")
        assert len(known.roles) <= 8 and len(known.links) <= 8
    assert bytes([99]) in known.roles and ("h99", bytes([99])) in known.links and bytes([0]) not in known.roles
