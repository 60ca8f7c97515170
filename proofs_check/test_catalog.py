"""A3, Lemma 3 and Theorem claim 3: bounded pages, exactly-once placement, reachable by a finite scan."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from arc_ref.catalog import page_count, page_of, page_span
from arc_ref.config import Config
from arc_ref.machine import Observe, init, observe, view
from arc_ref.render import USER
from proofs_check.harness import command, event_lists, run
from proofs_check.registry import proves
from proofs_check.strategies import configs, texts


@given(st.integers(0, 500), st.integers(1, 40))
@proves("L3", "A3")
def test_lemma3_every_stub_on_exactly_one_page(stored: int, page_size: int) -> None:
    """Lemma 3: z_j appears on exactly one page, page ceil(j/p), and there are ceil(N/p) pages of <= p stubs."""
    pages = page_count(stored, page_size)
    assert pages == math.ceil(stored / page_size)
    placement: dict[int, list[int]] = {}
    for page in range(1, pages + 1):
        first, last = page_span(page, page_size, stored)
        assert 1 <= last - first + 1 <= page_size
        for index in range(first, last + 1):
            placement.setdefault(index, []).append(page)
    assert sorted(placement) == list(range(1, stored + 1))
    for index, on_pages in placement.items():
        assert on_pages == [page_of(index, page_size)] == [math.ceil(index / page_size)]


@given(configs(), st.lists(texts(60), min_size=1, max_size=30), st.data())
@proves("L3", "T3", "A3")
def test_lemma3_scan_reaches_any_stub_within_ceil_j_over_p_pages(
    config: Config, contents: list[str], data: st.DataObject
) -> None:
    """Claim 3: from catalog-first, repeated catalog-next shows z_j within ceil(j/p) page materializations,
    each page costing <= P tokens and only one page in the view at a time."""
    state = init(config)
    for content in contents[: config.capacity]:
        state, _ = observe(state, Observe("cat f", content, 0))
    record = data.draw(st.sampled_from(list(state.records)))
    limit = math.ceil(record.index / config.page_size)
    state, answer = command(state, "catalog-first")
    materialized = 1
    while record.stub not in (state.catalog_message.content if state.catalog_message else ""):
        assert materialized < limit, "stub not reached within ceil(j/p) pages"
        state, answer = command(state, "catalog-next")
        materialized += 1
    assert materialized <= limit
    assert state.catalog_message is not None and state.catalog_message.tokens <= config.page_budget
    assert answer.response == state.catalog_message.content
    catalog_messages = [m for m in view(state).messages if m.role == USER and m.content.startswith("[ARC catalog page")]
    assert len(catalog_messages) == 1


@given(configs(), event_lists())
@proves("A3", "T3")
def test_a3_catalog_persists_every_stub_with_bounded_cost(config: Config, events: list[object]) -> None:
    """A3: one stub per stored observation, never removed, each costing <= c and naming its id and recall hint."""
    state = run(init(config), events)  # type: ignore[arg-type]
    setup = state.setup
    for index, record in enumerate(state.records, start=1):
        assert record.index == index
        assert record.stub_tokens == setup.line_tokens(record.stub) <= config.stub_cap
        assert record.stub.startswith(record.obs_id + " ") and record.stub.endswith("_recall " + record.obs_id)
        assert "\n" not in record.stub
    for page in range(1, page_count(state.stored, config.page_size) + 1):
        state, answer = command(state, f"catalog-page {page}")
        assert state.catalog_message is not None
        assert state.catalog_message.tokens <= config.page_budget
        first, last = page_span(page, config.page_size, state.stored)
        shown = state.catalog_message.content.split("\n")[1:]
        assert shown == [state.records[i - 1].stub for i in range(first, last + 1)]


@given(configs(), st.lists(texts(80), min_size=1, max_size=12),
       st.sampled_from(("", "]", "\n", "</s>", "x", "<|im_end|>", " ")), st.data())
@proves("A3", "L3")
def test_a3_page_tokens_exact_in_any_chat_format(config: Config, contents: list[str], end: str,
                                                  data: st.DataObject) -> None:
    """A page's count is its exact token count in a chat format of any message end, also one after which the
    header's closing "]" costs a token of its own (an empty end: there the header-plus-lines sum is one too high,
    so such a page is counted from its parts)."""
    import attrs

    from arc_ref.catalog import render_page
    from arc_ref.chat import ChatFormat

    state = init(config)
    for content in contents[: config.capacity]:
        state, _ = observe(state, Observe(data.draw(st.sampled_from(("ls", "cat a.txt", "grep x y  "))), content, 0))
    chat = ChatFormat("made-up", "<s>", end, "<s>assistant\n")
    setup = attrs.evolve(state.setup, chat=chat)
    page = data.draw(st.integers(1, page_count(state.stored, config.page_size)))
    message = render_page(setup, state.records, page)
    assert message.tokens == setup.tokenizer.count(chat.render_message(message.role, message.content))


@given(configs(), st.lists(texts(80), min_size=1, max_size=12), st.data())
@proves("A3", "L3")
def test_a3_page_tokens_are_header_plus_stub_lines(config: Config, contents: list[str], data: st.DataObject) -> None:
    """The cached cost of a page (header message + each stub's line cost) is its exact token count, for every
    tokenizer that declares ``stub_lines_add_up``; so G <= P is checked on exact counts."""
    from arc_ref.catalog import render_page

    state = init(config)
    for content in contents[: config.capacity]:
        state, _ = observe(state, Observe(data.draw(st.sampled_from(("ls", "cat a.txt", "grep x y  "))), content, 0))
    page = data.draw(st.integers(1, page_count(state.stored, config.page_size)))
    message = render_page(state.setup, state.records, page)
    assert state.setup.tokenizer.stub_lines_add_up
    assert message.tokens == state.setup.message_tokens(message.role, message.content)
