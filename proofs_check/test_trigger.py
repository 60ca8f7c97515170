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
@proves("A4", "L2", "T1")
def test_a_fold_to_the_low_water_mark_restores_the_bound(config: Config, data: st.DataObject) -> None:
    """Whatever S, G and U are within M, P and Q: H at the low-water mark, or its newest unit alone (at most R),
    keeps S + G + U + H within W (layout paper: H within R)."""
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    s, g, u = data.draw(st.integers(0, M)), data.draw(st.integers(0, P)), data.draw(st.integers(0, Q))
    low = trigger.low_water_mark(config)
    newest = data.draw(st.integers(0, R))
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
    (s + n * c > M: X grows by what S sheds down to its low-water mark, Y by what is left of it)."""
    config = config.replace(layout="lean", prefill_cost=config.prefill_cost or 398)
    M, R, P, Q = config.summary_budget, config.recent_budget, config.page_budget, config.recall_budget
    s, g, u = data.draw(st.integers(0, M)), data.draw(st.integers(0, P)), data.draw(st.integers(0, Q))
    h_low = R * config.low_water // 100
    room = M + R + P + Q - s - g - u
    assume(room > h_low)
    h = data.draw(st.integers(h_low + 1, room))
    k = data.draw(st.integers(h_low, h - 1))  # what the fold keeps: h_low or more (whole units)
    removed, prefilled = h - k, g + u + k
    n = data.draw(st.integers(0, 200))  # the entries the fold folds
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
