"""The vector DSL: the records a vector is made of and the builders the cases are written with.

A trace vector is input lines plus the features its output must show; a vector file (Wycheproof style) is
a header, notes and cases whose ``result`` an evaluator computes. Nothing here knows a particular case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from arc_ref import ids
from arc_ref.store import action_signature
from proofs_check.registry import STATEMENTS

Outputs = list[dict[str, Any]]
Feature = tuple[str, Callable[[Outputs], bool]]
Json = Any

# What a vector pins: a numbered statement of the appendix (spec/statements.md: "A1", "L4", "T1") or a
# numbered section of the behaviour spec ("rendering.md §11.2", "trace.md §3"). tests/test_spec.py checks
# that every section named exists.
SECTION_REFERENCE = re.compile(r"(?P<file>rendering|trace)\.md §(?P<section>[0-9]+(?:\.[0-9]+)*)")


def check_statements(owner: str, statements: tuple[str, ...]) -> tuple[str, ...]:
    """The references a vector pins, refused when empty, repeated, or neither a statement key nor a § section."""
    if not statements:
        raise ValueError(f"{owner}: a vector names at least one statement it pins")
    if len(set(statements)) != len(statements):
        raise ValueError(f"{owner}: a statement is named twice in {statements}")
    for reference in statements:
        if reference not in STATEMENTS and not SECTION_REFERENCE.fullmatch(reference):
            raise ValueError(
                f"{owner}: {reference!r} is neither a statement key ({', '.join(STATEMENTS)})"
                " nor a section reference such as 'rendering.md §11.2' or 'trace.md §3'"
            )
    return statements


# --- trace vectors --------------------------------------------------------------------------------


@frozen
class TraceVector:
    """One replay trace: the statements it pins, its input lines and the features its output must show."""

    name: str
    statements: tuple[str, ...]
    description: str
    lines: tuple[str, ...]
    features: tuple[Feature, ...]
    needs: tuple[str, ...] = ()  # paths the replay must find, relative to its working directory (the repo root)

    def missing(self) -> list[str]:
        """The paths this trace needs that are absent from the working directory (its reason to be skipped)."""
        return [path for path in self.needs if not Path(path).exists()]

    def __attrs_post_init__(self) -> None:
        check_statements(f"trace vector {self.name!r}", self.statements)


def line(op: str, **fields: Any) -> str:
    """One well-formed input line (UTF-8 kept, keys in the order given)."""
    return json.dumps({"op": op, **fields}, ensure_ascii=False)


def config(preset_name: str, **overrides: Any) -> str:
    return line("config", preset=preset_name, **overrides)


def obs(action: str, observation: str, returncode: int | None = None) -> str:
    if returncode is None:
        return line("observe", action=action, observation=observation)
    return line("observe", action=action, observation=observation, returncode=returncode)


def agent(thought: str, action: str) -> str:
    return line("agent", thought=thought, action=action)


def compact(reason: str) -> str:
    return line("compact", reason=reason)


def call(call_id: str, name: str, arguments: Any = None) -> dict[str, Any]:
    """One OpenAI tool call of a tool_turn line; ``arguments`` a JSON text, or a value written as one."""
    text_ = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text_}}


def tool_turn(thought: str, *calls: dict[str, Any]) -> str:
    return line("tool_turn", thought=thought, calls=list(calls))


def tool_result(call_id: str, observation: str, returncode: int | None = None) -> str:
    if returncode is None:
        return line("tool_result", call_id=call_id, observation=observation)
    return line("tool_result", call_id=call_id, observation=observation, returncode=returncode)


def user(content: str) -> str:
    """A user message after the goal (tool mode)."""
    return line("user", content=content)


VIEW = line("view")


def make_id(index: int, action: str, observation: str, capacity: int = 24, fingerprint_bits: int = 3) -> str:
    """The printed id the reference gives occurrence ``index`` (defaults: the minimal preset's scheme)."""
    return ids.IdScheme(capacity, fingerprint_bits).make(index, action_signature(action), observation)


def with_fingerprint(obs_id: str, digit: str) -> str:
    """``obs_id`` with its fingerprint replaced (a typo in the fingerprint part)."""
    return obs_id.partition("-")[0] + "-" + digit


def other_digit(digit: str) -> str:
    """A fingerprint of the minimal scheme (d = 3: one digit, 0-7) different from ``digit``."""
    return str((int(digit) + 1) % 8)


# --- Wycheproof-style vector files ----------------------------------------------------------------


@frozen
class Case:
    comment: str
    flags: tuple[str, ...]
    inputs: Mapping[str, Json]


@frozen
class VectorFile:
    """A Wycheproof-style file: ``evaluate(inputs)`` is the reference computation of ``result``."""

    name: str
    algorithm: str
    statements: tuple[str, ...]
    header: tuple[str, ...]
    notes: Mapping[str, str]
    cases: tuple[Case, ...]
    evaluate: Callable[[Mapping[str, Json]], Json]

    def __attrs_post_init__(self) -> None:
        check_statements(f"vector file {self.name!r}", self.statements)


def cases(*items: tuple[str, tuple[str, ...], Mapping[str, Json]]) -> tuple[Case, ...]:
    """Cases from (comment, flags, inputs) triples."""
    return tuple(Case(comment, flags, inputs) for comment, flags, inputs in items)
