"""H's running counters, kept by `arc_ref.machine._append_live` and the folds: the cost model's t (agent turns in
H), a (their tokens, arc_ref.trigger) and tokens(H) equal what H holds, after every step of a text-mode and a
tool-mode trace with folds, recalls and compactions."""

from __future__ import annotations

import random

from arc_ref.config import preset
from arc_ref.history import AgentEntry, ToolTurnEntry
from arc_ref.machine import ArcState, Event, init, step
from tests.core.test_count_once import needs_qwen3, text_events, tool_config, tool_events


def _check_counters(state: ArcState) -> None:
    turns = [entry for entry in state.live if isinstance(entry, (AgentEntry, ToolTurnEntry))]
    assert state.live_turns == len(turns)
    assert state.live_agent_tokens == sum(entry.message.tokens for entry in turns)
    assert state.live_tokens == sum(entry.message.tokens for entry in state.live)


def _replay_checking(state: ArcState, events: list[Event]) -> int:
    """Steps through ``events``, checking the counters after each; the number of folds seen."""
    folds = 0
    for event in events:
        state, output = step(state, event)
        folds += getattr(output, "folded", 0) > 0
        _check_counters(state)
    return folds


def test_the_counters_follow_h_in_text_mode() -> None:
    events = list(text_events(random.Random(5), 600))
    assert _replay_checking(init(preset("paper", capacity=4000)), events) > 20


@needs_qwen3
def test_the_counters_follow_h_in_tool_mode() -> None:
    events = list(tool_events(random.Random(5), 300))
    assert _replay_checking(init(tool_config()), events) > 10
