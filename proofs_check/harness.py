"""Helpers the properties share: drive a state through events and read back what the model would see."""

from __future__ import annotations

import re
from typing import Iterable

from hypothesis import strategies as st

from arc_ref.machine import (
    AgentResult,
    AgentTurn,
    ArcState,
    Compact,
    Event,
    Observe,
    RecallResult,
    agent_turn,
    step,
    view,
)
from arc_ref.errors import CapacityExceeded
from arc_ref.message import ToolCall
from arc_ref.recall import chunk_count
from arc_ref.config import Config
from arc_ref.view import Components, View, verify_tokens
from proofs_check.strategies import normal_actions, texts, thoughts


STORED_ID = re.compile(r"@stored(\d+)")


def resolve_placeholders(state: ArcState, event: Event) -> Event:
    """Replace ``@storedK`` in an agent action by the id of the K-th stored observation (if any yet).

    Event lists are drawn before any id exists; the placeholder lets them recall real ids, and a
    placeholder past the last stored observation becomes a wrong id on purpose (its suggestion path).
    """
    if not isinstance(event, AgentTurn) or "@stored" not in event.action:
        return event

    def real_id(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if 1 <= index <= state.stored:
            return state.records[index - 1].obs_id
        return f"§{index:02d}"

    return AgentTurn(event.thought, STORED_ID.sub(real_id, event.action))


def resolve_stored(state: ArcState, arguments: str) -> str:
    """A tool call's arguments with each ``@storedK`` replaced by the K-th stored id (a wrong id past the last)."""

    def real_id(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return state.records[index - 1].obs_id if index <= state.stored else f"§{index:02d}"

    return STORED_ID.sub(real_id, arguments)


def numbered_calls(state: ArcState, calls: Iterable[tuple[str, str]], number: int) -> tuple[ToolCall, ...]:
    """The drawn ``(name, arguments)`` calls of a tool step as calls ``call_{number + 1}``, ... (``@storedK`` in
    the arguments resolved: `resolve_stored`)."""
    return tuple(ToolCall(f"call_{number + offset}", name, resolve_stored(state, arguments))
                 for offset, (name, arguments) in enumerate(calls, start=1))


def apply(state: ArcState, event: Event) -> ArcState:
    """One event; an observation past N_max is refused (CapacityExceeded) and leaves the state as it was."""
    event = resolve_placeholders(state, event)
    try:
        new_state, _ = step(state, event)
    except CapacityExceeded:
        assert isinstance(event, Observe) and state.stored == state.config.capacity
        return state
    return new_state


def run(state: ArcState, events: Iterable[Event]) -> ArcState:
    for event in events:
        state = apply(state, event)
    return state


def recent_allowance(config: Config, parts: Components) -> int:
    """What H may cost in a view with these parts: R under layout "paper"; under "lean" R and what S, G and U leave
    of M, P and Q (the bound is on the sum, spec/rendering.md section 11.1)."""
    if config.layout == "paper":
        return config.recent_budget
    return (config.recent_budget + config.summary_budget - parts.summary + config.page_budget - parts.catalog
            + config.recall_budget - parts.recall)


def exact_view(state: ArcState) -> tuple[View, int]:
    """The view and the token count of its serialized text (counted whole, not summed)."""
    shown = view(state)
    return shown, verify_tokens(state.setup, shown)


def command(state: ArcState, action: str) -> tuple[ArcState, AgentResult]:
    return agent_turn(state, AgentTurn("", action))


def read_back(state: ArcState, obs_id: str) -> tuple[list[RecallResult], ArcState]:
    """Recall every chunk of ``obs_id`` with _recall-start then _recall-next (on a copy: states are values)."""
    results: list[RecallResult] = []
    state, first = command(state, f"_recall-start {obs_id}")
    results.extend(first.recalls)
    record = next(r for r in state.records if r.obs_id == obs_id)
    for _ in range(chunk_count(record.n_tokens, state.config.chunk_tokens) - 1):
        state, more = command(state, f"_recall-next {obs_id}")
        results.extend(more.recalls)
    return results, state


@st.composite
def event_lists(
    draw: st.DrawFn, max_events: int = 24, contents: st.SearchStrategy[str] | None = None,
    reasoning: st.SearchStrategy[str] = thoughts,
) -> list[Event]:
    """Random interleavings of observe / think / recall of recent ids / catalog / compact (``contents``:
    the observations' texts, ``reasoning``: the thoughts')."""
    contents = texts(160) if contents is None else contents
    thoughts = reasoning
    events: list[Event] = []
    stored = 0
    for _ in range(draw(st.integers(0, max_events))):
        kind = draw(st.sampled_from(("observe", "observe", "think", "recall", "catalog", "compact")))
        if kind == "observe":
            events.append(Observe(draw(normal_actions), draw(contents), draw(st.integers(-3, 3) | st.none())))
            stored += 1
        elif kind == "think":
            events.append(AgentTurn(draw(thoughts), draw(normal_actions)))
        elif kind == "recall":
            word = draw(st.sampled_from(("_recall", "_recall-next", "_recall-start", "_recall_meta")))
            counter = draw(st.integers(1, stored + 1))
            events.append(AgentTurn(draw(thoughts), f"{word} @stored{counter}"))
        elif kind == "catalog":
            word = draw(st.sampled_from(("catalog-first", "catalog-next", "catalog-page 2", "catalog-page 99")))
            events.append(AgentTurn(draw(thoughts), word))
        else:
            events.append(Compact(draw(st.sampled_from(("proactive", "reactive", "forced")))))
    return events
