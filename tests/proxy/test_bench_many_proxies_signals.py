"""benchmarks/bench_many_proxies.py stopped by SIGTERM or SIGHUP while it measures stops what it started (its
PostgreSQL cluster, HAProxy, four `arc-ref proxy` instances), removes their folders, and exits with 128 + the
signal: only Ctrl-C unwound it before, and PostgreSQL (a daemon of the postgres user, no child of the bench) stayed
with its cluster in /tmp."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests.deployment import haproxy_absent, postgres_absent
from tests.proxy.harness import needs_qwen3
from tests.stopping import Process, bench_run, processes
from tests.waiting import wait_until

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_many_proxies.py"


def clusters() -> list[Process]:
    """PostgreSQL servers of a throwaway cluster (tests/deployment.py: a data directory under arc-pg-*)."""
    return [process for process in processes() if "/arc-pg-" in process.command and " -D " in process.command
            and process.state != "Z"]


def stop_new_clusters(before: set[int]) -> None:
    """Every cluster server started since ``before`` stopped, its folder removed (tests/deployment.py's arc-pg-*)."""
    for process in clusters():
        if process.pid not in before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            shutil.rmtree(Path(process.command.split(" -D ", 1)[1].split()[0]).parent, ignore_errors=True)


@needs_qwen3
@pytest.mark.skipif(postgres_absent() is not None or haproxy_absent() is not None,
                    reason=f"{postgres_absent() or haproxy_absent()}")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_stopped_while_measuring_it_stops_postgres_haproxy_and_its_proxies(tmp_path: Path,
                                                                          signum: signal.Signals) -> None:
    before = {process.pid for process in clusters()}
    command = [sys.executable, str(BENCHMARK), "--agents", "2", "--turns", "2", "--rounds", "1000"]
    with bench_run(tmp_path, command) as run, contextlib.ExitStack() as cleanup:
        cleanup.callback(stop_new_clusters, before)  # a bench that left its cluster (red) leaves none after the test
        def measuring() -> bool:  # the balancers are up: every server of the run has started
            return any("haproxy" in process.command for process in run.record_started())

        wait_until(measuring, run.process, "bench_many_proxies' balancers are up", base_s=120)
        started = run.record_started()
        assert sum(" proxy --upstream " in process.command for process in started) == 4, started
        cluster = [process for process in clusters() if process.pid not in before]
        assert len(cluster) == 1, cluster
        data = cluster[0].command.split(" -D ", 1)[1].split()[0]
        run.process.send_signal(signum)
        run.assert_stopped_by(signum)
        wait_until(lambda: not [process for process in clusters() if process.pid == cluster[0].pid], None,
                   "its PostgreSQL server stopped", base_s=30)
        assert not Path(data).exists(), f"its cluster {data} is left"
