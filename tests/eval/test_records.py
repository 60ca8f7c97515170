"""RunWriter / RunReader: records written through the schema, resume, and a real SIGKILL crash test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from arc_eval.records import RunReader, RunRecordError, RunWriter, git_commit, package_versions
from arc_eval.schema import SCHEMA, CallRecord, RecordError, TaskRecord
from tests.waiting import scaled_ceiling, wait_until

WORKER = Path(__file__).with_name("records_worker.py")
REPO = Path(__file__).resolve().parents[2]


def manifest(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "command": ["arc-eval", "nih", "--tasks", "3"],
        "task_kind": "nih",
        "methods": ["arc"],
        "seeds": [42],
        "tasks_per_seed": 3,
        "model": "scripted",
        "backend": "scripted",
        "context_limit": 16384,
        "max_tokens": 4096,
        "variants": {"": {}},
        "config": {"force_at_calls": [5, 10, 15]},
    }
    base.update(changes)
    return base


def call_json(task_id: str, index: int, method: str = "arc") -> dict[str, Any]:
    return {
        "variant": "",
        "method": method,
        "model": "scripted",
        "task_kind": "nih",
        "task_id": task_id,
        "seed": 42,
        "call_index": index,
        "purpose": "agent",
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "latency_s": 0.5,
        "finish_reason": "stop",
        "overflow": False,
        "compactions": [],
        "recalls": [],
        "action": "ls",
        "submission": None,
        "reexecution": False,
        "counted_prompt_tokens": 10,
    }


def task_json(task_id: str, calls: int = 2, method: str = "arc") -> dict[str, Any]:
    return {
        "variant": "",
        "method": method,
        "model": "scripted",
        "task_kind": "nih",
        "task_id": task_id,
        "seed": 42,
        "submitted": True,
        "no_answer": False,
        "correct": True,
        "submission": "NEEDLE=A",
        "end": "submitted",
        "error": None,
        "calls": calls,
        "steps": calls,
        "reexecutions": 0,
        "meta": {"noise_lines_per_side": 25},
    }


def call(task_id: str, index: int, method: str = "arc", **changes: Any) -> CallRecord:
    return CallRecord.from_json({**call_json(task_id, index, method), **changes})


def task(task_id: str, calls: int = 2, method: str = "arc", **changes: Any) -> TaskRecord:
    return TaskRecord.from_json({**task_json(task_id, calls, method), **changes})


def write(writer: RunWriter, task_id: str, n: int = 2) -> None:
    writer.write_task([call(task_id, k) for k in range(1, n + 1)], task(task_id, n))


def lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends with a torn line"
    return [json.loads(line) for line in data.splitlines()]


def test_fresh_run_writes_a_complete_manifest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
        assert writer.finished() == {("", "arc", 42, "t1")}
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["schema"] == SCHEMA
    assert stored["command"] == ["arc-eval", "nih", "--tasks", "3"]
    assert stored["versions"]["python"] and "arc-ref" in stored["versions"]
    assert stored["created"].endswith("+00:00")
    assert stored["git_commit"] == git_commit(REPO)
    assert [c["call_index"] for c in lines(run / "calls.jsonl")] == [1, 2]
    assert [t["task_id"] for t in lines(run / "tasks.jsonl")] == ["t1"]
    assert lines(run / "calls.jsonl")[0] == call_json("t1", 1)
    assert lines(run / "tasks.jsonl")[0] == task_json("t1")


def test_existing_run_needs_resume_and_the_same_meaning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    RunWriter(run, manifest(config={"force_at_calls": [5, 10, 15], "base_urls": ["http://a:8000/v1"]}),
              resume=False).close()
    with pytest.raises(RunRecordError, match="already holds a run.*--resume"):
        RunWriter(run, manifest(), resume=False)
    with pytest.raises(RunRecordError, match=r"different run.*\n  tasks_per_seed: stored 3 != requested 4"):
        RunWriter(run, manifest(tasks_per_seed=4), resume=True)
    with pytest.raises(RunRecordError, match=r"config.force_at_calls: stored \[5, 10, 15\] != requested \[5\]"):
        RunWriter(run, manifest(config={"force_at_calls": [5], "base_urls": []}), resume=True)
    # the command line, the server's address, tuples for lists: the same run
    resumed = manifest(command=["arc-eval", "nih", "--no-progress", "--tasks", "3", "--concurrency", "2"],
                       seeds=(42,), config={"force_at_calls": (5, 10, 15), "base_urls": ["http://b:8001/v1"]})
    RunWriter(run, resumed, resume=True).close()
    assert json.loads((run / "manifest.json").read_text())["command"] == ["arc-eval", "nih", "--tasks", "3"]


def test_a_temporary_file_left_by_a_kill_is_cleaned_up(tmp_path: Path) -> None:
    """A kill during the first manifest write leaves manifest.json.tmp (and the lock file) behind."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json.tmp").write_text('{"schema": "arc-eval-run/1", "comm')
    (run / ".lock").write_text("")
    with RunWriter(run, manifest(), resume=True) as writer:
        write(writer, "t1")
    assert sorted(path.name for path in run.iterdir()) == [".lock", "calls.jsonl", "manifest.json", "tasks.jsonl"]
    (run / "tasks.jsonl.tmp").write_text("half a rewrite")  # a kill during a resume's repair
    RunWriter(run, manifest(), resume=True).close()
    assert not list(run.glob("*.tmp"))


def test_non_run_directories_and_bad_manifests_are_refused(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(RunRecordError, match="not empty"):
        RunWriter(tmp_path / "busy", manifest(), resume=True)
    incomplete = manifest()
    del incomplete["methods"]
    with pytest.raises(RunRecordError, match="required field 'methods' is missing"):
        RunWriter(tmp_path / "fresh", incomplete, resume=False)
    with pytest.raises(RunRecordError, match="JSON-serializable"):
        RunWriter(tmp_path / "fresh2", manifest(config={"bad": object()}), resume=False)


def test_one_writer_per_directory(tmp_path: Path) -> None:
    first = RunWriter(tmp_path / "run", manifest(), resume=False)
    try:
        with pytest.raises(RunRecordError, match="another process is writing"):
            RunWriter(tmp_path / "run", manifest(), resume=True)
    finally:
        first.close()
    RunWriter(tmp_path / "run", manifest(), resume=True).close()  # free again after close


def test_write_task_validates_records(tmp_path: Path) -> None:
    with RunWriter(tmp_path / "run", manifest(), resume=False) as writer:
        with pytest.raises(RecordError, match="differs from task key"):
            writer.write_task([call("t2", 1)], task("t1", 1))
        with pytest.raises(RecordError, match="not JSON"):
            writer.write_task([attrs.evolve(call("t1", 1), latency_s=float("nan"))], task("t1", 1))
        with pytest.raises(RecordError, match="'finish_reason' should be one of"):
            writer.write_task([attrs.evolve(call("t1", 1), finish_reason="tool_calls")], task("t1", 1))
        with pytest.raises(RecordError, match="'prompt_tokens' should be an integer >= 0"):
            writer.write_task([attrs.evolve(call("t1", 1), prompt_tokens=-1)], task("t1", 1))
        with pytest.raises(RecordError, match="negation of 'submitted'"):
            writer.write_task([], attrs.evolve(task("t1", 0), no_answer=True))
        with pytest.raises(RecordError, match="'seed' should be an integer"):
            writer.write_task([], attrs.evolve(task("t1", 0), seed="42"))
        with pytest.raises(RecordError, match="does not read back"):
            writer.write_task([attrs.evolve(call("t1", 1), compactions=[])], task("t1", 1))  # a list, not a tuple
        with pytest.raises(RecordError, match="must be exactly 1..calls"):
            writer.write_task([call("t1", 1)], task("t1", 2))
        with pytest.raises(RecordError, match="must be exactly 1..calls"):
            writer.write_task([call("t1", 1), call("t1", 1)], task("t1", 2))
        write(writer, "t1")
        with pytest.raises(RunRecordError, match="already recorded"):
            write(writer, "t1")
    with pytest.raises(RunRecordError, match="closed"):
        write(writer, "t9")
    # nothing from the refused records reached the files
    assert [c["task_id"] for c in lines(tmp_path / "run" / "calls.jsonl")] == ["t1", "t1"]


def test_resume_drops_torn_lines_and_calls_of_unfinished_tasks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
        write(writer, "t2", 3)
    with (run / "calls.jsonl").open("a") as calls:  # t3 was interrupted after two calls ...
        calls.write(json.dumps(call_json("t3", 1)) + "\n" + json.dumps(call_json("t3", 2)) + "\n")
        calls.write('{"variant": "", "meth')  # ... in the middle of its third
    with (run / "tasks.jsonl").open("a") as tasks:
        tasks.write('{"variant": "", "method": "arc", "task_id": "t3"')
    with RunWriter(run, manifest(), resume=True) as writer:
        assert writer.finished() == {("", "arc", 42, "t1"), ("", "arc", 42, "t2")}
        assert writer.removed_call_lines == 2 and writer.dropped_torn_lines == 2
        assert writer.resumed_tasks == 2
        write(writer, "t3", 4)
    assert [t["task_id"] for t in lines(run / "tasks.jsonl")] == ["t1", "t2", "t3"]
    written = [(c["task_id"], c["call_index"]) for c in lines(run / "calls.jsonl")]
    assert written == [("t1", 1), ("t1", 2), ("t2", 1), ("t2", 2), ("t2", 3)] + [
        ("t3", k) for k in range(1, 5)
    ]
    assert not list(run.glob("*.tmp"))


def test_resume_keeps_only_tasks_whose_calls_are_all_on_disk(tmp_path: Path) -> None:
    """A power loss may persist a task line but not its calls; such a task is redone."""
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False, fsync=False) as writer:
        write(writer, "t1", 2)
        write(writer, "t2", 3)
        write(writer, "t3", 2)
    kept = [line for line in (run / "calls.jsonl").read_text().splitlines(keepends=True)]
    # lose t2's last call line (the calls file was behind the tasks file)
    (run / "calls.jsonl").write_text("".join(kept[:4] + kept[5:]))
    with RunWriter(run, manifest(), resume=True) as writer:
        assert writer.finished() == {("", "arc", 42, "t1"), ("", "arc", 42, "t3")}
        assert writer.incomplete_tasks == 1 and writer.removed_call_lines == 2
        write(writer, "t2", 3)
    assert [t["task_id"] for t in lines(run / "tasks.jsonl")] == ["t1", "t3", "t2"]
    written = [(c["task_id"], c["call_index"]) for c in lines(run / "calls.jsonl")]
    assert written == [("t1", 1), ("t1", 2), ("t3", 1), ("t3", 2), ("t2", 1), ("t2", 2), ("t2", 3)]


def test_a_damaged_middle_line_is_reported_not_guessed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
        write(writer, "t2")
    data = (run / "tasks.jsonl").read_text().splitlines()
    (run / "tasks.jsonl").write_text("garbage\n" + data[1] + "\n")
    with pytest.raises(RunRecordError, match="tasks.jsonl:1: not valid JSON.*damaged in the middle"):
        RunWriter(run, manifest(), resume=True)


def test_reader_skips_a_torn_tail_and_calls_of_unfinished_tasks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
    with (run / "calls.jsonl").open("a") as calls:
        calls.write(json.dumps(call_json("t2", 1)) + "\n" + '{"torn')
    reader = RunReader(run)
    assert reader.manifest.schema == SCHEMA
    assert [t.task_id for t in reader.tasks()] == ["t1"]
    assert [c.task_id for c in reader.calls()] == ["t1", "t1"]
    assert [c.task_id for c in reader.calls(finished_only=False)] == ["t1", "t1", "t2"]
    assert any("calls.jsonl:4: torn last line dropped" in note for note in reader.notes)
    with pytest.raises(RunRecordError, match="not a run directory"):
        RunReader(tmp_path)


def test_helpers() -> None:
    versions = package_versions()
    assert versions["python"].count(".") == 2 and versions["arc-ref"] == "0.1.0"
    commit = git_commit(REPO)
    assert commit is None or len(commit) == 40
    assert git_commit("/") is None


def run_worker(run_dir: Path, tasks: int, sleep_s: float, durability: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(run_dir), str(tasks), str(sleep_s), durability],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_sigkill_in_the_middle_of_a_run_then_resume(tmp_path: Path, durability: str) -> None:
    """A real crash: no finished task is redone or lost, no record duplicated or torn."""
    run = tmp_path / "run"
    tasks_per_method = 300
    total = 2 * tasks_per_method
    worker = run_worker(run, tasks_per_method, 0.002, durability)
    tasks_file = run / "tasks.jsonl"
    wait_until(lambda: tasks_file.exists() and tasks_file.read_bytes().count(b"\n") >= 60, worker, "records worker",
               poll_s=0.005)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    assert worker.returncode == -signal.SIGKILL
    raw_before = tasks_file.read_bytes()
    finished_before = [json.loads(line) for line in raw_before.split(b"\n")[:-1]]
    assert 60 <= len(finished_before) < total, "the kill must land in the middle of the run"
    # Whatever the kill left, make the worst case certain: a torn task line and orphan calls.
    with tasks_file.open("ab") as handle:
        handle.write(b'{"variant":"","method":"arc","mod')
    with (run / "calls.jsonl").open("ab") as handle:
        handle.write(
            b'{"variant":"","method":"arc","model":"scripted","task_kind":"nih",'
            b'"task_id":"nih-s42-9999","seed":42,"call_index":1}\n{"torn'
        )

    second = run_worker(run, tasks_per_method, 0.0, durability)
    out, err = second.communicate(timeout=scaled_ceiling(120))
    assert second.returncode == 0, err
    assert out.startswith(f"resumed {len(finished_before)} ")

    tasks = lines(tasks_file)
    keys = [(t["variant"], t["method"], t["seed"], t["task_id"]) for t in tasks]
    assert len(keys) == len(set(keys)) == total  # nothing lost, nothing twice
    # tasks finished before the kill were kept as written, not redone by the second process
    assert tasks[: len(finished_before)] == finished_before
    assert {t["meta"]["pid"] for t in tasks[: len(finished_before)]} == {worker.pid}
    assert {t["meta"]["pid"] for t in tasks[len(finished_before) :]} == {second.pid}
    calls = lines(run / "calls.jsonl")
    per_task: dict[tuple[str, str], list[int]] = {}
    for record in calls:
        per_task.setdefault((record["method"], record["task_id"]), []).append(record["call_index"])
    assert set(per_task) == {(t["method"], t["task_id"]) for t in tasks}
    for record in tasks:
        assert per_task[(record["method"], record["task_id"])] == list(
            range(1, record["calls"] + 1)
        )


def test_a_garbled_last_line_before_a_torn_tail_is_torn_too(tmp_path: Path) -> None:
    """A kill mid-write, then more appended to the partial line: both the glued line and the tail are torn."""
    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
    with (run / "calls.jsonl").open("a") as calls:
        calls.write('{"variant": "", "meth' + json.dumps(call_json("t2", 1)) + "\n" + '{"torn')
    reader = RunReader(run)
    assert [c.task_id for c in reader.calls(finished_only=False)] == ["t1", "t1"]
    assert sum("torn last line dropped" in note for note in reader.notes) == 2
    with RunWriter(run, manifest(), resume=True) as writer:
        assert writer.dropped_torn_lines == 2 and writer.finished() == {("", "arc", 42, "t1")}
    assert [c["task_id"] for c in lines(run / "calls.jsonl")] == ["t1", "t1"]


def test_a_run_is_resumed_only_by_the_code_that_made_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Review h10 MAJOR-2: the manifest named HEAD only, and a resume with the agent's code changed wrote a table of
    88 tasks of one code and 12 of another. The manifest now says whether the tree was modified (a digest), and a
    resume whose commit, tree or package versions differ is refused unless ARC_EVAL_RESUME_ANY_CODE=1."""
    from arc_eval import records

    run = tmp_path / "run"
    with RunWriter(run, manifest(), resume=False) as writer:
        write(writer, "t1")
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["git_tree"] == records.git_tree(REPO) and stored["git_tree"] is not None
    RunWriter(run, manifest(), resume=True).close()  # the same code: resumed
    monkeypatch.setattr(records, "git_tree", lambda repo: "modified sha256:" + "0" * 64)
    with pytest.raises(RunRecordError, match="was run by other code") as refused:
        RunWriter(run, manifest(), resume=True)
    assert "git_tree: the run" in str(refused.value) and records.RESUME_ANY_CODE in str(refused.value)
    monkeypatch.undo()
    monkeypatch.setattr(records, "package_versions", lambda: {**stored["versions"], "httpx": "0.0.1"})
    with pytest.raises(RunRecordError, match="httpx: the run"):
        RunWriter(run, manifest(), resume=True)
    monkeypatch.setattr(records, "package_versions", lambda: {**stored["versions"], "platform": "another kernel"})
    RunWriter(run, manifest(), resume=True).close()  # review h13 MINOR-4: a reboot is no other code
    monkeypatch.undo()
    for key, value in (("diff.noprefix", "true"), ("color.diff", "always"), ("diff.mnemonicPrefix", "true")):
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")  # review h13 MINOR-5: the user's git settings change nothing
        monkeypatch.setenv("GIT_CONFIG_KEY_0", key)
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", value)
        assert records.git_tree(REPO) == stored["git_tree"]
    monkeypatch.undo()
    monkeypatch.setattr(records, "package_versions", lambda: {**stored["versions"], "httpx": "0.0.1"})
    monkeypatch.setenv(records.RESUME_ANY_CODE, "1")
    with RunWriter(run, manifest(), resume=True) as writer:
        assert writer.finished() == {("", "arc", 42, "t1")}
    assert "resumed by other code than made it" in capsys.readouterr().err
    (tmp_path / "repo").mkdir()
    assert records.git_tree(tmp_path / "repo") is None  # no repository: no claim
