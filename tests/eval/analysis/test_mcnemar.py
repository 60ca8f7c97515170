"""McNemar (paper eq. 3): cross-checked against statsmodels and scipy, and against the paper's tables."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
from scipy import special  # type: ignore[import-untyped]
from scipy.stats import binomtest  # type: ignore[import-untyped]
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar  # type: ignore[import-untyped]

import arc_eval.analysis.mcnemar as mc
from arc_eval.schema import TaskRecord
from arc_eval.analysis.mcnemar import PValue, compare_methods, mcnemar_test, per_seed_odds

GRID = [(a, b) for a in range(0, 13) for b in range(0, 13)] + [(150, 90), (400, 371), (1000, 1), (37, 2)]


def _sm(a: int, b: int, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm_mcnemar([[5, a], [b, 7]], **kwargs)


@pytest.mark.parametrize("a,b", [(a, b) for a, b in GRID if a != b])
def test_corrected_statistic_and_p_match_statsmodels(a: int, b: int) -> None:
    ours = mcnemar_test(a, b)
    ref = _sm(a, b, exact=False, correction=True)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12, abs=1e-15)
    assert ours.chi2_p.value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("a,b", GRID)
def test_exact_two_sided_matches_statsmodels_and_scipy(a: int, b: int) -> None:
    ours = mcnemar_test(a, b).exact_p.value
    if a + b == 0:
        assert ours == 1.0  # statsmodels also says 1 here; scipy's binomtest needs n >= 1
        assert _sm(a, b, exact=True).pvalue == 1.0
        return
    assert ours == pytest.approx(_sm(a, b, exact=True).pvalue, rel=1e-9)
    assert ours == pytest.approx(binomtest(min(a, b), a + b, 0.5).pvalue, rel=1e-9)


@pytest.mark.parametrize("a", [1, 2, 7, 40])
def test_equal_discordant_counts_give_statistic_zero_where_statsmodels_does_not_clip(a: int) -> None:
    ours = mcnemar_test(a, a)
    assert ours.statistic == 0.0 and ours.chi2_p.value == 1.0 and ours.exact_p.value == 1.0
    ref = _sm(a, a, exact=False, correction=True)
    assert ref.statistic == pytest.approx(1 / (2 * a))  # statsmodels over-corrects past zero
    assert ref.pvalue < 1.0


def test_no_discordant_pair_is_statistic_zero_p_one_odds_undefined() -> None:
    ours = mcnemar_test(0, 0, 10, 3)
    assert (ours.statistic, ours.chi2_p.value, ours.exact_p.value, ours.odds_ratio) == (0.0, 1.0, 1.0, None)
    assert math.isinf(_sm(0, 0, exact=False, correction=True).statistic)  # statsmodels divides by zero


def test_odds_ratio_edge_cases() -> None:
    assert mcnemar_test(5, 0).odds_ratio == math.inf
    assert mcnemar_test(0, 4).odds_ratio == 0.0
    assert mcnemar_test(91, 41).odds_ratio == pytest.approx(91 / 41)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        mcnemar_test(-1, 3)
    with pytest.raises(ValueError):
        mcnemar_test(True, 3)


# Rows of the paper's McNemar tables (LongBench and NIH, both models):
# (A-only, B-only, both, neither, exact p as printed (None where the paper prints 0), odds as printed)
PAPER_ROWS: list[tuple[int, int, int, int, float | None, float]] = [
    (884, 0, 0, 49, 7.75e-267, math.inf),
    (91, 41, 793, 8, 8.0e-6, 2.22),
    (123, 37, 761, 12, 2.73e-12, 3.32),
    (138, 41, 746, 8, 8.88e-14, 3.37),
    (113, 42, 771, 7, 5.24e-9, 2.69),
    (911, 0, 0, 22, 5.78e-275, math.inf),
    (220, 21, 691, 1, 2.63e-43, 10.48),
    (173, 21, 738, 1, 3.19e-31, 8.24),
    (68, 19, 843, 3, 6.18e-8, 3.58),
    (79, 20, 832, 2, 8.96e-10, 3.95),
    (1882, 16, 1089, 13, None, 117.62),
    (831, 22, 2140, 7, 3.5e-214, 37.77),
    (599, 25, 2372, 4, 4.5e-144, 23.96),
    (1300, 17, 1671, 12, None, 76.47),
    (934, 20, 2037, 9, 8.8e-247, 46.7),
    (2892, 0, 106, 2, None, math.inf),
    (67, 2, 2931, 0, 4.09e-18, 33.5),
    (37, 2, 2961, 0, 1.42e-9, 18.5),
    (133, 2, 2865, 0, 2.11e-37, 66.5),
    (46, 2, 2952, 0, 4.18e-12, 23.0),
]


def _printed_digits(x: float) -> int:
    mantissa = f"{x:e}".split("e")[0].rstrip("0").rstrip(".")
    return len(mantissa.replace(".", ""))


@pytest.mark.parametrize("a,b,both,neither,paper_p,paper_odds", PAPER_ROWS)
def test_paper_rows(a: int, b: int, both: int, neither: int, paper_p: float | None, paper_odds: float) -> None:
    r = mcnemar_test(a, b, both, neither)
    assert r.pairs in (933, 3000)  # 311 x 3 LongBench tasks / 1000 x 3 needles
    if math.isinf(paper_odds):
        assert r.odds_ratio == math.inf
    else:
        assert r.odds_ratio is not None and round(r.odds_ratio, 2) == pytest.approx(paper_odds, abs=1e-9)
    if paper_p is None:
        # the paper prints 0: the value is below the smallest double; we keep it (log10 finite)
        assert r.exact_p.log10 < -307 and math.isfinite(r.exact_p.log10)
        return
    # The paper's "Exact p-val" is the one-sided tail P(X <= min(a, b)), i.e. half the two-sided value.
    mantissa, exponent = r.exact_p_one_sided.mantissa_exponent(_printed_digits(paper_p))
    assert mantissa * 10.0**exponent == pytest.approx(paper_p, rel=1e-9)
    assert r.exact_p.log10 == pytest.approx(r.exact_p_one_sided.log10 + math.log10(2), abs=1e-12)


def test_paper_chi_square_p_of_91_vs_41() -> None:
    r = mcnemar_test(91, 41, 793, 8)
    assert r.statistic == pytest.approx(49**2 / 132)
    assert r.chi2_p.format(2) == "2.0e-05"
    assert r.odds_ratio is not None and f"{r.odds_ratio:.2f}" == "2.22"


def test_884_vs_0_matches_the_paper_without_underflow() -> None:
    r = mcnemar_test(884, 0)
    assert r.exact_p_one_sided.format() == "7.75e-267"  # the paper's value: 2^-884
    assert r.exact_p.format() == "1.55e-266"  # two-sided: 2^-883
    assert r.exact_p.value == pytest.approx(binomtest(0, 884, 0.5).pvalue, rel=1e-9)


def test_1882_vs_16_does_not_underflow() -> None:
    n = 1898
    reference = math.log10(2 * sum(math.comb(n, k) for k in range(17))) - n * math.log10(2)
    r = mcnemar_test(1882, 16)
    assert r.exact_p.log10 == pytest.approx(reference, abs=1e-9)
    assert r.exact_p.format().endswith("e-532")
    assert binomtest(16, n, 0.5).pvalue == 0.0  # what a float computation reports


@pytest.mark.parametrize("k,n", [(0, 40), (16, 1898), (100, 500), (2500, 5003), (3, 30001)])
def test_log_space_path_agrees_with_the_integer_path(monkeypatch: pytest.MonkeyPatch, k: int, n: int) -> None:
    exact = mc.binomial_lower_tail_log10(k, n)
    monkeypatch.setattr(mc, "EXACT_INTEGER_LIMIT", 0)
    approx = mc.binomial_lower_tail_log10(k, n)
    assert approx == pytest.approx(exact, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("z", [0.5, 5.0, 24.999, 25.0, 30.0, 60.0, 300.0])
def test_log_erfc_matches_scipy_log_ndtr(z: float) -> None:
    reference = math.log(2.0) + float(special.log_ndtr(-z * math.sqrt(2.0)))
    assert mc._log_erfc(z) == pytest.approx(reference, rel=1e-12)


def test_huge_statistic_p_value_is_kept_in_log10() -> None:
    p = mc.chi2_p(2890.0)
    reference = (math.log(2.0) + float(special.log_ndtr(-math.sqrt(2890.0)))) / math.log(10)
    assert p.log10 == pytest.approx(reference, rel=1e-12)
    assert p.log10 < -320 and p.value == 0.0  # far below the smallest double, still printable
    assert p.format().endswith(f"e{math.floor(p.log10)}")


def test_p_value_formatting() -> None:
    assert PValue.one().format() == "1"
    assert PValue(math.log10(0.0421)).format() == "0.0421"
    assert PValue(math.log10(2.0e-5)).format() == "2.00e-05"
    assert PValue(math.log10(9.9996e-5)).format() == "1.00e-04"
    assert PValue(math.log10(2.0e-5)).format(tex=True) == "$2.00 \\times 10^{-5}$"
    assert PValue(-531.95).format(2) == "1.1e-532"
    with pytest.raises(ValueError):
        PValue(0.1)


def _task(method: str, seed: int, task_id: str, correct: bool, submitted: bool, variant: str = "") -> TaskRecord:
    return TaskRecord(
        variant=variant,
        method=method,
        model="m",
        task_kind="nih",
        task_id=task_id,
        seed=seed,
        submitted=submitted,
        no_answer=not submitted,
        correct=correct,
        submission=None,
        end="submitted" if submitted else "step_limit",
        error=None,
        calls=1,
        steps=1,
        reexecutions=0,
        meta={},
    )


def test_pairing_counts_each_cell_per_seed_and_reports_unpaired() -> None:
    # seed 1: (arc, base) = (T,F), (T,F), (F,T), (T,T), (F,F); seed 2: (T,F), (F,F); plus unpaired tasks
    outcomes = {1: [(1, 0), (1, 0), (0, 1), (1, 1), (0, 0)], 2: [(1, 0), (0, 0)]}
    tasks = []
    for seed, pairs in outcomes.items():
        for i, (a, b) in enumerate(pairs):
            tasks.append(_task("arc", seed, f"t{i}", bool(a), True))
            tasks.append(_task("sliding_window", seed, f"t{i}", bool(b), bool(b)))
    tasks.append(_task("arc", 1, "only-arc", True, True))
    tasks.append(_task("sliding_window", 2, "only-base", True, True))
    tasks.append(_task("sliding_window", 1, "t0", True, True, variant="other"))  # another variant: not paired
    [correct] = [c for c in compare_methods(tasks, "arc", "correct") if c.variant == ""]
    assert (correct.total.a_only, correct.total.b_only, correct.total.both, correct.total.neither) == (3, 1, 1, 2)
    assert dict((s, (r.a_only, r.b_only, r.both, r.neither)) for s, r in correct.per_seed) == {
        1: (2, 1, 1, 1),
        2: (1, 0, 0, 1),
    }
    assert (correct.unpaired_a, correct.unpaired_b) == (1, 1)
    [completion] = [c for c in compare_methods(tasks, "arc", "submitted") if c.variant == ""]
    # arc always submitted; the baseline submitted exactly when correct
    assert (completion.total.a_only, completion.total.both, completion.total.b_only) == (5, 2, 0)
    so = correct.seed_odds
    assert (so.kind, so.mean, so.sd, so.finite_seeds, so.discordant_seeds) == ("finite", 2.0, None, 1, 2)


def test_per_seed_odds_like_the_paper_single_finite_seed() -> None:
    # paper, NIH Qwen3-32B, ARC vs LLM_summary: 67 vs 2 overall, per-seed "9.5 ± 0.0", 1 seed
    so = per_seed_odds([mcnemar_test(19, 2), mcnemar_test(20, 0), mcnemar_test(28, 0)])
    assert (so.kind, so.mean, so.sd, so.finite_seeds, so.discordant_seeds) == ("finite", 9.5, None, 1, 3)
    assert per_seed_odds([mcnemar_test(300, 0), mcnemar_test(290, 0)]).kind == "inf"
    assert per_seed_odds([mcnemar_test(0, 0)]).kind == "undefined"
    finite = per_seed_odds([mcnemar_test(30, 10), mcnemar_test(20, 10), mcnemar_test(40, 10)])
    assert finite.mean == pytest.approx(3.0) and finite.sd == pytest.approx(1.0)


def test_items_rerun_under_several_seeds_get_a_distinct_items_test() -> None:
    """Review h10 MAJOR-1: LongBench's seeds re-run the same items; at temperature 0 the 3 seeds of 12 items are 36
    pairs of which 6 discordant (exact p 0.031), but only 2 distinct items are (p 0.5). The comparison now carries
    McNemar over the distinct items, each at its first seed; tasks whose ids differ per seed (NIH) get none."""
    tasks = []
    for seed in (42, 82, 122):
        for item in range(12):
            tasks.append(_task("arc", seed, f"lbv2-{item}", item < 4, True))
            tasks.append(_task("llm_summary", seed, f"lbv2-{item}", item < 6, True))
    [pooled] = compare_methods(tasks, "arc", "correct")
    assert (pooled.total.a_only, pooled.total.b_only) == (0, 6) and pooled.total.exact_p.value == pytest.approx(1 / 32)
    assert pooled.distinct is not None and pooled.distinct_items == 12
    assert (pooled.distinct.a_only, pooled.distinct.b_only, pooled.distinct.both, pooled.distinct.neither) == (0, 2, 4, 6)
    assert pooled.distinct.exact_p.value == pytest.approx(0.5)
    own_ids = [_task(t.method, t.seed, f"{t.task_id}-s{t.seed}", t.correct, True) for t in tasks]
    [separate] = compare_methods(own_ids, "arc", "correct")
    assert separate.distinct is None and separate.distinct_items == 0


def _brute_force_sign_flip_p(items: list[tuple[int, int]]) -> float:
    """P(|sum of +-d_i| >= |sum of d_i|) over every sign flip of the items with d_i != 0, in fractions."""
    import itertools
    from fractions import Fraction

    means = [Fraction(total, seeds) for total, seeds in items if total]
    observed = abs(sum(means))
    flips = list(itertools.product((1, -1), repeat=len(means)))
    extreme = sum(1 for signs in flips if abs(sum(sign * mean for sign, mean in zip(signs, means))) >= observed)
    return float(Fraction(extreme, len(flips)))


def test_the_sign_flip_test_counts_every_flip_exactly() -> None:
    """Review h13 MINOR-8's cluster-aware test, against enumerating every sign flip (items of 1 to 4 seeds)."""
    import random

    generator = random.Random(8)
    for _ in range(200):
        items = []
        for _ in range(generator.randint(0, 11)):
            seeds = generator.randint(1, 4)
            items.append((sum(generator.choice((1, -1, 0, 0)) for _ in range(seeds)), seeds))
        assert mc.sign_flip_p(items).value == pytest.approx(_brute_force_sign_flip_p(items), rel=1e-12), items


def test_with_one_seed_per_item_the_sign_flip_test_is_exact_mcnemar() -> None:
    for a in range(0, 40, 3):
        for b in range(0, 40, 5):
            items = [(1, 1)] * a + [(-1, 1)] * b + [(0, 1)] * 7
            assert mc.sign_flip_p(items).log10 == pytest.approx(mc.exact_p_two_sided(a, b).log10, abs=1e-12), (a, b)


def test_items_rerun_under_seeds_that_disagree_get_the_cluster_aware_p() -> None:
    """At temperature > 0 a re-run item can change its outcome between seeds: the distinct-items test keeps one seed
    per item; the sign-flip test keeps all three, each item weighed once. Here 8 items where A wins 2 or 3 of 3 seeds
    against B, 1 where B wins 1 of 3: the lowest seed shows A-only 6, B-only 0 (exact p 1/32); over every seed, 4 of
    the 512 flips of the 9 discordant items are as extreme (p 1/128)."""
    tasks = []
    for item in range(12):
        for number, seed in enumerate((42, 82, 122)):
            a_wins = item < 8 and (item < 6 or number > 0) and not (item % 3 == 2 and number == 1)
            b_wins = item == 8 and number == 2
            tasks.append(_task("arc", seed, f"lbv2-{item}", a_wins, True))
            tasks.append(_task("llm_summary", seed, f"lbv2-{item}", b_wins, True))
    [comparison] = compare_methods(tasks, "arc", "correct")
    assert comparison.distinct is not None and comparison.clustered_p is not None
    items = list(mc.item_discordances({t.pair_key: t for t in tasks if t.method == "arc"},
                                      {t.pair_key: t for t in tasks if t.method == "llm_summary"}, "correct").values())
    assert sorted(items) == sorted([(3, 3)] * 4 + [(2, 3)] * 4 + [(-1, 3)] + [(0, 3)] * 3)
    assert comparison.clustered_p.value == pytest.approx(_brute_force_sign_flip_p(items)) == pytest.approx(1 / 128)
    assert comparison.distinct.exact_p.value == pytest.approx(1 / 32)
    assert comparison.clustered_p.value < comparison.distinct.exact_p.value
    own_ids = [_task(t.method, t.seed, f"{t.task_id}-s{t.seed}", t.correct, True) for t in tasks]
    [separate] = compare_methods(own_ids, "arc", "correct")
    assert separate.clustered_p is None
