"""What a run says about itself (issue 19, arc_eval.announce): the plan before the first task, the estimate after
the first tasks, the next step at the end, and what a stop signal waits for and keeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import arc_eval.announce as announce
from arc_eval.backends.transport import PREFLIGHT_MAX_PAUSE_S
from arc_eval.cli import main
from tests.waiting import scaled_ceiling, wait_until

REPO = Path(__file__).resolve().parents[2]


def test_the_plan_comes_before_the_first_task_and_the_next_step_ends_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["nih", "--tasks", "12", "--seeds", "42", "7", "--methods", "arc,rag_memory", "--out", str(out),
                 "--no-progress", "--rag-retriever", "bm25"]) == 0
    captured = capsys.readouterr()
    err_lines = captured.err.splitlines()
    assert err_lines[0] == ("plan: nih, 12 task(s) x 2 method(s) x 2 seed(s) = 48 task runs; methods arc, rag_memory; "
                            "seeds 42 7")
    assert err_lines[1] == f"      backend scripted (the embedded agent, rules fair); rag_memory retriever bm25; recorded in {out}"
    estimate = [line for line in err_lines if line.startswith("estimate: ")]
    assert len(estimate) == 1 and estimate[0].startswith("estimate: 10 task(s) in ") and " 38 left, about " in estimate[0]
    assert captured.out.splitlines()[-1].startswith(f"next: arc-eval report {out}")


def test_an_unreachable_server_is_planned_before_it_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on: every connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "run"
    started = time.monotonic()
    assert main(["nih", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m",
                 "--tasks", "3", "--seeds", "42", "--methods", "arc", "--out", str(out), "--no-progress"]) == 3
    waited = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.index("plan: nih, 3 task(s) x 1 method(s) x 1 seed(s) = 3 task runs") < err.index("checking ")
    assert f"backend openai http://127.0.0.1:{port}/v1 serving m" in err and not out.exists()
    # a refused connection fails fast at the check before the first task (it took 2 min 48 s): a line per attempt
    models = f"http://127.0.0.1:{port}/v1/models"
    assert f"arc-eval: {models}: attempt 1/3: ConnectError:" in err and f"arc-eval: {models}: attempt 2/3:" in err
    assert f"{models}: gave up after 3 attempts; last error: ConnectError:" in err
    assert waited < 2 * PREFLIGHT_MAX_PAUSE_S + scaled_ceiling(5)


def test_the_plan_of_an_ablation_over_longbench_items() -> None:
    from types import SimpleNamespace

    spec = SimpleNamespace(methods=("arc",), variants={"recall=4k/2k": {}, "recall=8k/4k": {}}, seeds=(42,),
                           task_kind="longbench", tasks_per_seed=None, backend="scripted", agent="fair",
                           base_urls=(), model="scripted-fair", out=Path("runs/ablation-recall-budget-longbench-x"))
    text = announce.plan_text(spec, 24, "backend scripted (the embedded agent, rules fair)", [])
    assert text.startswith("plan: longbench, 12 task(s) x 1 method(s) x 1 seed(s) x 2 variant(s) (recall=4k/2k, "
                           "recall=8k/4k) = 24 task runs; methods arc; seeds 42")


def test_the_slow_retriever_is_announced_with_its_cost() -> None:
    """rag_memory's own note in the plan (its options' plan_note; a run without rag_memory has none)."""
    from arc_eval.methods.rag_memory import retriever_note

    slow = retriever_note("embeddings", 1000, on_gpu=False)
    assert "embeddings on CPU: slow, about 5 s per rag_memory task (~1 h 23 min for its 1000 tasks)" in slow
    assert "--rag-retriever bm25 is the fast one" in slow
    assert retriever_note("embeddings", 1000, on_gpu=True) == "rag_memory retriever embeddings"
    assert retriever_note("bm25", 1000, on_gpu=False) == "rag_memory retriever bm25"


def test_durations_and_the_estimate_read_at_a_glance(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [announce.duration(s) for s in (4.4, 185, 7800, float("nan"))] == ["4 s", "3 min 5 s", "2 h 10 min", "unknown"]
    assert announce.eta_text(10, 50.0, 990) == "estimate: 10 task(s) in 50 s (5 s per task); 990 left, about 1 h 22 min at this rate"
    said: list[str] = []
    clock = iter([100.0, 105.0, 150.0])  # started at 100, the first task ends at 105, the 10th at 150
    monkeypatch.setattr(announce.time, "monotonic", lambda: next(clock))
    notes = announce.RunNotes(total=1000, done_before=0, write=said.append)
    for _ in range(12):
        notes.task_finished(batch_size=1000)
    assert said == [announce.eta_text(10, 50.0, 990)]  # once, after the tenth task


def test_a_slow_first_task_gets_a_first_estimate_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review h27 F9: with a slow server (40 s a task) and --no-progress nothing was said for 6 min 43 s, until
    the estimate after 10 tasks; a first task of 30 s or more now gets a first estimate at once."""
    said: list[str] = []
    clock = iter([0.0, 40.0, 403.0])  # the first task ends at 40 s, the 10th at 403 s
    monkeypatch.setattr(announce.time, "monotonic", lambda: next(clock))
    notes = announce.RunNotes(total=12, done_before=0, write=said.append)
    for _ in range(11):
        notes.task_finished(batch_size=12)
    assert said == [announce.eta_text(1, 40.0, 11) + " (from the first task; again after 10)",
                    announce.eta_text(10, 403.0, 2)]


def test_the_next_step_names_the_program_as_the_user_can_call_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(announce.shutil, "which", lambda name: None)
    assert announce.program_name(".venv/bin/arc-eval") == ".venv/bin/arc-eval"
    assert announce.program_name("/usr/lib/python3/pytest") == "arc-eval"
    monkeypatch.setattr(announce.shutil, "which", lambda name: str(Path(".venv/bin/arc-eval").resolve()))
    assert announce.program_name(".venv/bin/arc-eval") == "arc-eval"


def _start_run(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "400", "--seeds", "42", "--methods", "sliding_window", "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "arc_eval.cli", *argv], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tasks = out / "tasks.jsonl"
    wait_until(lambda: tasks.exists() and tasks.read_text().count("\n") >= 5, process, "arc-eval nih")
    return process, out


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_says_what_it_waits_for_and_what_is_recorded(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    process, out = _start_run(tmp_path)
    process.send_signal(signum)
    _, err = process.communicate(timeout=scaled_ceiling(60))
    recorded = (out / "tasks.jsonl").read_text().count("\n")
    assert process.returncode == status, err
    assert 0 < recorded < 400 and "Traceback" not in err
    assert f"arc-eval: {signum.name}: stopping: cancelling the " in err and " task(s) in flight (not recorded" in err
    assert (f"arc-eval: stopped by {signum.name}: {recorded} finished task(s) are recorded in {out}" in err
            and "rerun the same command to continue" in err)


def test_the_next_step_names_the_model_preset_when_the_served_name_does_not_say_the_size(tmp_path: Path) -> None:
    """`arc-eval report` cannot size a model served under an alias (vLLM's --served-model-name tiny-qwen3): the
    printed command then names --model-preset, so it does not exit 2 (review h60 F4); a name that says 8B or 32B,
    and the scripted backend (sized 8B by the report), need none."""
    from arc_eval.run_spec import RunSpec
    from arc_eval.runner import unsized_model

    def openai_spec(model: str) -> RunSpec:
        return RunSpec.build("nih", ("arc",), (1,), tmp_path / "x", backend="openai", model=model,
                             base_urls=("http://127.0.0.1:1/v1",))

    assert unsized_model(openai_spec("tiny-qwen3")) == "tiny-qwen3"
    assert unsized_model(openai_spec("Qwen/Qwen3-8B")) is None
    assert unsized_model(openai_spec("qwen3-32b-awq")) is None
    assert unsized_model(RunSpec.build("nih", ("arc",), (1,), tmp_path / "x")) is None  # the scripted backend
    run = tmp_path / "run"
    aliased = announce.next_step_text(run, "arc-eval", "tiny-qwen3", ("qwen3-8b", "qwen3-32b"))
    assert aliased.startswith(f"next: arc-eval report {run} --model-preset qwen3-8b|qwen3-32b|FILE   (")
    assert "'tiny-qwen3' does not say its size" in aliased
    plain = announce.next_step_text(run, "arc-eval")
    assert plain.startswith(f"next: arc-eval report {run}   (") and "--model-preset" not in plain
