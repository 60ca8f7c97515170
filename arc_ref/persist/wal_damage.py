"""The SQLite store when its write-ahead log cannot be read ("database disk image is malformed").

A WAL that SQLite itself cannot read is set aside by reading the database file alone (immutable): the store is
refused with the count of what it lacks, or, holding every acknowledged row, read as it is by readers and
refused to writers (spec/store.md). These are the readings of the database file without its WAL.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Iterator

from arc_ref.persist.errors import StoreCorrupt
from arc_ref.persist.rows import checked_rows
from arc_ref.persist.sqlite_file import ROWS_QUERY, check_header_values, read_header


def has_wal(real: Path) -> bool:
    """Whether the store has a non-empty write-ahead log beside it (rows SQLite reads through it)."""
    try:
        return os.stat(str(real) + "-wal").st_size > 0
    except OSError:
        return False


def connect_without_wal(real: Path) -> sqlite3.Connection:
    """A read-only connection to the database file alone: SQLite's immutable URI reads neither the WAL nor
    its index and writes nothing (used when the store cannot be read through a damaged WAL)."""
    uri = "file:" + str(real).replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    connection.text_factory = bytes
    return connection


def rows_without_wal(real: Path, shown: Path) -> Iterator[tuple[int, bytes, str]]:
    """The checked rows of the database file without its WAL, up to the first that cannot be read or fails its
    checksum (the file may itself be half checkpointed): what is there when the WAL is unreadable."""
    try:
        connection = connect_without_wal(real)
    except sqlite3.Error:
        return
    try:
        check_header_values(shown, *read_header(connection))
        yield from checked_rows(connection.execute(ROWS_QUERY), f"{str(shown)!r}")
    except (sqlite3.Error, StoreCorrupt):
        return
    finally:
        connection.close()
