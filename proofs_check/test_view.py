"""D2, A4, Lemma 2 and Theorem claim 1: every view is within K <= L, counted on the text itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.chat import CHATML, QWEN3_NOTHINK, ChatFormat
from arc_ref.config import Config, make_setup, preset
from arc_ref.errors import ConfigError
from arc_ref.machine import Observe, init, observe
from arc_ref.tokenizers import get_tokenizer
from arc_ref.view import within_budget
from proofs_check.harness import apply, event_lists, exact_view
from proofs_check.registry import proves
from proofs_check.strategies import configs, texts, unicode_texts


@given(configs(), event_lists())
@proves("L2", "T1", "A4")
def test_lemma2_every_view_is_within_k_and_l(config: Config, events: list[object]) -> None:
    """Lemma 2 / claim 1: tokens(transcript'_i) <= K <= L before every call, whatever the history."""
    state = init(config)
    setup = state.setup
    for event in [*events, None]:
        shown, exact = exact_view(state)
        assert exact == shown.tokens  # the parts add up to the text actually sent
        assert exact <= setup.budget <= setup.limit
        parts = shown.components
        assert parts.summary <= config.summary_budget
        assert parts.recent <= config.recent_budget
        assert parts.catalog <= config.page_budget
        assert parts.recall <= config.recall_budget
        assert 0 <= parts.overhead <= config.overhead
        assert parts.prefix == setup.prefix_tokens
        if event is not None:
            state = apply(state, event)  # type: ignore[arg-type]


@given(configs())
@proves("D2", "A4", "T1")
def test_d2_budget_arithmetic(config: Config) -> None:
    """D2: L = L_ctx - G_max; A4: K = B + M + R + P + Q + eta; claim 1: K + G_max <= L_ctx."""
    setup = make_setup(config)
    assert setup.limit == config.context_limit - config.max_completion
    assert setup.budget == (
        setup.prefix_tokens + config.summary_budget + config.recent_budget + config.page_budget
        + config.recall_budget + config.overhead
    )
    assert setup.budget + config.max_completion <= config.context_limit


@given(configs(), st.integers(1, 5000))
@proves("A4")
def test_a4_configuration_over_l_is_refused_naming_budgets(config: Config, excess: int) -> None:
    """A configuration with K > L is a ConfigError that names K, L and the budgets."""
    setup = make_setup(config)
    too_small = config.replace(context_limit=setup.budget + config.max_completion - 1 - excess % 10)
    with pytest.raises(ConfigError) as refused:
        make_setup(too_small)
    message = str(refused.value)
    assert "K = B + M + R + P + Q + eta" in message and "exceeds L" in message


@given(configs(), st.integers(2, 8))
@proves("A4")
def test_a4_observation_too_big_for_h_is_stored_first_and_shown_as_stub(config: Config, factor: int) -> None:
    """A4: an observation larger than R is stored verbatim and represented in H by its bounded stub."""
    state = init(config)
    content = "x中😀 " * (factor * config.recent_budget)
    state, result = observe(state, Observe("cat big.txt", content, 0))
    record = state.records[-1]
    assert record.content == content  # stored first, verbatim
    assert not result.verbatim
    last = state.live[-1].message.content
    assert record.stub in last and content not in last
    shown, exact = exact_view(state)
    assert exact <= state.setup.budget


@given(st.sampled_from(("bytes", "o200k_base", "cl100k_base")), st.sampled_from((CHATML, QWEN3_NOTHINK)),
       st.lists(st.tuples(st.sampled_from(("system", "user", "assistant")), unicode_texts(60)), min_size=1, max_size=4))
@proves("A4", "L2")
def test_a4_message_counts_add_up_at_message_boundaries(tokenizer_name: str, chat: object, messages: list[tuple[str, str]]) -> None:
    """The view's total is the sum of per-message counts: no tokenizer adapter merges across a message boundary."""
    tokenizer = get_tokenizer(tokenizer_name)
    fmt = chat  # ChatFormat
    rendered = [fmt.render_message(role, content) for role, content in messages]  # type: ignore[attr-defined]
    whole = "".join(rendered) + fmt.generation_prompt  # type: ignore[attr-defined]
    assert tokenizer.count(whole) == sum(tokenizer.count(part) for part in rendered) + tokenizer.count(
        fmt.generation_prompt  # type: ignore[attr-defined]
    )


@given(st.lists(st.integers(0, 10**6), min_size=6, max_size=6), st.lists(st.integers(0, 10**6), min_size=6, max_size=6))
@proves("L2")
def test_lemma2_componentwise_budgets_bound_the_sum(costs: list[int], budgets: list[int]) -> None:
    """Lemma 2's arithmetic: component-wise cost <= budget implies total cost <= K."""
    if within_budget(tuple(costs), tuple(budgets)):
        assert sum(costs) <= sum(budgets)
    else:
        assert any(cost > budget for cost, budget in zip(costs, budgets))


@given(texts(80))
@proves("A4")
def test_a4_prefix_tokens_b_is_tokens_of_f(goal: str) -> None:
    """B is the token count of F = [system, goal] as serialized."""
    config = preset("minimal", goal=goal, context_limit=4000)
    setup = make_setup(config)
    assert isinstance(setup.chat, ChatFormat)
    rendered = "".join(setup.chat.render_message(role, text) for role, text in setup.prefix_messages)
    assert setup.prefix_tokens == setup.tokenizer.count(rendered)
