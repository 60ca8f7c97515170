"""Every budget comparison at its boundary: exactly at the budget is accepted, one token over is not.

Found by mutation testing: turning a `<=` into `<` (or the reverse) survived the random properties,
which rarely land exactly on a budget. Each test here builds the exact-fit case on purpose.
"""

from __future__ import annotations

import attrs
import pytest

from arc_ref import render
from arc_ref.config import Setup, make_setup, preset
from arc_ref.errors import BudgetViolation
from arc_ref.history import agent_entry, command_entry
from arc_ref.ids import edit_distance
from arc_ref.machine import AgentTurn, Observe, agent_turn, fold, init, observe
from arc_ref.recall import admit, make_entry
from arc_ref.store import make_record
from arc_ref.summary import observation_item
from arc_ref.text import id_safe_cut


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
