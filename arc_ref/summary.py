"""S and the compaction routine: deterministic, no model call (paper, "Compaction routine").

Folding moves the oldest entries of the recent suffix into the summary, one item each:
- an agent turn becomes ``turn k: thought: ... | action: ...`` with both truncated (older thoughts truncated);
- an observation shorter than the keep-verbatim threshold stays inline, verbatim; a longer one, or one
  already shown as a recall handle (the set Cited), becomes its citation stub z_j;
- a command result becomes ``turn k: result: ...``.
When S would exceed M, the oldest full stubs collapse to bare ``§id`` references, and only when no full
stub is left are the oldest items dropped (counted in one line). An id is never renamed: a stub, a bare
reference and an inline item of observation j all print id_j itself.
"""

from __future__ import annotations

from typing import Callable, Iterable, Literal, Sequence

from attrs import frozen

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.errors import BudgetViolation
from arc_ref.history import AgentEntry, CommandEntry, LiveEntry, ObservationEntry, ToolResultEntry, ToolTurnEntry
from arc_ref.message import Message
from arc_ref.store import Record
from arc_ref.text import clip_until, clipped, escape_line, shown_signature

ItemKind = Literal["thought", "note", "stub", "bare", "inline"]
LineBuilder = Callable[[str, str], str]
RecordLookup = Callable[[int], Record]


@frozen
class SummaryItem:
    kind: ItemKind
    text: str
    tokens: int  # cost of the item inside S: tokens of "\n" + text
    index: int = 0  # j of the observation for stub / bare / inline items


@frozen
class Summary:
    items: tuple[SummaryItem, ...] = ()
    omitted: int = 0
    message: Message | None = None  # None when S is empty (it then costs nothing)

    @property
    def tokens(self) -> int:
        return 0 if self.message is None else self.message.tokens


EMPTY_SUMMARY = Summary()


def _bounded_line(setup: Setup, build: LineBuilder, first: str, second: str) -> str:
    """Clip ``first`` then ``second`` (halving, id-safe) until ``build(first, second)`` costs <= c."""
    cap = setup.config.stub_cap
    line = build(first, second)
    if setup.line_tokens(line) <= cap:
        return line
    shown = clip_until(first, lambda text: setup.line_tokens(build(text, second)) <= cap)
    if shown is not None:
        return build(shown, second)
    empty = clipped(first, 0)
    shown = clip_until(second, lambda text: setup.line_tokens(build(empty, text)) <= cap)
    if shown is None:
        raise BudgetViolation("a summary line cannot fit stub_cap c even fully clipped")
    return build(empty, shown)


def thought_item(setup: Setup, entry: AgentEntry) -> SummaryItem:
    thought = clipped(escape_line(entry.thought), setup.config.thought_chars)
    action = clipped(escape_line(entry.action), setup.config.action_chars)
    text = _bounded_line(setup, lambda t, a: render.thought_item(entry.turn, t, a), thought, action)
    return SummaryItem("thought", text, setup.line_tokens(text))


def note_item(setup: Setup, entry: CommandEntry) -> SummaryItem:
    note = clipped(escape_line(" / ".join(entry.notes)), setup.config.action_chars)
    text = _bounded_line(setup, lambda n, _: render.note_item(entry.turn, n), note, "")
    return SummaryItem("note", text, setup.line_tokens(text))


def stub_item(record: Record) -> SummaryItem:
    return SummaryItem("stub", record.stub, record.stub_tokens, record.index)


def bare_item(setup: Setup, record: Record) -> SummaryItem:
    return SummaryItem("bare", record.obs_id, setup.line_tokens(record.obs_id), record.index)


def observation_item(setup: Setup, record: Record, cited: bool) -> SummaryItem:
    """Inline when short and never shown as a handle and it fits S; otherwise the citation stub."""
    if not cited and record.n_chars < setup.config.keep_verbatim_chars:
        signature = shown_signature(record.signature, setup.config.signature_chars)
        text = render.inline_item(record.obs_id, record.returncode, signature, record.content)
        tokens = setup.line_tokens(text)
        if setup.summary_frame + tokens <= setup.config.summary_budget:
            return SummaryItem("inline", text, tokens, record.index)
    return stub_item(record)


def render_summary(setup: Setup, items: Sequence[SummaryItem], omitted: int) -> Message | None:
    if not items and omitted == 0:
        return None
    content = render.summary_content(omitted, (item.text for item in items))
    return setup.message(render.USER, content)


def fit_summary(setup: Setup, items: Iterable[SummaryItem], omitted: int, records: RecordLookup) -> Summary:
    """Rebuild S from ``items`` so that tokens(S) <= M: collapse oldest stubs to bare ids, then drop oldest."""
    budget = setup.config.summary_budget
    kept = list(items)
    next_stub = 0  # items before this position hold no full stub

    def shrink_once() -> int:
        """Collapse the oldest full stub or, when none is left, drop the oldest item; return tokens saved."""
        nonlocal next_stub, omitted
        while next_stub < len(kept) and kept[next_stub].kind != "stub":
            next_stub += 1
        if next_stub < len(kept):
            full = kept[next_stub]
            kept[next_stub] = bare_item(setup, records(full.index))
            next_stub += 1
            return full.tokens - kept[next_stub - 1].tokens
        if kept:  # no full stub is left anywhere, so next_stub needs no adjusting
            dropped = kept.pop(0)
            omitted += 1
            return dropped.tokens
        raise BudgetViolation(f"the summary frame alone exceeds summary_budget M = {budget}")

    def frame() -> int:
        return setup.summary_base + (setup.line_tokens(render.summary_omitted(omitted)) if omitted else 0)

    item_tokens = sum(item.tokens for item in kept)
    while frame() + item_tokens > budget:
        item_tokens -= shrink_once()
    message = render_summary(setup, kept, omitted)
    while message is not None and message.tokens > budget:
        shrink_once()
        message = render_summary(setup, kept, omitted)
    return Summary(tuple(kept), omitted, message)


def summarize_entry(setup: Setup, entry: LiveEntry, record: Record | None, cited: bool) -> SummaryItem:
    """The summary item of one folded entry; ``cited``: the observation is in Cited (shown as a handle).

    Tool mode: a tool turn folds like an agent turn whose action is its calls; ARC's answer to a call like a
    command result; an environment's result like an observation.
    """
    if isinstance(entry, ToolTurnEntry):
        action = render.tool_calls_action(call.action() for call in entry.calls)
        return thought_item(setup, AgentEntry(entry.turn, entry.thought, action, entry.message))
    if isinstance(entry, ToolResultEntry) and entry.index == 0:
        return note_item(setup, CommandEntry(entry.turn, entry.notes, entry.message))
    if isinstance(entry, AgentEntry):
        return thought_item(setup, entry)
    if isinstance(entry, CommandEntry):
        return note_item(setup, entry)
    assert isinstance(entry, (ObservationEntry, ToolResultEntry)) and record is not None
    return observation_item(setup, record, cited)
