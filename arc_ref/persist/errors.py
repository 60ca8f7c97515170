"""The errors of the stores (`arc_ref.persist`): each an ArcError (``code``, exit and HTTP status hints), the same
for every backend (SQLite here, PostgreSQL beside it)."""

from __future__ import annotations

from arc_ref.errors import ArcError, InvalidEvent


class EventTooLarge(InvalidEvent):
    """An event whose row, its trace line, would be longer than `arc-ref replay` reads (32 MiB): the store's export
    would be no trace. Refused whole, nothing stored; it is the event, not the store (no retry changes it)."""

    code = "event_too_large"


class StoreError(ArcError):
    """A store that cannot be opened, read or written; the message says which and why."""

    code = "store"


class StoreNotFound(StoreError):
    """No store at the path given."""

    code = "store_not_found"


class StoreExists(StoreError):
    """A store to be created is already there."""

    code = "store_exists"


class StoreLocked(StoreError):
    """Another process holds the store open for writing."""

    code = "store_locked"


class StoreCorrupt(StoreError):
    """A row that is damaged, edited, out of order or missing, or a file that is not an ARC store."""

    code = "store_corrupt"


class StoreIncompatible(StoreCorrupt):
    """An intact row (its chained checksum holds, so the arc-ref that wrote it accepted it) that this arc-ref cannot
    read or whose configuration or event its core refuses: the rules differ from the writer's (another arc-ref
    version, or another tokenizer or chat template counting the prefix). Nothing is damaged: the arc-ref and
    tokenizer that made the store read it. A StoreCorrupt for every caller that sets such a store aside."""

    code = "store_incompatible"


class StoreReadOnly(StoreError):
    """The store cannot be written where it is (a read-only mount or directory, no permission to write); readers
    still read it. Nothing is damaged."""

    code = "store_read_only"


class StoreFull(StoreError):
    """The file system holding the store is full: what was asked is not written, nothing acknowledged is lost, and
    the store opens again once there is room. Nothing is damaged."""

    code = "store_full"
