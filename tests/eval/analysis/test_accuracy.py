"""Accuracy with no-answer counts across seeds, recounted by hand from the synthetic task lines."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs
import pytest

from arc_eval.analysis.accuracy import accuracy_rows, mean_and_sd, summary_table
from arc_eval.analysis.load import load_run
from arc_eval.schema import TaskRecord

from .synthetic_runs import RunSpec, write_run


def _recount(truth: list[dict[str, Any]], key: str | None) -> dict[tuple[str, str, str], dict[int, list[int]]]:
    out: dict[tuple[str, str, str], dict[int, list[int]]] = defaultdict(dict)
    for t in truth:
        category = "all" if key is None else t["meta"][key]
        c = out[(t["variant"], t["method"], category)].setdefault(t["seed"], [0, 0, 0])
        c[0] += 1
        c[1] += t["correct"]
        c[2] += t["no_answer"]
    return out


@pytest.mark.parametrize("breakdown,key", [("overall", None), ("length", "length"), ("domain", "domain")])
def test_rows_match_a_hand_recount(tmp_path: Path, breakdown: str, key: str | None) -> None:
    spec = RunSpec(task_kind="longbench", seeds=(42, 82, 122), tasks_per_seed=8, variants={"a": {}, "b": {"x": 1}})
    truth = write_run(tmp_path / "lb", spec)
    rows = accuracy_rows(load_run(tmp_path / "lb").tasks, breakdown)
    expected = _recount(truth, key)
    assert len(rows) == len(expected)
    for r in rows:
        per_seed = expected[(r.variant, r.method, r.category)]
        assert [(s.seed, s.attempts, s.passes, s.no_answers) for s in r.per_seed] == [
            (seed, *per_seed[seed]) for seed in sorted(per_seed)
        ]
        accs = [per_seed[s][1] / per_seed[s][0] for s in sorted(per_seed)]
        assert r.attempts == sum(v[0] for v in per_seed.values())
        assert r.passes == sum(v[1] for v in per_seed.values())
        assert r.mean_pass == pytest.approx(statistics.mean(v[1] for v in per_seed.values()))
        assert r.mean_no_answer == pytest.approx(statistics.mean(v[2] for v in per_seed.values()))
        assert r.mean_accuracy == pytest.approx(statistics.mean(accs))
        if len(accs) > 1:
            assert r.sd_accuracy == pytest.approx(statistics.stdev(accs))
        assert r.fails == r.attempts - r.passes
        assert r.pooled_accuracy == pytest.approx(r.passes / r.attempts)


def test_methods_come_in_the_papers_order(tmp_path: Path) -> None:
    write_run(
        tmp_path / "r", RunSpec(methods=("arc", "rag_memory", "full_context", "sliding_window"), tasks_per_seed=2)
    )
    rows = accuracy_rows(load_run(tmp_path / "r").tasks)
    assert [r.method for r in rows] == ["full_context", "sliding_window", "rag_memory", "arc"]


def test_nih_has_no_length_or_domain_breakdown(nih_run: Path) -> None:
    tasks = load_run(nih_run).tasks
    assert accuracy_rows(tasks, "domain") == [] and accuracy_rows(tasks, "length") == []
    with pytest.raises(ValueError):
        accuracy_rows(tasks, "colour")


def test_single_seed_has_undefined_sd(tmp_path: Path) -> None:
    write_run(tmp_path / "r", RunSpec(seeds=(7,), tasks_per_seed=3))
    rows = accuracy_rows(load_run(tmp_path / "r").tasks)
    assert all(r.sd_accuracy is None for r in rows)
    assert mean_and_sd([0.5]) == (0.5, None)


@pytest.mark.parametrize("passes", [2970, 2994])
def test_the_paper_uses_the_sample_sd(passes: int) -> None:
    """Needle table: ARC 2970/3000 and 2994/3000 with 'SD Acc 0.17%' over three seeds of 1000 tasks.

    No split of the passes into three integer per-seed counts gives 0.17 with the population SD;
    the sample SD (n - 1) does (e.g. 991, 991, 988). So SD Acc uses n - 1, as `mean_and_sd` does.
    """
    mean = passes // 3

    def rounded_sds(ddof: int) -> set[str]:
        found = set()
        for c1 in range(mean - 6, mean + 7):
            for c2 in range(mean - 6, mean + 7):
                accs = [c / 10 for c in (c1, c2, passes - c1 - c2)]  # per-seed accuracy in %
                m = sum(accs) / 3
                found.add(f"{(sum((a - m) ** 2 for a in accs) / (3 - ddof)) ** 0.5:.2f}")
        return found

    assert "0.17" in rounded_sds(ddof=1)
    assert "0.17" not in rounded_sds(ddof=0)
    sd = mean_and_sd([(mean + 1) / 10, (mean + 1) / 10, (mean - 2) / 10])[1]
    assert sd is not None and f"{sd:.2f}" == "0.17"


def test_summary_table_layout() -> None:
    """The plain table `arc-eval` prints after a run: paper order of methods, pooled accuracy, re-executions."""
    outcomes = [("arc", True, 0), ("arc", True, 1), ("sliding_window", False, 2), ("sliding_window", True, 0)]
    tasks = [
        TaskRecord(variant="", method=method, model="m", task_kind="nih", task_id=f"t{index}", seed=1,
                   submitted=correct, no_answer=not correct, correct=correct, submission=None,
                   end="submitted" if correct else "step_limit", error=None, calls=1, steps=1,
                   reexecutions=reexecutions, meta={})
        for index, (method, correct, reexecutions) in enumerate(outcomes)
    ]  # fmt: skip
    table = summary_table(tasks).splitlines()
    assert table[0].split() == ["variant", "method", "pass/attempts", "no-answer", "overflow", "accuracy",
                                "re-executions"]
    assert table[2].split() == ["-", "sliding_window", "1/2", "1", "0", "50.00%", "2"]
    assert table[3].split() == ["-", "arc", "2/2", "0", "0", "100.00%", "1"]
    overflowed = [attrs.evolve(tasks[2], end="overflow"), *tasks[3:]]  # review h10 MINOR-3: told apart
    assert summary_table(overflowed).splitlines()[2].split() == ["-", "sliding_window", "1/2", "1", "1", "50.00%", "2"]
    assert summary_table([]) == "no finished task in this run"
