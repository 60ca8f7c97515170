"""The theorem as a state machine: random interleavings of observe / think / act / recall / catalog /
compact / overflow, under both presets with random budgets, with one invariant per theorem claim."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from arc_ref.catalog import page_count, page_of, render_page
from arc_ref.config import Config
from arc_ref.errors import CapacityExceeded
from arc_ref.machine import (
    AgentTurn, ArcState, Compact, Observe, agent_turn, compact, compacted_count, init, lean_page, observe,
)
from arc_ref.recall import chunk_text, reassemble
from arc_ref.history import ObservationEntry
from arc_ref.render import recall_content, recall_response
from arc_ref.summary import render_summary
from arc_ref.store import decode_history, payload_tokens
from proofs_check.harness import exact_view, read_back
from proofs_check.registry import register, tally
from proofs_check.strategies import configs, normal_actions, texts, thoughts, unicode_texts

CLAIMS = ("T1", "T2", "T3", "T4", "T5", "T6")


class ArcMachine(RuleBasedStateMachine):
    """Model: the list of observations the environment produced; the system under test: ArcState."""

    ids = Bundle("ids")

    def __init__(self) -> None:
        super().__init__()
        self.state: ArcState | None = None
        self.history: list[str] = []
        self.payload = 0
        self.turns = 0

    @property
    def arc(self) -> ArcState:
        assert self.state is not None
        return self.state

    def _count(self) -> None:
        tally(f"{__name__}.{type(self).__name__}", CLAIMS)

    # --- rules: one per transition ------------------------------------------------------------

    def _store(self, action: str, content: str, returncode: int | None) -> str:
        self.state, result = observe(self.arc, Observe(action, content, returncode))
        self.history.append(content)
        self.payload += self.arc.setup.tokenizer.count(self.arc.setup.shown_form.show(content))  # n_j: of S(O)
        self._count()
        return result.obs_id

    @precondition(lambda self: self.state is not None and self.state.stored < self.state.config.capacity)
    @rule(target=ids, action=normal_actions, content=st.one_of(texts(200), unicode_texts(80)),
          returncode=st.integers(-2, 2) | st.none())  # None: no exit status known (rc=?)
    def observe(self, action: str, content: str, returncode: int | None) -> str:
        return self._store(action, content, returncode)

    @precondition(lambda self: self.state is not None and self.state.stored < self.state.config.capacity)
    @rule(target=ids, action=normal_actions, piece=texts(40).filter(bool), repeat=st.integers(20, 100))
    def observe_large(self, action: str, piece: str, repeat: int) -> str:
        """An observation that often exceeds R: stored first, shown as its stub, its id joins Cited (A4)."""
        return self._store(action, piece * repeat, 1)

    @precondition(lambda self: self.state is not None and self.state.stored < self.state.config.capacity)
    @rule(target=ids, thought=thoughts, action=normal_actions, content=texts(300))
    def act(self, thought: str, action: str, content: str) -> str:
        """A full step: the agent's normal action, then the environment's observation of it."""
        self.state, answered = agent_turn(self.arc, AgentTurn(thought, action))
        self.turns += 1
        assert not answered.command
        return self._store(action, content, 0)

    @precondition(lambda self: self.state is not None and self.state.stored == self.state.config.capacity)
    @rule(content=texts(20))
    def observe_past_capacity(self, content: str) -> None:
        before = self.arc
        with pytest.raises(CapacityExceeded):
            observe(before, Observe("ls", content, 0))
        assert self.arc is before
        self._count()

    @rule(thought=thoughts, action=normal_actions)
    def think(self, thought: str, action: str) -> None:
        self.state, answered = agent_turn(self.arc, AgentTurn(thought, action))
        self.turns += 1
        assert not answered.command and answered.response is None
        self._count()

    @rule(obs_id=ids, word=st.sampled_from(("_recall", "_recall-start", "_recall-next", "_recall_meta")),
          typo=st.booleans())
    def recall(self, obs_id: str, word: str, typo: bool) -> None:
        token = obs_id[:-1] + ("0" if obs_id[-1] != "0" else "1") if typo else obs_id
        self.state, answered = agent_turn(self.arc, AgentTurn("recall", f"{word} {token}"))
        self.turns += 1
        assert answered.command and answered.response
        if typo and all(r.obs_id != token for r in self.arc.records):
            assert not answered.recalls and "no stored observation has this id" in answered.response
        self._count()

    @rule(obs_id=ids)
    def recall_everything(self, obs_id: str) -> None:
        """Claim 4 on demand: read one observation back chunk by chunk (on a copy of the state)."""
        results, _ = read_back(self.arc, obs_id)
        index = next(r.index for r in self.arc.records if r.obs_id == obs_id)
        expected = self.history[index - 1]
        assert reassemble([r.payload for r in results]) == expected  # D: the chunks of S(O), S^-1 applied
        assert len(results) == max(1, results[0].chunks)
        self._count()

    @rule(word=st.sampled_from(("catalog-first", "catalog-next", "catalog-page")), page=st.integers(0, 6))
    def catalog(self, word: str, page: int) -> None:
        action = f"{word} {page}" if word == "catalog-page" else word
        self.state, answered = agent_turn(self.arc, AgentTurn("browse", action))
        self.turns += 1
        assert answered.command
        self._count()

    @rule()
    def compact_forced(self) -> None:
        self.state, _ = compact(self.arc, Compact("forced"))
        self._count()

    @rule()
    def overflow(self) -> None:
        """A context-overflow error from the server: the reactive trigger of the same routine."""
        self.state, _ = compact(self.arc, Compact("reactive"))
        self._count()

    # --- invariants: one per theorem claim ------------------------------------------------------

    @invariant()
    def claim1_prompt_safety(self) -> None:
        """Claim 1: tokens(transcript'_i) <= K <= L and tokens + G_max <= L_ctx, counted on the sent text."""
        if self.state is None:
            return
        _, exact = exact_view(self.arc)
        setup = self.arc.setup
        assert exact <= setup.budget <= setup.limit
        assert exact + setup.config.max_completion <= setup.config.context_limit
        config = setup.config
        if config.layout == "paper":  # the paper's rule: H within R
            assert self.arc.live_tokens <= config.recent_budget
        else:  # lean: the bound is on the sum, H using what S, G and U leave (spec/rendering.md section 11.1)
            parts = [0 if message is None else message.tokens
                     for message in (self.arc.summary.message, self.arc.catalog_message, self.arc.recall_message)]
            assert parts[0] <= config.summary_budget and parts[1] <= config.page_budget
            assert parts[2] <= config.recall_budget
            assert sum(parts) + self.arc.live_tokens <= (config.summary_budget + config.recent_budget
                                                         + config.page_budget + config.recall_budget)

    @invariant()
    def view_components_match_the_state(self) -> None:
        """A4: the cached messages are exactly the renderings of the state's S, G, U and H (nothing stale)."""
        if self.state is None:
            return
        arc = self.arc
        setup = arc.setup
        if arc.recall_buffer:
            assert arc.recall_message is not None
            assert arc.recall_message.content == recall_content(entry.response for entry in arc.recall_buffer)
        else:
            assert arc.recall_message is None
        if arc.config.layout == "lean":
            # section 14: the default page is that of the observations that have left H (none: no page); a
            # chosen page was rendered at its command or at the last compaction, later stubs not yet on it
            if arc.catalog_cursor is None:
                assert arc.catalog_message == lean_page(arc, None)
            else:
                assert arc.catalog_message is not None
                shown_lines = arc.catalog_message.content.split("\n")
                fresh_lines = render_page(setup, arc.records, arc.catalog_cursor).content.split("\n")
                assert shown_lines[1:] == fresh_lines[1 : len(shown_lines)]
                assert shown_lines[0].startswith(f"[ARC catalog page {arc.catalog_cursor}/")
        elif arc.stored:
            page = arc.catalog_cursor or page_count(arc.stored, arc.config.page_size)
            assert arc.catalog_message == render_page(setup, arc.records, page)
        else:
            assert arc.catalog_message is None
        assert arc.summary.message == render_summary(setup, arc.summary.items, arc.summary.omitted)
        assert arc.live_tokens == sum(entry.message.tokens for entry in arc.live)
        assert arc.turn == self.turns
        for item in arc.summary.items:
            if item.kind == "stub":
                assert item.index in arc.cited
        for entry in arc.live:
            if isinstance(entry, ObservationEntry) and not entry.verbatim:
                assert entry.index in arc.cited

    @invariant()
    def claim2_stable_archival_fidelity(self) -> None:
        """Claim 2: ObsStore[id_j].full_content = O_j for every stored j, ids unique."""
        if self.state is None:
            return
        assert [r.content for r in self.arc.records] == self.history
        ids = [r.obs_id for r in self.arc.records]
        assert len(set(ids)) == len(ids)

    @invariant()
    def claim3_persistent_discoverability(self) -> None:
        """Claim 3: every stub stays on its page ceil(j/p); at most one page is in the view."""
        if self.state is None:
            return
        arc = self.arc
        size = arc.config.page_size
        pages = page_count(arc.stored, size)
        for record in arc.records:
            page = page_of(record.index, size)
            assert page <= pages
            assert record.stub in render_page(arc.setup, arc.records, page).content.split("\n")
        shown, _ = exact_view(arc)
        catalogs = [m for m in shown.messages if m.content.startswith("[ARC catalog page")]
        if arc.config.layout == "lean":  # section 14: no page until an observation leaves H or one is chosen
            assert len(catalogs) == (0 if arc.catalog_cursor is None and compacted_count(arc) == 0 else 1)
        else:
            assert len(catalogs) == (1 if arc.stored else 0)

    @invariant()
    def claim4_recall_buffer_is_exact(self) -> None:
        """Claim 4: every body in U is exactly chunk l of its stored observation, and U <= Q."""
        if self.state is None:
            return
        arc = self.arc
        for entry in arc.recall_buffer:
            record = arc.records[entry.index - 1]
            payload, chunks = chunk_text(arc.setup, record.shown, entry.chunk)
            assert chunks == entry.chunks
            assert entry.response == recall_response(record.obs_id, entry.chunk, chunks, payload)
        if arc.recall_message is not None:
            assert arc.recall_message.tokens <= arc.config.recall_budget

    @invariant()
    def claim5_observational_losslessness(self) -> None:
        """Claim 5: the decoder D recovers the ordered observation history from the store alone."""
        if self.state is None:
            return
        assert list(decode_history(self.arc.records)) == self.history

    @invariant()
    def claim6_separation_of_growth(self) -> None:
        """Claim 6: archived payload = sum of n_j (grows), while K stays the configuration's constant."""
        if self.state is None:
            return
        arc = self.arc
        assert payload_tokens(arc.records) == self.payload
        setup = arc.setup
        assert setup.budget == (
            setup.prefix_tokens + arc.config.summary_budget + arc.config.recent_budget + arc.config.page_budget
            + arc.config.recall_budget + arc.config.overhead
        )


class MinimalPresetMachine(ArcMachine):
    @initialize(config=configs("minimal"))
    def start(self, config: Config) -> None:
        self.state = init(config)


class PaperPresetMachine(ArcMachine):
    @initialize(config=configs("paper"))
    def start(self, config: Config) -> None:
        self.state = init(config)


for _machine in (MinimalPresetMachine, PaperPresetMachine):
    register(f"{__name__}.{_machine.__name__}", CLAIMS)

TestMinimalPreset = MinimalPresetMachine.TestCase
TestPaperPreset = PaperPresetMachine.TestCase
