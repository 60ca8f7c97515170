"""Durability around the pure core: an ARC task's events in SQLite (`DurableStore`) or PostgreSQL, reopened by
replaying them.

The core stays free of I/O; this package, the Session and the front ends are the parts of `arc_ref` that touch
files. One module per job:

- `rows`: the row format (the event's replay-trace line), the checksum chain, reopening by folding: any backend's;
- `errors`: the store errors (`StoreError` and its kinds), any backend's;
- `store`: the SQLite backend, `DurableStore` and `read_rows`, with its parts: `sqlite_file` (schema, header,
  connections, a new file), `lock` (one writer per file), `acknowledgement` (``STORE.ack``: what was
  acknowledged), `wal_damage` (a write-ahead log SQLite cannot read), `snapshot` (a cache of the fold);
- `marks`: the proxy's conversation index (the marks of each conversation's hash chain beside its store, with
  the store's integrity rules), behind the interface `ConversationIndex` the proxy calls.

A second backend (PostgreSQL) reuses `rows` and `errors` and supplies its own storage and acknowledgement.
"""

from arc_ref.persist.errors import (EventTooLarge, StoreCorrupt, StoreError, StoreExists, StoreFull, StoreLocked,
                                    StoreNotFound)
from arc_ref.persist.errors import StoreReadOnly
from arc_ref.persist.rows import Appended, OpenReport, StoredEvent, fold_lines
from arc_ref.persist.store import DurableStore, Resume, read_rows

__all__ = [
    "Appended", "DurableStore", "EventTooLarge", "OpenReport", "Resume", "StoreCorrupt", "StoreError", "StoreExists",
    "StoreFull", "StoreLocked", "StoreNotFound", "StoreReadOnly", "StoredEvent", "fold_lines", "read_rows",
]
