"""The SQLite store's acknowledgement record, ``STORE.ack``: what was acknowledged, kept apart from SQLite's WAL.

Acknowledged events live in ``STORE-wal`` until a checkpoint, so a WAL deleted ("stale SQLite files"),
truncated or damaged after a crash would reopen as a shorter log. After every commit the writer therefore
writes the last acknowledged row and its chained checksum to ``STORE.ack`` (a fixed-size record, pwrite and
fdatasync: a second fsync per append, measured by benchmarks/bench_store.py), and marks the store open in
the database file itself (table ``writer``, checkpointed before the first append; a clean close records the
row count there). Every open (reader, writer, export) reads the record before the rows and refuses a log
that ends before it, or whose row there has another checksum, with StoreCorrupt saying how many
acknowledged events are missing (`acknowledgement_problem`); an unclosed store without its record is
refused too. The record is owner-only (0600) and written only as a file the writer created itself.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import threading
from pathlib import Path

from attrs import frozen

from arc_ref.persist.errors import StoreCorrupt, StoreError
from arc_ref.persist.sqlite_file import refused_by_file_system

ACK_SUFFIX = ".ack"
ACK_MAGIC = b"arc-ref acknowledged "
ACK_RECORD_BYTES = len(ACK_MAGIC) + 20 + 1 + 64 + 1  # magic, seq (20 digits), checksum (hex), LF: fixed size


def ack_path(real: Path) -> Path:
    """The acknowledgement record beside the database (named after its resolved path, as SQLite names its WAL)."""
    return real.with_name(real.name + ACK_SUFFIX)


@frozen
class Acknowledged:
    """What the acknowledgement record says: row ``seq`` was acknowledged, its chained checksum ``checksum``."""

    seq: int
    checksum: str


def ack_record(seq: int, checksum: str) -> bytes:
    return ACK_MAGIC + f"{seq:020d} {checksum}\n".encode("ascii")


def read_acknowledged(real: Path, shown: Path) -> Acknowledged | None:
    """The store's acknowledgement record (None when there is none). Opened without following a symlink and
    without blocking; anything but a regular file holding one well-formed record is refused (StoreCorrupt)."""
    where = ack_path(real)
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


class AckWriter:
    """The writer's acknowledgement record, kept apart from SQLite's WAL so that losing the WAL cannot erase
    what was acknowledged (A2 across crashes): after each commit, the last acknowledged row and its chained
    checksum, written in place and fdatasync'ed.

    Created fresh under a temporary name and renamed over ``STORE.ack`` (a rename replaces a symlink or
    FIFO planted there instead of writing through it), so the writer writes only files it created."""

    def __init__(self, real: Path, shown: Path, seq: int, checksum: str) -> None:
        target = ack_path(real)
        staging = real.with_name(f".{real.name}.ack-{os.getpid()}-{threading.get_ident()}")
        try:
            staging.unlink(missing_ok=True)
            self.descriptor = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      0o600)
        except OSError as problem:
            raise refused_by_file_system(shown, "write its acknowledgement record", problem) or StoreError(
                f"cannot write the acknowledgement record of {str(shown)!r}: {problem.strerror}") from None
        try:
            os.fchmod(self.descriptor, 0o600)
            os.pwrite(self.descriptor, ack_record(seq, checksum), 0)
            os.fsync(self.descriptor)
            os.replace(staging, target)
            sync_directory(real.parent)
        except BaseException as problem:  # a failure, or an interrupt (Ctrl-C, SIGTERM in `arc-ref copy`): no
            os.close(self.descriptor)     # staging file left behind
            staging.unlink(missing_ok=True)
            if not isinstance(problem, OSError):
                raise
            raise refused_by_file_system(shown, "write its acknowledgement record", problem) or StoreError(
                f"cannot write the acknowledgement record of {str(shown)!r}: {problem.strerror}") from None

    def record(self, seq: int, checksum: str) -> None:
        """Rows up to ``seq`` are acknowledged: a same-size overwrite, so fdatasync need not sync metadata."""
        os.pwrite(self.descriptor, ack_record(seq, checksum), 0)
        os.fdatasync(self.descriptor)

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _has_wal(real: Path) -> bool:
    try:
        return os.stat(str(real) + "-wal").st_size > 0
    except OSError:
        return False


def acknowledgement_problem(shown: Path, real: Path, acknowledged: Acknowledged | None, clean_seq: int | None,
                             rows: int, checksum_at_acknowledged: str | None,
                             wal_problem: sqlite3.Error | None = None, file_rows: int | None = None) -> str | None:
    """Why the rows read are not every acknowledged event (None when they are). A2 (a stored observation is
    never truncated or deleted during the task) holds across crashes only for a log that lost nothing it
    acknowledged, so a shorter log is refused, never served as the task (spec/store.md). ``wal_problem``:
    SQLite could not read the store through its WAL, and ``rows`` are those read through it up to there, or
    those the database file alone holds (``file_rows``, when known) when it holds more."""
    wal = f"{str(real) + '-wal'!r}"
    keep = f"arc-ref export writes the {rows} rows that are there"
    if acknowledged is not None:
        if acknowledged.seq > rows:
            missing = acknowledged.seq - rows
            if wal_problem is None:
                why = "was deleted, truncated or damaged after a crash"
            elif _has_wal(real) and file_rows is not None and file_rows < rows:  # rows read through the WAL
                why = (f"cannot be read past row {rows} ({wal_problem}): it was damaged after a crash; keep it: the"
                       f" database file without it holds only {file_rows} row{'s' if file_rows != 1 else ''}")
            elif _has_wal(real):
                why = (f"cannot be read ({wal_problem}): it was damaged after a crash, and the database file without"
                       " it holds the rows up to there")
            else:  # a checkpoint cut by a crash, then the log deleted: the file is half old, half new
                why = (f"is missing or empty and the database file alone can be read only up to there"
                       f" ({wal_problem}): most often a checkpoint cut by a crash, the log deleted after it")
            return (f"{str(shown)!r}: {missing} acknowledged event{'s are' if missing > 1 else ' is'} missing:"
                    f" rows up to {acknowledged.seq} were acknowledged ({str(ack_path(real))!r}) but the store"
                    f" ends at row {rows}; its write-ahead log {wal} {why} (restore it if you can; {keep})")
        if checksum_at_acknowledged != acknowledged.checksum:
            return (f"{str(shown)!r}: row {acknowledged.seq} is not the acknowledged row (its chained checksum"
                    f" differs from {str(ack_path(real))!r}): acknowledged rows were lost and others written in"
                    f" their place, or that record is another store's ({keep})")
        return None
    if clean_seq == 0:
        return (f"{str(shown)!r} was not closed cleanly and its acknowledgement record"
                f" {str(ack_path(real))!r} is missing: whether acknowledged events were lost cannot be told"
                f" (an unclosed store needs its {wal} and its .ack beside it; {keep})")
    if clean_seq is not None and clean_seq > rows:
        return (f"{str(shown)!r}: {clean_seq - rows} acknowledged event(s) are missing: it was closed with"
                f" {clean_seq} rows and holds {rows} ({keep})")
    return None
