"""Accuracy with no-answer counts across seeds (paper Tables "LongBench-v2" and "Needle-in-a-haystack").

Per (variant, model, task_kind, method) and, for LongBench-v2, per `meta.length` and `meta.domain`:

- Pass / Attempts: correct tasks / finished tasks, pooled over seeds;
- Mean No-Ans, Mean Pass: mean over seeds of the per-seed counts;
- Mean Acc, SD Acc: mean and *sample* standard deviation (n - 1) over seeds of the per-seed
  accuracy passes_s / attempts_s. The sample SD is the one that reproduces the paper's tables:
  see ANALYSIS.md ("Which SD") and `tests/eval/analysis/test_paper_numbers.py`.

`summary_table` is the plain-text table `arc-eval` prints at the end of a run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from arc_eval.errors import InvalidInput
from arc_eval.analysis.survival import SURVIVAL_KEY, bucket_order
from arc_eval.methods import method_names
from arc_eval.schema import TaskRecord

BREAKDOWNS = ("overall", "length", "domain", SURVIVAL_KEY)
LENGTH_ORDER = ("short", "medium", "long")


def mean_and_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample SD (n - 1); the SD is None for fewer than two values (undefined)."""
    if not values:
        raise InvalidInput("mean of no values")
    mean = math.fsum(values) / len(values)
    sd = statistics.stdev(values) if len(values) >= 2 else None
    return mean, sd


def method_order(method: str) -> tuple[int, str]:
    """Sort key: the registered methods' order (``MethodEntry.order``), unknown methods after, alphabetically."""
    known = method_names()
    return (known.index(method), "") if method in known else (len(known), method)


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    """Counts of one seed of one group."""

    seed: int
    attempts: int
    passes: int
    no_answers: int
    reexecutions: int = 0

    @property
    def accuracy(self) -> float:
        return self.passes / self.attempts


@dataclass(frozen=True, slots=True)
class AccuracyRow:
    """One row of the accuracy table: a method within (variant, model, task_kind), maybe one category."""

    variant: str
    model: str
    task_kind: str
    method: str
    breakdown: str  # "overall" | "length" | "domain"
    category: str  # "all" for overall, else the meta value
    per_seed: tuple[SeedOutcome, ...]

    @property
    def attempts(self) -> int:
        return sum(s.attempts for s in self.per_seed)

    @property
    def passes(self) -> int:
        return sum(s.passes for s in self.per_seed)

    @property
    def no_answers(self) -> int:
        return sum(s.no_answers for s in self.per_seed)

    @property
    def reexecutions(self) -> int:
        return sum(s.reexecutions for s in self.per_seed)

    @property
    def fails(self) -> int:
        """Attempts that did not pass (wrong answers and no-answers), the ablation tables' "Fail"."""
        return self.attempts - self.passes

    @property
    def pooled_accuracy(self) -> float:
        """Success / (Success + Fail), the ablation tables' accuracy."""
        return self.passes / self.attempts

    @property
    def mean_no_answer(self) -> float:
        return mean_and_sd([float(s.no_answers) for s in self.per_seed])[0]

    @property
    def mean_pass(self) -> float:
        return mean_and_sd([float(s.passes) for s in self.per_seed])[0]

    @property
    def mean_accuracy(self) -> float:
        return mean_and_sd([s.accuracy for s in self.per_seed])[0]

    @property
    def sd_accuracy(self) -> float | None:
        return mean_and_sd([s.accuracy for s in self.per_seed])[1]


def _category(task: TaskRecord, breakdown: str) -> str | None:
    if breakdown == "overall":
        return "all"
    value = task.meta.get(breakdown)
    if value is None:
        return None
    return str(value)


def _category_order(breakdown: str) -> Callable[[str], tuple[int, str]]:
    def key(value: str) -> tuple[int, str]:
        if breakdown == "length" and value in LENGTH_ORDER:
            return (LENGTH_ORDER.index(value), value)
        if breakdown == SURVIVAL_KEY:
            return bucket_order(value)
        return (len(LENGTH_ORDER), value)

    return key


def accuracy_rows(tasks: Iterable[TaskRecord], breakdown: str = "overall") -> list[AccuracyRow]:
    """Accuracy rows per (variant, model, task_kind, method[, category]) in table order.

    For `breakdown` "length" / "domain", tasks without that meta field are left out (NIH tasks
    have neither); a seed with no attempt in a category does not count towards its means.
    """
    if breakdown not in BREAKDOWNS:
        raise InvalidInput(f"breakdown must be one of {BREAKDOWNS}, not {breakdown!r}")
    counts: dict[tuple[str, str, str, str, str], dict[int, list[int]]] = {}
    for task in tasks:
        category = _category(task, breakdown)
        if category is None:
            continue
        group = (task.task_kind, task.model, task.variant, task.method, category)
        per_seed = counts.setdefault(group, {})
        c = per_seed.setdefault(task.seed, [0, 0, 0, 0])
        c[0] += 1
        c[1] += int(task.correct)
        c[2] += int(task.no_answer)
        c[3] += task.reexecutions
    order = _category_order(breakdown)
    keys = sorted(counts, key=lambda g: (g[0], g[1], g[2], order(g[4]), method_order(g[3])))
    rows = []
    for kind, model, variant, method, category in keys:
        per_seed = counts[(kind, model, variant, method, category)]
        rows.append(
            AccuracyRow(
                variant=variant,
                model=model,
                task_kind=kind,
                method=method,
                breakdown=breakdown,
                category=category,
                per_seed=tuple(SeedOutcome(seed, *per_seed[seed]) for seed in sorted(per_seed)),
            )
        )
    return rows


def summary_table(tasks: Iterable[TaskRecord], variants: Sequence[str] = ()) -> str:
    """The table `arc-eval` prints after a run: per (variant, method) pass/attempts, no-answer (and how many of them
    ended because the prompt overflowed the window), accuracy, re-executions. ``variants``: the manifest's variant
    labels, in the order the rows follow (as the report's; others after them, by label)."""
    rows = [("variant", "method", "pass/attempts", "no-answer", "overflow", "accuracy", "re-executions")]
    tasks_seen = list(tasks)
    overflows: dict[tuple[str, str, str, str], int] = {}
    for task in tasks_seen:
        if task.end == "overflow":
            key = (task.task_kind, task.model, task.variant, task.method)
            overflows[key] = overflows.get(key, 0) + 1
    rank = {label: index for index, label in enumerate(variants)}
    ordered = sorted(accuracy_rows(tasks_seen), key=lambda r: (r.task_kind, r.model, rank.get(r.variant, len(rank))))
    for group in ordered:
        overflowed = overflows.get((group.task_kind, group.model, group.variant, group.method), 0)
        rows.append(
            (group.variant or "-", group.method, f"{group.passes}/{group.attempts}", str(group.no_answers),
             str(overflowed), f"{100.0 * group.passes / group.attempts:.2f}%", str(group.reexecutions))
        )  # fmt: skip
    if len(rows) == 1:
        return "no finished task in this run"
    note = mechanism_note({task.model for task in tasks_seen})
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [cell.rjust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines.append("overflow: of the no-answers, the tasks whose prompt outgrew the window (the method could not go on).")
    if note is not None:
        lines.append(note)
    return "\n".join(lines)


def mechanism_note(models: Iterable[str]) -> str | None:
    """The line every table of scripted-agent figures carries (None when no model is the scripted agent)."""
    scripted = sorted(model for model in set(models) if model.startswith("scripted"))
    if not scripted:
        return None
    return (f"{', '.join(scripted)}: the deterministic scripted agent (eval/METHODS.md). These figures are a "
            "mechanism check of what each method keeps recoverable, not a model's accuracy.")
