"""benchmarks/bench_trajectories.py: ARC against full context only over like calls (review h27 F6)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def test_arc_full_ratio_is_not_printed_over_different_served_calls() -> None:
    """full context served 7 of 23 calls, ARC all 23: the sums cover different calls, so the line says n/a with
    both counts instead of the ratio 2.911 it printed; when both served every call the ratios stay."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "benchmarks"))
        module = importlib.import_module("bench_trajectories")
    arc = {"prompt": 106_511, "prefill": 30_000, "served": 23, "calls": 23, "overhead": 900}
    full = {"prompt": 36_594, "prefill": 36_000, "served": 7, "calls": 23}
    line = module.comparison_line(arc, full, 5, 5)
    assert "arc/full n/a (full served 7/23, arc 23/23: sums over different calls)" in line
    assert "2.911" not in line and "recall byte-exact 5/5" in line
    line = module.comparison_line(arc, {**full, "served": 23}, 5, 5)
    assert "arc/full prompt 2.911, prefill 0.83x" in line
