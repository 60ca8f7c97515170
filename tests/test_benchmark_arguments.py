"""The scripts of benchmarks/ on bad input (review h43): argparse's usage error naming the problem and exit status 2,
before anything is measured; never a traceback, a wrong status or a run that measures nothing and says it passed.

Each case runs the script as a user types it (`python benchmarks/SCRIPT ARGS`), from an empty directory; `{tmp}`
in an argument is that directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir
from tests.stopping import signals_as_by_default
from tests.waiting import scaled_ceiling, wait_until

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
NEEDS_QWEN3 = pytest.mark.skipif(qwen3_dir() is None, reason=QWEN3_ABSENT)  # where the benchmarks look for it

# (script, arguments, what the last line of standard error says)
CASES: list[Any] = [
    ("bench_trajectories.py", ["--sections", "main", "--windows", "16384"],
     "argument --windows: unknown '16384': give a comma-separated list of 16k, 32k"),
    ("bench_trajectories.py", ["--sections", "mian"], "argument --sections: unknown 'mian'"),
    ("bench_trajectories.py", ["--formats", "o200"], "argument --formats: unknown 'o200'"),
    ("bench_trajectories.py", ["--long-steps", "0"], "argument --long-steps: expected an integer from 1 to 1000000"),
    ("bench_trajectories.py", ["--data", "{tmp}/absent"], "--data '{tmp}/absent' is not a directory"),
    ("bench_trajectories.py", ["--data", "{tmp}"], "no trajectories (*.jsonl, *.traj) in {tmp}"),
    ("bench_core.py", ["--small", "0"], "argument --small: expected an integer from 1 to 10000000, got '0'"),
    ("bench_core.py", ["--steps", "-3"], "argument --steps: expected an integer from 1 to 1000000, got '-3'"),
    ("bench_core.py", ["--small", "10", "--big", "5"], "--big (5) must be at least --small (10)"),
    ("bench_replay.py", ["--sizes", "0"], "argument --sizes: expected an integer from 1 to 10000000, got '0'"),
    ("bench_replay.py", ["--repeat", "0"], "argument --repeat: expected an integer from 1 to 1000, got '0'"),
    ("bench_replay.py", ["--baseline-python", "{tmp}/absent"],
     "--baseline-python '{tmp}/absent' is not an interpreter that can be run"),
    ("bench_count_once.py", ["--events", "-1"], "argument --events: expected an integer from 1 to 10000000"),
    ("bench_count_once.py", ["--profile", "-2"], "argument --profile: expected an integer from 0 to 10000"),
    ("bench_store.py", ["--events", "0"], "argument --events: expected an integer from 1 to 10000000"),
    ("bench_store.py", ["--appends-only", "--appends", "0"], "argument --appends: expected an integer from 1 to"),
    ("bench_store_crash.py", ["--kills", "0"], "argument --kills: expected an integer from 1 to 1000000, got '0'"),
    ("bench_store_crash.py", ["--max-delay", "-1"], "argument --max-delay: expected a number from 0 to 3600"),
    ("bench_store_crash.py", ["--fold-every", "0"], "argument --fold-every: expected an integer from 1 to"),
    ("bench_store_crash.py", ["--wal-damage", "5"], "argument --wal-damage: expected a number from 0 to 1, got '5'"),
    ("bench_shown_form.py", ["--mb", "nan"], "argument --mb: expected a number above 0, at most 1024"),
    ("bench_shown_form.py", ["--mb", "-1"], "argument --mb: expected a number above 0, at most 1024"),
    ("bench_large_observation.py", ["--sizes-mb", "0"], "argument --sizes-mb: expected a number above 0"),
    ("bench_large_observation.py", ["--sizes-mb", "inf"], "argument --sizes-mb: expected a number above 0"),
    ("bench_templates.py", ["--traces", "0"], "argument --traces: expected an integer from 1 to 100000, got '0'"),
    ("bench_templates.py", ["--events", "-3"], "argument --events: expected an integer from 1 to 100000"),
    ("bench_eval_templates.py", ["--tasks", "0"], "argument --tasks: expected an integer from 1 to 100000, got '0'"),
    ("bench_eval_templates.py", ["--longbench", "-1"], "argument --longbench: expected an integer from 0 to 100000"),
    pytest.param(("bench_eval_templates.py", ["--context-limit", "1000", "--max-tokens", "2000"],
                  "--max-tokens (2000) must be below --context-limit (1000)"), marks=NEEDS_QWEN3),
    pytest.param(("bench_eval_templates.py", ["--context-limit", "0"], "--context-limit must be at least 1, got 0"),
                 marks=NEEDS_QWEN3),
    ("bench_scripted_server.py", ["--requests", "0"], "argument --requests: expected an integer from 1 to 10000000"),
    ("bench_scripted_server.py", ["--clients", "1", "0"], "argument --clients: expected an integer from 1 to 10000"),
    ("bench_scripted_server.py", ["--rounds", "0"], "argument --rounds: expected an integer from 1 to 1000"),
    ("bench_scripted_server.py", ["--server", "{tmp}/absent.py"], "--server '{tmp}/absent.py': no such file"),
    ("bench_scripted_server.py", ["--server", "no_such.module"], "--server 'no_such.module': no such module"),
    ("bench_proxy_store.py", ["hold", "--conversations", "abc"], "argument --conversations: expected an integer from 1"),
    ("bench_proxy_store.py", ["hold", "--conversations", "0"], "argument --conversations: expected an integer from 1"),
    ("bench_proxy_store.py", ["memory", "--conversations", "1,2"], "memory takes one --conversations count"),
    ("bench_proxy_store.py", ["memory", "--idle-seconds", "-1"], "argument --idle-seconds: expected an integer from 1"),
    ("bench_proxy_store.py", ["start", "--tree", "{tmp}"],
     "--tree '{tmp}' is not a checkout of arc-ref (no arc_ref/__init__.py there)"),
    ("bench_fork_burst.py", ["--copies", "0"], "argument --copies: expected an integer from 1 to 10000, got '0'"),
    ("bench_fork_burst.py", ["--kb", "-1"], "argument --kb: expected an integer from 1 to 100000, got '-1'"),
    ("bench_fork_burst.py", ["--tree", "{tmp}"], "--tree '{tmp}' is not a checkout of arc-ref"),
    ("proxy_cases.py", ["--conversations", "0"], "argument --conversations: expected an integer from 1 to 1000000"),
    ("proxy_cases.py", ["--big-timeout", "-1"], "argument --big-timeout: expected a number above 0, at most 86400"),
    ("proxy_cases.py", ["--tree", "{tmp}", "--only", "ownership"], "--tree '{tmp}' is not a checkout of arc-ref"),
    ("bench_roofline_gpu.py", ["--measured", "{tmp}/absent"],
     "--measured '{tmp}/absent' cannot be read: No such file or directory"),
    ("bench_roofline_gpu.py", ["--measured", "{tmp}"], "--measured '{tmp}' cannot be read: Is a directory"),
    ("bench_roofline_gpu.py", ["--measured", "bench_roofline_gpu_h100.txt", "--model", "nope"],
     "unknown model preset 'nope'"),
    ("bench_roofline_gpu.py", ["--measured", "bench_roofline_gpu_h100.txt", "--hardware", "nope"],
     "unknown hardware 'nope'"),
    ("bench_roofline_gpu.py", ["--measured", "bench_roofline_gpu_h100.txt", "--decode-steps", "0"],
     "argument --decode-steps: expected an integer from 1 to 10000000, got '0'"),
    ("bench_roofline_gpu.py", ["--measured", "bench_core.py"], "holds no timing line"),
    ("refusal_cases.py", ["--no-fuzz", "--only", "no case is named so"], "--only 'no case is named so': no case's name"),
    ("bench_many_proxies.py", ["--agents", "0"], "argument --agents: expected an integer from 1 to 10000, got '0'"),
    ("bench_many_proxies.py", ["--rounds", "0"], "argument --rounds: expected an integer from 1 to 1000, got '0'"),
    ("bench_llama_server.py", ["--llama-server", ""], "pass --llama-server BIN or set LLAMA_SERVER"),
    ("bench_llama_server.py", ["--llama-server", "{tmp}/absent"],
     "--llama-server '{tmp}/absent' is not a program that can be run"),
    ("bench_llama_server.py", ["--llama-server", sys.executable, "--gguf", "{tmp}/absent.gguf"],
     "--gguf '{tmp}/absent.gguf' is not a file"),
    ("bench_llama_server.py", ["--llama-server", sys.executable, "--slots", "0"], "argument --slots: expected an"),
    ("make_tiny_gguf.py", ["{tmp}/t.gguf", "--heads", "0"], "argument --heads: expected an integer from 1 to 1000000"),
    ("make_tiny_gguf.py", ["{tmp}/t.gguf", "--heads", "3"], "--embd must divide by --heads, and --heads by --kv-heads"),
    ("make_tiny_gguf.py", ["{tmp}/t.gguf", "--tokenizer-dir", "{tmp}"], "--tokenizer-dir '{tmp}' holds no tokenizer.json"),
    ("vllm_cpu/prefix_cache.py", ["--vllm-python", sys.executable, "--work", "{tmp}", "--windows", "16384"],
     "argument --windows: unknown '16384': give a comma-separated list of 16k, 32k"),
    ("vllm_cpu/prefix_cache.py", ["--vllm-python", "{tmp}/absent", "--work", "{tmp}"],
     "--vllm-python '{tmp}/absent' is not an interpreter that can be run"),
    ("vllm_cpu/real_vllm.py", ["--vllm-python", sys.executable, "--work", "{tmp}", "--parts", "txt"],
     "--parts: unknown 'txt': give a comma-separated list of text, tool, random"),
    ("vllm_cpu/real_vllm.py", ["--vllm-python", "{tmp}/absent", "--work", "{tmp}"],
     "--vllm-python '{tmp}/absent' is not an interpreter that can be run"),
]

# (script, arguments, exit status, the last line of standard error): a failure met while running, said in one line
FAILURES: list[tuple[str, list[str], int, str]] = [
    ("bench_replay.py", ["--sizes", "1", "--repeat", "1", "--replay-args", "--bogus"], 1,
     "ended with status 2 (its message is above); stopped"),
]

# the smallest runs a user may ask for: they run to the end (exit 0), no traceback
SMALL_RUNS: list[tuple[str, list[str]]] = [
    ("bench_core.py", ["--small", "1", "--big", "20", "--steps", "1"]),
    ("bench_replay.py", ["--sizes", "1", "--repeat", "1"]),
    ("bench_count_once.py", ["--mode", "text", "--events", "1"]),
    ("bench_store.py", ["--events", "1", "--appends", "1"]),
    ("bench_store_crash.py", ["--kills", "1", "--max-delay", "0"]),
    ("bench_shown_form.py", ["--mb", "0.001"]),
    ("bench_scripted_server.py", ["--requests", "1", "--clients", "1"]),
]


def case_id(case: tuple[str, list[str], str]) -> str:
    script, arguments, *_ = case
    return f"{script} {' '.join(arguments)}"


def run_script(script: str, arguments: list[str], directory: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The script run to its end (``env`` added to the environment); past the ceiling its whole process group is
    killed (a script that measures instead of refusing its arguments leaves no child behind)."""
    command = [sys.executable, str(BENCHMARKS / script),
               *(str(BENCHMARKS / argument) if (BENCHMARKS / argument).is_file() else argument.format(tmp=directory)
                 for argument in arguments)]
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    with subprocess.Popen(command, cwd=directory, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=scaled_ceiling(120))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += "\n(killed: past the ceiling)"
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_bad_argument_is_one_usage_error(case: tuple[str, list[str], str], tmp_path: Path) -> None:
    script, arguments, expected = case
    done = run_script(script, arguments, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert (done.returncode, expected.format(tmp=tmp_path) in last) == (2, True), (done.stdout[-2000:], done.stderr)
    assert f"{Path(script).name}: error: " in last


@pytest.mark.parametrize("case", FAILURES, ids=lambda case: f"{case[0]} {' '.join(case[1])}")
def test_a_failure_while_running_is_one_line(case: tuple[str, list[str], int, str], tmp_path: Path) -> None:
    script, arguments, status, expected = case
    done = run_script(script, arguments, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert (done.returncode, expected.format(tmp=tmp_path) in last) == (status, True), (done.stdout[-2000:], done.stderr)


@pytest.mark.parametrize("case", SMALL_RUNS, ids=lambda case: f"{case[0]} {' '.join(case[1])}")
def test_the_smallest_run_ends(case: tuple[str, list[str]], tmp_path: Path) -> None:
    script, arguments = case
    done = run_script(script, arguments, tmp_path)
    assert (done.returncode, "Traceback" in done.stderr) == (0, False), (done.stdout[-2000:], done.stderr)


def test_a_size_that_fails_makes_bench_large_observation_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every size failing printed 'failed' rows and exited 0; now a failed size is exit status 1."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_large_observation", BENCHMARKS / "bench_large_observation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.QWEN3_DIR.is_dir():
        pytest.skip(f"needs {module.QWEN3_DIR}")

    def fail(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "MemoryError\n")

    monkeypatch.setattr(module.subprocess, "run", fail)
    assert module.main(["--sizes-mb", "1"]) == 1


def test_a_server_that_exits_before_it_is_ready_is_named_in_one_line(tmp_path: Path) -> None:
    """bench_scripted_server.py: a --server that exits at once was a ProcessLookupError traceback (the script killed
    the process it had already reaped); now its last line names the server, exit status 1."""
    (tmp_path / "server.py").write_text("def serve_main(argv):\n    return 3\n", encoding="utf-8")
    done = run_script("bench_scripted_server.py", ["--server", "{tmp}/server.py", "--requests", "1", "--clients", "1"],
                      tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("serve-scripted: the process exited with status 3 before it"
                                                         " was ready")


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode("utf-8", "replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_bench_store_crash_stopped_leaves_no_writer(tmp_path: Path, signum: signal.Signals) -> None:
    """SIGTERM ended bench_store_crash at once: the store writer it had started went on alone (found running 40
    minutes later, 2 GB of memory, 1 GB of store in a scratch folder never removed); Ctrl-C was a traceback. Now
    each stops the writer, removes the scratch folder and ends as every benchmark does (benchmarks/servers.py): one
    line and 128 + the signal (h43's own handler exited 1 on SIGTERM, and 130 on SIGHUP)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    command = [sys.executable, str(BENCHMARKS / "bench_store_crash.py"), "--kills", "1000000"]
    environment = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)}
    with subprocess.Popen(command, cwd=tmp_path, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True,
                          preexec_fn=signals_as_by_default) as process:
        try:
            wait_until(lambda: bool(processes_naming(f"{scratch}/")), process, "bench_store_crash's writer")
            process.send_signal(signum)
            _, stderr = process.communicate(timeout=scaled_ceiling(60))
            left = processes_naming(f"{scratch}/")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever the script left in its group
    assert (left, list(scratch.iterdir())) == ([], [])
    assert "Traceback" not in stderr, stderr
    assert (process.returncode, stderr.strip().splitlines()[-1:]) == (
        128 + signum, [f"bench_store_crash: stopped by {signum.name}"])


@pytest.mark.parametrize("name", ["resume: abs. --out, reordered, bar, conc. 5", "resume with another seed (refused)",
                                  "report --arc with no such method"])
def test_refusal_cases_only_runs_first_the_case_a_chosen_one_builds_on(name: str, tmp_path: Path) -> None:
    """`refusal_cases.py --only WORDS` ran the resume and report cases without the first run they resume or report
    on: each differed ('no such directory', 'tasks were redone'), exit 1 (h43's NIT). Now the case it builds on runs
    first, said in a line."""
    done = run_script("refusal_cases.py", ["--no-fuzz", "--only", name], tmp_path)
    assert (done.returncode, "Traceback" in done.stdout + done.stderr) == (0, False), (done.stdout, done.stderr)
    assert done.stdout.splitlines()[0] == (f"--only {name!r}: also the case(s) the chosen ones build on: first run"
                                           " (relative --out)"), done.stdout
    assert "2 of 2 cases as expected, 0 differ" in done.stdout, done.stdout


@NEEDS_QWEN3
@pytest.mark.parametrize("script, arguments", [
    ("bench_fork_burst.py", ["--copies", "2", "--turns", "2", "--kb", "1"]),
    ("bench_proxy_store.py", ["hold", "--conversations", "4"]),
    ("bench_proxy_store.py", ["memory", "--conversations", "2", "--idle-seconds", "1"]),
], ids=lambda value: value if isinstance(value, str) else " ".join(value))
def test_no_warning_on_the_fake_upstreams_count(script: str, arguments: list[str], tmp_path: Path) -> None:
    """Every run warned 'the upstream counted 1 (10) prompt tokens where the proxy counted 772 (802): is --tokenizer
    the served model's tokenizer...' (h43's NIT): the count was the fake upstream's made-up usage, not a server's.
    The fakes now report no prompt count, so the proxy compares nothing and says nothing."""
    done = run_script(script, arguments, tmp_path)
    assert (done.returncode, "warning" in done.stdout + done.stderr) == (0, False), (done.stdout, done.stderr)
