"""Propositions 1 and 2 and Corollary 2: why pages, and why the archive must grow linearly.

Proposition 1 is shown by a counter-construction: keep every stub visible and the prompt passes any K
after floor(K / c_min) + 1 observations, while ARC's view, fed the same observations, stays <= K.
Proposition 2 is checked by exhaustive counting over all 2^N bit histories for small N.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from arc_ref.config import Config, preset
from arc_ref.machine import Observe, init, observe, view
from arc_ref.store import decode_history, payload_tokens
from arc_ref.view import verify_tokens
from proofs_check.registry import proves
from proofs_check.strategies import configs


@given(configs())
@proves("P1")
def test_proposition1_all_visible_citations_pass_any_constant_bound(config: Config) -> None:
    """With every stub visible, C(n) >= n c_min; n* = floor(K / c_min) + 1 stubs exceed K. ARC's paged view
    of the same n* observations is still within K."""
    state = init(config)
    budget = state.setup.budget
    capacity = config.capacity
    all_visible = 0
    stored = 0
    c_min = None
    while stored < capacity:
        state, _ = observe(state, Observe("ls", f"entry {stored}", 0))
        stored += 1
        stub_cost = state.records[-1].stub_tokens
        c_min = stub_cost if c_min is None else min(c_min, stub_cost)
        all_visible += stub_cost
        if all_visible > budget:
            break
    assert c_min is not None and c_min > 0
    n_star = math.floor(budget / c_min) + 1
    if stored < n_star and all_visible <= budget:
        # capacity ran out first; extend the counter-construction arithmetically with the smallest stub
        all_visible += (n_star - stored) * c_min
    assert all_visible >= min(stored, n_star) * c_min
    assert all_visible > budget
    shown = view(state)
    assert verify_tokens(state.setup, shown) <= budget


def _bit_history_state(bits: tuple[int, ...]) -> tuple[str, tuple[str, ...]]:
    """Feed a bit history to ARC (one observation per bit); return (active view text, archived history)."""
    state = init(preset("minimal", capacity=16))
    for bit in bits:
        state, _ = observe(state, Observe("read bit", str(bit), 0))
    return view(state).text(), decode_history(state.records)


@given(st.integers(1, 9), st.integers(0, 12))
@proves("P2", "C2")
def test_proposition2_exact_recovery_needs_n_minus_kappa_external_bits(n_bits: int, kappa: int) -> None:
    """Exhaustively over {0,1}^N: ARC's encoding history -> (active, archive) is injective (its decoder recovers
    every history); by counting, no encoding into 2^kappa active x 2^s external states with s < N - kappa can be;
    ARC archives exactly N payload bits, kappa above the bound (Corollary 2)."""
    histories = list(itertools.product((0, 1), repeat=n_bits))
    assert len(histories) == 2**n_bits
    encodings = {}
    for bits in histories:
        active, archive = _bit_history_state(bits)
        assert archive == tuple(str(bit) for bit in bits)  # the decoder recovers the history exactly
        encodings[bits] = (active, archive)
    assert len(set(encodings.values())) == len(histories)  # injective
    for external_bits in range(0, n_bits + 1):
        pairs = 2**kappa * 2**external_bits
        if external_bits < n_bits - kappa:
            assert pairs < len(histories)  # pigeonhole: two histories would share a state pair
        else:
            assert pairs >= len(histories)
    payload_bits = n_bits  # one character "0"/"1" per observation, stored verbatim
    lower_bound = max(0, n_bits - kappa)
    assert payload_bits - lower_bound == min(kappa, n_bits)
    if n_bits > kappa:
        assert math.isclose(n_bits / (n_bits - kappa), 1 / (1 - kappa / n_bits))


@proves("C2")
def test_corollary2_payload_matches_the_sum_of_observation_sizes() -> None:
    """The archive holds exactly the observation payload: N one-token observations give N payload tokens."""
    state = init(preset("minimal", capacity=20))
    for bit in (0, 1, 1, 0, 1):
        state, _ = observe(state, Observe("read bit", str(bit), 0))
    assert payload_tokens(state.records) == 5
