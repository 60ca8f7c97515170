"""Every budget comparison at its boundary: exactly at the budget is accepted, one token over is not.

Found by mutation testing: turning a `<=` into `<` (or the reverse) survived the random properties,
which rarely land exactly on a budget. Each test here builds the exact-fit case on purpose.
"""

from __future__ import annotations

from typing import Sequence

import attrs
import pytest

from arc_ref import machine, render
from arc_ref.config import Setup, make_setup, preset
from arc_ref.errors import BudgetViolation, CapacityExceeded, ConfigError
from arc_ref.history import AgentEntry, agent_entry, command_entry, observation_entry
from arc_ref.ids import IdScheme, edit_distance
from arc_ref.machine import AgentTurn, Compact, Observe, agent_turn, compact, fold, init, observe, view
from arc_ref.message import Message
from arc_ref.recall import admit, make_entry
from arc_ref.store import make_record, make_stub
from arc_ref.summary import fit_summary, observation_item, stub_item, thought_item
from arc_ref.text import ELLIPSIS, clipped, id_safe_cut
from arc_ref.tokenizers import get_tokenizer
from arc_ref.view import build_view


def _with(setup: Setup, **budgets: int) -> Setup:
    """The same setup with some budgets replaced, unvalidated (to reach a boundary directly)."""
    return attrs.evolve(setup, config=setup.config.replace(**budgets))


SETUP = make_setup(preset("minimal"))


def test_recall_buffer_keeps_both_responses_when_they_fill_q_exactly() -> None:
    first = make_entry(SETUP, 1, "§01-1", 1, 2, "alpha beta")
    second = make_entry(SETUP, 2, "§02-3", 1, 1, "gamma")
    together = admit(_with(SETUP, recall_budget=10**6), (first,), second)[1].tokens
    kept, message, evicted = admit(_with(SETUP, recall_budget=together), (first,), second)
    assert kept == (first, second) and evicted == () and message.tokens == together
    kept, message, evicted = admit(_with(SETUP, recall_budget=together - 1), (first,), second)
    assert kept == (second,) and evicted == (first,) and message.tokens <= together - 1


def test_one_recall_response_exactly_q_is_admitted_and_one_over_raises() -> None:
    only = make_entry(SETUP, 1, "§01-1", 1, 1, "alpha")
    alone = admit(_with(SETUP, recall_budget=10**6), (), only)[1].tokens
    assert admit(_with(SETUP, recall_budget=alone), (), only)[0] == (only,)
    with pytest.raises(BudgetViolation) as refused:
        admit(_with(SETUP, recall_budget=alone - 1), (), only)
    assert str(refused.value) == f"one recall response costs {alone} tokens > recall_budget Q = {alone - 1}"


def test_agent_message_of_exactly_r_tokens_stays_verbatim() -> None:
    thought, action = "look at the files " * 4, "ls -la"
    exact = SETUP.message_tokens(render.ASSISTANT, render.agent_message(thought, action))
    entry = agent_entry(_with(SETUP, recent_budget=exact), 1, thought, action)
    assert entry.message.content == render.agent_message(thought, action)
    clipped_entry = agent_entry(_with(SETUP, recent_budget=exact - 1), 1, thought, action)
    assert clipped_entry.message.content != render.agent_message(thought, action)
    assert clipped_entry.message.tokens <= exact - 1


def test_command_result_of_exactly_r_tokens_stays_verbatim() -> None:
    notes = ("catalog page 1 of 3", "_recall §01-1: chunk 1/2")
    exact = SETUP.message_tokens(render.USER, render.command_message(notes))
    assert command_entry(_with(SETUP, recent_budget=exact), 1, notes).message.content == render.command_message(notes)
    assert command_entry(_with(SETUP, recent_budget=exact - 1), 1, notes).message.tokens <= exact - 1


def test_short_observation_is_inline_when_it_fills_m_exactly() -> None:
    record = make_record(SETUP, 1, "cat a.txt", "tiny", 0, 0)
    line = render.inline_item(record.obs_id, 0, "cat a.txt", "tiny")
    exact = SETUP.summary_frame + SETUP.line_tokens(line)
    assert observation_item(_with(SETUP, summary_budget=exact), record, False).kind == "inline"
    assert observation_item(_with(SETUP, summary_budget=exact - 1), record, False).kind == "stub"
    assert observation_item(_with(SETUP, summary_budget=exact), record, True).kind == "stub"  # cited: handle kept


def test_fold_stops_once_h_is_at_most_the_target() -> None:
    state = init(preset("minimal"))
    for number in range(3):
        state, _ = agent_turn(state, AgentTurn(f"step {number}", "ls"))
    tokens = [entry.message.tokens for entry in state.live]
    unchanged, count = fold(state, state.live_tokens)
    assert count == 0 and unchanged is state
    folded, count = fold(state, state.live_tokens - 1)
    assert count == 1 and folded.live_tokens == sum(tokens[1:])


def test_recall_next_without_a_cursor_starts_at_chunk_one() -> None:
    state = init(preset("minimal"))
    state, stored = observe(state, Observe("cat big.txt", "x" * 100, 0))
    state, answered = agent_turn(state, AgentTurn("read", f"_recall-next {stored.obs_id}"))
    assert [(r.chunk, r.chunks) for r in answered.recalls] == [(1, stored.chunks)]
    state, answered = agent_turn(state, AgentTurn("read", f"_recall-next {stored.obs_id}"))
    assert [r.chunk for r in answered.recalls] == [2]


def test_a_normal_action_has_no_notes_and_no_recalls() -> None:
    _, answered = agent_turn(init(preset("minimal")), AgentTurn("think", "ls"))
    assert (answered.command, answered.response, answered.notes, answered.recalls) == (False, None, (), ())


@pytest.mark.parametrize(
    ("text", "cut", "expected"),
    [
        ("abc", 1, 1),  # only id characters, no section sign: any cut is safe
        ("ab§", 1, 1),  # a section sign at the very end is not before the cut
        ("§ab", 2, 0),  # inside §ab: back to before the §
        ("x §01-2 y", 4, 2),
        ("x §01-2 y", 7, 7),  # right after the id: nothing split
        ("§", 1, 1),
        ("", 0, 0),
        ("ab", 0, 0),
    ],
)
def test_id_safe_cut_examples(text: str, cut: int, expected: int) -> None:
    assert id_safe_cut(text, cut) == expected


@pytest.mark.parametrize(
    ("left", "right", "distance"),
    [("", "", 0), ("", "ab", 2), ("ab", "", 2), ("abc", "abxc", 1), ("abxc", "abc", 1), ("kitten", "sitting", 3),
     ("ab", "ba", 2), ("0012", "00112", 1), ("flaw", "lawn", 2), ("same", "same", 0)],
)
def test_edit_distance_examples(left: str, right: str, distance: int) -> None:
    assert edit_distance(left, right) == distance


def test_summary_line_of_exactly_c_tokens_is_kept_whole_and_a_smaller_cap_clips_or_refuses() -> None:
    entry = AgentEntry(4, "scan logs", "grep -n err", Message(render.ASSISTANT, "", 0))  # within the clip lengths
    whole = render.thought_item(4, "scan logs", "grep -n err")
    exact = SETUP.line_tokens(whole)
    assert thought_item(_with(SETUP, stub_cap=exact), entry).text == whole
    assert thought_item(_with(SETUP, stub_cap=exact - 1), entry).text != whole
    empty_line = render.thought_item(4, ELLIPSIS, ELLIPSIS)
    assert thought_item(_with(SETUP, stub_cap=SETUP.line_tokens(empty_line)), entry).text == empty_line
    with pytest.raises(BudgetViolation) as refused:
        thought_item(_with(SETUP, stub_cap=SETUP.line_tokens(empty_line) - 1), entry)
    assert str(refused.value) == "a summary line cannot fit stub_cap c even fully clipped"


def test_stub_of_exactly_c_tokens_keeps_its_signature_and_a_smaller_cap_refuses() -> None:
    bare = render.stub("§01-1", 0, 5, 5, "cat a.txt", "", "")
    exact = SETUP.line_tokens(bare)
    line, tokens = make_stub(_with(SETUP, stub_cap=exact), "§01-1", 0, 5, 5, "cat a.txt", "hello", "")
    assert (line, tokens) == (bare, exact)
    floor = SETUP.line_tokens(render.stub("§01-1", 0, 5, 5, ELLIPSIS, "", ""))
    with pytest.raises(BudgetViolation) as refused:
        make_stub(_with(SETUP, stub_cap=floor - 1), "§01-1", 0, 5, 5, "cat a.txt", "hello", "")
    assert str(refused.value) == f"stub of §01-1 cannot fit stub_cap c = {floor - 1} tokens"


def test_observation_message_of_exactly_r_tokens_is_verbatim_and_its_stub_must_fit_r() -> None:
    record = make_record(SETUP, 1, "cat a.txt", "a line of the file\n" * 20, 0, 0)
    full = render.lean_observation_message(0, record.content)  # layout "lean", the default
    exact = SETUP.message_tokens(render.USER, full)
    assert observation_entry(_with(SETUP, recent_budget=exact), record).verbatim
    shown = observation_entry(_with(SETUP, recent_budget=exact - 1), record)
    assert not shown.verbatim
    stub_tokens = shown.message.tokens
    assert observation_entry(_with(SETUP, recent_budget=stub_tokens), record).message == shown.message
    with pytest.raises(BudgetViolation) as refused:
        observation_entry(_with(SETUP, recent_budget=stub_tokens - 1), record)
    assert str(refused.value) == f"the stub message of {record.obs_id} costs {stub_tokens} > recent_budget R"


def test_agent_message_that_cannot_fit_r_even_clipped_is_refused_by_name() -> None:
    floor = SETUP.message_tokens(render.ASSISTANT, render.agent_message(ELLIPSIS, ELLIPSIS))
    assert agent_entry(_with(SETUP, recent_budget=floor), 1, "long thought " * 9, "ls " * 9).message.tokens == floor
    with pytest.raises(BudgetViolation) as refused:
        agent_entry(_with(SETUP, recent_budget=floor - 1), 1, "long thought " * 9, "ls " * 9)
    assert str(refused.value) == "an agent message cannot fit recent_budget R even fully clipped"


def test_summary_frame_over_m_is_refused_by_name() -> None:
    record = make_record(SETUP, 1, "cat a.txt", "x" * 40, 0, 0)
    tight = _with(SETUP, summary_budget=SETUP.summary_base - 1)
    with pytest.raises(BudgetViolation) as refused:
        fit_summary(tight, [stub_item(tight, record)], 0, lambda index: record)
    assert str(refused.value) == f"the summary frame alone exceeds summary_budget M = {SETUP.summary_base - 1}"


def test_view_exactly_at_k_is_accepted_and_h_over_r_is_named() -> None:
    state, _ = observe(init(preset("minimal")), Observe("ls", "a.txt", 0))
    shown = view(state)
    at_k = attrs.evolve(state.setup, budget=shown.tokens)
    assert build_view(at_k, state.prefix, state.summary.message, state.catalog_message, None, state.live) == \
        attrs.evolve(shown, budget=shown.tokens)
    small_r = _with(state.setup, recent_budget=state.live_tokens - 1, layout="paper")
    with pytest.raises(BudgetViolation) as refused:
        build_view(small_r, state.prefix, None, None, None, state.live)
    assert str(refused.value) == (
        f"component over budget: recent_budget R: {state.live_tokens} > {state.live_tokens - 1}"
    )
    # layout lean: H may use what S, G and U leave unused; the bound is on the sum (spec/rendering.md 11.1)
    unused = sum(getattr(state.config, name) for name in ("summary_budget", "page_budget", "recall_budget"))
    lean = _with(state.setup, recent_budget=state.live_tokens - unused)
    assert build_view(lean, state.prefix, None, None, None, state.live).components.recent == state.live_tokens
    tight = _with(state.setup, recent_budget=state.live_tokens - unused - 1)
    with pytest.raises(BudgetViolation) as refused:
        build_view(tight, state.prefix, None, None, None, state.live)
    assert str(refused.value) == (f"component over budget: recent H: R + what S, G and U leave unused:"
                                  f" {state.live_tokens} > {state.live_tokens - 1}")


def test_id_scheme_refusals_and_widest_id() -> None:
    assert IdScheme(24, 3).widest() == "§24-7"
    assert IdScheme(999, 12).widest() == "§0999-4095"
    assert IdScheme(5, 0).widest() == "§5"
    with pytest.raises(ConfigError) as small:
        IdScheme(1, 3)
    assert str(small.value) == "capacity (N_max) must be >= 2, got 1"
    with pytest.raises(ConfigError) as wide:
        IdScheme(10, 161)
    assert str(wide.value) == "fingerprint_bits (d) must be in 0..160, got 161"
    with pytest.raises(CapacityExceeded) as past:
        IdScheme(10, 3).format(11, 0)
    assert str(past.value) == "observation #11 exceeds the declared capacity N_max = 10"


def test_only_ascii_whitespace_separates_command_words() -> None:
    state = init(preset("minimal"))
    _, answered = agent_turn(state, AgentTurn("t", "\u2003catalog-first"))
    assert not answered.command  # an em space is not whitespace to the command parser
    _, answered = agent_turn(state, AgentTurn("t", " \tcatalog-first \x0b"))
    assert answered.command


def test_chat_render_without_the_generation_prompt() -> None:
    chat = SETUP.chat
    text = chat.render([(render.USER, "hi")], add_generation_prompt=False)
    assert text == chat.render_message(render.USER, "hi")
    assert chat.render([(render.USER, "hi")]) == text + chat.generation_prompt
    assert repr(get_tokenizer("bytes")) == "ByteTokenizer()"


def test_short_observation_once_shown_as_its_stub_is_never_inlined() -> None:
    """Compaction: an id shown as a recall handle (here the stub in H) stays a handle in S."""
    base = preset("minimal")
    # S large enough to hold the observation inline, so only the handle rule keeps it a stub
    config = preset("minimal", keep_verbatim_chars=10**6, summary_budget=4 * base.recent_budget,
                    context_limit=base.context_limit + 4 * base.recent_budget)
    state = init(config)
    content = "y" * (config.recent_budget + 10)  # short by the threshold, too big for H
    state, stored = observe(state, Observe("cat y.txt", content, 0))
    assert not stored.verbatim
    for number in range(6):
        state, _ = agent_turn(state, AgentTurn(f"step {number}", "ls"))
    state, _ = compact(state, Compact("forced"))
    folded = [item for item in state.summary.items if item.index == 1]
    assert folded and folded[0].kind in ("stub", "bare")
    inline = observation_item(state.setup, state.records[0], False)
    assert inline.kind == "inline"  # what it would have been had it not been shown as a handle


class _OneExtraTokenPerText:
    """Counts one token more than bytes for every text: sums over messages then exceed the whole."""

    name = "one-extra"
    chunk_overrun = 3
    stub_lines_add_up = False

    def count(self, text: str) -> int:
        return len(text.encode("utf-8")) + 1

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def token_starts(self, text: str) -> list[int]:
        return list(range(len(text)))


def test_init_refuses_a_tokenizer_whose_message_counts_do_not_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    real = make_setup
    monkeypatch.setattr(machine, "make_setup", lambda config: attrs.evolve(real(config), tokenizer=_OneExtraTokenPerText()))
    with pytest.raises(BudgetViolation) as refused:
        init(preset("minimal"))
    assert str(refused.value) == (
        "tokenizer 'one-extra' merges across message boundaries; token counts of the view would not add up"
    )


def test_a_clipped_summary_line_of_exactly_c_tokens_is_taken() -> None:
    """The halving stops at the first clipped thought whose line costs <= c, including == c."""
    entry = AgentEntry(4, "abcdefgh", "ls", Message(render.ASSISTANT, "", 0))
    half = render.thought_item(4, clipped("abcdefgh", 4), "ls")
    assert thought_item(_with(SETUP, stub_cap=SETUP.line_tokens(half)), entry).text == half


def test_a_clipped_stub_signature_of_exactly_c_tokens_is_taken() -> None:
    signature = "cat a-rather-long-file-name.txt"
    shown = clipped(signature, SETUP.config.signature_chars)
    half = render.stub("§01-1", 0, 5, 5, clipped(shown, len(shown) // 2), "", "")
    line, tokens = make_stub(_with(SETUP, stub_cap=SETUP.line_tokens(half)), "§01-1", 0, 5, 5, signature, "hello", "")
    assert (line, tokens) == (half, SETUP.line_tokens(half))
