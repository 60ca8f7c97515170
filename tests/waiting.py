"""Waiting on a child process in tests: on readiness, never on a fixed start-up deadline (issue 19).

Two tests failed under load with 20 s deadlines for `serve-scripted` to come up, on a machine shared by
several engineers (2 cores). A wait here ends as soon as the condition holds, fails at once when the child
exits, and otherwise gives up only after a ceiling scaled with the machine's load (a guard against a hang,
not a performance target).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Callable

import httpx

BASE_CEILING_S = 120.0


def load_factor() -> float:
    """How much busier than idle the machine is: the 1-minute load average per CPU core, at least 1."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without a load average
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def scaled_ceiling(base_s: float = BASE_CEILING_S) -> float:
    """`base_s` scaled with the machine's load (the ceiling of a wait, never the expected time)."""
    return base_s * load_factor()


def wait_until(ready: Callable[[], bool], process: subprocess.Popen[str] | subprocess.Popen[bytes] | None,
               what: str, base_s: float = BASE_CEILING_S, poll_s: float = 0.05) -> float:
    """Poll `ready()` until it holds; fail as soon as `process` has exited or after `scaled_ceiling(base_s)`.
    Returns the seconds waited."""
    start = time.monotonic()
    ceiling = scaled_ceiling(base_s)
    while not ready():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{what}: the process exited with status {process.returncode} before it was ready")
        waited = time.monotonic() - start
        if waited > ceiling:
            raise AssertionError(f"{what}: not ready after {waited:.0f} s (ceiling {ceiling:.0f} s at this load)")
        time.sleep(poll_s)
    return time.monotonic() - start


def http_ok(url: str) -> Callable[[], bool]:
    """A readiness check: `GET url` answers 200."""

    def check() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    return check
