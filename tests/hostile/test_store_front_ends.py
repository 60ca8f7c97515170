"""Issue 18, item 8: the store's front ends (`arc-ref inspect`, `export`, `mcp`) given damaged stores, odd
files beside them and failing streams: one clear line and the status `arc-ref --help` promises, never a
traceback or exit 70. Each case failed on main 5bf445a (a raw UnicodeDecodeError, sqlite3.DatabaseError,
OverflowError or "'ascii' codec can't encode", exit 70, or a silent status 0 on /dev/full).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from arc_ref.frontends.cli import EXIT_IO
from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore

ARC_REF = [sys.executable, "-m", "arc_ref.frontends.cli"]
CONTENT = "héllo 中 😀\n"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, preset("minimal", capacity=20)) as store:
        store.append(Observe("cat é.txt", CONTENT))
        store.append(Observe("ls", "a b"))
    return path


def arc_ref(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*ARC_REF, *argv], capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
                          env=env)


def shell(line: str) -> subprocess.CompletedProcess[bytes]:
    """A bash line, so that `>&-` and `> /dev/full` mean what they mean to a user."""
    command = " ".join(shlex.quote(part) for part in ARC_REF)
    return subprocess.run(["bash", "-c", line.replace("ARC_REF", command)], capture_output=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def one_clear_line(done: subprocess.CompletedProcess[bytes], status: int, words: str) -> str:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err
    assert done.returncode == status, (done.returncode, err)
    assert len(err.strip().splitlines()) == 1 and words in err, err
    return err


def test_a_damaged_snapshot_row_is_ignored_and_the_events_are_folded(store_path: Path) -> None:
    with sqlite3.connect(store_path) as connection:
        connection.execute("UPDATE snapshots SET key = ?", ("ÿþ non-ASCII",))
    connection.close()
    with DurableStore.open(store_path, readonly=True) as store:
        assert store.report.snapshot_note.startswith("snapshot ignored: its row is damaged")
        assert store.state.stored == 2 and store.report.folded == 2
    done = arc_ref("inspect", str(store_path))
    assert done.returncode == 0 and b"snapshot ignored: its row is damaged" in done.stdout


def test_a_damaged_schema_is_one_clear_line_for_readers_and_the_writer(store_path: Path) -> None:
    with sqlite3.connect(store_path) as connection:
        connection.execute("PRAGMA writable_schema = ON")
        connection.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE events(' WHERE name = 'events'")
    connection.close()
    for command in ("inspect", "export", "mcp"):
        one_clear_line(arc_ref(command, str(store_path)), 2, "cannot be read: malformed database schema")


def test_a_fifo_beside_the_store_never_blocks_or_crashes(store_path: Path) -> None:
    os.mkfifo(str(store_path) + ".lock")  # no longer a file of the store: ignored
    assert arc_ref("mcp", str(store_path)).returncode == 0  # serves, and ends at the end of its input
    Path(str(store_path) + ".ack").unlink()
    os.mkfifo(str(store_path) + ".ack")
    for command in ("mcp", "inspect", "export"):
        one_clear_line(arc_ref(command, str(store_path)), 2, "is not a regular file")


@pytest.mark.parametrize("argv", ["export", "inspect --events", "inspect --view", "inspect"])
def test_a_full_disk_or_a_closed_standard_output_is_status_4(store_path: Path, argv: str) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    line = f"ARC_REF {argv.split()[0]} {shlex.quote(str(store_path))} {' '.join(argv.split()[1:])}"
    one_clear_line(shell(line + " > /dev/full"), EXIT_IO, "cannot write standard output: No space left on device")
    one_clear_line(shell(line + " >&-"), EXIT_IO, "standard output is closed")


def test_rows_past_the_end_or_a_negative_count_are_refused_clearly(store_path: Path) -> None:
    def events(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return arc_ref("inspect", str(store_path), "--events", *argv)

    one_clear_line(events("--from", "4"), 1, "no row 4: the store has rows 1-3")
    rows = "--from: expected an integer from 1 to 9223372036854775807"  # a SQLite integer (issue 31: bounded)
    one_clear_line(events("--from", str(10**30)), 2, rows)
    one_clear_line(events("--from", "0"), 2, rows)
    one_clear_line(arc_ref("inspect", str(store_path), "--events", "--count", "-3"), 2,
                   "--count: expected an integer from 0 to 9223372036854775807")
    done = arc_ref("inspect", str(store_path), "--events", "--from", "3", "--count", str(2**63 - 1))
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1


def test_the_options_of_events_without_events_are_refused(store_path: Path) -> None:
    """Review h24 (nit N-a): --from, --count and --full choose the rows of --events; without it they were ignored
    (the overview, or the view, printed with status 0). Now a usage error, status 2, naming them."""
    for argv, named in ((["--from", "2"], "--from goes with --events"), (["--count", "1"], "--count goes with"),
                        (["--full"], "--full goes with --events"), (["--view", "--from", "1"], "--from goes with"),
                        (["--from", "2", "--full"], "--from, --full go with --events")):
        done = arc_ref("inspect", str(store_path), *argv)
        one_clear_line(done, 2, named)
        assert done.stdout == b""
    done = arc_ref("inspect", str(store_path), "--events", "--full", "--from", "2", "--count", "1")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1 and done.stdout.split()[0] == b"2"


def test_output_is_utf8_whatever_pythonioencoding_says(store_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
    exported = arc_ref("export", str(store_path), env=env)
    assert exported.returncode == 0, exported.stderr
    assert CONTENT.encode("utf-8").replace(b"\n", b"\\n") in exported.stdout
    with DurableStore.open(store_path, readonly=True) as store:
        record = store.state.records[0].obs_id
    for argv in (["--events", "--full"], ["--record", record], ["--view"], []):
        done = arc_ref("inspect", str(store_path), *argv, env=env)
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        done.stdout.decode("utf-8")  # valid UTF-8
    assert CONTENT.encode("utf-8") in arc_ref("inspect", str(store_path), "--record", record, env=env).stdout


def test_a_cleanly_closed_store_on_read_only_media_is_readable(store_path: Path, tmp_path: Path) -> None:
    source, media = tmp_path / "source", tmp_path / "media"
    source.mkdir()
    media.mkdir()
    shutil.copy(store_path, source / "s.arc")  # closed cleanly: no -wal, no -shm
    bound = subprocess.run(["mount", "--bind", str(source), str(media)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount a read-only directory here (needs root): {bound.stderr!r}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(media)], capture_output=True)
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remounted.stderr!r}")
        assert not os.access(media, os.W_OK) or subprocess.run(["touch", str(media / "x")]).returncode != 0
        for argv in (["inspect"], ["inspect", "--events"], ["export"]):
            done = arc_ref(argv[0], str(media / "s.arc"), *argv[1:])
            assert done.returncode == 0 and done.stderr == b"", done.stderr
        with DurableStore.open(media / "s.arc", readonly=True) as store:
            assert store.seq == 3
    finally:
        subprocess.run(["umount", str(media)], check=True)
