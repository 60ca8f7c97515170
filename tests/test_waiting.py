"""The test helper that waits on readiness (tests/waiting.py): it returns as soon as the child is ready, fails at
once when the child exits, and scales its ceiling with the machine's load (issue 19)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.waiting as waiting


def test_a_wait_ends_when_the_child_is_ready(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", f"import time, pathlib; time.sleep(0.3); "
                              f"pathlib.Path({str(flag)!r}).touch(); time.sleep(30)"])
    try:
        waited = waiting.wait_until(flag.exists, child, "child", base_s=60)
        assert 0.2 < waited < 30
    finally:
        child.kill()
        child.wait()


def test_a_child_that_exits_fails_the_wait_at_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    started = time.monotonic()
    with pytest.raises(AssertionError, match="exited with status 4 before it was ready"):
        waiting.wait_until(lambda: False, child, "child", base_s=600)
    assert time.monotonic() - started < 60


def test_the_ceiling_scales_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(waiting.os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert waiting.scaled_ceiling(20) == 90.0
    monkeypatch.setattr(waiting.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    assert waiting.scaled_ceiling(20) == 20.0
    with pytest.raises(AssertionError, match="not ready after"):
        waiting.wait_until(lambda: False, None, "nothing", base_s=0.2)
