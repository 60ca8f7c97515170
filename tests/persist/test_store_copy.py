"""`arc-ref copy STORE NEW`: a store that stays read-only (its snapshot unreadable to SQLite, every acknowledged row
there: spec/store.md) goes on as a new store holding the same rows, with a writer; a copy that fails leaves nothing
at NEW and no temporary file beside it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arc_ref.frontends import store_cli
from arc_ref.frontends.cli import main
from arc_ref.machine import AgentTurn, Observe
from arc_ref.persist import DurableStore, StoreCorrupt, StoreExists, fold_lines, read_rows
from tests.persist.test_store_cut_snapshot import CONFIG, killed_after_its_snapshot_commit_in_a_checkpoint


def run(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capfd.readouterr()
    return code, out, err


def test_a_store_whose_snapshot_sqlite_cannot_read_goes_on_as_a_copy(tmp_path: Path,
                                                                      capfd: pytest.CaptureFixture[str]) -> None:
    damaged, new = tmp_path / "s.arc", tmp_path / "copy.arc"
    last, _ = killed_after_its_snapshot_commit_in_a_checkpoint(damaged, 0.5)
    with pytest.raises(StoreCorrupt, match="cannot read its snapshot"):
        DurableStore.open(damaged)  # no writer: the store stays read-only
    rows = list(read_rows(damaged))
    code, out, err = run(capfd, "copy", str(damaged), str(new))
    assert (code, err) == (0, "")
    assert out == f"copied {last} rows (the config line and {last - 1} events) from {damaged} into {new}\n"
    assert [(row.seq, row.line, row.checksum) for row in read_rows(new)] == \
        [(row.seq, row.line, row.checksum) for row in rows]  # the same rows, so the same chained checksums
    with DurableStore.open(new) as writer:  # a writer now, from the snapshot the copy wrote when it closed
        assert writer.report.snapshot_seq == last and writer.report.folded == 0
        assert writer.state == fold_lines([row.line for row in rows])
        first_id = writer.state.records[0].obs_id
        writer.append(AgentTurn("read it again", "_recall " + first_id))
        writer.append(Observe("cat next", "next " * 50))
    with DurableStore.open(new, readonly=True) as reader:
        assert reader.seq == last + 2 and reader.state.records[0].obs_id == first_id
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_copy_refuses_an_existing_new_store_a_missing_one_and_a_database_url(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source, taken = tmp_path / "a.arc", tmp_path / "b.arc"
    with DurableStore.create(source, CONFIG) as store:
        store.append(Observe("ls", "a b c"))
    taken.write_bytes(b"someone's file")
    code, out, err = run(capfd, "copy", str(source), str(taken))
    assert (code, out) == (2, "") and err == f"arc-ref copy: {str(taken)!r} already exists; choose a path where no" \
                                             " store is\n"
    assert taken.read_bytes() == b"someone's file"
    code, out, err = run(capfd, "copy", str(tmp_path / "none.arc"), str(tmp_path / "c.arc"))
    assert (code, out) == (2, "") and err == f"arc-ref copy: no ARC store at {str(tmp_path / 'none.arc')!r}\n"
    # named by NEW, not by the temporary name it is built under
    code, out, err = run(capfd, "copy", str(source), str(tmp_path / "no" / "c.arc"))
    assert (code, out) == (2, "") and err.startswith(f"arc-ref copy: cannot create {str(tmp_path / 'no' / 'c.arc')!r}")
    code, _, err = run(capfd, "copy", str(source), "postgresql://u@localhost:1/db#k")
    assert code == 2 and err == "arc-ref copy: arc-ref copy writes a new SQLite store: give a path for NEW\n"
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith("a.arc")) == ["b.arc"]


def test_a_copy_that_fails_part_way_leaves_nothing_at_new(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source, new = tmp_path / "a.arc", tmp_path / "b.arc"
    with DurableStore.create(source, CONFIG) as store:
        for number in range(40):
            store.append(Observe(f"cat f{number}", f"f{number} " * 20))
    last = store.seq
    plain = sqlite3.connect(source)
    plain.execute("UPDATE events SET line = replace(line, 'f30 ', 'F30 ') WHERE seq = 32")  # row 32 fails its checksum
    plain.commit()
    plain.close()
    monkeypatch.setattr(store_cli, "COPY_BATCH", 8)  # batches committed before the damaged row is met
    code, out, err = run(capfd, "copy", str(source), str(new))
    assert (code, out) == (2, "") and "row 32 fails its checksum" in err
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(("b.arc", ".b.arc"))) == []
    assert last == 41


def test_sqlite_files_of_an_earlier_store_of_that_name_are_refused(tmp_path: Path,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """A leftover NEW-wal would be applied to the new store on its first open (another store's rows)."""
    source, other, new = tmp_path / "a.arc", tmp_path / "other.arc", tmp_path / "b.arc"
    for path, text in ((source, "mine"), (other, "theirs")):
        with DurableStore.create(path, CONFIG) as store:
            store.append(Observe("cat f", text))
    Path(str(new) + "-wal").write_bytes(b"\0" * 32)  # an earlier store's log, left where it was deleted
    code, out, err = run(capfd, "copy", str(source), str(new))
    assert (code, out) == (2, "") and "files of an earlier store of that name are there" in err and \
        f"{new}-wal" in err
    assert not new.exists()
    with pytest.raises(StoreExists, match="files of an earlier store of that name"):  # and a store created there
        DurableStore.create(new, CONFIG)


def test_a_failure_after_new_is_linked_removes_it_and_a_leftover_temporary_name_is_not_taken(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    source, new = tmp_path / "a.arc", tmp_path / "b.arc"
    with DurableStore.create(source, CONFIG) as store:
        store.append(Observe("ls", "a b c"))
    stranger = tmp_path / f".b.arc.copying-{os.getpid()}"  # a leftover of a process of the same id
    stranger.write_bytes(b"not ours")
    Path(str(new) + ".ack").mkdir()  # the .ack cannot be put in place: after NEW was linked
    code, out, err = run(capfd, "copy", str(source), str(new))
    assert (code, out) == (2, "") and err.startswith(f"arc-ref copy: cannot create {str(new)!r}")
    assert not os.path.lexists(new) and stranger.read_bytes() == b"not ours"
    Path(str(new) + ".ack").rmdir()
    code, out, err = run(capfd, "copy", str(source), str(new))
    assert (code, err) == (0, "") and [row.line for row in read_rows(new)] == [row.line for row in read_rows(source)]
    assert stranger.read_bytes() == b"not ours"


def test_sigterm_during_a_copy_leaves_nothing(tmp_path: Path) -> None:
    source, new = tmp_path / "a.arc", tmp_path / "b.arc"
    with DurableStore.create(source, CONFIG) as store:
        for start in range(0, 6000, 500):
            store.append_many([Observe(f"cat f{number}", f"line {number} " * 200)
                               for number in range(start, start + 500)])
    copying = subprocess.Popen([sys.executable, "-m", "arc_ref.frontends.cli", "copy", str(source), str(new)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(path.name.startswith(".b.arc.copying-") for path in tmp_path.iterdir()):
        assert copying.poll() is None and time.monotonic() < deadline, "the copy ended before it was signalled"
        time.sleep(0.005)
    copying.send_signal(signal.SIGTERM)
    out, err = copying.communicate(timeout=60)
    assert copying.returncode == 130, err
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith("a.arc")) == []


@pytest.mark.parametrize("name", ["b.arc", "b[1].arc", "c?*.arc", "a**b.arc"])
def test_a_copy_interrupted_as_its_ack_record_is_made_leaves_only_what_was_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], name: str) -> None:
    """An interrupt right after the new store's acknowledgement staging file is opened (before AckWriter's own
    cleanup can run) leaves none of the copy's files, whatever NEW's name holds (glob characters included), and no
    other file is touched (the source's own are left out: reading it may add its -wal and -shm); the same name
    copies cleanly when nothing interrupts it."""
    from arc_ref.persist import acknowledgement

    source = tmp_path / "a.arc"
    with DurableStore.create(source, CONFIG) as store:
        store.append(Observe("ls", "a b c"))
    decoys = [tmp_path / f"..{stem}.copying-{os.getpid()}-0.ack-other" for stem in ("b1.arc", "cX.arc", "aXb.arc")]
    for decoy in decoys:
        decoy.write_bytes(b"not ours")
    real_open = os.open

    def interrupted(path: str, *arguments: int) -> int:
        descriptor = real_open(path, *arguments)
        if ".ack-" in str(path):
            raise KeyboardInterrupt
        return descriptor

    before = sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith("a.arc"))
    monkeypatch.setattr(acknowledgement.os, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store_cli._copy(str(source), str(tmp_path / name))
    monkeypatch.undo()
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith("a.arc")) == before
    assert all(decoy.read_bytes() == b"not ours" for decoy in decoys)
    code, out, err = run(capfd, "copy", str(source), str(tmp_path / name))
    assert (code, err) == (0, "") and [row.line for row in read_rows(tmp_path / name)] == [
        row.line for row in read_rows(source)]


def test_a_path_holding_a_newline_is_shown_quoted_and_escaped(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Review h24 (nit N-g): a newline in a store's path (or its folder's) broke the one line of copy's report and of
    inspect's overview; such a path is shown as an error names it (quoted, \\n escaped), a plain one as written."""
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    source, new = folder / "a\nb.arc", folder / "c\x1b[2Jd.arc"
    with DurableStore.create(source, CONFIG) as store:
        store.append(Observe("ls", "a b c"))
    code, out, err = run(capfd, "copy", str(source), str(new))
    assert (code, err) == (0, "")
    # review h72: "1 events"
    assert out == f"copied 2 rows (the config line and 1 event) from {str(source)!r} into {str(new)!r}\n"
    assert "\\n" in out and "\x1b" not in out
    code, out, err = run(capfd, "inspect", str(new))
    assert (code, err) == (0, "") and out.startswith(f"store {str(new)!r}: 2 rows")
    code, out, err = run(capfd, "inspect", str(tmp_path / "plain.arc"))
    assert code == 2 and f"{str(tmp_path / 'plain.arc')!r}" in err  # errors quote every path, as before


LEFT_BY_A_KILLED_COPY = """
import os, sys
from pathlib import Path
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore
from tests.persist.test_store_cut_snapshot import CONFIG
folder, pid = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else str(os.getpid())
store = DurableStore.create(folder / f".b.arc.copying-{pid}-0123abcd", CONFIG)
store.append_many([Observe(f"cat f{n}", "line " * 50) for n in range(40)])
(folder / f"..b.arc.copying-{pid}-0123abcd.ack-{pid}-1").write_bytes(b"")  # an ack record's staging file
print("open", flush=True)
if len(sys.argv) > 2:
    sys.stdin.readline()  # a copy still running: its store open (locked)
os._exit(0)  # as a SIGKILL would: nothing closed, nothing removed
"""


def test_the_next_copy_removes_what_a_killed_copy_left_and_nothing_of_a_running_one(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Review h24 (nit N-b): a copy killed with SIGKILL left .b.arc.copying-PID-HEX, its -wal, -shm and .ack beside
    NEW for good. The next copy to NEW removes the files of a copy whose process is gone; the files of one whose
    store is still open (locked: running, whatever the PID in its name says) and other names are left."""
    source, new = tmp_path / "a.arc", tmp_path / "b.arc"
    with DurableStore.create(source, CONFIG) as store:
        store.append(Observe("ls", "a b c"))
    killed = subprocess.run([sys.executable, "-c", LEFT_BY_A_KILLED_COPY, str(tmp_path)], capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert killed.stdout == "open\n", killed.stderr
    left = sorted(path.name for path in tmp_path.iterdir() if ".copying-" in path.name)
    assert len(left) >= 4 and any(name.endswith("-wal") for name in left), left
    dead_pid = left[0].split(".copying-")[1].split("-")[0]
    running = subprocess.Popen([sys.executable, "-c", LEFT_BY_A_KILLED_COPY.replace("0123abcd", "4567cdef"),
                                str(tmp_path), dead_pid], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).parents[2])
    try:
        assert running.stdout is not None and running.stdout.readline() == "open\n"
        stranger = tmp_path / ".b.arc.copying-1-notours"
        stranger.write_bytes(b"not ours")
        code, out, err = run(capfd, "copy", str(source), str(new))
        assert code == 0 and out.startswith("copied 2 rows"), err
        assert err == (f"arc-ref copy: removed the temporary files of 1 earlier copy(ies) to {new} whose process is"
                       f" gone (killed): '.b.arc.copying-{dead_pid}-0123abcd'\n"), err
        still = sorted(path.name for path in tmp_path.iterdir() if ".copying-" in path.name)
        assert not any("0123abcd" in name for name in still), still
        assert f".b.arc.copying-{dead_pid}-4567cdef" in still and stranger.read_bytes() == b"not ours", still
    finally:
        assert running.stdin is not None
        running.stdin.close()
        running.wait(timeout=60)
