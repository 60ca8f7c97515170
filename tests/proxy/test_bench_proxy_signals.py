"""benchmarks/bench_proxy.py stopped by SIGTERM, SIGHUP or Ctrl-C stops every server it started, as Ctrl-C does,
and exits with 128 + the signal. Its servers run in sessions of their own, so nothing else stops them: a run
killed with SIGTERM left two proxies and the fake upstream running for 50 minutes."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.proxy.harness import needs_qwen3
from tests.stopping import BenchRun, alive_in, bench_run as stopping_run, listening, never_listening, servers_of
from tests.waiting import wait_until

pytestmark = needs_qwen3

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_proxy.py"
# a workload that outlasts the test: one agent whose round never ends
ENDLESS = ["--no-litellm", "--rounds", "1", "--concurrency", "1", "--turns", "1000000", "--long-turns", "13"]


def arc_serving(bench: subprocess.Popen[bytes]) -> bool:
    """The arc-ref proxy (started after the fake upstream listens) answers on its port: the run is measuring."""
    for server in servers_of(bench):
        words = server.command.split()
        if "--upstream" in words and "--port" in words and listening(int(words[words.index("--port") + 1])):
            return True
    return False


@contextlib.contextmanager
def bench_run(tmp_path: Path, *options: str) -> Iterator[BenchRun]:
    """bench_proxy.py running ENDLESS with ``options``."""
    with stopping_run(tmp_path, [sys.executable, str(BENCH), *ENDLESS, *options]) as run:
        yield run


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_measuring_stops_every_server(tmp_path: Path, signum: signal.Signals) -> None:
    with bench_run(tmp_path) as run:
        wait_until(lambda: arc_serving(run.process), run.process, "bench_proxy's arc-ref proxy listens")
        assert len(run.record_servers()) == 2  # the fake upstream and the arc-ref proxy
        run.process.send_signal(signum)
        run.assert_stopped_by(signum)


def test_sigterm_while_a_contender_starts_stops_it_and_its_children(tmp_path: Path) -> None:
    with bench_run(tmp_path, "--arc-python", str(never_listening(tmp_path, ignores_term=False))) as run:
        wait_until((tmp_path / "ready").exists, run.process, "the contender has started its child")
        sessions = run.record_servers()
        assert len(sessions) == 2 and len(alive_in(sessions)) == 3  # the fake upstream, the contender, its child
        run.process.send_signal(signal.SIGTERM)
        run.assert_stopped_by(signal.SIGTERM)


def test_a_second_sigterm_while_stopping_kills_what_is_left(tmp_path: Path) -> None:
    """A contender that ignores SIGTERM holds the cleanup (20 s before SIGKILL); a second SIGTERM meanwhile must not
    cut the cleanup short and leave it running."""
    with bench_run(tmp_path, "--arc-python", str(never_listening(tmp_path, ignores_term=True))) as run:
        wait_until((tmp_path / "ready").exists, run.process, "the contender has started its child")
        run.record_servers()
        run.process.send_signal(signal.SIGTERM)
        wait_until((tmp_path / "terminated").exists, run.process, "the contender got the bench's SIGTERM")
        run.process.send_signal(signal.SIGTERM)
        run.assert_stopped_by(signal.SIGTERM)
