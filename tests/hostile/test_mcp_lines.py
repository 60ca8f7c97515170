"""`arc-ref mcp STORE` answers every line (issue 18, item 7), over a real subprocess speaking raw JSON-RPC.

Before: the MCP SDK's stdio reader dropped, with no answer, a line holding a lone-surrogate escape, an integer
of more than 4,300 digits, 50,000-deep nesting or a JSON-RPC batch (the client waited forever); it replaced
invalid UTF-8 with U+FFFD (the observation was stored as something that was not sent); and pydantic's lax
mode stored ``returncode: true`` as 1.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
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


HOSTILE: list[tuple[str, bytes, int, str]] = [
    ("lone surrogate", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"store_observation",'
                       b'"arguments":{"action":"ls","observation":"\\ud800"}}}', -32700, "a lone surrogate U+D800"),
    ("5,000-digit integer", store_call(2, action="ls", observation="x").replace(b'"x"', b"9" * 5000), -32700,
     "an integer literal of more than 4300 digits"),
    ("50,000-deep nesting", b'{"jsonrpc":"2.0","id":3,"method":"ping","params":' + b"[" * 50_000 + b"]" * 50_000
     + b"}", -32700, "nested too deeply"),
    ("batch", b"[" + store_call(4, action="ls", observation="x") + b"]", -32600, "batch is not supported"),
    ("invalid UTF-8", store_call(5, action="ls", observation="caf?").replace(b"caf?", b"caf\xe9"), -32700,
     "not UTF-8 text (invalid byte at offset"),
    ("no method", b'{"jsonrpc":"2.0","id":6}', -32600, "Invalid Request"),
]


class Server:
    """`arc-ref mcp` in a subprocess; one line written, one line read back."""

    def __init__(self, store: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(store)],
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
        for name, line, code, words in HOSTILE:
            answer = server.answer(line)
            assert answer.get("error", {}).get("code") == code, (name, answer)
            assert words in answer["error"]["message"], (name, answer)
            assert answer["id"] == (6 if name == "no method" else None), name
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
    assert sorted(answer["id"] for answer in answers if answer["id"] is not None) == [0, 1, 2, 3, 4, 5]
    assert sum(answer["id"] is None for answer in answers) == 1  # the hostile line's error
