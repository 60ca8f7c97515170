"""The rare red of test_crash's damaged-WAL loop, made deterministic: a kill cuts the checkpoint that follows the
writer's snapshot commit (its last commit: killed before the next append), then a byte of that snapshot's WAL
frames is flipped.

SQLite's recovery keeps the WAL up to the last commit before the damaged frame (every event row), while the
database file already holds part of the new snapshot (the cut checkpoint copied its first pages). Through the
WAL every row reads and checks; only the snapshot's pages are half new, half old ("database disk image is
malformed" when, and only when, they are read). Before the fix `arc-ref export` (read_rows) read every
acknowledged row, and the open, which reads the snapshot, fell back to the database file alone: with the cut at
0.1 of the file it holds no readable row, and the open refused with the CI's wrong figures ("21 acknowledged
events are missing ... the store ends at row 0"); at 0.5 and 0.9 it holds them all, and the open refused
readers ("the database file cannot be read whole") where export reads every row.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore, StoreCorrupt, fold_lines, read_rows
from arc_ref.persist.store import Resume
from tests.persist.test_store_acknowledged import damage_page_with_valid_checksums, killed_writer, wal

CONFIG = preset("minimal", capacity=1_000_000, page_budget=400, stub_cap=120, summary_budget=400,
                recall_budget=220, recent_budget=480, context_limit=2400)
EVENTS = 20


def _frames(log: bytes) -> tuple[int, list[int]]:
    """The page size and the offsets of the WAL's frames of its current generation (its header's salts)."""
    page_size = int.from_bytes(log[8:12], "big")
    frame_bytes = 24 + page_size
    starts = [32 + number * frame_bytes for number in range((len(log) - 32) // frame_bytes)]
    return page_size, [start for start in starts if log[start + 8:start + 16] == log[16:24]]


def killed_after_its_snapshot_commit_in_a_checkpoint(path: Path, split: float) -> tuple[int, Resume]:
    """A writer that appended EVENTS events, committed a snapshot and was killed while the checkpoint after that
    commit had copied the pages below ``split`` of the database file (as SQLite copies them: in page order); then
    a byte of the snapshot's first WAL frame flipped. Returns the last acknowledged row and the writer's resume
    point (what the proxy keeps to reopen it)."""
    store = DurableStore.create(path, CONFIG)
    for number in range(EVENTS):
        store.append(Observe(f"cat f{number}", f"f{number} " * 3000, 0))
    store.write_snapshot()  # the last commit: the kill comes before the next append
    wal = Path(str(path) + "-wal")
    before = path.read_bytes()
    store._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    after, log = path.read_bytes(), wal.read_bytes()  # a checkpoint copies frames into the file; the WAL stays
    last, kept = store.seq, store.resume_point()
    store._abandon()  # killed (closing may checkpoint and remove the WAL: the files are written back below)
    page_size, frames = _frames(log)
    commits = [number for number, start in enumerate(frames) if int.from_bytes(log[start + 4:start + 8], "big")]
    snapshot_frame = frames[commits[-2] + 1]  # the first frame of the last transaction, the snapshot's
    damaged = bytearray(log)
    damaged[snapshot_frame + 24 + 100] ^= 0x10  # its checksum fails: SQLite's recovery ends the WAL before it
    cut = int(len(after) // page_size * split) * page_size
    cut_file = after[:cut] + before[cut:]
    path.write_bytes(cut_file + bytes(max(0, len(after) - len(cut_file))))  # the file was grown before the copy
    wal.write_bytes(bytes(damaged))
    Path(str(path) + "-shm").unlink(missing_ok=True)
    return last, kept


@pytest.mark.parametrize("split", [0.1, 0.5, 0.9])
def test_a_damaged_snapshot_frame_after_a_cut_checkpoint_is_recovered_by_readers_as_export_reads_it(
        tmp_path: Path, split: float) -> None:
    path = tmp_path / "s.arc"
    last, kept = killed_after_its_snapshot_commit_in_a_checkpoint(path, split)
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # what SQLite itself reads through the WAL
    assert plain.execute("SELECT count(*), max(seq) FROM events").fetchone() == (last, last)
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        plain.execute("SELECT length(data) FROM snapshots WHERE substr(data, -1) IS NOT NULL").fetchall()
    plain.close()  # (an open connection would keep this -shm's state for the next ones in this process)
    exported = list(read_rows(path))
    assert [row.seq for row in exported] == list(range(1, last + 1))  # every acknowledged row, no refusal
    with DurableStore.open(path, readonly=True) as reader:  # the same rows, folded: the snapshot is a cache
        assert reader.seq == last and reader.checksum == exported[-1].checksum
        assert reader.state == fold_lines([row.line for row in exported])
        assert reader.report.snapshot_seq == 0 and "snapshot ignored: SQLite cannot read it" in \
            reader.report.snapshot_note
        assert [row.line for row in reader.events()] == [row.line for row in exported]
    log = Path(str(path) + "-wal").read_bytes()
    for resume in (None, kept):  # a writer would write into a file SQLite reads as damaged, also one that resumes
        with pytest.raises(StoreCorrupt, match=rf"no acknowledged event is missing \(rows up to {last} are there\),"
                                               r" but SQLite cannot read its snapshot \(database disk image is"
                                               r" malformed\)"):
            DurableStore.open(path, resume=resume)
    assert Path(str(path) + "-wal").read_bytes() == log  # the refused writers changed nothing


# --- the open and export give the same figures wherever SQLite fails through the WAL --------------------------------

_ROW = re.compile(r"the store ends at row (\d+)")


def _pages(path: Path, table: str, kind: str) -> list[int]:
    """The pages of ``table`` of that kind ('leaf', 'internal', 'overflow') in b-tree order (SQLite's dbstat)."""
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] for row in plain.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = ?"
                                                " ORDER BY path", (table, kind))]
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table")
    finally:
        plain.close()


def test_an_events_page_sqlite_cannot_read_is_refused_by_the_open_with_exports_figures(tmp_path: Path) -> None:
    """SQLite fails in the middle of the rows (an events page damaged in the WAL, its frames re-signed): the rows
    before it read through the WAL, the database file alone holds row 1. Export counts the first (read_rows: the
    rows through the WAL, then the file's own after them); before, the open counted the file alone's ("ends at
    row 1"), the kill loop's "refused with wrong figures"."""
    path = tmp_path / "s.arc"
    last = killed_writer(path, 95)
    leaves = _pages(path, "events", "leaf")
    assert len(leaves) >= 4
    damage_page_with_valid_checksums(wal(path), leaves[len(leaves) // 2], (0, 8))
    exported: list[int] = []
    with pytest.raises(StoreCorrupt, match="cannot be read") as export_refusal:
        for row in read_rows(path):
            exported.append(row.seq)
    there = int(_ROW.findall(str(export_refusal.value))[0])
    assert 1 < there == len(exported) < last and exported == list(range(1, there + 1))
    assert f"cannot be read past row {there} (database disk image is malformed): it was damaged after a crash; keep" \
        " it: the database file without it holds only 1 row " in str(export_refusal.value)  # not "holds the rows"
    for readonly in (True, False):
        with pytest.raises(StoreCorrupt, match=rf"{last - there} acknowledged events are missing: rows up to {last}"
                                               rf" were acknowledged .* the store ends at row {there}; .* keep it"):
            DurableStore.open(path, readonly=readonly)


def test_a_snapshot_page_sqlite_cannot_read_is_ignored_by_readers_and_refuses_writers(tmp_path: Path) -> None:
    """The snapshots table's root page damaged in the WAL (frames re-signed): every row reads; a reader folds them
    (the snapshot is a cache), a writer is refused with the true figures."""
    path = tmp_path / "s.arc"
    last = killed_writer(path, 90, snapshot_at=45)
    with DurableStore.open(path, readonly=True) as before:
        assert before.report.snapshot_seq == 46
        state = before.state
    damage_page_with_valid_checksums(wal(path), _root_page(path, "snapshots"), (0, 8))
    assert [row.seq for row in read_rows(path)] == list(range(1, last + 1))
    with DurableStore.open(path, readonly=True) as reader:
        assert reader.seq == last and reader.state == state and reader.report.snapshot_seq == 0
        assert reader.report.snapshot_note.startswith("snapshot ignored: SQLite cannot read it")
    log = wal(path).read_bytes()
    with pytest.raises(StoreCorrupt, match=rf"no acknowledged event is missing \(rows up to {last} are there\), but"
                                           " SQLite cannot read its snapshot"):
        DurableStore.open(path)
    assert wal(path).read_bytes() == log


def test_a_resumed_writer_meeting_damage_where_export_reads_every_row_is_refused_with_the_true_figures(
        tmp_path: Path) -> None:
    """A store opened with `resume` (the proxy's) reads the snapshots' index, not the snapshot: damaged there
    (frames re-signed), SQLite fails where export does not read. Export reads every row; a writer is refused
    saying none is missing, a reader gets every row folded (before: both counted the database file alone,
    'the store ends at row 1')."""
    path = tmp_path / "s.arc"
    last = killed_writer(path, 90, snapshot_at=45)
    with DurableStore.open(path, readonly=True) as before:
        kept, state = before.resume_point(), before.state
    damage_page_with_valid_checksums(wal(path), _root_page(path, "sqlite_autoindex_snapshots_1"), (0, 8))
    exported = list(read_rows(path))
    assert [row.seq for row in exported] == list(range(1, last + 1))
    with DurableStore.open(path, readonly=True, resume=kept) as reader:
        assert reader.seq == last and reader.state == state and reader.checksum == exported[-1].checksum
        assert reader.report.snapshot_note.startswith("no snapshot; read through its write-ahead log, which SQLite"
                                                      " cannot read whole")
        assert reader.report.snapshot_seq == 0 and reader.report.folded == last - 1  # every event folded
    log = wal(path).read_bytes()
    with pytest.raises(StoreCorrupt, match=rf"no acknowledged event is missing \(rows up to {last} are there\), but"
                                           " SQLite cannot read the store whole through its write-ahead log"):
        DurableStore.open(path, resume=kept)
    assert wal(path).read_bytes() == log


def _root_page(path: Path, name: str) -> int:
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        page: int = plain.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (name,)).fetchone()[0]
        return page
    finally:
        plain.close()


def test_a_damaged_wal_frame_after_a_complete_checkpoint_reads_the_database_file_alone(tmp_path: Path) -> None:
    """A kill after a checkpoint that copied every frame (the WAL not yet written over), then a byte flipped in a
    middle frame: SQLite's recovery ends the WAL at the commit before it and reads an older log, without any
    error, while the database file alone holds every acknowledged row. Export and a reader read them (before,
    both said "N acknowledged events are missing ... the store ends at row R", and main's open recovered only
    when that older log also broke the snapshot); a writer is told to move the WAL aside, then opens whole."""
    path = tmp_path / "s.arc"
    store = DurableStore.create(path, CONFIG)
    for number in range(EVENTS):
        store.append(Observe(f"cat f{number}", f"f{number} " * 3000, 0))
    store._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # every frame copied
    wal, last, state = Path(str(path) + "-wal"), store.seq, store.state
    log = bytearray(wal.read_bytes())
    store._abandon()  # killed (closing may checkpoint and remove the WAL: written back below)
    _, frames = _frames(bytes(log))
    commits = [number for number, start in enumerate(frames) if int.from_bytes(log[start + 4:start + 8], "big")]
    log[frames[commits[len(commits) // 2] + 1] + 24 + 100] ^= 0x10  # the frame after a middle commit
    wal.write_bytes(bytes(log))
    Path(str(path) + "-shm").unlink(missing_ok=True)
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    through_wal = plain.execute("SELECT count(*) FROM events").fetchone()[0]
    plain.close()
    assert 1 < through_wal < last  # SQLite itself reads an older log through the WAL, without an error
    exported = list(read_rows(path))
    assert [row.seq for row in exported] == list(range(1, last + 1))
    with DurableStore.open(path, readonly=True) as reader:
        assert reader.seq == last and reader.state == state
        assert [row.line for row in reader.events()] == [row.line for row in exported]
        assert f"read without its write-ahead log, which ends at row {through_wal}, before the acknowledged row" \
            f" {last}" in reader.report.snapshot_note
    with pytest.raises(StoreCorrupt, match=rf"ends at row {through_wal}, before the acknowledged row {last}, but the"
                                           " database file without it holds every acknowledged event .* to write"
                                           " again"):
        DurableStore.open(path)
    wal.rename(tmp_path / "damaged-wal")  # what the refusal says to do
    Path(str(path) + "-shm").rename(tmp_path / "damaged-shm")
    with DurableStore.open(path) as writer:
        assert writer.seq == last and writer.state == state
        writer.append(Observe("ls", "after the WAL was set aside"))
    assert [row.seq for row in read_rows(path)][-1] == last + 1
