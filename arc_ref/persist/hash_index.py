"""The directory of `arc-ref proxy --store DIR`'s conversations: which conversation passed which hash of the agent's
chain, shared by every proxy process on DIR (issue 25 item 3).

``DIR/hashes.sqlite`` (SQLite in WAL mode, which any number of processes on one machine read and write) holds one
row per mark the proxies wrote: ``(id, hash, key)``, ``id`` increasing, indexed by hash. A process looks each
request's hashes up in it (one query; nothing of it is kept in memory), so a request finds a conversation another
process created or moved on meanwhile, and a start opens no conversation. The rows are a finding aid, not the
record: each conversation's own ``marks.jsonl`` (`arc_ref.persist.marks`), checked against its rows,
decides where a request resumes; a row is written after its mark, and a row whose mark is missing is ignored.
A conversation directory whose key has no row (a store written before this file existed, or a row lost with
the machine) is read from its ``marks.jsonl`` at start and its rows added.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

from arc_ref.persist.errors import StoreError

HASH_INDEX_FILE = "hashes.sqlite"
BUSY_TIMEOUT_S = 30.0  # a writer of the other process holds the database for one short insert
LOOKUP_BATCH = 500  # hashes per query (SQLite allows 32,766 parameters)


class HashIndex:
    """``DIR/hashes.sqlite``: (hash, conversation key) rows, read incrementally (see the module doc)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / HASH_INDEX_FILE
        self._guard = threading.Lock()
        # created owner-only, as every file of a conversation is (its rows hold the conversations' keys); SQLite gives
        # its -wal and -shm files the database file's mode. A file already there keeps the mode its owner gave it
        try:
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        except OSError as problem:
            raise StoreError(f"the conversations' index {str(self.path)!r} cannot be opened"
                             f" ({problem.strerror or problem})") from None
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            connection: sqlite3.Connection | None = None
            try:
                self._connection = connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                                                isolation_level=None, check_same_thread=False)
                # switching to WAL answers "database is locked" at once (no busy wait) while another process
                # sets the file up: tried again, as two processes started together on a new DIR do
                self._connection.execute("PRAGMA journal_mode=WAL")
                self._connection.execute("PRAGMA synchronous=NORMAL")
                self._connection.execute("CREATE TABLE IF NOT EXISTS hashes (id INTEGER PRIMARY KEY, hash TEXT"
                                         " NOT NULL, key TEXT NOT NULL)")
                self._connection.execute("CREATE INDEX IF NOT EXISTS hashes_by_hash ON hashes (hash)")
                return
            except sqlite3.OperationalError as problem:
                if "locked" in str(problem) and time.monotonic() < deadline:
                    if connection is not None:
                        connection.close()
                    time.sleep(0.05)
                    continue
                raise self._unopened(problem) from None
            except sqlite3.Error as problem:
                raise self._unopened(problem) from None

    def _unopened(self, problem: sqlite3.Error) -> StoreError:
        if "locked" in str(problem):
            return StoreError(f"the conversations' index {str(self.path)!r} cannot be opened: another process"
                              f" holds it locked ({problem})")
        return StoreError(f"the conversations' index {str(self.path)!r} cannot be opened ({problem}); it is"
                          " rebuilt from each conversation's marks.jsonl when removed")

    def keys_of(self, hashes: Sequence[str]) -> dict[str, list[str]]:
        """The conversations that passed each of ``hashes`` (those that any did), oldest row first."""
        found: dict[str, list[str]] = {}
        wanted = list(dict.fromkeys(hashes))
        with self._guard:
            try:
                for start in range(0, len(wanted), LOOKUP_BATCH):
                    batch = wanted[start:start + LOOKUP_BATCH]
                    rows = self._connection.execute(
                        f"SELECT hash, key FROM hashes WHERE hash IN ({', '.join('?' * len(batch))}) ORDER BY id",
                        batch).fetchall()
                    for chain_hash, key in rows:
                        keys = found.setdefault(chain_hash, [])
                        if key not in keys:
                            keys.append(key)
            except sqlite3.Error as problem:
                raise StoreError(f"the conversations' index {str(self.path)!r} cannot be read: {problem}") from None
        return found

    def keys(self) -> set[str]:
        """Every conversation the index names (read once, at start)."""
        with self._guard:
            try:
                return {key for (key,) in self._connection.execute("SELECT DISTINCT key FROM hashes")}
            except sqlite3.Error as problem:
                raise StoreError(f"the conversations' index {str(self.path)!r} cannot be read: {problem}") from None

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

    def remove(self, keys: Sequence[str]) -> int:
        """Every row of conversations ``keys`` (`arc-ref forget`); how many."""
        removed = 0
        with self._guard:
            try:
                for start in range(0, len(keys), LOOKUP_BATCH):
                    batch = list(keys[start:start + LOOKUP_BATCH])
                    removed += self._connection.execute(
                        f"DELETE FROM hashes WHERE key IN ({', '.join('?' * len(batch))})", batch).rowcount
            except sqlite3.Error as problem:
                raise StoreError(f"the conversations' index {str(self.path)!r} cannot be written: {problem}") \
                    from None
        return removed

    def close(self) -> None:
        with self._guard:
            self._connection.close()


__all__ = ["HASH_INDEX_FILE", "HashIndex"]
