"""`python examples/mcp_round_trip.py STORE` as the README shows it: the SDK's client stores an output and reads it
back whole, and a second run on the same store works too (review h24 F7: it ended in a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_round_trip.py"


def test_the_mcp_example_runs_twice_on_one_store(tmp_path: Path) -> None:
    for _ in range(2):
        done = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "agent.arc")], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "equal to the output stored, character for character: True" in done.stdout, done.stdout[-500:]
