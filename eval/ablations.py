"""The paper's ablation sweeps (its Ablation section; eval/METHODS.md): each variant's overrides name options of
the run or of its components (``arc_eval.run_spec.route_settings`` gives each to its one owner)."""

from __future__ import annotations

from typing import Any

from arc_eval.registry import METHODS, option_names

RECALL_BUDGET_SWEEP: dict[str, dict[str, Any]] = {
    "recall=4k/2k": {"recall_budget_chars": 4000, "recall_max_chars": 2000},
    "recall=8k/4k": {"recall_budget_chars": 8000, "recall_max_chars": 4000},
    "recall=16k/8k": {"recall_budget_chars": 16000, "recall_max_chars": 8000},
    "recall=32k/16k": {"recall_budget_chars": 32000, "recall_max_chars": 16000},
}
FORCE_SCHEDULE_SWEEP: dict[str, dict[str, Any]] = {
    "force=5,10,15": {"force_at_calls": [5, 10, 15]},
    "force=5": {"force_at_calls": [5]},
    "force=15": {"force_at_calls": [15]},
    "force=3,6,9,12,15": {"force_at_calls": [3, 6, 9, 12, 15]},
}
NOISE_LINES_SWEEP: dict[str, dict[str, Any]] = {
    f"noise={lines}": {"noise_lines_per_side": lines} for lines in (5, 10, 25, 30)
}
ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "recall-budget": RECALL_BUDGET_SWEEP,
    "force-schedule": FORCE_SCHEDULE_SWEEP,
    "noise-lines": NOISE_LINES_SWEEP,
}


def ablation_methods(sweep: str) -> tuple[str, ...]:
    """The methods a sweep compares by default (the paper's Ablation section; eval/METHODS.md): the methods that
    own an option the sweep varies (the recall budget: ARC alone; every other method would repeat one result per
    level), else every method that compacts (the forced-compaction and fixture-size tables; full context never
    does: ``MethodEntry.compacts``). --methods overrides."""
    varied = {name for params in ABLATIONS[sweep].values() for name in params}
    owners = tuple(entry.name for entry in METHODS.entries() if varied & set(option_names(entry.options)))
    return owners or tuple(entry.name for entry in METHODS.entries() if entry.compacts)
