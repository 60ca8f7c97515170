"""H: entries of the recent suffix, each rendered once as a chat message whose cost is <= R.

An entry is an agent turn (assistant: thought + action), an observation (user: verbatim content, or its
stub when the whole message would not fit R: A4 "stored first and represented by its stub"), or the
result of commands the core answered itself (user: one note per command).
"""

from __future__ import annotations

from typing import Sequence, Union

from attrs import frozen

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.errors import BudgetViolation
from arc_ref.message import Message
from arc_ref.store import Record
from arc_ref.text import ELLIPSIS, clip_until, clipped, shown_signature


@frozen
class AgentEntry:
    turn: int
    thought: str
    action: str
    message: Message


@frozen
class ObservationEntry:
    index: int  # j of the stored record
    verbatim: bool  # False: the message shows the stub because the full message exceeds R
    message: Message


@frozen
class CommandEntry:
    turn: int
    notes: tuple[str, ...]
    message: Message


LiveEntry = Union[AgentEntry, ObservationEntry, CommandEntry]


class FitsRecent:
    """Predicate: does a message of ``role`` with this content cost at most R tokens?"""

    def __init__(self, setup: Setup, role: str) -> None:
        self.setup = setup
        self.role = role

    def __call__(self, content: str) -> bool:
        return self.setup.message_tokens(self.role, content) <= self.setup.config.recent_budget


def agent_entry(setup: Setup, turn: int, thought: str, action: str) -> AgentEntry:
    """The agent's turn as an assistant message; the thought, then the action, clipped until it fits R."""
    fits = FitsRecent(setup, render.ASSISTANT)
    content = render.agent_message(thought, action)
    if not fits(content):
        shown_thought = clip_until(thought, lambda t: fits(render.agent_message(t, action)))
        if shown_thought is not None:
            content = render.agent_message(shown_thought, action)
        else:
            empty_thought = clipped(thought, 0)
            shown_action = clip_until(action, lambda a: fits(render.agent_message(empty_thought, a)))
            if shown_action is None:
                raise BudgetViolation("an agent message cannot fit recent_budget R even fully clipped")
            content = render.agent_message(empty_thought, shown_action)
    return AgentEntry(turn, thought, action, setup.message(render.ASSISTANT, content))


def observation_entry(setup: Setup, record: Record) -> ObservationEntry:
    """The new observation verbatim when its message fits R, otherwise its stub (A4)."""
    signature = shown_signature(record.signature, setup.config.signature_chars)
    content = render.observation_message(record.obs_id, record.returncode, signature, record.content)
    message = setup.message(render.USER, content)
    if message.tokens <= setup.config.recent_budget:
        return ObservationEntry(record.index, True, message)
    content = render.observation_stub_message(record.obs_id, record.returncode, record.n_tokens, record.stub)
    message = setup.message(render.USER, content)
    if message.tokens > setup.config.recent_budget:
        raise BudgetViolation(f"the stub message of {record.obs_id} costs {message.tokens} > recent_budget R")
    return ObservationEntry(record.index, False, message)


def command_entry(setup: Setup, turn: int, notes: Sequence[str]) -> CommandEntry:
    """Notes answering the agent's commands, clipped as one text until the message fits R."""
    fits = FitsRecent(setup, render.USER)
    content = render.command_message(notes)
    if not fits(content):
        joined = "\n".join(notes)
        shown = clip_until(joined, lambda text: fits(render.command_message((text,))))
        if shown is None:
            shown = ELLIPSIS
        content = render.command_message((shown,))
    return CommandEntry(turn, tuple(notes), setup.message(render.USER, content))
