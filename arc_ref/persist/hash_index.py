"""The directory of `arc-ref proxy --store DIR`'s conversations: which conversation passed which hash of the agent's
chain, shared by every proxy process on DIR (issue 25 item 3).

``DIR/hashes.sqlite`` (SQLite in WAL mode, which any number of processes on one machine read and write) holds one
row per mark the proxies wrote: ``(id, hash, key)``, ``id`` increasing. A process reads every row once at start
(instead of opening each conversation) and then, before it looks a request up, only the rows after the last it
read: so a request finds a conversation another process created or moved on meanwhile. The rows are a finding
aid, not the record: each conversation's own ``marks.jsonl`` (`arc_ref.persist.marks`), checked against its rows,
decides where a request resumes; a row is written after its mark, and a row whose mark is missing is ignored.
A conversation directory whose key has no row (a store written before this file existed, or a row lost with
the machine) is read from its ``marks.jsonl`` at start and its rows added.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterable

from arc_ref.persist.errors import StoreError

HASH_INDEX_FILE = "hashes.sqlite"
BUSY_TIMEOUT_S = 30.0  # a writer of the other process holds the database for one short insert


class HashIndex:
    """``DIR/hashes.sqlite``: (hash, conversation key) rows, read incrementally (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / HASH_INDEX_FILE
        self.last_id = 0  # the rows up to this one were read
        self._guard = threading.Lock()
        try:
            self._connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                               check_same_thread=False)
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute("CREATE TABLE IF NOT EXISTS hashes (id INTEGER PRIMARY KEY, hash TEXT NOT NULL,"
                                     " key TEXT NOT NULL)")
        except sqlite3.Error as problem:
            raise StoreError(f"the conversations' index {str(self.path)!r} cannot be opened ({problem}); it is"
                             " rebuilt from each conversation's marks.jsonl when removed") from None

    def new_rows(self) -> list[tuple[str, str]]:
        """The (hash, key) rows written since the last call (by any process), oldest first."""
        with self._guard:
            try:
                rows = self._connection.execute("SELECT id, hash, key FROM hashes WHERE id > ? ORDER BY id",
                                                (self.last_id,)).fetchall()
            except sqlite3.Error as problem:
                raise StoreError(f"the conversations' index {str(self.path)!r} cannot be read: {problem}") from None
            if rows:
                self.last_id = rows[-1][0]
            return [(chain_hash, key) for _, chain_hash, key in rows]

    def add(self, rows: Iterable[tuple[str, str]]) -> None:
        """Write (hash, key) rows (after their marks were written)."""
        values = list(rows)
        if not values:
            return
        with self._guard:
            try:
                self._connection.execute("BEGIN IMMEDIATE")
                try:
                    self._connection.executemany("INSERT INTO hashes (hash, key) VALUES (?, ?)", values)
                    self._connection.execute("COMMIT")
                finally:
                    if self._connection.in_transaction:
                        self._connection.execute("ROLLBACK")
            except sqlite3.Error as problem:
                raise StoreError(f"the conversations' index {str(self.path)!r} cannot be written: {problem}") \
                    from None

    def close(self) -> None:
        with self._guard:
            self._connection.close()


__all__ = ["HASH_INDEX_FILE", "HashIndex"]
