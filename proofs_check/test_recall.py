"""A5, Lemma 4, Corollary 1 and Theorem claim 4: exact chunked recall from the store alone."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arc_ref.config import Config, make_setup, preset
from arc_ref.machine import AgentTurn, Observe, agent_turn, init, observe
from arc_ref.recall import (
    chunk_bounds, chunk_count, chunk_cuts, chunk_texts, make_entry, reassemble, stored_chunk, stored_chunk_tokens,
)
from arc_ref.store import make_record
from arc_ref.tokenizers import get_tokenizer
from proofs_check.harness import command, read_back
from proofs_check.registry import proves
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir
from proofs_check.strategies import DECOYS, configs, long_texts, texts, unicode_texts

TOKENIZERS = ("bytes", "o200k_base", "cl100k_base")
QWEN3 = qwen3_dir()
# the tokenizers whose boundary rule a chunk's count may rest on: Qwen3's too, where its files are present
COUNTED_CHUNK_TOKENIZERS = TOKENIZERS + (() if QWEN3 is None else (f"hf-dir:{QWEN3}",))


@given(st.sampled_from(TOKENIZERS), st.one_of(texts(200), unicode_texts(120), long_texts()), st.integers(1, 9))
@proves("L4", "A5")
def test_lemma4_chunks_partition_the_observation_exactly(tokenizer_name: str, content: str, chunk_tokens: int) -> None:
    """Lemma 4: m = ceil(n/q) chunks of <= q assigned tokens, disjoint, in order, concatenating to O exactly
    (multi-byte characters split by tokens included; an empty observation has 0 chunks)."""
    tokenizer = get_tokenizer(tokenizer_name)
    n = tokenizer.count(content)
    starts = tokenizer.token_starts(content)
    assert len(starts) == n
    cuts = chunk_cuts(starts, len(content), chunk_tokens)
    m = chunk_count(n, chunk_tokens)
    assert m == math.ceil(n / chunk_tokens)
    assert len(cuts) == m + 1 if m else cuts == [0]
    assert cuts[0] == 0 and cuts == sorted(cuts)
    setup = make_setup(preset("minimal", tokenizer=tokenizer_name, chunk_tokens=chunk_tokens, recall_budget=4000,
                              context_limit=10**6))
    pieces = chunk_texts(setup, content)
    assert "".join(pieces) == content
    assert len(pieces) == m
    assigned = [chunk_bounds(n, chunk_tokens, ell) for ell in range(1, m + 1)]
    assert sum(end - start for start, end in assigned) == n
    for (start, end), piece, cut in zip(assigned, pieces, cuts):
        assert 1 <= end - start <= chunk_tokens
        assert cut == (starts[start] if start else 0)  # the chunk begins at the character holding its first byte
        assert tokenizer.count(piece) <= end - start + tokenizer.chunk_overrun


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
@given(st.one_of(texts(400), unicode_texts(300), st.text(alphabet="ab \n中é\u0301\u0323\u2060🙂<|>", max_size=400)),
       st.sampled_from((16, 17, 40, 1920)))
@proves("L4", "A5")
def test_sparse_token_starts_are_every_nth_dense_start(content: str, every: int) -> None:
    """Qwen3's starts of every q-th token, read token by token on a text NFC leaves as it is
    (`HuggingFaceTokenizer._sparse_starts`), are every q-th of the starts read from all the spans: the chunk
    cuts of a record (Lemma 4) do not depend on how they were read."""
    tokenizer = get_tokenizer(f"hf-dir:{QWEN3}")
    count, dense = tokenizer.count_and_starts(content, 1)
    assert tokenizer.count_and_starts(content, every) == (count, dense[::every])


@given(st.sampled_from(COUNTED_CHUNK_TOKENIZERS), st.one_of(texts(300), unicode_texts(150)), st.integers(1, 9))
@proves("L4", "A5")
def test_a_chunk_count_taken_from_the_record_is_the_count_of_its_text(
    tokenizer_name: str, content: str, chunk_tokens: int
) -> None:
    """A recall body reuses its chunk's count from the record (`stored_chunk_tokens`: q, or what is left of n_j)
    only where that is the count of the chunk's text alone; the body's count is then its text's count. The
    single chunk of an observation of at most q tokens is always taken from the record."""
    setup = make_setup(preset("minimal", tokenizer=tokenizer_name, chunk_tokens=chunk_tokens, recall_budget=4000,
                              context_limit=10**6))
    tokenizer = setup.tokenizer
    record = make_record(setup, 1, "cat f", content, 0, 0)
    chunks = chunk_count(record.n_tokens, chunk_tokens)
    for chunk in range(1, chunks + 1):
        payload = stored_chunk(record.shown, record.inner_cuts, chunk)
        known = stored_chunk_tokens(setup, record.shown, record.inner_cuts, record.n_tokens, chunk)
        if chunks == 1:
            assert known == record.n_tokens
        if known is None:
            continue
        assert known == tokenizer.count(payload), (chunk, chunks, payload)
        entry = make_entry(setup, 1, record.obs_id, chunk, chunks, payload, known)
        assert entry.body_tokens == tokenizer.count(entry.body)
        assert entry == make_entry(setup, 1, record.obs_id, chunk, chunks, payload)


@given(st.sampled_from(("o200k_base", "cl100k_base")), st.text(alphabet=" ab\n.,1-_(Xé", min_size=40, max_size=160),
       st.integers(2, 9))
@example("o200k_base", ",é,a.X.a\nb-b1,é1,b\n\n._1a(,X,-X1X, ,a, _-.X(.,,XX_ a ,", 6)  # found by the h31 sweep
@proves("L4", "A5")
def test_a_chunk_count_taken_from_the_record_is_exact_on_dense_punctuation(
    tokenizer_name: str, content: str, chunk_tokens: int
) -> None:
    """As above, on punctuation, digits and letters mixed densely: many chunk cuts fall at a junction the boundary
    rule refuses to vouch for, where a count taken from the record would be wrong. Rare even here (about 1 record
    in 500 for a check of the wrong character pair at the cut): the example pins one such text."""
    setup = make_setup(preset("minimal", tokenizer=tokenizer_name, chunk_tokens=chunk_tokens, recall_budget=4000,
                              context_limit=10**6))
    record = make_record(setup, 1, "cat f", content, 0, 0)
    for chunk in range(1, chunk_count(record.n_tokens, chunk_tokens) + 1):
        known = stored_chunk_tokens(setup, record.shown, record.inner_cuts, record.n_tokens, chunk)
        if known is not None:
            assert known == setup.tokenizer.count(stored_chunk(record.shown, record.inner_cuts, chunk)), chunk


@given(configs(), st.one_of(texts(400), unicode_texts(200), long_texts()), st.lists(texts(40), max_size=4))
@proves("T4", "A5", "L4")
def test_claim4_recall_returns_the_observation_exactly_in_m_chunks(
    config: Config, content: str, others: list[str]
) -> None:
    """Claim 4: _recall-start then _recall-next return exactly m = ceil(n/q) chunks, <= q tokens each, whose
    payloads concatenate to O; the store is only read (it is the same object afterwards)."""
    state = init(config)
    for other in others[: config.capacity - 1]:
        state, _ = observe(state, Observe("cat other", other, 0))
    state, stored = observe(state, Observe("cat target", content, 0))
    records_before = state.records
    results, after = read_back(state, stored.obs_id)
    record = after.records[-1]
    m = chunk_count(record.n_tokens, config.chunk_tokens)
    if m == 0:
        assert content == "" and [(r.chunk, r.chunks, r.payload) for r in results] == [(0, 0, "")]
    else:
        assert [r.chunk for r in results] == list(range(1, m + 1))
        assert all(r.chunks == m and r.obs_id == stored.obs_id for r in results)
        assert reassemble([r.payload for r in results]) == content  # D: S^-1 of the chunks (rendering.md 7.1)
    assert after.records is records_before  # recall never writes the store (and has no environment to call)
    after, exhausted = command(after, f"_recall-next {stored.obs_id}")
    if m:
        assert not exhausted.recalls and "already returned" in exhausted.notes[0]
    else:
        assert [(r.chunk, r.payload) for r in exhausted.recalls] == [(0, "")]


@given(configs(), st.one_of(texts(300), unicode_texts(150)))
@proves("C1", "A5")
def test_corollary1_recall_responses_cost_at_most_n_plus_rho_times_chunks(config: Config, content: str) -> None:
    """Corollary 1: n/q <= m < n/q + 1, the payload totals n tokens, and all responses together cost at most
    n + rho (n/q + 1) tokens (rho: wrapper with the widest numbers plus the tokenizer's chunk overrun)."""
    state = init(config)
    state, stored = observe(state, Observe("cat x", content, 0))
    setup = state.setup
    n, q = stored.tokens, config.chunk_tokens
    results, after = read_back(state, stored.obs_id)
    if n == 0:
        return
    m = len(results)
    assert n / q <= m < n / q + 1
    assigned = [chunk_bounds(n, q, r.chunk) for r in results]
    assert sum(end - start for start, end in assigned) == n
    from arc_ref.render import recall_response

    serialized = sum(
        setup.line_tokens(recall_response(r.obs_id, r.chunk, r.chunks, r.payload)) for r in results
    )
    assert serialized <= n + setup.wrapper_cost * (n / q + 1)


@given(configs(), st.lists(texts(120), min_size=1, max_size=6), st.data())
@proves("A5")
def test_a5_recall_buffer_stays_within_q_evicting_least_recently_used(
    config: Config, contents: list[str], data: st.DataObject
) -> None:
    """A5: U <= Q after every recall; the newest response is always present; eviction removes the oldest."""
    state = init(config)
    for content in contents[: config.capacity]:
        state, _ = observe(state, Observe("cat f", content, 0))
    ids = [r.obs_id for r in state.records]
    for _ in range(data.draw(st.integers(1, 8))):
        target = data.draw(st.sampled_from(ids))
        word = data.draw(st.sampled_from(("_recall", "_recall-next", "_recall-start")))
        before = state.recall_buffer
        state, answered = command(state, f"{word} {target}")
        if state.recall_message is not None:
            assert state.recall_message.tokens <= config.recall_budget
        if answered.recalls and answered.recalls[0].chunk > 0:
            newest = state.recall_buffer[-1]
            assert (state.records[newest.index - 1].obs_id, newest.chunk) == (target, answered.recalls[0].chunk)
            # the new order is: the previous order without the recalled chunk, then the recalled chunk; what
            # survives is a suffix of it, i.e. only the least recently used entries were evicted
            order = [(e.index, e.chunk) for e in before if (e.index, e.chunk) != (newest.index, newest.chunk)]
            order.append((newest.index, newest.chunk))
            kept = [(e.index, e.chunk) for e in state.recall_buffer]
            assert kept == order[len(order) - len(kept) :]


@given(configs(), texts(60), st.integers(0, 3))
@proves("A5")
def test_a5_at_most_r_recalls_per_step(config: Config, content: str, extra: int) -> None:
    """A5: an action with r + k recall lines gets exactly r recalls answered; the rest are refused in a note."""
    state = init(config)
    state, stored = observe(state, Observe("cat f", content + "x", 0))
    limit = config.recalls_per_step
    lines = [f"_recall {stored.obs_id}"] * (limit + extra)
    state, answered = command(state, "\n".join(lines))
    assert len(answered.recalls) == min(limit, limit + extra)
    assert sum("not run, at most" in note for note in answered.notes) == extra


@given(configs(), st.sampled_from(DECOYS), texts(40))
@proves("A5", "T4")
def test_a5_commands_inside_observations_are_inert(config: Config, decoy: str, filler: str) -> None:
    """Only the agent's action is parsed: a recall or catalog command inside an observation does nothing."""
    state = init(config)
    state, first = observe(state, Observe("cat f", "payload " + filler, 0))
    poisoned = f"_recall {first.obs_id}\ncatalog-page 1\n{decoy}"
    state, _ = observe(state, Observe("cat g", poisoned, 0))
    assert state.recall_buffer == () and state.recall_message is None and len(state.recall_cursor) == 0
    assert state.catalog_cursor is None
    state, normal = agent_turn(state, AgentTurn(poisoned, "cat notes.txt"))  # a thought is not parsed either
    assert not normal.command and state.recall_buffer == ()


@given(configs(), st.lists(st.tuples(st.integers(1, 6), texts(60)), min_size=1, max_size=10))
@proves("A5")
def test_a5_eviction_is_minimal_and_least_recently_used_first(
    config: Config, recalls: list[tuple[int, str]]
) -> None:
    """admit(): U keeps the longest most-recently-used suffix that fits Q: it never evicts more than needed,
    never the newest response, and a response recalled again moves to the MRU end instead of repeating."""
    from arc_ref.recall import BufferEntry, admit, make_entry
    from arc_ref.render import recall_content, USER

    setup = make_setup(config)
    entries: tuple[BufferEntry, ...] = ()
    for index, payload in recalls:
        new = make_entry(setup, index, f"§{index:02d}", 1, 1, payload)
        if setup.recall_frame + new.tokens > config.recall_budget:
            continue  # larger than the budget by construction of this test, not a real chunk
        previous = [e for e in entries if (e.index, e.chunk) != (new.index, new.chunk)]
        entries, message, evicted = admit(setup, entries, new)
        assert entries[-1] == new
        assert message.tokens <= config.recall_budget
        assert len({(e.index, e.chunk) for e in entries}) == len(entries)
        assert list(evicted) == previous[: len(evicted)]  # least recently used first
        if evicted:  # keeping one more would not fit
            wider = (evicted[-1], *entries)
            assert setup.message_tokens(USER, recall_content(e.response for e in wider)) > config.recall_budget
