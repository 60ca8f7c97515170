"""A benchmark stopped by SIGTERM, SIGHUP or Ctrl-C stops every process it started and exits with 128 + the signal
(benchmarks/servers.py): one run in a subprocess, the processes it started read from /proc, and that check."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.waiting import wait_until


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


def descendants_of(pid: int) -> list[Process]:
    """The processes ``pid`` started, those they started, and so on (while they are its descendants)."""
    every = processes()
    found: list[Process] = []
    parents = {pid}
    while parents:
        more = [process for process in every if process.parent in parents]
        found += more
        parents = {process.pid for process in more}
    return found


def alive_in(sessions: set[int]) -> list[Process]:
    """The processes of these sessions still running (a zombie has stopped)."""
    return [process for process in processes() if process.session in sessions and process.state != "Z"]


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def signals_as_by_default() -> None:
    """In the bench's process before it runs: SIGHUP and SIGINT as a terminal's job gets them (the test runner may
    ignore them, e.g. under nohup, and an ignored signal stays ignored across exec)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class BenchRun:
    """A benchmark's ``command`` running (``env`` added to the environment), and the sessions of its servers, or
    every process it started, once recorded."""

    def __init__(self, tmp_path: Path, command: list[str], env: dict[str, str] | None = None) -> None:
        self.output = tmp_path / "bench.out"
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            env={**os.environ, **(env or {})}, preexec_fn=signals_as_by_default)
        self.sessions: set[int] = set()
        self.started: set[int] = set()

    def record_servers(self) -> set[int]:
        """The sessions of the servers running now (each server leads its own)."""
        servers = servers_of(self.process)
        assert servers and all(server.session == server.pid for server in servers), servers
        self.sessions = {server.session for server in servers}
        return self.sessions

    def record_started(self) -> list[Process]:
        """Every process the bench has started and that runs now (its descendants, in a session of their own or
        in the bench's), and the sessions of those that lead one."""
        started = [process for process in descendants_of(self.process.pid) if process.state != "Z"]
        self.started = {process.pid for process in started}
        self.sessions = {process.session for process in started if process.session == process.pid}
        return started

    def left(self) -> list[Process]:
        """What runs of the servers' sessions and of the processes recorded (a zombie has stopped)."""
        return [process for process in processes() if process.state != "Z"
                and (process.session in self.sessions or process.pid in self.started)]

    def assert_stopped_by(self, signum: int) -> None:
        """The bench exits with 128 + the signal, saying so, and nothing of its servers' sessions, nor any process
        recorded, is left."""
        try:
            wait_until(lambda: self.process.poll() is not None, None, "the benchmark exits", base_s=60)
        except AssertionError as problem:  # where it is: its threads' stacks (benchmarks/servers.py, SIGUSR1)
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(f"{problem}; its output's end, with every thread's stack:\n"
                                 f"{self.output.read_text(errors='replace')[-6000:]}") from None
        at_exit = [process.command[:100] for process in self.left()]
        wait_until(lambda: not self.left(), None, "every process of the servers' sessions and every one recorded"
                   f" gone (when the bench exited: {at_exit})", base_s=10)
        said = self.output.read_text(errors="replace")[-2000:]
        assert self.process.returncode == 128 + signum, (self.process.returncode, said)
        assert f"stopped by {signal.Signals(signum).name}" in said, said


@contextlib.contextmanager
def bench_run(tmp_path: Path, command: list[str], env: dict[str, str] | None = None) -> Iterator[BenchRun]:
    """A BenchRun; whatever of it is left on the way out is killed (a bench that left its servers)."""
    run = BenchRun(tmp_path, command, env)
    try:
        yield run
    finally:
        unrecorded = descendants_of(run.process.pid)  # a test that failed before it recorded them
        run.process.kill()
        run.process.wait()
        for session in run.sessions:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)
        for process in [*run.left(), *unrecorded]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


def stopped_while_starting(tmp_path: Path, command: list[str], signum: int, env: dict[str, str] | None = None) -> None:
    """``command`` started (``env`` added, TMPDIR in tmp_path), its stand-in server (never_listening) ready with its
    child, then ``signum`` to the bench's pid: the bench exits 128 + the signal and neither is left."""
    with bench_run(tmp_path, command, {"TMPDIR": str(tmp_path), **(env or {})}) as run:
        wait_until((tmp_path / "ready").exists, run.process, "the stand-in server has started its child")
        started = run.record_started()
        assert len(started) == 2, started  # the stand-in server and its child
        run.process.send_signal(signum)
        run.assert_stopped_by(signum)


def never_listening(tmp_path: Path, ignores_term: bool, path: Path | None = None, prelude: str = "") -> Path:
    """An interpreter for --arc-python whose proxy never listens: it starts a child (in its process group), then
    touches `ready`; with ``ignores_term`` a SIGTERM only touches `terminated`. Written to ``path`` (an executable
    script that is also a module; default: tmp_path/contender), ``prelude`` (Python) run first."""
    script = path or tmp_path / "contender"
    script.write_text(f"""#!{sys.executable}
import signal, subprocess, sys, time
from pathlib import Path
{prelude}
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


HOLDING = """#!{python}
import http.server, json, signal, subprocess, sys, time
from pathlib import Path
{prelude}
port = int(sys.argv[sys.argv.index("--port") + 1])
PROBE = {{"id": "p", "object": "chat.completion", "created": 0, "model": "tiny", "choices": [{{"index": 0,
         "message": {{"role": "assistant", "content": "x"}}, "finish_reason": "length"}}]}}


class Holding(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.end_headers()
        elif {answers_probe} and self.path == "/v1/models":
            self.answer({{"object": "list", "data": [{{"id": "tiny", "object": "model"}}]}})
        else:
            self.hold()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{{}}")
        if {answers_probe} and body.get("max_tokens") == 1:
            self.answer(PROBE)
        else:
            self.hold()

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def hold(self):
        Path({here!r}, "asked").touch()
        time.sleep(600)

    def log_message(self, *arguments):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Holding).serve_forever()
"""


def holding(tmp_path: Path, path: Path, prelude: str = "", answers_probe: bool = False) -> Path:
    """A server (an executable script at ``path``, ``prelude`` run first) for ``--port N`` that answers GET /health
    and holds every other request, touching `asked` in tmp_path: a benchmark's client is then waiting on it. With
    ``answers_probe`` it also answers arc-eval's checks before its first task (GET /v1/models, a 1-token
    completion), so that arc-eval is running its tasks when it waits."""
    path.write_text(HOLDING.format(python=sys.executable, prelude=prelude, here=str(tmp_path),
                                   answers_probe=answers_probe))
    path.chmod(0o755)
    return path
