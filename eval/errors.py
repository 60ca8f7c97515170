"""The errors of ``arc-eval`` and its exit statuses: one root (``EvalError``), one table (``EXIT_STATUSES``).

Every error the evaluation layer raises on purpose is an ``EvalError`` that carries the exit status the
command ends with (as h11's ``ProtocolError`` carries its ``error_status_hint``); the core's ``ConfigError``
(a configuration refused) ends with ``USAGE`` too. ``arc-eval`` maps an error to its status through
``status_of`` and prints one line, never a traceback. The table is documented in README.md ("Exit statuses").
"""

from __future__ import annotations

from typing import ClassVar

from arc_ref.errors import ArcError, ExitStatus

OK = ExitStatus(0, "done: the run finished (or had nothing left to do), the report or bench was written")
USAGE = ExitStatus(2, "bad input: bad arguments, a configuration a method or the core refuses, a run directory "
                      "that holds another run or is damaged, LongBench data missing or malformed, run directories a report cannot read (missing or malformed "
                      "records, an unknown preset or method); nothing is run or written")
SERVER_STOPPED = ExitStatus(3, "the server stopped the run: before the first task (wrong model, missing key, tool "
                               "mode off, a window below --context-limit, no answer; nothing is written) or during "
                               "it (unavailable after retries, a refusal, a malformed answer; finished tasks are "
                               "kept); rerun the same command after the fix")
INTERRUPTED = ExitStatus(130, "interrupted (Ctrl-C, SIGINT); finished tasks are kept, the same command continues")
TERMINATED = ExitStatus(143, "terminated (SIGTERM); finished tasks are kept, the same command continues")

EXIT_STATUSES = (OK, USAGE, SERVER_STOPPED, INTERRUPTED, TERMINATED)


class EvalError(Exception):
    """The root of every error the evaluation layer raises on purpose; ``exit_status`` is the status it ends with."""

    exit_status: ClassVar[ExitStatus] = USAGE


class InvalidInput(EvalError, ValueError):
    """A value a caller gave that cannot be used (an argument out of range, a malformed request); a ValueError too."""


def status_of(error: BaseException) -> ExitStatus:
    """The exit status an error ends ``arc-eval`` with: its own (``EvalError``), USAGE for a configuration the core
    refuses (``arc_ref.errors.ArcError``), INTERRUPTED for Ctrl-C."""
    if isinstance(error, EvalError):
        return error.exit_status
    if isinstance(error, KeyboardInterrupt):
        return INTERRUPTED
    if isinstance(error, ArcError):
        return USAGE
    raise TypeError(f"no exit status for {type(error).__name__}: a bug in arc-eval") from error
