"""benchmarks/vllm_cpu/real_vllm.py and prefix_cache.py stopped by SIGTERM, SIGHUP or Ctrl-C stop the vLLM server
(and the arc-eval run) they started and exit with 128 + the signal, also under run.sh's `timeout`. They stopped
vLLM on SIGTERM only once it had answered /health (a SIGTERM while it started, minutes on a CPU, left it running)
and not on SIGHUP. vLLM's Python is a stand-in here (as in test_vllm_cpu_server.py): it makes the models as empty
folders, and as the server either never listens or answers /health and holds every other request."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from proofs_check.shared_data import shared_data_dir
from tests.proxy.harness import needs_qwen3
from tests.stopping import BenchRun, bench_run, holding, never_listening
from tests.waiting import wait_until

VLLM_CPU = Path(__file__).resolve().parents[3] / "benchmarks" / "vllm_cpu"
TRAJECTORIES = shared_data_dir() / "trajectories"

MAKES_MODELS = """
if len(sys.argv) > 2 and sys.argv[1].endswith("make_tiny_qwen3.py"):
    Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
    sys.exit(0)
"""

def starting(tmp_path: Path) -> Path:
    """vLLM's Python, as a server that never listens (tests.stopping): it starts a child, then touches `ready`."""
    return never_listening(tmp_path, ignores_term=False, path=tmp_path / "python", prelude=MAKES_MODELS)


def real_vllm(stand_in: Path, tmp_path: Path) -> list[str]:
    return [sys.executable, str(VLLM_CPU / "real_vllm.py"), "--vllm-python", str(stand_in), "--work",
            str(tmp_path / "work"), "--parts", "text"]


def stopped(run: BenchRun, ready: Path, signum: int) -> None:
    wait_until(ready.exists, run.process, f"the stand-in server is {ready.name}")
    started = run.record_started()
    assert any(str(ready.parent / "python") in process.command for process in started), started
    run.process.send_signal(signum)
    run.assert_stopped_by(signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_real_vllm_stopped_while_arc_eval_runs(tmp_path: Path, signum: signal.Signals) -> None:
    with bench_run(tmp_path, real_vllm(holding(tmp_path, tmp_path / "python", MAKES_MODELS), tmp_path)) as run:
        stopped(run, tmp_path / "asked", signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_real_vllm_stopped_while_vllm_starts(tmp_path: Path, signum: signal.Signals) -> None:
    with bench_run(tmp_path, real_vllm(starting(tmp_path), tmp_path)) as run:
        stopped(run, tmp_path / "ready", signum)


def test_real_vllm_under_run_sh_s_timeout_stopped_while_vllm_starts(tmp_path: Path) -> None:
    """As run.sh runs it (`timeout --kill-after=60 ...`), `timeout` itself sent SIGTERM (as a CI runner's cancel
    does): it passes the signal on to its process group and exits with real_vllm's status."""
    command = ["timeout", "--kill-after=60", "1500", *real_vllm(starting(tmp_path), tmp_path)]
    with bench_run(tmp_path, command) as run:
        stopped(run, tmp_path / "ready", signal.SIGTERM)


@needs_qwen3
@pytest.mark.skipif(not TRAJECTORIES.is_dir(), reason=f"prefix_cache.py needs the trajectories ({TRAJECTORIES})")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_prefix_cache_stopped_while_vllm_starts(tmp_path: Path, signum: signal.Signals) -> None:
    command = [sys.executable, str(VLLM_CPU / "prefix_cache.py"), "--vllm-python", str(starting(tmp_path)),
               "--work", str(tmp_path / "work"), "--check"]
    with bench_run(tmp_path, command) as run:
        stopped(run, tmp_path / "ready", signum)
