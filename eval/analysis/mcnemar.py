"""Paired McNemar tests, ARC against each baseline (paper eq. 3, Tables "McNemar test ...").

For two methods A and B run on the same tasks (pairing key `(variant, model, task_kind, seed,
task_id)`), each pair falls in one cell: A-only (A succeeds, B fails), B-only, both, neither.
"Succeeds" is either *correct* (answer quality) or *submitted* (completion: an accepted
submission vs no answer); the paper applies the test to both.

Decisions (ANALYSIS.md, "McNemar"):
- statistic: continuity-corrected chi^2 = max(|a - b| - 1, 0)^2 / (a + b), one degree of freedom.
  statsmodels does not clip at 0, so for a = b it reports 1/(2a) (p < 1) and for a = b = 0 it
  divides by zero (inf, p = 0). The correction is meant to shrink |a - b| towards 0, never past it,
  so we clip: a = b gives statistic 0 and p = 1; no discordant pair gives statistic 0 and p = 1.
- exact p-value: two-sided binomial, min(1, 2 P(X <= min(a, b))), X ~ Bin(a + b, 1/2), computed
  exactly with integers (or in log space for very large counts) and kept as log10, so that tiny
  values (1882 vs 16: about 1e-532) do not underflow to 0. The one-sided value in the observed
  direction, P(X <= min(a, b)), is kept too: it is what the paper's "Exact p-val" column prints
  (half the two-sided value in every row we checked; see ANALYSIS.md).
- odds ratio a/b: inf when b = 0 < a, undefined (None) when a = b = 0.
- per-seed odds: mean and sample SD of a_s/b_s over the seeds with b_s > 0 (finite ratio);
  "Dis. Seeds" in the paper counts exactly those seeds. The number of seeds with any discordant
  pair is reported as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from arc_eval.errors import InvalidInput
from arc_eval.analysis.accuracy import mean_and_sd, method_order
from arc_eval.schema import PairKey, TaskRecord

OUTCOMES = ("correct", "submitted")
# Up to this many discordant pairs the binomial tail is summed exactly in integers.
EXACT_INTEGER_LIMIT = 20_000
_LOG10_2 = math.log10(2.0)


@dataclass(frozen=True, slots=True, order=True)
class PValue:
    """A p-value kept as log10(p) so that values far below 1e-308 stay exact enough to print."""

    log10: float

    def __post_init__(self) -> None:
        if not self.log10 <= 0.0:
            raise InvalidInput(f"a p-value is at most 1 (log10 {self.log10})")

    @classmethod
    def one(cls) -> PValue:
        return cls(0.0)

    @property
    def value(self) -> float:
        """p as a float (0.0 when it is below the smallest double)."""
        return 10.0**self.log10 if self.log10 > -400 else 0.0

    def mantissa_exponent(self, digits: int = 3) -> tuple[float, int]:
        """(m, e) with p = m x 10^e, 1 <= m < 10, m rounded to `digits` significant digits."""
        exponent = math.floor(self.log10)
        mantissa = round(10.0 ** (self.log10 - exponent), digits - 1)
        if mantissa >= 10.0:
            mantissa, exponent = mantissa / 10.0, exponent + 1
        return mantissa, exponent

    def format(self, digits: int = 3, tex: bool = False) -> str:
        """'1', '0.0421' or '2.00e-05' ('$2.00 \\times 10^{-5}$' in LaTeX)."""
        if self.log10 == 0.0:
            return "1"
        if self.log10 >= -3.0:
            return f"{self.value:.{digits}g}"
        mantissa, exponent = self.mantissa_exponent(digits)
        if tex:
            return f"${mantissa:.{digits - 1}f} \\times 10^{{{exponent}}}$"
        return f"{mantissa:.{digits - 1}f}e{exponent:+03d}"

    def __str__(self) -> str:
        return self.format()


def binomial_lower_tail_log10(k: int, n: int) -> float:
    """log10 P(X <= k) for X ~ Bin(n, 1/2).

    Exact integer arithmetic up to EXACT_INTEGER_LIMIT trials: sum_{j<=k} C(n, j) / 2^n, with
    C(n, j+1) = C(n, j) (n - j) / (j + 1); log10 of a Python int is accurate to double precision.
    Above the limit: the same sum in log space (lgamma), accurate to about 1e-9 relative.
    """
    if n < 0 or k < 0:
        raise InvalidInput("k and n must be non-negative")
    if k >= n:
        return 0.0
    if n <= EXACT_INTEGER_LIMIT:
        term = 1
        total = 1
        for j in range(k):
            term = term * (n - j) // (j + 1)
            total += term
        return min(0.0, math.log10(total) - n * _LOG10_2)
    log_terms = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in range(k + 1)]
    top = max(log_terms)
    log_sum = top + math.log(math.fsum(math.exp(t - top) for t in log_terms))
    return min(0.0, (log_sum - n * math.log(2.0)) / math.log(10.0))


def exact_p_two_sided(a: int, b: int) -> PValue:
    """Two-sided exact binomial p-value of McNemar's test: min(1, 2 P(X <= min(a, b)))."""
    n = a + b
    if n == 0:
        return PValue.one()
    return PValue(min(0.0, _LOG10_2 + binomial_lower_tail_log10(min(a, b), n)))


def exact_p_one_sided(a: int, b: int) -> PValue:
    """One-sided exact p-value in the observed direction, P(X <= min(a, b)): the paper's column."""
    n = a + b
    if n == 0:
        return PValue.one()
    return PValue(binomial_lower_tail_log10(min(a, b), n))


def _log_erfc(z: float) -> float:
    """Natural log of erfc(z) for z >= 0, without underflow for large z (asymptotic series)."""
    if z < 25.0:
        return math.log(math.erfc(z))
    # erfc(z) = exp(-z^2) / (z sqrt(pi)) * (1 + sum_k (-1)^k (2k-1)!! / (2 z^2)^k)
    series = 1.0
    term = 1.0
    two_z2 = 2.0 * z * z
    for k in range(1, 30):
        term *= -(2 * k - 1) / two_z2
        series += term
        if abs(term) < 1e-18:
            break
    return -z * z - math.log(z) - 0.5 * math.log(math.pi) + math.log(series)


def corrected_statistic(a: int, b: int) -> float:
    """Continuity-corrected McNemar statistic max(|a - b| - 1, 0)^2 / (a + b); 0 when a + b = 0."""
    n = a + b
    if n == 0:
        return 0.0
    return max(abs(a - b) - 1, 0) ** 2 / n


def chi2_p(statistic: float) -> PValue:
    """Upper tail of chi^2 with one degree of freedom: P(chi^2_1 > x) = erfc(sqrt(x / 2))."""
    if statistic <= 0.0:
        return PValue.one()
    return PValue(min(0.0, _log_erfc(math.sqrt(statistic / 2.0)) / math.log(10.0)))


def odds_ratio(a: int, b: int) -> float | None:
    """a / b; inf when b = 0 < a; None (undefined) when a = b = 0."""
    if b > 0:
        return a / b
    return math.inf if a > 0 else None


@dataclass(frozen=True, slots=True)
class McNemarResult:
    """The 2x2 paired table of A vs B and its tests."""

    a_only: int
    b_only: int
    both: int
    neither: int
    statistic: float
    chi2_p: PValue
    exact_p: PValue
    exact_p_one_sided: PValue

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only

    @property
    def pairs(self) -> int:
        return self.a_only + self.b_only + self.both + self.neither

    @property
    def odds_ratio(self) -> float | None:
        return odds_ratio(self.a_only, self.b_only)


def mcnemar_test(a_only: int, b_only: int, both: int = 0, neither: int = 0) -> McNemarResult:
    """McNemar's test on paired counts (paper eq. 3), with the edge cases decided above."""
    for name, value in (("a_only", a_only), ("b_only", b_only), ("both", both), ("neither", neither)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")
    statistic = corrected_statistic(a_only, b_only)
    return McNemarResult(
        a_only=a_only,
        b_only=b_only,
        both=both,
        neither=neither,
        statistic=statistic,
        chi2_p=chi2_p(statistic),
        exact_p=exact_p_two_sided(a_only, b_only),
        exact_p_one_sided=exact_p_one_sided(a_only, b_only),
    )


@dataclass(frozen=True, slots=True)
class PerSeedOdds:
    """Per-seed odds ratios a_s / b_s summarised over seeds.

    `kind` is "finite" (mean over the seeds with b_s > 0), "inf" (no seed has b_s > 0 but some
    has a_s > 0) or "undefined" (no discordant pair in any seed).
    """

    kind: str
    mean: float | None
    sd: float | None
    finite_seeds: int
    discordant_seeds: int
    seeds: int


def per_seed_odds(per_seed: Iterable[McNemarResult]) -> PerSeedOdds:
    results = list(per_seed)
    finite = [r.a_only / r.b_only for r in results if r.b_only > 0]
    discordant = sum(1 for r in results if r.discordant > 0)
    if finite:
        mean, sd = mean_and_sd(finite)
        return PerSeedOdds("finite", mean, sd, len(finite), discordant, len(results))
    kind = "inf" if any(r.a_only > 0 for r in results) else "undefined"
    return PerSeedOdds(kind, None, None, 0, discordant, len(results))


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """McNemar of method A vs method B within one (variant, model, task_kind), on one outcome."""

    variant: str
    model: str
    task_kind: str
    method_a: str
    method_b: str
    outcome: str  # "correct" | "submitted"
    total: McNemarResult
    per_seed: tuple[tuple[int, McNemarResult], ...]
    unpaired_a: int  # tasks finished by A only (the other method's run has no such task)
    unpaired_b: int
    # when a task id is paired under more than one seed (LongBench: a seed re-runs the same items), the pairs are
    # not independent: McNemar over the distinct items, each once at the lowest seed both methods finished, and how
    # many there are
    distinct: McNemarResult | None = None
    distinct_items: int = 0
    # and the cluster-aware test over every seed of those items (`sign_flip_p`)
    clustered_p: PValue | None = None
    # every repeated item has the same (A, B) outcome under each of its seeds: the seeds are copies (a deterministic
    # agent on seed-independent items, LongBench's scripted run), and the report's columns count each item once
    seed_copies: bool = False

    @property
    def seed_odds(self) -> PerSeedOdds:
        return per_seed_odds(r for _, r in self.per_seed)


def _success(task: TaskRecord, outcome: str) -> bool:
    return task.correct if outcome == "correct" else task.submitted


def paired_counts(
    tasks_a: dict[PairKey, TaskRecord], tasks_b: dict[PairKey, TaskRecord], outcome: str
) -> tuple[dict[int, list[int]], int, int]:
    """Per seed [a_only, b_only, both, neither] over the pairs both methods finished."""
    cells: dict[int, list[int]] = {}
    for key, ta in tasks_a.items():
        tb = tasks_b.get(key)
        if tb is None:
            continue
        sa, sb = _success(ta, outcome), _success(tb, outcome)
        c = cells.setdefault(ta.seed, [0, 0, 0, 0])
        c[0 if sa and not sb else 1 if sb and not sa else 2 if sa else 3] += 1
    unpaired_a = sum(1 for k in tasks_a if k not in tasks_b)
    unpaired_b = sum(1 for k in tasks_b if k not in tasks_a)
    return cells, unpaired_a, unpaired_b


def distinct_item_counts(
    tasks_a: dict[PairKey, TaskRecord], tasks_b: dict[PairKey, TaskRecord], outcome: str
) -> tuple[list[int], int] | None:
    """[a_only, b_only, both, neither] over the distinct task ids both methods finished, each once at its lowest
    seed, and their number; None when no task id is paired under two seeds (every pair is its own item)."""
    first: dict[str, PairKey] = {}
    repeated = False
    for key in sorted(key for key in tasks_a if key in tasks_b):
        task_id = tasks_a[key].task_id
        if task_id in first:
            repeated = True
            continue
        first[task_id] = key
    if not repeated:
        return None
    cells = [0, 0, 0, 0]
    for key in first.values():
        sa, sb = _success(tasks_a[key], outcome), _success(tasks_b[key], outcome)
        cells[0 if sa and not sb else 1 if sb and not sa else 2 if sa else 3] += 1
    return cells, len(first)


def seeds_are_copies(
    tasks_a: dict[PairKey, TaskRecord], tasks_b: dict[PairKey, TaskRecord], outcome: str
) -> bool:
    """Whether every task id paired under several seeds has one (A, B) outcome under all of them."""
    outcomes: dict[str, set[tuple[bool, bool]]] = {}
    for key, task_a in tasks_a.items():
        task_b = tasks_b.get(key)
        if task_b is not None:
            outcomes.setdefault(task_a.task_id, set()).add((_success(task_a, outcome), _success(task_b, outcome)))
    return all(len(seen) == 1 for seen in outcomes.values())


def item_discordances(
    tasks_a: dict[PairKey, TaskRecord], tasks_b: dict[PairKey, TaskRecord], outcome: str
) -> dict[str, tuple[int, int]]:
    """Per task id both methods finished under at least one seed: (sum over its seeds of +1 for an A-only pair and
    -1 for a B-only pair, the number of its paired seeds)."""
    items: dict[str, tuple[int, int]] = {}
    for key, task_a in tasks_a.items():
        task_b = tasks_b.get(key)
        if task_b is None:
            continue
        sa, sb = _success(task_a, outcome), _success(task_b, outcome)
        total, seeds = items.get(task_a.task_id, (0, 0))
        items[task_a.task_id] = (total + (sa and not sb) - (sb and not sa), seeds + 1)
    return items


def sign_flip_p(items: Iterable[tuple[int, int]]) -> PValue:
    """A cluster-aware paired test for items run under several seeds (review h13 MINOR-8): each item's mean
    discordance over its seeds, d_i = (A-only seeds - B-only seeds) / seeds, is symmetric about 0 when A and B do
    equally well (the labels A and B of an item's pairs exchangeable); the two-sided p-value is
    P(|sum of +-d_i| >= |sum of d_i|) over the 2^n sign flips of the items with d_i != 0, counted exactly (in
    integers, d_i scaled by the seeds' least common multiple, items of equal |d_i| together: the number of their
    +-signs summing to each value is a binomial coefficient). Every item weighs the same, however many seeds it ran;
    with one seed per item it is the exact McNemar test (`exact_p_two_sided`)."""
    pairs = [(total, seeds) for total, seeds in items if seeds > 0]
    scale = math.lcm(*(seeds for _, seeds in pairs)) if pairs else 1
    sizes: dict[int, int] = {}  # |d_i| x scale -> items of that size
    observed = 0
    for total, seeds in pairs:
        scaled = total * (scale // seeds)
        observed += scaled
        if scaled:
            sizes[abs(scaled)] = sizes.get(abs(scaled), 0) + 1
    flips = sum(sizes.values())
    if flips == 0:
        return PValue.one()
    ways: dict[int, int] = {0: 1}  # sum of the signed sizes so far -> number of sign assignments giving it
    for size, count in sizes.items():
        binomial = [math.comb(count, plus) for plus in range(count + 1)]
        merged: dict[int, int] = {}
        for reached, number in ways.items():
            for plus, choose in enumerate(binomial):
                value = reached + size * (2 * plus - count)
                merged[value] = merged.get(value, 0) + number * choose
        ways = merged
    extreme = sum(number for value, number in ways.items() if abs(value) >= abs(observed))
    return PValue(min(0.0, math.log10(extreme) - flips * _LOG10_2))


def compare_methods(
    tasks: Iterable[TaskRecord], method_a: str | None = None, outcome: str = "correct"
) -> list[PairedComparison]:
    """McNemar of `method_a` (None: the paper's method, ``arc_eval.registry.highlighted_method``) against every
    other method, per (task_kind, model, variant)."""
    if method_a is None:
        from arc_eval.registry import highlighted_method

        method_a = highlighted_method() or ""
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
    groups: dict[tuple[str, str, str], dict[str, dict[PairKey, TaskRecord]]] = {}
    for task in tasks:
        by_method = groups.setdefault((task.task_kind, task.model, task.variant), {})
        by_method.setdefault(task.method, {})[task.pair_key] = task
    comparisons = []
    for kind, model, variant in sorted(groups):
        by_method = groups[(kind, model, variant)]
        if method_a not in by_method:
            continue
        for method_b in sorted(by_method, key=method_order):
            if method_b == method_a:
                continue
            cells, ua, ub = paired_counts(by_method[method_a], by_method[method_b], outcome)
            total = [sum(c[i] for c in cells.values()) for i in range(4)]
            distinct = distinct_item_counts(by_method[method_a], by_method[method_b], outcome)
            comparisons.append(
                PairedComparison(
                    variant=variant,
                    model=model,
                    task_kind=kind,
                    method_a=method_a,
                    method_b=method_b,
                    outcome=outcome,
                    total=mcnemar_test(*total),
                    per_seed=tuple((seed, mcnemar_test(*cells[seed])) for seed in sorted(cells)),
                    unpaired_a=ua,
                    unpaired_b=ub,
                    distinct=None if distinct is None else mcnemar_test(*distinct[0]),
                    distinct_items=0 if distinct is None else distinct[1],
                    clustered_p=None if distinct is None else sign_flip_p(
                        item_discordances(by_method[method_a], by_method[method_b], outcome).values()),
                    seed_copies=distinct is not None
                    and seeds_are_copies(by_method[method_a], by_method[method_b], outcome),
                )
            )
    return comparisons
