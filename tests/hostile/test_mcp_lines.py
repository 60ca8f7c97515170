"""`arc-ref mcp STORE` answers every line (issue 18, item 7), over a real subprocess speaking raw JSON-RPC.

Before: the MCP SDK's stdio reader dropped, with no answer, a line holding a lone-surrogate escape, an integer
of more than 4,300 digits, 50,000-deep nesting or a JSON-RPC batch (the client waited forever); it replaced
invalid UTF-8 with U+FFFD (the observation was stored as something that was not sent); and pydantic's lax
mode stored ``returncode: true`` as 1.

Issue 31 item 3: those lines were then answered, but with ``"id": null`` (-32700) although their id could be
read, so a client waiting for its id still waited forever; now each is answered under its id, and the id is
null only where it cannot be read (not JSON, or an id that is itself unreadable). Issue 27 item 7: a line
nests at most 128 levels (arc_ref.json_limits), as every reader's text does: 128 is served, 129 refused.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from arc_ref.persist import DurableStore  # noqa: E402

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}}
ANSWER_WITHIN_S = 60
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def store_call(request_id: int, **arguments: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": "store_observation", "arguments": arguments}}).encode()


def deep_store_call(request_id: int, levels: int) -> bytes:
    """A store_observation call whose line nests ``levels`` levels (its extra argument holds the depth)."""
    inner = "[" * (levels - 3) + "]" * (levels - 3)  # the line, params and arguments objects, then the arrays
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"store_observation",'
            f'"arguments":{{"action":"ls","observation":"deep {levels}","extra":{inner}}}}}}}').encode()


HOSTILE: list[tuple[str, bytes, int, str, object]] = [  # name, line, error code, words of the message, its id
    ("lone surrogate", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"store_observation",'
                       b'"arguments":{"action":"ls","observation":"\\ud800"}}}', -32600, "a lone surrogate U+D800", 1),
    ("5,000-digit integer", store_call(2, action="ls", observation="x").replace(b'"x"', b"9" * 5000), -32600,
     "an integer literal of more than 4300 digits", 2),
    ("50,000-deep nesting", b'{"jsonrpc":"2.0","id":3,"method":"ping","params":' + b"[" * 50_000 + b"]" * 50_000
     + b"}", -32600, "JSON nested 50001 levels deep (at most 128)", 3),
    ("batch", b"[" + store_call(4, action="ls", observation="x") + b"]", -32600, "batch is not supported", None),
    ("invalid UTF-8", store_call(5, action="ls", observation="caf?").replace(b"caf?", b"caf\xe9"), -32700,
     "not UTF-8 text (invalid byte at offset", 5),
    ("invalid UTF-8 in the id", b'{"jsonrpc":"2.0","id":"caf\xe9","method":"ping"}', -32700,
     "not UTF-8 text (invalid byte at offset", None),
    ("no method", b'{"jsonrpc":"2.0","id":6}', -32600, "Invalid Request", 6),
    ("not JSON", b'{"jsonrpc":"2.0","id":10,"method":', -32700, "Parse error: not valid JSON", None),
    ("an id that is a lone surrogate", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', -32600,
     "a lone surrogate U+D800", None),
]


class Server:
    """`arc-ref mcp` in a subprocess; one line written, one line read back."""

    def __init__(self, store: Path, *options: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", *options, str(store)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def answer(self, line: bytes) -> dict[str, Any]:
        self.send(line)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], ANSWER_WITHIN_S)
        assert ready, f"no answer within {ANSWER_WITHIN_S} s: the server dropped the line"
        answered = self.process.stdout.readline()
        assert answered, "no answer: the server dropped the line or ended"
        decoded: dict[str, Any] = json.loads(answered)
        return decoded

    def close(self) -> tuple[int, str]:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=60)
        return code, self.process.stderr.read().decode("utf-8", "replace")


def test_every_hostile_line_gets_a_json_rpc_error_and_nothing_is_stored(tmp_path: Path) -> None:
    store = tmp_path / "store.arc"
    server = Server(store)
    try:
        assert "result" in server.answer(json.dumps(INITIALIZE).encode())
        server.send(json.dumps(INITIALIZED).encode())
        for name, line, code, words, request_id in HOSTILE:
            answer = server.answer(line)
            assert answer.get("error", {}).get("code") == code, (name, answer)
            assert words in answer["error"]["message"], (name, answer)
            assert answer["id"] == request_id, (name, answer)
        refused = server.answer(store_call(7, action="ls", observation="x", returncode=True))
        assert refused["id"] == 7 and refused["result"]["isError"], refused
        assert "valid integer" in refused["result"]["content"][0]["text"]
        stored = server.answer(store_call(8, action="ls", observation="café", returncode=2))
        assert stored["id"] == 8 and not stored["result"].get("isError"), stored
        page = server.answer(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "catalog_page", "arguments": {"page": True}}}).encode())
        assert page["id"] == 9 and page["result"]["isError"], page  # true is no page number
    finally:
        code, err = server.close()
    assert code == 0 and "Traceback" not in err, err
    with DurableStore.open(store, readonly=True) as opened:
        records = opened.state.records
        assert [(record.content, record.returncode) for record in records] == [("café", 2)]


def test_requests_piped_before_the_input_closes_are_all_answered(tmp_path: Path) -> None:
    """`printf ... | arc-ref mcp STORE`: the input ends before the calls are done; each still gets its answer
    (before: the calls in flight when the input closed were never answered)."""
    lines = [json.dumps(INITIALIZE).encode(), json.dumps(INITIALIZED).encode(),
             *(store_call(number, action="ls", observation=f"output {number}") for number in range(1, 6)),
             HOSTILE[0][1]]
    done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(tmp_path / "piped.arc")],
                          input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(answer["id"] for answer in answers if answer["id"] is not None) == [0, 1, 1, 2, 3, 4, 5]
    assert sum(answer["id"] is None for answer in answers) == 0  # the hostile line's error has its id, 1


class Client(Server):
    """A client as a real one behaves: it waits for the answer carrying its request's id, whatever else comes."""

    def __init__(self, store: Path, *options: str) -> None:
        super().__init__(store, *options)
        self.next_id = 100
        self.pending = b""

    def _line(self, deadline: float) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.process.stdout], [], [], max(left, 0))
            if not ready:
                return None
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        decoded: dict[str, Any] = json.loads(line)
        return decoded

    def reply_to(self, line: bytes, request_id: object, barrier: bool = False) -> tuple[dict[str, Any], float]:
        """Send ``line``; the answer under ``request_id`` and its time, waiting at most ANSWER_WITHIN_S. With
        ``barrier``, a ping follows the line: the server answers a line it refuses before it reads the next one,
        so an answer to the ping with none under ``request_id`` before it means none will ever come."""
        self.next_id += 1
        ping = self.next_id
        started = time.monotonic()
        self.send(line)
        if barrier:
            self.send(json.dumps({"jsonrpc": "2.0", "id": ping, "method": "ping"}).encode())
        deadline = started + ANSWER_WITHIN_S
        seen = []
        while (answer := self._line(deadline)) is not None:
            if answer.get("id") == request_id:
                return answer, time.monotonic() - started
            seen.append(answer)
            if barrier and answer.get("id") == ping:
                break
        raise AssertionError(f"no answer under id {request_id!r}: a client waiting for it would wait forever"
                             f" (answers seen: {json.dumps(seen)[:300]})")

    def answers(self, request_ids: Iterable[object]) -> list[dict[str, Any]]:
        """The answers under ``request_ids`` (sent before), in that order, whatever order they come in."""
        wanted = list(request_ids)
        found: dict[object, dict[str, Any]] = {}
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while len(found) < len(wanted):
            answer = self._line(deadline)
            assert answer is not None, f"no answer under {sorted(set(wanted) - set(found), key=str)[:5]}"
            if answer.get("id") in wanted:
                found[answer["id"]] = answer
        return [found[request_id] for request_id in wanted]


ANSWERED_UNDER_ITS_ID = [  # issue 31 item 3: JSON text whose id can be read, holding a value no reader takes
    ("a lone surrogate in the observation", 11, b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":'
     b'"store_observation","arguments":{"action":"ls","observation":"\\ud800"}}}', "a lone surrogate U+D800"),
    ("a lone surrogate in an id argument", 12, b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":'
     b'"recall","arguments":{"id":"\\udfff"}}}', "a lone surrogate U+DFFF"),
    ("an integer of 5,000 digits", 13, store_call(13, action="ls", observation="x").replace(b'"x"', b"9" * 5000),
     "an integer literal of more than 4300 digits"),
    ("arguments nested 50,000 deep", 14, b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":'
     b'"store_observation","arguments":' + b"[" * 50_000 + b"]" * 50_000 + b"}}", "JSON nested 50002 levels deep"),
    ("a string id, the id after a deep params", "call-15", b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":'
     b'"catalog_page","arguments":{"page":' + b"1" * 5000 + b'}},"id":"call-15"}',
     "an integer literal of more than 4300 digits"),
    ("one level past the nesting limit", 16, deep_store_call(16, 129), "JSON nested 129 levels deep (at most 128)"),
]


@pytest.mark.parametrize("name, request_id, line, words", ANSWERED_UNDER_ITS_ID,
                         ids=[case[0] for case in ANSWERED_UNDER_ITS_ID])
def test_a_request_whose_id_can_be_read_is_answered_under_that_id(tmp_path: Path, name: str, request_id: object,
                                                                  line: bytes, words: str) -> None:
    """Before (main 8055a1f): each of these got -32700 with "id": null, and a raw client waiting for its id
    timed out; now an error -32600 under the request's id, at once, and nothing is stored."""
    client = Client(tmp_path / "store.arc")
    try:
        assert "result" in client.reply_to(json.dumps(INITIALIZE).encode(), 0)[0]
        client.send(json.dumps(INITIALIZED).encode())
        answer, _ = client.reply_to(line, request_id, barrier=True)
        assert answer["error"]["code"] == -32600 and words in answer["error"]["message"], answer
        assert "nothing was stored" in answer["error"]["message"]
        stored, _ = client.reply_to(store_call(99, action="ls", observation="after"), 99)  # the server goes on
        assert stored["result"]["structuredContent"]["index"] == 1, stored
    finally:
        code, err = client.close()
    assert code == 0 and "Traceback" not in err, err


def test_a_line_that_is_not_utf8_is_answered_under_its_id_when_that_id_can_be_read(tmp_path: Path) -> None:
    """A byte that is not UTF-8 inside an observation is a string that is not text, as a lone surrogate escape is:
    the id around it can still be read, so the answer carries it (before: -32700 with "id": null, and a raw
    client waiting for its id waited forever). A byte that is not UTF-8 inside the id leaves it unreadable: null."""
    client = Client(tmp_path / "store.arc")
    try:
        client.reply_to(json.dumps(INITIALIZE).encode(), 0)
        client.send(json.dumps(INITIALIZED).encode())
        line = store_call(31, action="ls", observation="caf?").replace(b"caf?", b"caf\xe9")
        answer, _ = client.reply_to(line, 31, barrier=True)
        assert answer["error"]["code"] == -32700, answer
        assert "not UTF-8 text (invalid byte at offset" in answer["error"]["message"], answer
        unreadable, _ = client.reply_to(b'{"jsonrpc":"2.0","id":"\xff","method":"ping"}', None, barrier=True)
        assert unreadable["error"]["code"] == -32700, unreadable
        stores_first_after_it(client, 32)
    finally:
        closes_cleanly(client)


def stores_first_after_it(client: Client, request_id: int) -> None:
    """The server goes on after a refused line, and nothing of that line was stored: the next store is index 1."""
    stored, _ = client.reply_to(store_call(request_id, action="ls", observation="after"), request_id)
    assert stored["result"]["structuredContent"]["index"] == 1, stored


def closes_cleanly(client: Client) -> None:
    code, err = client.close()
    assert code == 0 and "Traceback" not in err, err


def test_the_nesting_limit_of_a_line_is_128(tmp_path: Path) -> None:
    """The limit of every JSON reader (issue 27 item 7): a call nesting 128 levels is served, 129 refused under
    its id (before: both were served, and about a thousand levels ended in a parse error with a null id)."""
    client = Client(tmp_path / "store.arc")
    try:
        client.reply_to(json.dumps(INITIALIZE).encode(), 0)
        client.send(json.dumps(INITIALIZED).encode())
        served, _ = client.reply_to(deep_store_call(21, 128), 21)
        assert served["result"]["structuredContent"]["index"] == 1, served
        refused, _ = client.reply_to(deep_store_call(22, 129), 22, barrier=True)
        assert refused["error"]["code"] == -32600, refused
        assert "JSON nested 129 levels deep (at most 128)" in refused["error"]["message"]
    finally:
        code, err = client.close()
    assert code == 0 and "Traceback" not in err, err


def test_a_store_path_under_a_regular_file_is_a_clear_exit_2(tmp_path: Path) -> None:
    """Before: exit status 70, internal error (NotADirectoryError from the clean-up of the staging file)."""
    (tmp_path / "file").write_text("x", encoding="utf-8")
    for path in (tmp_path / "file" / "x.arc", tmp_path / "file" / "sub" / "x.arc"):
        done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(path)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == f"arc-ref mcp: cannot create {str(path)!r}: Not a directory", done.stderr
        assert not any((tmp_path / "file").parent.glob(".x.arc.creating-*"))


def test_ctrl_c_ends_the_server_at_once_with_130(tmp_path: Path) -> None:
    """Review h24 F9: SIGINT left the server blocked reading standard input until the next line, then exit 0."""
    client = Client(tmp_path / "store.arc")
    client.reply_to(json.dumps(INITIALIZE).encode(), 0)
    client.send(json.dumps(INITIALIZED).encode())
    stored, _ = client.reply_to(store_call(1, action="ls", observation="kept"), 1)
    assert not stored["result"]["isError"]
    client.process.send_signal(signal.SIGINT)
    assert client.process.wait(timeout=20) == 130
    with DurableStore.open(tmp_path / "store.arc", readonly=True) as reopened:
        assert [record.content for record in reopened.state.records] == ["kept"]


def tool_call(request_id: int, name: str, **arguments: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()


BAD_IDS = [("an object", b'{"a":1}', None), ("null", b"null", None), ("a fraction", b"1.5", 1.5),
           ("an array", b"[1]", None), ("true", b"true", None)]


@pytest.mark.parametrize("name, text, echoed", BAD_IDS, ids=[case[0] for case in BAD_IDS])
def test_a_request_whose_id_is_no_string_or_integer_is_answered(tmp_path: Path, name: str, text: bytes,
                                                                 echoed: object) -> None:
    """Review h24 F2: the SDK took such a request for a notification and answered nothing (the client waited
    forever, and a store_observation was not stored, silently). Now -32600, the id echoed where JSON-RPC allows it."""
    client = Client(tmp_path / "store.arc")
    try:
        client.reply_to(json.dumps(INITIALIZE).encode(), 0)
        client.send(json.dumps(INITIALIZED).encode())
        line = store_call(1, action="ls", observation="x").replace(b'"id": 1', b'"id": ' + text)
        answer, _ = client.reply_to(line, echoed, barrier=True)
        assert answer["error"]["code"] == -32600, answer
        assert "a request's id must be a string or an integer" in answer["error"]["message"], answer
        stores_first_after_it(client, 2)
    finally:
        closes_cleanly(client)


def test_a_request_before_initialize_is_told_so(tmp_path: Path) -> None:
    """Review h24 F3: the SDK answered -32602 "Invalid request parameters" with empty data; a ping is answered."""
    client = Client(tmp_path / "store.arc")
    try:
        pong, _ = client.reply_to(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(), 1)
        assert pong.get("result") == {}, pong
        for request_id, line in ((2, tool_call(2, "catalog_page")),
                                 (3, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode())):
            refused, _ = client.reply_to(line, request_id)
            assert refused["error"]["code"] == -32600, refused
            assert "not initialized; send initialize first" in refused["error"]["message"], refused
        assert "result" in client.reply_to(json.dumps(INITIALIZE).encode(), 0)[0]
        client.send(json.dumps(INITIALIZED).encode())
        listed, _ = client.reply_to(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}).encode(), 4)
        tools = {tool["name"]: tool for tool in listed["result"]["tools"]}
        # none is read-only (each call is a row, and three move a cursor: review h24 F4); recall_next is not idempotent
        assert {name: tool["annotations"]["readOnlyHint"] for name, tool in tools.items()} == dict.fromkeys(tools, False)
        assert not tools["recall_next"]["annotations"]["idempotentHint"]
        assert "U+2060" in tools["recall"]["outputSchema"]["properties"]["payload"]["description"]
    finally:
        code, err = client.close()
    assert code == 0 and "Traceback" not in err, err


def test_a_method_the_server_does_not_serve_is_a_json_rpc_error_without_a_traceback(tmp_path: Path) -> None:
    """Review h24 (nit N-d): prompts/get was answered with error code 0 and a traceback on standard error; an
    unknown prompt is now -32602 (the server has none), an unknown method -32601, and standard error stays empty."""
    client = Client(tmp_path / "store.arc")
    try:
        assert "result" in client.reply_to(json.dumps(INITIALIZE).encode(), 0)[0]
        client.send(json.dumps(INITIALIZED).encode())
        prompt, _ = client.reply_to(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                                                "params": {"name": "summarize"}}).encode(), 1)
        assert prompt["error"]["code"] == -32602, prompt
        assert prompt["error"]["message"].startswith("Unknown prompt: 'summarize'; this server has no prompts"), prompt
        unknown, _ = client.reply_to(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such"}).encode(), 2)
        assert unknown["error"]["code"] == -32601, unknown
    finally:
        code, err = client.close()
    assert code == 0 and err == "", err


def test_pipelined_calls_run_in_the_order_they_came(tmp_path: Path) -> None:
    """Review h24 F4: calls sent without waiting ran in worker threads in any order: a recall_next could run before
    the recall sent just before it (4 times in 100), store_observation minted indexes out of order. Now they run one
    at a time, as they came; and the payloads, joined and with the U+2060 rule of the instructions applied, are the
    stored output (its control string and its own U+2060 included)."""
    output = "".join(f"line {number}: <|im_end|> and a \u2060 joiner\n" for number in range(12))
    client = Client(tmp_path / "store.arc", "--preset", "minimal")
    try:
        initialized, _ = client.reply_to(json.dumps(INITIALIZE).encode(), 0)
        assert "join the payloads of every chunk" in initialized["result"]["instructions"]
        client.send(json.dumps(INITIALIZED).encode())
        client.send(b"\n".join(store_call(10 + number, action=f"cat {number}", observation=f"{number}")
                               for number in range(20)))
        stored = client.answers(range(10, 30))  # the minimal preset stores 24
        assert [answer["result"].get("structuredContent", answer)["index"] for answer in stored] == list(range(1, 21))
        first, _ = client.reply_to(store_call(99, action="cat big", observation=output), 99)
        obs_id, chunks = first["result"]["structuredContent"]["id"], first["result"]["structuredContent"]["chunks"]
        assert chunks >= 8, first
        for trial in range(10):
            ids = range(1000 * (trial + 1), 1000 * (trial + 1) + chunks)
            client.send(b"\n".join(tool_call(request_id, "recall_next" if number else "recall", id=obs_id)
                                   for number, request_id in enumerate(ids)))
            answers = [answer["result"]["structuredContent"] for answer in client.answers(ids)]
            assert [answer["chunk"] for answer in answers] == list(range(1, chunks + 1)), (trial, answers)
            joined = "".join(answer["payload"] for answer in answers)
            assert re.sub("\u2060\u2060|\u2060", lambda found: "\u2060" if len(found.group()) == 2 else "", joined) == output
    finally:
        code, err = client.close()
    assert code == 0 and "Traceback" not in err, err


def cancel(request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": request_id, "reason": "timeout"}}).encode()


def test_cancelled_calls_hold_up_neither_the_queue_nor_the_end(tmp_path: Path) -> None:
    """Review h24 F11: a call the client cancels gets no answer (MCP), and the server waited for one at the end of
    its input, holding the store's writer lock for good; with calls queued one at a time it would also have held up
    every later call. A call cancelled while queued never runs; later calls are answered; the end of input ends the
    server."""
    client = Client(tmp_path / "store.arc")
    client.reply_to(json.dumps(INITIALIZE).encode(), 0)
    client.send(json.dumps(INITIALIZED).encode())
    client.send(b"\n".join((store_call(1, action="dump", observation="y" * 5_000_000),  # runs a while
                            store_call(2, action="ls", observation="queued, then cancelled"), cancel(2), cancel(1),
                            store_call(3, action="ls", observation="after"))))
    (after,) = client.answers([3])
    assert not after["result"]["isError"], after
    code, err = client.close()
    assert code == 0 and "Traceback" not in err, err
    with DurableStore.open(tmp_path / "store.arc", readonly=True) as reopened:
        contents = [record.content for record in reopened.state.records]
    assert "after" in contents and "queued, then cancelled" not in contents


@pytest.mark.parametrize("redirect, said", [("<&-", "standard input is closed"), (">&-", "standard output is closed"),
                                            ("> /dev/full", "writing to standard output failed")])
def test_a_closed_or_failing_standard_stream_is_exit_4_in_one_line(tmp_path: Path, redirect: str, said: str) -> None:
    """Review h24 F12: each was exit 70, 'internal error (a bug in arc-ref)' (AttributeError, an ExceptionGroup)."""
    line = json.dumps(INITIALIZE)
    done = subprocess.run(["bash", "-c", f"echo '{line}' | {sys.executable} -m arc_ref.frontends.cli mcp"
                                         f" {tmp_path / 'store.arc'} {redirect}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith(f"arc-ref mcp: {said}") and done.stderr.count("\n") == 1, done.stderr


def peak_memory_kib(process: subprocess.Popen[bytes]) -> int:
    """The peak resident memory of ``process`` so far (Linux: VmHWM of /proc/PID/status)."""
    status = Path(f"/proc/{process.pid}/status").read_text(encoding="ascii")
    return int(status.split("VmHWM:", 1)[1].split()[0])


def padded(line: bytes, size: int) -> bytes:
    """``line``, a JSON object, with blanks after it to ``size`` bytes (JSON text may end in white space)."""
    assert len(line) <= size
    return line + b" " * (size - len(line))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a process's peak memory from /proc")
def test_a_line_over_the_limit_is_answered_and_never_held_whole(tmp_path: Path) -> None:
    """Review h59 F7: the server read a line of any length whole before refusing it (120 MB: read, parsed, then
    refused as a row over 32 MiB, 638 MB of memory). A line is read up to 6 times --max-observation-bytes (an output
    within the limit however JSON escapes it), at most the row limit, plus 64 KiB: a longer one is answered -32600
    under its id when that id can be read in the line's start (null otherwise), read to its end a piece at a time
    and dropped; the server goes on with the next line."""
    limit = 6 * 1000 + 64 * 1024  # the longest line read with --max-observation-bytes 1000
    server = Server(tmp_path / "long.arc", "--preset", "minimal", "--max-observation-bytes", "1000")
    try:
        assert "result" in server.answer(json.dumps(INITIALIZE).encode())
        server.send(json.dumps(INITIALIZED).encode())
        escaped = store_call(1, action="ls", observation="\x01" * 1000)  # each byte 6 on the line (\u0001)
        stored = server.answer(padded(escaped, limit))  # the longest line read
        assert stored["id"] == 1 and not stored["result"]["isError"], stored
        peak = peak_memory_kib(server.process)
        id_after_params = (b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"store_observation","arguments":'
                           b'{"action":"ls","observation":"' + b"z" * 100_000 + b'"}},"id":4}')  # past the first 64 KiB
        for request_id, line in [(2, padded(store_call(2, action="ls", observation="x"), limit + 1)),
                                 (3, store_call(3, action="ls", observation="y" * (64 << 20))),
                                 (None, id_after_params)]:
            refused = server.answer(line)
            assert refused["id"] == request_id and refused["error"]["code"] == -32600, refused
            assert f"a line of more than {limit:,} bytes" in refused["error"]["message"], refused
            assert "--max-observation-bytes" in refused["error"]["message"]
        # the 64 MiB line was never held whole (before: read whole, then parsed; far over 64 MiB more)
        assert peak_memory_kib(server.process) - peak < 16 * 1024, (peak, peak_memory_kib(server.process))
        assert server.answer(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping"}).encode()) == {
            "jsonrpc": "2.0", "id": 5, "result": {}}
        assert server.process.stdin is not None and server.process.stdout is not None
        server.process.stdin.write(store_call(6, action="ls", observation="w" * 100_000))  # no LF: the input ends
    finally:
        code, err = server.close()
    assert code == 0 and "Traceback" not in err, err
    assert server.process.stdout is not None
    assert json.loads(server.process.stdout.read())["id"] == 6
    with DurableStore.open(tmp_path / "long.arc", readonly=True) as opened:
        assert [record.content for record in opened.state.records] == ["\x01" * 1000]


def test_an_id_cut_short_at_the_end_of_a_lines_start_is_not_taken() -> None:
    """A line too long to read is answered under the id read in its first 64 KiB: a number that reaches the end of
    that part may be cut short there (12 of 123) and is not taken; a string closed before it is whole."""
    from arc_ref.frontends.mcp_server import readable_id

    assert readable_id('{"jsonrpc":"2.0","id":12') == 12  # a whole text
    assert readable_id('{"jsonrpc":"2.0","id":12', cut=True) is None
    assert readable_id('{"jsonrpc":"2.0","id":12,', cut=True) == 12
    assert readable_id('{"jsonrpc":"2.0","id":"ab"', cut=True) == "ab"
    assert readable_id('{"jsonrpc":"2.0","id":"ab', cut=True) is None
