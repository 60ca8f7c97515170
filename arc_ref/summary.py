"""S and the compaction routine: deterministic, no model call (paper, "Compaction routine").

Folding moves the oldest entries of the recent suffix into the summary, one item each:
- an agent turn becomes ``turn k: thought: ... | action: ...`` with both truncated (older thoughts truncated);
- an observation shorter than the keep-verbatim threshold stays inline, verbatim; a longer one, or one
  already shown as a recall handle (the set Cited), becomes its citation stub z_j;
- a command result becomes ``turn k: result: ...``.
When S would exceed M, the oldest full stubs collapse to bare ``§id`` references, and only when no full
stub is left are the oldest items dropped (counted in one line). An id is never renamed: a stub, a bare
reference and an inline item of observation j all print id_j itself. Under layout "lean" a fold whose items fit
M only appends them (S's earlier text is untouched, so a server's prefix cache keeps it); when they do not, S
shrinks down to its low-water mark (spec/rendering.md 11.3), so that one rewrite buys many appending folds.
"""

from __future__ import annotations

from typing import Callable, Iterable, Literal, Sequence

from attrs import frozen

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.counting import Part, joined_tokens
from arc_ref.errors import BudgetViolation
from arc_ref.history import (
    AgentEntry, CommandEntry, LiveEntry, ObservationEntry, ToolResultEntry, ToolTurnEntry, UserEntry,
)
from arc_ref.message import Message
from arc_ref.store import Record
from arc_ref.text import clip_until, clipped, escape_line

ItemKind = Literal["thought", "note", "stub", "bare", "inline"]
LineBuilder = Callable[[str, str], str]
RecordLookup = Callable[[int], Record]


@frozen
class SummaryItem:
    kind: ItemKind
    text: str
    tokens: int  # cost of the item inside S: tokens of "\n" + text
    index: int = 0  # j of the observation for stub / bare / inline items
    closed_tokens: int | None = None  # tokens of text + "\n" (the item followed by another), when counted


@frozen
class Summary:
    items: tuple[SummaryItem, ...] = ()
    omitted: int = 0
    message: Message | None = None  # None when S is empty (it then costs nothing)

    @property
    def tokens(self) -> int:
        return 0 if self.message is None else self.message.tokens


EMPTY_SUMMARY = Summary()


def _bounded_line(setup: Setup, build: LineBuilder, first: str, second: str) -> tuple[str, int]:
    """Clip ``first`` then ``second`` (halving, id-safe) until ``build(first, second)`` costs <= c;
    the line and its cost."""
    cap = setup.config.stub_cap
    line = build(first, second)
    tokens = setup.line_tokens(line)
    if tokens <= cap:
        return line, tokens
    shown = clip_until(first, lambda text: setup.line_tokens(build(text, second)) <= cap)
    if shown is not None:
        line = build(shown, second)
        return line, setup.line_tokens(line)
    empty = clipped(first, 0)
    shown = clip_until(second, lambda text: setup.line_tokens(build(empty, text)) <= cap)
    if shown is None:
        raise BudgetViolation("a summary line cannot fit stub_cap c even fully clipped")
    line = build(empty, shown)
    return line, setup.line_tokens(line)


def thought_item(setup: Setup, entry: AgentEntry) -> SummaryItem:
    thought = clipped(escape_line(setup.show(entry.thought)), setup.config.thought_chars)
    action = clipped(escape_line(setup.show(entry.action)), setup.config.action_chars)
    text, tokens = _bounded_line(setup, lambda t, a: render.thought_item(entry.turn, t, a), thought, action)
    return SummaryItem("thought", text, tokens, closed_tokens=_closed(setup, text, tokens))


def note_item(setup: Setup, entry: CommandEntry) -> SummaryItem:
    note = clipped(escape_line(" / ".join(entry.notes)), setup.config.action_chars)
    text, tokens = _bounded_line(setup, lambda n, _: render.note_item(entry.turn, n), note, "")
    return SummaryItem("note", text, tokens, closed_tokens=_closed(setup, text, tokens))


def stub_item(setup: Setup, record: Record) -> SummaryItem:
    return SummaryItem("stub", record.stub, record.stub_tokens, record.index,
                       _closed(setup, record.stub, record.stub_tokens))


def bare_item(setup: Setup, record: Record) -> SummaryItem:
    obs_id = record.obs_id
    # its line cost (`Setup.line_tokens`) remembered: each fold copy the cost rule declines collapses it again
    tokens = _head_tokens(setup, "\n" + obs_id)
    return SummaryItem("bare", obs_id, tokens, record.index, _closed(setup, obs_id, tokens))


def _closed(setup: Setup, text: str, line_tokens: int) -> int:
    """Tokens of an item followed by the newline of the next one (``closed_tokens``). Where the tokenizer
    splits after a newline before the item and after the item before a newline, both "\n" + text and
    text + "\n" cost tokens("\n") + tokens(text): the line cost; otherwise it is counted."""
    splits = setup.tokenizer.splits_between
    if text and splits("\n", text[0]) and splits(text[-1], "\n"):
        return line_tokens
    return setup.tokenizer.count(text + "\n")


def observation_item(setup: Setup, record: Record, cited: bool) -> SummaryItem:
    """Inline when short and never shown as a handle and it fits S; otherwise the citation stub."""
    if not cited and record.n_chars < setup.config.keep_verbatim_chars:
        signature = setup.shown_signature(record.signature)
        text = render.inline_item(record.obs_id, record.returncode, signature, record.shown)
        # its line cost tokens("\n" + text): the content's count is the record's n_j, not counted again where the
        # tokenizer splits before it (`arc_ref.counting`; the template ends with the content)
        head = "\n" + text[: len(text) - len(record.shown)]
        tokens = joined_tokens(setup.tokenizer, ((head, None), (record.shown, record.n_tokens)))
        if setup.summary_frame + tokens <= setup.config.summary_budget:
            return SummaryItem("inline", text, tokens, record.index, _closed(setup, text, tokens))
    return stub_item(setup, record)


def render_summary(setup: Setup, items: Sequence[SummaryItem], omitted: int) -> Message | None:
    """S as a message. Its count is summed from the head and each item with the newline after it
    (``closed_tokens``): every item starts a line ("turn ..." or "§..."), where the shipped tokenizers
    split, so nothing is counted again but the head, once per omitted count (`arc_ref.counting`)."""
    if not items and omitted == 0:
        return None
    head = render.summary_content(omitted, ())
    content = render.summary_content(omitted, (item.text for item in items))
    parts: list[Part] = [(head, None)]
    if items:
        last = items[-1]
        parts = [(head + "\n", _head_tokens(setup, head + "\n")),
                 *((item.text + "\n", item.closed_tokens) for item in items[:-1]),
                 (last.text, _unlined_tokens(setup, last.text, last.tokens))]
    return setup.message(render.USER, content, parts=parts)


def _head_tokens(setup: Setup, head: str) -> int:
    """tokens(head) of S's head with its newline, or of a bare id's line: counted once, remembered in the Setup
    (at most 1,024 texts)."""
    known = setup.remembered_counts.get(head)
    if known is None:
        if len(setup.remembered_counts) >= 1024:
            setup.remembered_counts.clear()
        known = setup.remembered_counts[head] = setup.tokenizer.count(head)
    return known


def _unlined_tokens(setup: Setup, text: str, line_tokens: int) -> int | None:
    """tokens(text) of an item from its line cost tokens("\n" + text), where the tokenizer splits after the
    newline; None (count it) elsewhere."""
    if text and setup.tokenizer.splits_between("\n", text[0]):
        return line_tokens - setup.tokenizer.count("\n")
    return None


def fit_summary(setup: Setup, items: Iterable[SummaryItem], omitted: int, records: RecordLookup,
                shrink_to: int | None = None, added: int = 0) -> Summary:
    """Rebuild S from ``items`` so that tokens(S) <= M: collapse oldest stubs to bare ids, then drop oldest.
    ``shrink_to`` (at most M; None: M): once S must shrink, it shrinks until it costs at most this or until only
    the last ``added`` items (this fold's) are left, then only as far as M needs (spec/rendering.md 11.3: layout
    "lean" shrinks to the summary low-water mark)."""
    budget = setup.config.summary_budget
    target = budget if shrink_to is None else min(shrink_to, budget)
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

    omitted_lines: dict[int, int] = {0: 0}  # tokens of the omitted-count line, per count
    # tokens("\n(N" + rest) = tokens("\n(N") + tokens(rest) >= 1 + tokens(rest) where the tokenizer splits after
    # N's last digit: a lower bound of the frame that decides the loop below without counting the line
    rest = render.summary_omitted(0)[2:]
    floor_tokens = setup.summary_base + 1 + _head_tokens(setup, rest)

    def frame() -> int:
        if omitted not in omitted_lines:
            omitted_lines[omitted] = setup.line_tokens(render.summary_omitted(omitted))
        return setup.summary_base + omitted_lines[omitted]

    def over(limit: int) -> bool:
        """frame() + item_tokens > limit, known from the lower bound when it already exceeds the limit."""
        if omitted and floor_tokens + item_tokens > limit:
            digits = str(omitted)
            if (render.summary_omitted(omitted) == "(" + digits + rest
                    and setup.tokenizer.splits_between(digits[-1], rest[:1])):
                return True
        return frame() + item_tokens > limit

    def shrinking(limit: int) -> bool:
        """Shrink on while S exceeds ``limit``: always above M; below it (the low-water mark) while an item from
        before this fold is left."""
        return limit == budget or len(kept) > added

    item_tokens = sum(item.tokens for item in kept)
    message = None
    if not over(budget):
        message = render_summary(setup, kept, omitted)
        if message is None or message.tokens <= budget:
            return Summary(tuple(kept), omitted, message)
    while over(target) and shrinking(target):
        item_tokens -= shrink_once()
    while over(budget):
        item_tokens -= shrink_once()
    message = render_summary(setup, kept, omitted)
    while message is not None and message.tokens > target and shrinking(target):
        shrink_once()
        message = render_summary(setup, kept, omitted)
    while message is not None and message.tokens > budget:  # this fold's items alone exceed M
        shrink_once()
        message = render_summary(setup, kept, omitted)
    return Summary(tuple(kept), omitted, message)


def extends(summary: Summary, earlier: Summary) -> bool:
    """S ``summary`` only appended items to ``earlier`` (same omitted count, ``earlier``'s items first): the earlier
    message's text less its end is a prefix of this one's (spec/rendering.md 11.3)."""
    count = len(earlier.items)
    return summary.omitted == earlier.omitted and summary.items[:count] == earlier.items


def summarize_entry(setup: Setup, entry: LiveEntry, record: Record | None, cited: bool) -> SummaryItem:
    """The summary item of one folded entry; ``cited``: the observation is in Cited (shown as a handle).

    Tool mode: a tool turn folds like an agent turn whose action is its calls; ARC's answer to a call like a
    command result; an environment's result and a user message after the goal like an observation.
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
    assert isinstance(entry, (ObservationEntry, ToolResultEntry, UserEntry)) and record is not None
    return observation_item(setup, record, cited)
