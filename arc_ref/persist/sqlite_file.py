"""The SQLite store's file: its schema and header, its connections, and building a new one.

The database is in WAL mode with ``synchronous=FULL``: every commit fsyncs the write-ahead log, so an
acknowledged event survives a kill -9 and also a power loss or OS crash (``NORMAL`` would survive a kill but may
lose the last commits to a power loss). Every file the store creates (the database, its ``-wal`` and ``-shm``
files, which SQLite creates with the database's mode) is owner-only (0600). Readers read one consistent snapshot
of the log (SQLite's WAL isolation); on a read-only file system a cleanly closed store (no WAL) is read as
immutable.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from arc_ref.persist.errors import StoreCorrupt, StoreError, StoreFull, StoreReadOnly
from arc_ref.persist.rows import GENESIS, chain

APPLICATION_ID = 0x41524331  # "ARC1" in the SQLite header: this file is an ARC store
SCHEMA_VERSION = 1
ROWS_QUERY = "SELECT seq, line, checksum FROM events ORDER BY seq"  # every row, in order (`checked_rows`)

SCHEMA = """
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


def connect(path: Path, readonly: bool) -> sqlite3.Connection:
    if readonly:
        real = path.resolve()
        uri = "file:" + str(real).replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
        if on_read_only_media(real):  # nobody can write there: no -shm to create, no lock to take
            uri += "&immutable=1"
        connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    else:
        connection = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    connection.text_factory = bytes  # lines are checked as the bytes that were stored
    return connection


def no_logs_beside(real: Path) -> bool:
    """Whether neither a -wal nor a -shm file lies beside the database (a cleanly closed store: no writer open)."""
    return not any(os.path.lexists(str(real) + suffix) for suffix in ("-wal", "-shm"))


def remove_reader_logs(real: Path) -> None:
    """Remove the empty -wal and the -shm that read-only connections created beside a cleanly closed store (one
    that had none: `no_logs_beside` before the reader opened it). A read-only connection cannot checkpoint, so
    SQLite leaves them when it closes (review h24 nit N-c: inspect and export left them where there were none).
    SQLite removes them itself: a read-write connection that only reads, closed as the database's last
    connection, checkpoints the empty log and deletes both; while any other connection has the database open (a
    writer, a reader) it cannot take the exclusive lock that needs, and leaves them. Only an empty log: one with
    rows is never checkpointed by a reader. Best effort: nothing is said when it cannot."""
    try:
        if os.stat(str(real) + "-wal").st_size != 0 or os.path.lexists(str(real) + "-journal"):
            return  # (a rollback journal would be applied by a read-write connection: never by a reader)
        uri = "file:" + str(real).replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=rw"
        connection = sqlite3.connect(uri, uri=True, isolation_level=None)  # mode=rw: never creates a database
        try:
            connection.execute("PRAGMA application_id").fetchone()  # a read: opens the log
        finally:
            connection.close()
    except (OSError, sqlite3.Error):
        pass


def on_read_only_media(real: Path) -> bool:
    """A store on a read-only file system with no write-ahead log beside it (a cleanly closed store): SQLite
    cannot create the WAL index a reader needs there, and no writer can exist, so it is read as immutable."""
    try:
        read_only = bool(os.statvfs(real.parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return read_only and not Path(str(real) + "-wal").exists()


def read_clean_seq(connection: sqlite3.Connection) -> int | None:
    """The `writer` table's clean_seq (rows when the last writer closed cleanly, 0 while one is open or after
    it crashed); None for a store written before the table existed."""
    try:
        row = connection.execute("SELECT clean_seq FROM writer").fetchone()
    except sqlite3.OperationalError:  # no such table
        return None
    return row[0] if row is not None and isinstance(row[0], int) else 0


def read_header(connection: sqlite3.Connection) -> tuple[int, int]:
    """(application_id, user_version); SQLite's error when the file (or its WAL) cannot be read."""
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    return application_id, version


def is_damage(problem: sqlite3.Error) -> bool:
    """Whether SQLite's error says the file or its WAL is damaged (malformed, not a database, a short or failed
    read), rather than that the file system refuses (read-only, full, cannot open) or that it is busy."""
    code = getattr(problem, "sqlite_errorcode", None)
    return not isinstance(code, int) or code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB,
                                                        sqlite3.SQLITE_IOERR)


def rows_may_be_counted(problem: sqlite3.Error) -> bool:
    """Whether, after this damage, the rows the database file alone holds can be read and counted: not when its
    schema is damaged (no table can be read: that store is refused as corrupt, spec/store.md)."""
    return is_damage(problem) and not str(problem).startswith("malformed database schema")


def refused_by_file_system(path: Path, doing: str, problem: OSError | sqlite3.Error) -> StoreError | None:
    """The error for what the file system refused, named for what it is: a full file system (StoreFull), a
    read-only one or a directory that cannot be written (StoreReadOnly); None when it is neither."""
    if isinstance(problem, OSError):
        full = problem.errno in (errno.ENOSPC, errno.EDQUOT)
        read_only = problem.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        cause = problem.strerror or str(problem)
    else:
        code = getattr(problem, "sqlite_errorcode", 0)
        code = code & 0xFF if isinstance(code, int) else 0
        full = code == sqlite3.SQLITE_FULL
        read_only = code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM) or (
            not is_damage(problem) and not _writable(path.parent))
        cause = str(problem)
    if full:
        return StoreFull(f"{str(path)!r}: cannot {doing}: the file system is full ({cause}); nothing is damaged and"
                         " nothing acknowledged is lost: make room and try again")
    if read_only:
        after = {"create it": "nothing was created",
                 "read it": "SQLite cannot write the index it reads an unclosed store's log with there: read a copy",
                 }.get(doing, "readers (arc-ref inspect / export) can still read it")
        return StoreReadOnly(f"{str(path)!r}: cannot {doing}: it is on a read-only file system or in a directory"
                             f" that cannot be written ({cause}); nothing is damaged: {after}")
    return None


def _writable(directory: Path) -> bool:
    """Whether files can be created in ``directory`` (its file system mounted read-write, write permission)."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return True
    return os.access(directory, os.W_OK)


def unreadable(path: Path, problem: sqlite3.DatabaseError, header_read: bool) -> StoreError:
    """The error for a store SQLite cannot read (no acknowledgement record to count missing events by): a file
    system that refuses is named (read-only, full), damage is StoreCorrupt."""
    refused = None if is_damage(problem) else refused_by_file_system(path, "read it", problem)
    if refused is not None:
        return refused
    if header_read:
        return StoreCorrupt(f"{str(path)!r} cannot be read: {problem}")
    if isinstance(problem, sqlite3.OperationalError):  # e.g. no permission to read it, or to create its -shm file
        return StoreError(f"cannot read {str(path)!r}: {problem}")
    return StoreCorrupt(f"{str(path)!r} is not an ARC store ({problem})")  # "file is not a database"


def check_header(connection: sqlite3.Connection, path: Path) -> None:
    try:
        header = read_header(connection)
    except sqlite3.DatabaseError as problem:
        raise unreadable(path, problem, header_read=False) from None
    check_header_values(path, *header)


def check_header_values(path: Path, application_id: int, version: int) -> None:
    if application_id != APPLICATION_ID:
        raise StoreCorrupt(f"{str(path)!r} is not an ARC store (a SQLite file of another application)")
    if version != SCHEMA_VERSION:
        raise StoreCorrupt(f"{str(path)!r} is an ARC store of schema {version}; this arc-ref reads schema "
                           f"{SCHEMA_VERSION}")


def build_store(path: Path, config_line: bytes) -> str:
    """A complete new store at ``path`` (owner-only): header, schema and row 1, committed; its checksum."""
    path.unlink(missing_ok=True)  # a leftover of a crashed creator (a symlink planted there is removed, not followed)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(descriptor, 0o600)
    os.close(descriptor)
    connection = connect(path, readonly=False)
    try:
        connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("PRAGMA journal_mode = WAL")
        writer_pragmas(connection)
        connection.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        checksum = chain(GENESIS, 1, config_line)
        connection.execute("INSERT INTO events VALUES (1, ?, ?)", (config_line.decode("utf-8"), checksum))
        connection.execute("INSERT INTO writer VALUES (1)")
        connection.execute("COMMIT")
    finally:
        connection.close()
    return checksum


def writer_pragmas(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA synchronous = FULL")  # see the module doc: an acknowledged event is on disk
    connection.execute("PRAGMA journal_size_limit = 67108864")  # the WAL is truncated back to 64 MiB
