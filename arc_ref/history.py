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
        self._last: tuple[str, int] = ("", -1)  # the content counted last and its count

    def __call__(self, content: str) -> bool:
        return self.tokens(content) <= self.setup.config.recent_budget

    def tokens(self, content: str) -> int:
        """The message's tokens; the content asked about last is not counted again."""
        if self._last[1] < 0 or self._last[0] != content:
            self._last = (content, self.setup.message_tokens(self.role, content))
        return self._last[1]


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
    return AgentEntry(turn, thought, action, Message(render.ASSISTANT, content, fits.tokens(content)))


def observation_entry(setup: Setup, record: Record) -> ObservationEntry:
    """The new observation verbatim when its message fits R, otherwise its stub (A4)."""
    signature = shown_signature(record.signature, setup.config.signature_chars)
    head = render.observation_head(record.obs_id, record.returncode, signature)
    # the content's count is the record's n_j: it is not counted again (arc_ref.counting)
    tokens = setup.message_tokens_of(render.USER, ((head, None), (record.content, record.n_tokens)))
    if tokens <= setup.config.recent_budget:
        return ObservationEntry(record.index, True, Message(render.USER, head + record.content, tokens))
    content = render.observation_stub_message(record.obs_id, record.returncode, record.n_tokens, record.stub)
    tokens = setup.message_tokens(render.USER, content)
    if tokens > setup.config.recent_budget:
        raise BudgetViolation(f"the stub message of {record.obs_id} costs {tokens} > recent_budget R")
    return ObservationEntry(record.index, False, Message(render.USER, content, tokens))


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
    return CommandEntry(turn, tuple(notes), Message(render.USER, content, fits.tokens(content)))
