"""D2 and A4 for budgets derived from a window and a prefix (`arc_ref.budgets`, spec/parameters.md).

For any window L_ctx, completion reserve G_max, prefix F (system text, goal; in tool mode the tools listing) and
preferences Q*, q*, the derivation either gives a configuration `make_setup` accepts, with K <= L = L_ctx - G_max
and every component at least its floor, or refuses with `WindowTooSmall`, and then the prefix with the smallest
summary, recent suffix, catalog page and recall buffer (and eta) does exceed L: no window that could hold the
prefix is refused. In the ``shares`` regime the preferences are honoured whole.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.budgets import OVERHEAD, STUB_CAP, WindowTooSmall, window_budgets
from arc_ref.config import PRESETS, Config, make_setup, minimum_budgets, parse_tools
from proofs_check.registry import proves
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir
from proofs_check.strategies import ENVIRONMENT_TOOLS

QWEN3 = qwen3_dir()
WORDS = ("Fix the failing test. ", "Read parser.py first; ", "δοκιμή ", "🙂 ", "line\n")

windows = st.integers(600, 70000)
reserves = st.integers(1, 8192)
goals = st.lists(st.sampled_from(WORDS), max_size=700).map("".join)
recall_preferences = st.one_of(st.just(4000), st.integers(1, 20000))
chunk_preferences = st.one_of(st.just(1920), st.integers(1, 8000))


def smallest_prompt(config: Config) -> int:
    """B + eta + the smallest M, R, P (one stub per page) and Q (one-token chunks): what any view needs, counted
    here from `minimum_budgets` on its own, without the derivation's arithmetic."""
    floors = minimum_budgets(config.replace(stub_cap=STUB_CAP, chunk_tokens=1, page_size=1, overhead=OVERHEAD))
    stub_cap = max(STUB_CAP, floors["stub_cap"])
    floors = minimum_budgets(config.replace(stub_cap=stub_cap, chunk_tokens=1, page_size=1, overhead=OVERHEAD))
    return (floors["prefix_tokens"] + max(OVERHEAD, floors["overhead"]) + floors["summary_budget"]
            + floors["recent_budget"] + floors["page_budget"] + floors["recall_budget"])


def check_window(base: Config, recall: int, chunk: int) -> None:
    limit = base.context_limit - base.max_completion
    try:
        derived = window_budgets(base, recall_budget=recall, chunk_tokens=chunk)
    except WindowTooSmall as refused:
        needed = smallest_prompt(base)
        assert needed > limit, f"refused although the prefix with the smallest components needs {needed} <= L {limit}"
        assert refused.needed == needed and refused.smallest_window == base.context_limit + needed - limit
        return
    setup = make_setup(base.replace(**derived.fields()))  # every floor of parameters.md check 3 holds
    assert setup.budget == derived.budget <= setup.limit == limit
    if derived.regime == "shares":
        assert derived.chunk_tokens == chunk and derived.recall_budget >= recall
    else:
        assert derived.chunk_tokens <= chunk and derived.recall_budget <= max(recall, derived.recall_budget)


@given(windows, reserves, goals, recall_preferences, chunk_preferences,
       st.sampled_from((("o200k_base", "chatml"), ("bytes", "chatml"), ("cl100k_base", "qwen3-nothink"))))
@proves("D2", "A4")
def test_budgets_from_a_window_fit_or_the_prefix_cannot(window: int, reserve: int, goal: str, recall: int,
                                                        chunk: int, counting: tuple[str, str]) -> None:
    tokenizer, chat_format = counting
    base = PRESETS["paper"].replace(tokenizer=tokenizer, chat_format=chat_format, goal=goal or "g",
                                    context_limit=window, max_completion=reserve)
    check_window(base, recall, chunk)


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
@given(windows, reserves, goals, recall_preferences, chunk_preferences, st.booleans())
@proves("D2", "A4")
def test_budgets_from_a_window_fit_or_the_prefix_cannot_qwen3(window: int, reserve: int, goal: str, recall: int,
                                                              chunk: int, tool_mode: bool) -> None:
    """The same under Qwen3's own chat template, in tool mode with the tools listing in B."""
    base = PRESETS["paper"].replace(
        tokenizer=f"hf-dir:{QWEN3}", chat_format="template", goal=goal or "g", context_limit=window,
        max_completion=reserve, action_mode="tools" if tool_mode else "text",
        tools=parse_tools(ENVIRONMENT_TOOLS) if tool_mode else (),
    )
    check_window(base, recall, chunk)
