"""The proxy's conversation index: the marks of each conversation's hash chain, kept beside its store with the
store's integrity rules.

`arc-ref proxy --store DIR` keeps each conversation in ``DIR/KEY/``: its events in a durable store (``task.arc``)
and its marks in ``marks.jsonl`` (`MarkFile`). A mark says: after ``position`` messages of the agent, whose hash
chain is then ``chain_hash``, the store held ``seq`` rows, the last with the chained checksum ``checksum`` (which
binds the mark to the rows). One line per mark, canonical JSON, each with its own chained checksum ``chain``
(`arc_ref.persist.rows.chain` of the previous line's, the line's number and the line without its chain, from
`MARKS_GENESIS`), as the store's rows: a damaged, edited, reordered or missing line, or a mark of other rows than
the store's, stops the reopen with StoreCorrupt naming the file and the line.

A mark is written after the rows it names were committed (never ahead of them) and is not fsynced: a crash may
lose the last marks or cut the last line. A cut last line (no LF at the end of the file) is dropped and cut off
when the index is opened again; the marks before it stand, and a conversation whose rows go past its last mark
is forked at that mark by the proxy (never resumed in place). Only files the index created are written (created
with O_EXCL, 0600; opened with O_NOFOLLOW).

`ConversationIndex` is what the proxy calls; `MarkFile` is the file beside a SQLite store, and another backend
(PostgreSQL) keeps the same marks in its own storage.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Callable, Iterator, Protocol

from attrs import frozen

from arc_ref.persist.errors import StoreCorrupt, StoreError
from arc_ref.persist.rows import chain

INDEX_FILE = "marks.jsonl"
MARKS_GENESIS = hashlib.sha256(b"arc-ref conversation index 1").hexdigest()  # the chain's value before line 1
MARK_KEYS = {"chain", "checksum", "hash", "position", "seq"}


@frozen
class IndexMark:
    """A known point of a conversation: ``position`` agent messages (hash chain ``chain_hash``), ``seq`` rows of its
    store, the last with the chained checksum ``checksum``."""

    chain_hash: str
    position: int
    seq: int
    checksum: str


class ConversationIndex(Protocol):
    """The marks of one conversation, as the proxy keeps them (a file beside its store, or a database's table)."""

    def append(self, mark: IndexMark) -> None:
        """Keep ``mark`` (after its rows were committed); StoreError when it cannot be written."""


def _body(mark: IndexMark) -> dict[str, object]:
    return {"checksum": mark.checksum, "hash": mark.chain_hash, "position": mark.position, "seq": mark.seq}


def _encode(value: dict[str, object]) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


class MarkFile:
    """The index of one conversation: ``marks.jsonl`` in its directory (see the module doc)."""

    def __init__(self, path: Path, count: int, last_chain: str, offset: int = 0) -> None:
        self.path = path
        self.count = count  # marks (lines) in the file
        self.last_chain = last_chain
        self.offset = offset  # bytes of the file read or written (its first ``count`` lines)

    @staticmethod
    def holds_index(directory: Path) -> bool:
        """Whether ``directory`` holds a conversation's index (a directory of ``arc-ref proxy --store``)."""
        return os.path.lexists(directory / INDEX_FILE)

    @classmethod
    def create(cls, directory: Path) -> "MarkFile":
        """An empty index in ``directory`` (StoreError when it exists or cannot be created)."""
        path = directory / INDEX_FILE
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as problem:
            raise StoreError(f"cannot create the conversation index {str(path)!r}: {problem.strerror}") from None
        os.close(descriptor)
        return cls(path, 0, MARKS_GENESIS, 0)

    @classmethod
    def open(cls, directory: Path, rows: int, row_checksums: Iterator[tuple[int, str]]) -> tuple["MarkFile",
                                                                                                   list[IndexMark]]:
        """The index of a conversation whose store holds ``rows`` rows, and its marks, every line checked (its
        chain, its fields, its row: ``row_checksums`` yields (seq, chained checksum) of the store's rows in
        order). A cut last line is dropped and cut off the file. StoreCorrupt names a damaged line."""
        path = directory / INDEX_FILE
        data = _read_regular(path)
        complete = data[:data.rfind(b"\n") + 1]  # a last line without its LF was cut by a crash
        marks: list[IndexMark] = []
        last_chain = MARKS_GENESIS
        for number, line in enumerate(complete.splitlines(), start=1):
            mark, last_chain = _checked_mark(path, number, line, last_chain)
            if mark.seq > rows:
                raise StoreCorrupt(f"{str(path)!r}: line {number}: a mark of row {mark.seq}, past the last row"
                                   f" {rows} of its store (the index is not of these rows)")
            marks.append(mark)
        _bind_to_rows(path, marks, row_checksums)
        if len(complete) < len(data):
            _cut(path, len(complete))
        return cls(path, len(marks), last_chain, len(complete)), marks

    def read_new(self, rows: int, row_checksum: Callable[[int], str | None]) -> list[IndexMark]:
        """The marks another process appended since this index was opened or last read, each line checked (its
        chain from the last line read, its fields, ``row_checksum(seq)`` of the store that now holds ``rows``
        rows); a cut last line is cut off. Only the writer of the conversation (its store's lock held) calls it."""
        data = _read_regular(self.path)
        if len(data) < self.offset:
            raise StoreCorrupt(f"{str(self.path)!r}: the conversation index is shorter than the {self.offset} bytes"
                               " read from it before (cut or replaced)")
        complete = data[:data.rfind(b"\n") + 1]
        marks: list[IndexMark] = []
        number, last_chain = self.count, self.last_chain
        for line in data[self.offset:len(complete)].splitlines():
            number += 1
            mark, last_chain = _checked_mark(self.path, number, line, last_chain)
            if mark.seq > rows or row_checksum(mark.seq) != mark.checksum:
                raise StoreCorrupt(f"{str(self.path)!r}: line {number}: the mark is not of its store's rows (row"
                                   f" {mark.seq})")
            marks.append(mark)
        if len(complete) < len(data):
            _cut(self.path, len(complete))
        self.count, self.last_chain, self.offset = number, last_chain, max(self.offset, len(complete))
        return marks

    def append(self, mark: IndexMark) -> None:
        """Write ``mark`` as the next line, chained to the one before it."""
        body = _body(mark)
        number = self.count + 1
        link = chain(self.last_chain, number, _encode(body))
        line = _encode({**body, "chain": link}) + b"\n"
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as problem:
            raise StoreError(f"cannot write the conversation index {str(self.path)!r}: {problem.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise StoreError(f"{str(self.path)!r} is not a regular file; it is a conversation index")
            written = os.write(descriptor, line)
            if written != len(line):
                raise StoreError(f"cannot write the conversation index {str(self.path)!r}: a short write")
            end = os.lseek(descriptor, 0, os.SEEK_CUR)
        except OSError as problem:
            raise StoreError(f"cannot write the conversation index {str(self.path)!r}: {problem.strerror}") from None
        finally:
            os.close(descriptor)
        self.count, self.last_chain, self.offset = number, link, end


def read_marks(directory: Path) -> list[IndexMark]:
    """A conversation's marks, in order, read without its store or its lock (each complete line's own chain
    checked; a line being appended is not read yet; the binding of a mark to its rows is for the reader to check,
    as `MarkFile.open` does). StoreCorrupt names a damaged line."""
    path = directory / INDEX_FILE
    data = _read_regular(path)
    marks, last_chain = [], MARKS_GENESIS
    for number, line in enumerate(data[:data.rfind(b"\n") + 1].splitlines(), start=1):
        mark, last_chain = _checked_mark(path, number, line, last_chain)
        marks.append(mark)
    return marks


def read_hashes(directory: Path) -> list[str]:
    """The chain hashes of a conversation's marks, in order (`read_marks`)."""
    return [mark.chain_hash for mark in read_marks(directory)]


def _read_regular(path: Path) -> bytes:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as problem:
        kind = "a symbolic link" if problem.errno == errno.ELOOP else problem.strerror
        raise StoreCorrupt(f"the conversation index {str(path)!r} cannot be read ({kind})") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise StoreCorrupt(f"the conversation index {str(path)!r} is not a regular file")
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            return handle.read()
    finally:
        os.close(descriptor)


def _checked_mark(path: Path, number: int, line: bytes, previous: str) -> tuple[IndexMark, str]:
    """Line ``number`` of the index as a mark, and its chain; StoreCorrupt naming the line when it is damaged."""
    damaged = StoreCorrupt(f"{str(path)!r}: line {number} of the conversation index is damaged or edited (the"
                           " lines before it are intact)")
    try:
        value = json.loads(line)
    except ValueError:
        raise damaged from None
    if not isinstance(value, dict) or set(value) != MARK_KEYS:
        raise damaged
    chain_hash, position, seq, checksum, link = (value["hash"], value["position"], value["seq"], value["checksum"],
                                                 value["chain"])
    if not (isinstance(chain_hash, str) and isinstance(checksum, str) and isinstance(link, str)
            and type(position) is int and type(seq) is int and position >= 0 and seq >= 1):
        raise damaged
    mark = IndexMark(chain_hash, position, seq, checksum)
    if link != chain(previous, number, _encode(_body(mark))):
        raise StoreCorrupt(f"{str(path)!r}: line {number} of the conversation index fails its checksum (damaged,"
                           " edited, reordered, or a line before it is missing)")
    return mark, link


def _bind_to_rows(path: Path, marks: list[IndexMark], row_checksums: Iterator[tuple[int, str]]) -> None:
    """Each mark's checksum is its store's at its row: the index is of these rows (one pass over the rows)."""
    wanted = {mark.seq for mark in marks}
    found: dict[int, str] = {}
    if wanted:
        last = max(wanted)
        for seq, checksum in row_checksums:
            if seq in wanted:
                found[seq] = checksum
            if seq >= last:
                break
    for number, mark in enumerate(marks, start=1):
        if found.get(mark.seq) != mark.checksum:
            raise StoreCorrupt(f"{str(path)!r}: line {number}: the mark is not of its store's rows (row {mark.seq}"
                               " has another chained checksum): the index belongs to another conversation or its"
                               " rows were replaced")


def _cut(path: Path, length: int) -> None:
    """Drop a last line cut by a crash, so that the next mark starts a line of its own."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as problem:
        raise StoreError(f"cannot repair the conversation index {str(path)!r}: {problem.strerror}") from None
    try:
        os.ftruncate(descriptor, length)
    except OSError as problem:
        raise StoreError(f"cannot repair the conversation index {str(path)!r}: {problem.strerror}") from None
    finally:
        os.close(descriptor)


__all__ = ["INDEX_FILE", "MARKS_GENESIS", "ConversationIndex", "IndexMark", "MarkFile", "read_hashes",
           "read_marks"]
