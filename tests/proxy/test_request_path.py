"""The proxy's request path costs in proportion to a request's NEW messages (issue 28 item 3): a message whose raw
text the proxy read before is not read or hashed again, the chain is the same as hashing from the root, and every
body is read or refused as the json module reads it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.proxy.harness import BASH_TOOL, bash_call_reply, BUDGETS, QWEN3, count_hand_offs, needs_qwen3

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends import proxy as proxy_module  # noqa: E402
from arc_ref.frontends.proxy import (  # noqa: E402
    KnownMessages,
    Proxy,
    ProxySettings,
    RawMessage,
    Refused,
    parse_request,
)
from arc_ref.frontends.proxy_app import decode_body, decode_whole  # noqa: E402
from arc_ref.json_limits import MAX_NESTING  # noqa: E402

SYSTEM = "You run one bash command per turn."
# at most what a continuing request may read (agent_message) and hash (chain_next): its system message (the root
# needs its text), the new assistant message and tool message, and the chain hash of the reply it gets back
READ_PER_TURN = 3
HASHED_PER_TURN = 3
HOPS_PER_TURN = 2  # worker-thread hand-offs of a continuing request of one upstream round: before it, after it


def body_bytes(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "m", "messages": messages, "tools": [BASH_TOOL]}).encode()


@needs_qwen3
def test_a_continuing_request_reads_and_hashes_only_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = [0]
    chain_next = proxy_module.chain_next

    def counted(previous: str, message: Any) -> str:
        hashed[0] += 1
        return chain_next(previous, message)

    monkeypatch.setattr(proxy_module, "chain_next", counted)
    hops = count_hand_offs(monkeypatch)

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(bash_call_reply)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": "list the files"}]
            keys = set()
            for turn in range(1, 31):
                read, hashes, hopped = proxy.known.read, hashed[0], hops[0]
                reply = await proxy.complete(decode_body(body_bytes(messages), proxy.known), None)
                keys.add(reply.conversation)
                if turn > 1:  # the history grows by 2 messages a turn; what a request reads does not
                    assert proxy.known.read - read <= READ_PER_TURN, (turn, len(messages), proxy.known.read - read)
                    assert hashed[0] - hashes <= HASHED_PER_TURN, (turn, len(messages), hashed[0] - hashes)
                    assert hops[0] - hopped <= HOPS_PER_TURN, (turn, hops[0] - hopped)
                message = reply.completion["choices"][0]["message"]
                messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                       "content": f"file_{turn}.py\n" * 40}]
            assert len(keys) == 1 and len(messages) == 62  # one conversation, resumed in place every turn

            # an edited old message: the request forks at the message before it, and reads from the edit on
            edited = [*messages[:9], {**messages[9], "content": "edited output"}, *messages[10:]]
            read = proxy.known.read
            fork = await proxy.complete(decode_body(body_bytes(edited), proxy.known), None)
            assert fork.conversation not in keys
            assert proxy.known.read - read <= 1 + len(edited) - 9, proxy.known.read - read
            # the unedited history still continues its own conversation
            again = await proxy.complete(decode_body(body_bytes(messages), proxy.known), None)
            assert again.conversation in keys

    asyncio.run(scenario())


def test_the_chain_with_known_messages_is_the_chain_from_the_root() -> None:
    """Every hash of a request parsed with what the proxy knows equals the hash parsed from scratch (json module,
    every message read), for a history that grows, forks and comes back with other key orders and spacing."""
    known = KnownMessages()
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    for turn in range(8):
        history += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"b": 1, "a": 2}'}}]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": f"out {turn}"}]
    bodies = [body_bytes(history[:n]) for n in range(2, len(history) + 1)]
    bodies.append(body_bytes([*history[:6], {**history[6], "content": "changed"}, *history[7:]]))
    bodies.append(json.dumps({"messages": [{**message} for message in reversed(history)][::-1], "tools": [BASH_TOOL],
                              "model": "m"}, indent=1, sort_keys=True).encode())
    read = 0
    for raw in bodies + bodies[::-1]:
        before = known.read
        fast = parse_request(decode_body(raw, known), None, known)
        read += known.read - before
        whole = parse_request(json.loads(raw), None)
        assert fast[3] == whole[3]
        assert list(fast[0]) == list(whole[0]) and fast[1:3] == whole[1:3]
    assert read < 2 * sum(len(json.loads(raw)["messages"]) for raw in bodies) // 4, read  # most were known


def unwrapped(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: [item.read() if isinstance(item, RawMessage) else item for item in member]
                if key == "messages" and isinstance(member, list) else member for key, member in value.items()}
    return value


def decoded_or_refused(read: Any, raw: bytes) -> Any:
    try:
        return unwrapped(read(raw))
    except Refused as problem:
        return ("refused", str(problem))


@pytest.mark.parametrize("raw", [
    b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',  # a lone surrogate: json reads it
    b'{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "x"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x", "n": 1e400}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "model": "n"}',
    b'{"model": "m", "messages": {"role": "user"}}',
    b'[{"model": "m"}]',
    b'{"model": "m", "messages": [{"role": "user", "content": "x"}]} trailing',
    b'{"model": "m", "messages": [{"role": "user", "content": "\xff"}]}',
    '{"model": "m", "messages": []}'.encode("utf-16"),
    b'{"model": "m", "messages": [{"role": "user", "content": "x", "deep": ' + b"[" * (MAX_NESTING - 3)
    + b"]" * (MAX_NESTING - 3) + b"}]}",  # 128 levels: read
    b'{"model": "m", "messages": [{"role": "user", "content": "x", "deep": ' + b"[" * (MAX_NESTING - 2)
    + b"]" * (MAX_NESTING - 2) + b"}]}",  # 129: refused with the body's depth
    b'{"model": "m", "tools": ' + b"[" * (MAX_NESTING - 1) + b"]" * (MAX_NESTING - 1) + b', "messages": []}',
    b'{"model": "m", "tools": ' + b"[" * MAX_NESTING + b"]" * MAX_NESTING + b', "messages": []}',
    b'{"model": "m", "messages": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}",
])
def test_a_body_is_read_or_refused_as_the_json_module_reads_it(raw: bytes) -> None:
    known = KnownMessages()
    assert decoded_or_refused(lambda text: decode_body(text, known), raw) == decoded_or_refused(decode_whole, raw)
