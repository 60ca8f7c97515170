"""The durable store: an ARC task's events in SQLite, so that the state survives a crash.

The core is event-sourced: a task's state is the fold of its events over ``init(config)``. Durability is
therefore keeping the events, and opening a store is replaying them. One row per event, numbered from 1
like the lines of a replay trace: row 1 holds the config line, every later row one event, each as the very
line of the replay trace format (spec/trace.md, `arc_ref.trace.event_line`, canonically encoded), so that
`arc-ref export` is the rows as they are and any port can replay a store.

Every row carries a chained checksum (SHA-256 of the previous row's checksum, the sequence number and the
line's bytes): a damaged, edited, reordered or missing row stops the open with an error naming the row.

Durability contract: `DurableStore.append` applies the event to the state (an event the core refuses
raises its ArcError and nothing is stored), writes its row and commits, records the acknowledgement, and
returns only after both. The database is in WAL mode with ``synchronous=FULL``: every commit fsyncs the
write-ahead log, so an acknowledged event survives a kill -9 and also a power loss or OS crash (``NORMAL``
would survive a kill but may lose the last commits to a power loss). The price, one fsync per event, is
small next to an agent step (a model call); `append_many` commits a batch at once for bulk imports.

Acknowledged events live in ``STORE-wal`` until a checkpoint, so a WAL deleted ("stale SQLite files"),
truncated or damaged after a crash would reopen as a shorter log. After every commit the writer therefore
writes the last acknowledged row and its chained checksum to ``STORE.ack`` (a fixed-size record, pwrite and
fdatasync: a second fsync per append, measured by benchmarks/bench_store.py), and marks the store open in
the database file itself (table ``writer``, checkpointed before the first append; a clean close records the
row count there). Every open (reader, writer, export) reads the record before the rows and refuses a log
that ends before it, or whose row there has another checksum, with StoreCorrupt saying how many
acknowledged events are missing; an unclosed store without its record is refused too. A refused writer
changes nothing: it checks the log through a read-only connection before it opens its read-write one. A WAL
that SQLite itself cannot read ("database disk image is malformed") is set aside by reading the database file
alone (immutable): refused with the count of what it lacks, or, holding every acknowledged row, read as it is
by readers and refused to writers (spec/store.md).

One writer per database FILE: a writer holds an exclusive flock on the database file itself (so a symlink
or another name reaches the same lock) for as long as it is open; a second writer gets `StoreLocked` naming
the holder's pid (from /proc/locks). A file with several names (hard links) is refused for writing: SQLite
keeps a WAL per name. The lock goes with the process, so a killed writer leaves no stale lock; no lock file
is created. Readers take no lock and read one consistent snapshot of the log (SQLite's WAL isolation), also
while a writer appends; on a read-only file system a cleanly closed store (no WAL) is read as immutable.
Every file the store creates (the database, its ``-wal`` and ``-shm`` files, which SQLite creates with the
database's mode, and ``STORE.ack``) is owner-only (0600), and the store writes only files it created itself
(O_EXCL|O_NOFOLLOW, renamed into place): a symlink, FIFO or hard link planted beside it is never written
through.

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
import fcntl
import hashlib
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from attrs import frozen

from arc_ref.config import Config
from arc_ref.errors import ArcError
from arc_ref.machine import ArcState, Event, Output, RequestView, init, step
from arc_ref.persist import snapshot
from arc_ref.trace import (
    TraceError,
    config_from_line,
    config_line,
    encode,
    encode_config_line,
    event_from_line,
    event_line,
    parse_line,
)

APPLICATION_ID = 0x41524331  # "ARC1" in the SQLite header: this file is an ARC store
SCHEMA_VERSION = 1
GENESIS = hashlib.sha256(b"arc-ref event log 1").hexdigest()  # the chain's value before row 1
SNAPSHOT_MIN_EVENTS = 1000  # a writer snapshots after at least this many new events ...
SNAPSHOT_GROWTH = 0.25  # ... and at least this fraction of the events already covered by the last snapshot
SNAPSHOT_PART_BYTES = 64 * 2**20  # snapshots are split in parts (SQLite's blob limit is 1 GB)

_SCHEMA = """
CREATE TABLE events (
    seq INTEGER PRIMARY KEY,   -- 1 = the config line, then one event per row, numbered as in an export
    line TEXT NOT NULL,        -- the replay trace line (spec/trace.md), canonical JSON
    checksum TEXT NOT NULL     -- sha256(previous checksum + "\\n" + seq + "\\n" + line), hex
);
CREATE TABLE snapshots (
    seq INTEGER NOT NULL,      -- the state after this row
    part INTEGER NOT NULL,
    key TEXT NOT NULL,         -- arc_ref.persist.snapshot.snapshot_key
    chain TEXT NOT NULL,       -- the checksum of row seq
    digest TEXT NOT NULL,      -- sha256 of the whole snapshot's bytes
    data BLOB NOT NULL,
    PRIMARY KEY (seq, part)
);
CREATE TABLE writer (
    clean_seq INTEGER NOT NULL -- one row: the rows when the last writer closed cleanly, 0 while one is open
);
"""


class StoreError(Exception):
    """A store that cannot be opened, read or written; the message says which and why."""


class StoreNotFound(StoreError):
    pass


class StoreExists(StoreError):
    pass


class StoreLocked(StoreError):
    """Another process holds the store open for writing."""


class StoreCorrupt(StoreError):
    """A row that is damaged, edited, out of order or missing, or a file that is not an ARC store."""


def chain(previous: str, seq: int, line: bytes) -> str:
    """The checksum of row ``seq``: SHA-256 of the previous row's checksum, the number and the line."""
    return hashlib.sha256(previous.encode("ascii") + b"\n" + str(seq).encode("ascii") + b"\n" + line).hexdigest()


@frozen
class Appended:
    """The acknowledgement of one stored event: returned only after its row was committed."""

    seq: int
    checksum: str
    output: Output


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


@frozen
class StoredEvent:
    seq: int
    line: str
    checksum: str


@frozen
class OpenReport:
    """How the state was rebuilt: rows read, the snapshot used (0: none), events folded, and why."""

    events: int  # rows, the config row included
    snapshot_seq: int
    folded: int
    seconds: float
    snapshot_note: str


def _checked_rows(connection: sqlite3.Connection, path: Path) -> Iterator[tuple[int, bytes, str]]:
    """The rows in order as (seq, line bytes, checksum); StoreCorrupt at the first missing or damaged row."""
    expected = 1
    checksum = GENESIS
    for seq, line, stored_checksum in connection.execute("SELECT seq, line, checksum FROM events ORDER BY seq"):
        if seq != expected:
            raise StoreCorrupt(f"{str(path)!r}: row {expected} is missing (the next row is {seq})")
        line = bytes(line)
        checksum = chain(checksum, seq, line)
        if stored_checksum != checksum.encode("ascii"):
            raise StoreCorrupt(
                f"{str(path)!r}: row {seq} fails its checksum (damaged or edited; the rows before it are"
                " intact: arc-ref export writes them)"
            )
        yield seq, line, checksum
        expected += 1


def read_rows(path: str | os.PathLike[str]) -> Iterator[StoredEvent]:
    """The rows of a store, checked (chain and numbering) but not folded: what `arc-ref export` writes.

    Takes no lock (a writer may be appending: the rows are those committed when the read began). Raises
    StoreNotFound / StoreCorrupt; a damaged row raises after every row before it was yielded, and so does a
    log that lacks acknowledged events (the acknowledgement record, read before the rows, says so).
    """
    target = Path(path)
    if not target.is_file():
        raise StoreNotFound(f"no ARC store at {str(target)!r}" + (" (a directory)" if target.is_dir() else ""))
    real = target.resolve()
    acknowledged = read_acknowledged(real, target)  # before the rows: it never runs ahead of them
    try:
        connection = _connect(target, readonly=True)
    except sqlite3.Error as problem:
        raise StoreError(f"cannot open {str(target)!r}: {problem}") from None
    rows, at_acknowledged, header_read = 0, None, False
    try:
        try:
            header = _read_header(connection)
            header_read = True
            _check_header_values(target, *header)
            connection.execute("BEGIN")
            clean_seq = _clean_seq(connection)
            for seq, line, checksum in _checked_rows(connection, target):
                rows = seq
                if acknowledged is not None and seq == acknowledged.seq:
                    at_acknowledged = checksum
                yield StoredEvent(seq, line.decode("utf-8", "replace"), checksum)
            connection.execute("COMMIT")
        except sqlite3.DatabaseError as problem:
            if acknowledged is None or not _has_wal(real):
                raise _unreadable(target, problem, header_read) from None
            wal_problem = problem  # the rows through the WAL end here: what does the database file hold?
        else:
            missing = _acknowledgement_problem(target, real, acknowledged, clean_seq, rows, at_acknowledged)
            if missing is not None:
                raise StoreCorrupt(missing)
            return
    finally:
        connection.close()
    for seq, line, checksum in _rows_without_wal(real, target):  # the rows before `rows` were yielded already
        if seq == acknowledged.seq:
            at_acknowledged = checksum
        if seq > rows:
            rows = seq
            yield StoredEvent(seq, line.decode("utf-8", "replace"), checksum)
    missing = _acknowledgement_problem(target, real, acknowledged, None, rows, at_acknowledged, wal_problem)
    if missing is not None:
        raise StoreCorrupt(missing)


ACK_SUFFIX = ".ack"
ACK_MAGIC = b"arc-ref acknowledged "
ACK_RECORD_BYTES = len(ACK_MAGIC) + 20 + 1 + 64 + 1  # magic, seq (20 digits), checksum (hex), LF: fixed size
_held_locks: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) of the stores this process holds for writing
_held_guard = threading.Lock()


def _ack_path(real: Path) -> Path:
    """The acknowledgement record beside the database (named after its resolved path, as SQLite names its WAL)."""
    return real.with_name(real.name + ACK_SUFFIX)


def _lock_holder(device: int, inode: int) -> str:
    """The pid holding a flock on the file, from /proc/locks (Linux), or "" when it cannot be told."""
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            for entry in listing:
                fields = entry.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
                    return fields[4]
    except OSError:
        pass
    return ""


class _WriterLock:
    """An exclusive flock on the database file itself, held while the writer is open (one writer per FILE,
    whatever name, symlink or hard link it is reached by); released by the kernel when the process dies.

    Nothing is created or written to take it. The descriptor is opened read-only, without O_CREAT, on the
    database (a FIFO or device at the store's path is refused by its type, never opened for writing)."""

    def __init__(self, path: Path, shown: Path) -> None:
        try:
            self.descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as problem:
            raise StoreError(f"cannot open {str(shown)!r} to lock it: {problem.strerror}") from None
        self.key = (0, 0)
        try:
            status = os.fstat(self.descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise StoreError(f"{str(shown)!r} is not a regular file; an ARC store is one SQLite file")
            if status.st_nlink != 1:
                raise StoreError(
                    f"{str(shown)!r} has {status.st_nlink} names (hard links): SQLite keeps a write-ahead log per"
                    " NAME, so two names of one store would lose or mix rows; open it for writing by one name"
                    " only (remove the other links, or copy the store)")
            self.key = (status.st_dev, status.st_ino)
            with _held_guard:
                if self.key in _held_locks:  # this process: closing a second descriptor would drop SQLite's locks
                    self.key = (0, 0)
                    raise StoreLocked(f"{str(shown)!r} is open for writing by process {os.getpid()} (this one);"
                                      " one writer at a time (readers: arc-ref inspect / export)")
                try:
                    fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as problem:
                    if problem.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        holder = _lock_holder(*self.key)
                        self.key = (0, 0)
                        who = f"process {holder}" if holder else "another process"
                        raise StoreLocked(
                            f"{str(shown)!r} is open for writing by {who}; one writer at a time"
                            " (readers: arc-ref inspect / export)"
                        ) from None
                    self.key = (0, 0)
                    raise StoreError(f"cannot lock {str(shown)!r}: {problem.strerror}") from None
                _held_locks[self.key] = self.descriptor
        except BaseException:
            os.close(self.descriptor)
            self.descriptor = -1
            raise

    def release(self) -> None:
        if self.descriptor >= 0:
            with _held_guard:
                _held_locks.pop(self.key, None)
            os.close(self.descriptor)  # closing the descriptor drops the flock
            self.descriptor = -1


@frozen
class Acknowledged:
    """What the acknowledgement record says: row ``seq`` was acknowledged, its chained checksum ``checksum``."""

    seq: int
    checksum: str


def _ack_record(seq: int, checksum: str) -> bytes:
    return ACK_MAGIC + f"{seq:020d} {checksum}\n".encode("ascii")


def read_acknowledged(real: Path, shown: Path) -> Acknowledged | None:
    """The store's acknowledgement record (None when there is none). Opened without following a symlink and
    without blocking; anything but a regular file holding one well-formed record is refused (StoreCorrupt)."""
    where = _ack_path(real)
    try:
        descriptor = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as problem:
        kind = "a symbolic link" if problem.errno == errno.ELOOP else problem.strerror
        raise StoreCorrupt(f"{str(shown)!r}: its acknowledgement record {str(where)!r} cannot be read ({kind});"
                           " it must be a regular file written by the store's writer") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise StoreCorrupt(f"{str(shown)!r}: its acknowledgement record {str(where)!r} is not a regular file"
                               " (remove it: the store's writer writes a regular file there)")
        data = os.pread(descriptor, ACK_RECORD_BYTES + 1, 0)
    finally:
        os.close(descriptor)
    fields = data[len(ACK_MAGIC):-1].split(b" ") if data.startswith(ACK_MAGIC) else []
    if (len(data) != ACK_RECORD_BYTES or not data.endswith(b"\n") or len(fields) != 2 or not fields[0].isdigit()
            or len(fields[1]) != 64 or any(c not in b"0123456789abcdef" for c in fields[1])):
        raise StoreCorrupt(f"{str(shown)!r}: its acknowledgement record {str(where)!r} is damaged; it cannot say"
                           " how many events were acknowledged (arc-ref export writes the rows that are there)")
    return Acknowledged(int(fields[0]), fields[1].decode("ascii"))


class _AckWriter:
    """The writer's acknowledgement record, kept apart from SQLite's WAL so that losing the WAL cannot erase
    what was acknowledged (A2 across crashes): after each commit, the last acknowledged row and its chained
    checksum, written in place and fdatasync'ed.

    Created fresh under a temporary name and renamed over ``STORE.ack`` (a rename replaces a symlink or
    FIFO planted there instead of writing through it), so the writer writes only files it created."""

    def __init__(self, real: Path, shown: Path, seq: int, checksum: str) -> None:
        target = _ack_path(real)
        staging = real.with_name(f".{real.name}.ack-{os.getpid()}-{threading.get_ident()}")
        try:
            staging.unlink(missing_ok=True)
            self.descriptor = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      0o600)
        except OSError as problem:
            raise StoreError(f"cannot write the acknowledgement record of {str(shown)!r}: {problem.strerror}") \
                from None
        try:
            os.fchmod(self.descriptor, 0o600)
            os.pwrite(self.descriptor, _ack_record(seq, checksum), 0)
            os.fsync(self.descriptor)
            os.replace(staging, target)
            _sync_directory(real.parent)
        except OSError as problem:
            os.close(self.descriptor)
            staging.unlink(missing_ok=True)
            raise StoreError(f"cannot write the acknowledgement record of {str(shown)!r}: {problem.strerror}") \
                from None

    def record(self, seq: int, checksum: str) -> None:
        """Rows up to ``seq`` are acknowledged: a same-size overwrite, so fdatasync need not sync metadata."""
        os.pwrite(self.descriptor, _ack_record(seq, checksum), 0)
        os.fdatasync(self.descriptor)

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        real = path.resolve()
        uri = "file:" + str(real).replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
        if _on_read_only_media(real):  # nobody can write there: no -shm to create, no lock to take
            uri += "&immutable=1"
        connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        connection = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    connection.text_factory = bytes  # lines are checked as the bytes that were stored
    return connection


def _on_read_only_media(real: Path) -> bool:
    """A store on a read-only file system with no write-ahead log beside it (a cleanly closed store): SQLite
    cannot create the WAL index a reader needs there, and no writer can exist, so it is read as immutable."""
    try:
        read_only = bool(os.statvfs(real.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return read_only and not Path(str(real) + "-wal").exists()


def _clean_seq(connection: sqlite3.Connection) -> int | None:
    """The `writer` table's clean_seq (rows when the last writer closed cleanly, 0 while one is open or after
    it crashed); None for a store written before the table existed."""
    try:
        row = connection.execute("SELECT clean_seq FROM writer").fetchone()
    except sqlite3.OperationalError:  # no such table
        return None
    return row[0] if row is not None and isinstance(row[0], int) else 0


def _acknowledgement_problem(shown: Path, real: Path, acknowledged: Acknowledged | None, clean_seq: int | None,
                             rows: int, checksum_at_acknowledged: str | None,
                             wal_problem: sqlite3.Error | None = None) -> str | None:
    """Why the rows read are not every acknowledged event (None when they are). A2 (a stored observation is
    never truncated or deleted during the task) holds across crashes only for a log that lost nothing it
    acknowledged, so a shorter log is refused, never served as the task (spec/store.md). ``wal_problem``:
    SQLite could not read the store through its WAL, and ``rows`` are those readable without it."""
    wal = f"{str(real) + '-wal'!r}"
    keep = f"arc-ref export writes the {rows} rows that are there"
    if acknowledged is not None:
        if acknowledged.seq > rows:
            missing = acknowledged.seq - rows
            why = ("was deleted, truncated or damaged after a crash" if wal_problem is None else
                   f"cannot be read ({wal_problem}): it was damaged after a crash, and the database file without it"
                   " holds the rows up to there")
            return (f"{str(shown)!r}: {missing} acknowledged event{'s are' if missing > 1 else ' is'} missing:"
                    f" rows up to {acknowledged.seq} were acknowledged ({str(_ack_path(real))!r}) but the store"
                    f" ends at row {rows}; its write-ahead log {wal} {why} (restore it if you can; {keep})")
        if checksum_at_acknowledged != acknowledged.checksum:
            return (f"{str(shown)!r}: row {acknowledged.seq} is not the acknowledged row (its chained checksum"
                    f" differs from {str(_ack_path(real))!r}): acknowledged rows were lost and others written in"
                    f" their place, or that record is another store's ({keep})")
        return None
    if clean_seq == 0:
        return (f"{str(shown)!r} was not closed cleanly and its acknowledgement record"
                f" {str(_ack_path(real))!r} is missing: whether acknowledged events were lost cannot be told"
                f" (an unclosed store needs its {wal} and its .ack beside it; {keep})")
    if clean_seq is not None and clean_seq > rows:
        return (f"{str(shown)!r}: {clean_seq - rows} acknowledged event(s) are missing: it was closed with"
                f" {clean_seq} rows and holds {rows} ({keep})")
    return None


def _has_wal(real: Path) -> bool:
    """Whether the store has a non-empty write-ahead log beside it (rows SQLite reads through it)."""
    try:
        return os.stat(str(real) + "-wal").st_size > 0
    except OSError:
        return False


def _connect_without_wal(real: Path) -> sqlite3.Connection:
    """A read-only connection to the database file alone: SQLite's immutable URI reads neither the WAL nor
    its index and writes nothing (used when the store cannot be read through a damaged WAL)."""
    uri = "file:" + str(real).replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    connection.text_factory = bytes
    return connection


def _rows_without_wal(real: Path, shown: Path) -> Iterator[tuple[int, bytes, str]]:
    """The checked rows of the database file without its WAL, up to the first that cannot be read or fails its
    checksum (the file may itself be half checkpointed): what is there when the WAL is unreadable."""
    try:
        connection = _connect_without_wal(real)
    except sqlite3.Error:
        return
    try:
        _check_header_values(shown, *_read_header(connection))
        yield from _checked_rows(connection, shown)
    except (sqlite3.Error, StoreCorrupt):
        return
    finally:
        connection.close()


def _read_header(connection: sqlite3.Connection) -> tuple[int, int]:
    """(application_id, user_version); SQLite's error when the file (or its WAL) cannot be read."""
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    return application_id, version


def _unreadable(path: Path, problem: sqlite3.DatabaseError, header_read: bool) -> StoreError:
    """The error for a store SQLite cannot read (no acknowledgement record to count missing events by)."""
    if header_read:
        return StoreCorrupt(f"{str(path)!r} cannot be read: {problem}")
    if isinstance(problem, sqlite3.OperationalError):  # e.g. no permission to read it, or to create its -shm file
        return StoreError(f"cannot read {str(path)!r}: {problem}")
    return StoreCorrupt(f"{str(path)!r} is not an ARC store ({problem})")  # "file is not a database"


def _check_header(connection: sqlite3.Connection, path: Path) -> None:
    try:
        header = _read_header(connection)
    except sqlite3.DatabaseError as problem:
        raise _unreadable(path, problem, header_read=False) from None
    _check_header_values(path, *header)


def _check_header_values(path: Path, application_id: int, version: int) -> None:
    if application_id != APPLICATION_ID:
        raise StoreCorrupt(f"{str(path)!r} is not an ARC store (a SQLite file of another application)")
    if version != SCHEMA_VERSION:
        raise StoreCorrupt(f"{str(path)!r} is an ARC store of schema {version}; this arc-ref reads schema "
                           f"{SCHEMA_VERSION}")


class DurableStore:
    """An ARC task whose every event is committed to SQLite before it is acknowledged (see the module doc).

    Create with `DurableStore.create(path, config)`, reopen with `DurableStore.open(path)` (the writer) or
    `DurableStore.open(path, readonly=True)` (a reader: no lock, no writes). Use as a context manager.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, lock: _WriterLock | None) -> None:
        self.path = path
        self._real = path.resolve()
        self._connection = connection
        self._lock = lock
        self._acknowledgements: _AckWriter | None = None
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
        # built under a temporary name, locked, and linked into place: a crash while creating leaves no half
        # store, and of two creators only the one whose link succeeds goes on (the other gets StoreExists)
        staging = target.with_name(f".{target.name}.creating-{os.getpid()}-{threading.get_ident()}")
        lock: _WriterLock | None = None
        try:
            try:
                checksum = _build(staging, line)
                lock = _WriterLock(staging, target)
                try:
                    os.link(staging, target)
                except FileExistsError:
                    raise exists from None
                except OSError as problem:  # no hard links here: under the lock, after a last check
                    if problem.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                        raise
                    if os.path.lexists(target):
                        raise exists from None
                    os.replace(staging, target)
            except OSError as problem:
                raise StoreError(f"cannot create {str(target)!r}: {problem.strerror}") from None
            except sqlite3.Error as problem:
                raise StoreError(f"cannot create {str(target)!r}: {problem}") from None
            finally:
                for leftover in ("", "-wal", "-shm", "-journal"):
                    try:
                        Path(str(staging) + leftover).unlink()
                    except OSError:  # not there; or no directory there at all (a path under a regular file)
                        pass
            connection = _connect(target, readonly=False)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(target, connection, lock)
        store._state, store._config_line, store.seq, store.checksum = state, line, 1, checksum
        try:
            _writer_pragmas(connection)
            store._start_writing()
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
            raise StoreNotFound(f"no ARC store at {str(target)!r}" + (" (a directory)" if target.is_dir() else ""))
        lock = None if readonly else _WriterLock(target, target)
        try:
            try:  # read-only until the log is checked: a refused open must not checkpoint a damaged WAL on close
                connection = _connect(target, readonly=True)
            except sqlite3.Error as problem:
                raise StoreError(f"cannot open {str(target)!r}: {problem}") from None
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(target, connection, lock)
        header_read, checked, acknowledged = False, False, None
        try:
            acknowledged = read_acknowledged(store._real, target)  # before the rows: never ahead of them
            _check_header_values(target, *_read_header(connection))
            header_read = True
            if resume is None or not store._catch_up(resume, acknowledged):
                store._load(use_snapshot, acknowledged)
            checked = True
            if not readonly:
                connection.close()
                store._connection = _connect(target, readonly=False)
                _writer_pragmas(store._connection)
                store._start_writing()
        except sqlite3.DatabaseError as problem:  # e.g. a damaged schema ("malformed database schema") or WAL
            store._abandon()
            if checked or acknowledged is None or not _has_wal(store._real):
                raise _unreadable(target, problem, header_read) from None
            return cls._open_without_wal(target, readonly, use_snapshot, acknowledged, problem)
        except BaseException:
            store._abandon()
            raise
        return store

    @classmethod
    def _open_without_wal(cls, target: Path, readonly: bool, use_snapshot: bool, acknowledged: Acknowledged,
                          wal_problem: sqlite3.DatabaseError) -> "DurableStore":
        """SQLite cannot read the store through its WAL (damaged after a crash): the database file alone decides.
        It lacks acknowledged rows: refused with their count (A2 across crashes). It holds them all: a reader
        gets exactly them (read without the WAL); a writer is refused, since SQLite would write through the
        damaged WAL (spec/store.md)."""
        real = target.resolve()
        rows, at_acknowledged = 0, None
        for seq, _, checksum in _rows_without_wal(real, target):
            rows = seq
            if seq == acknowledged.seq:
                at_acknowledged = checksum
        missing = _acknowledgement_problem(target, real, acknowledged, None, rows, at_acknowledged, wal_problem)
        if missing is not None:
            raise StoreCorrupt(missing)
        wal = f"{str(real) + '-wal'!r}"
        if not readonly:
            raise StoreCorrupt(
                f"{str(target)!r}: its write-ahead log {wal} cannot be read ({wal_problem}), but the database file"
                f" without it holds every acknowledged event (rows up to {acknowledged.seq}); readers (arc-ref"
                f" inspect / export) read them; to write again, move {wal} and its -shm aside (keep them: nothing"
                f" acknowledged is lost without them)")
        store = cls(target, _connect_without_wal(real), None)
        try:
            _check_header(store._connection, target)
            store._load(use_snapshot, acknowledged)
        except sqlite3.DatabaseError as problem:
            store._abandon()
            raise _unreadable(target, problem, header_read=True) from None
        except BaseException:
            store._abandon()
            raise
        store.report = OpenReport(store.report.events, store.report.snapshot_seq, store.report.folded,
                                  store.report.seconds, store.report.snapshot_note
                                  + f"; read without its write-ahead log, which cannot be read ({wal_problem})")
        return store

    def _abandon(self) -> None:
        """Close what an open or create that failed had opened, writing nothing."""
        self.closed = True
        self._connection.close()
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
        self._acknowledgements = _AckWriter(self._real, self.path, self.seq, self.checksum)

    def _load(self, use_snapshot: bool, acknowledged: Acknowledged | None) -> None:
        started = time.perf_counter()
        connection = self._connection
        self._watched_seq = 0 if acknowledged is None else acknowledged.seq
        connection.execute("BEGIN")  # one read transaction: a consistent view of the log (SQLite's errors: open)
        try:
            candidate, damaged = self._snapshot_candidate() if use_snapshot else (None, False)
            last = connection.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
            past_the_end = candidate is not None and candidate.seq > last
            state, folded, note = self._fold_rows(None if past_the_end else candidate)
            if past_the_end:
                assert candidate is not None
                note = f"snapshot ignored: it is of row {candidate.seq}, past the last row {last}"
            if damaged:
                note = "snapshot ignored: its row is damaged (not the types and ASCII text it is written with)"
            if state is None:  # the snapshot was refused after its rows were passed: fold them all
                state, folded, _ = self._fold_rows(None)
                # the note of the first pass says why
            clean_seq = _clean_seq(connection)
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")
        missing = _acknowledgement_problem(self.path, self._real, acknowledged, clean_seq, self.seq,
                                           self._watched_checksum)
        if missing is not None:
            raise StoreCorrupt(missing)
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
            for number, line, stored_checksum in connection.execute(
                    "SELECT seq, line, checksum FROM events WHERE seq > ? ORDER BY seq", (seq,)):
                if number != seq + 1:
                    raise StoreCorrupt(f"{str(self.path)!r}: row {seq + 1} is missing (the next row is {number})")
                line = bytes(line)
                checksum = chain(checksum, number, line)
                if stored_checksum != checksum.encode("ascii"):
                    raise StoreCorrupt(f"{str(self.path)!r}: row {number} fails its checksum (damaged or edited)")
                try:
                    event = event_from_line(parse_line(line))
                    if isinstance(event, RequestView):
                        raise TraceError("a view request is not an event of the log")
                    state, _ = step(state, event)
                except (TraceError, ArcError) as problem:
                    raise StoreCorrupt(f"{str(self.path)!r}: row {number}: {problem}") from None
                seq = number
                if acknowledged is not None and number == acknowledged.seq:
                    watched = checksum
            snapshot_row = connection.execute("SELECT max(seq) FROM snapshots").fetchone()
            clean_seq = _clean_seq(connection)
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")
        missing = _acknowledgement_problem(self.path, self._real, acknowledged, clean_seq, seq, watched)
        if missing is not None:
            raise StoreCorrupt(missing)
        self._state, self.seq, self.checksum, self._config_line = state, seq, checksum, resume.config_line
        self.snapshot_seq = snapshot_row[0] or 0 if snapshot_row is not None else 0
        self.report = OpenReport(seq, self.snapshot_seq, seq - resume.seq, time.perf_counter() - started,
                                 f"resumed after row {resume.seq}")
        return True

    def resume_point(self) -> Resume:
        """What to keep of this store to reopen it later at the cost of what is appended meanwhile."""
        return Resume(self.state, self.seq, self.checksum, self._config_line)

    def _snapshot_candidate(self) -> tuple[_SnapshotRow | None, bool]:
        """The latest snapshot's row (None: no snapshot), and whether it was ignored as damaged (wrong types,
        non-ASCII text): a snapshot is a cache, so a damaged one means folding the events (issue 18.8)."""
        row = self._connection.execute(
            "SELECT seq, key, chain, digest FROM snapshots ORDER BY seq DESC LIMIT 1").fetchone()
        if row is None:
            return None, False
        if not isinstance(row[0], int) or not all(isinstance(value, bytes) for value in row[1:]):
            return None, True
        try:
            key, chain_value, digest = (value.decode("ascii") for value in row[1:])
        except UnicodeDecodeError:
            return None, True
        return _SnapshotRow(row[0], key, chain_value, digest), False

    def _fold_rows(self, candidate: _SnapshotRow | None) -> tuple[ArcState | None, int, str]:
        """One pass over the rows: check each, fold those after the snapshot (if one is usable)."""
        note = "no snapshot" if candidate is None else ""
        snapshot_seq = 0 if candidate is None else candidate.seq
        state: ArcState | None = None
        folded = 0
        self.snapshot_seq = 0
        rows = 0
        checksum = GENESIS
        for seq, line, checksum in _checked_rows(self._connection, self.path):
            rows = seq
            if seq == self._watched_seq:
                self._watched_checksum = checksum
            if candidate is not None and 1 < seq < snapshot_seq:
                continue  # covered by the snapshot: checked against its chain at row snapshot_seq (else a refold)
            try:
                obj = parse_line(line)
                if seq == 1:
                    if obj.get("op") != "config":
                        raise TraceError("row 1 must hold the config line")
                    _, config = config_from_line(obj)
                    state = init(config)
                    self._config_line = line
                    if candidate is not None and candidate.key != snapshot.snapshot_key(state.setup, line):
                        note = "snapshot ignored: written by other code or for another tokenizer"
                        candidate = None
                else:
                    event = event_from_line(obj)
                    if isinstance(event, RequestView):
                        raise TraceError("a view request is not an event of the log")
                    if candidate is None or seq > snapshot_seq:
                        assert state is not None
                        state, _ = step(state, event)
                        folded += 1
            except (TraceError, ArcError) as problem:
                raise StoreCorrupt(f"{str(self.path)!r}: row {seq}: {problem}") from None
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
        parts = self._connection.execute("SELECT part, data FROM snapshots WHERE seq = ? ORDER BY part", (seq,))
        chunks: list[bytes] = []
        for number, (part, data) in enumerate(parts):
            if part != number:
                raise snapshot.SnapshotRefused(f"part {number} is missing")
            chunks.append(bytes(data))
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
            if self.snapshot_due():  # before the new events: a snapshot never delays an acknowledgement
                self.write_snapshot()
            state = self.state
            seq, checksum = self.seq, self.checksum
            rows: list[tuple[int, str, str]] = []
            acknowledged: list[Appended] = []
            for event in events:
                if isinstance(event, RequestView):
                    raise StoreError("a view request changes nothing and is not stored; use view(store.state)")
                try:
                    line_object = event_line(event)
                except TraceError as problem:
                    raise StoreError(f"cannot store this event: {problem}") from None
                state, output = step(state, event)  # ArcError: nothing of this batch is stored
                line = encode(line_object)
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
                raise StoreError(f"{str(self.path)!r}: cannot store event #{rows[0][0]}: {problem}") from None
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


def _build(path: Path, config_line: bytes) -> str:
    """A complete new store at ``path`` (owner-only): header, schema and row 1, committed; its checksum."""
    path.unlink(missing_ok=True)  # a leftover of a crashed creator (a symlink planted there is removed, not followed)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(descriptor, 0o600)
    os.close(descriptor)
    connection = _connect(path, readonly=False)
    try:
        connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("PRAGMA journal_mode = WAL")
        _writer_pragmas(connection)
        connection.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        checksum = chain(GENESIS, 1, config_line)
        connection.execute("INSERT INTO events VALUES (1, ?, ?)", (config_line.decode("utf-8"), checksum))
        connection.execute("INSERT INTO writer VALUES (1)")
        connection.execute("COMMIT")
    finally:
        connection.close()
    return checksum


def _writer_pragmas(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA synchronous = FULL")  # see the module doc: an acknowledged event is on disk
    connection.execute("PRAGMA journal_size_limit = 67108864")  # the WAL is truncated back to 64 MiB


def fold_lines(lines: Sequence[str]) -> ArcState:
    """The state a list of trace lines folds to (the config line first); any bad line raises."""
    state: ArcState | None = None
    for number, line in enumerate(lines, start=1):
        obj = parse_line(line)
        if number == 1:
            state = init(config_from_line(obj)[1])
        else:
            assert state is not None
            state, _ = step(state, event_from_line(obj))
    if state is None:
        raise TraceError("no lines")
    return state
