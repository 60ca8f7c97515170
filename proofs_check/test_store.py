"""D1, A2 and Theorem claims 2, 5, 6: the store is append-only and decodes to the observation history."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from arc_ref.config import Config
from arc_ref.machine import Observe, init, observe, view
from arc_ref.store import Record, decode_history, payload_tokens
from proofs_check.harness import apply, event_lists
from proofs_check.registry import proves
from proofs_check.strategies import configs, long_texts, texts, unicode_texts


@given(configs(), event_lists(max_events=30, contents=st.one_of(texts(160), long_texts())))
@proves("A2", "T2", "D1")
def test_claim2_records_are_never_rewritten(config: Config, events: list[object]) -> None:
    """Claim 2 by induction over transitions: after O_j is stored, ObsStore[id_j].full_content = O_j and the
    record object itself is unchanged by every later event (observe, agent turn, recall, catalog, compaction)."""
    state = init(config)
    history: list[str] = []
    seen: list[Record] = []
    for event in events:
        state = apply(state, event)  # type: ignore[arg-type]
        if isinstance(event, Observe) and len(state.records) > len(seen):
            history.append(event.observation)
            seen.append(state.records[-1])
        assert len(state.records) == len(seen)
        for record, original, content in zip(state.records, seen, history):
            assert record is original and record.content == content
    ids = [record.obs_id for record in state.records]
    assert len(set(ids)) == len(ids)


@given(configs(), st.lists(st.one_of(unicode_texts(60), long_texts()), max_size=12))
@proves("A2", "T2")
def test_a2_observation_is_stored_before_compaction_can_remove_it(config: Config, contents: list[str]) -> None:
    """A2: the record exists and is exact in the very state where the proactive compaction folded it away."""
    state = init(config)
    for content in contents[: config.capacity]:
        state, result = observe(state, Observe("cat f", content, 0))
        assert state.records[result.index - 1].content == content
        assert state.records[result.index - 1].obs_id == result.obs_id


@given(configs(), st.lists(st.one_of(unicode_texts(40), long_texts()), max_size=12),
       st.lists(st.one_of(unicode_texts(40), long_texts()), max_size=12))
@proves("T5", "D1")
def test_claim5_decoder_recovers_the_history_so_the_map_is_injective(
    config: Config, first: list[str], second: list[str]
) -> None:
    """Claim 5: D(ObsStore) = (O_1..O_N); hence distinct histories never give the same archived state."""
    stores = []
    for history in (first[: config.capacity], second[: config.capacity]):
        state = init(config)
        for content in history:
            state, _ = observe(state, Observe("cat f", content, 0))
        assert list(decode_history(state.records)) == history
        stores.append(state.records)
    if first[: config.capacity] != second[: config.capacity]:
        assert decode_history(stores[0]) != decode_history(stores[1])


@given(configs(), event_lists(max_events=30))
@proves("T6", "C2")
def test_claim6_archive_grows_with_payload_while_view_bound_is_fixed(config: Config, events: list[object]) -> None:
    """Claim 6: the archived payload is exactly sum n_j tokens (n_j of the shown form S(O_j)) and grows, while K
    does not depend on i or N."""
    state = init(config)
    budget = state.setup.budget
    total = 0
    for event in events:
        before = state.stored
        state = apply(state, event)  # type: ignore[arg-type]
        if state.stored > before:
            record = state.records[-1]  # n_j counts the shown form S(O_j) (rendering.md 7.1), O_j is stored
            assert record.shown == state.setup.shown_form.show(record.content)
            total += state.setup.tokenizer.count(record.shown)
        assert payload_tokens(state.records) == total
        assert state.setup.budget == budget
        assert view(state).tokens <= budget
