"""The ARC state machine: everything that affects a transition lives here.

The state of one task is a frozen value; events are frozen values; ``step(state, event)`` returns the new
state and an output, and never mutates its input. An illegal event raises one ArcError subclass and, the
state being immutable, leaves the caller's state as it was. There is no I/O, no clock, no randomness.

Events: Observe (a normal action's result: A1 id, A2 store, A3 stub), AgentTurn (the agent's thought and
action; recall and catalog commands are answered here, A3/A5), Compact (the one compaction routine:
proactive, reactive after an overflow, or forced), and RequestView (A4; pure). In tool mode (config
``action_mode = "tools"``, spec/rendering.md section 13) the agent acts with ToolTurn (its text and tool
calls; calls to ARC's own tools are answered here) and the environment answers each of its calls with a
ToolResult (stored like an observation), and a user message after the goal is a UserMessage (stored like an
observation, shown as a user message, a unit of its own); Observe and AgentTurn belong to text mode.

Invariant kept by every transition (spec/rendering.md section 11.1, `arc_ref.trigger`): under layout "paper"
tokens(H) <= R; under layout "lean" S, G, U within M, P, Q and tokens(S) + tokens(G) + tokens(U) + tokens(H) <=
M + R + P + Q, H using what the others leave. When an append would break it the compaction routine runs at once
(the proactive trigger), so a view is always within K; under "lean" the cost model may also fold earlier.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Union

import attrs
import immutables
from attrs import frozen

from arc_ref import render, trigger
from arc_ref.catalog import PageText, page_cost_at, page_count, page_message, page_of, page_text, render_page
from arc_ref.commands import RECALL_WORDS, Command, IgnoredLine, parse_action
from arc_ref.config import Config, Setup, make_setup
from arc_ref.errors import BudgetViolation, CapacityExceeded, InvalidEvent
from arc_ref.history import (
    AgentEntry,
    LiveEntry,
    ObservationEntry,
    ToolResultEntry,
    ToolTurnEntry,
    UserEntry,
    agent_entry,
    command_entry,
    observation_entry,
    starts_unit,
    tool_note_entry,
    tool_result_entry,
    tool_turn_entry,
    user_entry,
)
from arc_ref.ids import resolve, suggest
from arc_ref.message import Message, ToolCall
from arc_ref.recall import BufferEntry, admit, chunk_count, make_entry, stored_chunk, stored_chunk_tokens
from arc_ref.tools import ARC_TOOL_NAMES, arguments_problem, arguments_surrogate, call_command
from arc_ref.store import EMPTY_STORE, Record, Store, make_record
from arc_ref.summary import EMPTY_SUMMARY, Summary, SummaryItem, extends, fit_summary, summarize_entry
from arc_ref.text import clipped, utf8_bytes
from arc_ref.view import View, build_view, context_at, placed_costs, view_messages

COMPACT_REASONS: tuple[str, ...] = ("proactive", "reactive", "forced")
USER_ACTION = "user"  # the action a user message is stored under (its signature, hence its id, A1)
SHOWN_TOKEN_CHARS = 48  # an unknown id is echoed back clipped to this many characters
_DECIMAL = re.compile(r"[0-9]{1,10}")


# --- events -----------------------------------------------------------------------------------


@frozen
class Observe:
    """A normal action's observation, to be stored (A2) before anything can compact it away."""

    action: str
    observation: str
    returncode: int | None = 0  # None: no exit status known (shown rc=?)


@frozen
class AgentTurn:
    """The agent's reply: a thought and one action (commands are recognised in the action only)."""

    thought: str
    action: str


@frozen
class ToolTurn:
    """Tool mode: the agent's reply, its text (the thought) and the tool calls it made (OpenAI tool_calls)."""

    thought: str
    calls: tuple[ToolCall, ...] = ()


@frozen
class ToolResult:
    """Tool mode: the environment's result of one pending call, stored (A2) before anything can compact it."""

    call_id: str
    observation: str
    returncode: int | None = 0  # None: no exit status known (an OpenAI tool message; shown rc=?)


@frozen
class UserMessage:
    """Tool mode: a user message after the goal (a follow-up, a framework's format error), stored (A2) as O_j."""

    content: str


@frozen
class Compact:
    reason: str = "forced"


@frozen
class RequestView:
    pass


Event = Union[Observe, AgentTurn, ToolTurn, ToolResult, UserMessage, Compact, RequestView]


# --- outputs ----------------------------------------------------------------------------------


@frozen
class ObserveResult:
    obs_id: str
    index: int
    tokens: int  # n_j
    chunks: int  # m_j
    verbatim: bool  # shown verbatim in H (False: shown as its stub)
    folded: int  # entries folded by a proactive compaction this step


@frozen
class RecallResult:
    obs_id: str
    chunk: int  # 1-based; 0 for an empty observation
    chunks: int
    payload: str


@frozen
class AgentResult:
    command: bool  # the action was a command action, answered here (never reaches an environment)
    response: str | None  # exactly what the model sees as the answer to its commands
    notes: tuple[str, ...]
    recalls: tuple[RecallResult, ...]
    folded: int


@frozen
class ToolAnswer:
    """ARC's answer to one call of its own tools: the tool message's content and the command's response."""

    call_id: str
    content: str  # what the model reads in the tool message (the notes)
    response: str  # the command's response, as text mode's AgentResult gives it


@frozen
class ToolTurnResult:
    answered: tuple[ToolAnswer, ...]  # calls to ARC's tools (or to no offered tool), answered here
    environment_calls: tuple[ToolCall, ...]  # calls the environment must run and answer with ToolResult
    recalls: tuple[RecallResult, ...]
    folded: int


@frozen
class CompactResult:
    reason: str
    folded: int


Output = Union[ObserveResult, AgentResult, ToolTurnResult, CompactResult, View]


# --- state ------------------------------------------------------------------------------------


@frozen
class FoldMemo:
    """The summary items that a fold copy the cost rule declined made for the oldest entries of H (spec/rendering.md
    section 11.1), so that the next try does not summarize them again; used only while those entries and Cited
    are the very same objects (then the items are the ones the routine would make)."""

    entries: tuple[LiveEntry, ...]
    cited: immutables.Map[int, bool]
    items: tuple[SummaryItem, ...]
    # S fitted with those items when the copy got that far, and the S it was fitted from: reused while that S is the
    # very same object and the items are equal (then fit_summary's inputs are the same); a cache, not state
    fitted_from: Summary | None = attrs.field(default=None, eq=False)
    fitted: Summary | None = attrs.field(default=None, eq=False)


@frozen
class ArcState:
    """The whole state of one task. Fields holding history are persistent structures (shared, not copied)."""

    setup: Setup
    prefix: tuple[Message, ...]
    records: Store  # ObsStore, ordered by creation index (A2)
    fingerprints: immutables.Map[str, int]  # fingerprint digits -> latest index, for suggestions only
    turn: int  # agent turns so far
    live: tuple[LiveEntry, ...]  # H, at most R tokens (bounded, never the whole history)
    live_tokens: int
    summary: Summary  # S
    cited: immutables.Map[int, bool]  # Cited: indices shown as recall handles
    catalog_cursor: int | None  # the page the agent chose; None: the default page (last, or lean's, section 14)
    catalog_message: Message | None  # G
    recall_cursor: immutables.Map[int, int]  # index -> last chunk returned (external cursor, A5)
    recall_buffer: tuple[BufferEntry, ...]  # U's bodies, least recently used first
    recall_message: Message | None  # U
    pending: tuple[ToolCall, ...] = ()  # tool mode: environment calls of the last turn without a result yet
    # tool mode: ARC's answers of the last turn that wait for the results of the environment calls made before them
    # (those calls' ids, the answer's entry), in call order: each joins H right after those results (spec 13)
    waiting_answers: tuple[tuple[frozenset[str], LiveEntry], ...] = ()
    live_turns: int = 0  # agent turns in H (the cost model's t, arc_ref.trigger)
    live_agent_tokens: int = 0  # tokens of those turns (the cost model's m * t by default, arc_ref.trigger)
    fold_memo: FoldMemo | None = None  # the items of the last fold copy the cost rule declined

    @property
    def config(self) -> Config:
        return self.setup.config

    @property
    def stored(self) -> int:
        return len(self.records)

    def record(self, index: int) -> Record:
        return self.records[index - 1]

    def obs_id(self, index: int) -> str:
        return self.records[index - 1].obs_id

    def lookup(self, token: str) -> Record | None:
        """The stored record whose printed id is ``token`` (A1; parsing and matching live in arc_ref.ids)."""
        index = resolve(self.setup.ids, self.stored, self.obs_id, token)
        return None if index is None else self.record(index)

    def nearest(self, token: str) -> str | None:
        """The printed id nearest to a token that resolved to nothing (arc_ref.ids.suggest)."""
        index = suggest(self.setup.ids, self.stored, self.obs_id, self.fingerprints, token)
        return None if index is None else self.obs_id(index)


def init(config: Config) -> ArcState:
    """The initial state of a task under ``config`` (validated: ConfigError when K > L etc.)."""
    setup = make_setup(config)
    prefix = setup.prefix()
    if sum(message.tokens for message in prefix) != setup.prefix_tokens:
        raise BudgetViolation(
            f"tokenizer {setup.tokenizer.name!r} merges across message boundaries; token counts of the"
            " view would not add up"
        )
    return ArcState(
        setup=setup,
        prefix=prefix,
        records=EMPTY_STORE,
        fingerprints=immutables.Map(),
        turn=0,
        live=(),
        live_tokens=0,
        summary=EMPTY_SUMMARY,
        cited=immutables.Map(),
        catalog_cursor=None,
        catalog_message=None,
        recall_cursor=immutables.Map(),
        recall_buffer=(),
        recall_message=None,
    )


# --- compaction -------------------------------------------------------------------------------


def fold(state: ArcState, keep_tokens: int) -> tuple[ArcState, int]:
    """The compaction routine: fold the oldest recent entries into S until H <= ``keep_tokens``.

    Entries fold by units (a tool turn with the results of its calls; any other entry alone), so a call and
    its result are never separated. The newest unit always stays in H. Stored records are never touched
    (A2): only H, S and Cited change.
    """
    folded, count, _ = _fold(state, keep_tokens)
    return folded, count


def _fold(state: ArcState, keep_tokens: int) -> tuple[ArcState, int, tuple[SummaryItem, ...]]:
    """`fold`, also giving the items of the folded entries (a declined copy keeps them: FoldMemo)."""
    count, remaining = fold_extent(state.live, state.live_tokens, keep_tokens)
    if count == 0:
        return state, 0, ()
    added, cited = _fold_items(state, count)
    return _folded(state, count, remaining, added, cited), count, added


def _fold_items(state: ArcState, count: int) -> tuple[tuple[SummaryItem, ...], immutables.Map[int, bool]]:
    """The summary items of the oldest ``count`` entries of H (those of a declined copy reused: FoldMemo) and
    Cited once their stubs are shown."""
    live = state.live
    setup = state.setup
    cited = state.cited
    memo = state.fold_memo
    reused = 0
    if memo is not None and memo.cited is cited:
        limit = min(count, len(memo.entries))
        while reused < limit and memo.entries[reused] is live[reused]:
            reused += 1
    added: list[SummaryItem] = []
    for position, entry in enumerate(live[:count]):
        if position < reused:
            item = memo.items[position]  # type: ignore[union-attr]  # (reused > 0: memo is set)
        else:
            record = None
            if isinstance(entry, (ObservationEntry, ToolResultEntry, UserEntry)) and entry.index > 0:
                record = state.record(entry.index)
            item = summarize_entry(setup, entry, record, record is not None and record.index in cited)
        if item.kind == "stub":
            cited = cited.set(item.index, True)
        added.append(item)
    return tuple(added), cited


def _folded(state: ArcState, count: int, remaining: int, added: tuple[SummaryItem, ...],
            cited: immutables.Map[int, bool], summary: Summary | None = None) -> ArcState:
    """The state once the oldest ``count`` entries of H (``remaining`` tokens left) are folded into S as
    ``added``: S fitted (section 11.3; ``summary`` when it already is: `_fitted`), Cited, and under layout "lean"
    G."""
    setup = state.setup
    live = state.live
    if summary is None:
        summary = _fitted(state, added)
    folded = attrs.evolve(state, live=live[count:], live_tokens=remaining, summary=summary, cited=cited,
                          live_turns=state.live_turns - _turns(live[:count]),
                          live_agent_tokens=state.live_agent_tokens - _agent_tokens(live[:count]), fold_memo=None)
    if setup.config.layout == "lean":
        folded = attrs.evolve(folded, catalog_message=lean_page(folded, folded.catalog_cursor))
    return folded


def _fitted(state: ArcState, added: tuple[SummaryItem, ...]) -> Summary:
    """S with the items ``added`` by a fold, fitted to M (section 11.3); the last declined copy's when it was made
    from the same S and items (FoldMemo)."""
    memo = state.fold_memo
    if memo is not None and memo.fitted is not None and memo.fitted_from is state.summary and memo.items == added:
        return memo.fitted
    return fit_summary(state.setup, [*state.summary.items, *added], state.summary.omitted, state.record,
                       trigger.summary_low_water_mark(state.config), len(added))


def fold_extent(live: tuple[LiveEntry, ...], tokens: int, keep_tokens: int) -> tuple[int, int]:
    """(entries the routine folds, tokens of H it leaves) for H = ``live`` of ``tokens`` tokens and the target
    ``keep_tokens``: whole units from the oldest while more than the target is left, never the newest unit
    (spec/rendering.md section 11.2)."""
    newest = len(live) - 1
    while newest > 0 and not starts_unit(live[newest]):
        newest -= 1
    count = 0
    remaining = tokens
    while count < newest and remaining > keep_tokens:
        remaining -= live[count].message.tokens
        count += 1
        while count < newest and not starts_unit(live[count]):
            remaining -= live[count].message.tokens
            count += 1
    return count, remaining


def compacted_count(state: ArcState) -> int:
    """c: observations 1..c have left the recent suffix H (folding takes the oldest first); O(|H|)."""
    return _compacted(state.live, state.stored)


def _compacted(live: tuple[LiveEntry, ...], stored: int) -> int:
    for entry in live:
        if isinstance(entry, (ObservationEntry, ToolResultEntry, UserEntry)) and entry.index > 0:
            return entry.index - 1
    return stored


def default_page(state: ArcState) -> int:
    """The page shown while the agent has chosen none: the last page ("paper"), or under layout "lean" the page
    of the newest observation that has left H (0: none has, and no page is shown; spec/rendering.md section 14)."""
    if state.config.layout == "lean":
        compacted = compacted_count(state)
        return page_of(compacted, state.config.page_size) if compacted else 0
    return page_count(state.stored, state.config.page_size)


def page_after_storing(state: ArcState, records: Store) -> Message | None:
    """G once a new record is stored: layout "paper" re-renders the chosen or the new last page (its header
    counts every stored stub); layout "lean" leaves G as it is (it changes at a fold or a catalog command)."""
    if state.config.layout == "lean":
        return state.catalog_message
    shown_page = state.catalog_cursor or page_count(len(records), state.config.page_size)
    return render_page(state.setup, records, shown_page)


def lean_page(state: ArcState, cursor: int | None) -> Message | None:
    """G under layout "lean": the chosen page whole, or the default page with the stubs of observations that
    have left H only; None while no observation has (A3 keeps every stub in the external catalog)."""
    text = lean_page_text(state, cursor, state.live)
    return None if text is None else page_message(state.setup, text)


def lean_page_text(state: ArcState, cursor: int | None, live: tuple[LiveEntry, ...]) -> PageText | None:
    """The text of `lean_page` for the state with H = ``live``, before it is priced."""
    if cursor is not None:
        return page_text(state.setup, state.records, cursor)
    compacted = _compacted(live, state.stored)
    if compacted == 0:
        return None
    return page_text(state.setup, state.records, page_of(compacted, state.config.page_size), compacted)


def _tokens(message: Message | None) -> int:
    return 0 if message is None else message.tokens


_AGENT_TURN_ENTRIES = (AgentEntry, ToolTurnEntry)  # the entries of H that are the agent's turns (live_turns)


def _turns(entries: tuple[LiveEntry, ...]) -> int:
    return sum(1 for entry in entries if isinstance(entry, _AGENT_TURN_ENTRIES))


def _agent_tokens(entries: tuple[LiveEntry, ...]) -> int:
    return sum(entry.message.tokens for entry in entries if isinstance(entry, _AGENT_TURN_ENTRIES))


def compaction_target(state: ArcState) -> int:
    """Every trigger compacts H down to the low-water mark (hysteresis, so compaction is not run every step):
    R // 2 under layout "paper", low_water percent of R under "lean" (`arc_ref.trigger`)."""
    return trigger.low_water_mark(state.config)


def fold_decision(state: ArcState) -> str:
    """`arc_ref.trigger.decide` on this state: keep, bound (the view would exceed K) or cost (folding pays)."""
    folded, kept = 0, state.live_tokens  # what a fold would fold and keep: needed by the cost rule only
    if state.config.layout == "lean" and state.config.prefill_cost > 0:
        folded, kept = fold_extent(state.live, state.live_tokens, compaction_target(state))
    return trigger.decide(state.config, _tokens(state.summary.message), _tokens(state.catalog_message),
                          _tokens(state.recall_message), state.live_tokens, state.live_turns,
                          state.live_agent_tokens, kept, folded)


def _append_live(state: ArcState, entries: tuple[LiveEntry, ...], **changes: Any) -> tuple[ArcState, int]:
    """Append entries to H, then run the proactive trigger (spec/rendering.md section 11.1): fold to the low-water
    mark when the view would exceed K (layout "paper": when H exceeds R), or when the cost model says folding
    pays and the fold gives a smaller view."""
    tokens, turns, agent_tokens = state.live_tokens, state.live_turns, state.live_agent_tokens
    for entry in entries:  # one pass: what `_turns` and `_agent_tokens` count
        entry_tokens = entry.message.tokens
        tokens += entry_tokens
        if isinstance(entry, _AGENT_TURN_ENTRIES):
            turns += 1
            agent_tokens += entry_tokens
    appended = attrs.evolve(state, live=state.live + entries, live_tokens=tokens, live_turns=turns,
                            live_agent_tokens=agent_tokens, **changes)
    decision = fold_decision(appended)
    if decision == trigger.KEEP:
        return appended, 0
    if decision == trigger.BOUND:
        folded, count, _ = _fold(appended, compaction_target(appended))
        return folded, count
    count, remaining = fold_extent(appended.live, appended.live_tokens, compaction_target(appended))
    if count == 0:
        return appended, 0
    added, cited = _fold_items(appended, count)
    declined = attrs.evolve(appended, fold_memo=FoldMemo(appended.live[:count], appended.cited, added))
    before = view(appended).tokens
    fixed = state.setup.prefix_tokens + state.setup.generation_tokens
    if _copy_cannot_pay(appended, count, before, fixed + appended.summary.tokens):
        return declined, 0
    summary = _fitted(appended, added)
    after = copy_tokens(appended, count, summary.message)
    if extends(summary, appended.summary):  # S only appended to: its earlier text stays cached
        fixed += appended.summary.tokens
    if not trigger.pays(state.config, before - after, after - fixed, appended.live_tokens, appended.live_turns,
                        appended.live_agent_tokens):
        memo = FoldMemo(appended.live[:count], appended.cited, added, appended.summary, summary)
        return attrs.evolve(appended, fold_memo=memo), 0
    return _folded(appended, count, remaining, added, cited, summary), count


def _copy_cannot_pay(state: ArcState, count: int, before: int, fixed_most: int) -> bool:
    """Whether the cost rule must decline folding the oldest ``count`` entries of H whatever the new S costs
    (spec/rendering.md 11.1), decided before S is built: at the copy's `copy_floor` and ``fixed_most``, the most
    the rule's ``B + eta + s_kept`` can be, `trigger.declines` decides for every cost S can have."""
    return trigger.declines(state.config, before, copy_floor(state, count), fixed_most, state.live_tokens,
                            state.live_turns, state.live_agent_tokens)


def copy_floor(state: ArcState, count: int) -> int:
    """tokens(view of the copy) less its new S's count, known before S is built: the copy's view priced with S at
    0 tokens (a user message still, so every other message keeps its place and its exact count)."""
    return copy_tokens(state, count, Message(render.USER, "", 0))


def copy_tokens(state: ArcState, count: int, summary: Message | None) -> int:
    """tokens(view of the copy that folds the oldest ``count`` entries of H) with ``summary`` as its S: exactly
    `view`'s count of the copy built whole, its new G priced at its one place (a served template renders G's one
    probe conversation instead of G's every place: the copy may be declined unseen)."""
    setup = state.setup
    kept = state.live[count:]
    text = lean_page_text(state, state.catalog_cursor, kept)
    catalog = None if text is None else Message(render.USER, text.content, 0)
    messages = view_messages(state.prefix, summary, catalog, state.recall_message, kept)
    tokens = sum(placed_costs(messages)) + setup.generation_tokens
    if text is not None:
        tokens += page_cost_at(setup, text, context_at(messages, len(state.prefix) + (summary is not None)))
    return tokens


def compact(state: ArcState, event: Compact) -> tuple[ArcState, CompactResult]:
    """Run the compaction routine for any trigger (proactive, reactive after an overflow, forced)."""
    if event.reason not in COMPACT_REASONS:
        raise InvalidEvent(f"compact reason must be one of {', '.join(COMPACT_REASONS)}, got {event.reason!r}")
    folded_state, folded = fold(state, compaction_target(state))
    return folded_state, CompactResult(event.reason, folded)


# --- observe ----------------------------------------------------------------------------------


def _require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidEvent(f"{name} must be a string, got {type(value).__name__}")
    try:
        if not value.isascii():  # an ASCII string holds no surrogate: no need to encode it
            utf8_bytes(value)  # kept for the fingerprint, the byte count and the tokenizer
    except UnicodeEncodeError as bad:
        raise InvalidEvent(f"{name} is not valid Unicode text (lone surrogate at index {bad.start})") from None
    return value


def _text_mode(state: ArcState, what: str) -> None:
    if state.config.action_mode != "text":
        raise InvalidEvent(
            f"{what} belongs to action_mode 'text'; under action_mode 'tools' the agent acts with tool turns and"
            " each call is answered by a tool result"
        )


def observe(state: ArcState, event: Observe) -> tuple[ArcState, ObserveResult]:
    """Store O_j under id_j (A1, A2) and append it to H: verbatim when it fits R, else as its stub (A4)."""
    _text_mode(state, "an observe event")
    action = _require_str("action", event.action)
    content = _require_str("observation", event.observation)
    _require_returncode(event.returncode)
    return _store(state, action, content, event.returncode, lambda record: observation_entry(state.setup, record))


def _require_returncode(returncode: object) -> None:
    """An event's return code: an integer, or None when the environment gave no exit status (shown ``rc=?``)."""
    if returncode is not None and (isinstance(returncode, bool) or not isinstance(returncode, int)):
        raise InvalidEvent(f"returncode must be an integer or None, got {returncode!r}")


def _store(state: ArcState, action: str, content: str, returncode: int | None,
           entry_of: Callable[[Record], ObservationEntry | ToolResultEntry | UserEntry],
           then: tuple[LiveEntry, ...] = (), **changes: Any) -> tuple[ArcState, ObserveResult]:
    """The one storing step of ``observe``, ``tool_result`` and ``user_message``: the capacity check (A1), the record under the next
    id (A1, A2), its fingerprint, the citation of a stubbed entry, the catalog page (A3), then its entry in H (A4;
    ``entry_of`` makes it) and the entries ``then`` (ARC's answers that waited for it) with ``changes`` to the state."""
    setup = state.setup
    index = state.stored + 1
    if index > state.config.capacity:
        raise CapacityExceeded(
            f"cannot store observation #{index}: the declared capacity N_max is {state.config.capacity}"
        )
    record = make_record(setup, index, action, content, returncode, state.turn)
    entry = entry_of(record)
    records = state.records.append(record)
    fingerprints = state.fingerprints
    if setup.ids.fingerprint_bits:
        fingerprints = fingerprints.set(record.obs_id.partition("-")[2], index)
    cited = state.cited if entry.verbatim else state.cited.set(index, True)
    catalog_message = page_after_storing(state, records)
    new_state, folded = _append_live(
        state,
        (entry, *then),
        records=records,
        fingerprints=fingerprints,
        cited=cited,
        catalog_message=catalog_message,
        **changes,
    )
    chunks = chunk_count(record.n_tokens, state.config.chunk_tokens)
    return new_state, ObserveResult(record.obs_id, index, record.n_tokens, chunks, entry.verbatim, folded)


# --- agent turn: commands answered before any environment (A3, A5) ----------------------------


@attrs.define
class _CommandRun:
    """Scratch space for answering the commands of one action: ``state`` carries the catalog and recall
    fields as the commands change them (the store is not touched); the caller appends the turn to H."""

    state: ArcState
    body_recalls: int = 0
    notes: list[str] = attrs.field(factory=list)
    responses: list[str] = attrs.field(factory=list)
    recalls: list[RecallResult] = attrs.field(factory=list)

    def shown_token(self, text: str) -> str:
        """A word of the model's that a note repeats: through S (spec/rendering.md 7.1), then clipped."""
        return clipped(self.state.setup.show(text), SHOWN_TOKEN_CHARS)

    def answer(self, note: str, response: str | None = None) -> None:
        self.notes.append(note)
        self.responses.append(note if response is None else response)

    def unknown(self, word: str, token: str) -> None:
        records = self.state.records
        first = records[0].obs_id if len(records) else None
        last = records[-1].obs_id if len(records) else None
        shown = self.shown_token(token)
        self.answer(render.note_unknown_id(word, shown, self.state.nearest(token), first, last))

    def recall(self, command: Command) -> None:
        word = command.word
        if command.argument is None:
            self.answer(render.note_missing_argument(word, f"{word} §id"))
            return
        if word != "_recall_meta":
            if self.body_recalls >= self.state.config.recalls_per_step:
                self.answer(render.note_recall_limit(word, self.shown_token(command.argument),
                                                     self.state.config.recalls_per_step))
                return
            self.body_recalls += 1
        record = self.state.lookup(command.argument)
        if record is None:
            self.unknown(word, command.argument)
            return
        if word == "_recall_meta":
            self.answer(render.note_meta(word, record.stub), record.stub)
            return
        setup = self.state.setup
        chunks = chunk_count(record.n_tokens, setup.config.chunk_tokens)
        if chunks == 0:
            self.answer(render.note_empty(word, record.obs_id))
            self.recalls.append(RecallResult(record.obs_id, 0, 0, ""))
            return
        chunk = self.state.recall_cursor.get(record.index, 0) + 1 if word == "_recall-next" else 1
        if chunk > chunks:
            self.answer(render.note_exhausted(word, record.obs_id, chunks))
            return
        if len(record.inner_cuts) != chunks - 1:
            raise BudgetViolation(f"{record.obs_id}: {len(record.inner_cuts) + 1} stored chunks, expected {chunks}")
        payload = stored_chunk(record.shown, record.inner_cuts, chunk)
        payload_tokens = stored_chunk_tokens(setup, record.shown, record.inner_cuts, record.n_tokens, chunk)
        entry = make_entry(setup, record.index, record.obs_id, chunk, chunks, payload, payload_tokens)
        buffer, message, _evicted = admit(setup, self.state.recall_buffer, entry)
        self.state = attrs.evolve(
            self.state,
            recall_buffer=buffer,
            recall_message=message,
            recall_cursor=self.state.recall_cursor.set(record.index, chunk),
        )
        self.answer(render.note_chunk_in_buffer(word, record.obs_id, chunk, chunks), entry.response)
        self.recalls.append(RecallResult(record.obs_id, chunk, chunks, payload))

    def dispatch(self, command: Command | IgnoredLine) -> None:
        if isinstance(command, IgnoredLine):
            self.answer(render.note_ignored(self.shown_token(command.text)))
        elif command.word in RECALL_WORDS:
            self.recall(command)
        else:
            self.catalog(command)

    def catalog(self, command: Command) -> None:
        word = command.word
        stored = self.state.stored
        if stored == 0:
            self.answer(render.note_catalog_empty(word))
            return
        pages = page_count(stored, self.state.config.page_size)
        current = self.state.catalog_cursor or default_page(self.state)
        if word == "catalog-first":
            target = 1
        elif word == "catalog-next":
            if current >= pages:
                self.answer(render.note_catalog_last(word, pages))
                return
            target = current + 1
        else:
            if command.argument is None:
                self.answer(render.note_missing_argument(word, f"{word} N"))
                return
            argument = command.argument
            target = int(argument) if _DECIMAL.fullmatch(argument) else 0
            if not 1 <= target <= pages:
                self.answer(render.note_catalog_no_page(word, self.shown_token(argument), pages))
                return
        page = render_page(self.state.setup, self.state.records, target)
        self.state = attrs.evolve(self.state, catalog_cursor=target, catalog_message=page)
        self.answer(render.note_catalog_page(word, target, pages), page.content)


def agent_turn(state: ArcState, event: AgentTurn) -> tuple[ArcState, AgentResult]:
    """Record the agent's turn; answer its recall/catalog commands here, never in an environment."""
    _text_mode(state, "an agent event")
    thought = _require_str("thought", event.thought)
    action = _require_str("action", event.action)
    setup = state.setup
    turn = state.turn + 1
    agent = agent_entry(setup, turn, thought, action)
    commands = parse_action(action)
    if commands is None:
        new_state, folded = _append_live(state, (agent,), turn=turn)
        return new_state, AgentResult(False, None, (), (), folded)
    run = _CommandRun(state)
    for command in commands:
        run.dispatch(command)
    result_entry = command_entry(setup, turn, run.notes)
    new_state, folded = _append_live(run.state, (agent, result_entry), turn=turn)
    response = "\n".join(run.responses)
    return new_state, AgentResult(True, response, tuple(run.notes), tuple(run.recalls), folded)


# --- tool mode: tool turns and tool results (spec/rendering.md section 13) ----------------------------


def _tool_mode(state: ArcState, what: str) -> None:
    if state.config.action_mode != "tools":
        raise InvalidEvent(f"{what} needs action_mode 'tools' (this task runs in action_mode 'text')")


def _require_calls(calls: object) -> tuple[ToolCall, ...]:
    if not isinstance(calls, tuple) or not all(isinstance(call, ToolCall) for call in calls):
        raise InvalidEvent("calls must be a tuple of ToolCall")
    seen: set[str] = set()
    for call in calls:
        for name in ("call_id", "name", "arguments"):
            _require_str(f"a call's {name}", getattr(call, name))
        if not call.call_id or call.call_id in seen:
            raise InvalidEvent(f"tool call ids must be distinct and non-empty, got {call.call_id!r} twice or empty")
        seen.add(call.call_id)
        problem = arguments_problem(call.arguments)  # first: it makes the json.loads below safe
        if problem is not None:
            raise InvalidEvent(f"tool call {clipped(call.call_id, SHOWN_TOKEN_CHARS)!r} cannot be read back: {problem}")
        lone = arguments_surrogate(call.arguments)
        if lone is not None:
            raise InvalidEvent(f"the arguments of tool call {clipped(call.call_id, SHOWN_TOKEN_CHARS)!r} are not text:"
                               f" their JSON holds a lone surrogate escape ({lone})")
    return calls


def _unit_tokens(live: tuple[LiveEntry, ...]) -> int:
    """Tokens (largest over their places) of the newest unit of H: a tool turn and the results after it."""
    total = 0
    for entry in reversed(live):
        total += entry.message.tokens
        if starts_unit(entry):
            break
    return total


def tool_turn(state: ArcState, event: ToolTurn) -> tuple[ArcState, ToolTurnResult]:
    """Record a tool turn; answer the calls to ARC's own tools here (A3, A5), hand the others to the environment.

    The turn and the results of its calls form one unit of H that costs at most R: each environment call has
    a result reserved (``tool_reserve``: its stub message at the widest), ARC's answers and the assistant
    message take the rest (the thought is clipped until it fits, then the arguments' long strings); when it
    cannot fit so, each result is reserved its stub frame only (`Setup.bare_result_reserve`); a turn whose
    calls cannot fit even then is refused. Each answer joins H in its call's place: with the turn when no
    environment call comes before its call, else right after those calls' results (``waiting_answers``).
    A call to a tool that is neither ARC's nor the environment's is answered with a note, never run.
    """
    _tool_mode(state, "a tool turn")
    thought = _require_str("thought", event.thought)
    calls = _require_calls(event.calls)
    if state.pending:
        waiting = ", ".join(call.call_id for call in state.pending)
        raise InvalidEvent(f"tool call(s) {waiting} of the previous turn have no result yet")
    setup = state.setup
    budget = setup.config.recent_budget
    turn = state.turn + 1
    offered = {tool.name for tool in setup.config.tools}
    run = _CommandRun(state)
    answered: list[tuple[ToolCall, tuple[str, ...], str]] = []
    environment: list[ToolCall] = []
    after: list[frozenset[str]] = []  # per answer: the environment calls made before its call
    for call in calls:
        if call.name in offered:
            environment.append(call)
            continue
        after.append(frozenset(earlier.call_id for earlier in environment))
        start = len(run.notes)
        if call.name in ARC_TOOL_NAMES:
            run.dispatch(call_command(call))
        else:
            run.answer(render.note_unknown_tool(run.shown_token(call.name)))
        answered.append((call, tuple(run.notes[start:]), "\n".join(run.responses[start:])))
    answers = [tool_note_entry(setup, turn, call.call_id, notes, budget) for call, notes, _ in answered]
    answered_tokens = sum(entry.message.tokens for entry in answers)
    reserved = sum(setup.result_reserve(call.call_id) for call in environment)
    try:
        assistant = tool_turn_entry(setup, turn, thought, calls, budget - answered_tokens - reserved)
    except BudgetViolation:
        # the results then share what is left: each is sure of its stub frame only (bare, spec 13, `tool_result`)
        reserved = sum(setup.bare_result_reserve(call.call_id) for call in environment)
        left = budget - answered_tokens - reserved
        try:
            assistant = tool_turn_entry(setup, turn, thought, calls, left)
        except BudgetViolation:
            raise InvalidEvent(
                f"a tool turn with {len(calls)} call(s) cannot fit recent_budget R = {budget}: with its text and the"
                f" strings of its arguments clipped its message costs more than the {left} tokens left after ARC's"
                f" answers and the {reserved} reserved for the stub frames of the {len(environment)} result(s) of"
                " the environment"
            ) from None
    # a template that pairs results with calls by position (Qwen3's) reads each answer in its call's place: an answer
    # joins H with the turn only when no environment call comes before its call, the others after those results
    shown_now = tuple(entry for entry, before in zip(answers, after) if not before)
    held = tuple((before, entry) for entry, before in zip(answers, after) if before)
    new_state, folded = _append_live(run.state, (assistant, *shown_now), turn=turn, pending=tuple(environment),
                                     waiting_answers=held)
    result = ToolTurnResult(
        tuple(ToolAnswer(call.call_id, entry.message.content, response)
              for (call, _, response), entry in zip(answered, answers)),
        tuple(environment),
        tuple(run.recalls),
        folded,
    )
    return new_state, result


def tool_result(state: ArcState, event: ToolResult) -> tuple[ArcState, ObserveResult]:
    """Store the result of a pending call as O_j (A1, A2) and add it to H within its unit's share of R (A4)."""
    _tool_mode(state, "a tool result")
    call_id = _require_str("call_id", event.call_id)
    content = _require_str("observation", event.observation)
    _require_returncode(event.returncode)
    call = next((pending for pending in state.pending if pending.call_id == call_id), None)
    if call is None:
        waiting = ", ".join(pending.call_id for pending in state.pending) or "none"
        raise InvalidEvent(f"no pending tool call has id {clipped(call_id, SHOWN_TOKEN_CHARS)!r} (pending: {waiting})")
    setup = state.setup
    pending = tuple(other for other in state.pending if other.call_id != call_id)
    held = state.waiting_answers
    unit_left = (state.config.recent_budget - _unit_tokens(state.live)
                 - sum(entry.message.tokens for _, entry in held))  # the unit's answers not in H yet count too
    share = unit_left - sum(setup.result_reserve(other.call_id) for other in pending)
    least = unit_left - sum(setup.bare_result_reserve(other.call_id) for other in pending)
    still = {other.call_id for other in pending}
    ready = 0  # the answers whose earlier environment calls all have their results now (a prefix: call order)
    while ready < len(held) and not held[ready][0] & still:
        ready += 1
    return _store(state, call.action(), content, event.returncode,
                  lambda record: tool_result_entry(setup, state.turn, call_id, record, share, least),
                  tuple(entry for _, entry in held[:ready]), pending=pending, waiting_answers=held[ready:])


def user_message(state: ArcState, event: UserMessage) -> tuple[ArcState, ObserveResult]:
    """Store a user message after the goal as O_j (A1, A2) and append it to H as a user message, verbatim when
    it fits R, otherwise its stub (A4); a unit of its own. Refused while a call of the last turn has no result
    (a chat puts a call's result right after it)."""
    _tool_mode(state, "a user message")
    content = _require_str("content", event.content)
    if state.pending:
        waiting = ", ".join(call.call_id for call in state.pending)
        raise InvalidEvent(f"a user message cannot come while tool call(s) {waiting} have no result yet")
    return _store(state, USER_ACTION, content, None, lambda record: user_entry(state.setup, state.turn, record))


# --- view and dispatch ------------------------------------------------------------------------


def view(state: ArcState) -> View:
    """A4: the active view for the next model call; pure, within K <= L by construction (Lemma 2)."""
    return build_view(
        state.setup, state.prefix, state.summary.message, state.catalog_message, state.recall_message, state.live
    )


def step(state: ArcState, event: Event) -> tuple[ArcState, Output]:
    """Apply one event. Raises an ArcError (state unchanged) for an illegal event."""
    if isinstance(event, Observe):
        return observe(state, event)
    if isinstance(event, AgentTurn):
        return agent_turn(state, event)
    if isinstance(event, ToolTurn):
        return tool_turn(state, event)
    if isinstance(event, ToolResult):
        return tool_result(state, event)
    if isinstance(event, UserMessage):
        return user_message(state, event)
    if isinstance(event, Compact):
        return compact(state, event)
    if isinstance(event, RequestView):
        return state, view(state)
    raise InvalidEvent(f"unknown event {event!r}")


__all__ = [
    "AgentResult", "AgentTurn", "ArcState", "Compact", "CompactResult", "Event", "Observe", "ObserveResult",
    "Output", "RecallResult", "RequestView", "ToolAnswer", "ToolResult", "ToolTurn", "ToolTurnResult",
    "USER_ACTION", "UserMessage", "agent_turn", "compact", "fold", "init", "observe", "step", "tool_result",
    "tool_turn", "user_message", "view",
]
