"""The servers a benchmark starts, each in a session of its own, and how a run stopped by a signal stops them.

A server in a session of its own gets no signal meant for the benchmark (a terminal's Ctrl-C or hang-up, a
SIGTERM to the benchmark's pid), so the benchmark stops it. ``SERVERS.stop_on_signals()`` makes SIGTERM, SIGHUP
and SIGINT unwind the run as Ctrl-C does (``Stopped``, a KeyboardInterrupt), through the ``finally`` blocks that
stop each server; ``run(main, name)`` then exits with 128 + the signal, and kills whatever a cleanup cut short
left behind. Every script of benchmarks/ goes through ``run``, whether it starts a server or not, so that a signal
ends each one the same way (tests/test_benchmark_signals.py checks each one's ``__main__`` block).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator, Sequence


class Stopped(KeyboardInterrupt):
    """SIGTERM, SIGHUP or Ctrl-C: the run unwinds as on Ctrl-C, stopping its servers, and exits 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Servers:
    """The servers started and not yet reaped, by process group (each runs in a session of its own, so a signal to
    the bench reaches none of them). The first SIGTERM, SIGHUP or SIGINT raises Stopped and the run's `finally` blocks
    stop each server in turn; a later one kills every group left at once, so a second signal never cuts that cleanup
    short with a server left behind."""

    def __init__(self) -> None:
        self.running: dict[int, subprocess.Popen[Any]] = {}
        self.signals: list[int] = []
        self.starting = False  # while a server starts, a signal waits until its group is recorded
        self.closing = False

    def stop_on_signals(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if signal.getsignal(signum) is not signal.SIG_IGN:  # one left ignored (nohup, a background job) stays so
                signal.signal(signum, self.on_signal)
        # SIGUSR1: every thread's stack to stderr, the run going on (tests/stopping.py asks for it when a bench does
        # not stop on a signal: one such run in a CI, not reproduced since; closing note 24)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        sys.unraisablehook = self.unraisable_hook(sys.unraisablehook)

    def unraisable_hook(self, previous: Callable[[Any], object]) -> Callable[[Any], None]:
        """``sys.unraisablehook`` that delivers again a Stopped raised inside a finalizer: a signal whose handler ran
        while Python code of a weakref callback or a ``__del__`` ran (asyncio's set of tasks drops each finished
        task so) raised it there, where Python prints and ignores every exception, and the run went on as if no
        signal had come (bench_fork_burst under asyncio once did not stop on Ctrl-C in 106 s). The signal is sent
        again shortly, from another thread, so that its handler runs in the run's own code; counted as the
        first."""

        def hook(unraisable: Any) -> None:
            stopped = unraisable.exc_value
            if not isinstance(stopped, Stopped) or self.closing or stopped.signum not in self.signals:
                previous(unraisable)
                return
            self.signals.remove(stopped.signum)
            again = threading.Timer(0.05, os.kill, (os.getpid(), stopped.signum))
            again.daemon = True
            again.start()

        return hook

    def on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)
        if len(self.signals) > 1 or self.closing:
            self.kill_left()
        elif not self.starting:
            raise Stopped(signum)

    def start(self, command: Sequence[str], **options: Any) -> subprocess.Popen[Any]:
        """The server's process (Popen's ``options``, in a session of its own), recorded before a signal can stop
        the run (one that comes meanwhile is raised by raise_if_stopped)."""
        self.starting = True
        try:
            process: subprocess.Popen[Any] = subprocess.Popen(list(command), **options, start_new_session=True)
            self.running[process.pid] = process
        finally:
            self.starting = False
        return process

    def raise_if_stopped(self) -> None:
        if self.signals:
            raise Stopped(self.signals[0])

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """A block that starts a server this module does not (tests/deployment.py's HAProxy, a proxy) and hands it
        to the caller's cleanup: a signal meanwhile is raised once the block is done, so the server is never
        started and lost."""
        self.starting = True
        try:
            yield
        finally:
            self.starting = False
        self.raise_if_stopped()

    def stop(self, process: subprocess.Popen[Any], grace_s: float = 20) -> None:
        """SIGTERM to the server's group, SIGKILL after ``grace_s``."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(20)
        self.running.pop(process.pid, None)

    def kill_left(self) -> None:
        """SIGKILL to every group not yet reaped (a cleanup cut short, or a second signal)."""
        for group in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)

    def close(self) -> None:
        """On the way out: whatever a cleanup cut short left is killed and reaped."""
        self.closing = True
        self.kill_left()
        for process in list(self.running.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(20)


SERVERS = Servers()


def run(main: Callable[[], int | None], name: str) -> int:
    """main() (None: 0); stopped by a signal, its status is 128 + the signal, every server it started stopped."""
    try:
        return main() or 0
    except Stopped as stopped:
        with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) takes no more lines
            sys.stdout.flush()  # what was printed before comes first where both streams go to one file
        with contextlib.suppress(OSError):
            print(f"{name}: stopped by {stopped}", file=sys.stderr, flush=True)
        return 128 + stopped.signum
    finally:
        SERVERS.close()
