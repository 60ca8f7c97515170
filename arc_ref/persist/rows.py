"""The rows of an event log, whatever holds them (backend-independent; spec/store.md).

A task's state is the fold of its events over ``init(config)`` (the core is event-sourced), so a store keeps the
events and reopening is replaying them. One row per event, numbered from 1 like the lines of a replay trace:
row 1 holds the config line, every later row one event, each as the very line of the replay trace format
(spec/trace.md, `arc_ref.trace.event_line`, canonically encoded), so that `arc-ref export` is the rows as they
are and any port can replay a store.

Every row carries a chained checksum (SHA-256 of the previous row's checksum, the sequence number and the
line's bytes): a damaged, edited, reordered or missing row stops the open with an error naming the row
(`checked_rows`). A backend supplies only where the rows live and how an acknowledgement is recorded; the row
format, the chain and reopening by folding (`fold_row`) are here.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Iterator, Sequence, TypeVar

from attrs import frozen

from arc_ref.config import Config
from arc_ref.errors import ArcError
from arc_ref.machine import ArcState, Event, Output, RequestView, init, step
from arc_ref.json_limits import MAX_LINE_BYTES
from arc_ref.persist.errors import EventTooLarge, StoreCorrupt, StoreError, StoreIncompatible
from arc_ref.trace import TraceError, config_from_line, encode, event_from_line, event_line, parse_line

GENESIS = hashlib.sha256(b"arc-ref event log 1").hexdigest()  # the chain's value before row 1  # the chain's value before row 1
Line = TypeVar("Line", bytes, str)  # a row's line as its backend returns it (SQLite: bytes, PostgreSQL: text)


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


def checked_rows(rows: Iterable[tuple[int, Line, Any]], where: str, after_seq: int = 0,
                 after_checksum: str = GENESIS) -> Iterator[tuple[int, Line, str]]:
    """The rows following row ``after_seq`` (whose checksum is ``after_checksum``) in order, as (seq, line,
    checksum): numbering without gaps and the chain checked; StoreCorrupt at the first missing or damaged row
    (every row before it is intact). ``where`` names the store in messages; a stored checksum is compared as
    the text or the bytes its backend returns."""
    expected = after_seq + 1
    checksum = after_checksum
    for seq, line, stored_checksum in rows:
        if seq != expected:
            raise StoreCorrupt(f"{where}: row {expected} is missing (the next row is {seq})")
        if not isinstance(line, str):
            line = bytes(line)  # a damaged row may hold another type: it fails its checksum below
        checksum = chain(checksum, seq, line.encode("utf-8") if isinstance(line, str) else line)
        if stored_checksum != (checksum if isinstance(stored_checksum, str) else checksum.encode("ascii")):
            raise StoreCorrupt(
                f"{where}: row {seq} fails its checksum (damaged or edited; the rows before it are"
                " intact: arc-ref export writes them)"
            )
        yield seq, line, checksum
        expected += 1


def event_row_line(event: Event) -> str:
    """The row's line of an event (spec/trace.md §2, canonical); StoreError for what is not a stored event."""
    if isinstance(event, RequestView):
        raise StoreError("a view request changes nothing and is not stored; use view(store.state)")
    try:
        line = encode(event_line(event))
    except TraceError as problem:
        raise StoreError(f"cannot store this event: {problem}") from None
    if len(line) * 4 > MAX_LINE_BYTES:  # (a character is at most 4 bytes: most rows need no count)
        size = len(line.encode("utf-8"))
        if size > MAX_LINE_BYTES:  # review h24 F6: the store's export would not replay
            raise EventTooLarge(f"cannot store this event: its row, a trace line, would be {size:,} bytes of UTF-8,"
                                f" over the {MAX_LINE_BYTES:,} bytes arc-ref replay reads; store the output in parts")
    return line


def read_row(seq: int, line: str | bytes, where: str) -> Config | Event:
    """What row ``seq`` holds: the configuration (row 1) or an event; StoreCorrupt naming the row otherwise."""
    try:
        obj = parse_line(line)
        if seq == 1:
            if obj.get("op") != "config":
                raise TraceError("row 1 must hold the config line")
            return config_from_line(obj)[1]
        event = event_from_line(obj)
        if isinstance(event, RequestView):
            raise TraceError("a view request is not an event of the log")
        return event
    except ArcError as problem:  # a TraceError or a core refusal
        raise incompatible(seq, problem, where) from None


def row_events(rows: Iterable[StoredEvent], where: str) -> list[Event]:
    """The events of stored rows after row 1 (what a fork or a copy of a log replays); StoreCorrupt naming a row
    that holds no event."""
    events = []
    for row in rows:
        value = read_row(row.seq, row.line, where)
        if isinstance(value, Config):
            raise StoreCorrupt(f"{where}: row {row.seq}: the configuration is not an event")
        events.append(value)
    return events


def fold_row(state: ArcState | None, seq: int, line: str | bytes, where: str) -> ArcState:
    """The state after row ``seq``: ``init`` of row 1's configuration, else ``state`` stepped by the row's event
    (reopening = replaying); StoreCorrupt naming the row when the core refuses it."""
    value = read_row(seq, line, where)
    try:
        if isinstance(value, Config):
            return init(value)
        assert state is not None
        return step(state, value)[0]
    except ArcError as problem:
        raise incompatible(seq, problem, where) from None


def incompatible(seq: int, problem: ArcError, where: str) -> StoreIncompatible:
    """Row ``seq``, intact (every caller reads rows through `checked_rows`: its checksum held), refused by this
    arc-ref: the arc-ref that wrote it accepted it, so the rules differ (review h75: a conversation stored before
    ARC's tool listing grew by 16 tokens no longer fit its own budgets, K > L, and the message advised lowering
    budgets no one can change in a stored conversation)."""
    return StoreIncompatible(
        f"{where}: row {seq}: {problem}\n  (row {seq} is intact, its checksum holds: the arc-ref that wrote it"
        " accepted it, and this one reads or checks it otherwise: another arc-ref version, or another tokenizer or"
        " chat template counting the prefix; nothing is damaged: read or continue it with the arc-ref and tokenizer"
        " that made it; README, 'Upgrading with stored conversations')")


def fold_rows(state: ArcState | None, rows: Iterable[tuple[int, Line, Any]], where: str, after_seq: int = 0,
              after_checksum: str = GENESIS) -> tuple[ArcState, int, str]:
    """``state`` (after row ``after_seq``) with ``rows`` folded in, each checked against the chain (`checked_rows`);
    the state, the last row and its checksum. StoreCorrupt when there is no row at all."""
    seq, checksum = after_seq, after_checksum
    for seq, line, checksum in checked_rows(rows, where, after_seq, after_checksum):
        state = fold_row(state, seq, line, where)
    if state is None:
        raise StoreCorrupt(f"{where} holds no rows (not even the config line)")
    return state, seq, checksum


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
