"""benchmarks/bench_proxy.py stopped by SIGTERM, SIGHUP or Ctrl-C stops every server it started, as Ctrl-C does,
and exits with 128 + the signal. Its servers run in sessions of their own, so nothing else stops them: a run
killed with SIGTERM left two proxies and the fake upstream running for 50 minutes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.proxy.harness import needs_qwen3
from tests.waiting import wait_until

pytestmark = needs_qwen3

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_proxy.py"
# a workload that outlasts the test: one agent whose round never ends
ENDLESS = ["--no-litellm", "--rounds", "1", "--concurrency", "1", "--turns", "1000000", "--long-turns", "13"]


@dataclass(frozen=True)
class Process:
    pid: int
    state: str
    parent: int
    session: int
    command: str


def processes() -> list[Process]:
    """Every process of the machine, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, parent, _, session = stat.rsplit(")", 1)[1].split()[:4]
        found.append(Process(int(entry), state, int(parent), int(session), command))
    return found


def servers_of(bench: subprocess.Popen[bytes]) -> list[Process]:
    """The bench's children: the servers it started, each the leader of a session of its own."""
    return [process for process in processes() if process.parent == bench.pid]


def alive_in(sessions: set[int]) -> list[Process]:
    """The processes of these sessions still running (a zombie has stopped)."""
    return [process for process in processes() if process.session in sessions and process.state != "Z"]


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def arc_serving(bench: subprocess.Popen[bytes]) -> bool:
    """The arc-ref proxy (started after the fake upstream listens) answers on its port: the run is measuring."""
    for server in servers_of(bench):
        words = server.command.split()
        if "--upstream" in words and "--port" in words and listening(int(words[words.index("--port") + 1])):
            return True
    return False


def signals_as_by_default() -> None:
    """In the bench's process before it runs: SIGHUP and SIGINT as a terminal's job gets them (the test runner may
    ignore them, e.g. under nohup, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class BenchRun:
    """bench_proxy.py running ENDLESS, and the sessions of its servers once recorded."""

    def __init__(self, tmp_path: Path, options: tuple[str, ...]) -> None:
        self.output = tmp_path / "bench.out"
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen([sys.executable, str(BENCH), *ENDLESS, *options], stdout=out,
                                            stderr=subprocess.STDOUT, preexec_fn=signals_as_by_default)
        self.sessions: set[int] = set()

    def record_servers(self) -> set[int]:
        """The sessions of the servers running now (each server leads its own)."""
        servers = servers_of(self.process)
        assert servers and all(server.session == server.pid for server in servers), servers
        self.sessions = {server.session for server in servers}
        return self.sessions

    def assert_stopped_by(self, signum: int) -> None:
        """The bench exits with 128 + the signal, saying so, and no process of its servers' sessions is left."""
        wait_until(lambda: self.process.poll() is not None, None, "bench_proxy exits", base_s=60)
        at_exit = [process.command[:100] for process in alive_in(self.sessions)]
        wait_until(lambda: not alive_in(self.sessions), None,
                   f"every process of the servers' sessions gone (when the bench exited: {at_exit})", base_s=10)
        said = self.output.read_text(errors="replace")[-2000:]
        assert self.process.returncode == 128 + signum, (self.process.returncode, said)
        assert f"stopped by {signal.Signals(signum).name}" in said, said


@contextlib.contextmanager
def bench_run(tmp_path: Path, *options: str) -> Iterator[BenchRun]:
    """A BenchRun; whatever of it is left on the way out is killed (bench_proxy before the fix left its servers)."""
    run = BenchRun(tmp_path, options)
    try:
        yield run
    finally:
        run.process.kill()
        run.process.wait()
        for session in run.sessions:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)


def never_listening(tmp_path: Path, ignores_term: bool) -> Path:
    """An interpreter for --arc-python whose proxy never listens: it starts a child (in its process group), then
    touches `ready`; with ``ignores_term`` a SIGTERM only touches `terminated`."""
    script = tmp_path / "contender"
    script.write_text(f"""#!{sys.executable}
import signal, subprocess, time
from pathlib import Path
here = Path({str(tmp_path)!r})
if {ignores_term}:
    signal.signal(signal.SIGTERM, lambda signum, frame: (here / "terminated").touch())
subprocess.Popen(["sleep", "600"])
(here / "ready").touch()
while True:
    time.sleep(60)
""")
    script.chmod(0o755)
    return script


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
