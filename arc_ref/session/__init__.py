"""ARC in front of an agent: a session that speaks OpenAI chat messages and tool calls (issue 10, item 2).

A `Session` is a thin adapter over the core's tool-calling mode (spec/rendering.md section 13): every
assistant turn is a `ToolTurn`, every environment result a `ToolResult`, and the messages to send are the
core's view (A4) in OpenAI chat format, counted with the configured tokenizer and the served model's own chat
template (chat format ``template``, tokenizer ``hf-dir:DIR``), tools listing included. Nothing here builds a
view of its own.

    session = Session("hf-dir:models/Qwen3-8B", system="You are a coding agent.", tools=[read_file_tool])
    session.add_user("Find the failing test.")            # the task (the goal of the prefix F)
    reply = client.chat.completions.create(model=..., messages=session.messages(), tools=session.tools(),
                                           max_tokens=session.max_tokens)  # G_max: K <= L = L_ctx - G_max
    session.add_assistant(reply.choices[0].message, usage=reply.usage)  # ARC's calls answered here; the
                                                           # server's count checked (CountsDifferWarning)
    for call in reply.choices[0].message.tool_calls or []:
        if not session.is_arc_call(call):
            session.add_tool_result(call.id, run_my_tool(call))   # stored under an id the store mints (A1)

Calls to ARC's own tools (``_recall``, ``_recall-next``, ``_recall-start``, ``_recall_meta``,
``catalog-first``, ``catalog-next``, ``catalog-page``: the command words of arc_ref.commands) are answered by
the core when the assistant turn is added, without touching the environment (A3, A5); `handle` returns that
answer as the tool message. An environment result is stored as the next observation under an id the
store mints (A1, A2); the framework's ``tool_call_id`` only links the call to its result in the messages.
Compaction folds H by units (a turn with the results of its calls), so a call and its result are never
separated (`arc_ref.machine.fold`). The messages show every stored output as its shown form S(O), with the
template's control strings made inert (spec/rendering.md 7.1), and recall answers with chunks of S(O) (what the
model reads): ``arc_ref.escape.unshow`` of the chunks joined, or ``record.content``, is the output exactly.
With ``path`` the session is durable: every event is committed to a
`DurableStore` before the method returns, and `Session.open(path)` resumes it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from attrs import frozen

from arc_ref.budgets import DERIVED_FIELDS, fit_to_window, reserve_for_window
from arc_ref.config import Config, checked_fields, preset
from arc_ref.errors import ArcError
from arc_ref.machine import (
    ArcState,
    Event,
    ObserveResult,
    Output,
    ToolAnswer,
    ToolResult,
    ToolTurn,
    ToolTurnResult,
    UserMessage,
    init,
    step,
    view,
)
from arc_ref.history import ToolResultEntry
from arc_ref.message import ToolCall
from arc_ref.openai_wire import TOOL_CALL_SHAPE, ShapeError, WireToolCall, arguments_text, field_of, read_tool_call
from arc_ref.persist.postgres import Store, create_store, open_store
from arc_ref.templates import TemplateFormat
from arc_ref.tools import ARC_TOOL_NAMES
from arc_ref.view import VIEW_COMPONENTS


TOOL_MODE_SYSTEM = (
    "You are an agent that solves a task by calling tools. Tool outputs are stored verbatim under ids like"
    " §00042-0591234567; older turns are summarized, and a long output appears as a one-line stub with its id."
    " To read a stored output again, exactly and without re-running anything, call the tools _recall (first"
    " chunk), _recall-next (next chunk), _recall-start (from the start again) or _recall_meta (the stub only)"
    " with its id; catalog-first, catalog-next and catalog-page list every stored output. Recalled chunks appear"
    " in the recall buffer section."
)
"""The system prompt of a session given none: the core's default describes text actions, ignored in tool mode."""


class SessionError(ArcError):
    """A session used out of order (a result for a call never made, a turn while calls wait...)."""

    code = "session"


class CountsDifferWarning(UserWarning):
    """The server's ``usage.prompt_tokens`` for a request was not the session's count of its messages: the
    session's tokenizer or chat template (or the request's ``chat_template_kwargs``) is not the served model's, and
    K <= L holds only for the session's count (review h61 F3). Given once per session; `Session.audit` counts
    every reply that differed (``counts_differing``), as `arc-ref proxy` counts its calls'."""


@frozen
class Audit:
    """The budget audit of the messages to send (A4, Lemma 2): tokens per component, what was folded, recalled.

    ``prefix`` is B without the tools listing, ``tool_listing`` what the listing adds to B; ``summary``,
    ``recent``, ``catalog``, ``recall`` are tokens(S), tokens(H), tokens(G), tokens(U); ``overhead`` the
    generation prompt: the view's parts, named as ``arc_ref.view.VIEW_COMPONENTS`` names them. They add up to
    ``tokens`` <= ``budget`` (K) <= ``limit`` (L).
    """

    tokens: int
    budget: int
    limit: int
    prefix: int
    tool_listing: int
    summary: int
    recent: int
    catalog: int
    recall: int
    overhead: int
    stored: int  # observations in the store
    folded: int  # entries of H folded into S by this session object (since it was opened)
    # (id, how S shows it: stub, bare or inline) of the folded observations S still shows; one whose item went
    # into the omitted count is not listed (``omitted``)
    compacted: tuple[tuple[str, str], ...]
    summarized_turns: int  # folded turns and answers shown in S as thoughts and notes
    omitted: int  # summary items collapsed into the omitted count
    recalled: tuple[tuple[str, int, int], ...]  # (id, chunk, chunks) in the recall buffer U, oldest first
    recalled_last_turn: tuple[tuple[str, int, int], ...]  # the chunks the last assistant turn recalled
    # The server's usage handed back with the replies (Session.add_assistant's ``usage``), by this session object:
    usage_checked: int = 0  # replies whose usage.prompt_tokens was compared with the count of the messages sent
    counts_differing: int = 0  # of those, the replies the server counted differently (CountsDifferWarning)
    server_tokens: int | None = None  # the server's usage.prompt_tokens of the last reply compared
    sent_tokens: int | None = None  # the session's count of the messages that reply answered

    @property
    def suffix(self) -> int:
        """tokens(H) under its former name (``recent``)."""
        return self.recent

    @property
    def recall_buffer(self) -> int:
        """tokens(U) under its former name (``recall``)."""
        return self.recall

    def components(self) -> dict[str, int]:
        """Tokens per part, in the view's order (``VIEW_COMPONENTS``), the tools listing after the prefix."""
        parts = {component.name: getattr(self, component.name) for component in VIEW_COMPONENTS}
        return {"prefix": parts.pop("prefix"), "tool_listing": self.tool_listing, **parts}

    def text(self) -> str:
        """The audit as a few printable lines."""
        parts = ", ".join(f"{name} {tokens}" for name, tokens in self.components().items())
        lines = [f"{self.tokens} tokens <= K = {self.budget} <= L = {self.limit}: {parts}",
                 f"stored {self.stored} observations; folded {self.folded} entries of H into S this session"
                 f" ({len(self.compacted)} observations and {self.summarized_turns} turns/answers in S,"
                 f" {self.omitted} omitted)"]
        if self.compacted:
            lines.append("compacted: " + ", ".join(f"{obs_id} ({kind})" for obs_id, kind in self.compacted))
        if self.recalled:
            lines.append("recall buffer: " + ", ".join(f"{obs_id} chunk {chunk}/{chunks}"
                                                       for obs_id, chunk, chunks in self.recalled))
        if self.recalled_last_turn:
            lines.append("recalled by the last turn: " + ", ".join(
                f"{obs_id} chunk {chunk}/{chunks}" for obs_id, chunk, chunks in self.recalled_last_turn))
        if self.usage_checked:
            lines.append(f"server counted {self.server_tokens} prompt tokens for the last request, the session"
                         f" {self.sent_tokens}; {self.counts_differing} of {self.usage_checked} replies' usage"
                         " differed")
        return "\n".join(lines)


def _require_text(what: str, text: object) -> str:
    """``text`` when it is a str; else SessionError at once (review h61: a goal of 42 was refused only when the
    session started, by then fixed, so the session could not go on)."""
    if not isinstance(text, str):
        raise SessionError(f"{what} must be text, got {type(text).__name__}")
    return text


def message_event(role: str, text: str, calls: Sequence[ToolCall] = (), tool_call_id: str | None = None,
                  returncode: int | None = None) -> Event:
    """The core's event for one OpenAI chat message after the prefix F: the one mapping of the Session and of
    `arc-ref proxy` (issue 25 item 5). An assistant message is a `ToolTurn` (its text and tool calls; the core
    answers the calls to ARC's tools), a tool message the `ToolResult` of the call it answers (stored under an id
    the store mints, A1; ``returncode`` None, shown ``rc=?``, unless the caller knows the exit status: an OpenAI tool
    message carries none), a user message a `UserMessage` (stored and shown as the user's). SessionError for
    another role (the system text and the goal are the prefix F) or a tool message without its call's id."""
    if role == "assistant":
        return ToolTurn(text, tuple(calls))
    if role == "tool":
        if tool_call_id is None:
            raise SessionError("a tool message answers a call: it needs its tool_call_id")
        return ToolResult(tool_call_id, text, returncode)
    if role == "user":
        return UserMessage(text)
    raise SessionError(f"a {role!r} message has no event: the system text and the goal are the prefix F")


def tool_call(call: Any) -> ToolCall:
    """An OpenAI tool call (a mapping, an openai client object, or a ToolCall) as the core's ToolCall."""
    if isinstance(call, ToolCall):
        return call
    try:
        read = read_tool_call(call, 0)
    except ShapeError:
        read = WireToolCall(field_of(call, "id"), None, None)
    if not isinstance(read.call_id, str) or not isinstance(read.name, str):
        raise SessionError(f"a tool call must be {TOOL_CALL_SHAPE} with string id and name, got {str(call)[:80]!r}")
    if read.arguments is not None and not isinstance(read.arguments, str):
        raise SessionError(f"tool call {read.call_id!r}: arguments must be the JSON text the model produced (a string)")
    return ToolCall(read.call_id, read.name, arguments_text(read.arguments))


class Session:
    """An agent's conversation kept by ARC: in memory, or durable in a `DurableStore` at ``path``.

    ``tokenizer`` is the served model's directory as ``hf-dir:DIR`` (its tokenizer and chat template count
    every message as the server will). ``tools`` are the environment's tools (OpenAI tool objects), offered
    after ARC's own. The budgets are derived from the window and the session's own prefix (system text, tools
    listing, goal) when the session starts (`arc_ref.budgets.fit_to_window`, spec/parameters.md "Budgets from a
    window and a prefix"): give ``context_limit`` (L_ctx, default the paper's 16384); the completion reserve G_max
    (`max_tokens`, what each request should send) is ``max_completion`` when given, else min(4096, half of what the
    prefix's smallest view leaves of the window), at least 256, as `arc-ref proxy` chooses it
    (`arc_ref.budgets.reserve_for_window`); a budget given in ``overrides`` is kept over the derived one. With
    ``preset_name`` the named preset's budgets are used as they are (spec/parameters.md). Without ``system`` the model is told how to call ARC's
    tools (`TOOL_MODE_SYSTEM`). A configuration mistake raises `arc_ref.errors.ConfigError` from the
    constructor (a prefix that cannot fit the window, from the start: it needs the goal). Misuse raises `SessionError`; what the core refuses in an event (a model reply
    with duplicate call ids, a lone surrogate in its arguments, more parallel calls than R can show, a durable
    result over the row limit) raises `arc_ref.errors.InvalidEvent`; the durable store's own failures (missing,
    locked, damaged) raise `arc_ref.persist.StoreError`: all are `ArcError`s, the one to catch, and each leaves
    the session as it was before the call (review h61 F5). System and goal may also be set before the first
    message is requested (`set_system`, `set_goal` / the first `add_user`); the session starts then. A later
    `add_user` (a follow-up, a framework's format-error message) is stored and shown as a user message.
    """

    def __init__(self, tokenizer: str | None = None, *, system: str | None = None, goal: str | None = None,
                 tools: Sequence[Mapping[str, Any]] = (), path: str | os.PathLike[str] | None = None,
                 config: Config | None = None, preset_name: str | None = None, **overrides: Any) -> None:
        if config is None and tokenizer is None:
            raise SessionError("a session needs the served model's tokenizer (hf-dir:DIR) or a config")
        if config is not None and (tokenizer is not None or tools or overrides):
            raise SessionError("give either a config or tokenizer/tools/budgets, not both")
        self._config = config
        self._preset_name = preset_name
        self._overrides: dict[str, Any] = dict(overrides)
        if tokenizer is not None:
            fixed = sorted(set(overrides) & {"chat_format", "action_mode", "tools", "tokenizer"})
            if fixed:
                raise SessionError(f"{', '.join(fixed)} fixed by the session: it renders the served model's own"
                                   " chat template (chat_format 'template') and speaks tool calls (action_mode"
                                   " 'tools'); give a config for anything else")
            scheme, _, directory = tokenizer.partition(":")
            if scheme in ("hf-dir", "hf") and directory:  # stored with a durable session: reopen from anywhere
                tokenizer = f"{scheme}:{Path(directory).expanduser().resolve()}"
            self._overrides.update(tokenizer=tokenizer, chat_format="template", action_mode="tools",
                                   tools=list(tools))
        for what, text in (("the system prompt", system), ("the goal", goal)):
            if text is not None:
                _require_text(what, text)
        # every field, the tokenizer and the tools checked here, at the line that gave them (review h61 F6); the
        # window against the prefix waits for the goal, the chat template for the start
        self._base_config = config if config is not None else preset(preset_name or "paper", **self._overrides)
        checked_fields(self._base_config)
        self._system = system if system is not None or config is not None else TOOL_MODE_SYSTEM
        self._goal = goal
        self._path = path
        self._store: Store | None = None
        self._state: ArcState | None = None
        self._answers: dict[str, ToolAnswer] = {}  # ARC's answers to the calls of the last turn
        self._calls: dict[str, ToolCall] = {}  # the calls of the last turn
        self._results: dict[str, str] = {}  # call id -> the id its result was stored under (last turn)
        self._last_recalls: tuple[tuple[str, int, int], ...] = ()
        self.folded = 0
        self._sent_tokens: int | None = None  # the count of the last messages() since the last assistant turn
        self._usage_checked = 0
        self._counts_differing = 0
        self._last_usage: tuple[int, int] | None = None  # (the server's prompt_tokens, the session's count)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "Session":
        """Resume a durable session: its state is the fold of its stored events (calls still pending included)."""
        store = open_store(path)
        mode = store.state.config.action_mode
        if mode != "tools":
            store.close(snapshot=False)
            raise SessionError(f"{str(path)!r} holds a task in action_mode {mode!r}, not a"
                               " session's (tool calls): read it with DurableStore.open or arc-ref inspect")
        session = cls(config=store.state.config, path=path)
        session._store, session._state = store, store.state
        return session

    # --- the prefix (before the session starts) -------------------------------------------------------

    def set_system(self, text: str) -> None:
        """The system text of the prefix F (before the session starts); SessionError for anything but text."""
        self._before_start("the system prompt")
        self._system = _require_text("the system prompt", text)

    def set_goal(self, text: str) -> None:
        """The task, the goal of the prefix F (before the session starts); SessionError for anything but text."""
        self._before_start("the goal")
        self._goal = _require_text("the goal", text)

    def add_user(self, text: str) -> str | None:
        """The user's message, at any time: the first is the task (the goal, kept verbatim in the prefix F);
        every later one is stored as the next observation and shown as a user message (`UserMessage`), and its
        id is returned (A1). Refused while a call of the last assistant turn awaits its result. With ``config=``
        the first add_user before the start replaces the config's goal (a preset always has one, "Solve the
        task.", which cannot be told from a goal given on purpose): give the task there or here, not both."""
        _require_text("a user message", text)
        if self._goal is None and self._state is None:
            self.set_goal(text)
            return None
        state = self.start()
        if state.pending:
            raise SessionError(
                f"tool call(s) {', '.join(call.call_id for call in state.pending)} of the last assistant turn"
                " await their result (add_tool_result) before a user message"
            )
        output = self._apply(message_event("user", text))
        assert isinstance(output, ObserveResult)
        return output.obs_id

    def _before_start(self, what: str) -> None:
        if self._state is not None:
            raise SessionError(
                f"{what} cannot change once the session has started (its first messages, turn or audit): the"
                " prefix F is fixed for the whole task (later user messages: add_user)"
            )

    def start(self) -> ArcState:
        """Fix the configuration and start the task (and create the store); done by the first use anyway."""
        if self._state is not None:
            return self._state
        config = self._base_config
        changes = {name: value for name, value in (("system", self._system), ("goal", self._goal))
                   if value is not None}
        if "goal" not in changes and self._config is None:
            raise SessionError("no task yet: add the user's message first (add_user or set_goal)")
        config = config.replace(**changes)
        if self._config is None and self._preset_name is None:  # budgets from the window and this prefix
            kept = {name: value for name, value in self._overrides.items() if name in DERIVED_FIELDS}
            if "max_completion" not in self._overrides:  # G_max as arc-ref proxy chooses it (review h54 F6)
                config = config.replace(max_completion=reserve_for_window(
                    config, config.max_completion, reserver="the session",
                    setting="Session(..., max_completion=N)"))
            config = fit_to_window(config, keep=kept, check=False)  # init checks it (K <= L, every floor)
        if config.action_mode != "tools":
            raise SessionError("a session speaks OpenAI tool calls: it needs action_mode 'tools' (chat format"
                               " 'template' with the tokenizer 'hf-dir:DIR')")
        if self._path is not None:
            self._store = create_store(self._path, config)
            self._state = self._store.state
        else:
            self._state = init(config)
        return self._state

    @property
    def max_tokens(self) -> int:
        """G_max, the configuration's ``max_completion``: send it as each request's ``max_tokens`` (K <= L = L_ctx -
        G_max leaves the window's last G_max tokens to the completion); starts the session. Unless given, the
        session chooses it from the window and its prefix, as `arc-ref proxy` does (`reserve_for_window`)."""
        return self.start().config.max_completion

    @property
    def state(self) -> ArcState:
        """The core's state (`arc_ref.machine.ArcState`: the store, H, S, the recall buffer); starts the session."""
        return self.start()

    # --- what to send ----------------------------------------------------------------------------------

    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI chat messages of the next request: the view (A4), within K <= L by construction. Their count
        (``audit().tokens``, tools listing and generation prompt included) is what `add_assistant` compares the
        server's ``usage.prompt_tokens`` with."""
        state = self.start()
        if state.pending:
            raise SessionError(
                f"tool call(s) {', '.join(call.call_id for call in state.pending)} await their result"
                " (add_tool_result) before the next request"
            )
        shown = view(state)
        self._sent_tokens = shown.tokens
        return shown.chat_messages()

    def tools(self) -> list[dict[str, Any]]:
        """The ``tools`` of the next request (OpenAI JSON Schema): ARC's seven tools, then the environment's."""
        listing = view(self.start()).tools()
        assert listing is not None  # tool mode always lists ARC's tools
        return listing

    def is_arc_call(self, call: Any) -> bool:
        """The call is to one of ARC's tools, or to a name no tool has (both answered by the session)."""
        name = tool_call(call).name
        return name in ARC_TOOL_NAMES or name not in {tool.name for tool in self.start().config.tools}

    def audit(self) -> Audit:
        """The budget audit of `messages()`: tokens per component, what was compacted, what was recalled."""
        state = self.start()
        shown = view(state)
        parts = shown.components
        chat = state.setup.chat
        listing = chat.tool_listing_tokens() if isinstance(chat, TemplateFormat) else 0
        items = state.summary.items
        compacted = tuple((state.obs_id(item.index), item.kind) for item in items
                          if item.kind in ("stub", "bare", "inline") and item.index > 0)
        return Audit(
            tokens=shown.tokens, budget=shown.budget, limit=shown.limit, prefix=parts.prefix - listing,
            tool_listing=listing, summary=parts.summary, recent=parts.recent, catalog=parts.catalog,
            recall=parts.recall, overhead=parts.overhead, stored=state.stored, folded=self.folded,
            compacted=compacted, summarized_turns=len(items) - len(compacted), omitted=state.summary.omitted,
            recalled=tuple((state.obs_id(entry.index), entry.chunk, entry.chunks) for entry in state.recall_buffer),
            recalled_last_turn=self._last_recalls, usage_checked=self._usage_checked,
            counts_differing=self._counts_differing,
            server_tokens=None if self._last_usage is None else self._last_usage[0],
            sent_tokens=None if self._last_usage is None else self._last_usage[1],
        )

    # --- what the model and the environment did ----------------------------------------------------------

    def add_assistant(self, message: Any = None, tool_calls: Sequence[Any] | None = None, *,
                      usage: Any = None) -> list[dict[str, Any]]:
        """Add the model's reply: an OpenAI assistant message (mapping or openai object), or its text and calls.

        Calls to ARC's tools are answered now (their tool messages are returned); each is in `messages()` in its
        call's place: at once when no environment call comes before it, else after the results of those calls
        (spec/rendering.md 13). Environment calls wait for `add_tool_result`. Returns ARC's tool messages in call
        order.

        ``usage``: the reply's usage (``reply.usage``: the openai client's object or a mapping), to check the
        session's count against the server's (review h61 F3). Its ``prompt_tokens`` is compared with the count of
        the messages the last `messages()` returned since the previous assistant turn (``audit().tokens`` then:
        tools listing and generation prompt included); when they differ a `CountsDifferWarning` is given, once per
        session object, and `audit()` counts every reply that differed (``counts_differing`` of
        ``usage_checked``, the last reply's ``server_tokens`` beside ``sent_tokens``). Nothing is compared for a
        usage without an integer ``prompt_tokens`` (None, absent), or when no `messages()` was returned since the
        previous assistant turn (the request was not the session's messages, or the session was reopened since):
        the session cannot know what was sent. Send the session's messages and tools as they are, with the
        session's ``chat_template_kwargs`` (``{"enable_thinking": False}`` by default): the comparison cannot
        tell a request the caller changed from a tokenizer that is not the served model's. A ``usage`` that is
        not a usage (a number, a string) is a SessionError, and the turn is not added. The warning is given after
        the turn is added: where a warnings filter makes it an error, the turn stays added (`handle` gives ARC's
        answers to its calls).
        """
        prompt_tokens = self._prompt_tokens(usage)
        if isinstance(message, str) or message is None:
            content = message or ""
            calls = tuple(tool_call(call) for call in tool_calls or ())
        else:
            if tool_calls is not None:
                raise SessionError("give an assistant message or its text and tool_calls, not both")
            role = field_of(message, "role")
            known = isinstance(message, Mapping) or hasattr(message, "content") or hasattr(message, "tool_calls")
            if not known or role not in (None, "assistant"):
                raise SessionError("add_assistant takes the model's reply: an assistant message (a mapping or the"
                                   " openai client's message, role 'assistant') or its text and tool_calls, got"
                                   f" {str(message)[:80]!r}")
            content = field_of(message, "content") or ""
            calls = tuple(tool_call(call) for call in field_of(message, "tool_calls") or ())
            if not isinstance(content, str):
                raise SessionError("the assistant message's content must be text")
        state = self.start()
        if state.pending:
            raise SessionError(
                f"tool call(s) {', '.join(call.call_id for call in state.pending)} of the last assistant turn"
                " await their result (add_tool_result) before the next assistant turn"
            )
        output = self._apply(message_event("assistant", content, calls))
        assert isinstance(output, ToolTurnResult)
        self._calls = {call.call_id: call for call in calls}
        self._answers = {answer.call_id: answer for answer in output.answered}
        self._results = {}
        self._last_recalls = tuple((recall.obs_id, recall.chunk, recall.chunks) for recall in output.recalls)
        sent, self._sent_tokens = self._sent_tokens, None  # this turn answers that request; the next is new
        if prompt_tokens is not None and sent is not None:
            self._check_usage(prompt_tokens, sent)
        return [self._tool_message(answer) for answer in output.answered]

    @staticmethod
    def _prompt_tokens(usage: Any) -> int | None:
        """The integer ``prompt_tokens`` of a reply's usage, None without one; SessionError for a non-usage."""
        if usage is None:
            return None
        if isinstance(usage, (str, bytes, int, float, list, tuple)):
            raise SessionError("usage must be the reply's usage (reply.usage: the openai client's object or a"
                               f" mapping with prompt_tokens), got {str(usage)[:80]!r}")
        prompt_tokens = field_of(usage, "prompt_tokens")
        return prompt_tokens if type(prompt_tokens) is int else None

    def _check_usage(self, server: int, sent: int) -> None:
        self._usage_checked += 1
        self._last_usage = (server, sent)
        if server == sent:
            return
        self._counts_differing += 1
        if self._counts_differing == 1:
            tokenizer = self.start().config.tokenizer
            warnings.warn(f"the server counted {server} prompt tokens where the session counted {sent} for the"
                          f" messages it sent: is {tokenizer} the served model's tokenizer and chat template, and"
                          " the request's chat_template_kwargs the session's? K <= L holds only for the session's"
                          " count (said once per session; audit().counts_differing counts them)",
                          CountsDifferWarning, stacklevel=3)

    def handle(self, call: Any) -> dict[str, Any]:
        """The tool message answering a call of the last assistant turn to one of ARC's tools (never the
        environment's: those are run by the caller and added with `add_tool_result`)."""
        made = tool_call(call)
        answer = self._answers.get(made.call_id)
        if answer is not None:
            return self._tool_message(answer)
        if made.call_id in self._calls:
            raise SessionError(f"call {made.call_id!r} is to the environment's tool {made.name!r}: run it and add"
                               " its result with add_tool_result")
        state = self.start()
        if not self._calls and state.turn > 0:
            waits_for = next((before for before, entry in state.waiting_answers
                              if isinstance(entry, ToolResultEntry) and entry.call_id == made.call_id), None)
            if waits_for is not None:  # an answer to a call after an environment call's (spec/rendering.md 13)
                earlier = ", ".join(call.call_id for call in state.pending if call.call_id in waits_for)
                raise SessionError(f"call {made.call_id!r}: this session was reopened after that turn; ARC's answer"
                                   f" to it waits for the result of {earlier} (add_tool_result), then it is in the"
                                   " view (messages())")
            raise SessionError(f"call {made.call_id!r}: this session was reopened after that turn; ARC's answers"
                               " to its calls are already in the view (messages())")
        raise SessionError(f"no call of the last assistant turn has id {made.call_id!r}: add the assistant"
                           " message first (add_assistant); ARC answers its calls then")

    def add_tool_result(self, call_id: str, content: str, returncode: int | None = None) -> str:
        """Store the environment's result of a pending call; returns the id the store minted for it (A1).
        ``returncode``: the tool's exit status when known; None (the default) is shown ``rc=?``. Add the results
        of one assistant turn in the order of its calls: they are shown in the order added (spec/rendering.md 13),
        and a template that pairs results with calls by position (Qwen3's) has the model read each result as
        that of the call in its place (reviews h36 F3, h61 F2)."""
        if not isinstance(call_id, str):
            raise SessionError(f"call_id must be the tool call's id (a string), got {call_id!r}")
        if not isinstance(content, str):
            raise SessionError(f"the result of {call_id!r} must be text, got {type(content).__name__}")
        state = self.start()
        if state.turn == 0:
            raise SessionError("no assistant turn yet: a tool result answers a call of the last assistant turn")
        if call_id in self._answers:
            raise SessionError(f"call {call_id!r} is to ARC's tool {self._calls[call_id].name!r} and was answered"
                               " by the session (handle returns its message); only environment calls take a"
                               " result")
        if call_id in self._results:
            raise SessionError(f"call {call_id!r} already has its result (stored as {self._results[call_id]})")
        if all(call.call_id != call_id for call in state.pending):
            waiting = ", ".join(call.call_id for call in state.pending) or "none"
            raise SessionError(f"no call of the last assistant turn waits for a result under id {call_id!r}"
                               f" (waiting: {waiting})")
        output = self._apply(message_event("tool", content, (), call_id, returncode))
        assert isinstance(output, ObserveResult)
        self._results[call_id] = output.obs_id
        return output.obs_id

    # --- plumbing ----------------------------------------------------------------------------------------

    def _apply(self, event: Event) -> Output:
        """One event through the core's one dispatcher (machine.step), committed first when durable."""
        if self._store is not None:
            output = self._store.append(event).output
            self._state = self._store.state
        else:
            self._state, output = step(self.start(), event)
        folded = getattr(output, "folded", 0)
        self.folded += folded if isinstance(folded, int) else 0
        return output

    @staticmethod
    def _tool_message(answer: ToolAnswer) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": answer.call_id, "content": answer.content}

    def close(self) -> None:
        """Close a durable session's store (every event is already committed); nothing to do in memory. A closed
        durable session raises StoreError at its next use: `Session.open` resumes it."""
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> "Session":
        """``with Session(...) as session:`` closes it at the end (`close`)."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["TOOL_MODE_SYSTEM", "Audit", "CountsDifferWarning", "Session", "SessionError", "message_event",
           "tool_call"]
