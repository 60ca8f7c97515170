"""The durable store: reopening gives the fold, refusals store nothing, a bad row stops the open naming it,
one writer at a time, owner-only files, snapshots used only when they are the fold of the same events."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from arc_ref.config import preset
from arc_ref.errors import CapacityExceeded, ConfigError, InvalidEvent
from arc_ref.machine import AgentTurn, ArcState, Compact, Observe, RequestView, init, step
from arc_ref.persist import DurableStore, StoreCorrupt, StoreError, StoreExists, StoreLocked, StoreNotFound
from arc_ref.persist.store import GENESIS, chain
from arc_ref.trace import encode, event_line

CONFIG = preset("minimal", capacity=12)


def events() -> list[Observe | AgentTurn | Compact]:
    return [
        Observe("ls", "a.txt b.txt"),
        Observe("cat a.txt", "alpha é 中 😀 " * 9, 1),
        AgentTurn("look", "cat b.txt"),
        Observe("cat b.txt", "beta\n" * 20),
        AgentTurn("again", "_recall §001"),
        Compact("forced"),
        AgentTurn("browse", "catalog-first"),
        Observe("grep x", ""),
    ]


def folded(config: object = CONFIG, items: list[Observe | AgentTurn | Compact] | None = None) -> ArcState:
    state = init(CONFIG)
    for event in items if items is not None else events():
        state, _ = step(state, event)
    return state


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "task.arc"
    with DurableStore.create(path, CONFIG) as store:
        for event in events():
            store.append(event)
    yield path


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def rewrite_line(path: Path, seq: int, line: str) -> None:
    """Replace row ``seq`` and recompute every checksum from it on, as a careless editor with the format would."""
    with raw(path) as connection:
        rows = connection.execute("SELECT seq, line FROM events ORDER BY seq").fetchall()
        checksum = GENESIS
        for number, text in rows:
            if number == seq:
                text = line
                connection.execute("UPDATE events SET line = ? WHERE seq = ?", (text, number))
            checksum = chain(checksum, number, text.encode("utf-8"))
            connection.execute("UPDATE events SET checksum = ? WHERE seq = ?", (checksum, number))
    connection.close()


def test_reopen_is_the_fold_with_or_without_the_snapshot(store_path: Path) -> None:
    expected = folded()
    with DurableStore.open(store_path) as store:
        assert store.state == expected
        assert store.report.snapshot_seq == len(events()) + 1 and store.report.folded == 0
    with DurableStore.open(store_path, use_snapshot=False) as store:
        assert store.state == expected
        assert store.report.snapshot_seq == 0 and store.report.folded == len(events())
    with DurableStore.open(store_path, readonly=True) as reader:
        assert reader.state == expected
        assert [stored.seq for stored in reader.events()] == list(range(1, len(events()) + 2))


def test_rows_are_the_trace_lines_and_the_acknowledgement_is_their_checksum(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, CONFIG) as store:
        acknowledged = [store.append(event) for event in events()]
        lines = list(store.export_lines())
    assert lines[0] == '{"capacity":12,"op":"config","preset":"minimal"}'
    assert lines[1:] == [encode(event_line(event)) for event in events()]
    checksum = hashlib.sha256(b"arc-ref event log 1").hexdigest()  # spec/store.md, independently of chain()
    for seq, line in enumerate(lines, start=1):
        checksum = hashlib.sha256(f"{checksum}\n{seq}\n{line}".encode("utf-8")).hexdigest()
        if seq > 1:
            assert acknowledged[seq - 2].seq == seq and acknowledged[seq - 2].checksum == checksum


def test_an_event_the_core_refuses_is_not_stored(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, preset("minimal", capacity=2)) as store:
        store.append(Observe("ls", "x"))
        store.append(Observe("ls", "y"))
        before = store.state
        with pytest.raises(CapacityExceeded):
            store.append(Observe("ls", "z"))
        with pytest.raises(InvalidEvent):
            store.append(Compact("later"))
        with pytest.raises(InvalidEvent):
            store.append(Observe("ls", "\ud800"))
        with pytest.raises(StoreError, match="a view request changes nothing"):
            store.append(RequestView())
        assert store.state is before and store.seq == 3
    with DurableStore.open(path, use_snapshot=False) as store:
        assert store.seq == 3 and store.state == before


def test_a_batch_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, CONFIG) as store:
        with pytest.raises(InvalidEvent):
            store.append_many([Observe("ls", "x"), Compact("sometime"), Observe("ls", "y")])
        assert store.seq == 1 and store.state.stored == 0
        done = store.append_many([Observe("ls", "x"), Observe("ls", "y")])
        assert [ack.seq for ack in done] == [2, 3]
    with DurableStore.open(path, use_snapshot=False) as store:
        assert store.state.stored == 2


def test_a_refused_configuration_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    with pytest.raises(ConfigError, match="exceeds L"):
        DurableStore.create(path, preset("paper", summary_budget=50_000))
    assert not path.exists()


def test_a_creation_killed_mid_way_leaves_nothing_for_the_next_one(tmp_path: Path) -> None:
    """A process killed while it built ``.NAME.creating-PID-TID`` (SIGKILL: its finally never ran) left that staging
    store and its logs; the next creation of the same store removes them (review h35 F6: a proxy killed while it
    made a conversation's store left about 57 KB in the folder for good). A live process's staging files stay."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # a process that ran and ended: nothing has its PID (or one reused: left, as alive)
    target = tmp_path / "task.arc"
    left = [tmp_path / f".task.arc.creating-{dead_pid}-140{number}{suffix}"
            for number, suffix in enumerate(("", "-wal", "-shm", "-journal"))]
    running = tmp_path / f".task.arc.creating-{os.getpid()}-1"  # a creation under way in a live process
    other = tmp_path / f".notes.arc.creating-{dead_pid}-1"  # another store's
    for path in (*left, running, other):
        path.write_bytes(b"x" * 100)
    DurableStore.create(target, CONFIG).close()
    if not any(path.exists() for path in left):  # (skipped only when the PID was taken again meanwhile)
        assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
            ["task.arc", "task.arc.ack", running.name, other.name])
    else:
        assert os.path.exists(f"/proc/{dead_pid}"), "the dead process's staging files were left"


def test_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    old = os.umask(0o002)
    try:
        store = DurableStore.create(path, CONFIG)
        store.append(Observe("ls", "x"))
        names = sorted(entry.name for entry in tmp_path.iterdir())
        assert names == ["s.arc", "s.arc-shm", "s.arc-wal", "s.arc.ack"]  # no lock file: the database is locked
        for entry in tmp_path.iterdir():
            assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry.name
        store.close()
    finally:
        os.umask(old)


def test_one_writer_at_a_time_and_readers_beside_it(store_path: Path) -> None:
    writer = DurableStore.open(store_path)
    try:
        with pytest.raises(StoreLocked, match=f"open for writing by process {os.getpid()}"):
            DurableStore.open(store_path)
        other = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom arc_ref.persist import DurableStore, StoreLocked\n"
             "try:\n    DurableStore.open(sys.argv[1])\nexcept StoreLocked as e:\n    print(e)\n",
             str(store_path)],
            capture_output=True, text=True, check=True,
        )
        assert f"is open for writing by process {os.getpid()}; one writer at a time" in other.stdout
        writer.append(Observe("ls", "while a reader looks"))
        with DurableStore.open(store_path, readonly=True) as reader:
            assert reader.state == writer.state and reader.seq == writer.seq
            with pytest.raises(StoreError, match="read-only"):
                reader.append(Observe("ls", "x"))
        writer.append(Observe("ls", "after the reader"))
    finally:
        writer.close()
    with DurableStore.open(store_path) as again:  # the lock went with the writer
        assert again.state.stored == 6


def test_another_writer_ignoring_the_lock_is_detected(store_path: Path) -> None:
    with DurableStore.open(store_path) as store:
        before = store.state
        with raw(store_path) as connection:
            connection.execute("INSERT INTO events VALUES (?, ?, ?)", (store.seq + 1, "{}", "0"))
        connection.close()
        with pytest.raises(StoreError, match=f"row {store.seq + 1} was written by someone else"):
            store.append(Observe("ls", "x"))
        assert store.state is before


def test_missing_existing_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound, match="no ARC store at"):
        DurableStore.open(tmp_path / "absent.arc")
    with pytest.raises(StoreNotFound, match="a directory"):
        DurableStore.open(tmp_path)
    (tmp_path / "taken.arc").write_text("x")
    with pytest.raises(StoreExists, match="already exists"):
        DurableStore.create(tmp_path / "taken.arc", CONFIG)
    garbage = tmp_path / "garbage.arc"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(StoreCorrupt, match="is not an ARC store"):
        DurableStore.open(garbage, readonly=True)
    foreign = tmp_path / "foreign.db"
    with raw(foreign) as connection:
        connection.execute("CREATE TABLE t (x)")
    connection.close()
    with pytest.raises(StoreCorrupt, match="a SQLite file of another application"):
        DurableStore.open(foreign)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("edit", "row 3 fails its checksum"),
        ("bad json", "row 4: not valid JSON"),
        ("unknown key", "row 4: unknown key(s) colour for op 'observe'"),
        ("refused", "row 4: compact reason must be one of"),
        ("view", "row 4: a view request is not an event of the log"),
        ("gap", "row 4 is missing (the next row is 5)"),
        ("config", "row 1 must hold the config line"),
        ("empty", "holds no rows"),
    ],
)
def test_a_bad_row_stops_the_open_and_is_named(store_path: Path, damage: str, message: str) -> None:
    with raw(store_path) as connection:
        if damage == "edit":
            connection.execute("UPDATE events SET line = replace(line, 'alpha', 'alphA') WHERE seq = 3")
        elif damage == "gap":
            connection.execute("DELETE FROM events WHERE seq = 4")
        elif damage == "empty":
            connection.execute("DELETE FROM events")
    connection.close()
    replacement = {
        "bad json": '{"op":"observe",',
        "unknown key": '{"action":"ls","colour":1,"observation":"x","op":"observe"}',
        "refused": '{"op":"compact","reason":"soon"}',
        "view": '{"op":"view"}',
    }
    if damage in replacement:
        rewrite_line(store_path, 4, replacement[damage])
    if damage == "config":
        rewrite_line(store_path, 1, '{"op":"compact","reason":"forced"}')
    for use_snapshot in (True, False):
        with pytest.raises(StoreCorrupt) as refused:
            DurableStore.open(store_path, readonly=True, use_snapshot=use_snapshot)
        assert message in str(refused.value)
        assert str(store_path) in str(refused.value)


def _snapshot(path: Path) -> tuple[int, bytes]:
    with raw(path) as connection:
        seq, data = connection.execute("SELECT seq, data FROM snapshots").fetchone()
    connection.close()
    return seq, data


def _set_snapshot(path: Path, data: bytes) -> None:
    with raw(path) as connection:
        connection.execute(
            "UPDATE snapshots SET data = ?, digest = ?", (data, hashlib.sha256(data).hexdigest())
        )
    connection.close()


@pytest.mark.parametrize(
    ("damage", "note"),
    [
        ("bytes", "snapshot ignored: its bytes fail their checksum"),
        ("key", "snapshot ignored: written by other code or for another tokenizer"),
        ("chain", "snapshot ignored: it is of other events than rows 1-9"),
        ("truncated", "snapshot ignored: the snapshot does not load"),
        ("not a state", "snapshot ignored: the snapshot does not hold an ARC state"),
        ("past the end", "snapshot ignored: it is of row 10, past the last row 9"),
    ],
)
def test_an_unusable_snapshot_is_ignored_and_the_events_are_folded(
    store_path: Path, damage: str, note: str
) -> None:
    seq, data = _snapshot(store_path)
    assert seq == 9
    expected = folded()
    with raw(store_path) as connection:
        if damage == "bytes":
            connection.execute("UPDATE snapshots SET data = ?", (data[:-1] + bytes([data[-1] ^ 1]),))
        elif damage == "key":
            connection.execute("UPDATE snapshots SET key = 'other'")
        elif damage == "chain":
            connection.execute("UPDATE snapshots SET chain = ?", ("0" * 64,))
        elif damage == "past the end":
            connection.execute("UPDATE snapshots SET seq = 10")  # (deleting row 9 loses an acknowledged row)
    connection.close()
    if damage == "truncated":
        _set_snapshot(store_path, data[: len(data) // 2])
    if damage == "not a state":
        _set_snapshot(store_path, pickle.dumps((1, "two")))
    with DurableStore.open(store_path, readonly=True) as store:
        assert store.report.snapshot_note.startswith(note)
        assert store.report.snapshot_seq == 0
        assert store.state == expected


class _Payload:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.path,))


def test_a_snapshot_cannot_run_code(store_path: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _set_snapshot(store_path, pickle.dumps(_Payload(str(marker)), protocol=5))
    with DurableStore.open(store_path, readonly=True) as store:
        assert "which a snapshot may not hold" in store.report.snapshot_note
        assert store.state == folded()
    assert not marker.exists()


def test_a_writer_snapshots_as_the_log_grows(tmp_path: Path) -> None:
    path = tmp_path / "s.arc"
    store = DurableStore.create(path, preset("minimal", capacity=100))
    store.snapshot_min_events, store.snapshot_growth = 5, 0.5
    snapshots = []
    for number in range(40):
        store.append(Observe("ls", f"file {number}"))
        if store.snapshot_seq not in snapshots:
            snapshots.append(store.snapshot_seq)
    state = store.state
    store.close()
    # rows 5, 10, 15: 5 new rows; then 22 (15 + 7 = half of 15), 33 (22 + 11)
    assert snapshots == [0, 5, 10, 15, 22, 33]
    with DurableStore.open(path) as again:
        assert again.report.snapshot_seq == 41 and again.state == state


def test_a_template_config_round_trips_and_reopens_from_its_snapshot(tmp_path: Path) -> None:
    from arc_ref.errors import InvalidEvent
    from arc_ref.machine import ToolResult, ToolTurn, ToolTurnResult
    from arc_ref.message import ToolCall
    from tests.core.test_tokenizers import _train_tokenizer_json
    from tests.core.test_tool_mode import TOOL_TEMPLATE, tool_config

    model = tmp_path / "model"
    model.mkdir()
    _train_tokenizer_json(model / "tokenizer.json")
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOL_TEMPLATE}), encoding="utf-8")
    text_mode = tool_config(str(model), action_mode="text", tools=[], template_kwargs={"enable_thinking": True})
    path = tmp_path / "template.arc"
    with DurableStore.create(path, text_mode) as store:
        store.append(Observe("cat a.txt", "alpha\n" * 30))
        store.append(AgentTurn("again", "_recall " + store.state.records[0].obs_id))
        store.append(Observe("cat b.txt", "beta é\n" * 30, 1))
        expected = store.state
        config_row = json.loads(next(store.events(1, 1)).line)
    assert config_row["chat_format"] == "template" and config_row["template_kwargs"] == {"enable_thinking": True}
    with DurableStore.open(path, readonly=True) as reopened:
        assert reopened.report.snapshot_seq == 4 and reopened.state == expected
    with DurableStore.open(path, readonly=True, use_snapshot=False) as folded_again:
        assert folded_again.state == expected
    # tool-calling mode: its config line carries the tools, its tool_turn and tool_result rows reopen to the state
    tools_path = tmp_path / "tools.arc"
    with DurableStore.create(tools_path, tool_config(str(model))) as store:
        assert json.loads(next(store.events(1, 1)).line)["tools"][0]["function"]["name"] == "read_file"
        store.append(ToolTurn("read it", (ToolCall("call_1", "read_file", '{"path": "c"}'),)))
        with pytest.raises(InvalidEvent, match="no pending tool call has id 'call_9'"):
            store.append(ToolResult("call_9", "wrong call"))
        store.append(ToolResult("call_1", "gamma\n" * 40, 1))
        obs_id = store.state.records[0].obs_id
        answer = store.append(ToolTurn("", (ToolCall("call_2", "_recall", json.dumps({"id": obs_id})),))).output
        assert isinstance(answer, ToolTurnResult) and answer.recalls[0].payload.startswith("gamma")
        expected = store.state
        rows = [json.loads(stored.line) for stored in store.events()]
    assert [row["op"] for row in rows] == ["config", "tool_turn", "tool_result", "tool_turn"]
    assert rows[1]["calls"] == [{"id": "call_1", "type": "function",
                                 "function": {"name": "read_file", "arguments": '{"path": "c"}'}}]
    for use_snapshot in (True, False):
        with DurableStore.open(tools_path, readonly=True, use_snapshot=use_snapshot) as reopened:
            assert reopened.state == expected
