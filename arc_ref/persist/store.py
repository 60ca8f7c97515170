"""The durable store: an ARC task's events in SQLite, so that the state survives a crash.

The row format, the chain and reopening by folding are `arc_ref.persist.rows` (any backend's); this module is the
SQLite backend, with its parts beside it: the file (`sqlite_file`), the writer lock (`lock`), the
acknowledgement record (`acknowledgement`), a WAL SQLite cannot read (`wal_damage`), the snapshot (`snapshot`).

Durability contract: `DurableStore.append` applies the event to the state (an event the core refuses
raises its ArcError and nothing is stored), writes its row and commits, records the acknowledgement, and
returns only after both. Every commit fsyncs the write-ahead log (``synchronous=FULL``, `sqlite_file`), so an
acknowledged event survives a kill -9 and also a power loss or OS crash. The price, one fsync per event, is
small next to an agent step (a model call); `append_many` commits a batch at once for bulk imports. Every open
(reader, writer, export) reads the acknowledgement record before the rows and refuses a log that lacks an
acknowledged event, saying how many (`acknowledgement`); a refused writer changes nothing: it checks the log
through a read-only connection before it opens its read-write one. A WAL that SQLite itself cannot read is
handled by `wal_damage` (spec/store.md).

One writer per database file (`lock`); readers take no lock and read one consistent snapshot of the log, also
while a writer appends. The store writes only files it created itself (O_EXCL|O_NOFOLLOW, renamed into place): a
symlink, FIFO or hard link planted beside it is never written through.

Reopening: every row is read and its checksum checked in one pass; the state is the latest valid snapshot
(`arc_ref.persist.snapshot`: a cache of the fold, used only for exactly the same events under the same
code) plus the fold of the events after it (parsed and applied). The rows a snapshot covers are not parsed
again: the snapshot's chained checksum binds them to the rows its writer folded; when it does not match,
every row is parsed and folded. A writer snapshots when the log has grown by a quarter (at
least `SNAPSHOT_MIN_EVENTS` events) since the last snapshot, before it applies the next append (so that a
snapshot never delays an acknowledgement), and on close.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from attrs import frozen

from arc_ref.config import Config
from arc_ref.machine import ArcState, Event, init, step
from arc_ref.persist import snapshot
from arc_ref.persist.acknowledgement import (
    ACK_SUFFIX,
    AckWriter,
    Acknowledged,
    acknowledgement_problem,
    read_acknowledged,
)
from arc_ref.persist.errors import (
    StoreCorrupt,
    StoreError,
    StoreExists,
    StoreFull,
    StoreLocked,
    StoreNotFound,
    StoreReadOnly,
)
from arc_ref.persist.lock import WriterLock, process_exists
from arc_ref.persist.rows import (
    GENESIS,
    Appended,
    OpenReport,
    StoredEvent,
    chain,
    checked_rows,
    event_row_line,
    fold_lines,
    fold_row,
    read_row,
)
from arc_ref.persist.sqlite_file import (
    APPLICATION_ID,
    ROWS_QUERY,
    SCHEMA_VERSION,
    build_store,
    check_header,
    check_header_values,
    connect,
    is_damage,
    no_logs_beside,
    read_clean_seq,
    read_header,
    refused_by_file_system,
    remove_reader_logs,
    rows_may_be_counted,
    unreadable,
    writer_pragmas,
)
from arc_ref.persist.wal_damage import connect_without_wal, has_wal, rows_without_wal
from arc_ref.trace import config_line, encode_config_line

SNAPSHOT_MIN_EVENTS = 1000  # a writer snapshots after at least this many new events ...
SNAPSHOT_GROWTH = 0.25  # ... and at least this fraction of the events already covered by the last snapshot
SNAPSHOT_PART_BYTES = 64 * 2**20  # snapshots are split in parts (SQLite's blob limit is 1 GB)


@frozen
class _SnapshotRow:
    seq: int
    key: str
    chain: str
    digest: str


@frozen
class Resume:
    """What a process kept of a store it closed: the state after row ``seq`` and that row's chained checksum.
    `DurableStore.open(path, resume=...)` then reads and folds only the rows after ``seq`` (another writer's),
    so reopening costs what was appended since, not the whole log."""

    state: ArcState
    seq: int
    checksum: str
    config_line: bytes


def _what_directory(target: Path) -> str:
    """What a directory given as a store is: nothing, or an `arc-ref proxy --store` conversation's folder, whose
    store is its ``task.arc`` (review h30 F12: the README did not say so)."""
    if not target.is_dir():
        return ""
    if os.path.lexists(target / "task.arc"):
        return f" (a directory: an arc-ref proxy conversation's store is its task.arc, {str(target / 'task.arc')!r})"
    if os.path.lexists(target / "hashes.sqlite"):  # review h72: the proxy's --store itself, one level up
        try:
            stores = sorted(entry.path for entry in os.scandir(target)
                            if entry.is_dir(follow_symlinks=False) and os.path.lexists(Path(entry.path) / "task.arc"))
        except OSError:
            stores = []
        example = f", e.g. {os.path.join(stores[0], 'task.arc')!r}" if stores else ""
        return (f" (a directory: an arc-ref proxy --store: each conversation's store is KEY/task.arc in it"
                f" ({len(stores):,} here{example}))")
    return " (a directory)"


def read_rows(path: str | os.PathLike[str]) -> Iterator[StoredEvent]:
    """The rows of a store, checked (chain and numbering) but not folded: what `arc-ref export` writes.

    Takes no lock (a writer may be appending: the rows are those committed when the read began). Raises
    StoreNotFound / StoreCorrupt; a damaged row raises after every row before it was yielded, and so does a
    log that lacks acknowledged events (the acknowledgement record, read before the rows, says so). The rows are
    those SQLite reads through the WAL, then, when SQLite fails there or they end before the acknowledged row
    while a WAL is there, the database file's own after them (spec/store.md).
    """
    target = Path(path)
    if not target.is_file():
        raise StoreNotFound(f"no ARC store at {str(target)!r}" + _what_directory(target))
    real = target.resolve()
    acknowledged = read_acknowledged(real, target)  # before the rows: it never runs ahead of them
    no_logs = no_logs_beside(real)
    try:
        connection = connect(target, readonly=True)
    except sqlite3.Error as problem:
        raise StoreError(f"cannot open {str(target)!r}: {problem}") from None
    rows, at_acknowledged, header_read = 0, None, False
    wal_problem: sqlite3.DatabaseError | None = None
    try:
        try:
            header = read_header(connection)
            header_read = True
            check_header_values(target, *header)
            connection.execute("BEGIN")
            clean_seq = read_clean_seq(connection)
            for seq, line, checksum in checked_rows(connection.execute(ROWS_QUERY), f"{str(target)!r}"):
                rows = seq
                if acknowledged is not None and seq == acknowledged.seq:
                    at_acknowledged = checksum
                yield StoredEvent(seq, line.decode("utf-8", "replace"), checksum)
            connection.execute("COMMIT")
        except sqlite3.DatabaseError as problem:
            if acknowledged is None or not rows_may_be_counted(problem):  # damage, a record to count by: count
                raise unreadable(target, problem, header_read) from None
            wal_problem = problem  # the rows through the WAL end here: what does the database file hold?
        else:
            missing = acknowledgement_problem(target, real, acknowledged, clean_seq, rows, at_acknowledged)
            if missing is None:
                return
            if acknowledged is None or rows >= acknowledged.seq or not has_wal(real):
                raise StoreCorrupt(missing)
            # the rows through the WAL end before the acknowledged row (a WAL damaged after a complete checkpoint
            # reads as an older log): what does the database file alone hold?
    finally:
        connection.close()
        if no_logs:  # none were there: the empty ones this reader made go (review h24 nit N-c)
            remove_reader_logs(real)
    file_rows = 0
    for seq, line, checksum in rows_without_wal(real, target):  # the rows before `rows` were yielded already
        file_rows = seq
        if seq == acknowledged.seq:
            at_acknowledged = checksum
        if seq > rows:
            rows = seq
            yield StoredEvent(seq, line.decode("utf-8", "replace"), checksum)
    missing = acknowledgement_problem(target, real, acknowledged, None, rows, at_acknowledged, wal_problem,
                                      file_rows)
    if missing is not None:
        raise StoreCorrupt(missing)


SQLITE_LOGS = ("-wal", "-journal", "-shm")  # the files SQLite keeps beside a database NAME and applies on open


def refuse_leftover_logs(target: Path) -> None:
    """StoreExists when SQLite's files of an earlier database of that name lie beside ``target``: a new store
    linked there would be opened through that database's log (its rows, not the new store's)."""
    left = [str(target) + suffix for suffix in SQLITE_LOGS if os.path.lexists(str(target) + suffix)]
    if left:
        raise StoreExists(f"{str(target)!r}: files of an earlier store of that name are there ({', '.join(left)}):"
                          " SQLite would apply them to a new one; remove them, or choose another path")


def link_into_place(staging: Path, target: Path, exists: StoreError) -> None:
    """Give the complete file ``staging`` the name ``target`` only if nothing has it: a hard link (refused when the
    name is taken, so of two creators one wins), or, on a file system without hard links, a rename after a last
    check. Raises ``exists`` when the name is taken, OSError otherwise."""
    try:
        os.link(staging, target)
    except FileExistsError:
        raise exists from None
    except OSError as problem:
        if problem.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(target):
            raise exists from None
        os.replace(staging, target)


_CREATION = re.compile(r"([0-9]+)-[0-9]+(?:-wal|-shm|-journal)?")  # PID-TID, then one of SQLite's files


def remove_killed_creations(target: Path) -> list[str]:
    """Remove what a creation of ``target`` killed mid-way (SIGKILL, a machine stopped) left beside it: its staging
    store ``.NAME.creating-PID-TID`` with its -wal, -shm and -journal (review h35 F6: about 57 KB left in a proxy
    conversation's folder for good), only those of a process that no longer runs (a creation under way is never
    touched: its process is there). The names removed."""
    prefix = f".{target.name}.creating-"
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        found = _CREATION.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
        if found is None or process_exists(int(found.group(1))):
            continue
        try:
            (target.parent / name).unlink()
        except OSError:
            continue
        removed.append(name)
    return removed


class DurableStore:
    """An ARC task whose every event is committed to SQLite before it is acknowledged (see the module doc).

    Create with `DurableStore.create(path, config)`, reopen with `DurableStore.open(path)` (the writer) or
    `DurableStore.open(path, readonly=True)` (a reader: no lock, no writes). Use as a context manager.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, lock: WriterLock | None) -> None:
        self.path = path
        self._real = path.resolve()
        self._connection = connection
        self._lock = lock
        self._acknowledgements: AckWriter | None = None
        self._guard = threading.RLock()
        self._state: ArcState | None = None
        self._config_line = b""
        self.seq = 0
        self.checksum = GENESIS
        self.snapshot_seq = 0
        self.snapshot_min_events = SNAPSHOT_MIN_EVENTS
        self.snapshot_growth = SNAPSHOT_GROWTH
        self.report = OpenReport(0, 0, 0, 0.0, "")
        self.closed = False
        self._watched_seq = 0  # the acknowledged row whose chained checksum the fold notes
        self._watched_checksum: str | None = None
        self._unreadable_snapshot: sqlite3.DatabaseError | None = None  # SQLite's damage met reading the snapshot
        self._no_logs_before = False  # a reader that found no -wal nor -shm: it removes those it made on close

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], config: Config) -> "DurableStore":
        """A new store for a task under ``config`` (refused configurations raise ConfigError; no file then)."""
        target = Path(path)
        line = encode_config_line(config_line(config)).encode("utf-8")  # nested values as written
        state = init(config)  # ConfigError before any file exists
        exists = StoreExists(f"{str(target)!r} already exists; open it, or choose another path")
        if os.path.lexists(target):
            raise exists
        refuse_leftover_logs(target)
        remove_killed_creations(target)
        # built under a temporary name, locked, and linked into place: a crash while creating leaves no half
        # store, and of two creators only the one whose link succeeds goes on (the other gets StoreExists)
        staging = target.with_name(f".{target.name}.creating-{os.getpid()}-{threading.get_ident()}")
        lock: WriterLock | None = None
        try:
            try:
                checksum = build_store(staging, line)
                lock = WriterLock(staging, target)
                link_into_place(staging, target, exists)
            except OSError as problem:
                raise refused_by_file_system(target, "create it", problem) \
                    or StoreError(f"cannot create {str(target)!r}: {problem.strerror}") from None
            except sqlite3.Error as problem:
                raise refused_by_file_system(target, "create it", problem) \
                    or StoreError(f"cannot create {str(target)!r}: {problem}") from None
            finally:
                for leftover in ("", "-wal", "-shm", "-journal"):
                    try:
                        Path(str(staging) + leftover).unlink()
                    except OSError:  # not there; or no directory there at all (a path under a regular file)
                        pass
            connection = connect(target, readonly=False)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(target, connection, lock)
        store._state, store._config_line, store.seq, store.checksum = state, line, 1, checksum
        try:
            writer_pragmas(connection)
            store._start_writing()
        except sqlite3.DatabaseError as problem:
            store._abandon()
            raise _cannot_write(target, problem) from None
        except BaseException:
            store._abandon()
            raise
        store.report = OpenReport(1, 0, 0, 0.0, "new store")
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, readonly: bool = False,
             use_snapshot: bool = True, resume: Resume | None = None) -> "DurableStore":
        """Reopen a store: the state is the fold of its events (StoreCorrupt names a bad row, or says how many
        acknowledged events are missing).

        ``readonly``: a reader (no lock, no writes; may run beside the writer). ``use_snapshot=False``
        folds every event even when a valid snapshot exists (to check the snapshot, or to time the fold).
        ``resume``: what this process kept when it last closed the store (`resume_point`): when row
        ``resume.seq`` still has that chained checksum, only the rows after it are read, checked and folded onto
        ``resume.state`` (rows another writer appended meanwhile); otherwise every row is, as without it.
        """
        target = Path(path)
        if not target.is_file():
            raise StoreNotFound(f"no ARC store at {str(target)!r}" + _what_directory(target))
        lock = None if readonly else WriterLock(target, target)
        no_logs = readonly and no_logs_beside(target.resolve())
        try:
            try:  # read-only until the log is checked: a refused open must not checkpoint a damaged WAL on close
                connection = connect(target, readonly=True)
            except sqlite3.Error as problem:
                raise StoreError(f"cannot open {str(target)!r}: {problem}") from None
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(target, connection, lock)
        store._no_logs_before = no_logs
        header_read, checked, acknowledged = False, False, None
        try:
            acknowledged = read_acknowledged(store._real, target)  # before the rows: never ahead of them
            check_header_values(target, *read_header(connection))
            header_read = True
            if resume is None or not store._catch_up(resume, acknowledged):
                store._load(use_snapshot, acknowledged)
            checked = True
            if not readonly and store._unreadable_snapshot is not None:
                raise StoreCorrupt(
                    f"{str(target)!r}: no acknowledged event is missing (rows up to"
                    f" {store.seq if acknowledged is None else acknowledged.seq} are there), but SQLite cannot read"
                    f" its snapshot ({store._unreadable_snapshot}): the store is damaged and is not written again;"
                    " readers (arc-ref inspect / export) read every acknowledged event")
            if not readonly:
                connection.close()
                store._connection = connect(target, readonly=False)
                writer_pragmas(store._connection)
                store._start_writing()
        except _WalEndsEarly as early:  # as export reads it: the database file alone decides when it holds them all
            store._abandon()
            assert acknowledged is not None
            return cls._open_without_wal(target, readonly, use_snapshot, acknowledged, early.why)
        except sqlite3.DatabaseError as problem:  # e.g. a damaged schema ("malformed database schema") or WAL
            store._abandon()
            if checked:  # the log was read and checked: what failed is starting to write (read-only? full?)
                raise _cannot_write(target, problem) from None
            if acknowledged is None or not rows_may_be_counted(problem):  # damage, a record to count by: count
                raise unreadable(target, problem, header_read) from None
            return cls._open_without_wal(target, readonly, use_snapshot, acknowledged, problem)
        except BaseException:
            store._abandon()
            raise
        return store

    @classmethod
    def _open_without_wal(cls, target: Path, readonly: bool, use_snapshot: bool, acknowledged: Acknowledged,
                          wal_problem: sqlite3.DatabaseError | str) -> "DurableStore":
        """SQLite cannot read the store through its WAL (damaged after a crash), or the rows it reads through it end
        before the acknowledged row (``wal_problem`` then says so). When the database file alone holds
        every acknowledged row, it decides: a reader gets exactly them (read without the WAL); a writer is refused,
        since SQLite would write through the damaged WAL (spec/store.md). Otherwise what export reads decides
        (`_open_as_exported`)."""
        real = target.resolve()
        rows, at_acknowledged = 0, None
        for seq, _, checksum in rows_without_wal(real, target):
            rows = seq
            if seq == acknowledged.seq:
                at_acknowledged = checksum
        if acknowledgement_problem(target, real, acknowledged, None, rows, at_acknowledged) is not None:
            return cls._open_as_exported(target, readonly, acknowledged, wal_problem)
        wal = f"{str(real) + '-wal'!r}"
        wal_is = wal_problem if isinstance(wal_problem, str) else f"cannot be read ({wal_problem})"
        if not readonly and has_wal(real):
            raise StoreCorrupt(
                f"{str(target)!r}: its write-ahead log {wal} {wal_is}, but the database file"
                f" without it holds every acknowledged event (rows up to {acknowledged.seq}); readers (arc-ref"
                f" inspect / export) read them; to write again, move {wal} and its -shm aside (keep them: nothing"
                f" acknowledged is lost without them)")
        if not readonly:  # no WAL to move aside: the damage is in the database file itself
            raise StoreCorrupt(
                f"{str(target)!r}: no acknowledged event is missing (rows up to {acknowledged.seq} are there), but"
                f" the database file cannot be read whole ({wal_problem}) and is not written again; readers"
                " (arc-ref inspect / export) read every acknowledged event")
        store = cls(target, connect_without_wal(real), None)
        try:
            check_header(store._connection, target)
            store._load(use_snapshot, acknowledged)
        except sqlite3.DatabaseError as problem:  # past the acknowledged rows, or beside them (a snapshot page)
            store._abandon()
            raise StoreCorrupt(
                f"{str(target)!r}: no acknowledged event is missing (rows up to {acknowledged.seq} are there), but"
                f" the database file cannot be read whole ({problem}); arc-ref export writes the {rows} rows that"
                " are there") from None
        except BaseException:
            store._abandon()
            raise
        store.report = OpenReport(store.report.events, store.report.snapshot_seq, store.report.folded,
                                  store.report.seconds, store.report.snapshot_note
                                  + f"; read without its write-ahead log, which {wal_is}")
        return store

    @classmethod
    def _open_as_exported(cls, target: Path, readonly: bool, acknowledged: Acknowledged,
                          wal_problem: sqlite3.DatabaseError | str) -> "DurableStore":
        """SQLite cannot read the store through its WAL and the database file alone lacks acknowledged rows: the rows
        `read_rows` (export) reads decide, those through the WAL up to where SQLite fails, then the file's own after
        them, so that the open and export give the same figures. Acknowledged rows missing there: refused as export
        is, with their count (A2 across crashes). None missing (SQLite failed where export does not read): a writer
        is refused; a reader folds every row through the WAL, its snapshot not used."""
        exported = 0
        for row in read_rows(target):  # raises export's refusal, with its count, when acknowledged rows are missing
            exported = row.seq
        there = f"{str(target)!r}: no acknowledged event is missing (rows up to {acknowledged.seq} are there)"
        if not readonly:
            raise StoreCorrupt(f"{there}, but SQLite cannot read the store whole through its write-ahead log"
                               f" ({wal_problem}) and it is not written again; readers (arc-ref inspect / export) read"
                               " every acknowledged event (keep the write-ahead log: the database file alone lacks"
                               " them)")
        store = cls(target, connect(target, readonly=True), None)
        try:
            store._load(False, acknowledged)
        except sqlite3.DatabaseError as problem:
            store._abandon()
            raise StoreCorrupt(f"{there}, but SQLite cannot read the store whole ({problem}); arc-ref export writes"
                               f" the {exported} rows that are there") from None
        except BaseException:
            store._abandon()
            raise
        report = store.report
        store.report = OpenReport(report.events, report.snapshot_seq, report.folded, report.seconds,
                                  f"{report.snapshot_note}; read through its write-ahead log, which SQLite cannot read"
                                  f" whole ({wal_problem})")
        return store

    def _abandon(self) -> None:
        """Close what an open or create that failed had opened, writing nothing."""
        self.closed = True
        self._connection.close()
        if self._no_logs_before:  # review h24 nit N-c: a reader left an empty -wal and a -shm where none were
            remove_reader_logs(self._real)
        if self._acknowledgements is not None:
            self._acknowledgements.close()
        if self._lock is not None:
            self._lock.release()

    def _start_writing(self) -> None:
        """Mark the store open for writing in the database file itself (checkpointed out of the WAL, so that
        losing the WAL cannot erase the mark), then write a fresh acknowledgement record of the last row."""
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute("CREATE TABLE IF NOT EXISTS writer (clean_seq INTEGER NOT NULL)")
            connection.execute("DELETE FROM writer")
            connection.execute("INSERT INTO writer VALUES (0)")
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # never waits for a reader
        self._acknowledgements = AckWriter(self._real, self.path, self.seq, self.checksum)

    def _load(self, use_snapshot: bool, acknowledged: Acknowledged | None) -> None:
        started = time.perf_counter()
        connection = self._connection
        self._watched_seq = 0 if acknowledged is None else acknowledged.seq
        connection.execute("BEGIN")  # one read transaction: a consistent view of the log (SQLite's errors: open)
        try:
            candidate, ignored = self._snapshot_candidate() if use_snapshot else (None, None)
            last = connection.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
            past_the_end = candidate is not None and candidate.seq > last
            state, folded, note = self._fold_rows(None if past_the_end else candidate)
            if past_the_end:
                assert candidate is not None
                note = f"snapshot ignored: it is of row {candidate.seq}, past the last row {last}"
            if ignored is not None:
                note = f"snapshot ignored: {ignored}"
            if state is None:  # the snapshot was refused after its rows were passed: fold them all
                state, folded, _ = self._fold_rows(None)
                # the note of the first pass says why
            clean_seq = read_clean_seq(connection)
        finally:
            if connection.in_transaction:  # (a read: after damage in the snapshot COMMIT reports it again)
                connection.execute("COMMIT" if self._unreadable_snapshot is None else "ROLLBACK")
        missing = acknowledgement_problem(self.path, self._real, acknowledged, clean_seq, self.seq,
                                           self._watched_checksum)
        if missing is not None:
            raise self._missing(missing, acknowledged, self.seq)
        assert state is not None
        self._state = state
        self.report = OpenReport(self.seq, self.snapshot_seq, folded, time.perf_counter() - started, note)

    def _catch_up(self, resume: Resume, acknowledged: Acknowledged | None) -> bool:
        """The state of ``resume`` plus the rows after it, checked and folded (False, nothing changed: row
        ``resume.seq`` is not the row that state was folded from, so every row must be read)."""
        started = time.perf_counter()
        connection = self._connection
        connection.execute("BEGIN")  # one read transaction: a consistent view of the log
        try:
            row = connection.execute("SELECT checksum FROM events WHERE seq = ?", (resume.seq,)).fetchone()
            first = connection.execute("SELECT line FROM events WHERE seq = 1").fetchone()
            if row is None or row[0] != resume.checksum.encode("ascii") or first is None \
                    or bytes(first[0]) != resume.config_line:
                return False
            state, seq, checksum = resume.state, resume.seq, resume.checksum
            watched = None
            if acknowledged is not None and acknowledged.seq <= seq:
                found = connection.execute("SELECT checksum FROM events WHERE seq = ?",
                                           (acknowledged.seq,)).fetchone()
                watched = None if found is None else bytes(found[0]).decode("ascii", "replace")
            where = f"{str(self.path)!r}"
            after = connection.execute("SELECT seq, line, checksum FROM events WHERE seq > ? ORDER BY seq", (seq,))
            for number, line, checksum in checked_rows(after, where, seq, checksum):
                state = fold_row(state, number, line, where)
                seq = number
                if acknowledged is not None and number == acknowledged.seq:
                    watched = checksum
            snapshot_row = connection.execute("SELECT max(seq) FROM snapshots").fetchone()
            clean_seq = read_clean_seq(connection)
            if not clean_seq and not self.readonly:  # a writer after a crash: is the snapshot it replaces readable?
                self._read_whole_snapshot()
        finally:
            if connection.in_transaction:  # (a read: after damage in the snapshot COMMIT reports it again)
                connection.execute("COMMIT" if self._unreadable_snapshot is None else "ROLLBACK")
        missing = acknowledgement_problem(self.path, self._real, acknowledged, clean_seq, seq, watched)
        if missing is not None:
            raise self._missing(missing, acknowledged, seq)
        self._state, self.seq, self.checksum, self._config_line = state, seq, checksum, resume.config_line
        self.snapshot_seq = snapshot_row[0] or 0 if snapshot_row is not None else 0
        self.report = OpenReport(seq, self.snapshot_seq, seq - resume.seq, time.perf_counter() - started,
                                 f"resumed after row {resume.seq}")
        return True

    def resume_point(self) -> Resume:
        """What to keep of this store to reopen it later at the cost of what is appended meanwhile."""
        return Resume(self.state, self.seq, self.checksum, self._config_line)

    def _snapshot_candidate(self) -> tuple[_SnapshotRow | None, str | None]:
        """The latest snapshot's row (None: no snapshot), and why it was ignored as damaged (wrong types,
        non-ASCII text, pages SQLite cannot read): a snapshot is a cache, so a damaged one means folding the events
        (issue 18.8)."""
        damaged = "its row is damaged (not the types and ASCII text it is written with)"
        try:
            row = self._connection.execute(
                "SELECT seq, key, chain, digest FROM snapshots ORDER BY seq DESC LIMIT 1").fetchone()
        except sqlite3.DatabaseError as problem:
            return None, self._snapshot_unreadable(problem)
        if row is None:
            return None, None
        if not isinstance(row[0], int) or not all(isinstance(value, bytes) for value in row[1:]):
            return None, damaged
        try:
            key, chain_value, digest = (value.decode("ascii") for value in row[1:])
        except UnicodeDecodeError:
            return None, damaged
        return _SnapshotRow(row[0], key, chain_value, digest), None

    def _missing(self, missing: str, acknowledged: Acknowledged | None, rows: int) -> StoreCorrupt:
        """The refusal of a log read through its WAL that lacks acknowledged rows; `_WalEndsEarly` when it ends
        before the acknowledged row and a WAL exists: the database file alone may hold them (`open`)."""
        if acknowledged is not None and rows < acknowledged.seq and has_wal(self._real):
            return _WalEndsEarly(missing, f"ends at row {rows}, before the acknowledged row {acknowledged.seq}")
        return StoreCorrupt(missing)

    def _read_whole_snapshot(self) -> None:
        """Read the snapshot rows whole, their pages included (O(snapshot), once): a writer that resumes after a
        crash folds no snapshot, yet it would replace it; SQLite's damage there refuses it as it refuses a writer
        that folds (`open`), instead of writing into a damaged file."""
        try:
            for _ in self._connection.execute("SELECT * FROM snapshots"):
                pass
        except sqlite3.DatabaseError as problem:
            self._snapshot_unreadable(problem)

    def _snapshot_unreadable(self, problem: sqlite3.DatabaseError) -> str:
        """SQLite reports damage in the snapshot's pages (e.g. half new after a checkpoint cut by a kill, its WAL
        frames then damaged): it is ignored and the events are folded, as export reads them; a writer is then
        refused (`open`). Any other error is raised."""
        if not is_damage(problem):
            raise problem
        self._unreadable_snapshot = problem
        return f"SQLite cannot read it ({problem})"

    def _fold_rows(self, candidate: _SnapshotRow | None) -> tuple[ArcState | None, int, str]:
        """One pass over the rows: check each, fold those after the snapshot (if one is usable)."""
        note = "no snapshot" if candidate is None else ""
        snapshot_seq = 0 if candidate is None else candidate.seq
        state: ArcState | None = None
        folded = 0
        self.snapshot_seq = 0
        rows = 0
        checksum = GENESIS
        where = f"{str(self.path)!r}"
        for seq, line, checksum in checked_rows(self._connection.execute(ROWS_QUERY), where):
            rows = seq
            if seq == self._watched_seq:
                self._watched_checksum = checksum
            if candidate is not None and 1 < seq < snapshot_seq:
                continue  # covered by the snapshot: checked against its chain at row snapshot_seq (else a refold)
            if seq == 1:
                state = fold_row(None, seq, line, where)
                self._config_line = line
                if candidate is not None and candidate.key != snapshot.snapshot_key(state.setup, line):
                    note = "snapshot ignored: written by other code or for another tokenizer"
                    candidate = None
            elif candidate is None or seq > snapshot_seq:
                state = fold_row(state, seq, line, where)
                folded += 1
            else:  # the snapshot's own row: checked, not folded (the snapshot holds its fold)
                read_row(seq, line, where)
            if candidate is not None and seq == snapshot_seq:
                assert state is not None
                try:
                    state = self._read_snapshot(candidate, checksum, state)
                except snapshot.SnapshotRefused as refused:
                    return None, 0, f"snapshot ignored: {refused}"
                self.snapshot_seq = seq
                note = f"snapshot of row {seq}"
        if rows == 0:
            raise StoreCorrupt(f"{str(self.path)!r} holds no rows (not even the config line)")
        self.seq = rows
        self.checksum = checksum
        return state, folded, note

    def _read_snapshot(self, candidate: _SnapshotRow, checksum: str, fresh: ArcState) -> ArcState:
        seq, digest = candidate.seq, candidate.digest
        if candidate.chain != checksum:
            raise snapshot.SnapshotRefused(f"it is of other events than rows 1-{seq}")
        chunks: list[bytes] = []
        try:
            parts = self._connection.execute("SELECT part, data FROM snapshots WHERE seq = ? ORDER BY part", (seq,))
            for number, (part, data) in enumerate(parts):
                if part != number:
                    raise snapshot.SnapshotRefused(f"part {number} is missing")
                chunks.append(bytes(data))
        except sqlite3.DatabaseError as problem:
            raise snapshot.SnapshotRefused(self._snapshot_unreadable(problem)) from None
        data = b"".join(chunks)
        if hashlib.sha256(data).hexdigest() != digest:
            raise snapshot.SnapshotRefused("its bytes fail their checksum")
        return snapshot.load(data, fresh.setup)

    # --- reading ------------------------------------------------------------------------------

    @property
    def state(self) -> ArcState:
        if self._state is None or self.closed:
            raise StoreError(f"{str(self.path)!r} is closed")
        return self._state

    @property
    def readonly(self) -> bool:
        return self._lock is None

    def events(self, start: int = 1, count: int | None = None) -> Iterator[StoredEvent]:
        """The stored rows from ``start`` (row 1 is the config line), as stored (checked when the store opened)."""
        start = max(1, min(start, self.seq + 1))  # SQLite's integers are 64-bit: --from 10**30 is past the end
        limit = -1 if count is None else max(0, min(count, self.seq))
        rows = self._connection.execute(
            "SELECT seq, line, checksum FROM events WHERE seq >= ? AND seq <= ? ORDER BY seq LIMIT ?",
            (start, self.seq, limit),
        )
        for seq, line, checksum in rows:
            yield StoredEvent(seq, bytes(line).decode("utf-8"), bytes(checksum).decode("ascii"))

    def export_lines(self) -> Iterator[str]:
        """The store as a replay trace (spec/trace.md): its rows, one line each, in order."""
        for stored in self.events():
            yield stored.line

    # --- writing ------------------------------------------------------------------------------

    def append(self, event: Event) -> Appended:
        """Apply ``event`` and commit its row; returns after the commit (the acknowledgement).

        An event the core refuses raises its ArcError and is not stored; a failed write raises StoreError
        and leaves the state as it was.
        """
        return self.append_many((event,))[0]

    def append_many(self, events: Iterable[Event]) -> list[Appended]:
        """Apply and store several events in one commit (all or none; the first refused event raises)."""
        with self._guard:
            self._require_writer()
            assert self._lock is not None
            if not self._lock.still_named(self.path):  # one stat (review h24 F14: it went on acknowledging, its
                # log under the old name and its file under the new, so that it opened under neither)
                raise StoreError(f"{str(self.path)!r} was moved or removed while this process had it open for writing:"
                                 " nothing more is written to it (every acknowledged event is in it; open it by its"
                                 " name)")
            if self.snapshot_due():  # before the new events: a snapshot never delays an acknowledgement
                self.write_snapshot()
            state = self.state
            seq, checksum = self.seq, self.checksum
            rows: list[tuple[int, str, str]] = []
            acknowledged: list[Appended] = []
            for event in events:
                line = event_row_line(event)  # StoreError for what is not a stored event
                state, output = step(state, event)  # ArcError: nothing of this batch is stored
                seq += 1
                checksum = chain(checksum, seq, line.encode("utf-8"))
                rows.append((seq, line, checksum))
                acknowledged.append(Appended(seq, checksum, output))
            if not rows:
                return []
            connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
                connection.execute("COMMIT")
            except sqlite3.Error as problem:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if isinstance(problem, sqlite3.IntegrityError):
                    raise StoreError(
                        f"{str(self.path)!r}: row {rows[0][0]} was written by someone else; reopen the store"
                    ) from None
                raise refused_by_file_system(self.path, f"store event #{rows[0][0]}", problem) \
                    or StoreError(f"{str(self.path)!r}: cannot store event #{rows[0][0]}: {problem}") from None
            self._state, self.seq, self.checksum = state, seq, checksum
            assert self._acknowledgements is not None
            try:  # the acknowledgement is recorded apart from the WAL before append returns (A2 across crashes)
                self._acknowledgements.record(seq, checksum)
            except OSError as problem:
                raise StoreError(f"{str(self.path)!r}: event #{seq} is stored but its acknowledgement could not be"
                                 f" recorded: {problem.strerror}") from None
            return acknowledged

    def snapshot_due(self) -> bool:
        """The policy: at least `snapshot_min_events` events, and `snapshot_growth` times the events the
        last snapshot covers, came since the last snapshot."""
        return self.seq - self.snapshot_seq >= max(self.snapshot_min_events,
                                                   int(self.snapshot_growth * self.snapshot_seq))

    def write_snapshot(self) -> str:
        """Store a snapshot of the current state (replacing the older one); returns what was done."""
        self._require_writer()
        if self.seq <= self.snapshot_seq:
            return f"snapshot of row {self.snapshot_seq} is current"
        state = self.state
        try:
            data = snapshot.dump(state)
        except Exception as problem:  # a state that cannot be pickled: reopening folds the events instead
            self.snapshot_min_events = 2**62
            return f"no snapshot: {type(problem).__name__}: {problem}"
        key = snapshot.snapshot_key(state.setup, self._config_line)
        digest = hashlib.sha256(data).hexdigest()
        parts = [
            (self.seq, number, key, self.checksum, digest, data[offset:offset + SNAPSHOT_PART_BYTES])
            for number, offset in enumerate(range(0, max(len(data), 1), SNAPSHOT_PART_BYTES))
        ]
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("DELETE FROM snapshots")
            connection.executemany("INSERT INTO snapshots VALUES (?, ?, ?, ?, ?, ?)", parts)
            connection.execute("COMMIT")
        except sqlite3.Error as problem:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            return f"no snapshot: {problem}"
        self.snapshot_seq = self.seq
        return f"snapshot of row {self.seq} ({len(data):,} bytes)"

    def _require_writer(self) -> None:
        if self.closed:
            raise StoreError(f"{str(self.path)!r} is closed")
        if self._lock is None:
            raise StoreError(f"{str(self.path)!r} is open read-only; open it without readonly to append")

    # --- closing ------------------------------------------------------------------------------

    def close(self, snapshot: bool = True) -> None:
        """Snapshot (a writer, when events came since the last one, unless ``snapshot`` is False), close the
        database, drop the lock. Closing without a snapshot leaves the snapshots as a crash would."""
        with self._guard:
            if self.closed:
                return
            try:
                if snapshot and self._lock is not None and self._state is not None:
                    self.write_snapshot()
                if self._lock is not None and self._acknowledgements is not None:
                    self._mark_closed_cleanly()
            finally:
                self._abandon()

    def _mark_closed_cleanly(self) -> None:
        """Record in the database that its writer closed after row `seq` (a moved store then opens without its
        .ack); best effort: when it fails the .ack still says what was acknowledged."""
        try:
            self._connection.execute("UPDATE writer SET clean_seq = ?", (self.seq,))
        except sqlite3.Error:
            pass

    def __enter__(self) -> "DurableStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WalEndsEarly(StoreCorrupt):
    """The rows read through the WAL end before the acknowledged row (``why``), while a WAL exists."""

    def __init__(self, missing: str, why: str) -> None:
        super().__init__(missing)
        self.why = why


def _cannot_write(target: Path, problem: sqlite3.DatabaseError) -> StoreError:
    """A store whose log was read and checked but cannot be opened for writing: the file system refuses
    (read-only, full), damage SQLite found writing (StoreCorrupt), or another failure, never called damage."""
    if is_damage(problem):
        return unreadable(target, problem, header_read=True)
    return refused_by_file_system(target, "open it for writing", problem) \
        or StoreError(f"{str(target)!r}: cannot open it for writing: {problem}")


__all__ = [
    "ACK_SUFFIX", "APPLICATION_ID", "Acknowledged", "Appended", "DurableStore", "GENESIS", "OpenReport",
    "SCHEMA_VERSION", "SNAPSHOT_GROWTH", "SNAPSHOT_MIN_EVENTS", "SNAPSHOT_PART_BYTES", "StoreCorrupt", "StoreError",
    "StoreExists", "StoreFull", "StoreLocked", "StoreNotFound", "StoreReadOnly", "StoredEvent", "chain", "fold_lines", "read_acknowledged",
    "link_into_place", "read_rows", "refuse_leftover_logs",
]
