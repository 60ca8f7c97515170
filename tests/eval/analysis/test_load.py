"""The loader follows eval/RECORDS.md and turns every damage into a message naming file, line, field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from arc_eval.analysis.errors import AnalysisError
from arc_eval.analysis.load import load_run, load_runs
from arc_eval.schema import CallRecord, RecordError

from .synthetic_runs import RunSpec, append_interrupted_task, edit_task_line, rewrite_line, tear_last_line, write_run


def test_clean_run_loads_every_task_and_its_calls_in_order(tmp_path: Path) -> None:
    truth = write_run(tmp_path / "r", RunSpec(seeds=(1, 2), tasks_per_seed=3))
    run = load_run(tmp_path / "r")
    assert len(run.tasks) == len(truth) == 2 * 3 * 6
    assert run.notes == ()
    assert run.incomplete_tasks == 0
    for task, line in zip(run.tasks, truth):
        assert (task.method, task.seed, task.task_id, task.correct, task.no_answer) == (
            line["method"],
            line["seed"],
            line["task_id"],
            line["correct"],
            line["no_answer"],
        )
        calls = run.calls[task.key]
        assert len(calls) == line["calls"]
        assert [c.call_index for c in calls] == list(range(1, line["calls"] + 1))
    assert run.manifest.context_limit == 16384 and run.manifest.seeds == (1, 2)


def test_torn_last_line_is_dropped_with_a_note(nih_run: Path) -> None:
    n = len(load_run(nih_run).tasks)
    tear_last_line(nih_run / "tasks.jsonl")
    tear_last_line(nih_run / "calls.jsonl", '{"variant": "", "method": "arc", "model": "Qw')
    run = load_run(nih_run)
    assert len(run.tasks) == n
    torn = [note for note in run.notes if "torn last line" in note]
    assert len(torn) == 2
    assert any("tasks.jsonl" in note for note in torn) and any("calls.jsonl" in note for note in torn)


def test_malformed_middle_line_is_an_error_naming_file_and_line(nih_run: Path) -> None:
    rewrite_line(nih_run / "tasks.jsonl", 3, '{"variant": "", broken')
    with pytest.raises(AnalysisError, match=r"tasks\.jsonl:3: not valid JSON"):
        load_run(nih_run)


def test_missing_field_names_file_line_and_field(nih_run: Path) -> None:
    edit_task_line(nih_run / "tasks.jsonl", 5, correct=...)
    with pytest.raises(AnalysisError, match=r"tasks\.jsonl:5: required field 'correct' is missing"):
        load_run(nih_run)


def test_wrong_type_names_the_field(nih_run: Path) -> None:
    edit_task_line(nih_run / "calls.jsonl", 2, prompt_tokens="many")
    with pytest.raises(AnalysisError, match=r"calls\.jsonl:2: field 'prompt_tokens' should be an integer"):
        load_run(nih_run)


def test_bool_is_not_accepted_as_integer(nih_run: Path) -> None:
    edit_task_line(nih_run / "calls.jsonl", 1, completion_tokens=True)
    with pytest.raises(AnalysisError, match="completion_tokens"):
        load_run(nih_run)


def test_negative_token_count_is_rejected(nih_run: Path) -> None:
    edit_task_line(nih_run / "calls.jsonl", 1, prompt_tokens=-3)
    with pytest.raises(AnalysisError, match=r"'prompt_tokens' should be an integer >= 0"):
        load_run(nih_run)


def test_inconsistent_outcome_flags_are_rejected(nih_run: Path) -> None:
    first = json.loads((nih_run / "tasks.jsonl").read_text().split("\n")[0])
    edit_task_line(nih_run / "tasks.jsonl", 1, no_answer=first["submitted"])
    with pytest.raises(AnalysisError, match="negation of 'submitted'"):
        load_run(nih_run)


def test_missing_tasks_file_is_named(nih_run: Path) -> None:
    (nih_run / "tasks.jsonl").unlink()
    with pytest.raises(
        AnalysisError, match=r"tasks\.jsonl is missing: no finished task.*interrupted before its first task"
    ):
        load_run(nih_run)


def test_missing_calls_file_is_named(nih_run: Path) -> None:
    (nih_run / "calls.jsonl").unlink()
    with pytest.raises(AnalysisError, match=r"calls\.jsonl is missing"):
        load_run(nih_run)


def test_missing_manifest_and_directory(tmp_path: Path, nih_run: Path) -> None:
    (nih_run / "manifest.json").unlink()
    with pytest.raises(AnalysisError, match=r"manifest\.json is missing"):
        load_run(nih_run)
    with pytest.raises(AnalysisError, match="no such directory"):
        load_run(tmp_path / "nowhere")


def test_wrong_schema_is_refused(nih_run: Path) -> None:
    manifest = json.loads((nih_run / "manifest.json").read_text())
    manifest["schema"] = "arc-eval-run/9"
    (nih_run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(AnalysisError, match="arc-eval-run/9"):
        load_run(nih_run)


def test_interrupted_task_is_skipped_and_counted(nih_run: Path) -> None:
    n = len(load_run(nih_run).tasks)
    append_interrupted_task(nih_run, n_calls=4)
    run = load_run(nih_run)
    assert len(run.tasks) == n
    assert (run.incomplete_tasks, run.incomplete_calls) == (1, 4)
    assert any("1 incomplete task(s) skipped (4 call line(s)" in note for note in run.notes)


def test_duplicate_task_line_is_an_error(nih_run: Path) -> None:
    lines = (nih_run / "tasks.jsonl").read_text().split("\n")
    (nih_run / "tasks.jsonl").write_text("\n".join([lines[0], *lines]))
    with pytest.raises(AnalysisError, match=r"tasks\.jsonl:2: duplicate task line .* line 1"):
        load_run(nih_run)


def test_call_count_mismatch_is_noted(nih_run: Path) -> None:
    edit_task_line(nih_run / "tasks.jsonl", 1, calls=99)
    run = load_run(nih_run)
    assert any("says 99 calls but calls.jsonl holds" in note for note in run.notes)


def test_same_run_twice_is_an_error_naming_both_dirs(tmp_path: Path, nih_run: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(nih_run, copy)
    with pytest.raises(AnalysisError, match=r"nih and .*copy are two nih runs .* same configuration \(one run recorded"):
        load_runs([nih_run, copy])
    with pytest.raises(AnalysisError, match="is given twice; give each run directory once"):
        load_runs([nih_run, nih_run])


def test_two_runs_of_one_kind_that_differ_are_refused_at_once_naming_the_difference(tmp_path: Path) -> None:
    """Issue 19: `arc-eval report runs/nih-*` over two runs of the same kind said "give each run directory once"
    after reading every record; the manifests alone now say how the runs differ, before any record is read."""
    write_run(tmp_path / "nih-a", RunSpec(tasks_per_seed=2, seeds=(42,)))
    write_run(tmp_path / "nih-b", RunSpec(tasks_per_seed=3, seeds=(42, 82)))
    (tmp_path / "nih-b" / "tasks.jsonl").write_text("not json\n" * 3)  # never read: the manifests decide
    with pytest.raises(AnalysisError) as refused:
        load_runs([tmp_path / "nih-a", tmp_path / "nih-b"])
    message = str(refused.value)
    assert "two nih runs of Qwen/Qwen3-8B with seed(s) 42" in message
    assert "differ in seeds ([42] vs [42, 82]), tasks_per_seed (2 vs 3)" in message
    assert f"arc-eval report {tmp_path / 'nih-a'}" in message


def test_runs_of_one_kind_with_other_seeds_combine(tmp_path: Path) -> None:
    a = write_run(tmp_path / "nih-a", RunSpec(tasks_per_seed=2, seeds=(42,)))
    b = write_run(tmp_path / "nih-b", RunSpec(tasks_per_seed=2, seeds=(82,)))
    assert len(load_runs([tmp_path / "nih-a", tmp_path / "nih-b"]).tasks) == len(a) + len(b)


def test_runs_of_two_models_combine(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", RunSpec(model="Qwen/Qwen3-8B", tasks_per_seed=2))
    b = write_run(tmp_path / "b", RunSpec(model="Qwen/Qwen3-32B", context_limit=32768, tasks_per_seed=2))
    data = load_runs([tmp_path / "a", tmp_path / "b"])
    assert len(data.tasks) == len(a) + len(b)
    assert {t.model for t in data.tasks} == {"Qwen/Qwen3-8B", "Qwen/Qwen3-32B"}
    assert data.manifests_for("", "Qwen/Qwen3-32B", "nih")[0].context_limit == 32768


def test_longbench_manifest_may_leave_tasks_per_seed_null(tmp_path: Path) -> None:
    """The runner writes null for LongBench without --limit ("every item of the data file")."""
    write_run(tmp_path / "lb", RunSpec(task_kind="longbench", tasks_per_seed=2))
    manifest = json.loads((tmp_path / "lb" / "manifest.json").read_text())
    manifest["tasks_per_seed"] = None
    (tmp_path / "lb" / "manifest.json").write_text(json.dumps(manifest))
    assert load_run(tmp_path / "lb").manifest.tasks_per_seed is None


def test_call_lines_read_through_the_schema(nih_run: Path) -> None:
    lines = [json.loads(line) for line in (nih_run / "calls.jsonl").read_text().splitlines()]
    lines[0]["compactions"] = [{"reason": "forced"}, {"reason": "reactive"}]
    lines[1]["latency_s"] = 2
    for i, obj in enumerate(lines, start=1):
        call = CallRecord.from_json(obj, f"x:{i}")
        assert call.to_json() == {**obj, "latency_s": float(obj["latency_s"])}
    assert [c.reason for c in CallRecord.from_json(lines[0]).compactions] == ["forced", "reactive"]
    for broken in ({**lines[0], "seed": True}, {**lines[0], "purpose": ["agent"]}, {**lines[0], "recalls": [1]}):
        with pytest.raises(RecordError):
            CallRecord.from_json(broken, "x")
