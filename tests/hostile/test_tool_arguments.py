"""Tool call arguments the server cannot read back (issue 18, item 5): refused as an event, never a crash.

Before: arguments nesting 100,000 deep or holding a 5,000-digit integer raised RecursionError / ValueError out of
`Session.add_assistant` (the chat template's json.loads), and `arc-ref replay` of such a tool_turn line exited 70
without answering the next line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from arc_ref.errors import InvalidEvent
from arc_ref.session import Session
from arc_ref.json_limits import MAX_INTEGER_DIGITS, MAX_NESTING
from arc_ref.tools import arguments_problem
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INTEGER = '{"id": ' + "9" * 5000 + "}"
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


def _qwen3() -> str:
    directory = qwen3_dir()
    if directory is None:
        pytest.skip(QWEN3_ABSENT)
    return f"hf-dir:{directory}"


def _call(name: str, arguments: str) -> dict[str, object]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def test_the_limits_are_exact() -> None:
    """Nesting up to the limit and integers up to 4,300 digits pass; one more is refused; digits that are
    not an integer literal (a string, a fraction, an exponent) are not counted."""
    assert arguments_problem("[" * MAX_NESTING + "]" * MAX_NESTING) is None
    assert arguments_problem("[" * (MAX_NESTING + 1)) == (
        f"its arguments are nested {MAX_NESTING + 1} levels deep (at most {MAX_NESTING})")
    assert arguments_problem('"' + "[" * 1000 + '"') is None  # brackets inside a string do not nest
    assert arguments_problem('["\\"' + "[" * 1000 + '"]') is None  # nor after an escaped quote
    digits = "9" * MAX_INTEGER_DIGITS
    assert arguments_problem(f'{{"n": {digits}}}') is None
    assert arguments_problem(f'{{"n": -{digits}9}}') == (
        f"its arguments hold an integer of {MAX_INTEGER_DIGITS + 1} digits (at most {MAX_INTEGER_DIGITS})")
    for fine in (f'{{"n": "{digits}99"}}', f'{{"n": 0.{digits}99}}', f'{{"n": 1e-{digits}99}}'):
        assert arguments_problem(fine) is None, fine[:20]


@pytest.mark.parametrize("name", ["bash", "_recall"])
@pytest.mark.parametrize("arguments, words", [(DEEP, "are nested 100000 levels deep"),
                                              (HUGE_INTEGER, "hold an integer of 5000 digits")])
def test_add_assistant_refuses_unreadable_arguments_and_keeps_the_session(name: str, arguments: str,
                                                                          words: str) -> None:
    session = Session(_qwen3(), goal="Solve it.", tools=TOOLS)
    before = session.messages()
    with pytest.raises(InvalidEvent, match=f"tool call 'c1' cannot be read back: its arguments {words}"):
        session.add_assistant(_call(name, arguments))
    assert session.messages() == before  # nothing recorded
    session.add_assistant(_call("bash", '{"cmd": "ls"}'))  # the session goes on
    session.add_tool_result("c1", "a.txt")
    assert "a.txt" in session.messages()[-1]["content"]


def test_replay_answers_the_line_with_an_error_and_goes_on() -> None:
    directory = _qwen3()
    config = {"op": "config", "preset": "minimal", "tokenizer": directory, "chat_format": "template",
              "action_mode": "tools", "tools": TOOLS, "context_limit": 3000}
    lines = [json.dumps(config)]
    for arguments in (DEEP, HUGE_INTEGER):
        lines.append(json.dumps({"op": "tool_turn", "thought": "", "calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": arguments}}]}))
    lines.append('{"op": "view"}')
    done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [answer["op"] for answer in answers] == ["config", "error", "error", "view"]
    assert "are nested 100000 levels deep" in answers[1]["message"]
    assert "an integer of 5000 digits" in answers[2]["message"]
