"""Tool mode: a user message after the goal (machine.UserMessage, spec/rendering.md section 13).

On the small tool-capable template and tokenizer of tests/core/test_tool_mode.py.
"""

from __future__ import annotations

import pytest

from arc_ref.errors import CapacityExceeded, InvalidEvent
from arc_ref.machine import (
    USER_ACTION,
    Compact,
    ToolResult,
    ToolTurn,
    UserMessage,
    init,
    step,
    view,
)
from arc_ref.message import ToolCall
from arc_ref.recall import stored_chunk
from arc_ref.store import decode_history
from arc_ref.summary import EMPTY_SUMMARY
from tests.core.test_tool_mode import model_dir, pairs_hold, tool_config  # noqa: F401  (fixture)

FOLLOW_UP = "Also check the second file, please."


def test_a_user_message_is_stored_and_shown_as_a_user_message(model_dir: str) -> None:  # noqa: F811
    """A2: stored as the next observation under the action 'user'; A4: shown verbatim as a user message in H."""
    state = init(tool_config(model_dir))
    state, turn = step(state, ToolTurn("read it", (ToolCall("c1", "read_file", '{"path": "a"}'),)))
    state, _ = step(state, ToolResult("c1", "alpha"))
    state, output = step(state, UserMessage(FOLLOW_UP))
    assert output.index == 2 and output.verbatim and output.obs_id == state.record(2).obs_id
    assert state.record(2).content == FOLLOW_UP and state.record(2).signature == USER_ACTION
    assert decode_history(state.records) == ("alpha", FOLLOW_UP)
    messages = view(state).chat_messages()
    assert messages[-1] == {"role": "user", "content": FOLLOW_UP}
    assert view(state).tokens <= state.setup.budget
    pairs_hold(state)


def test_a_user_message_waits_for_pending_results_and_belongs_to_tool_mode(model_dir: str) -> None:  # noqa: F811
    state = init(tool_config(model_dir))
    state, _ = step(state, ToolTurn("", (ToolCall("c1", "read_file", "{}"),)))
    with pytest.raises(InvalidEvent, match="while tool call.s. c1 have no result yet"):
        step(state, UserMessage("now"))
    state, _ = step(state, ToolResult("c1", "x"))
    with pytest.raises(InvalidEvent, match="content must be a string"):
        step(state, UserMessage(b"bytes"))  # type: ignore[arg-type]
    text_state = init(tool_config(model_dir).replace(action_mode="text", tools=()))
    with pytest.raises(InvalidEvent, match="needs action_mode 'tools'"):
        step(text_state, UserMessage("hello"))
    full = init(tool_config(model_dir, capacity=2))
    full, _ = step(full, UserMessage("one"))
    full, _ = step(full, UserMessage("two"))
    with pytest.raises(CapacityExceeded, match="capacity N_max is 2"):
        step(full, UserMessage("three"))


def test_a_user_message_larger_than_r_is_its_stub_and_recalled_exactly(model_dir: str) -> None:  # noqa: F811
    """A4: a message over R is shown as its stub (it joins Cited); A5: its chunks reassemble it exactly."""
    state = init(tool_config(model_dir, recent_budget=300, chunk_tokens=40))
    pasted = "\n".join(f"pasted log line {number}: status ok" for number in range(200))
    state, output = step(state, UserMessage(pasted))
    assert not output.verbatim and output.chunks > 1 and 1 in state.cited
    assert output.obs_id in view(state).chat_messages()[-1]["content"]
    record = state.record(1)
    assert "".join(stored_chunk(record.shown, record.inner_cuts, chunk)
                   for chunk in range(1, output.chunks + 1)) == pasted
    recalled = []
    for number in range(output.chunks):
        word = "_recall" if number == 0 else "_recall-next"
        state, turn = step(state, ToolTurn("", (ToolCall(f"r{number}", word, f'{{"id": "{output.obs_id}"}}'),)))
        recalled += [recall.payload for recall in turn.recalls]
        assert view(state).tokens <= state.setup.budget
    assert "".join(recalled) == pasted


def test_a_user_message_folds_as_a_unit_never_inside_a_call_and_its_result(model_dir: str) -> None:  # noqa: F811
    """Compaction folds a user message whole (a unit of its own) into S as an observation item."""
    state = init(tool_config(model_dir, recent_budget=400, summary_budget=600))
    for turn in range(25):
        state, _ = step(state, ToolTurn(f"turn {turn}", (ToolCall(f"c{turn}", "read_file", "{}"),)))
        pairs_hold(state)
        state, _ = step(state, ToolResult(f"c{turn}", "file text " * (turn % 7 + 1)))
        pairs_hold(state)
        state, _ = step(state, UserMessage(f"follow-up {turn}: " + "more " * (turn % 5)))
        pairs_hold(state)
        assert view(state).tokens <= state.setup.budget
    assert state.summary != EMPTY_SUMMARY
    shown = {item.index for item in state.summary.items}
    assert any(state.record(index).signature == USER_ACTION for index in shown if index > 0)
    state, _ = step(state, Compact("forced"))
    pairs_hold(state)
