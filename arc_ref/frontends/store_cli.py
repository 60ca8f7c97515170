"""The store's subcommands of `arc-ref` (wired in by `arc_ref.frontends.cli`):

    arc-ref inspect STORE [--catalog [N] | --record ID | --events | --view] [--verify]
    arc-ref export STORE                  the rows as a replay trace (spec/trace.md), to standard output
    arc-ref copy STORE NEW                every row export reads, into a new store NEW (a read-only store's way on)
    arc-ref mcp STORE [--preset NAME] [--set KEY=VALUE ...]   serve ARC's tools over MCP (stdio)
    arc-ref forget postgresql://... [KEY ...] [--created-before TIME | --older-than DAYS | --idle-for DAYS] [--dry-run]
    arc-ref forget DIR [KEY ...] [--idle-for DAYS] [--dry-run]
                                          remove whole proxy conversations (arc_ref.persist.postgres_forget,
                                          arc_ref.persist.directory_forget)

A missing, corrupt or locked store is one clear line on standard error and exit status 2, never a traceback;
no such record, page or row is status 1; standard output closed or failing (a full disk) is status 4: the statuses
of `arc_ref.frontends.exit_status`, the one table.
What they write is UTF-8 whatever the locale or PYTHONIOENCODING says (store lines are UTF-8 text).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import importlib.util
import json
import math
import os
import re
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import attrs

from arc_ref.catalog import page_count, render_page
from arc_ref.config import MAX_CONFIG_INTEGER, PRESETS, Config, preset
from arc_ref.errors import ArcError
from arc_ref.frontends.exit_status import INSPECT_FAILED, INTERRUPTED, IO, OK, CommandFailed, status_of
from arc_ref.frontends.streams import silence_stdout
from arc_ref.json_limits import MAX_LINE_BYTES, MAX_OBSERVATION_BYTES
from arc_ref.machine import ArcState, Event, view
from arc_ref.options import integer_parser, unique_settings
from arc_ref.persist import DurableStore, StoreError, StoreNotFound, read_rows
from arc_ref.persist.acknowledgement import ACK_SUFFIX
from arc_ref.persist.errors import StoreExists
from arc_ref.persist.lock import process_exists
from arc_ref.persist.store import SQLITE_LOGS, link_into_place, refuse_leftover_logs
from arc_ref.persist.postgres import Store, is_database_url, create_store, open_store, shown_url
from arc_ref.persist.rows import fold_rows, read_row
from arc_ref.recall import chunk_count
from arc_ref.view import VIEW_COMPONENTS, verify_tokens

STORE_COMMANDS = ("inspect", "export", "copy", "mcp", "forget")
EVENT_LINE_CHARS = 160  # --events clips each line to this many characters unless --full
# The bounds of inspect's numbers (issue 31): a store's rows are numbered by SQLite's signed 64-bit integer; a
# catalog has at most as many pages as the store holds observations, at most the core's 2^31 - 1.
MAX_ROW = 2**63 - 1
COPY_BATCH = 512  # events stepped and committed together by `arc-ref copy`
COPY_PROGRESS_S = 5.0  # a progress line on standard error at most this often while a copy (or a forget) runs
MAX_DAYS = 100_000  # forget --older-than: at most this many days (review h22 F1: past ~739,000 the time was BC)


def add_commands(commands: "argparse._SubParsersAction[Any]",
                 parse_setting: Callable[[str], tuple[str, object]]) -> None:
    """Add inspect, export and mcp to the `arc-ref` parser."""
    inspect = commands.add_parser("inspect", help="look into a durable store (readers may run beside its writer)")
    inspect.add_argument("store", help="path of the store")
    shown = inspect.add_mutually_exclusive_group()
    shown.add_argument("--catalog", nargs="?", type=integer_parser(0, MAX_CONFIG_INTEGER), const=0, metavar="PAGE",
                       help=f"a catalog page, 1 to {MAX_CONFIG_INTEGER} (default, or 0: the last)")
    shown.add_argument("--record", metavar="ID",
                       help="one stored observation: a line of metadata, then its exact content (no newline added)")
    shown.add_argument("--events", action="store_true", help="the event log: row, checksum, line")
    shown.add_argument("--view", action="store_true", help="the current view (control characters but newline and"
                       " tab shown as \\xNN), then its budget audit")
    inspect.add_argument("--from", dest="start", type=integer_parser(1, MAX_ROW), default=None, metavar="ROW",
                         help=f"--events: first row (default 1; 1 to {MAX_ROW})")
    inspect.add_argument("--count", type=integer_parser(0, MAX_ROW), default=None,
                         help=f"--events: number of rows (default: every one; 0 to {MAX_ROW})")
    inspect.add_argument("--full", action="store_true", help="--events: whole lines, not clipped")
    inspect.add_argument("--verify", action="store_true",
                         help="also fold every row without the snapshot and check that both states agree")
    inspect.__class__ = type("InspectParser", (_EventsOptionsNeedEvents, type(inspect)), {})
    export = commands.add_parser("export", help="write a store's events as a replay trace (spec/trace.md)")
    export.add_argument("store", help="path of the store")
    copy = commands.add_parser("copy", help="copy every row export reads into a new store (how a store that stays"
                                            " read-only goes on)")
    copy.add_argument("store", help="path of the store (or postgresql://.../DB#KEY)")
    copy.add_argument("new", help="path of the new store (must not exist); built as .NEW.copying-PID-HEX beside it,"
                                  " whose files a copy killed with SIGKILL leaves: the next copy to NEW removes them")
    mcp = commands.add_parser("mcp", help="serve ARC's store and recall tools over MCP (stdio) on a store")
    mcp.add_argument("store", help="path of the store (created when absent, with --preset and --set)")
    mcp.add_argument("--preset", choices=sorted(PRESETS), default=None, help="for a new store (default: paper)")
    mcp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="for a new store")
    mcp.add_argument("--max-observation-bytes", type=integer_parser(0, MAX_LINE_BYTES), default=MAX_OBSERVATION_BYTES,
                     metavar="N", help="the largest output store_observation takes, in bytes of UTF-8, refused before"
                     f" it is tokenized (default {MAX_OBSERVATION_BYTES} = 8 MiB; 0 to {MAX_LINE_BYTES}, the row"
                     " limit); a line of input is read up to 6 N bytes (an output however JSON escapes it), at"
                     " most the row limit, plus 65536 for the rest of the call: a longer one is answered -32600 and"
                     " dropped without being held whole")
    mcp.set_defaults(parse_setting=parse_setting)
    forget = commands.add_parser("forget", help="remove whole proxy conversations (rows, marks, kept reply) from the"
                                                " proxies' --store: a retention time, or forks left by racing requests")
    forget.add_argument("store", help="the proxies' --store: postgresql://... or a directory (keys only)")
    forget.add_argument("keys", nargs="*", metavar="KEY",
                        help="conversations to forget (the x-arc-conversation header); none: every one the time picks")
    when = forget.add_mutually_exclusive_group()
    when.add_argument("--created-before", type=_timestamp, metavar="TIME",
                      help="only conversations created before TIME (ISO 8601; UTC unless it names a zone)")
    when.add_argument("--older-than", type=_days, metavar="DAYS",
                      help="only conversations created more than DAYS days ago (the database's clock; 0.5 = 12 h)")
    when.add_argument("--idle-for", type=_days, metavar="DAYS",
                      help="only conversations no request committed to for DAYS days (the database's clock; a"
                           " directory: its files' times): a retention that spares the conversations still in use")
    forget.add_argument("--dry-run", action="store_true",
                        help="list what would be forgotten (key, created, rows), remove nothing")
    forget.__class__ = type("ForgetParser", (_KeysAfterOptions, type(forget)), {})


class _KeysAfterOptions(argparse.ArgumentParser):
    """A parser whose words left over after its options are more KEYs: `forget STORE --dry-run KEY` (review h22 F10:
    argparse gave its positionals out before the option, and refused KEY); an unknown option is still refused."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra and not any(word.startswith("-") for word in extra):
            parsed.keys = [*parsed.keys, *extra]
            extra = []
        return parsed, extra


class _EventsOptionsNeedEvents(argparse.ArgumentParser):
    """inspect's parser: --from, --count and --full choose rows of --events; without it they are refused (review
    h24 nit N-a: `inspect STORE --from 5` printed the overview, the flag silently ignored)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        if not parsed.events:
            given = [flag for flag, value in (("--from", parsed.start), ("--count", parsed.count),
                                              ("--full", parsed.full or None)) if value is not None]
            if given:
                self.error(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with --events (the rows it"
                           " shows); add --events")
        return parsed, extra


def _timestamp(text: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r} (e.g. 2026-10-01 or 2026-10-01T12:00Z)"
                                         ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    if not math.isfinite(days) or days < 0 or days > MAX_DAYS:
        raise argparse.ArgumentTypeError(f"a number of days from 0 to {MAX_DAYS:,}, got {text!r}")
    return days


class OutputFailed(ArcError):
    """Standard output is closed or a write to it failed (exit status 4, ``arc_ref.frontends.exit_status.IO``)."""

    code = "output_failed"
    exit_status_hint = IO.code


def run(arguments: argparse.Namespace) -> int:
    """Run one of STORE_COMMANDS; a problem is one line on standard error and its status of the one table
    (``arc_ref.frontends.exit_status.status_of``: USAGE for a store that cannot be opened, INSPECT_FAILED for no such
    record, page or row in a store that opened, IO when standard output is closed or failing)."""
    name = arguments.command
    try:
        if name == "inspect":
            status = _inspect(arguments)
        elif name == "export":
            status = _export(arguments.store)
        elif name == "copy":
            status = _copy(arguments.store, arguments.new)
        elif name == "forget":
            status = _forget(arguments)
        else:
            return _mcp(arguments)
        _flush()
        return status
    except OutputFailed as problem:
        silence_stdout()  # so that the interpreter's last flush cannot fail again
        raise CommandFailed(status_of(problem), f"arc-ref {name}: {problem}") from None
    except (ArcError, ValueError, LookupError) as problem:  # ValueError: a bad --set
        text = problem.args[0] if isinstance(problem, LookupError) and problem.args else problem
        raise CommandFailed(status_of(problem), f"arc-ref {name}: {text}") from None


# --- standard output: UTF-8 bytes, a failed write is OutputFailed ------------------------------------


def _stdout() -> BinaryIO:
    if sys.stdout is None:
        raise OutputFailed("standard output is closed; nothing can be written")
    return sys.stdout.buffer


def _counted(count: int, noun: str) -> str:
    """``1 event``, ``2 events``, ``1,000 events``: a count and its noun, singular for one."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _emit(text: str) -> None:
    """Write ``text`` as UTF-8 (a reader that went away raises BrokenPipeError: arc-ref ends quietly, 0)."""
    try:
        _stdout().write(text.encode("utf-8"))
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as problem:  # ValueError: a closed stream
        raise OutputFailed(f"cannot write standard output: {getattr(problem, 'strerror', None) or problem}") \
            from None


def _flush() -> None:
    try:
        _stdout().flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as problem:
        raise OutputFailed(f"cannot write standard output: {getattr(problem, 'strerror', None) or problem}") \
            from None


# --- export -------------------------------------------------------------------------------------


def _export(path: str) -> int:
    _stdout()  # a closed standard output is refused before the store is read
    if is_database_url(path):  # a task of a PostgreSQL database: its rows checked, then written
        for line in open_store(path, readonly=True).export_lines():
            _emit(line + "\n")
        return OK.code
    for row in read_rows(path):  # a damaged row raises after every row before it was written
        _emit(row.line + "\n")
    return OK.code


# --- forget -------------------------------------------------------------------------------------


def _forget(arguments: argparse.Namespace) -> int:
    """Remove the chosen proxy conversations (`arc_ref.persist.postgres_forget`): with --dry-run only list them.
    A named key that is not a proxy conversation of the database is INSPECT_FAILED, after the others are done."""
    from arc_ref.persist.postgres import Database, split_task_url
    from arc_ref.persist.postgres_forget import FORGET_BATCH, chosen, forget

    if not is_database_url(arguments.store):
        return _forget_in_directory(arguments)
    url, fragment = split_task_url(arguments.store)
    if fragment is not None:
        raise StoreError(f"forget takes the database (the proxies' --store, without #KEY), got {arguments.store!r}")
    if not arguments.keys and arguments.created_before is None and arguments.older_than is None \
            and arguments.idle_for is None:
        raise StoreError("say what to forget: conversation keys, --created-before TIME, --older-than DAYS or"
                         " --idle-for DAYS")
    _stdout()  # a closed standard output is refused before anything is removed
    db = Database(url, pool_size=1, create_schema=False)  # (review h22 F2: it made ARC's tables in any database)
    try:
        created_before, active_before = arguments.created_before, None
        if arguments.older_than is not None or arguments.idle_for is not None:
            days = arguments.older_than if arguments.older_than is not None else arguments.idle_for
            with db.connection() as connection:
                # a day is 86,400 s, as for a directory: not the session's calendar day, which a daylight-saving
                # change makes 23 or 25 hours (review h34 F9)
                found = connection.execute("SELECT now() - %s * interval '86400 seconds'", (days,)).fetchone()
            assert found is not None
            if arguments.older_than is not None:
                created_before = found[0]
            else:
                active_before = found[0]
        conversations, unknown = chosen(db, arguments.keys, created_before, active_before)
        left: tuple[str, ...] = ()
        rows = sum(conversation.rows for conversation in conversations)
        if arguments.dry_run:
            for conversation in conversations:
                _emit(f"{conversation.key}\t{conversation.created.isoformat()}\t{conversation.rows} rows\n")
            _emit(f"would forget {len(conversations):,} conversation(s), {rows:,} rows\n")
        else:
            started = shown = time.monotonic()
            total = len(conversations)
            so_far = 0

            def progress(done: Any) -> None:
                nonlocal shown, so_far
                so_far = done.conversations
                if time.monotonic() - shown >= COPY_PROGRESS_S:
                    shown = time.monotonic()
                    print(f"arc-ref forget: {done.conversations:,} of {total:,} conversations forgotten"
                          f" ({shown - started:.0f} s)", file=sys.stderr, flush=True)

            with _said_if_interrupted(lambda: f"{so_far:,} of {total:,} conversations forgotten before it (each batch"
                                      f" of {FORGET_BATCH:,} is one transaction; the one under way was rolled back)"):
                done = forget(db, [conversation.key for conversation in conversations], created_before, progress,
                              active_before)
            _emit(f"forgot {done.conversations:,} conversation(s): {done.rows:,} rows, {done.marks:,} marks,"
                  f" {done.replies:,} kept replies\n")
            left = done.busy
            if done.busy:
                print(f"arc-ref forget: {len(done.busy):,} conversation(s) left, a request was committing to them:"
                      f" {', '.join(done.busy[:10])}{' ...' if len(done.busy) > 10 else ''}; run forget again",
                      file=sys.stderr, flush=True)
    finally:
        db.close()
    if unknown:
        _flush()
        raise LookupError(f"not a proxy conversation of {db.shown}"
                          f"{' created before ' + created_before.isoformat() if created_before else ''}"
                          f"{' idle since before ' + active_before.isoformat() if active_before else ''}:"
                          f" {', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}")
    return INSPECT_FAILED.code if left else OK.code  # (review h21 MINOR-2: a script sees that some were left)


def _forget_in_directory(arguments: argparse.Namespace) -> int:
    """`arc_ref.persist.directory_forget` on an `arc-ref proxy --store DIR` directory: conversations by key, or by
    their last commit (--idle-for)."""
    from arc_ref.persist.directory_forget import forget_in_directory, is_conversation_directory

    directory = Path(arguments.store)
    if not is_conversation_directory(directory):
        raise StoreError(f"forget takes a PostgreSQL store (postgresql://...) or an arc-ref proxy --store directory"
                         f" (one holding hashes.sqlite), got {arguments.store!r}")
    if arguments.created_before is not None or arguments.older_than is not None:
        raise StoreError("a --store directory records no creation time: name the conversations to forget (their"
                         " x-arc-conversation keys, the directory's folders), or choose them by --idle-for DAYS")
    if not arguments.keys and arguments.idle_for is None:
        raise StoreError("say what to forget: conversation keys (the directory's folders) or --idle-for DAYS")
    idle_before = None if arguments.idle_for is None else time.time() - arguments.idle_for * 86400
    _stdout()
    gone: list[str] = []
    with _said_if_interrupted(lambda: f"{len(gone):,} conversation(s) forgotten before it"
                              f"{': ' + ', '.join(gone[:10]) if gone else ''}{' ...' if len(gone) > 10 else ''} (the"
                              " one under way, if any, is finished by the next forget)"):
        done = forget_in_directory(directory, arguments.keys, arguments.dry_run, gone.append, idle_before)
    if arguments.dry_run:
        for key in done.conversations:
            _emit(f"{key}\n")
        _emit(f"would forget {len(done.conversations):,} conversation(s)\n")
    else:
        _emit(f"forgot {len(done.conversations):,} conversation(s): {done.index_rows:,} index rows\n")
        if done.busy:
            print(f"arc-ref forget: {len(done.busy):,} conversation(s) left, a proxy process holds them now:"
                  f" {', '.join(done.busy[:10])}{' ...' if len(done.busy) > 10 else ''}; run forget again",
                  file=sys.stderr, flush=True)
    if done.unlockable:
        _flush()
        print(f"arc-ref forget: {len(done.unlockable):,} conversation(s) left, their store cannot be locked: "
              + "; ".join(f"{key} ({why})" for key, why in done.unlockable[:10])
              + f"{' ...' if len(done.unlockable) > 10 else ''}", file=sys.stderr, flush=True)
    if done.links:
        _flush()
        print(f"arc-ref forget: a symbolic link, not a conversation folder of {str(directory)!r} (forget never follows"
              f" one; remove the link and its target by hand): {', '.join(done.links[:10])}"
              f"{' ...' if len(done.links) > 10 else ''}", file=sys.stderr, flush=True)
    if done.unknown:
        _flush()
        idle = "" if idle_before is None else f" idle for {arguments.idle_for:g} days"
        raise LookupError(f"not a conversation of {str(directory)!r}{idle}: {', '.join(done.unknown[:10])}"
                          f"{' ...' if len(done.unknown) > 10 else ''}")
    return INSPECT_FAILED.code if done.busy or done.links or done.unlockable else OK.code


def shown_path(path: str) -> str:
    """A store's path (or database URL) as a message shows it: as written when every character of it is printable,
    else quoted with its characters escaped as an error names it (review h24 nit N-g: a newline in a path broke the
    line of inspect's overview and of copy's report); a URL without its password."""
    if is_database_url(path):
        path = shown_url(path)
    return path if path.isprintable() else repr(path)


# --- copy ---------------------------------------------------------------------------------------


def _source_lines(source: str) -> Iterator[str]:
    """The rows of ``source`` in order, as `arc-ref export` reads them (a damaged row raises after the rows
    before it)."""
    if is_database_url(source):
        with open_store(source, readonly=True) as store:
            yield from store.export_lines()
    else:
        for row in read_rows(source):
            yield row.line


def _copy(source: str, new: str) -> int:
    """Copy every row `arc-ref export` reads from ``source`` into a new SQLite store ``new``: row 1's
    configuration, then the events, stepped by the core and committed COPY_BATCH at a time, then a snapshot.

    This is how a store that stays read-only goes on (spec/store.md: one whose snapshot SQLite cannot read, every
    acknowledged row still there): the copy has the same rows, ids and state, and a writer. The new store is
    built under a temporary name beside ``new``, linked into place only when complete and closed cleanly, then
    read back (its last row and checksum those written); a copy that fails, is interrupted (Ctrl-C, SIGTERM) or
    does not read back leaves nothing at ``new``. A copy killed with SIGKILL (which nothing can catch) leaves its
    temporary files, ``.NEW.copying-PID-HEX`` and the like: the next copy to ``new`` removes them
    (`remove_killed_copies`)."""
    if is_database_url(new):
        raise StoreError("arc-ref copy writes a new SQLite store: give a path for NEW")
    target = Path(new)
    if os.path.lexists(target):
        raise StoreExists(f"{new!r} already exists; choose a path where no store is")
    refuse_leftover_logs(target)
    removed = remove_killed_copies(target)
    if removed:
        print(f"arc-ref copy: removed the temporary files of {len(removed)} earlier copy(ies) to {shown_path(new)}"
              f" whose process is gone (killed): {', '.join(repr(name) for name in removed[:5])}"
              f"{' ...' if len(removed) > 5 else ''}", file=sys.stderr, flush=True)
    staging = target.with_name(f"{_copying_prefix(target)}{os.getpid()}-{secrets.token_hex(4)}")
    rows, store, linked = 0, None, False
    started = shown = time.monotonic()
    restore = _terminate_as_interrupt()
    try:
        batch: list[Event] = []
        for line in _source_lines(source):
            rows += 1
            value = read_row(rows, line, repr(source))  # StoreCorrupt naming a row that holds no event
            if store is None:  # row 1: read_row gives its configuration or raises
                assert isinstance(value, Config)
                store = DurableStore.create(staging, value)
                continue
            assert not isinstance(value, Config)  # read_row gives a configuration for row 1 only
            batch.append(value)
            if len(batch) >= COPY_BATCH:
                store.append_many(batch)
                batch = []
            if time.monotonic() - shown >= COPY_PROGRESS_S:
                shown = time.monotonic()
                print(f"arc-ref copy: {rows:,} rows copied ({shown - started:.0f} s)", file=sys.stderr, flush=True)
        if store is None:
            raise StoreError(f"{source!r} holds no rows")
        if batch:
            store.append_many(batch)
        written = (store.seq, store.checksum)
        store.close()  # a snapshot, and closed cleanly: the store opens by its new name without its .ack
        refuse_leftover_logs(target)  # (one may have appeared while the copy ran)
        link_into_place(staging, target, StoreExists(f"{new!r} was created by someone else while the copy ran"))
        linked = True
        os.replace(str(staging) + ACK_SUFFIX, str(target) + ACK_SUFFIX)
        with DurableStore.open(target, readonly=True) as copied:
            if (copied.seq, copied.checksum) != written:
                raise StoreError(f"{new!r} does not read back as written (row {copied.seq}, not {written[0]});"
                                 " it is removed")
        linked = False  # complete: kept
    except OSError as problem:
        raise StoreError(f"cannot create {new!r}: {problem.strerror}") from None
    except StoreError as problem:  # named by NEW, not by the temporary name it was being built under
        raise type(problem)(str(problem).replace(repr(str(staging)), repr(new))) from None
    finally:
        restore()
        if store is not None and not store.closed:
            store.close(snapshot=False)
        # the temporary store's files, and its acknowledgement record's own staging file when an interrupt came
        # while that record was being put in place (persist.acknowledgement.AckWriter: .NAME.ack-PID-THREAD)
        ack_staging = f".{staging.name}{ACK_SUFFIX}-"
        try:  # names compared as text: a store's name may hold characters glob would read as a pattern
            strays = [staging.parent / name for name in os.listdir(staging.parent) if name.startswith(ack_staging)]
        except OSError:
            strays = []
        for path in (*(Path(str(staging) + leftover) for leftover in ("", *SQLITE_LOGS, ACK_SUFFIX)), *strays):
            try:
                path.unlink()
            except OSError:
                pass
        if linked:  # linked into place by this copy, but the copy failed after: NEW is ours, and removed
            for leftover in ("", *SQLITE_LOGS, ACK_SUFFIX):
                try:
                    Path(str(target) + leftover).unlink()
                except OSError:
                    pass
    _emit(f"copied {_counted(rows, 'row')} (the config line and {_counted(rows - 1, 'event')}) from"
          f" {shown_path(source)} into {shown_path(new)}\n")
    return OK.code


def _copying_prefix(target: Path) -> str:
    """The start of the temporary name a copy to ``target`` builds the new store under (then PID-HEX)."""
    return f".{target.name}.copying-"


_COPY_KEY = re.compile(r"[0-9]+-[0-9a-f]{8}(?=$|[-.])")  # PID-HEX, then the end of the name, -wal, .ack, ...


def remove_killed_copies(target: Path) -> list[str]:
    """Remove the files an earlier copy to ``target`` left when it was killed with SIGKILL (or the machine stopped):
    its temporary store ``.NAME.copying-PID-HEX`` with its -wal, -shm, -journal and .ack, and the staging files of
    its creation and of its acknowledgement record (``..NAME.copying-PID-HEX.creating-...``, ``.ack-...``). Review
    h24 nit N-b: they were left beside NEW for good. A copy's files are removed only when its process is gone (no
    process has the PID in the name) and its temporary store is not locked (a writer holds an flock on it while
    open, `arc_ref.persist.lock`): a copy still running, here or on another machine, is never touched. The names
    removed (temporary stores), in order."""
    prefix = _copying_prefix(target)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    families: dict[str, list[str]] = {}
    for name in names:
        rest = name[len(prefix) + 1:] if name.startswith("." + prefix) else \
            name[len(prefix):] if name.startswith(prefix) else None
        found = _COPY_KEY.match(rest) if rest is not None else None
        if found is not None:
            families.setdefault(found.group(), []).append(name)
    removed = []
    for key, family in sorted(families.items()):
        if process_exists(int(key.partition("-")[0])):
            continue
        store = target.parent / (prefix + key)
        try:
            descriptor = os.open(store, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY)
        except FileNotFoundError:
            descriptor = -1  # only its other files are left
        except OSError:
            continue
        try:
            if descriptor >= 0:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a writer: a copy still running
                except OSError:
                    continue
            for name in family:
                try:
                    (target.parent / name).unlink()
                except OSError:
                    pass
            removed.append(prefix + key)
        finally:
            if descriptor >= 0:
                os.close(descriptor)
    return removed


@contextlib.contextmanager
def _said_if_interrupted(done_before: Callable[[], str]) -> Iterator[None]:
    """A forget's work, SIGTERM ending it as Ctrl-C does; interrupted, one line says what it removed before
    (``done_before()``) and the interrupt goes on (status 130) (review h22 F8: the batches removed went unsaid)."""
    restore = _terminate_as_interrupt()
    try:
        yield
    except KeyboardInterrupt:
        print(f"arc-ref forget: interrupted: {done_before()}; run forget again for the rest", file=sys.stderr,
              flush=True)
        raise
    finally:
        restore()


def _terminate_as_interrupt() -> Callable[[], None]:
    """While a copy runs, SIGTERM ends it as Ctrl-C does (its temporary files removed, status 130); returns what
    puts the earlier handler back. Only the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    earlier = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, earlier if earlier is not None else signal.SIG_DFL)

    return restore


# --- inspect ------------------------------------------------------------------------------------


def _inspect(arguments: argparse.Namespace) -> int:
    with open_store(arguments.store, readonly=True) as store:
        if arguments.verify:
            folded, checksum = fold_of_rows(store)
            agree = folded == store.state and checksum == store.checksum
            _emit(f"verify: {store.report.snapshot_note}; the fold of all {store.seq} rows "
                  f"{'equals' if agree else 'DIFFERS FROM'} the state opened\n")
            if not agree:
                return INSPECT_FAILED.code
        if arguments.catalog is not None:
            return _print_catalog(store.state, arguments.catalog)
        if arguments.record is not None:
            return _print_record(store.state, arguments.record)
        if arguments.events:
            start = 1 if arguments.start is None else arguments.start
            if not 1 <= start <= store.seq:
                raise LookupError(f"no row {start}: the store has rows 1-{store.seq}")
            for row in store.events(start, arguments.count):
                line = row.line if arguments.full or len(row.line) <= EVENT_LINE_CHARS else (
                    row.line[:EVENT_LINE_CHARS] + f"... ({len(row.line):,} characters)")
                _emit(f"{row.seq:>7} {row.checksum[:12]} {json_shown_on_terminal(line)}\n")
            return OK.code
        if arguments.view:
            _emit(shown_on_terminal(view(store.state).text()) + "\n\n")
            _print_audit(store.state)
            return OK.code
        _print_overview(store)
        return OK.code


def fold_of_rows(store: Store) -> tuple[ArcState, str]:
    """The fold of rows 1 .. ``store.seq`` read again, every one checked and folded (no snapshot), and the last
    row's checksum: the rows the state opened was folded from, whatever a writer beside it appends meanwhile
    (review h24 F5: a second open of a store being written folded more rows and reported a difference)."""
    rows = ((row.seq, row.line, row.checksum) for row in store.events(1, store.seq))
    state, _, checksum = fold_rows(None, rows, repr(str(store.path)))
    return state, checksum


def _print_overview(store: Store) -> None:
    state, report = store.state, store.report
    config_row = next(store.events(1, 1)).line
    _emit(f"store {shown_path(str(store.path))}: {_counted(store.seq, 'row')} (the config line and"
          f" {_counted(store.seq - 1, 'event')}), {_counted(state.stored, 'observation')},"
          f" {_counted(state.turn, 'agent turn')}; last checksum {store.checksum[:16]}\n")
    _emit(f"opened in {report.seconds:.3f} s: {report.snapshot_note}, {_counted(report.folded, 'event')} folded\n")
    _emit(f"config: {json_shown_on_terminal(config_row)}\n")
    pages = page_count(state.stored, state.config.page_size)
    _emit(f"catalog: {pages} page(s) of {state.config.page_size} (--catalog N), records by id (--record ID),"
          f" the log (--events), the view (--view)\n")
    _emit("\n")
    _print_audit(state)


def _print_audit(state: ArcState) -> None:
    """Tokens per component of the current view against its budget, and the whole view against K and L."""
    shown = view(state)
    exact = verify_tokens(state.setup, shown)
    config, setup = state.config, state.setup
    counts = shown.components.as_dict()
    counts["overhead"] += exact - shown.tokens  # the joins the whole count adds
    rows = [(component.label, counts[component.name], component.budget_symbol,
             getattr(config, component.budget_field) if component.budget_field else setup.prefix_tokens)
            for component in VIEW_COMPONENTS]
    _emit(f"budget audit (tokenizer {config.tokenizer}, chat format {config.chat_format}):\n")
    _emit(f"  {'component':<38} {'tokens':>8}   budget\n")
    for label, tokens, symbol, budget in rows:
        _emit(f"  {label:<38} {tokens:>8}   {symbol} = {budget}\n")
    _emit(f"  {'view, counted whole':<38} {exact:>8}   K = {setup.budget} <= L = {setup.limit}\n")
    entries = len(state.live)
    _emit(f"  H holds {entries} entries; S holds {len(state.summary.items)} items"
          f" ({state.summary.omitted} older ones omitted); U holds {len(state.recall_buffer)} chunk(s)\n")


def _print_catalog(state: ArcState, page: int) -> int:
    pages = page_count(state.stored, state.config.page_size)
    if pages == 0:
        _emit("the catalog is empty: no observation is stored\n")
        return OK.code
    target = pages if page == 0 else page
    if not 1 <= target <= pages:
        raise LookupError(f"no catalog page {page}: pages 1-{pages}")
    _emit(shown_on_terminal(render_page(state.setup, state.records, target).content) + "\n")
    return OK.code


# What inspect shows of a store's text (a tool's output in the view, the system prompt) goes to a terminal: a
# control character but newline and tab (ESC, BEL, CR, DEL, the C1 controls such as U+009B CSI) is shown as \xNN,
# never sent raw (review h24 nit N-f: `inspect --view` sent an output's escape sequences to the terminal). Only
# the display: the store, --record and export keep the exact text.
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown_on_terminal(text: str) -> str:
    """``text`` with its control characters but newline and tab written \\xNN, CR \\r (as a stub's previews
    write them)."""
    return _TERMINAL_CONTROL.sub(lambda found: "\\r" if found.group() == "\r" else f"\\x{ord(found.group()):02x}",
                                 text)


_JSON_UNESCAPED_CONTROL = re.compile(r"[\x7f-\x9f]")  # JSON escapes the C0 controls, not DEL and the C1 ones


def json_shown_on_terminal(line: str) -> str:
    """A store's JSON line with DEL and the C1 controls written \\u00NN: the same JSON value, nothing raw."""
    return _JSON_UNESCAPED_CONTROL.sub(lambda found: f"\\u{ord(found.group()):04x}", line)


def _print_record(state: ArcState, token: str) -> int:
    record = state.lookup(token)
    if record is None:
        nearest = state.nearest(token)
        hint = f"; did you mean {nearest}?" if nearest else ""
        raise LookupError(f"no stored observation has the id {token!r}{hint}")
    chunks = chunk_count(record.n_tokens, state.config.chunk_tokens)
    _emit(json_shown_on_terminal(json.dumps({
        "id": record.obs_id, "index": record.index, "action": record.signature, "returncode": record.returncode,
        "step": record.step, "characters": record.n_chars, "bytes": record.n_bytes, "tokens": record.n_tokens,
        "chunks": chunks, "stub": record.stub,
    }, ensure_ascii=False)) + "\n")
    _emit(record.content)  # exact: nothing added (review h24 F8: a newline was, where the output ends without one)
    return OK.code


# --- mcp ----------------------------------------------------------------------------------------


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions of a group and of the groups it holds."""
    return [leaf for found in group.exceptions
            for leaf in (_leaves(found) if isinstance(found, BaseExceptionGroup) else [found])]


def config_differences(stored: Config, given: Config) -> list[str]:
    """The fields in which ``given`` differs from ``stored``, each as `name stored -> given`."""
    return [f"{field.name} {getattr(stored, field.name)!r} -> {getattr(given, field.name)!r}"
            for field in attrs.fields(Config) if getattr(stored, field.name) != getattr(given, field.name)]


def _new_store_config(arguments: argparse.Namespace) -> Config:
    overrides = unique_settings(arguments.parse_setting(text) for text in arguments.set)
    return preset(arguments.preset or "paper", **overrides)


def _mcp(arguments: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        raise StoreError("the MCP server needs the mcp package: pip install 'arc-ref[mcp]'")
    if sys.stdin is None or sys.stdout is None:  # (review h24 F12: an internal error, exit 70)
        raise OutputFailed(f"standard {'input' if sys.stdin is None else 'output'} is closed: an MCP client speaks"
                           " to the server over both")
    try:  # the store first: a locked or corrupt store is refused before the (slower) import of the SDK
        store = open_store(arguments.store)
        if arguments.preset is not None or arguments.set:
            # an MCP host starts the server with the same arguments every time (review h24 F7: a store made with
            # --set was refused at every later start): the configuration they give must be the store's
            try:
                given = _new_store_config(arguments)
            except BaseException:
                store.close(snapshot=False)
                raise
            differing = config_differences(store.state.config, given)
            if differing:
                store.close(snapshot=False)
                raise StoreError(f"{arguments.store!r} exists: its configuration was fixed when it was created and"
                                 f" differs from --preset/--set in {', '.join(differing)} (leave them out, or give"
                                 " the store's own)")
    except StoreNotFound:
        store = create_store(arguments.store, _new_store_config(arguments))
    try:
        from arc_ref.frontends.mcp_server import serve

        try:
            serve(store, arguments.max_observation_bytes)
        except BaseExceptionGroup as group:  # the task group's: a write to standard output that failed
            leaves = _leaves(group)
            if all(isinstance(leaf, BrokenPipeError) for leaf in leaves):
                return OK.code  # the client went away: it hears nothing more (as every command ends quietly)
            failed = next((leaf for leaf in leaves if isinstance(leaf, OSError)), None)
            if failed is None:
                raise
            raise OutputFailed(f"writing to standard output failed: {failed}") from None
    except KeyboardInterrupt:  # Ctrl-C or SIGINT: every acknowledged call is committed (review h24 F9: exit 0)
        store.close()
        # the thread reading standard input stays blocked until a line comes, and the interpreter would wait for
        # it at exit: end now, the store closed (its acknowledged calls committed) and the streams flushed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED.code)
    finally:
        store.close()
    return OK.code
