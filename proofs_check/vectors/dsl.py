"""The vector DSL: the records a vector is made of and the builders the cases are written with.

A trace vector is input lines plus the features its output must show; a vector file (Wycheproof style) is
a header, notes and cases whose ``result`` an evaluator computes. Nothing here knows a particular case.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from arc_ref import ids
from arc_ref.store import action_signature

Outputs = list[dict[str, Any]]
Feature = tuple[str, Callable[[Outputs], bool]]
Json = Any


# --- trace vectors --------------------------------------------------------------------------------


@frozen
class TraceVector:
    """One replay trace: its input lines and the features its expected output must show."""

    name: str
    description: str
    lines: tuple[str, ...]
    features: tuple[Feature, ...]


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
    header: tuple[str, ...]
    notes: Mapping[str, str]
    cases: tuple[Case, ...]
    evaluate: Callable[[Mapping[str, Json]], Json]


def cases(*items: tuple[str, tuple[str, ...], Mapping[str, Json]]) -> tuple[Case, ...]:
    """Cases from (comment, flags, inputs) triples."""
    return tuple(Case(comment, flags, inputs) for comment, flags, inputs in items)
