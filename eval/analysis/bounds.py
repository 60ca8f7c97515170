"""The bounds each sent call had to keep, checked from its record (review h60 F5): p_k <= L, the method's own
estimate equal to the server's p_k, and (ARC) the estimate within its view budget K.

For every sent call (not an overflow, not an error: ``roofline.is_replayed``) of a finished task:

* ``p_k <= L``: ``prompt_tokens`` against ``prompt_limit`` (L = L_ctx - G_max, recorded per call), or, for a record
  written before that field, the manifest's ``context_limit - max_tokens`` (one value for the group; else unknown);
* ``estimate == p_k``: ``estimated_prompt_tokens`` (the method's own count, made before the call) against
  ``prompt_tokens`` (the server's ``usage.prompt_tokens``); they differ when the run's counter is not the served
  model's (``--tokenizer``), which decides when the method compacts and how large ARC's view may be;
* ``estimate <= K``: against ``view_budget`` (ARC's K; a method with no K has none to check).

A field a record lacks (an older run, a method without ``prompt_estimate``) is counted as not recorded, never as
a pass. Each call that breaks a check is named (run's seed, task, call index, the numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from arc_eval.analysis.accuracy import method_order
from arc_eval.analysis.roofline import is_replayed
from arc_eval.schema import CallRecord, Manifest, TaskKey, TaskRecord


@dataclass(frozen=True, slots=True)
class Breach:
    """One sent call that broke a check: where it is, and its numbers."""

    seed: int
    task_id: str
    call_index: int
    purpose: str
    value: int  # p_k (p_k <= L), the estimate (estimate == p_k, estimate <= K)
    bound: int  # L, p_k, K

    def describe(self, value: str, bound: str) -> str:
        return (f"seed {self.seed} task {self.task_id} call {self.call_index} ({self.purpose}): {value} {self.value:,},"
                f" {bound} {self.bound:,}")


@dataclass(frozen=True, slots=True)
class Check:
    """One check over a method's sent calls: how many held, how many broke it (named), how many could not be
    checked (the record lacks the field)."""

    held: int = 0
    breaches: tuple[Breach, ...] = ()
    not_recorded: int = 0

    @property
    def checked(self) -> int:
        return self.held + len(self.breaches)


@dataclass(frozen=True)
class MethodBounds:
    """The checks of one (task_kind, model, variant, method) over its sent calls."""

    task_kind: str
    model: str
    variant: str
    method: str
    sent: int
    within_limit: Check  # p_k <= L
    estimate_matches: Check  # estimated_prompt_tokens == prompt_tokens
    within_budget: Check  # estimated_prompt_tokens <= view_budget (calls without a K: not_recorded)
    has_budget: bool = field(default=False)  # some call recorded a K (the method keeps one)


def _manifest_limit(manifests: Sequence[Manifest]) -> int | None:
    limits = {m.context_limit - m.max_tokens for m in manifests}
    return limits.pop() if len(limits) == 1 else None


def _check(pairs: Iterable[tuple[CallRecord, int | None, int | None]], holds: str) -> Check:
    held, breaches, missing = 0, [], 0
    for call, value, bound in pairs:
        if value is None or bound is None:
            missing += 1
        elif (value <= bound) if holds == "<=" else (value == bound):
            held += 1
        else:
            breaches.append(Breach(call.seed, call.task_id, call.call_index, call.purpose, value, bound))
    return Check(held, tuple(breaches), missing)


def method_bounds(
    tasks: Iterable[TaskRecord],
    calls: Mapping[TaskKey, Sequence[CallRecord]],
    manifest_limit: Mapping[tuple[str, str, str], int | None] | None = None,
) -> list[MethodBounds]:
    """The checks per (task_kind, model, variant, method), over the sent calls of its finished tasks;
    ``manifest_limit`` maps (task_kind, model, variant) to the manifests' L for records without ``prompt_limit``."""
    groups: dict[tuple[str, str, str, str], list[CallRecord]] = {}
    for task in tasks:
        sent = [call for call in calls.get(task.key, ()) if is_replayed(call)]
        groups.setdefault((task.task_kind, task.model, task.variant, task.method), []).extend(sent)
    rows = []
    for kind, model, variant, method in sorted(groups, key=lambda g: (g[0], g[1], g[2], method_order(g[3]))):
        sent = groups[(kind, model, variant, method)]
        fallback = (manifest_limit or {}).get((kind, model, variant))
        rows.append(MethodBounds(
            task_kind=kind, model=model, variant=variant, method=method, sent=len(sent),
            within_limit=_check(((c, c.prompt_tokens, c.prompt_limit if c.prompt_limit is not None else fallback)
                                 for c in sent), "<="),
            estimate_matches=_check(((c, c.estimated_prompt_tokens, c.prompt_tokens) for c in sent), "=="),
            within_budget=_check(((c, c.estimated_prompt_tokens, c.view_budget) for c in sent), "<="),
            has_budget=any(c.view_budget is not None for c in sent),
        ))
    return rows


def manifest_limits(manifests: Mapping[tuple[str, str, str], Sequence[Manifest]]) -> dict[tuple[str, str, str], int | None]:
    """(task_kind, model, variant) -> the one L of its manifests (None when they differ or there is none)."""
    return {key: _manifest_limit(found) for key, found in manifests.items()}
