"""Issue 18, items 1-3: acknowledged events survive the loss of SQLite's WAL or are refused with their count;
one writer per database FILE (hard links, symlinks); nothing planted beside the store is ever written through.

Each test fails on main 5bf445a: a deleted, truncated or damaged `STORE-wal` reopened as a shorter log with
rc 0; two writers through a hard link both acknowledged the same rows; a `STORE.lock` symlink made a writer
overwrite its target with a pid.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from arc_ref.frontends.cli import main
from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore, StoreCorrupt, StoreError, StoreLocked, read_rows

CONFIG = preset("minimal", capacity=100)
APPENDED = 40

_KILLED_WRITER = """
import os, sys
from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore
store = DurableStore.create(sys.argv[1], preset("minimal", capacity=100))
for number in range(int(sys.argv[2])):
    store.append(Observe(f"cat f{number}", f"row {number} " * 5))
    if number + 1 == int(sys.argv[3]):
        store.write_snapshot()
os.write(1, f"{store.seq}\\n".encode())
os.kill(os.getpid(), 9)  # acknowledged, then killed: the rows are in STORE-wal until a checkpoint
"""


def killed_writer(path: Path, appends: int = APPENDED, snapshot_at: int = 0) -> int:
    """A writer that appends ``appends`` events, acknowledged (with a snapshot after the ``snapshot_at``-th), and
    is killed with SIGKILL; its last row."""
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path), str(appends), str(snapshot_at)],
                          capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert Path(str(path) + "-wal").stat().st_size > 0  # the rows are in the WAL, not yet in the database file
    return int(done.stdout)


def wal(path: Path) -> Path:
    return Path(str(path) + "-wal")


def test_with_its_wal_a_killed_writers_store_reopens_with_every_acknowledged_event(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    last = killed_writer(path)
    assert last == APPENDED + 1
    with DurableStore.open(path) as store:
        assert store.seq == last and store.state.stored == APPENDED
        store.append(Observe("ls", "after the crash"))
    assert [row.seq for row in read_rows(path)][-1] == last + 1


@pytest.mark.parametrize("damage", ["deleted", "deleted with its -shm", "truncated", "a byte flipped"])
def test_a_lost_or_damaged_wal_is_refused_with_the_count_of_missing_acknowledged_events(
        tmp_path: Path, damage: str, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.arc"
    last = killed_writer(path)
    log = wal(path)
    if damage.startswith("deleted"):
        log.unlink()
        if "shm" in damage:
            Path(str(path) + "-shm").unlink()
    elif damage == "truncated":
        os.truncate(log, log.stat().st_size // 2)
    else:
        data = bytearray(log.read_bytes())
        data[len(data) // 2] ^= 0x10
        log.write_bytes(bytes(data))
    for readonly in (True, False):  # a reader and a writer alike: the writer appends nothing over the gap
        with pytest.raises(StoreCorrupt, match=rf"acknowledged events? (is|are) missing: rows up to {last} were"
                                               r" acknowledged .* but the store ends at row \d+"):
            DurableStore.open(path, readonly=readonly)
    rows = [row.seq for row in _rows_until_refused(path)]
    assert rows and rows[-1] < last  # export writes the rows that are there, then says what is missing
    code = main(["inspect", str(path)])
    _, err = capfd.readouterr()
    assert code == 2 and f"{last - rows[-1]} acknowledged event" in err and "missing" in err


def _rows_until_refused(path: Path) -> list[object]:
    rows: list[object] = []
    with pytest.raises(StoreCorrupt, match="missing"):
        for row in read_rows(path):
            rows.append(row)
    return rows


def test_after_a_refusal_the_restored_wal_recovers_every_event(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    last = killed_writer(path)
    saved = wal(path).read_bytes()
    wal(path).unlink()
    Path(str(path) + "-shm").unlink()
    with pytest.raises(StoreCorrupt, match="missing"):
        DurableStore.open(path)  # refused by a writer too
    wal(path).write_bytes(saved)  # "restore it if you can"
    with DurableStore.open(path) as store:
        assert store.seq == last


def test_a_missing_acknowledgement_record_of_an_unclosed_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    killed_writer(path)
    Path(str(path) + ".ack").unlink()
    wal(path).unlink()
    with pytest.raises(StoreCorrupt, match="was not closed cleanly and its acknowledgement record .* is missing"):
        DurableStore.open(path, readonly=True)


def test_a_cleanly_closed_store_moves_without_its_acknowledgement_record(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, CONFIG) as store:
        for number in range(5):
            store.append(Observe("ls", f"{number}"))
    moved = tmp_path / "moved.arc"
    os.rename(path, moved)  # the .ack stays behind: a clean close recorded its row count in the database
    with DurableStore.open(moved) as store:
        assert store.seq == 6
        store.append(Observe("ls", "moved"))


def test_an_old_record_of_another_store_at_the_same_name_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, CONFIG) as store:
        store.append(Observe("ls", "first store"))
    record = Path(str(path) + ".ack").read_bytes()
    path.unlink()
    with DurableStore.create(path, CONFIG) as store:  # create replaces a leftover record
        store.append(Observe("ls", "second store"))
    Path(str(path) + ".ack").write_bytes(record)
    with pytest.raises(StoreCorrupt, match="row 2 is not the acknowledged row"):
        DurableStore.open(path, readonly=True)


# --- item 2: one writer per file ------------------------------------------------------------------------


def test_one_writer_per_file_through_a_hard_link_or_a_symlink(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    DurableStore.create(path, CONFIG).close()
    symlink = tmp_path / "alias.arc"
    symlink.symlink_to(path)
    with DurableStore.open(path) as writer:
        with pytest.raises(StoreLocked, match="open for writing by process"):
            DurableStore.open(symlink)  # refused at the open, not at its first append
        other = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom arc_ref.persist import DurableStore, StoreLocked\n"
             "try:\n    DurableStore.open(sys.argv[1])\nexcept StoreLocked as e:\n    print(e)\n", str(symlink)],
            capture_output=True, text=True, check=True)
        assert f"open for writing by process {os.getpid()}; one writer at a time" in other.stdout
        writer.append(Observe("ls", "only one writer"))
    hard = tmp_path / "hard.arc"
    os.link(path, hard)
    for name in (path, hard):  # two names of one file would mean two WALs: refused for writing by either
        with pytest.raises(StoreError, match="has 2 names \\(hard links\\)"):
            DurableStore.open(name)
    with DurableStore.open(hard, readonly=True) as reader:  # reading is fine
        assert reader.seq == 2
    hard.unlink()
    with DurableStore.open(symlink) as writer:  # through the symlink: the same file, its WAL and its .ack
        writer.append(Observe("ls", "through the symlink"))
    with DurableStore.open(path, readonly=True) as reader:
        assert reader.seq == 3


# --- item 3: nothing beside the store is written through -------------------------------------------------


@pytest.mark.parametrize("planted", [".lock", ".ack", ".creating"])
def test_a_planted_symlink_beside_the_store_is_never_written_through(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    path = tmp_path / "s.arc"
    name = f".s.arc.creating-{os.getpid()}" if planted == ".creating" else "s.arc" + planted
    (tmp_path / name).symlink_to(victim)
    with DurableStore.create(path, CONFIG) as store:  # a new store (also arc-ref mcp's path)
        store.append(Observe("ls", "x"))
    with DurableStore.open(path) as store:  # and a writer reopening it
        store.append(Observe("ls", "y"))
    assert victim.read_text() == "precious\n"
    assert (victim.stat().st_mode & 0o777) == 0o644


def test_a_planted_ack_symlink_or_fifo_of_an_existing_store_is_refused_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = tmp_path / "s.arc"
    DurableStore.create(path, CONFIG).close()
    record = Path(str(path) + ".ack")
    record.unlink()
    record.symlink_to(victim)
    with pytest.raises(StoreCorrupt, match="acknowledgement record .* cannot be read \\(a symbolic link\\)"):
        DurableStore.open(path)
    record.unlink()
    os.mkfifo(record)
    with pytest.raises(StoreCorrupt, match="is not a regular file"):
        DurableStore.open(path)
    assert victim.read_text() == "precious\n"


# --- a WAL that SQLite itself reads as malformed (CI failure of test_crash after issue 18.1) ----------------


def _wal_checksums(words: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    """SQLite's WAL checksum (its file format, section 4.1) over ``words``, continued from (s0, s1)."""
    values = [int.from_bytes(words[i:i + 4], "big" if big_endian else "little") for i in range(0, len(words), 4)]
    for first, second in zip(values[0::2], values[1::2]):
        s0 = (s0 + first + s1) & 0xFFFFFFFF
        s1 = (s1 + second + s0) & 0xFFFFFFFF
    return s0, s1


SQLITE_FILE_HEADER = (0, 16)  # "SQLite format 3\0": SQLite then says "file is not a database"
SCHEMA_BTREE_HEADER = (100, 108)  # sqlite_schema's b-tree page header: "database disk image is malformed"


def damage_page_one_with_valid_checksums(log: Path, zeroed: tuple[int, int] = SCHEMA_BTREE_HEADER) -> None:
    """Zero bytes ``zeroed`` of the newest copy of page 1 in the WAL and re-sign every frame from there on, as
    a bad disk or a buggy copier may leave it: SQLite accepts the frames and cannot read the database."""
    damage_page_with_valid_checksums(log, 1, zeroed)


def damage_page_with_valid_checksums(log: Path, page: int, zeroed: tuple[int, int]) -> None:
    """Zero bytes ``zeroed`` of the newest copy of ``page`` in the WAL and re-sign every frame from there on."""
    data = bytearray(log.read_bytes())
    big_endian = bool(int.from_bytes(data[0:4], "big") & 1)
    page_size = int.from_bytes(data[8:12], "big")
    salts = bytes(data[16:24])
    frame_bytes = 24 + page_size
    frames = [32 + number * frame_bytes for number in range((len(data) - 32) // frame_bytes)]
    frames = [start for start in frames if bytes(data[start + 8:start + 16]) == salts]
    copies = [start for start in frames if int.from_bytes(data[start:start + 4], "big") == page]
    assert copies, f"page {page} is not in the WAL"
    target = copies[-1]
    data[target + 24 + zeroed[0]:target + 24 + zeroed[1]] = bytes(zeroed[1] - zeroed[0])
    s0, s1 = int.from_bytes(data[24:28], "big"), int.from_bytes(data[28:32], "big")
    for start in frames:
        if start >= target:
            s0, s1 = _wal_checksums(bytes(data[start:start + 8]) + bytes(data[start + 24:start + frame_bytes]),
                                    big_endian, s0, s1)
            data[start + 16:start + 24] = s0.to_bytes(4, "big") + s1.to_bytes(4, "big")
        else:
            s0, s1 = int.from_bytes(data[start + 16:start + 20], "big"), int.from_bytes(data[start + 20:start + 24],
                                                                                            "big")
    log.write_bytes(bytes(data))


@pytest.mark.parametrize("zeroed, sqlite_says", [(SCHEMA_BTREE_HEADER, "database disk image is malformed"),
                                                 (SQLITE_FILE_HEADER, "file is not a database")])
def test_a_wal_sqlite_reads_as_malformed_is_refused_with_the_count_of_missing_acknowledged_events(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], zeroed: tuple[int, int], sqlite_says: str) -> None:
    path = tmp_path / "s.arc"
    last = killed_writer(path)
    damage_page_one_with_valid_checksums(wal(path), zeroed)
    for readonly in (True, False):
        with pytest.raises(StoreCorrupt, match=rf"{last - 1} acknowledged events are missing: rows up to {last} were"
                                               r" acknowledged .* but the store ends at row 1; its write-ahead log"
                                               rf" .* cannot be read \({sqlite_says}\)"):
            DurableStore.open(path, readonly=readonly)
    assert [row.seq for row in _rows_until_refused(path)] == [1]  # the database file holds row 1 (the config)
    code = main(["export", str(path)])
    out, err = capfd.readouterr()
    assert code == 2 and out.count("\n") == 1 and '"op":"config"' in out
    assert f"{last - 1} acknowledged events are missing" in err


_CHECKPOINT_THEN_KILLED = """
import os, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
print(connection.execute("PRAGMA wal_checkpoint(FULL)").fetchone())
os.kill(os.getpid(), 9)  # the WAL stays, every frame of it copied into the database file
"""


def test_a_malformed_wal_whose_rows_are_all_in_the_database_file_is_read_exactly_and_not_written(
        tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    last = killed_writer(path)
    done = subprocess.run([sys.executable, "-c", _CHECKPOINT_THEN_KILLED, str(path)], capture_output=True)
    assert done.returncode == -signal.SIGKILL and b"(0, " in done.stdout, done
    damage_page_one_with_valid_checksums(wal(path))
    plain = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # SQLite itself, through the WAL
        plain.execute("SELECT count(*) FROM events").fetchone()
    plain.close()  # (an open connection would keep the moved -shm's lock state in this process)
    assert [row.seq for row in read_rows(path)] == list(range(1, last + 1))  # every row, then no refusal
    with DurableStore.open(path, readonly=True) as reader:
        assert reader.seq == last and reader.state.stored == APPENDED
        assert "read without its write-ahead log" in reader.report.snapshot_note
    with pytest.raises(StoreCorrupt, match="holds every acknowledged event .* to write again"):
        DurableStore.open(path)  # SQLite would write through the damaged WAL
    wal(path).rename(tmp_path / "damaged-wal")  # what the refusal says to do
    Path(str(path) + "-shm").rename(tmp_path / "damaged-shm")
    with DurableStore.open(path) as writer:
        assert writer.seq == last
        writer.append(Observe("ls", "after the WAL was set aside"))
    assert [row.seq for row in read_rows(path)][-1] == last + 1


def _checkpoint_cut_then_log_deleted(path: Path, split: float) -> int:
    """What a kill in the middle of a checkpoint leaves when the WAL is then deleted: the database file holds the
    new pages below page ``split`` of the way and the old ones above it. Returns the last acknowledged row."""
    config = preset("minimal", capacity=1_000_000, page_budget=400, stub_cap=120, summary_budget=400,
                    recall_budget=220, recent_budget=480, context_limit=2400)
    store = DurableStore.create(path, config)
    for number in range(30):
        store.append(Observe(f"cat a{number}", f"a{number} " * 3000, 0))
    store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    before = path.read_bytes()
    for number in range(30):
        store.append(Observe(f"cat b{number}", f"b{number} " * 3000, 0))
    store._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    after = path.read_bytes()
    last = store.seq
    store._abandon()  # the writer is killed: no clean close
    cut = int(len(after) // 4096 * split) * 4096
    path.write_bytes(after[:cut] + before[cut:])
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return last


@pytest.mark.parametrize("split", [0.1, 0.5, 0.9])
def test_a_checkpoint_cut_by_a_crash_then_the_log_deleted_is_refused_with_the_count(tmp_path: Path,
                                                                                    split: float) -> None:
    """Issue 31.4: the kill loop's refusal without a count (refused_uncounted) was this: SQLite reads the database
    file half old, half new ('database disk image is malformed') and no WAL is left; before, the open said only
    '... cannot be read: database disk image is malformed'. Now the rows the file alone holds are counted."""
    path = tmp_path / "s.arc"
    last = _checkpoint_cut_then_log_deleted(path, split)
    rows = [row.seq for row in _rows_until_refused(path)]  # the rows the file alone holds (maybe none)
    there = len(rows)
    assert rows == list(range(1, there + 1)) and there < last
    for readonly in (True, False):
        with pytest.raises(StoreCorrupt, match=rf"{last - there} acknowledged events? (is|are) missing: rows up"
                                               rf" to {last} were acknowledged .* the store ends at row {there};"
                                               " its write-ahead log .* is missing or empty"):
            DurableStore.open(path, readonly=readonly)


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_an_interrupt_while_the_ack_record_is_put_in_place_leaves_no_staging_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Ctrl-C (or SIGTERM in `arc-ref copy`, which raises KeyboardInterrupt) between the staging file's creation
    and its rename over STORE.ack: the staging file is removed, the interrupt goes on (a copy interrupted there
    left `.NAME.ack-PID-THREAD` behind)."""
    from arc_ref.persist import acknowledgement

    real = getattr(os, step)

    def interrupted(*arguments: object) -> None:
        if any(".ack-" in str(argument) for argument in arguments) or step == "fsync":
            raise KeyboardInterrupt
        real(*arguments)

    monkeypatch.setattr(acknowledgement.os, step, interrupted)
    with pytest.raises(KeyboardInterrupt):
        DurableStore.create(tmp_path / "s.arc", CONFIG)
    monkeypatch.undo()
    assert [path.name for path in tmp_path.iterdir() if ".ack-" in path.name] == []
