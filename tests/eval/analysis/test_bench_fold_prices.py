"""benchmarks/bench_trajectories.py --sections prices (issue 26): each cost fold ARC takes on a real trajectory, the
price the cost model put on it (spec/rendering.md 11.1: X, Y of the fold's copy, m * t) beside what the roofline
charged (the same replay with that fold declined)."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from types import ModuleType

import pytest

from arc_ref import machine

REPO = Path(__file__).resolve().parents[3]
TRAJECTORY = "sweagent_function_calling"  # one cost fold at 16k, o200k; its full context fits (issue 26 miss a)


@pytest.fixture(scope="module")
def module() -> ModuleType:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "benchmarks"))
        loaded = importlib.import_module("bench_trajectories")
    if not loaded.DATA_DIR.is_dir():
        pytest.skip(f"no trajectory data at {loaded.DATA_DIR} (it ships in ../shared/data/trajectories)")
    return loaded


def test_each_cost_fold_is_priced_as_the_next_call_shows_it(module: ModuleType) -> None:
    from arc_eval.counting import make_counter

    counter = make_counter("o200k_base", "chatml")
    trajectories = module.load_all(module.DATA_DIR)
    checked = 0
    for trajectory in trajectories:
        taken, watch = module.watched_replay(trajectory, "16k", counter)
        assert machine.fold_decision is module.ORIGINAL_FOLD_DECISION  # the wrapper is gone after the replay
        # the spec's copy test, re-evaluated by the watch, takes exactly the folds the machine took
        assert len(watch.folds) + watch.bound_folds == taken.compactions, trajectory.name
        rows = module.fold_prices(trajectory, "16k", counter)
        assert [row["fold"] for row in rows] == watch.folds
        for row in rows:
            fold = row["fold"]
            # X is what the fold takes off the next prompt, exactly
            assert row["prompt_saved"] == fold.removed, (trajectory.name, fold)
            # Y counts at least what the fold makes the server prefill again (it also counts the newest turn,
            # which the next call prefills either way)
            assert 0 < row["extra_prefill"] <= fold.prefilled, (trajectory.name, fold, row["extra_prefill"])
            assert len(row["later"]) == len(taken.requests) - fold.call
            assert math.isclose(sum(row["terms"].values()), row["delta"], rel_tol=1e-9, abs_tol=1e-12)
            checked += 1
    assert checked >= 5  # these five trajectories take 13 cost folds at 16k, o200k


def test_the_fold_of_miss_a_costs_more_than_it_saves_over_the_calls_left(module: ModuleType) -> None:
    """The one fold of sweagent_function_calling at 16k: priced to repay in a few calls at the agent's rate so far,
    it has only three calls left and they generate a fraction of that rate, so T$ rises (issue 26 miss a)."""
    from arc_eval.counting import make_counter

    counter = make_counter("o200k_base", "chatml")
    trajectory = next(t for t in module.load_all(module.DATA_DIR) if t.name.startswith(TRAJECTORY))
    rows = module.fold_prices(trajectory, "16k", counter)
    assert len(rows) == 1
    row = rows[0]
    fold = row["fold"]
    m = fold.generated / fold.turns
    cost = module.prefill_cost("16k")
    assert cost * fold.prefilled < m * fold.removed * len(row["later"])  # the rule's own rate repays Y in time
    assert sum(row["later"]) < 0.5 * m * len(row["later"])  # the calls left generate less than half of it
    assert row["delta"] > 0  # and the fold costs T$
