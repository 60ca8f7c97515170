"""How the scripted agent answers a condensing request (``llm_summary``'s summary, ``structured_state``'s state).

Both variants write one entry per folded turn (the action, its return code, its size, its first and last
line). The ``fair`` variant also does what the request's own instructions ask ("exact values (names,
numbers, identifiers, tokens) copied verbatim"; "add exact values to facts"): every line of the
observation that holds an exact value and does not mark itself as noise is copied verbatim, after the line
that introduces it. Rules: ``eval/METHODS.md`` ("The scripted agent").
"""

from __future__ import annotations

import json
import re
from typing import Any

from attrs import frozen

from arc_eval.methods.llm_summary import NO_SUMMARY_YET, SUMMARY_REQUEST, parse_turns
from arc_eval.methods.structured_state import STATE_REQUEST
from arc_eval.protocol import parse_reply

EXCERPT_CHARS = 160
# At most this many exact-value lines are copied per folded observation (a summary entry, not a copy).
MAX_VALUE_LINES = 5
NOISE_RE = re.compile(r"\bnoise\b", re.IGNORECASE)
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_PUNCTUATION = "()[]{}<>,;:\"'`"


def _excerpt(line: str) -> str:
    line = line.strip()
    return line if len(line) <= EXCERPT_CHARS else line[: EXCERPT_CHARS - 3] + "..."


def first_last_lines(text: str) -> tuple[str, str, int]:
    """First and last non-empty lines of an observation, and its number of lines."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "", "", 0
    return _excerpt(lines[0]), _excerpt(lines[-1]), len(lines)


def marks_itself_as_noise(line: str) -> bool:
    """A line that says it is noise (the word "noise", any case)."""
    return NOISE_RE.search(line) is not None


def is_exact_value(word: str) -> bool:
    """``NAME=VALUE``, or a token of 4+ characters holding a digit (numbers, ids, dated or numbered names):
    what a paraphrase loses."""
    word = word.strip(_PUNCTUATION)
    if "=" in word:
        name, _, value = word.partition("=")
        return _NAME_RE.fullmatch(name) is not None and bool(value)
    return len(word) >= 4 and any(character.isdigit() for character in word)


def holds_exact_value(line: str) -> bool:
    return any(is_exact_value(word) for word in line.split())


@frozen
class ValueLine:
    number: int  # 1-based line number in the observation
    heading: str | None  # the line that introduces it (the nearest non-empty line above), when it is one
    line: str


def value_lines(text: str, limit: int = MAX_VALUE_LINES) -> list[ValueLine]:
    """The first ``limit`` lines holding an exact value and not marked as noise, each with its heading:
    the nearest non-empty line above it when that line is neither noise nor a value line itself."""
    lines = text.split("\n")
    found: list[ValueLine] = []
    for index, line in enumerate(lines):
        if len(found) >= limit:
            break
        if not line.strip() or marks_itself_as_noise(line) or not holds_exact_value(line):
            continue
        above = next((lines[j] for j in range(index - 1, -1, -1) if lines[j].strip()), None)
        heading = above if above is not None and not marks_itself_as_noise(above) and not holds_exact_value(above) \
            else None
        found.append(ValueLine(index + 1, heading, line))
    return found


def folded_turns(body: str) -> list[tuple[str, int, str]]:
    """(action, return code, observation text) of each turn in a condensing request's body."""
    turns: list[tuple[str, int, str]] = []
    for folded in parse_turns(body):
        if folded.action is not None:
            turns.append((folded.action, folded.returncode, folded.text))
        else:
            _thought, action = parse_reply(folded.assistant)
            turns.append((action, 0, ""))
    return turns


def write_summary(request: str, copy_values: bool) -> str:
    """The new running summary: the current one, then one entry per folded turn (with its exact-value
    lines, indented, when ``copy_values``)."""
    fields = SUMMARY_REQUEST.parse(request)
    if fields is None:
        return ""
    current = str(fields["current"]).strip()
    lines = [current] if current and current != NO_SUMMARY_YET else []
    for action, returncode, text in folded_turns(str(fields["body"])):
        first, last, count = first_last_lines(text)
        lines.append(f"- `{action}` (rc={returncode}, {count} lines) first: {first} | last: {last}")
        if copy_values:
            for value in value_lines(text):
                if value.heading is not None:
                    lines.append(f"    {value.heading}")
                lines.append(f"    {value.line}")
    return "\n".join(lines)


def write_state(request: str, fill_facts: bool) -> str:
    """The new JSON state: ``done`` and ``sources`` per folded turn; with ``fill_facts``, ``facts`` gets
    each exact-value line verbatim under its heading (or ``ACTION line N``)."""
    fields = STATE_REQUEST.parse(request)
    state: dict[str, Any] = {}
    if fields is not None:
        try:
            loaded = json.loads(str(fields["current"]))
            state = loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            state = {}
    done = list(state.get("done", [])) if isinstance(state.get("done"), list) else []
    sources = dict(state.get("sources", {})) if isinstance(state.get("sources"), dict) else {}
    facts = dict(state.get("facts", {})) if isinstance(state.get("facts"), dict) else {}
    for action, returncode, text in folded_turns(str(fields["body"]) if fields is not None else ""):
        first, last, count = first_last_lines(text)
        done.append(f"`{action}` -> rc={returncode}, {count} lines")
        sources[action] = f"first: {first} | last: {last}"
        if fill_facts:
            for value in value_lines(text):
                name = value.heading.strip() if value.heading is not None else f"`{action}` line {value.number}"
                if facts.get(name, value.line) != value.line:
                    name = f"{name} (`{action}` line {value.number})"
                facts[name] = value.line
    state["done"] = done
    state["sources"] = sources
    if fill_facts:
        state["facts"] = facts
    state["next_step"] = "continue the plan of the task"
    return json.dumps(state, ensure_ascii=False)
