"""benchmarks/proxy_cases.py and bench_proxy_store.py (its Proxy) stopped by SIGTERM, SIGHUP or Ctrl-C stop every
`arc-ref proxy` they started and exit with 128 + the signal. Their proxies run in sessions of their own, and only
Ctrl-C stopped them: a SIGTERM or SIGHUP left them running."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.proxy.harness import needs_qwen3
from tests.stopping import bench_run, never_listening, servers_of, stopped_while_starting
from tests.waiting import wait_until

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def proxy_answered(bench: subprocess.Popen[bytes]) -> bool:
    """An `arc-ref proxy` the bench started has answered a request (its /arc/rounds lists one): the case runs."""
    for server in servers_of(bench):
        words = server.command.split()
        if "proxy" in words and "--port" in words:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                port = words[words.index("--port") + 1]
                return bool(httpx.get(f"http://127.0.0.1:{port}/arc/rounds", timeout=1).json())
    return False


def never_listening_tree(tmp_path: Path) -> Path:
    """A checkout for --tree whose `python -m arc_ref.frontends.cli proxy ...` never listens (tests.stopping)."""
    frontends = tmp_path / "tree" / "arc_ref" / "frontends"
    frontends.mkdir(parents=True)
    (frontends.parent / "__init__.py").write_text("")
    (frontends / "__init__.py").write_text("")
    never_listening(tmp_path, ignores_term=False, path=frontends / "cli.py")
    return frontends.parent.parent


@needs_qwen3
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_proxy_cases_stopped_while_measuring_stops_its_proxy(tmp_path: Path, signum: signal.Signals) -> None:
    """The memory case (its conversations never end here): a real proxy, answering."""
    command = [sys.executable, str(BENCHMARKS / "proxy_cases.py"), "--only", "memory", "--conversations", "1000000"]
    with bench_run(tmp_path, command, {"TMPDIR": str(tmp_path)}) as run:
        wait_until(lambda: proxy_answered(run.process), run.process, "proxy_cases' proxy has answered")
        assert len(run.record_servers()) == 1
        run.process.send_signal(signum)
        run.assert_stopped_by(signum)


@needs_qwen3
def test_proxy_cases_stopped_while_a_proxy_starts_stops_it(tmp_path: Path) -> None:
    stopped_while_starting(tmp_path, [sys.executable, str(BENCHMARKS / "proxy_cases.py"), "--tree",
                                      str(never_listening_tree(tmp_path)), "--only", "out_of_the_box"],
                           signal.SIGTERM)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_bench_proxy_store_stopped_while_a_proxy_starts_stops_it(tmp_path: Path, signum: signal.Signals) -> None:
    stopped_while_starting(tmp_path, [sys.executable, str(BENCHMARKS / "bench_proxy_store.py"), "memory",
                                      "--tree", str(never_listening_tree(tmp_path)), "--conversations", "1"], signum)

