"""Store failures named for what they are (issue 31 item 4): a read-only file system or directory, a full disk, a
lock held, damage. Each is its own StoreError (StoreReadOnly, StoreFull, StoreLocked, StoreCorrupt) with a
message that says so; a store that is only read-only or full is never called damaged.

The read-only mount and the full disk are real where the test may mount a tmpfs in a private user and mount
namespace (``unshare -rm``: no mount outlives the test); beside them the same failures are injected into SQLite
(a read-only connection for the writer, a connection whose writes fail with SQLITE_FULL), which run everywhere.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import (
    DurableStore,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreReadOnly,
)
from arc_ref.persist import store as store_module

ROOT = Path(__file__).resolve().parents[2]
CONFIG = preset("minimal", capacity=1_000_000, page_budget=400, stub_cap=120, summary_budget=400, recall_budget=220,
                recent_budget=480, context_limit=2400)


def _can_mount() -> str | None:
    """Why a tmpfs cannot be mounted in a private namespace here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {probe.stderr.strip()}"


def _in_private_mount(tmp_path: Path, script: str, size: str) -> dict[str, Any]:
    """Run ``script`` (Python) with a fresh tmpfs of ``size`` mounted at MOUNT, in a private user and mount
    namespace; it prints one JSON object, returned."""
    why = _can_mount()
    if why is not None:
        pytest.skip(why)
    mount = tmp_path / "mnt"
    mount.mkdir()
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(script), encoding="utf-8")
    shell = f"mount -t tmpfs -o size={size} tmpfs {mount} && exec {sys.executable} {program} {mount}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


PRELUDE = """
    import json, os, subprocess, sys
    from arc_ref.config import preset
    from arc_ref.machine import Observe
    from arc_ref.persist import DurableStore
    MOUNT = sys.argv[1]
    CONFIG = preset("minimal", capacity=1_000_000, page_budget=400, stub_cap=120, summary_budget=400,
                    recall_budget=220, recent_budget=480, context_limit=2400)
    def attempt(action):
        try:
            action()
            return ["ok", ""]
        except Exception as problem:
            return [type(problem).__name__, str(problem)]
    def mcp(path):
        done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", path], input="",
                              capture_output=True, text=True, timeout=60)
        return [done.returncode, done.stderr.strip()]
"""


def test_a_read_only_mount_is_named_not_damaged(tmp_path: Path) -> None:
    """Real: a store on a tmpfs remounted read-only (closed cleanly; left open as after a crash), and a new store
    in a directory of it. Before: StoreCorrupt '... cannot be read: unable to open database file' / 'attempt to
    write a readonly database' (exit 2), and for a new store an internal error (exit 70)."""
    found = _in_private_mount(tmp_path, PRELUDE + """
    clean = DurableStore.create(MOUNT + "/clean.arc", CONFIG); clean.append(Observe("ls", "a\\n", 0)); clean.close()
    os.mkdir(MOUNT + "/dir")
    child = os.fork()
    if child == 0:  # a writer that dies with its store open: its WAL and .ack stay
        unclosed = DurableStore.create(MOUNT + "/open.arc", CONFIG); unclosed.append(Observe("ls", "a\\n", 0))
        os._exit(0)
    os.waitpid(child, 0)
    subprocess.run(["mount", "-o", "remount,ro", MOUNT], check=True)
    print(json.dumps({
        "clean": attempt(lambda: DurableStore.open(MOUNT + "/clean.arc").close()),
        "open": attempt(lambda: DurableStore.open(MOUNT + "/open.arc").close()),
        "create": attempt(lambda: DurableStore.create(MOUNT + "/dir/new.arc", CONFIG)),
        "reader": attempt(lambda: DurableStore.open(MOUNT + "/open.arc", readonly=True).close()),
        "mcp": mcp(MOUNT + "/clean.arc"), "mcp_new": mcp(MOUNT + "/dir/new.arc"),
    }))
    """, "8m")
    for case in ("clean", "open", "create"):
        kind, message = found[case]
        assert kind == "StoreReadOnly", (case, found[case])
        assert "read-only file system" in message and "damaged" in message and "nothing is damaged" in message
    assert found["reader"] == ["ok", ""]  # readers still read it
    for case in ("mcp", "mcp_new"):
        status, stderr = found[case]
        assert status == 2 and "read-only file system" in stderr and stderr.count("\n") == 0, found[case]


def test_a_writer_reopening_after_a_full_disk_is_told_full_not_damaged(tmp_path: Path) -> None:
    """Real: a writer appends on a 2 MiB tmpfs until it is full; the writer reopening on the full disk is told so
    (before: StoreCorrupt '... cannot be read: database or disk is full'); once there is room it opens with every
    acknowledged event."""
    found = _in_private_mount(tmp_path, PRELUDE + """
    path = MOUNT + "/task.arc"
    store = DurableStore.create(path, CONFIG)
    acknowledged = 1
    try:
        while True:
            acknowledged = store.append(Observe(f"cat f{acknowledged}", f"x{acknowledged} " * 2000, 0)).seq
    except Exception as problem:
        full = [type(problem).__name__, str(problem)]
    store.close()
    reopened = attempt(lambda: DurableStore.open(path).close())
    mcp_full = mcp(path)
    subprocess.run(["mount", "-o", "remount,size=16m", MOUNT], check=True)
    after = DurableStore.open(path)
    print(json.dumps({"append": full, "reopen": reopened, "mcp": mcp_full, "acknowledged": acknowledged,
                      "rows_after_room": after.seq}))
    after.close()
    """, "2m")
    assert found["append"][0] == "StoreFull" and "the file system is full" in found["append"][1]
    kind, message = found["reopen"]
    assert kind == "StoreFull" and "the file system is full" in message and "nothing is damaged" in message
    status, stderr = found["mcp"]
    assert status == 2 and "the file system is full" in stderr and "cannot be read" not in stderr
    assert found["rows_after_room"] == found["acknowledged"] > 10  # nothing acknowledged was lost


# --- the same failures injected into SQLite (run everywhere) -----------------------------------------------


class _FullDisk(sqlite3.Connection):
    """A connection whose writes fail as SQLite fails them on a full file system (SQLITE_FULL at the commit)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if sql.strip().upper().startswith(("COMMIT", "INSERT", "DELETE", "UPDATE", "CREATE")):
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
            error.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
            raise error
        return super().execute(sql, *args)


def _made(tmp_path: Path, events: int = 3) -> Path:
    path = tmp_path / "task.arc"
    with DurableStore.create(path, CONFIG) as store:
        for number in range(events):
            store.append(Observe(f"cat f{number}", f"line {number}\n", 0))
    return path


def test_a_writer_on_a_read_only_connection_is_told_read_only(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected: the writer's connection is read-only (what SQLite gives on a read-only mount). Before:
    StoreCorrupt '... cannot be read: attempt to write a readonly database'."""
    path = _made(tmp_path)
    real_connect = store_module.connect
    monkeypatch.setattr(store_module, "connect", lambda target, readonly: real_connect(target, readonly=True))
    with pytest.raises(StoreReadOnly, match="cannot open it for writing: it is on a read-only file system") as refused:
        DurableStore.open(path)
    assert not isinstance(refused.value, StoreCorrupt) and "nothing is damaged" in str(refused.value)


def test_a_writer_reopening_on_a_full_disk_is_told_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected: every write of the reopening writer fails with SQLITE_FULL. Before: StoreCorrupt '... cannot be
    read: database or disk is full'; readers read it all along."""
    path = _made(tmp_path)
    real_connect = store_module.connect

    def full_disk(target: Path, readonly: bool) -> sqlite3.Connection:
        if readonly:
            return real_connect(target, readonly=True)
        connection = sqlite3.connect(str(target), isolation_level=None, check_same_thread=False, factory=_FullDisk)
        connection.text_factory = bytes
        return connection

    monkeypatch.setattr(store_module, "connect", full_disk)
    with pytest.raises(StoreFull, match="cannot open it for writing: the file system is full") as refused:
        DurableStore.open(path)
    assert not isinstance(refused.value, StoreCorrupt)
    with DurableStore.open(path, readonly=True) as reader:
        assert reader.seq == 4
    monkeypatch.undo()
    with DurableStore.open(path) as writer:  # room again: nothing was lost
        assert writer.seq == 4


def test_an_append_on_a_full_disk_is_told_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected: the database may not grow (PRAGMA max_page_count, SQLite's own SQLITE_FULL)."""
    path = _made(tmp_path)
    with DurableStore.open(path) as store:
        pages = store._connection.execute("PRAGMA page_count").fetchone()[0]
        store._connection.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreFull, match="cannot store event #5: the file system is full"):
            store.append(Observe("cat big", "y" * 200_000, 0))
        assert store.seq == 4


def test_a_held_lock_and_damage_are_named_as_before(tmp_path: Path) -> None:
    path = _made(tmp_path)
    held = DurableStore.open(path)
    try:
        with pytest.raises(StoreLocked, match="is open for writing by process"):
            DurableStore.open(path)
    finally:
        held.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE events SET line = replace(line, 'line 1', 'line 9') WHERE seq = 3")
    with pytest.raises(StoreCorrupt, match="row 3 fails its checksum"):
        DurableStore.open(path)


def test_the_kinds_are_store_errors_with_their_own_codes() -> None:
    assert issubclass(StoreReadOnly, StoreError) and issubclass(StoreFull, StoreError)
    assert not issubclass(StoreReadOnly, StoreCorrupt) and not issubclass(StoreFull, StoreCorrupt)
    assert (StoreReadOnly.code, StoreFull.code) == ("store_read_only", "store_full")
