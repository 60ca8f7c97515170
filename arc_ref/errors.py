"""Typed errors. An illegal transition raises one of these and leaves the state unchanged."""

from __future__ import annotations

from attrs import frozen


class ArcError(Exception):
    """Base class of every error the reference core raises on purpose."""


class ConfigError(ArcError):
    """A configuration that cannot satisfy the appendix' assumptions (e.g. K > L), or a missing tokenizer."""


class CapacityExceeded(ArcError):
    """A1: storing one more observation would exceed the declared capacity N_max."""


class InvalidEvent(ArcError):
    """An event whose fields are malformed (wrong type, out-of-range return code, unknown reason)."""


@frozen
class ExitStatus:
    """One exit status of a command-line program: its number and when the program ends with it (each program
    defines its statuses in one table: ``arc_ref.frontends.exit_status``, ``arc_eval.errors``)."""

    code: int
    when: str


class BudgetViolation(ArcError):
    """Internal: a component or the whole view would exceed its budget. Never yields an over-long prompt."""
