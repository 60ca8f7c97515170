"""A body that begins as one decoded before is decoded from the last message both share on (`RecentBodies`): the
same body, the same chain, the same refusals as decoding it alone (issue 28: turn 200 within 1.2x of turn 10),
and per request in proportion to its new messages."""

from __future__ import annotations

import json
import os
import random
from typing import Any, Callable

import pytest

pytest.importorskip("msgspec", reason="the proxy needs the extra 'proxy'")

from arc_ref.frontends import proxy_app  # noqa: E402
from arc_ref.frontends.proxy import KnownMessages, RawMessage, Refused, parse_request  # noqa: E402
from arc_ref.frontends.proxy_app import RecentBodies, decode_body, decode_whole  # noqa: E402
from arc_ref.json_limits import MAX_NESTING  # noqa: E402

TOOL = {"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}


def unwrapped(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: [item.read() if isinstance(item, RawMessage) else item for item in member]
                if key == "messages" and isinstance(member, list) else member for key, member in value.items()}
    return value


def outcome(read: Callable[[bytes], Any], raw: bytes) -> Any:
    try:
        return ("read", unwrapped(read(raw)))
    except Refused as problem:
        return ("refused", problem.code, str(problem))


def parsed(body: Any, known: KnownMessages | None, explicit: str | None = None) -> Any:
    try:
        messages, tools, system, hashes, kwargs = parse_request(body, explicit, known)
    except Refused as problem:
        return ("refused", problem.code, str(problem))
    return list(messages), tools, system, hashes, kwargs


def turn_messages(rng: random.Random, turn: int) -> list[dict[str, Any]]:
    words = ("ls", "def", "x", "é", "\u2603", "\\", '"q"', "messages", "arc:rest", "]", "}", "\n")
    text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
    call = {"role": "assistant", "content": rng.choice([None, "", f"step {turn}"]), "tool_calls": [
        {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": '{"b": 1, "a": 2}'}}]}
    return [call, {"role": "tool", "tool_call_id": f"c{turn}", "content": text}]


def written(history: list[dict[str, Any]], style: int, extra: dict[str, Any] | None = None) -> bytes:
    """A body as an agent writes it: messages first or after the model, compact or spaced, tools after."""
    members: dict[str, Any] = ({"model": "m", "messages": history} if style % 2 else {"messages": history,
                                                                                        "model": "m"})
    members.update(extra or {})
    members["tools"] = [TOOL]
    if style % 3 == 0:
        return json.dumps(members, separators=(",", ":"), ensure_ascii=False).encode()
    if style % 3 == 1:
        return json.dumps(members).encode()
    return json.dumps(members, indent=1).encode()


def mutated(raw: bytes, rng: random.Random) -> bytes:
    """One adversarial change to a body, most of them after its messages' start (where a continued body is read)."""
    close = raw.rindex(b"}")
    choice = rng.randrange(23)
    if choice == 0:  # a member named messages after the array: the body's messages are that one
        return raw[:close] + b',"messages":[{"role":"user","content":"other"}]' + raw[close:]
    if choice == 1:  # the names a continued body is read under, taken by the rest
        return raw[:close] + rng.choice([b',"arc:rest":[null]', b',"arc:other":1', b',"arc:rest":[null,{}]'])\
            + raw[close:]
    if choice == 2:
        return raw[:close] + b',"temperature":NaN' + raw[close:]
    if choice == 3:
        return raw + rng.choice([b" trailing", b"}", b" ", b"\n"])
    if choice == 4:  # cut anywhere
        return raw[:rng.randrange(len(raw))]
    if choice == 5:  # one byte changed anywhere
        at = rng.randrange(len(raw))
        return raw[:at] + bytes([rng.choice(b'",:[]{} \\x0\xff')]) + raw[at + 1:]
    if choice == 6:  # a new last message too deep, or just deep enough
        depth = rng.choice([MAX_NESTING - 3, MAX_NESTING - 2, 5000])
        message = b'{"role":"user","content":"x","deep":' + b"[" * depth + b"]" * depth + b"}"
        return _with_last(raw, message)
    if choice == 7:
        return _with_last(raw, rng.choice([b'{"role":"user","content":"a\\ud800b"}',
                                           b'{"role":"user","content":"x","n":1e400}',
                                           b'{"role":"user","content":"x","role":"tool"}',
                                           b'{"role":"user","content":"\xff"}', b'null', b'[]', b'7']))
    if choice == 8:
        return raw[:close] + b',"model":"other"' + raw[close:]
    if choice == 9:  # spaces after a comma
        commas = [at for at, byte in enumerate(raw) if byte == ord(",")]
        at = rng.choice(commas) + 1 if commas else 0
        return raw[:at] + b" \n\t" + raw[at:]
    if choice == 10:
        return raw.replace(b'"messages"', b'"m\\u0065ssages"', 1)
    if choice == 11:
        return raw.replace(b'"messages"', b'"messages_"', 1)
    if choice == 12:  # a member of the head changed in place
        return raw.replace(b'"m"', b'"n"', 1)
    if choice == 13:
        return raw[:close] + b',"metadata":{"messages":[1]}' + raw[close:]
    if choice == 14:  # the messages array ended early, the rest still an object
        last = raw.rindex(b"]")
        return raw[:last] + b"]" + raw[last:]
    if choice == 15:
        return raw.replace(b"tool_call_id", b"tool_call_id2", 1)
    if choice == 16:
        return raw[:close] + b',"stream":"yes"' + raw[close:]
    if choice == 17:
        return raw.replace(b"[", b"[ ", 1)
    if choice == 18:
        return raw[:close] + b',"tools":' + b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1) + raw[close:]
    if choice == 19:
        return raw[:close] + b', "x": "\\"messages\\": ["' + raw[close:]
    if choice == 20:  # another root, the same messages: another tools list, template kwargs
        return raw.replace(b'"run"', b'"run it"') if rng.random() < 0.5 else \
            raw[:close] + b',"chat_template_kwargs":{"enable_thinking":false}' + raw[close:]
    return raw


def _with_last(raw: bytes, message: bytes) -> bytes:
    """``raw`` with one more message at the end of its messages array (its last ``}]`` before the tools)."""
    at = raw.rindex(b"tools")
    end = raw.rindex(b"]", 0, at)
    return raw[:end] + b"," + message + raw[end:]


def bodies(seed: int) -> list[bytes]:
    """Conversations that grow a turn at a time (a few at once, forks of one another among them), each body sent
    now and then with an adversarial change."""
    rng = random.Random(seed)
    start = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list the files"}]
    histories = [list(start)]
    styles = [rng.randrange(6)]
    sent = []
    for turn in range(60):
        which = rng.randrange(len(histories))
        if rng.random() < 0.1 and len(histories) < 4:  # a fork: the same first messages, then its own
            cut = rng.randrange(2, len(histories[which]) + 1)
            histories.append(histories[which][:cut])
            styles.append(styles[which] if rng.random() < 0.8 else rng.randrange(6))
            which = len(histories) - 1
        if rng.random() < 0.1 and len(histories[which]) > 4:  # an edited earlier message, from now on
            at = rng.randrange(2, len(histories[which]))
            histories[which][at] = {**histories[which][at], "content": f"edited {turn}"}
        histories[which] += turn_messages(rng, turn)
        extra = {"temperature": 0.5} if rng.random() < 0.2 else None
        raw = written(histories[which], styles[which], extra)
        sent.append(mutated(raw, rng) if rng.random() < 0.35 else raw)
        if rng.random() < 0.15:  # the same body again (a retry)
            sent.append(sent[-1])
        if rng.random() < 0.1:  # a history cut at the end
            sent.append(written(histories[which][:-2], styles[which]))
    return sent


@pytest.mark.parametrize("seed", range(12))
def test_a_continued_body_reads_as_the_whole_body(seed: int) -> None:
    """Every body, continued from an earlier one or not: decode_body's body (or refusal) is the json module's
    (`decode_whole`) and the split of the body alone, and the request parses to the same messages, tools, system
    text and chain hashes (or the same refusal) as that body parsed from the json module's reading."""
    known = KnownMessages()
    known.bodies = RecentBodies(key_bytes=64 if seed % 3 else 4096)  # small bodies: one key for most of them
    sent = bodies(seed)
    rng = random.Random(seed)
    for raw in sent:
        try:
            body = decode_body(raw, known)
        except Refused as problem:
            fast: Any = ("refused", problem.code, str(problem))
        else:
            fast = ("read", unwrapped(body))
        assert fast == outcome(decode_whole, raw), raw
        assert fast == outcome(decode_body, raw), raw
        if fast[0] == "read":  # the body parsed (its chain continued from an earlier body's) as read alone
            explicit = rng.choice([None, None, None, "a"])
            assert parsed(body, known, explicit) == parsed(json.loads(raw), None, explicit), raw
    bodies_kept = known.bodies
    assert isinstance(bodies_kept, RecentBodies)
    if seed % 3:
        assert bodies_kept.continued > len(sent) // 2, (bodies_kept.continued, len(sent))  # the path was taken


def test_the_array_found_is_the_body_messages() -> None:
    """A body whose head holds the name "messages" elsewhere (in a string, in another member, escaped) is still
    read right, from the first request and as it goes on."""
    message = b'{"role":"user","content":"go"}'
    more = b',{"role":"assistant","content":"ok"},{"role":"user","content":"again"}'
    heads = [b'{"x":"\\"messages\\": [", "messages":[', b'{"meta":{"messages":[' + message + b']},"messages":[',
             b'{"x\\"messages":[' + message + b'],"messages":[', b'{"m\\u0065ssages":[1],"messages":[',
             b'{"messages":[' + message + b'],"messages":[', b'{"messages":null,"messages":[',
             b'{"messages"  :\n [']
    continued = 0
    for head in heads:
        known = KnownMessages()
        known.bodies = RecentBodies(key_bytes=8)  # these short bodies looked up and kept, so continued
        for raw in (head + message + b'],"model":"m"}', head + message + more + b'],"model":"m"}',
                    head + message + more + more + b'],"model":"m","messages":[' + message + b"]}"):
            assert outcome(lambda text: decode_body(text, known), raw) == outcome(decode_whole, raw), raw
            assert parsed(decode_body(raw, known), known) == parsed(json.loads(raw), None), raw
        continued += known.bodies.continued
    assert continued > 0  # the array found in a kept body's head was used to continue it


def _count_decoded_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes msgspec's two split decoders of proxy_app read from now on, counted in the list returned."""
    decoded = [0]

    class Counted:
        def __init__(self, decoder: Any) -> None:
            self.decoder = decoder

        def decode(self, text: Any) -> Any:
            decoded[0] += len(text)
            return self.decoder.decode(text)

    monkeypatch.setattr(proxy_app, "_SPLIT_BODY", Counted(proxy_app._SPLIT_BODY))
    monkeypatch.setattr(proxy_app, "_SPLIT_LIST", Counted(proxy_app._SPLIT_LIST))
    return decoded


def test_a_request_decodes_and_hashes_its_new_messages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per request of one conversation that grows to 400 messages: the bytes msgspec decodes (its rest read three
    times: under each name, then its array), the messages hashed (sha256 of their text) and the chain links looked
    up are those of the new messages (and the members after them), not the history's; the chain is the one from
    the root."""
    decoded, digests = _count_decoded_bytes(monkeypatch), [0]

    class CountedHashlib:
        @staticmethod
        def sha256(data: Any) -> Any:
            digests[0] += 1
            return __import__("hashlib").sha256(data)

    monkeypatch.setattr(proxy_app, "hashlib", CountedHashlib)

    class CountedLinks(dict[Any, Any]):
        looked = 0

        def get(self, key: Any, default: Any = None) -> Any:
            CountedLinks.looked += 1
            return super().get(key, default)

    known = KnownMessages()
    known.links = CountedLinks()
    rng = random.Random(7)
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list the files"}]
    previous = b""
    for turn in range(200):
        history += turn_messages(rng, turn)
        raw = written(history, 1)
        before = decoded[0], digests[0], CountedLinks.looked
        hashes = parse_request(decode_body(raw, known), None, known)[3]
        new = len(raw) - len(os.path.commonprefix([raw, previous]))  # bytes from the first that differs on
        if len(previous) > proxy_app.BODY_KEY_BYTES:  # (a body shorter than its key is looked up by itself)
            assert decoded[0] - before[0] <= 3 * new + 300, (turn, decoded[0] - before[0], new, len(raw))
            assert digests[0] - before[1] <= 2, (turn, digests[0] - before[1])  # its two new messages
            assert CountedLinks.looked - before[2] <= 2, (turn, CountedLinks.looked - before[2])
        previous = raw
    assert len(history) == 402 and len(raw) > 20 * new
    assert hashes == parse_request(json.loads(raw), None)[3]


def test_the_bodies_kept_stay_within_their_budget() -> None:
    """Many conversations at once: what RecentBodies holds (bodies and the texts their messages lie in) never
    passes its budget, the least recently used forgotten first, and each conversation still reads right."""
    budget = 600_000
    known = KnownMessages()
    known.bodies = RecentBodies(budget)
    rng = random.Random(3)
    histories = [[{"role": "user", "content": f"task {number} " + "x" * 3000}] for number in range(30)]
    forgotten = 0
    for _ in range(300):
        history = rng.choice(histories)
        history += turn_messages(rng, len(history))
        raw = written(history, 0)
        assert outcome(lambda text: decode_body(text, known), raw) == outcome(decode_whole, raw)
        assert known.bodies.held <= budget
        assert known.bodies.held == sum(kept.weight for kept in known.bodies._recent)
        assert sum(len(bucket) for bucket in known.bodies._keyed.values()) == len(known.bodies._recent)
        forgotten += len(known.bodies._recent) < len(histories)
    assert known.bodies.continued > 100 and forgotten > 100  # continued, while the budget forgot some


@pytest.mark.parametrize("shape", ["long outputs", "short messages", "an emoji", "tiny containers",
                                   "a large member after the messages"])
def test_what_the_bodies_hold_is_within_what_they_count(shape: str) -> None:
    """The memory freed when the bodies kept are dropped (tracemalloc) is at most what RecentBodies counts held,
    for long tool outputs, short messages (each message's objects outweigh its text), a text Python keeps at 4
    bytes a character (one emoji), a message of many tiny containers (its value ~20x its text, not kept), and a
    large member after the messages (in every body's rest: no rest is kept)."""
    import gc
    import tracemalloc

    rng = random.Random(1)
    known = KnownMessages()
    known.bodies = RecentBodies()
    histories = [[{"role": "system", "content": "be brief " * 100}, {"role": "user", "content": f"task {number}"}]
                 for number in range(3)]
    tracemalloc.start()
    try:
        for turn in range(40):
            for history in histories:
                history += turn_messages(rng, turn)
                text = history[-1]["content"]
                history[-1]["content"] = {"long outputs": (text * 40)[:8000], "an emoji": "\U0001F600" + "log\n" * 900,
                                          }.get(shape, text[:5] if shape == "short messages" else text)
                if shape == "tiny containers":
                    history[-1]["pad"] = [{}] * 3000
                extra = {"user": "u" * 6000} if shape.startswith("a large member") else None
                parse_request(decode_body(written(history, 1, extra), known), None, known)
        gc.collect()
        holding = tracemalloc.get_traced_memory()[0]
        held = known.bodies.held
        known.bodies = None
        gc.collect()
        freed = holding - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 0 < freed <= held, (freed, held)


def test_a_history_grown_past_what_is_kept_is_decoded_as_without_them() -> None:
    """Once a history's body is too large to keep (a quarter of the budget), the body it continued is forgotten
    too: its later bodies are decoded whole (as without RecentBodies), never from a stale earlier point."""
    budget = 400_000
    known = KnownMessages()
    known.bodies = RecentBodies(budget)
    rng = random.Random(5)
    history = [{"role": "user", "content": "task"}]
    passed = 0
    for turn in range(80):
        history += turn_messages(rng, turn)
        history[-1]["content"] = "x" * 1500
        raw = written(history, 0)
        continued = known.bodies.continued
        assert outcome(lambda text: decode_body(text, known), raw) == outcome(decode_whole, raw)
        if proxy_app._weight(len(raw), len(history)) > budget // 4:
            passed += 1
            assert known.bodies.held == 0 and not known.bodies._keyed, turn  # nothing stale kept
            if passed > 1:
                assert known.bodies.continued == continued, turn  # decoded whole
        elif len(raw) > proxy_app.BODY_KEY_BYTES:  # (a body no longer than its key is not kept: no other has it)
            assert known.bodies.held > 0
    assert passed > 10 and known.bodies.continued > 10


@pytest.mark.parametrize("case", ["an early message edited", "another conversation of the same first message"])
def test_a_body_sharing_little_with_those_kept_is_read_once(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body that shares less than half its bytes with every body kept (an early edit of its history; its own
    history forgotten while another conversation with its first message is kept) is decoded whole, as without
    them: msgspec reads it about twice (the body, then its messages' array), never its rest three times."""
    decoded = _count_decoded_bytes(monkeypatch)
    rng = random.Random(9)
    known = KnownMessages()
    known.bodies = RecentBodies(key_bytes=64)
    system = {"role": "system", "content": "rules " * 200}
    mine = [system, {"role": "user", "content": "my task"}]
    other = [system, {"role": "user", "content": "another task"}]
    for turn in range(30):
        mine += turn_messages(rng, turn)
        other += turn_messages(rng, turn)
    decode_body(written(mine, 0), known)
    decode_body(written(other, 0), known)
    if case == "an early message edited":
        body = [*mine[:3], {**mine[3], "content": "edited"}, *mine[4:]]
    else:
        known.bodies = RecentBodies(key_bytes=64)  # its own history forgotten, the other's kept
        decode_body(written(other, 0), known)
        body = mine + turn_messages(rng, 31)
    raw = written(body, 0)
    before = decoded[0]
    assert outcome(lambda text: decode_body(text, known), raw) == outcome(decode_whole, raw)
    assert decoded[0] - before <= 2 * len(raw), (decoded[0] - before, len(raw))


def test_a_body_without_messages_does_not_stop_another_from_continuing() -> None:
    """A body with an empty ``messages`` (refused later, by `parse_request`) and the same first bytes as another
    conversation's is no candidate: the other's next body still continues its own."""
    known = KnownMessages()
    known.bodies = RecentBodies(key_bytes=8)
    head = b'{"model":"m","messages":['
    history = b'{"role":"user","content":"go"},{"role":"assistant","content":"ok"}'
    decode_body(head + history + b"]}", known)
    decode_body(head + b"]}", known)
    grown = head + history + b',{"role":"user","content":"again"}]}'
    assert decode_body(grown, known) is not None
    assert known.bodies.continued == 1


def test_a_body_sharing_only_the_system_prompt_with_one_kept_has_the_chain_read_alone() -> None:
    """A body whose bytes begin as a kept body's only up to the end of its system messages (another task under
    the same long system prompt: over half its bytes) is continued from there, and its chain is the one it has
    read alone: the earlier body's chain holds no message of it to take (review h76: `_parse` taking the earlier
    chain when it shares no message after the system prompt reads ``hashes[-1]`` of none)."""
    known = KnownMessages()
    known.bodies = RecentBodies(key_bytes=64)
    system = {"role": "system", "content": "rules " * 200}
    first = written([system, {"role": "user", "content": "my task"}], 0)
    parse_request(decode_body(first, known), None, known)  # its chain is the one the next body may continue
    for other in ([system, {"role": "user", "content": "another task"}],
                  [system, {"role": "system", "content": "more"}, {"role": "user", "content": "a third"}]):
        raw = written(other, 0)
        continued = known.bodies.continued
        assert parsed(decode_body(raw, known), known) == parsed(json.loads(raw), None)
        assert known.bodies.continued == continued + 1  # continued from the kept body (not decoded whole)
