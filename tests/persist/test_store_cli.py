"""`arc-ref inspect` and `arc-ref export`: what they show, that an export replays to the store's state, and
one clear line (never a traceback) for a missing, foreign or damaged store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from arc_ref.frontends.cli import main
from arc_ref.config import preset
from arc_ref.machine import AgentTurn, Compact, Observe, view
from arc_ref.persist import DurableStore, EventTooLarge, StoreError, fold_lines

CONTENT = "first line é中\nsecond line 😀\n" * 3


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "task.arc"
    with DurableStore.create(path, preset("minimal", capacity=20)) as store:
        store.append(Observe("cat notes.txt", CONTENT, 3))
        store.append(Observe("ls", "a b c"))
        store.append(AgentTurn("read it", "_recall " + store.state.records[0].obs_id))
        store.append(Compact("forced"))
        store.append(Observe("cat more.txt", "more\n" * 40))
    return path


def store_ids(path: Path) -> list[str]:
    with DurableStore.open(path, readonly=True) as store:
        return [record.obs_id for record in store.state.records]


def run(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capfd.readouterr()
    return code, out, err


def test_inspect_overview_shows_the_log_and_the_budget_audit(store_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capfd, "inspect", str(store_path))
    assert code == 0 and err == ""
    assert "6 rows (the config line and 5 events), 3 observations, 1 agent turn;" in out  # review h72: "1 agent turns"
    assert 'config: {"capacity":20,"op":"config","preset":"minimal"}' in out
    with DurableStore.open(store_path, readonly=True) as store:
        shown = view(store.state)
        parts = shown.components
        for label, tokens in (("summary S", parts.summary), ("recent H", parts.recent),
                              ("catalog page G", parts.catalog), ("recall buffer U", parts.recall)):
            assert any(line.split()[:len(label.split())] == label.split() and str(tokens) in line.split()
                       for line in out.splitlines()), label
        assert f"K = {store.state.setup.budget} <= L = {store.state.setup.limit}" in out


def test_inspect_catalog_record_events_view_and_verify(store_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with DurableStore.open(store_path, readonly=True) as store:
        first = store.state.records[0]
        expected_view = view(store.state).text()
    code, out, _ = run(capfd, "inspect", str(store_path), "--catalog", "1")
    assert code == 0 and out.startswith("[ARC catalog page 1/2") and first.obs_id in out
    code, out, _ = run(capfd, "inspect", str(store_path), "--record", first.obs_id)
    header, _, content = out.partition("\n")
    assert code == 0 and json.loads(header)["returncode"] == 3 and content == CONTENT
    ls_id = store_ids(store_path)[1]  # "a b c", no final newline: printed as it is (review h24 F8: one was added)
    code, out, _ = run(capfd, "inspect", str(store_path), "--record", ls_id)
    assert code == 0 and out.partition("\n")[2] == "a b c"
    code, out, err = run(capfd, "inspect", str(store_path), "--record", first.obs_id[:-1] + "x")
    assert code == 1 and f"did you mean {first.obs_id}?" in err
    code, out, err = run(capfd, "inspect", str(store_path), "--catalog", "9")
    assert code == 1 and "no catalog page 9: pages 1-2" in err
    code, out, _ = run(capfd, "inspect", str(store_path), "--events", "--from", "4", "--count", "2")
    rows = out.splitlines()
    assert code == 0 and [row.split()[0] for row in rows] == ["4", "5"] and '"op":"agent"' in rows[0]
    code, out, _ = run(capfd, "inspect", str(store_path), "--view")
    assert code == 0 and out.startswith(expected_view) and "view, counted whole" in out
    code, out, _ = run(capfd, "inspect", str(store_path), "--verify")
    assert code == 0 and "the fold of all 6 rows equals the state opened" in out


def test_export_replays_to_the_store_state(store_path: Path, tmp_path: Path) -> None:
    exported = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "export", str(store_path)],
                              capture_output=True, check=True).stdout.decode("utf-8")
    lines = exported.splitlines()
    with DurableStore.open(store_path, readonly=True) as store:
        assert lines == [row.line for row in store.events()]
        assert fold_lines(lines) == store.state
        state = store.state
    trace = tmp_path / "export.jsonl"
    trace.write_text(exported + '{"op":"view"}\n', encoding="utf-8")
    replayed = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", str(trace)],
                              capture_output=True, check=True).stdout.decode("utf-8").splitlines()
    outputs = [json.loads(line) for line in replayed]
    assert [output["op"] for output in outputs] == ["config", "observe", "observe", "agent", "compact",
                                                     "observe", "view"]
    assert [output["id"] for output in outputs if output["op"] == "observe"] == [r.obs_id for r in state.records]
    assert outputs[-1]["text"] == view(state).text()


def test_readers_work_beside_the_writer(store_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with DurableStore.open(store_path) as writer:
        writer.append(Observe("echo", "while inspect runs"))
        code, out, _ = run(capfd, "inspect", str(store_path))
        assert code == 0 and "7 rows" in out
        code, out, _ = run(capfd, "export", str(store_path))
        assert code == 0 and len(out.splitlines()) == 7


def test_missing_foreign_and_damaged_stores_are_one_clear_line(
    store_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    for command in ("inspect", "export"):
        code, out, err = run(capfd, command, str(tmp_path / "absent.arc"))
        assert code == 2 and err == f"arc-ref {command}: no ARC store at {str(tmp_path / 'absent.arc')!r}\n"
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, " * 100)
    code, _, err = run(capfd, "inspect", str(text))
    assert code == 2 and "is not an ARC store" in err and "Traceback" not in err
    connection = sqlite3.connect(str(store_path), isolation_level=None)
    connection.execute("UPDATE events SET line = replace(line, 'a b c', 'a b d') WHERE seq = 3")
    connection.close()
    code, _, err = run(capfd, "inspect", str(store_path))
    assert code == 2 and "row 3 fails its checksum" in err and err.count("\n") == 1
    code, out, err = run(capfd, "export", str(store_path))  # the intact rows, then the error
    assert code == 2 and len(out.splitlines()) == 2 and "row 3 fails its checksum" in err


def test_a_tool_mode_store_exports_and_replays(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Tool mode's tool_turn and tool_result rows (spec/trace.md §2): exported as stored, replayed to the state."""
    from arc_ref.machine import ToolResult, ToolTurn
    from arc_ref.message import ToolCall
    from tests.core.test_tokenizers import _train_tokenizer_json
    from tests.core.test_tool_mode import TOOL_TEMPLATE, tool_config

    model = tmp_path / "model"
    model.mkdir()
    _train_tokenizer_json(model / "tokenizer.json")
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOL_TEMPLATE}), encoding="utf-8")
    path = tmp_path / "tools.arc"
    with DurableStore.create(path, tool_config(str(model))) as store:
        store.append(ToolTurn("look", (ToolCall("call_1", "read_file", '{"path": "a.txt"}'),)))
        store.append(ToolResult("call_1", CONTENT, 2))
        obs_id = store.state.records[0].obs_id
        store.append(ToolTurn("", (ToolCall("call_2", "_recall", json.dumps({"id": obs_id})),)))
        state = store.state
    capfd.readouterr()  # what training the tokenizer printed
    code, exported, err = run(capfd, "export", str(path))
    lines = exported.splitlines()
    assert code == 0 and err == ""
    assert [json.loads(line)["op"] for line in lines] == ["config", "tool_turn", "tool_result", "tool_turn"]
    assert fold_lines(lines) == state
    outputs = [json.loads(line) for line in
               subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", "-"], input=exported.encode("utf-8"),
                              capture_output=True, check=True).stdout.decode("utf-8").splitlines()]
    assert [output["op"] for output in outputs] == ["config", "tool_turn", "tool_result", "tool_turn"]
    assert outputs[2]["id"] == obs_id and outputs[2]["call_id"] == "call_1"
    assert outputs[3]["recalls"][0]["payload"] == CONTENT[:len(outputs[3]["recalls"][0]["payload"])]
    code, out, _ = run(capfd, "inspect", str(path))
    assert code == 0 and "1 observation," in out  # h72: was "1 observations"


def test_verify_beside_a_writer_folds_the_rows_the_state_was_opened_from(
        store_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Review h24 F5: --verify opened the store a second time and compared folds of different rows while a writer
    appended (every run during writing: 'DIFFERS FROM', exit 1, a false alarm of damage). Now it folds rows
    1 .. the opened state's row again."""
    stop = threading.Event()

    def write() -> None:
        with DurableStore.open(store_path) as writer:
            while not stop.is_set():
                writer.append(AgentTurn("busy", "echo still writing"))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.3)
        results = [run(capfd, "inspect", str(store_path), "--verify") for _ in range(5)]
    finally:
        stop.set()
        writer.join()
    assert [code for code, _, _ in results] == [0] * 5, results
    assert all("equals the state opened" in out for _, out, _ in results), results
    rows = [int(out.split("the fold of all ")[1].split()[0]) for _, out, _ in results]
    assert rows == sorted(rows) and rows[-1] > rows[0], rows  # the writer went on meanwhile


def test_an_event_whose_row_replay_could_not_read_is_refused_and_nothing_is_stored(store_path: Path) -> None:
    """Review h24 F6: an output of 6,000,000 control characters was stored as a row of 36,000,064 bytes (each one
    written \\u0001), and the store's export stopped arc-ref replay (a line over 32 MiB, exit 3). Now the event is
    refused, EventTooLarge, and the store is as it was."""
    with DurableStore.open(store_path) as store:
        before = (store.seq, store.state)
        with pytest.raises(EventTooLarge, match="over the 33,554,432 bytes arc-ref replay reads"):
            store.append(Observe("dump", "\x01" * 6_000_000))
        assert (store.seq, store.state) == before
        fits = store.append(Observe("dump", "\x01" * 5_000_000))  # a row of 30,000,058 bytes: stored
    with DurableStore.open(store_path, readonly=True) as reopened:
        assert reopened.seq == fits.seq and len(next(reopened.events(fits.seq, 1)).line) < 32 * 2**20


def test_a_store_moved_while_open_for_writing_takes_no_more_events(store_path: Path) -> None:
    """Review h24 F14: a writer went on acknowledging after its file was renamed (its log left under the old name),
    and the store then opened under neither name. Now it refuses to write; moved back, every acknowledged event is
    there."""
    moved = store_path.with_name("moved.arc")
    with DurableStore.open(store_path) as store:
        kept = store.append(Observe("echo", "before the move"))
        store_path.rename(moved)
        with pytest.raises(StoreError, match="was moved or removed while this process had it open"):
            store.append(Observe("echo", "after the move"))
        moved.rename(store_path)
    with DurableStore.open(store_path, readonly=True) as reopened:
        assert reopened.seq == kept.seq and reopened.state.records[-1].content == "before the move"


def test_inspect_shows_control_characters_escaped_and_keeps_the_stored_bytes(tmp_path: Path,
                                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """Review h24 (nit N-f): `inspect --view` wrote a tool output's escape sequences raw to the terminal (ESC, BEL,
    the C1 CSI U+009B reach --catalog too, DEL and C1 the JSON lines of --events, the overview and --record's
    metadata). The view and the catalog show them as \\xNN (newline and tab stay), the JSON lines as \\u00NN (the
    same JSON value); --record's content and export still give the stored bytes exactly."""
    hostile = "red \x1b[31mRED\x1b[0m bell \x07 csi \x9b2J cr \r del \x7f\ttab\nnext line"
    path = tmp_path / "hostile.arc"
    with DurableStore.create(path, preset("minimal", capacity=20)) as store:
        store.append(Observe("\x9b2J\x1b]0;title\x07", hostile, 0))
        obs_id = store.state.records[0].obs_id
    for argv in (["--view"], ["--catalog"], ["--events", "--full"], [], ["--record", obs_id]):
        code, out, err = run(capfd, "inspect", str(path), *argv)
        assert code == 0 and err == ""
        if argv[:1] == ["--record"]:
            out = out.partition("\n")[0] + "\n"  # the metadata line; the content after it is exact (below)
        raw = {char for char in out if (ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F) and char not in "\n\t"}
        assert raw == set(), (argv, raw)
        if argv[:1] in (["--view"], ["--catalog"]):
            assert "\\x1b" in out and "\\x9b" in out, argv
    code, out, _ = run(capfd, "inspect", str(path), "--events", "--full", "--from", "2")
    assert json.loads(out.split(None, 2)[2]) == {"op": "observe", "action": "\x9b2J\x1b]0;title\x07",
                                                       "observation": hostile, "returncode": 0}  # the same value
    code, out, _ = run(capfd, "inspect", str(path), "--view")
    assert "red \\x1b[31mRED\\x1b[0m bell \\x07 csi \\x9b2J cr \\r del \\x7f\ttab\nnext line" in out
    code, out, _ = run(capfd, "inspect", str(path), "--record", obs_id)
    assert code == 0 and out.partition("\n")[2] == hostile  # the stored bytes, exactly
    code, out, _ = run(capfd, "export", str(path))
    assert code == 0 and json.loads(out.splitlines()[1])["observation"] == hostile


def test_readers_leave_no_wal_or_shm_beside_a_store_that_had_none(store_path: Path,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """Review h24 (nit N-c): inspect and export of a cleanly closed store left an empty -wal and a -shm where there
    were none (a read-only connection cannot checkpoint, so SQLite keeps them). They go when the reader closes; the
    database file is unchanged; while a writer or another reader has the store open they stay (theirs)."""
    def logs() -> list[str]:
        return sorted(path.name for path in store_path.parent.iterdir() if path.name.endswith(("-wal", "-shm")))

    before = store_path.read_bytes()
    assert logs() == []
    for argv in (["inspect"], ["inspect", "--view"], ["inspect", "--verify"], ["inspect", "--events"], ["export"]):
        code, _, err = run(capfd, argv[0], str(store_path), *argv[1:])
        assert (code, err) == (0, "") and logs() == [], argv
    assert store_path.read_bytes() == before
    with DurableStore.open(store_path, readonly=True) as other_reader:
        code, _, _ = run(capfd, "export", str(store_path))
        assert code == 0 and logs() == [f"{store_path.name}-shm", f"{store_path.name}-wal"]  # the other reader's
        assert len(list(other_reader.events())) == 6
    assert logs() == []  # the last reader closed removes them
    with DurableStore.open(store_path) as writer:
        code, _, _ = run(capfd, "inspect", str(store_path))
        assert code == 0 and logs() == [f"{store_path.name}-shm", f"{store_path.name}-wal"]  # the writer's
        writer.append(Observe("ls", "after the reader"))
    with DurableStore.open(store_path, readonly=True) as reopened:
        assert reopened.seq == 7 and reopened.state.records[-1].content == "after the reader"
    assert logs() == []


def test_a_proxy_conversation_s_folder_given_as_the_store_names_its_task_arc(
        store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h30 F12: `inspect DIR/KEY` of an arc-ref proxy --store said only 'no ARC store at ... (a directory)';
    the store is DIR/KEY/task.arc (here the fixture's folder holds one)."""
    for command in (["inspect", str(store_path.parent)], ["export", str(store_path.parent)]):
        assert main(command) == 2
        assert f"its task.arc, {str(store_path)!r}" in capsys.readouterr().err
    (store_path.parent / "empty").mkdir()
    assert main(["inspect", str(store_path.parent / "empty")]) == 2
    assert capsys.readouterr().err.rstrip().endswith("(a directory)")


def test_a_proxy_store_directory_given_as_the_store_names_its_conversations_stores(
        store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h72: `inspect DIR` of the README's `arc-ref proxy --store ./arc-conversations` said only 'no ARC store
    at ... (a directory)'; each conversation's store is DIR/KEY/task.arc (the folder holds hashes.sqlite)."""
    proxy_store = store_path.parent / "arc-conversations"
    (proxy_store / "c436c563884b40a98709dd86b0882588").mkdir(parents=True)
    store_path.rename(proxy_store / "c436c563884b40a98709dd86b0882588" / "task.arc")
    (proxy_store / "hashes.sqlite").write_bytes(b"")
    for command in (["inspect", str(proxy_store)], ["export", str(proxy_store)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "an arc-ref proxy --store: each conversation's store is KEY/task.arc in it (1 here, e.g. " in err, err
        assert repr(str(proxy_store / "c436c563884b40a98709dd86b0882588" / "task.arc")) in err, err
