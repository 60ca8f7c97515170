"""Typed errors: one root, ``ArcError``, for every error arc_ref raises on purpose.

An illegal transition raises one of these and leaves the state unchanged. As h11 gives each protocol error a
status hint, every ``ArcError`` names itself and says how a front end answers it:

- ``code``: a short stable name for a machine (the proxy's ``error.code``, a log);
- ``exit_status_hint``: the exit status an ``arc-ref`` command ends with (a number of the one table,
  ``arc_ref.frontends.exit_status``; 2 = usage: bad input or a configuration refused);
- ``http_status_hint``: the HTTP status a server answers it with (400: the request is refused).

Front ends map an error by these, never by its class name.
"""

from __future__ import annotations

from attrs import frozen

USAGE_STATUS = 2  # arc_ref.frontends.exit_status.USAGE: bad input, a configuration or a store refused


class ArcError(Exception):
    """Base class of every error arc_ref raises on purpose (the core, the trace, the store, the front ends)."""

    code: str = "arc_error"
    exit_status_hint: int = USAGE_STATUS
    http_status_hint: int = 400


class ConfigError(ArcError):
    """A configuration that cannot satisfy the appendix' assumptions (e.g. K > L), or a missing tokenizer."""

    code = "configuration"


class CapacityExceeded(ArcError):
    """A1: storing one more observation would exceed the declared capacity N_max."""

    code = "capacity"


class InvalidEvent(ArcError):
    """An event whose fields are malformed (wrong type, out-of-range return code, unknown reason)."""

    code = "invalid_event"


@frozen
class ExitStatus:
    """One exit status of a command-line program: its number and when the program ends with it (each program
    defines its statuses in one table: ``arc_ref.frontends.exit_status``, ``arc_eval.errors``)."""

    code: int
    when: str


class BudgetViolation(ArcError):
    """Internal: a component or the whole view would exceed its budget. Never yields an over-long prompt."""

    code = "budget"
