"""Reopening a store from what this process kept (`DurableStore.open(path, resume=...)`): only the rows appended
since are read and folded, the state is the fold of every row, and a resume point that is not this store's rows
falls back to the whole fold. What two `arc-ref proxy` processes sharing one --store rely on (issue 25 item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arc_ref.machine import AgentTurn, Observe, init, step
from arc_ref.persist import DurableStore, StoreCorrupt
from tests.persist.test_store import CONFIG, events, raw


def test_a_resumed_open_folds_only_the_rows_another_writer_appended(tmp_path: Path) -> None:
    path = tmp_path / "task.arc"
    first, later = events()[:4], events()[4:]
    with DurableStore.create(path, CONFIG) as store:
        store.append_many(first)
        kept = store.resume_point()
        store.close(snapshot=False)
    with DurableStore.open(path) as other:  # another process: a full open, then its appends
        for event in later:
            other.append(event)
        expected = other.state
    with DurableStore.open(path, resume=kept) as resumed:
        assert resumed.report.folded == len(later) and resumed.report.snapshot_note == f"resumed after row {kept.seq}"
        assert resumed.state == expected and resumed.seq == 1 + len(events())
        resumed.append(Observe("echo", "more"))  # a writer again: appends go on from the caught-up row
        after = resumed.resume_point()
    with DurableStore.open(path) as whole:
        state = init(CONFIG)
        for event in [*events(), Observe("echo", "more")]:
            state, _ = step(state, event)
        assert whole.state == state == after.state
    with DurableStore.open(path, resume=after) as unchanged:  # nothing appended since: nothing folded
        assert unchanged.report.folded == 0 and unchanged.state == after.state


def test_a_resume_point_of_other_rows_folds_the_whole_store(tmp_path: Path) -> None:
    """The store at the path was replaced (another task with the same row count): its own rows decide."""
    path, other_path = tmp_path / "task.arc", tmp_path / "other.arc"
    with DurableStore.create(path, CONFIG) as store:
        store.append_many(events()[:3])
        kept = store.resume_point()
    with DurableStore.create(other_path, CONFIG) as other:
        other.append_many([Observe("ls", "z"), AgentTurn("t", "ls"), Observe("cat z", "zz")])
        theirs = other.state
    path.unlink()
    Path(str(path) + ".ack").unlink(missing_ok=True)
    other_path.rename(path)
    Path(str(other_path) + ".ack").rename(Path(str(path) + ".ack"))
    with DurableStore.open(path, resume=kept) as reopened:
        assert reopened.report.snapshot_note != f"resumed after row {kept.seq}"
        assert reopened.state == theirs != kept.state


def test_a_damaged_row_after_the_resume_point_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "task.arc"
    with DurableStore.create(path, CONFIG) as store:
        store.append_many(events()[:3])
        kept = store.resume_point()
        store.append_many(events()[3:5])
    connection = raw(path)
    connection.execute("UPDATE events SET line = replace(line, 'beta', 'BETA') WHERE seq = ?", (kept.seq + 1,))
    connection.close()
    with pytest.raises(StoreCorrupt, match=f"row {kept.seq + 1} fails its checksum"):
        DurableStore.open(path, resume=kept)
