"""Durability around the pure core: an ARC task's events in SQLite (`DurableStore`), reopened by replaying them.

The core stays free of I/O; this package is the only part of `arc_ref` besides the CLI that touches files.
"""

from arc_ref.persist.store import (
    Appended,
    DurableStore,
    OpenReport,
    Resume,
    StoredEvent,
    StoreCorrupt,
    StoreError,
    StoreExists,
    StoreLocked,
    StoreNotFound,
    fold_lines,
    read_rows,
)

__all__ = [
    "Appended", "DurableStore", "OpenReport", "Resume", "StoreCorrupt", "StoreError", "StoreExists", "StoreLocked",
    "StoreNotFound", "StoredEvent", "fold_lines", "read_rows",
]
