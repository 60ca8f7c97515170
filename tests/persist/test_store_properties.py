"""Properties: over random configurations and event sequences, a store reopens to exactly the in-memory fold
(with a snapshot at random points or none, reopened midway and continued), and its export folds to it too."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.config import Config
from arc_ref.errors import CapacityExceeded, InvalidEvent
from arc_ref.machine import (
    ArcState, Compact, Event, ToolResult, ToolTurn, UserMessage, init, step, tool_result, tool_turn,
)
from arc_ref.message import ToolCall
from arc_ref.persist import DurableStore, fold_lines
from arc_ref.trace import replay
from proofs_check.harness import apply, event_lists, resolve_placeholders, resolve_stored
from proofs_check.shared_data import QWEN3_ABSENT
from proofs_check.strategies import ENVIRONMENT_TOOLS, configs, tool_steps
from proofs_check.test_templates import QWEN3, template_configs


def _store_all(store: DurableStore, events: list[Event]) -> None:
    for event in events:
        resolved = resolve_placeholders(store.state, event)
        try:
            store.append(resolved)
        except CapacityExceeded:
            assert store.state.stored == store.state.config.capacity


@given(
    config=configs(),
    events=event_lists(max_events=30),
    cut=st.integers(0, 30),
    snapshot_every=st.sampled_from((1, 3, 7, 10**9)),
)
def test_a_reopened_store_is_the_fold_of_its_events(
    config: Config, events: list[Event], cut: int, snapshot_every: int
) -> None:
    expected = init(config)
    for event in events:
        expected = apply(expected, event)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "task.arc"
        store = DurableStore.create(path, config)
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        _store_all(store, events[:cut])
        store.close()
        store = DurableStore.open(path)  # reopened midway (from its closing snapshot), then continued
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        _store_all(store, events[cut:])
        assert store.state == expected
        lines = list(store.export_lines())
        store.close(snapshot=False)  # as a crash would leave it: the last snapshot is older than the log
        for use_snapshot in (True, False):
            with DurableStore.open(path, readonly=True, use_snapshot=use_snapshot) as reopened:
                assert reopened.state == expected
                report = reopened.report
                # every row after the config row is either in the snapshot used or folded
                assert report.folded + max(report.snapshot_seq - 1, 0) == reopened.seq - 1
                if not use_snapshot:
                    assert report.snapshot_seq == 0
        assert fold_lines(lines) == expected


# --- tool-calling mode: tool_turn and tool_result rows (spec/trace.md §2) -------------------------------------


def _tool_mode_events(config: Config, steps: list[Any], compact_after: list[bool]) -> tuple[list[Event], ArcState]:
    """The events of random tool turns as the core accepts them (ids of ARC's calls resolved against the state),
    and the in-memory fold: a turn the core refuses (cannot fit R) is left out, the events end at capacity."""
    state = init(config)
    events: list[Event] = []
    number = 0
    for (thought, calls, results, _, user), compact in zip(steps, compact_after):
        made = []
        for name, arguments in calls:
            number += 1
            made.append(ToolCall(f"call_{number}", name, resolve_stored(state, arguments)))
        turn_event = ToolTurn(thought, tuple(made))
        try:
            state, turn = tool_turn(state, turn_event)
        except InvalidEvent:
            continue
        events.append(turn_event)
        for pending, result in zip(turn.environment_calls, results):
            result_event = ToolResult(pending.call_id, result, len(result) % 3)
            try:
                state, _ = tool_result(state, result_event)
            except CapacityExceeded:
                return events, state
            events.append(result_event)
        if user is not None:
            user_event = UserMessage(user)
            try:
                state, _ = step(state, user_event)
            except CapacityExceeded:
                return events, state
            events.append(user_event)
        if compact:
            state, _ = step(state, Compact("forced"))
            events.append(Compact("forced"))
    return events, state


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
@given(
    config=template_configs("tools", tools=ENVIRONMENT_TOOLS),
    steps=tool_steps(max_turns=6),
    compact_after=st.lists(st.booleans(), min_size=6, max_size=6),
    cut=st.integers(0, 20),
    snapshot_every=st.sampled_from((1, 4, 10**9)),
)
def test_a_reopened_tool_mode_store_is_the_fold_of_its_events(
    config: Config, steps: list[Any], compact_after: list[bool], cut: int, snapshot_every: int
) -> None:
    """A tool-mode session (tool turns, results out of any order the core accepts, forced compactions) stored,
    reopened midway, continued and reopened again equals the in-memory fold; its export replays without an error
    line and folds to it too."""
    events, expected = _tool_mode_events(config, steps, compact_after)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "tools.arc"
        store = DurableStore.create(path, config)
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        store.append_many(events[:cut])
        store.close()
        store = DurableStore.open(path)
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        for event in events[cut:]:
            store.append(event)
        assert store.state == expected
        lines = list(store.export_lines())
        store.close(snapshot=False)
        for use_snapshot in (True, False):
            with DurableStore.open(path, readonly=True, use_snapshot=use_snapshot) as reopened:
                assert reopened.state == expected
    assert len(lines) == len(events) + 1
    assert fold_lines(lines) == expected
    assert not [output for output in replay(lines) if output["op"] == "error"]
