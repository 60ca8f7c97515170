"""The text-action protocol: system prompt and the documented reply-parsing rule."""

from __future__ import annotations

import json

import pytest

from arc_eval.protocol import (
    SYSTEM_PROMPT,
    command_tool_spec,
    is_submission,
    parse_reply,
    recall_tool_specs,
    submitted_text,
    system_prompt,
    tool_call_to_action,
)


def test_system_prompt_lists_every_task_tool_and_the_reply_format() -> None:
    for tool in ("ls", "cat FILE", "head FILE N", "grep PATTERN FILE", "read FILE PAGE", "submit ANSWER"):
        assert tool in SYSTEM_PROMPT
    assert "Thought:" in SYSTEM_PROMPT and "Action:" in SYSTEM_PROMPT


def test_method_instructions_are_appended() -> None:
    assert system_prompt() == SYSTEM_PROMPT
    combined = system_prompt("  _recall §id brings it back  ")
    assert combined.startswith(SYSTEM_PROMPT) and combined.endswith("_recall §id brings it back")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thought: read it\nAction: cat secrets.txt", ("read it", "cat secrets.txt")),
        ("Thought: a\nAction: `head a.txt 3`", ("a", "head a.txt 3")),
        ("**Thought:** bold\n**Action:** ls", ("bold", "ls")),
        ("Thought: fenced\nAction:\n```\ngrep x a.txt\n```", ("fenced", "grep x a.txt")),
        ("<think>long reasoning\nAction: ls</think>Thought: t\nAction: read c.txt 2", ("t", "read c.txt 2")),
        ("Thought: first\nAction: ls\nThought: second\nAction: cat b.txt", ("second", "cat b.txt")),
        ("I will list the files.\nls", ("I will list the files.", "ls")),
        ("Let me recall it.\n_recall §0001-ab", ("Let me recall it.", "_recall §0001-ab")),
        ("Thought: recall\nAction: _recall §0001-ab", ("recall", "_recall §0001-ab")),
        ("Thought: next\nAction: **_recall-next §0001-ab**", ("next", "_recall-next §0001-ab")),
        ("action: $ cat a.txt", ("", "cat a.txt")),
        ("I have no idea what to do.", ("I have no idea what to do.", "")),
        ("", ("", "")),
    ],
)
def test_parse_reply_rule(text: str, expected: tuple[str, str]) -> None:
    assert parse_reply(text) == expected


def test_parse_reply_takes_one_line_only() -> None:
    thought, action = parse_reply("Thought: x\nAction: cat a.txt\nObservation: made up\nmore")
    assert (thought, action) == ("x", "cat a.txt")


def test_submissions() -> None:
    assert is_submission("submit NEEDLE=ABC") and is_submission("SUBMIT x")
    assert not is_submission("cat submit.txt")
    assert submitted_text("submit  The correct answer is (B) ") == "The correct answer is (B)"
    assert submitted_text("submit") == ""


def test_tool_specs_round_trip_to_text_actions() -> None:
    specs = recall_tool_specs()
    names = [spec["function"]["name"] for spec in specs]
    assert names[:2] == ["_recall", "_recall-next"] and "catalog-page" in names
    assert json.loads(json.dumps(specs)) == specs
    assert tool_call_to_action("_recall", '{"id": "§0001-ab"}', ["id"]) == "_recall §0001-ab"
    assert tool_call_to_action("catalog-page", {"page": 2}) == "catalog-page 2"
    assert tool_call_to_action("catalog-next", "") == "catalog-next"
    assert tool_call_to_action("_recall", "§0002-cd") == "_recall §0002-cd"  # not JSON: one positional value
    with pytest.raises(ValueError):
        command_tool_spec("bad name", "x", ())
