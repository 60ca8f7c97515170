"""Compactions the needle had to survive: NIH accuracy broken down by what happened between read and answer.

For one task, the count is the number of compaction events recorded on the task's calls after the call
whose action read the needle (``meta.needle_action``; the first such call): a compaction listed on call
c happened before call c, so the ones on later calls happened after the needle was seen and before the
answer. A task whose agent never read the needle has no count (``None``). Each method counts its own
events (ARC folds proactively, baselines compact when forced or over budget), so the breakdown compares
a method with itself across layouts, not methods bucket by bucket.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, Sequence

from attrs import evolve

from arc_eval.schema import CallRecord, TaskKey, TaskRecord

SURVIVAL_KEY = "compactions_survived"
NEVER_READ = "needle never read"


class _Call(Protocol):
    @property
    def call_index(self) -> int: ...

    @property
    def action(self) -> str | None: ...

    @property
    def compactions(self) -> Sequence[object]: ...


def compactions_survived(meta: Mapping[str, object], calls: Iterable[_Call]) -> int | None:
    """Compaction events on the task's calls after the first call whose action read the needle."""
    needle_action = meta.get("needle_action")
    if not isinstance(needle_action, str):
        return None
    ordered = sorted(calls, key=lambda call: call.call_index)
    read = next((call.call_index for call in ordered if call.action is not None
                 and " ".join(call.action.split()) == needle_action), None)
    if read is None:
        return None
    return sum(len(call.compactions) for call in ordered if call.call_index > read)


def survival_bucket(count: int | None) -> str:
    """The report's category: 0 .. 5 one by one, then "6-9", "10+"."""
    if count is None:
        return NEVER_READ
    if count <= 5:
        return str(count)
    return "6-9" if count <= 9 else "10+"


def bucket_order(label: str) -> tuple[int, str]:
    order = [*(str(count) for count in range(6)), "6-9", "10+", NEVER_READ]
    return (order.index(label), label) if label in order else (len(order), label)


def with_survival(tasks: Iterable[TaskRecord], calls: Mapping[TaskKey, Sequence[CallRecord]]) -> list[TaskRecord]:
    """The NIH tasks (those naming their needle's action) with ``meta[SURVIVAL_KEY]``, the bucket of
    compactions the needle survived; other tasks are left out."""
    marked: list[TaskRecord] = []
    for task in tasks:
        if "needle_action" not in task.meta:
            continue
        count = compactions_survived(task.meta, calls.get(task.key, ()))
        marked.append(evolve(task, meta={**task.meta, SURVIVAL_KEY: survival_bucket(count)}))
    return marked
