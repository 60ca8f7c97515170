"""When and how much to compact (spec/rendering.md section 11.1), the rule itself on random token counts.

`arc_ref.trigger.decide` against the rule as the spec writes it, restated here on its own; the low-water mark
and the invariant a bound fold restores: after folding H down to the low-water mark (or to its newest unit, at
most R), S, G, U and H together fit W = M + R + P + Q whatever S, G and U are within their budgets.
"""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from arc_ref import trigger
from arc_ref.config import PRESETS, Config
from proofs_check.registry import proves

counts = st.integers(0, 20000)


@st.composite
def trigger_configs(draw: st.DrawFn) -> Config:
    return PRESETS["paper"].replace(
        summary_budget=draw(st.integers(1, 8000)), recent_budget=draw(st.integers(1, 16000)),
        page_budget=draw(st.integers(1, 4000)), recall_budget=draw(st.integers(1, 8000)),
        low_water=draw(st.integers(1, 100)), prefill_cost=draw(st.sampled_from((0, 1, 398, 857, 2**20))),
        expected_completion=draw(st.sampled_from((0, 1, 64, 256, 2**20))),
        layout=draw(st.sampled_from(("lean", "paper"))), summary_low_water=draw(st.integers(1, 100)),
    )


def spec_rule(config: Config, s: int, g: int, u: int, h: int, t: int, a: int, k: int, n: int) -> str:
    """Section 11.1 as written there (``a``: the tokens of the agent turns in H; ``k``: what a fold to the
    low-water mark would keep of H; ``n``: the entries it would fold)."""
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    if config.layout == "paper":
        return "bound" if h > R else "keep"
    if s + g + u + h > M + R + P + Q:
        return "bound"
    h_low = R * config.low_water // 100
    if config.prefill_cost > 0 and h > max(h_low, k):
        X, Y = h - k, g + u + k  # S counts only when it may have to shrink (n items of at most c each)
        if s + n * config.stub_cap > M:  # then it sheds down to its low-water mark and is prefilled again
            s_low = M * config.summary_low_water // 100
            X, Y = X + max(0, s - s_low), Y + min(s, s_low)
        mt = config.expected_completion * max(1, t) if config.expected_completion > 0 else max(1, a)
        if mt * X**2 >= 2 * config.prefill_cost * Y * h:
            return "cost"
    return "keep"


@given(trigger_configs(), counts, counts, counts, counts, st.integers(0, 400), st.data())
@proves("A4", "T1")
def test_trigger_decides_as_the_spec_states(config: Config, s: int, g: int, u: int, h: int, t: int,
                                            data: st.DataObject) -> None:
    u = min(u, config.recall_budget)
    a, k = data.draw(st.integers(0, h)), data.draw(st.integers(0, h))  # the agent turns and what a fold keeps: of H
    n = data.draw(st.integers(0, 200))  # the entries it folds
    assert trigger.decide(config, s, g, u, h, t, a, k, n) == spec_rule(config, s, g, u, h, t, a, k, n)


@given(trigger_configs(), st.data())
@proves("A4", "T1")
def test_trigger_decides_as_the_spec_states_at_its_edges(config: Config, data: st.DataObject) -> None:
    """The same comparison where the rule's comparisons meet their edges, which random counts almost never do:
    s + g + u + h at W = M + R + P + Q (layout "paper": h at R) keeps (or folds for cost) and one token over it
    folds to bound; under the cost rule, h at the low-water mark h_low keeps (h must exceed max(h_low, k)),
    and one token over it may fold. Each draw is compared with prefill_cost 0 as well."""
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    s, g, u = data.draw(st.integers(0, M)), data.draw(st.integers(0, P)), data.draw(st.integers(0, Q))
    if data.draw(st.booleans()):
        bound = R if config.layout == "paper" else M + R + P + Q - s - g - u
    else:  # layout lean under the cost rule: h at h_low (<= R, so S + G + U + H within W or one token over)
        config = config.replace(layout="lean", prefill_cost=config.prefill_cost or 398)
        bound = R * config.low_water // 100
    h = bound + data.draw(st.integers(0, 1))  # at the edge, or one token over it
    t, a, k, n = (data.draw(st.integers(0, 400)), data.draw(st.integers(0, h)), data.draw(st.integers(0, h)),
                  data.draw(st.integers(0, 200)))
    for cost in (config.prefill_cost, 0):  # and prefill_cost 0, which folds only on the bound
        same = config.replace(prefill_cost=cost)
        assert trigger.decide(same, s, g, u, h, t, a, k, n) == spec_rule(same, s, g, u, h, t, a, k, n)


@given(trigger_configs(), st.data())
@proves("A4", "L2", "T1")
def test_a_fold_to_the_low_water_mark_restores_the_bound(config: Config, data: st.DataObject) -> None:
    """Whatever S, G and U are within M, P and Q: H at the low-water mark, or its newest unit alone (at most R),
    keeps S + G + U + H within W (layout paper: H within R); the marks are those section 11.1 and 11.3 state."""
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    s, g, u = data.draw(st.integers(0, M)), data.draw(st.integers(0, P)), data.draw(st.integers(0, Q))
    low = trigger.low_water_mark(config)
    newest = data.draw(st.integers(0, R))
    # the marks themselves (section 11.1, 11.3): R // 2 and M ("paper"), low_water and summary_low_water percent
    paper = config.layout == "paper"
    assert low == (R // 2 if paper else R * config.low_water // 100)
    assert trigger.summary_low_water_mark(config) == (M if paper else M * config.summary_low_water // 100)
    assert low <= R
    if config.layout == "paper":
        assert max(low, newest) <= R
    else:
        assert s + g + u + max(low, newest) <= M + R + P + Q


@given(trigger_configs(), st.data())
@proves("T1")
def test_the_cost_rule_turns_exactly_at_its_inequality(config: Config, data: st.DataObject) -> None:
    """Layout lean: with S, G, U and H within W and h above the low-water mark, the cost rule says keep one step
    before m * t * X^2 reaches 2 * prefill_cost * Y * h, and fold at the first step where it does: one agent turn
    more when expected_completion is set (m * t = expected_completion * t), one agent token more when it is 0
    (m * t = a, the agent turns' tokens in H). A random draw rarely lands near that boundary, so the boundary is
    computed here from section 11.1, half the time for a fold of ``n`` entries after which S may have to shrink
    (s + n * c > M: X grows by what S sheds down to its low-water mark, Y by what is left of it), and half of
    those with s + n * c at M or one over it (S must not count as shrinking at M itself)."""
    config = config.replace(layout="lean", prefill_cost=config.prefill_cost or 398)
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    s, g, u = data.draw(st.integers(0, M)), data.draw(st.integers(0, P)), data.draw(st.integers(0, Q))
    n = data.draw(st.integers(0, 200))  # the entries the fold folds
    if data.draw(st.booleans()):  # S at M with the fold's items, or one over: where it may first have to shrink
        n = data.draw(st.integers(1, max(1, M // config.stub_cap)))
        s = M - n * config.stub_cap + data.draw(st.integers(0, 1))
        assume(s >= 0)
    h_low = R * config.low_water // 100
    room = M + R + P + Q - s - g - u
    assume(room > h_low)
    h = data.draw(st.integers(h_low + 1, room))
    k = data.draw(st.integers(h_low, h - 1))  # what the fold keeps: h_low or more (whole units)
    removed, prefilled = h - k, g + u + k
    if s + n * config.stub_cap > M:
        s_low = M * config.summary_low_water // 100
        removed, prefilled = removed + max(0, s - s_low), prefilled + min(s, s_low)
    needed = 2 * config.prefill_cost * prefilled * h
    if config.expected_completion > 0:
        first = -(-needed // (config.expected_completion * removed * removed))  # the least t with the product >= it
        assume(first >= 2)  # t counts as max(1, t): the turn before must be a real one
        a = data.draw(st.integers(0, h))  # the agent's tokens play no part
        assert trigger.decide(config, s, g, u, h, first, a, k, n) == trigger.COST
        assert trigger.decide(config, s, g, u, h, first - 1, a, k, n) == trigger.KEEP
    else:
        first = -(-needed // (removed * removed))  # the least a with the product >= it
        assume(2 <= first <= h)  # a counts as max(1, a) and is part of H
        t = data.draw(st.integers(0, 400))  # the number of turns plays no part
        assert trigger.decide(config, s, g, u, h, t, first, k, n) == trigger.COST
        assert trigger.decide(config, s, g, u, h, t, first - 1, k, n) == trigger.KEEP


@given(trigger_configs(), st.integers(0, 3), st.integers(0, 3), counts, counts)
@proves("T1")
def test_the_cost_rule_reads_m_t_as_the_spec_states(config: Config, t: int, a: int, more_t: int,
                                                    more_a: int) -> None:
    """m * t of section 11.1: expected_completion * max(1, t) when expected_completion > 0, else max(1, a), at
    t and a of 0 to 3 (where max(1, .) decides and the rule rarely sits at its threshold) and at any t and a."""
    for turns, agent in ((t, a), (more_t, more_a)):
        expected = (config.expected_completion * max(1, turns) if config.expected_completion > 0
                    else max(1, agent))
        assert trigger.generated_reads(config, turns, agent) == expected


@given(trigger_configs(), st.integers(1, 3000), st.integers(0, 400), st.integers(0, 3000), st.integers(1, 20))
@proves("T1")
def test_the_cost_rule_folds_at_equality_and_never_for_nothing(config: Config, h: int, t: int, a: int,
                                                               j: int) -> None:
    """`pays` where m * t * X^2 equals 2 * prefill_cost * Y * h exactly (X = 2 * prefill_cost * h * j,
    Y = m * t * 2 * prefill_cost * h * j^2): it pays (the inequality is >=), with one more token of Y it does
    not; and a fold that removes nothing (X = 0) never pays, even with nothing to prefill again."""
    config = config.replace(prefill_cost=config.prefill_cost or 398)
    mt = trigger.generated_reads(config, t, a)
    removed = 2 * config.prefill_cost * h * j
    prefilled = mt * 2 * config.prefill_cost * h * j * j
    assert mt * removed * removed == 2 * config.prefill_cost * prefilled * h
    assert trigger.pays(config, removed, prefilled, h, t, a)
    assert not trigger.pays(config, removed, prefilled + 1, h, t, a)
    assert not trigger.pays(config, 0, 0, h, t, a)


@given(trigger_configs(), st.integers(0, 40000), st.integers(0, 40000), st.integers(0, 20000), counts,
       st.integers(0, 400), st.data())
@proves("T1")
def test_a_copy_declined_at_its_floor_is_declined_at_every_cost_above_it(
        config: Config, before: int, floor: int, fixed_most: int, h: int, t: int, data: st.DataObject) -> None:
    """Section 11.1's copy test, `pays` with X = before - after and Y = after - fixed, is false for every copy
    view of ``after >= floor`` tokens and every ``fixed <= fixed_most`` when `declines` says so at the floor (the
    machine declines a copy before S is built on that: S at 0 tokens, s_kept at its most)."""
    a = data.draw(st.integers(0, h))
    after = floor + data.draw(st.one_of(st.just(0), st.integers(0, 5000)))  # at the floor half the time: its edge
    fixed = fixed_most - data.draw(st.one_of(st.just(0), st.integers(0, fixed_most)))
    if trigger.declines(config, before, floor, fixed_most, h, t, a):
        assert not trigger.pays(config, before - after, after - fixed, h, t, a)
