"""The exit statuses of ``arc-ref``, every subcommand: the one table (spec/trace.md section 8, ``arc-ref --help``).

A command ends by returning ``OK`` or raising ``CommandFailed`` with one of these statuses and one line for
standard error; ``status_of`` maps the errors a store command meets to theirs (as h11's ``ProtocolError``
carries its ``error_status_hint``, a failure here carries its exit status).
"""

from __future__ import annotations

from arc_ref.errors import USAGE_STATUS, ArcError, ExitStatus
from arc_ref.json_limits import MAX_LINE_BYTES as MAX_LINE_BYTES  # the longest line `arc-ref replay` reads


OK = ExitStatus(0, "done: every input line was answered (malformed lines by error lines); also when the reader "
                   "of standard output goes away (a broken pipe): the command ends quietly; proxy: stopped by SIGTERM "
                   "or SIGHUP, every request in flight finished")
INSPECT_FAILED = ExitStatus(1, "inspect: no such record or page in a store that opened, or --verify found that the fold "
                          "of every row differs from the state opened; forget: a key named that is no conversation "
                          "(no proxy conversation of the database, or no folder's name in DIR), a conversation left "
                          "because a request held it or its store could not be locked, or one named with --idle-for "
                          "that is not idle (the others are forgotten; run it again)")
USAGE = ExitStatus(USAGE_STATUS, "usage: bad arguments, a trace file that cannot be opened, a configuration that is refused; "
                      "a store that is missing, corrupt or locked")
LINE_TOO_LONG = ExitStatus(3, f"replay: a line longer than {MAX_LINE_BYTES} bytes: answered by an error line, then "
                              "the replay stops")
IO = ExitStatus(4, "standard input or output is closed, or reading or writing failed (e.g. a full disk)")
INTERNAL = ExitStatus(70, "internal error: a bug in arc-ref, reported in one line on standard error")
HUNG_UP = ExitStatus(129, "proxy: a second signal, SIGHUP, while it drained: stopped at once, the requests in "
                          "flight cut")
INTERRUPTED = ExitStatus(130, "interrupted (Ctrl-C); proxy: every request in flight finished, or a second signal, "
                              "SIGINT, while it drained: stopped at once, the requests in flight cut")
TERMINATED = ExitStatus(143, "proxy: a second signal, SIGTERM, while it drained: stopped at once, the requests in "
                             "flight cut")

EXIT_STATUSES = (OK, INSPECT_FAILED, USAGE, LINE_TOO_LONG, IO, INTERNAL, HUNG_UP, INTERRUPTED, TERMINATED)


class CommandFailed(ArcError):
    """The one way an arc-ref command fails: its exit status and one line for standard error."""

    code = "command_failed"

    def __init__(self, status: ExitStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exit_status_hint = status.code


def status_numbered(code: int) -> ExitStatus:
    """The status of the table with this number (INTERNAL for a number the table does not hold: a bug)."""
    return next((status for status in EXIT_STATUSES if status.code == code), INTERNAL)


def status_of(error: Exception) -> ExitStatus:
    """The exit status of an error a command meets: an ``ArcError`` (a store, core, trace or command error) ends
    with the status it carries (``exit_status_hint``); a lookup in a store that opened is INSPECT_FAILED; a bad
    value USAGE; anything else INTERNAL (a bug)."""
    if isinstance(error, ArcError):
        return status_numbered(error.exit_status_hint)
    if isinstance(error, LookupError):
        return INSPECT_FAILED
    if isinstance(error, ValueError):
        return USAGE
    return INTERNAL


def exit_codes_help() -> str:
    """The table as ``arc-ref --help`` prints it."""
    rows = "\n".join(f"  {status.code:<4} {status.when}" for status in EXIT_STATUSES)
    return f"exit status:\n{rows}"
