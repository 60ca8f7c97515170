"""H: entries of the recent suffix, each rendered once as a chat message whose cost is <= R.

An entry is an agent turn (assistant: thought + action), an observation (user: verbatim content, or its
stub when the whole message would not fit R: A4 "stored first and represented by its stub"), or the
result of commands the core answered itself (user: one note per command).

In tool mode (spec/rendering.md section 13) an entry is an assistant turn with its tool calls, the tool
result answering one call (an environment's result stored as an observation, or ARC's own answer to a call
of one of its tools), or a user message after the goal (stored as an observation, shown as a user message,
a unit of its own). An assistant turn and the results of its calls form one *unit* (`unit_starts`), folded
as a whole, so a call and its result are never separated; a unit's messages cost at most R together.
"""

from __future__ import annotations

from typing import Sequence, Union

from attrs import frozen

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.counting import Part
from arc_ref.errors import BudgetViolation
from arc_ref.message import Message, ToolCall
from arc_ref.store import Record, stub_lines
from arc_ref.text import ELLIPSIS, clip_until, clipped, halving_lengths
from arc_ref.tools import clipped_arguments, longest_string_value


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


@frozen
class ToolTurnEntry:
    """Tool mode: the agent's turn, an assistant message with its text (the thought) and its tool calls."""

    turn: int
    thought: str
    calls: tuple[ToolCall, ...]
    message: Message


@frozen
class ToolResultEntry:
    """Tool mode: a tool message answering one call; ``index`` is j of the stored result, 0 for ARC's answer."""

    turn: int
    call_id: str
    index: int
    verbatim: bool  # False: an environment result shown as its stub
    notes: tuple[str, ...]  # ARC's answer (index 0): the notes shown
    message: Message


@frozen
class UserEntry:
    """Tool mode: a user message after the goal, stored as O_j (``index``) and shown as a user message."""

    turn: int
    index: int  # j of the stored record
    verbatim: bool  # False: the message shows the stub because the full message exceeds R
    message: Message


LiveEntry = Union[AgentEntry, ObservationEntry, CommandEntry, ToolTurnEntry, ToolResultEntry, UserEntry]


def starts_unit(entry: LiveEntry) -> bool:
    """A tool result belongs to the unit of the assistant turn before it; every other entry starts a unit."""
    return not isinstance(entry, ToolResultEntry)


class FitsRecent:
    """Predicate: does a message of ``role`` with this content cost at most R tokens?"""

    def __init__(self, setup: Setup, role: str) -> None:
        self.setup = setup
        self.role = role
        self._last: Message | None = None  # the message built last (its content asked about last)

    def __call__(self, content: str) -> bool:
        return self.message(content).tokens <= self.setup.config.recent_budget

    def message(self, content: str) -> Message:
        """The message (`Setup.message`); the content asked about last is not counted again."""
        if self._last is None or self._last.content != content:
            self._last = self.setup.message(self.role, content)
        return self._last


def agent_entry(setup: Setup, turn: int, thought: str, action: str) -> AgentEntry:
    """The agent's turn as an assistant message, its texts through S (spec/rendering.md 7.1: a control string the
    model wrote ends no message); the thought, then the action, clipped until it fits R."""
    fits = FitsRecent(setup, render.ASSISTANT)
    thought_shown, action_shown = setup.show(thought), setup.show(action)
    content = render.agent_message(thought_shown, action_shown)
    if not fits(content):
        shown_thought = clip_until(thought_shown, lambda t: fits(render.agent_message(t, action_shown)))
        if shown_thought is not None:
            content = render.agent_message(shown_thought, action_shown)
        else:
            empty_thought = clipped(thought_shown, 0)
            shown_action = clip_until(action_shown, lambda a: fits(render.agent_message(empty_thought, a)))
            if shown_action is None:
                raise BudgetViolation("an agent message cannot fit recent_budget R even fully clipped")
            content = render.agent_message(empty_thought, shown_action)
    return AgentEntry(turn, thought, action, fits.message(content))


def verbatim_head(setup: Setup, record: Record) -> str:
    """The header of a verbatim observation: return code only (layout "lean"), or id, code and signature ("paper")."""
    if setup.config.layout == "lean":
        return render.lean_observation_head(record.returncode)
    signature = setup.shown_signature(record.signature)
    return render.observation_head(record.obs_id, record.returncode, signature)


def cannot_fit(setup: Setup, content: str, budget: int) -> bool:
    """True when any message holding ``content`` costs more than ``budget`` tokens, known without counting it.

    Every character of the content is covered by some token, and no token covers more than the tokenizer's
    ``max_token_chars``: a message holding it costs at least len(content) / max_token_chars. A large
    observation then goes straight to its stub, with no encode of its verbatim message (issue 18, item 6:
    one encode per observation, its n_j). Tokenizers that do not state the bound are counted as before.
    """
    widest = getattr(setup.tokenizer, "max_token_chars", None)
    return isinstance(widest, int) and widest > 0 and len(content) > budget * widest


def stub_message_parts(setup: Setup, record: Record) -> tuple[str, tuple[Part, ...] | None]:
    """The content of a record's stub message (an observation too large for H) and its parts: the header, then the
    stub line, whose count is the record's (``stub_tokens`` counts "\n" + stub: where the tokenizer splits after
    that newline, the stub alone costs tokens("\n") fewer), not counted again (`arc_ref.counting`); None where it
    is not known."""
    content = render.observation_stub_message(record.obs_id, record.returncode, record.n_tokens, record.stub)
    head = render.observation_stub_message(record.obs_id, record.returncode, record.n_tokens, "")
    stub = record.stub
    if not (stub and head.endswith("\n") and head + stub == content and setup.tokenizer.splits_between("\n", stub[0])):
        return content, None
    return content, ((head, None), (stub, record.stub_tokens - setup.tokenizer.count("\n")))


def observation_entry(setup: Setup, record: Record) -> ObservationEntry:
    """The new observation verbatim when its message fits R, otherwise its stub (A4)."""
    head = verbatim_head(setup, record)
    # the content's count is the record's n_j: it is not counted again (arc_ref.counting)
    parts = ((head, None), (record.shown, record.n_tokens))
    if not cannot_fit(setup, record.shown, setup.config.recent_budget):
        message = setup.message(render.USER, head + record.shown, parts=parts)
        if message.tokens <= setup.config.recent_budget:
            return ObservationEntry(record.index, True, message)
    content, stub_parts = stub_message_parts(setup, record)
    message = setup.message(render.USER, content, parts=stub_parts)
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
    return CommandEntry(turn, tuple(notes), fits.message(content))


# --- tool mode ------------------------------------------------------------------------------------------


def tool_turn_entry(setup: Setup, turn: int, thought: str, calls: tuple[ToolCall, ...], budget: int) -> ToolTurnEntry:
    """The assistant turn with its calls, its text and calls through S (spec/rendering.md 7.1: `Setup.shown_call`);
    its text (the thought) clipped until the message costs <= ``budget``; when no clip of the text fits, the text
    clipped whole and the long string values of the calls' arguments clipped too, to the first length of
    ``halving_lengths`` that fits (spec/rendering.md section 13: the model's own calls are not observations, and a
    call too long for R is shown cut rather than refused). The entry keeps what the model wrote."""
    shown_calls = tuple(setup.shown_call(call) for call in calls)

    def message(text: str, with_calls: tuple[ToolCall, ...]) -> Message:
        return setup.message(render.ASSISTANT, text, with_calls)

    shown_thought = setup.show(thought)
    shown = clip_until(shown_thought, lambda text: message(text, shown_calls).tokens <= budget)
    if shown is not None:
        return ToolTurnEntry(turn, thought, calls, message(shown, shown_calls))
    least_text = clipped(shown_thought, 0)
    longest = max((longest_string_value(call.arguments) for call in shown_calls), default=0)
    for keep in halving_lengths(longest)[1:]:  # the longest itself clips nothing: the text's last clip, refused
        cut = tuple(call if (arguments := clipped_arguments(call.arguments, keep)) is call.arguments
                    else ToolCall(call.call_id, call.name, arguments) for call in shown_calls)
        candidate = message(least_text, cut)
        if candidate.tokens <= budget:
            return ToolTurnEntry(turn, thought, calls, candidate)
    raise BudgetViolation(f"the tool calls of turn {turn} cost more than the {budget} tokens left for them in R")


def tool_note_entry(setup: Setup, turn: int, call_id: str, notes: Sequence[str], budget: int) -> ToolResultEntry:
    """ARC's answer to a call of one of its tools: the notes, clipped as one text until it costs <= ``budget``."""
    joined = "\n".join(notes)

    def message(text: str) -> Message:
        return setup.message(render.TOOL, text, (), setup.show(call_id))

    shown = clip_until(joined, lambda text: message(text).tokens <= budget)
    if shown is None:
        raise BudgetViolation(f"ARC's answer to call {call_id!r} cannot fit the {budget} tokens left for it in R")
    return ToolResultEntry(turn, call_id, 0, True, tuple(notes), message(shown))


def tool_result_entry(setup: Setup, turn: int, call_id: str, record: Record, budget: int,
                      least: int | None = None) -> ToolResultEntry:
    """An environment's result: verbatim when its message costs <= ``budget`` (its share, the other pending results
    keeping their reserves), otherwise its stub (A4); when the stub costs more than that share (a turn whose
    results were reserved their stub frames only, spec/rendering.md section 13), the first of the verbatim message,
    the stub and the stub with z_j's shorter lines, then with none, that costs <= ``least`` (what is left with the
    other results' frames kept)."""
    head = verbatim_head(setup, record)
    parts = ((head, None), (record.shown, record.n_tokens))
    show_id = setup.show(call_id)
    verbatim: Message | None = None
    if not cannot_fit(setup, record.shown, budget):
        verbatim = setup.message(render.TOOL, head + record.shown, (), show_id, parts)
        if verbatim.tokens <= budget:
            return ToolResultEntry(turn, call_id, record.index, True, (), verbatim)
    content, stub_parts = stub_message_parts(setup, record)
    message = setup.message(render.TOOL, content, (), show_id, stub_parts)
    if message.tokens > budget and least is not None:
        if verbatim is None and not cannot_fit(setup, record.shown, least):
            verbatim = setup.message(render.TOOL, head + record.shown, (), show_id, parts)
        if verbatim is not None and verbatim.tokens <= least:
            return ToolResultEntry(turn, call_id, record.index, True, (), verbatim)
        lines = list(stub_lines(setup, record.obs_id, record.returncode, record.n_chars, record.n_tokens,
                                record.signature, record.head, record.tail))
        assert record.stub in lines, "z_j is one of its own candidates (`make_stub`)"
        shorter = lines[lines.index(record.stub):]  # z_j, then the candidates after it
        for line in (*shorter, ""):  # then the frame alone (what the bare reserve holds)
            content = render.observation_stub_message(record.obs_id, record.returncode, record.n_tokens, line)
            message = setup.message(render.TOOL, content, (), show_id)
            if message.tokens <= least:
                budget = least
                break
    if message.tokens > budget:
        raise BudgetViolation(f"the stub message of {record.obs_id} costs {message.tokens} > the {budget} tokens left")
    return ToolResultEntry(turn, call_id, record.index, False, (), message)


def user_entry(setup: Setup, turn: int, record: Record) -> UserEntry:
    """A user message after the goal: its text verbatim when the message fits R, otherwise its stub (A4)."""
    message = setup.message(render.USER, record.shown, parts=((record.shown, record.n_tokens),))
    if message.tokens <= setup.config.recent_budget:
        return UserEntry(turn, record.index, True, message)
    content, stub_parts = stub_message_parts(setup, record)
    message = setup.message(render.USER, content, parts=stub_parts)
    if message.tokens > setup.config.recent_budget:
        raise BudgetViolation(f"the stub message of {record.obs_id} costs {message.tokens} > recent_budget R")
    return UserEntry(turn, record.index, False, message)
