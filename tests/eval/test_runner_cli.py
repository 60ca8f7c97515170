"""The runner and the ``arc-eval`` CLI end to end: tables, records, resume, ablations, HTTP backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arc_eval.cli import build_parser, default_run_dir, main, spec_from_args
from arc_eval.ablations import ABLATIONS
from arc_eval.run_spec import RunSpec
from proofs_check.shared_data import shared_data_dir
from arc_eval.runner import run
from tests.eval.helpers import tool_model_dir
from tests.waiting import scaled_ceiling, wait_until

REPO = Path(__file__).resolve().parents[2]
SAMPLE = shared_data_dir() / "longbench_v2_hard_sample"
BASELINES = "full_context,sliding_window,llm_summary,structured_state,rag_memory"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nih", "--tasks", "0"], "expected an integer from 1 to 100000"),
        (["nih", "--methods", "full_context,bogus"], "unknown method"),
        (["nih", "--seeds", "x"], "expected an integer"),
        (["nih", "--backend", "openai"], "--model"),
        (["nih", "--backend", "openai", "--model", "m"], "--base-url"),
        (["nih", "--base-url", "http://x"], "--base-url is for --backend openai"),
        (["nih", "--backend", "openai", "--model", "m", "--base-url", "localhost:8000/v1"],
         "argument --base-url: expected an http:// or https:// URL such as http://localhost:8000/v1, "
         "got 'localhost:8000/v1'"),
        (["nih", "--backend", "openai", "--model", "m", "--base-url", "ftp://host/v1"],
         "expected an http:// or https:// URL"),
        (["nih", "--backend", "openai", "--model", "m", "--base-url", "http://:8000/v1"], "the URL 'http://:8000/v1' names no host"),
        (["nih", "--backend", "openai", "--model", "m", "--base-url", "http://host:99999/v1"],
         "port 99999 is outside 0-65535"),
        (["nih", "--seeds", "42", "42"], "--seeds lists 42 more than once"),
        (["nih", "--tool-calling"], "--tool-calling counts the tool listing"),
        (["nih", "--chat-format", "template"], "--chat-format template renders the served model's own chat template"),
        # review h72: a path to nothing was an "unknown tokenizer" with a list of names, not a missing directory
        (["nih", "--tokenizer", "/nonexistent-model-dir/"], "'/nonexistent-model-dir/' is not a directory"),
        (["nih", "--tokenizer", "../shared-absent/qwen3-tokenizer"], "'../shared-absent/qwen3-tokenizer' is not a directory"),
        (["nih", "--max-tokens", "20000"], "must be below --context-limit"),
        (["nih", "--tokenizer", "nonsense"], "unknown tokenizer"),
        (["nih", "--tokenizer-json", "/nonexistent/tokenizer.json"], "cannot load tokenizer.json"),
        (["longbench"], "--data"),
        (["longbench", "--data", "/nonexistent/data.json"], "does not exist"),
        (["ablation", "noise-lines", "--task", "longbench", "--data", "x"], "--task nih"),
        (["ablation", "bogus"], "invalid choice"),
        (["nih", "--agent", "clever"], "invalid choice: 'clever'"),
        (["nih", "--nih-layout", "odd"], "invalid choice: 'odd'"),
        (["longbench", "--data", "x", "--difficulty", "medium"], "invalid choice: 'medium'"),
        (["frobnicate"], "invalid choice"),
        ([], "COMMAND"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    if argv and argv[0] in ("nih", "longbench", "ablation") and len(argv) > 1 and "bogus" not in argv:
        argv = [*argv, "--out", str(tmp_path / "run"), "--no-progress", "--methods", "sliding_window"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["longbench", "--data", "x", "--tasks", "1"],
         "arc-eval longbench: unrecognized arguments: --tasks 1 (arc-eval longbench takes its count as --limit N;"
         " see arc-eval longbench --help)"),
        (["nih", "--limit", "3"],
         "arc-eval nih: unrecognized arguments: --limit 3 (arc-eval nih takes its count as --tasks N;"
         " see arc-eval nih --help)"),
        (["nih", "--bogus", "1", "--seeds", "42"], "arc-eval nih: unrecognized arguments: --bogus 1 (see arc-eval nih --help)"),
        (["bench", "--bogus"], "arc-eval bench: unrecognized arguments: --bogus (see arc-eval bench --help)"),
        (["ablation", "noise-lines", "--bogus"],
         "arc-eval ablation: unrecognized arguments: --bogus (see arc-eval ablation --help)"),
    ],
)
def test_an_option_a_command_does_not_take_is_its_usage_error(argv: list[str], line: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Review h43 (NIT 3): `arc-eval longbench --tasks 1` said `arc-eval: unrecognized arguments: --tasks 1 (see
    arc-eval --help)`, as if arc-eval itself took no --tasks (argparse hands a subcommand's unknown arguments to
    the top parser); now the command's own usage error, naming its count flag when another task's was given."""
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nih", "--context-limit", "4096", "--max-tokens", "512"],
         "method arc cannot run with these settings: summary_budget would be"),
        (["ablation", "recall-budget", "--context-limit", "8192", "--max-tokens", "2048"],
         "method arc (variant recall=32k/16k) cannot run with these settings"),
    ],
)
def test_a_method_that_refuses_the_settings_stops_the_run_before_anything_is_recorded(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main([*argv, "--tasks", "2", "--seeds", "1", "--out", str(out), "--no-progress", "--rag-retriever", "bm25"]) == 2
    err = capsys.readouterr().err
    assert message in err and "raise --context-limit" in err and "Traceback" not in err
    assert not out.exists()


def test_small_nih_run_prints_the_table_and_writes_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "2", "--seeds", "42", "--methods", BASELINES, "--out", str(out),
            "--nih-layout", "paper", "--rag-retriever", "bm25", "--no-progress", "--concurrency", "3"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    for name in BASELINES.split(","):
        assert name in table
    assert "pass/attempts" in table and "0/2" in table
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["methods"] == BASELINES.split(",") and manifest["config"]["rag_retriever"] == "bm25"
    assert manifest["command"][:2] == ["arc-eval", "nih"] and manifest["config"]["force_at_calls"] == [5, 10, 15]
    tasks = lines(out / "tasks.jsonl")
    calls = lines(out / "calls.jsonl")
    assert len(tasks) == 10 and {task["end"] for task in tasks} <= {"submitted", "overflow", "error", "step_limit"}
    for task in tasks:
        own = [call for call in calls if (call["method"], call["task_id"]) == (task["method"], task["task_id"])]
        assert [call["call_index"] for call in own] == list(range(1, task["calls"] + 1))
    full = [task for task in tasks if task["method"] == "full_context"]
    assert all(task["end"] == "overflow" and task["no_answer"] for task in full)
    assert main(argv) == 0  # the same command again: everything is finished, nothing is redone
    assert len(lines(out / "tasks.jsonl")) == 10


def test_arc_keeps_every_needle_recoverable_and_a_window_loses_it(tmp_path: Path) -> None:
    import io

    spec = RunSpec.build(task_kind="nih", methods=("sliding_window", "llm_summary", "arc"), seeds=(82,), out=tmp_path / "r",
                   tasks_per_seed=3, progress=False)
    run(spec, out=io.StringIO())
    tasks = lines(tmp_path / "r" / "tasks.jsonl")
    calls = lines(tmp_path / "r" / "calls.jsonl")
    arc = [task for task in tasks if task["method"] == "arc"]
    assert len(arc) == 3 and all(task["correct"] and task["reexecutions"] == 0 for task in arc)
    recalled = [call for call in calls if call["method"] == "arc" and call["recalls"]]
    assert recalled and all(call["action"].startswith("_recall") for call in recalled)
    assert not any(task["correct"] for task in tasks if task["method"] == "sliding_window")
    # the fair scripted agent copies the banner's lines into llm_summary's summary as the request asks
    assert all(task["correct"] for task in tasks if task["method"] == "llm_summary")


def test_a_killed_run_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "120", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
            "--no-progress", "--concurrency", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "arc_eval.cli", *argv], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tasks_path = out / "tasks.jsonl"
    wait_until(lambda: tasks_path.exists() and tasks_path.read_text().count("\n") >= 8, process, "arc-eval nih")
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = tasks_path.read_text().splitlines()
    assert 0 < len(before) < 120, "the run should have been killed in the middle"
    with (out / "calls.jsonl").open("a") as handle:
        handle.write('{"variant": "", "method": "sliding_window", "task_id": "torn')  # a write cut by the crash
    assert main(argv) == 0
    tasks = lines(tasks_path)
    keys = [(task["method"], task["seed"], task["task_id"]) for task in tasks]
    assert len(keys) == len(set(keys)) == 120
    assert tasks_path.read_text().splitlines()[: len(before)] == before  # finished tasks kept as they were
    calls = lines(out / "calls.jsonl")
    per_task: dict[str, list[int]] = {}
    for call in calls:
        per_task.setdefault(call["task_id"], []).append(call["call_index"])
    assert all(indexes == list(range(1, len(indexes) + 1)) for indexes in per_task.values())
    assert sum(task["calls"] for task in tasks) == len(calls)


def test_ctrl_c_stops_between_tasks_with_status_130(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "150", "--seeds", "42", "--methods", "sliding_window", "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "arc_eval.cli", *argv], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tasks_path = out / "tasks.jsonl"
    wait_until(lambda: tasks_path.exists() and tasks_path.read_text().count("\n") >= 5, process, "arc-eval nih")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=scaled_ceiling(60))
    assert process.returncode == 130 and "rerun the same command" in err and "Traceback" not in err
    finished = lines(tasks_path)
    assert 0 < len(finished) < 150


def test_an_unavailable_backend_stops_the_run_resumably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import arc_eval.execute
    from arc_eval.agent.scripted import ScriptedBackend
    from arc_eval.types import BackendUnavailable, ChatReply, ChatRequest

    class FailingAfter(ScriptedBackend):
        """The embedded backend, until the server 'goes away' at the 60th call."""

        async def complete(self, request: ChatRequest) -> ChatReply:
            if self.calls >= 60:
                raise BackendUnavailable("503 Service Unavailable after 6 retries")
            return await super().complete(request)

    monkeypatch.setattr(arc_eval.execute, "make_backend", lambda spec, method=None: FailingAfter())
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "10", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
            "--no-progress", "--concurrency", "1"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "the server is unavailable: 503" in err and "Rerun the same command" in err
    finished = lines(out / "tasks.jsonl")
    assert 0 < len(finished) < 10 and not any("503" in (task["error"] or "") for task in finished)
    monkeypatch.undo()
    assert main(argv) == 0
    assert len(lines(out / "tasks.jsonl")) == 10


def test_resume_refuses_a_different_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    base = ["nih", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window", "--out", str(out), "--no-progress"]
    assert main(base) == 0
    assert main([*base[:2], "2", *base[3:]]) == 2
    assert "cannot be resumed" in capsys.readouterr().err
    assert main([*base, "--no-resume"]) == 2


def test_a_finished_run_opened_by_other_code_prints_its_table_and_one_left_to_run_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h72 F1: the README's first command run again after its second (which installs scipy and statsmodels
    into the same venv) was refused, 'was run by other code', exit 2, with all its tasks finished. A finished run
    now prints its table with a note naming the differences; a run with tasks left is still refused."""
    from arc_eval import records

    real_versions = records.package_versions
    out = tmp_path / "run"
    base = ["nih", "--tasks", "2", "--seeds", "42", "--methods", "sliding_window", "--out", str(out), "--no-progress"]
    assert main(base) == 0
    table = capsys.readouterr().out
    monkeypatch.setattr(records, "package_versions", lambda: {**real_versions(), "scipy": "9.9.9"})
    assert main(base) == 0
    shown = capsys.readouterr()
    assert shown.out == table and "nothing is left to run" in shown.err
    assert f"scipy: the run {real_versions().get('scipy')!r}, now '9.9.9'" in shown.err
    # the same run with a task left (the last task line gone, as a kill would leave it) is refused
    tasks = (out / "tasks.jsonl").read_text().splitlines(keepends=True)
    (out / "tasks.jsonl").write_text("".join(tasks[:-1]))
    calls_before = (out / "calls.jsonl").read_bytes()
    assert main(base) == 2
    assert "was run by other code" in capsys.readouterr().err
    assert (out / "calls.jsonl").read_bytes() == calls_before  # refused, the run left as it was (its last task's
    # call lines, which a resume drops, still there)
    monkeypatch.setattr(records, "package_versions", real_versions)
    assert main(base) == 0  # the code that made it finishes it


def default_dir(argv: list[str]) -> Path:
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args, argv)
    assert spec.out == default_run_dir(spec)
    return Path(spec.out)


def test_default_run_directory_is_named_after_the_run() -> None:
    first = default_dir(["nih", "--tasks", "5", "--seeds", "1", "2"])
    assert first.parent.name == "runs" and first.name.startswith("nih-")
    assert first == default_dir(["nih", "--seeds", "1", "2", "--no-progress", "--tasks", "5", "--resume"])
    assert first == default_dir(["nih", "--concurrency", "3", "--seeds", "1", "2", "--tasks", "5"])
    assert first == default_dir(["nih", "--tasks", "5", "--seeds", "1", "2", "--methods", "all"])
    assert first != default_dir(["nih", "--tasks", "6", "--seeds", "1", "2"])
    assert first != default_dir(["nih", "--tasks", "5", "--seeds", "2", "1"])  # seed order is the run's order


@pytest.mark.parametrize("sweep, methods", [("recall-budget", ["arc"]),
                                            ("force-schedule", ["sliding_window", "llm_summary", "structured_state",
                                                                "rag_memory", "arc"]),
                                            ("noise-lines", ["sliding_window", "llm_summary", "structured_state",
                                                             "rag_memory", "arc"])])
def test_an_ablation_runs_the_paper_s_methods_and_is_named_by_its_sweep(sweep: str, methods: list[str]) -> None:
    """Issue 19: `arc-eval ablation recall-budget` ran all six methods (METHODS.md: arc alone) under runs/nih-*."""
    argv = ["ablation", sweep, "--tasks", "2", "--seeds", "42"]
    spec = spec_from_args(build_parser().parse_args(argv), argv)
    assert list(spec.methods) == methods
    assert Path(spec.out).parent.name == "runs" and Path(spec.out).name.startswith(f"ablation-{sweep}-")
    chosen = [*argv, "--methods", "all"]
    assert len(spec_from_args(build_parser().parse_args(chosen), chosen).methods) == 6  # --methods overrides
    if sweep != "noise-lines":
        longbench = [*argv, "--task", "longbench", "--data", "x"]
        assert Path(spec_from_args(build_parser().parse_args(longbench), longbench).out).name.startswith(
            f"ablation-{sweep}-longbench-")


def test_resume_forgives_what_does_not_change_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    first = ["nih", "--tasks", "3", "--seeds", "42", "--methods", "sliding_window", "--out", "run",
             "--no-progress", "--concurrency", "2"]
    assert main(first) == 0
    finished = (tmp_path / "run" / "tasks.jsonl").read_text()
    capsys.readouterr()
    again = ["nih", "--methods", "sliding_window", "--out", str(tmp_path / "run"), "--seeds", "42", "--tasks", "3",
             "--concurrency", "5"]  # absolute --out, another order, another concurrency, a progress bar
    assert main(again) == 0
    assert "resuming" in capsys.readouterr().err
    assert (tmp_path / "run" / "tasks.jsonl").read_text() == finished  # nothing redone
    another_seed = ["nih", "--methods", "sliding_window", "--out", str(tmp_path / "run"), "--seeds", "43", "--tasks", "3"]
    assert main(another_seed) == 2  # another seed is another run
    assert "seeds: stored [42] != requested [43]" in capsys.readouterr().err


def test_a_leftover_manifest_tmp_does_not_block_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json.tmp").write_text('{"schema": "arc-ev')  # a kill during the first write
    assert main(["nih", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    assert not (out / "manifest.json.tmp").exists() and len(lines(out / "tasks.jsonl")) == 1


def test_a_repeated_seed_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["nih", "--tasks", "1", "--seeds", "42", "7", "42", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--seeds lists 42 more than once" in err and "Traceback" not in err
    assert not out.exists()


def test_ablation_runs_every_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ablation"
    argv = ["ablation", "noise-lines", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    tasks = lines(out / "tasks.jsonl")
    assert sorted(task["variant"] for task in tasks) == sorted(ABLATIONS["noise-lines"])
    assert {task["meta"]["noise_lines_per_side"] for task in tasks} == {5, 10, 25, 30}
    assert json.loads((out / "manifest.json").read_text())["variants"]["noise=5"] == {"noise_lines_per_side": 5}
    printed = capsys.readouterr().out
    assert "noise=30" in printed
    # review h27 F7: the terminal summary's rows follow the declared variants (5, 10, 25, 30), not their text
    rows = [line.split()[0] for line in printed.splitlines() if line.startswith("noise=")]
    assert rows == list(ABLATIONS["noise-lines"]) == ["noise=5", "noise=10", "noise=25", "noise=30"]


@pytest.mark.skipif(not (SAMPLE / "data.json").is_file(), reason=f"{SAMPLE} is absent")
def test_longbench_on_the_real_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lb"
    argv = ["longbench", "--data", str(SAMPLE), "--limit", "2", "--seeds", "42", "--methods",
            "full_context,sliding_window", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    tasks = lines(out / "tasks.jsonl")
    assert len(tasks) == 4 and {task["task_kind"] for task in tasks} == {"longbench"}
    window = [task for task in tasks if task["method"] == "sliding_window"]
    assert all(task["submitted"] and task["submission"] in ("A", "B", "C", "D") for task in window)
    assert all(task["meta"]["difficulty"] == "hard" for task in tasks)
    assert all(task["end"] == "overflow" for task in tasks if task["method"] == "full_context")


def test_openai_backend_over_http_matches_the_embedded_backend(tmp_path: Path) -> None:
    from arc_eval.agent.scripted import ScriptedPolicy
    from arc_eval.backends.scripted_server import build_app, serve_in_thread

    common: dict[str, Any] = dict(task_kind="nih", methods=("sliding_window", "llm_summary"), seeds=(42,),
                                  tasks_per_seed=2, progress=False, concurrency=4)
    import io

    embedded = run(RunSpec.build(out=tmp_path / "embedded", **common), out=io.StringIO())
    app = build_app(ScriptedPolicy(), max_model_len=16384, concurrency=4)
    with serve_in_thread(app) as base_url:
        remote = run(RunSpec.build(out=tmp_path / "http", backend="openai", base_urls=(base_url,), model="scripted",
                             **common), out=io.StringIO())
    assert remote.aborted is None and remote.ran == embedded.ran == 4

    def outcomes(directory: Path) -> list[tuple[Any, ...]]:
        rows = lines(directory / "tasks.jsonl")
        return sorted((row["method"], row["task_id"], row["end"], row["correct"], row["steps"]) for row in rows)

    assert outcomes(tmp_path / "embedded") == outcomes(tmp_path / "http")
    assert app.stats.chat_requests > 0
    # review h10 MINOR-2: the run records which server answered it (one line per invocation that checked one)
    [checked] = lines(tmp_path / "http" / "servers.jsonl")
    [server] = checked["servers"]
    assert server["url"] == base_url and server["kind"] == "vllm" and server["window"] == 16384
    assert "scripted" in server["model_ids"] and checked["checked"].endswith("+00:00")
    assert not (tmp_path / "embedded" / "servers.jsonl").exists()  # an in-process backend checks no server


@pytest.mark.parametrize("count_with", ["server", "local"])
def test_tool_mode_over_http_counts_exactly_what_serve_scripted_counts(tmp_path: Path, count_with: str) -> None:
    """Tool mode end to end over HTTP, every method, serve-scripted rendering with the same model directory as vLLM
    would: the harness's count of every call (the server's /tokenize, or its own template count) equals the
    server's usage.prompt_tokens, and the outcomes equal the in-process scripted backend's."""
    import io

    from arc_eval.agent.scripted import ScriptedPolicy
    from arc_eval.backends.scripted_server import build_app, serve_in_thread

    model = tool_model_dir(tmp_path / "model")
    common: dict[str, Any] = dict(task_kind="nih", methods=("full_context", "sliding_window", "llm_summary",
                                  "structured_state", "rag_memory", "arc"), seeds=(42,), tasks_per_seed=1,
                                  progress=False, concurrency=3, tokenizer=model, tool_calling=True,
                                  context_limit=24000, rag_retriever="bm25", max_steps=10)
    embedded = run(RunSpec.build(out=tmp_path / "embedded", **common), out=io.StringIO())
    app = build_app(ScriptedPolicy(), max_model_len=24000, concurrency=3, tokenizer=model)
    with serve_in_thread(app) as base_url:
        remote = run(RunSpec.build(out=tmp_path / "http", backend="openai", base_urls=(base_url,), model="scripted",
                             count_with=count_with, **common), out=io.StringIO())
    assert remote.aborted is None and remote.ran == embedded.ran == 6
    calls = [call for call in lines(tmp_path / "http" / "calls.jsonl") if not call["overflow"]]  # sent calls
    assert calls and all(call["counted_prompt_tokens"] == call["prompt_tokens"] > 0 for call in calls)
    assert any(call["action"].startswith("cat ") for call in calls)

    def outcomes(directory: Path) -> list[tuple[Any, ...]]:
        rows = lines(directory / "tasks.jsonl")
        return sorted((row["method"], row["task_id"], row["end"], row["correct"], row["steps"]) for row in rows)

    assert outcomes(tmp_path / "embedded") == outcomes(tmp_path / "http")
    manifest = json.loads((tmp_path / "http" / "manifest.json").read_text())
    assert manifest["config"]["chat_format"] == "template" and manifest["config"]["tokenizer"] == f"hf-dir:{model}"


def test_a_model_directory_counts_with_its_template_and_tool_mode_offers_each_method_its_tools(
        tmp_path: Path) -> None:
    from arc_eval.counting import TemplateCounter
    from arc_eval.methods import make_method
    from arc_eval.protocol import TASK_TOOL_SPECS
    from arc_eval.execute import make_backends
    from arc_eval.plan import RunPlan

    model = tool_model_dir(tmp_path / "model")
    spec = RunSpec.build(task_kind="nih", methods=("sliding_window", "arc"), seeds=(1,), out=tmp_path / "run",
                   tasks_per_seed=1, backend="openai", base_urls=("http://127.0.0.1:9/v1",), model="m",
                   tokenizer=model, tool_calling=True)
    spec.validate()
    counting = spec.prompt_counting()
    assert (counting.tokenizer, counting.chat_format) == (f"hf-dir:{model}", "template")
    plan = RunPlan(spec)  # the run's one counter, resolved once and handed to the backend and every method
    assert isinstance(plan.counter, TemplateCounter)
    backends: Any = make_backends(spec, plan.counter)
    assert backends["arc"] is backends["sliding_window"] and backends["arc"].counter is plan.counter
    assert [tool["function"]["name"] for tool in backends["arc"].tools] == [tool.name for tool in TASK_TOOL_SPECS]
    settings = plan.settings(spec)
    assert settings.counter is plan.counter
    sliding, arc = make_method("sliding_window", settings), make_method("arc", settings)
    sliding.begin("s", "goal")
    arc.begin("s", "goal")
    assert sliding.tools() == TASK_TOOL_SPECS
    assert [tool.name for tool in arc.tools()][:2] == ["_recall", "_recall-next"] and arc.tools()[7:] == TASK_TOOL_SPECS
    text = RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=tmp_path / "run", tasks_per_seed=1,
                   tokenizer=f"hf-dir:{model}")
    assert text.prompt_counting().chat_format == "template"
    assert RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=tmp_path, tasks_per_seed=1,
                   tokenizer=model, chat_format="chatml").prompt_counting().chat_format == "chatml"


def test_the_agent_and_the_layout_are_chosen_recorded_and_the_figures_say_what_they_are(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "floor"
    assert main(["nih", "--tasks", "2", "--seeds", "42", "--methods", "sliding_window,llm_summary,arc",
                 "--out", str(out), "--agent", "floor", "--nih-layout", "paper", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "scripted-floor: the deterministic scripted agent" in printed and "not a model's accuracy" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == "scripted-floor"
    assert (manifest["config"]["agent"], manifest["config"]["nih_layout"]) == ("floor", "paper")
    tasks = lines(out / "tasks.jsonl")
    assert {task["model"] for task in tasks} == {"scripted-floor"} and {t["meta"]["layout"] for t in tasks} == {"paper"}
    assert not any(task["correct"] for task in tasks if task["method"] == "llm_summary")  # floor keeps 2 lines
    fair = tmp_path / "fair"
    assert main(["nih", "--tasks", "2", "--seeds", "42", "--methods", "llm_summary", "--out", str(fair),
                 "--nih-layout", "paper", "--no-progress"]) == 0
    assert all(task["correct"] and task["model"] == "scripted-fair" for task in lines(fair / "tasks.jsonl"))
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "accuracy by compactions the needle survived" in report and "not a model's accuracy" in report


def test_report_and_serve_scripted_are_dispatched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("arc_eval.analysis.cli")
    out = tmp_path / "run"
    assert main(["nih", "--tasks", "2", "--seeds", "42", "--methods", "sliding_window,rag_memory", "--out", str(out),
                 "--rag-retriever", "bm25", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "sliding_window" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) != 0
    assert main(["serve-scripted", "--help"]) == 0


def test_bench_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "throughput", "--only", "overhead", "--tasks", "1", "--overhead-tasks", "1",
                 "--methods", "sliding_window"]) == 0
    out = capsys.readouterr().out
    assert "throughput: scripted NIH, 1 tasks x 1 methods x 1 seed" in out and "0/1" in out
    assert "harness overhead per call" in out and "sliding_window" in out.splitlines()[-1]


def _failing_backend_after(calls: int, failure: Exception) -> Any:
    from arc_eval.agent.scripted import ScriptedBackend
    from arc_eval.types import ChatReply, ChatRequest

    class FailingAfter(ScriptedBackend):
        """The embedded backend, until it fails at the given call."""

        async def complete(self, request: ChatRequest) -> ChatReply:
            if self.calls >= calls:
                raise failure
            return await super().complete(request)

    return FailingAfter()


def test_a_backend_error_stops_the_run_and_the_task_in_flight_is_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any BackendError (here a refused request) stops the run with status 3; nothing of the task is kept."""
    import arc_eval.execute
    from arc_eval.types import BackendError

    refused = BackendError("401 Unauthorized: the server wants --api-key")
    monkeypatch.setattr(arc_eval.execute, "make_backend", lambda spec, method=None: _failing_backend_after(50, refused))
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "10", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
            "--no-progress", "--concurrency", "1"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "401 Unauthorized: the server wants --api-key" in err and "Traceback" not in err
    assert "rerun the same command" in err.lower()
    finished = lines(out / "tasks.jsonl")
    assert 0 < len(finished) < 10 and not any("401" in (task["error"] or "") for task in finished)
    assert {call["task_id"] for call in lines(out / "calls.jsonl")} == {task["task_id"] for task in finished}
    monkeypatch.undo()
    assert main(argv) == 0  # the same command resumes: the task in flight is redone, nothing twice
    tasks = lines(out / "tasks.jsonl")
    assert tasks[: len(finished)] == finished and len({task["task_id"] for task in tasks}) == len(tasks) == 10
    assert sum(task["calls"] for task in tasks) == len(lines(out / "calls.jsonl"))


def test_a_call_that_crashes_is_an_error_outcome_not_a_crashed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: RunWriter refused the task ("says calls=N and has N-1 call records") and the run died."""
    import arc_eval.execute

    monkeypatch.setattr(arc_eval.execute, "make_backend",
                        lambda spec, method=None: _failing_backend_after(30, KeyError("choices")))
    out = tmp_path / "run"
    assert main(["nih", "--tasks", "3", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
                 "--no-progress", "--concurrency", "1"]) == 0
    tasks = lines(out / "tasks.jsonl")
    calls = lines(out / "calls.jsonl")
    assert len(tasks) == 3 and any(task["end"] == "error" and "KeyError" in task["error"] for task in tasks)
    assert sum(task["calls"] for task in tasks) == len(calls)
    assert [call["finish_reason"] for call in calls].count("error") >= 1
