"""benchmarks/bench_scripted_server.py, bench_llama_server.py and refusal_cases.py stopped by SIGTERM, SIGHUP or
Ctrl-C stop the server they started and exit with 128 + the signal. Their servers ran in the bench's process group:
a SIGTERM or SIGHUP to the bench's pid alone (kill, a CI runner) left the server running. Each server here is a
stand-in that never listens (it starts a child, then waits), so the bench is waiting for it when the signal comes."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.stopping import bench_run, holding, never_listening, stopped_while_starting
from tests.waiting import wait_until

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_bench_scripted_server_stopped_stops_its_server(tmp_path: Path, signum: signal.Signals) -> None:
    server = never_listening(tmp_path, ignores_term=False, path=tmp_path / "never_listening.py")
    stopped_while_starting(tmp_path, [sys.executable, str(BENCHMARKS / "bench_scripted_server.py"), "--server",
                                      str(server), "--requests", "1", "--clients", "1"], signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_bench_llama_server_stopped_stops_its_server(tmp_path: Path, signum: signal.Signals) -> None:
    server = never_listening(tmp_path, ignores_term=False, path=tmp_path / "llama-server")
    (tmp_path / "tiny.gguf").write_bytes(b"")  # the bench asks for an existing file; the stand-in never reads it
    stopped_while_starting(tmp_path, [sys.executable, str(BENCHMARKS / "bench_llama_server.py"), "--llama-server",
                                      str(server), "--gguf", str(tmp_path / "tiny.gguf")], signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_bench_llama_server_stopped_while_arc_eval_runs_stops_its_server(tmp_path: Path,
                                                                         signum: signal.Signals) -> None:
    """arc-eval runs in the bench's process; it takes Ctrl-C as its own stop (and its event loop SIGINT and SIGTERM
    while it runs its tasks): the bench still stops llama-server and exits with 128 + the signal, saying so itself
    last (before, a SIGINT or SIGTERM arc-eval took while it ran its tasks went on to the bench's report of the run,
    with arc-eval's status). The stand-in answers arc-eval's checks and holds its tasks' requests."""
    server = holding(tmp_path, tmp_path / "llama-server", answers_probe=True)
    (tmp_path / "tiny.gguf").write_bytes(b"")  # the bench asks for an existing file; the stand-in never reads it
    command = [sys.executable, str(BENCHMARKS / "bench_llama_server.py"), "--llama-server", str(server), "--gguf",
               str(tmp_path / "tiny.gguf"), "--out", str(tmp_path / "run")]
    with bench_run(tmp_path, command, {"TMPDIR": str(tmp_path)}) as run:
        wait_until((tmp_path / "asked").exists, run.process, "arc-eval has asked llama-server")
        assert len(run.record_started()) == 1, run.started  # the stand-in llama-server
        run.process.send_signal(signum)
        run.assert_stopped_by(signum)
        said = run.output.read_text(errors="replace")
        assert said.strip().splitlines()[-1] == f"bench_llama_server: stopped by {signum.name}", said[-3000:]


def test_refusal_cases_stopped_stops_serve_scripted(tmp_path: Path) -> None:
    """`arc-eval serve-scripted` is `python -c 'from arc_eval.cli import main ...'`: an arc_eval package first on
    PYTHONPATH whose cli never listens stands in for it (only in the processes of the case chosen)."""
    package = tmp_path / "stand-in" / "arc_eval"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    never_listening(tmp_path, ignores_term=False, path=package / "cli.py")
    stopped_while_starting(tmp_path, [sys.executable, str(BENCHMARKS / "refusal_cases.py"), "--no-fuzz", "--only",
                                      "wrong model name"], signal.SIGTERM, {"PYTHONPATH": str(package.parent)})
