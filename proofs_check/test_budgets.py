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
from arc_ref.errors import ConfigError
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


def spec_floors(base: Config, chunk: int) -> dict[str, int]:
    """Step 1: c, eta, B, the floors M_min, R_min, P_min (p = 1), Q_min(q*) and Q_min(1), and page_frame, from the
    floors `minimum_budgets` reports (112 and 64: the spec's numbers)."""
    probe = base.replace(stub_cap=112, chunk_tokens=chunk, page_size=1, overhead=64)
    c = max(112, minimum_budgets(probe)["stub_cap"])
    floors = minimum_budgets(probe.replace(stub_cap=c))
    return {"c": c, "eta": max(64, floors["overhead"]), "B": floors["prefix_tokens"],
            "summary_budget": floors["summary_budget"], "recent_budget": floors["recent_budget"],
            "page_budget": floors["page_budget"], "q_min": floors["recall_budget"],
            "q_min_1": floors["recall_budget"] - chunk + 1, "page_frame": floors["page_budget"] - c}


def spec_derivation(base: Config, recall: int, chunk: int) -> dict[str, object] | None:
    """spec/parameters.md "Budgets from a window and a prefix", steps 1-4, restated here from `spec_floors`,
    without `arc_ref.budgets`' arithmetic: the derived fields, the regime and (regime floors) the first share
    below its floor in the order M, R, P; None where step 3 refuses."""
    f = spec_floors(base, chunk)
    limit = base.context_limit - base.max_completion
    preferred = max(recall, f["q_min"])  # max(Q*, Q_min(q*))
    a = limit - f["B"] - preferred - f["eta"]
    split = {"summary_budget": 2 * a // 7, "recent_budget": 4 * a // 7, "page_budget": a // 7}
    short = [(name, split[name], f[name]) for name in split if split[name] < f[name]]
    m, r, p = split["summary_budget"], split["recent_budget"], split["page_budget"]
    if not short:
        regime, q_budget, q = "shares", preferred, chunk
    else:
        s = limit - f["B"] - f["eta"] - (f["summary_budget"] + f["recent_budget"] + f["page_budget"] + f["q_min_1"])
        if s < 0:
            return None
        q_budget = f["q_min_1"] + 2 * s // 9
        m, r, p = f["summary_budget"] + 2 * s // 9, f["recent_budget"] + 4 * s // 9, f["page_budget"] + s // 9
        if q_budget > preferred:
            r, q_budget = r + q_budget - preferred, preferred
        regime, q = "floors", min(chunk, q_budget - f["q_min_1"] + 1)
    return {"regime": regime, "shortfall": short[0] if short else None, "summary_budget": m, "recent_budget": r,
            "page_budget": p, "page_size": max(1, (p - f["page_frame"]) // f["c"]), "stub_cap": f["c"],
            "recall_budget": q_budget, "chunk_tokens": q, "overhead": f["eta"]}


def edge_limit(base: Config, recall: int, chunk: int, edge: str) -> int:
    """L where the derivation changes its answer: the least L of regime shares (A at the least value with every
    share at its floor), or the least L not refused (s = 0: the smallest window the refusal names, less G_max)."""
    f = spec_floors(base, chunk)
    if edge == "shares":
        least_a = max(-(-7 * f["summary_budget"] // 2), -(-7 * f["recent_budget"] // 4), 7 * f["page_budget"])
        return least_a + f["B"] + max(recall, f["q_min"]) + f["eta"]
    return f["B"] + f["eta"] + f["summary_budget"] + f["recent_budget"] + f["page_budget"] + f["q_min_1"]


@given(st.one_of(st.integers(1, 40000), st.integers(0, 39999).map(lambda x: 40000 - x)), reserves,
       st.lists(st.sampled_from(WORDS), max_size=120).map("".join), recall_preferences, chunk_preferences,
       st.sampled_from((("o200k_base", "chatml"), ("bytes", "chatml"), ("cl100k_base", "qwen3-nothink"))),
       st.booleans(), st.sampled_from((None, "shares", "refusal", "cap")), st.integers(-1, 1))
@proves("D2")
def test_budgets_from_a_window_are_the_numbers_the_spec_derives(limit: int, reserve: int, goal: str, recall: int,
                                                                chunk: int, counting: tuple[str, str],
                                                                defaults: bool, edge: str | None,
                                                                offset: int) -> None:
    """A port must derive the same numbers (parameters.md): each of M, R, P, p, c, Q, q, eta, the regime and its
    shortfall is the one steps 1-4 give, and the derivation refuses exactly where step 3 does. Only the fit
    (K <= L, every floor) is checked above; a split other than 2 : 4 : 1 or 2 : 2 : 4 : 1, a p below the most stubs
    P holds, or a cap giving its excess to another budget would pass it; nor would another default Q* or q*,
    another 112 or 64 in c = max(112, c_min) and eta = max(64, eta_i), or a regime or refusal decided one token
    off. L is drawn (the window is L + G_max), half of the time near its largest value, so that most draws are
    derived rather than refused; two thirds of the draws put L at an edge instead (``edge_limit``), or one
    token beside it; at edge "cap", L is two to four tokens below the shares edge (regime floors with the most
    surplus) and the preferences small (Q* = 1, q* up to 64), where regime floors' cap on Q bites."""
    tokenizer, chat_format = counting
    if defaults:  # the preferences not given: Q* = 4000, q* = 1920
        recall, chunk = 4000, 1920
    base = PRESETS["paper"].replace(tokenizer=tokenizer, chat_format=chat_format, goal=goal or "g")
    if edge == "cap":
        recall, chunk, defaults = 1, 1 + chunk % 64, False
        limit = max(1, edge_limit(base, recall, chunk, "shares") - 3 + offset)
    elif edge is not None:
        limit = max(1, edge_limit(base, recall, chunk, edge) + offset)
    base = base.replace(context_limit=limit + reserve, max_completion=reserve)
    expected = spec_derivation(base, recall, chunk)
    try:
        derived = (window_budgets(base) if defaults
                   else window_budgets(base, recall_budget=recall, chunk_tokens=chunk))
    except WindowTooSmall:
        assert expected is None, f"refused although step 3 gives {expected}"
        return
    assert expected is not None, "step 3 refuses this window"
    assert {"regime": derived.regime, "shortfall": derived.shortfall, **derived.fields()} == expected


@given(st.sampled_from(("context_limit", "max_completion", "recall_budget", "chunk_tokens")),
       st.sampled_from((0, -1, True, "1", 1.0, None, "largest", "over")))
@proves("D2")
def test_budgets_refuse_a_window_or_a_preference_outside_its_range(name: str, value: object) -> None:
    """parameters.md: L_ctx and G_max are integers from 1 to 2^31 - 1, Q* and q* integers from 1 to 10^8. A value
    outside is refused as such (a ConfigError that is not WindowTooSmall: no window is derived from it); the
    largest value is taken (derived, or refused only as a window too small for the prefix)."""
    largest = 2**31 - 1 if name in ("context_limit", "max_completion") else 10**8
    value = largest if value == "largest" else largest + 1 if value == "over" else value
    window = {"context_limit": 32768, "max_completion": 4096}
    preferences = {"recall_budget": 4000, "chunk_tokens": 1920}
    if name in window:
        window[name] = value  # type: ignore[assignment]
        if name == "context_limit" and value == largest:
            window["max_completion"] = largest - 32768
    else:
        preferences[name] = value  # type: ignore[assignment]
    base = PRESETS["paper"].replace(tokenizer="o200k_base", chat_format="chatml", goal="g", **window)
    if value == largest:
        try:
            window_budgets(base, **preferences)
        except WindowTooSmall:
            pass
        return
    with pytest.raises(ConfigError) as refused:
        window_budgets(base, **preferences)
    assert not isinstance(refused.value, WindowTooSmall), refused.value
