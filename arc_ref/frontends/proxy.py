"""`arc-ref proxy`: ARC in front of any agent that speaks OpenAI's `/v1/chat/completions` (issue 20).

An agent that resends its whole history every turn points its base URL here; the proxy keeps each conversation
as an ARC task in tool mode (spec/rendering.md section 13) and sends the upstream server ARC's view instead of
the history, so every upstream prompt is within K <= L in the served model's own tokens (A4, Lemma 2) and
every tool output stays recoverable exactly by its id (A2, A5).

Conversation identity. ``X-Arc-Conversation`` (or ``metadata.conversation_id``) names a conversation when
given; either way a conversation is a hash chain over the canonical messages (role, text, tool calls with
their arguments re-serialized with sorted keys, name, tool_call_id; key order and null fields ignored), rooted
at the model, the canonical tools list, the system text and the explicit name. A request resumes at its
deepest known message and only what is new becomes events; a request that diverges from a known conversation
(an edited or regenerated message) forks it there; a changed tools list or system text, or a history cut at
the front, has another root and starts a new conversation.

Mapping. The leading system messages are the system prompt (ARC's note on its tools appended), the first
user message the goal; then each message becomes the core's event by the Session's mapping
(`arc_ref.session.message_event`: an assistant message a `ToolTurn`, a tool message a `ToolResult`, a later
user message a `UserMessage`). The upstream request is the agent's own with ``messages`` = the view, ``tools``
= ARC's then the agent's (what vLLM keeps of each: function name, description, parameters, strict and
defer_loading; what the core counts), and ``max_tokens`` (``max_completion_tokens`` when given, as vLLM reads
it) capped at G_max. When the model calls only ARC's tools the core answers and the upstream is
called again (hidden rounds: at most ``max_read_rounds`` that show the model a chunk or catalog page it had not
seen in the request, and ``max_hidden_rounds`` others, `HiddenRounds`); calls to the agent's tools go back with ARC's
calls stripped, so the agent never receives a call to one of ARC's tools. ``usage`` is the sum over the rounds.

Counting. Each view is counted with the served template and the ``chat_template_kwargs`` the upstream renders
that request with (`arc_ref.templates.request_template_kwargs`: the request's own, none when it sends none), so
the count is the upstream's ``usage.prompt_tokens`` exactly; the kwargs are part of the conversation's root.

Stores (--store DIR). Each conversation is a durable store in ``DIR/KEY/`` with its marks; ``DIR/hashes.sqlite``
says which conversation passed which hash, for every proxy process on DIR. A conversation's store is opened and
locked only while a request holds it, catching up on what another process appended; conversations leave memory
past --max-conversations or --idle-seconds and are read again on demand; a start opens none (spec/store.md).

Errors. Upstream errors pass back unchanged (the agent's events are kept: its retry resends the same
history and resumes). ARC's own refusals (a configuration whose K exceeds L, capacity, a turn that can never
fit R, a malformed history) are HTTP 400 with a typed body ``{"error": {"type": "arc_refused", "code": ...,
"message": ..., "budget": {...}}}``, never a 5xx, so that clients do not retry a deterministic failure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import gc
import hashlib
import hmac
import itertools
import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Sequence, TypeVar, overload
from urllib.parse import urlsplit

import attrs
import httpx
import msgspec

from arc_ref.budgets import DERIVED_FIELDS, WindowTooSmall, fit_to_window, reserve_for_window
from arc_ref.config import PRESETS, Config, preset
from arc_ref.errors import ArcError
from arc_ref.machine import (
    ArcState,
    Event,
    Output,
    ToolTurn,
    ToolTurnResult,
    init,
    step,
    view,
)
from arc_ref.frontends.proxy_metrics import Exposition, ProxyMetrics
from arc_ref.frontends.proxy_options import (
    BODIES_IN_FLIGHT_PER_BODY,
    CLIENT_KEYS_ENV,
    DEFAULT_BODIES_IN_FLIGHT_MB,
    DEFAULT_BODY_MEMORY_MB,
    DEFAULT_DB_CONNECTIONS,
    DEFAULT_MAX_BODY_MB,
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_CONVERSATIONS,
    DEFAULT_UPSTREAM_TIMEOUT_S,
    LATE_SYSTEM_AS_USER,
    LATE_SYSTEM_REFUSED,
    METRICS_KEYS_ENV,
    UPSTREAM_KEY_ENV,
    ProxyOptions,
)
from arc_ref.json_limits import nesting_beyond_limit, nesting_problem
from arc_ref.message import ToolCall
from arc_ref.options import unique_settings
from arc_ref.view import View
from arc_ref.openai_wire import TOOL_SHAPE, ShapeError, arguments_text, content_parts, error_body, read_tool, \
    read_tool_call, read_tool_flags
from arc_ref.persist import DurableStore, StoreError, StoreFull, StoreLocked, StoreReadOnly
from arc_ref.persist.hash_index import HashIndex
from arc_ref.persist.marks import IndexMark, MarkFile, read_hashes, read_marks
from arc_ref.persist.postgres import is_database_url
from arc_ref.persist.rows import read_row, row_events
from arc_ref.persist.store import Resume, read_rows
from arc_ref.serving import listening_socket
from arc_ref.session import TOOL_MODE_SYSTEM, message_event
from arc_ref.templates import request_template_kwargs
from arc_ref.tokenizers import HF_DIR_PREFIX, HuggingFaceTokenizer, get_tokenizer
from arc_ref.tools import ARC_TOOL_NAMES, DEFAULT_MAX_HIDDEN_ROUNDS, DEFAULT_MAX_READ_ROUNDS

ARC_NOTE = (
    "Tool outputs are stored verbatim under ids like §00042-0591234567; older turns are summarized and a long"
    " output appears as a one-line stub with its id. To read a stored output again, exactly and without"
    " re-running anything, call _recall (first chunk), _recall-next (next chunk), _recall-start or _recall_meta"
    " with its id; catalog-first, catalog-next and catalog-page list every stored output."
)
"""Appended to the agent's system prompt: the model must know how to use ARC's tools (its own prompt does not)."""

CONVERSATION_HEADER = "x-arc-conversation"
KEEPALIVE_S = 5.0
ROUND_LOG_SIZE = 10_000
FORK_THREADS = 2  # copies of different conversations at once (those of one conversation: one at a time)
LARGE_WORK_CHARACTERS = 2**20  # a request whose new messages hold more text than this is taken through the core on
# the threads for large work (`Proxy.large_work`): a 20 MB tool output takes seconds to count
LARGE_WORK_THREADS = 2
REQUEST_OWNER: contextvars.ContextVar[str] = contextvars.ContextVar("request_owner", default="")
"""With --client-keys, a digest of this request's key (its rounds at /arc/rounds), set by the HTTP server."""
UPSTREAM_HEADERS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("upstream_headers",
                                                                                  default={})
"""The headers of this request's upstream calls (`upstream_headers`: the upstream's key or the client's), set by
the HTTP server for each request."""
CLIENT_LEFT: contextvars.ContextVar[Callable[[], Awaitable[bool]] | None] = contextvars.ContextVar("client_left",
                                                                                             default=None)
"""Whether this request's client has left (its connection closed), set by the HTTP server for each request (None:
not known): with PostgreSQL, a client's retry that waited for another attempt of its request gives up once its
client left, rather than ask the upstream (`arc_ref.frontends.proxy_shared.SharedProxy.complete`)."""
T = TypeVar("T")
PROBE_GOAL = "ARC proxy start check."  # the goal of the conversation `prepare` builds before listening
PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "The agent's tool of a start check.",
                                               "parameters": {"type": "object", "properties": {}}}}


class Refused(ArcError):
    """A request ARC refuses deterministically: answered with HTTP 400 and a typed body, never retried."""

    def __init__(self, code: str, message: str, budget: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.budget = dict(budget or {})

    def body(self) -> dict[str, Any]:
        return error_body(str(self), "arc_refused", self.code, budget=self.budget)


class Failed(ArcError):
    """A request the proxy could not answer now, though it may pass later (HTTP ``status`` with a typed body, and
    ``retry_after`` seconds when given): the upstream unreachable (502), slow (504) or answering with something
    that is not a completion (502, nothing recorded), a store that cannot be written (503), a body over the
    limit (413)."""

    def __init__(self, status: int, kind: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.http_status_hint = status
        self.code = kind
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.code, self.status)


@attrs.define
class UpstreamError(ArcError):
    """An upstream answer that is not a completion: passed back to the agent unchanged (under its own status)."""

    status: int
    body: bytes
    content_type: str
    conversation: str = ""  # the conversation whose call it answered (the proxy's log line names it)
    code = "upstream"

    def __attrs_post_init__(self) -> None:
        self.http_status_hint = self.status


# --- canonical messages and the hash chain ---------------------------------------------------------------


def _text(content: Any, where: str) -> str:
    """A message's text: a string, null, or a list of text parts (joined with newlines, as vLLM does); anything
    else is refused."""
    try:
        return "\n".join(content_parts(content))  # as vLLM joins text parts
    except ShapeError as bad:
        if bad.rule == "part":
            raise Refused("unsupported_content", f"{where}: only text content is supported (text parts)") from None
        raise Refused("bad_message", f"{where}: content must be a string or a list of text parts") from None


def _arguments(text: str) -> str:
    """Tool-call arguments as compared: JSON re-serialized with sorted keys; other text as it is."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return text


def _calls(message: Mapping[str, Any], where: str) -> tuple[ToolCall, ...]:
    calls = []
    for number, call in enumerate(message.get("tool_calls") or (), start=1):
        try:
            read = read_tool_call(call, number - 1)
        except ShapeError:
            read = None
        if read is None or not isinstance(read.call_id, str) or not isinstance(read.name, str):
            raise Refused("bad_message", f"{where}: tool call {number} must have an id and a function name")
        calls.append(ToolCall(read.call_id, read.name, arguments_text(read.arguments)))
    return tuple(calls)


@attrs.frozen
class AgentMessage:
    """One message of the agent's history, reduced to what identifies it and what the core needs."""

    role: str
    text: str
    calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def canonical(self) -> str:
        shape: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.calls:
            shape["calls"] = [[call.call_id, call.name, _arguments(call.arguments)] for call in self.calls]
        if self.tool_call_id is not None:
            shape["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            shape["name"] = self.name
        return json.dumps(shape, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def agent_message(message: Any, number: int) -> AgentMessage:
    """The agent's ``number``-th message (1-based) as an AgentMessage; Refused when it is malformed."""
    where = f"message {number}"
    if not isinstance(message, Mapping):
        raise Refused("bad_message", f"{where} must be an object")
    role = message.get("role")
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise Refused("bad_message", f"{where}: role must be system, developer, user, assistant or tool, got {role!r}")
    text = _text(message.get("content"), where)
    name = message.get("name") if isinstance(message.get("name"), str) else None
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise Refused("bad_message", f"{where}: a tool message needs its tool_call_id")
        return AgentMessage(role, text, (), call_id, name)
    return AgentMessage(role, text, _calls(message, where) if role == "assistant" else (), None, name)


def chain_root(model: str, tools: Sequence[Mapping[str, Any]], system: str, explicit: str | None,
               template_kwargs: Sequence[tuple[str, Any]] = ()) -> str:
    """The root of a conversation's hash chain: the model, the canonical tools list, the system text, the name,
    and the chat template's kwargs the upstream renders with (they change every count)."""
    canonical_tools = json.dumps(list(tools), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return _digest(json.dumps([model, canonical_tools, system, explicit, [list(item) for item in template_kwargs]],
                              ensure_ascii=False))


def chain_next(previous: str, message: AgentMessage) -> str:
    return _digest(previous + "\n" + message.canonical())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


KNOWN_MESSAGES = 2**17  # message texts (and chain links) the proxy remembers as read, the oldest forgotten first:
# about 314 bytes each, 40 MiB at most (256 conversations of 500 messages stay known)
_READ_VALUE = msgspec.json.Decoder()
UNREADABLE: Any = object()


def read_json_value(raw: bytes | msgspec.Raw, enclosing: int) -> Any:
    """A JSON value of a request body read alone (``enclosing`` levels deep in the body): its value as the standard
    json module reads it (msgspec first, json when msgspec refuses it: NaN, a lone surrogate, 1e400), or
    ``UNREADABLE`` when it is nested too deep for the body's limit (json_limits, counting ``enclosing``) or is not
    JSON."""
    if nesting_beyond_limit(bytes(raw), enclosing) is not None:
        return UNREADABLE
    try:
        return _READ_VALUE.decode(raw)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        pass
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return UNREADABLE


@attrs.define(eq=False)
class RawMessage:
    """One message of a request body as its JSON text (``raw``) and the sha256 of that text. Its value is read from
    the text when a request needs it (`read`: `_Messages` keeps it for that request only), never kept here: the
    bodies decoded last keep their RawMessages (proxy_app.RecentBodies), and what they hold is these texts."""

    raw: bytes | msgspec.Raw
    digest: bytes

    def read(self) -> Any:
        value = read_json_value(self.raw, 2)
        assert value is not UNREADABLE, "a message read before reads again"
        return value


@attrs.frozen
class ChainPrefix:
    """What `parse_request` derived from a request's messages: its chain's root, its leading system messages
    (``first``) and the chain hash of each later message, in order."""

    root: str
    first: int
    hashes: tuple[str, ...]


class BodyMessages(list[Any]):
    """A body's messages (`RawMessage`s) whose first ``shared`` are the very bytes of an earlier body's, which
    `parse_request` read as ``earlier``: it continues that chain from there (same root) instead of walking those
    messages again. ``parsed`` is what it derived from this body's (for a later body); ``values`` the values the
    decoding read (by index), handed to this body's request once (`_Messages` takes them)."""

    __slots__ = ("earlier", "shared", "parsed", "values")

    def __init__(self, items: Sequence[Any] = (), earlier: ChainPrefix | None = None, shared: int = 0,
                 values: dict[int, Any] | None = None) -> None:
        super().__init__(items)
        self.earlier = earlier
        self.shared = shared
        self.parsed: ChainPrefix | None = None
        self.values = values if values is not None else {}


class KnownMessages:
    """What the proxy remembers of the message texts it has read (bounded: the oldest ``limit`` forgotten first),
    so that a request costs in proportion to its new messages: the digest of each raw text read as a valid agent
    message, with its role, and each link of a hash chain, (the previous hash, a message's digest) -> the next
    hash. The chain is the same with or without them (a link is `chain_next` of the message those bytes read
    as); only a message never seen is read and hashed."""

    def __init__(self, limit: int = KNOWN_MESSAGES) -> None:
        self.limit = limit
        self.roles: dict[bytes, str] = {}
        self.links: dict[tuple[str, bytes], str] = {}
        self.read = 0  # messages read and hashed (not known): what a request costs, counted by the tests
        self.bodies: Any = None  # the bodies decoded last (proxy_app.RecentBodies, made by its first decode_body)

    def valid(self, digest: bytes, role: str) -> None:
        self.roles[digest] = role
        _forget_oldest(self.roles, self.limit)

    def link(self, previous: str, digest: bytes, chain_hash: str) -> None:
        self.links[(previous, digest)] = chain_hash
        _forget_oldest(self.links, self.limit)


def _forget_oldest(known: dict[Any, Any], limit: int) -> None:
    if len(known) > limit:
        for key in list(itertools.islice(known, len(known) - limit * 3 // 4)):
            del known[key]


def agent_tools(tools: Any) -> list[dict[str, Any]]:
    """The agent's tools as the core counts them: each function's name, description, parameters, strict and
    defer_loading, and the tool's own defer_loading (what vLLM keeps of a tool: `arc_ref.message.ToolSpec`), each
    where given and not null; a tool without ``"type"`` is a function tool, as vLLM reads it."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise Refused("bad_tools", "tools must be a list of OpenAI function tools")
    kept = []
    for number, tool in enumerate(tools, start=1):
        try:
            function = read_tool(tool, number - 1, type_optional=True)
        except ShapeError:
            raise Refused("bad_tools", f"tool {number} must be {TOOL_SHAPE}") from None
        if function["name"] in ARC_TOOL_NAMES:
            raise Refused("bad_tools", f"tool {number} is named {function['name']!r}, the name of one of ARC's tools")
        try:
            listed = read_tool_flags(tool, function, number - 1)[2]
        except ShapeError as bad:
            raise Refused("bad_tools", f"tool {number}'s {bad.rule} must be true, false or null") from None
        kept_tool: dict[str, Any] = {"type": "function", "function": {
            key: function[key] for key in ("name", "description", "parameters", "strict", "defer_loading")
            if function.get(key) is not None}}
        if listed is not None:
            kept_tool["defer_loading"] = listed
        kept.append(kept_tool)
    return kept


# --- conversations ---------------------------------------------------------------------------------------


@attrs.define
class Mark:
    """A known point of a conversation: after ``position`` agent messages, ``seq`` rows stored, its state."""

    position: int
    seq: int
    state: ArcState | None
    chain_hash: str = ""


@attrs.define(eq=False)
class Conversation:
    """One agent conversation: an ARC task (in memory, or a durable store) and the marks of its hash chain.

    A durable one's store is open (and locked) only while a request holds the conversation
    (`Conversations.held`); between requests this process keeps its state and where its rows and marks ended
    (``resume``, the marks file's offset), or nothing when it left memory."""

    key: str
    loaded: ArcState | None  # None: a durable conversation not read yet (or out of memory)
    store: DurableStore | None
    directory: Path | None
    position: int = 0  # agent messages applied
    head: str = ""  # the chain hash at ``position``
    seq: int = 1  # rows: the config row and one per event
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    index: MarkFile | None = None  # its marks beside its store (arc_ref.persist.marks), when durable
    marks: dict[str, Mark] = attrs.field(factory=dict)  # the chain hashes it passed -> its mark there
    last_mark: Mark | None = None  # the latest mark written
    resume: Resume | None = None  # where its store was when this process last released it
    used_at: float = attrs.field(factory=time.monotonic)
    requests: int = 0  # requests holding it or waiting for it (it stays in memory meanwhile)
    last_reply: AnsweredRequest | None = None  # its latest reply, for a client's retry of that request
    answering: AskedRequest | None = None  # the request it answers now (a retry of it waits for it)

    @property
    def state(self) -> ArcState:
        if self.loaded is None:
            raise StoreError(f"conversation {self.key} is not loaded")
        return self.loaded

    @state.setter
    def state(self, value: ArcState) -> None:
        self.loaded = value

    def apply(self, event: Event) -> Output:
        """One event through the core (machine.step), committed first when durable."""
        if self.store is not None:
            output = self.store.append(event).output
            self.state = self.store.state
        else:
            self.state, output = step(self.state, event)
        self.seq += 1
        return output

    def mark(self, chain_hash: str) -> Mark:
        """The mark here (written to its marks file first when durable; a durable mark keeps no state)."""
        self.head = chain_hash
        if self.index is not None and self.store is not None:
            self.index.append(IndexMark(chain_hash, self.position, self.seq, self.store.checksum))
            return Mark(self.position, self.seq, None, chain_hash)
        return Mark(self.position, self.seq, self.state, chain_hash)

    def deepest_mark(self, hashes: list[str]) -> tuple[Mark, int] | None:
        """Its mark at the deepest of ``hashes`` it passed, and that depth."""
        for depth in range(len(hashes), 0, -1):
            mark = self.marks.get(hashes[depth - 1])
            if mark is not None:
                return mark, depth
        return None

    def note(self, mark: Mark) -> None:
        self.marks[mark.chain_hash] = mark
        if self.last_mark is None or mark.seq >= self.last_mark.seq:
            self.last_mark = mark


@attrs.frozen
class ProxySettings:
    upstream: str  # base URL of the upstream, ending in /v1
    tokenizer: str  # hf-dir:DIR of the served model
    preset_name: str = "paper"
    overrides: Mapping[str, Any] = attrs.field(factory=dict)
    store: Path | None = None
    database: str | None = None  # --store postgresql://...: conversations shared by every instance on it
    cache_conversations: int = 256  # with a database: conversation states an instance keeps (least recent out)
    store_retry_s: float = 15.0  # with a database: how long a request is tried again while it is unavailable
    running_lease_s: float = 15.0  # with a database: a running request's lease in arc_running (renewed while it runs)
    db_connections: int = DEFAULT_DB_CONNECTIONS  # with a database: the pool's size (held to read and to commit)
    max_hidden_rounds: int = DEFAULT_MAX_HIDDEN_ROUNDS  # hidden rounds that show nothing new (`HiddenRounds`)
    max_read_rounds: int = DEFAULT_MAX_READ_ROUNDS  # hidden rounds that show a chunk or page not shown before
    keepalive_s: float = KEEPALIVE_S
    timeout_s: float = float(DEFAULT_UPSTREAM_TIMEOUT_S)  # one upstream call (--upstream-timeout)
    context_limit: int | None = None  # the served window; None: --set context_limit or the preset's (`prepare`)
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * 2**20
    bodies_in_flight_bytes: int = DEFAULT_BODIES_IN_FLIGHT_MB * 2**20  # large bodies held at once (`BodyAllowance`)
    body_wait_s: float = 30.0  # how long a large body waits, unread, for the allowance before 503
    body_idle_s: float = 60.0  # a request body with no byte for this long: 408 (a stalled client holds nothing)
    body_memory_bytes: int = DEFAULT_BODY_MEMORY_MB * 2**20  # the bodies decoded last (`proxy_app.RecentBodies`)
    max_conversations: int = DEFAULT_MAX_CONVERSATIONS  # conversations kept in memory (the least recent leave)
    idle_seconds: float = DEFAULT_IDLE_SECONDS  # a conversation idle longer leaves memory (with --store: reopened)
    lock_wait_s: float = 30.0  # with --store: how long a request waits for a conversation another process holds
    upstream_api_key: str | None = attrs.field(default=None, repr=False)
    client_keys: frozenset[str] = attrs.field(default=frozenset(), repr=False)  # none: no client authentication
    # the keys that may read every client's counters (GET /metrics, /arc/stats): none, see `counters_refused`
    metrics_keys: frozenset[str] = attrs.field(default=frozenset(), repr=False)
    late_system: str = LATE_SYSTEM_REFUSED  # a system or developer message after the task: refused, or a user message


@attrs.frozen(hash=False)
class AskedRequest:
    """What a client's retry of a request repeats: the chain hash of its last message, its other members (compared
    by value) and a digest of the credential it reaches the upstream with (a retry is answered without the upstream,
    so only for the same credential)."""

    asked_at: str
    parameters: dict[str, Any]
    credential: str

    @staticmethod
    def of(hashes: Sequence[str], body: Mapping[str, Any]) -> AskedRequest:
        headers = sorted((name.lower(), value) for name, value in UPSTREAM_HEADERS.get().items())
        credential = hashlib.sha256(json.dumps(headers).encode("utf-8", "surrogatepass")).hexdigest()
        return AskedRequest(hashes[-1], {key: value for key, value in body.items() if key != "messages"}, credential)


@attrs.frozen(hash=False)
class AnsweredRequest:
    """A conversation's latest reply and the request it answered, so that a client's automatic retry of that
    request gets the same reply (`Proxy.complete`)."""

    request: AskedRequest
    answered_at: str  # the conversation's head after the reply (the mark of the assistant message it returned)
    reply: Reply


@attrs.define
class HiddenRounds:
    """A request's hidden rounds so far. A round that shows the model a chunk of a stored output or a catalog page it
    had not been shown in this request is a reading round (at most ``read_limit``: a long output read chunk by chunk
    is progress, not a loop); any other round (the same chunk again, a stub's metadata, a refused call) counts
    against ``idle_limit``, as does a reading round past its own limit."""

    idle_limit: int
    read_limit: int
    idle: int = 0
    reading: int = 0
    shown: set[tuple[str, ...]] = attrs.field(factory=set)

    @property
    def count(self) -> int:
        return self.idle + self.reading

    def another(self, shown_before: Sequence[tuple[str, ...]], shown_now: Sequence[tuple[str, ...]]) -> bool:
        """Whether one more hidden round may follow a round that answered only ARC's calls, its view showing
        ``shown_now`` (chunks and the catalog page) where the view before showed ``shown_before`` (its page, U's chunks); the
        round is counted."""
        self.shown.update(shown_before)
        new = [item for item in shown_now if item not in self.shown]
        self.shown.update(new)
        if new and self.reading < self.read_limit:
            self.reading += 1
            return True
        if self.idle < self.idle_limit:
            self.idle += 1
            return True
        return False


def _shown_items(state: ArcState) -> list[tuple[str, ...]]:
    """What a view of ``state`` shows that a hidden round may show anew: its catalog page, as shown (layout lean's
    default page N and the whole page N differ), and the chunks in U."""
    page = state.catalog_message.content if state.catalog_message is not None else ""
    return [("page", page), *(("chunk", state.records[entry.index - 1].obs_id, str(entry.chunk))
                              for entry in state.recall_buffer)]


@attrs.define
class RoundRecord:
    """One upstream call: what the proxy counted and what the upstream said (GET /arc/rounds)."""

    conversation: str
    hidden: bool  # a round the agent never sees (after ARC answered all the model's calls)
    view_tokens: int
    budget: int
    limit: int
    max_tokens: int
    status: int
    upstream_prompt_tokens: int | None
    streamed: bool = False  # the agent asked for a stream (the upstream is always asked for a whole reply)
    view_digest: str = ""  # sha256 of the upstream request's messages and tools (canonical JSON)
    seq: int = 0  # the conversation's rows when its view was taken (orders one conversation's rounds)
    owner: str = attrs.field(default="", repr=False)  # with --client-keys: a digest of the caller's key
    upstream_cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (vLLM's prefix cache)
    # the conversation's completion reserve G_max, and the max_tokens (or max_completion_tokens) the client asked,
    # None when it asked none: max_tokens is the smaller of the two (review h70 F2: a cap was seen nowhere)
    completion_reserve: int = 0
    asked_max_tokens: int | None = None


def cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` of an upstream reply (vLLM with
    --enable-prompt-tokens-details), None when it does not say."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return value if type(value) is int and value >= 0 else None


class ConversationGone(ArcError):
    """The conversation a request was matched to cannot be used (set aside: damaged, missing; or forgotten out of
    memory): the request is matched again without it."""


class ConversationBusy(ArcError):
    """The conversation a request was matched to is held by another request (of this process, or, with --store,
    of another process): the request forks it at its deepest mark without waiting (`Conversations.fork_unheld`)."""


class Conversations:
    """Every conversation the proxy knows: which passed which chain hash (with --store, every conversation of the
    directory, looked up in its shared index `arc_ref.persist.hash_index`, never by opening them; without, those
    in memory), and those in memory (at most ``max_conversations``, none idle longer than ``idle_seconds``). A
    durable conversation's store is opened and locked only while a request holds it (`held`)."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.keys_of: dict[str, list[str]] = {}  # without --store: chain hash -> the conversations in memory
        self.by_key: dict[str, Conversation] = {}  # those in memory, the least recently used first
        self.set_aside: dict[str, str] = {}  # a conversation of --store that cannot be opened: why
        self.ignored: set[tuple[str, str]] = set()  # (hash, key) rows of the shared index whose mark is lost
        self.evicted = 0
        self.opened = 0  # durable conversations read whole from their store (first request, or after eviction)
        self.registering = threading.Lock()  # a new conversation's check and first mark (a worker thread)
        self.hash_index: HashIndex | None = None
        if settings.store is not None:
            settings.store.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.hash_index = HashIndex(settings.store)
            self._index_unindexed()

    @property
    def durable(self) -> bool:
        return self.settings.store is not None

    def _index_unindexed(self) -> None:
        """The conversations of --store the shared index does not name (written before it existed, or their rows
        lost with the machine): their marks files read (not their stores) and their hashes added to it."""
        assert self.settings.store is not None and self.hash_index is not None
        known = self.hash_index.keys()
        rows: list[tuple[str, str]] = []
        for directory in sorted(self.settings.store.iterdir()):
            if directory.name in known or directory.name.startswith(".") or not MarkFile.holds_index(directory):
                # (a name with a leading dot is no conversation's: `arc-ref forget` removing one, say)
                continue
            try:
                rows += [(chain_hash, directory.name) for chain_hash in read_hashes(directory)]
            except (StoreError, OSError) as problem:  # damaged: its requests start a new conversation
                self._set_aside(directory.name, problem)
        self.hash_index.add(rows)

    def _set_aside(self, key: str, problem: BaseException) -> None:
        self.set_aside[key] = " ".join(str(problem).split())
        self.by_key.pop(key, None)
        print(f"arc-ref proxy: conversation {key} set aside (its requests start a new conversation):"
              f" {self.set_aside[key]}", file=sys.stderr, flush=True)

    def deepest(self, hashes: Sequence[str], no_reply_at: Callable[[int], bool] | None = None
                ) -> tuple[str, int] | None:
        """The conversation that passed the deepest of ``hashes`` (one in memory still there, resumed in place,
        when no request holds it; else, when ``no_reply_at(depth)`` says the messages from there back to a
        shallower hash are none of them the model's reply (tool results, user messages: no hidden round lies
        before them), one in memory still at that shallower hash, resumed in place there rather than a copy of
        a deeper one made (agents whose histories are identical so far); else one still there that a request
        holds; else the latest), and that depth. With --store: looked up in the shared index (what every process
        on the directory wrote, up to now)."""
        keys_of = self.keys_of if self.hash_index is None else self.hash_index.keys_of(hashes)
        for depth in range(len(hashes), 0, -1):
            keys = self._listed(keys_of, hashes[depth - 1])
            if keys:
                idle, held_in_place = self._in_place(keys, hashes[depth - 1])
                if idle is not None:
                    return idle, depth
                shallower = depth
                while no_reply_at is not None and shallower > 1 and no_reply_at(shallower):
                    shallower -= 1
                    idle, _ = self._in_place(self._listed(keys_of, hashes[shallower - 1]), hashes[shallower - 1])
                    if idle is not None:
                        return idle, shallower
                return (held_in_place[0] if held_in_place else keys[-1]), depth
        return None

    def _listed(self, keys_of: Mapping[str, list[str]], chain_hash: str) -> list[str]:
        return [key for key in keys_of.get(chain_hash, ()) if key not in self.set_aside
                and (chain_hash, key) not in self.ignored]

    def _in_place(self, keys: Sequence[str], chain_hash: str) -> tuple[str | None, list[str]]:
        """Of ``keys``, the first in memory still at its mark of ``chain_hash`` that no request holds, and those
        still there that a request holds."""
        held_in_place: list[str] = []
        for key in keys:
            conversation = self.by_key.get(key)
            mark = conversation.marks.get(chain_hash) if conversation is not None else None
            if conversation is not None and mark is not None and conversation.position == mark.position:
                if not conversation.requests:
                    return key, held_in_place
                held_in_place.append(key)
        return None, held_in_place

    def busy(self, key: str) -> bool:
        """Whether a request of this process holds conversation ``key`` or waits for it now."""
        conversation = self.by_key.get(key)
        return conversation is not None and conversation.requests > 0

    def forget(self, key: str, hashes: Sequence[str], conversation: Conversation) -> None:
        """The index named ``key`` for hashes its marks do not hold (a mark lost in a crash): not any more."""
        for chain_hash in hashes:
            if chain_hash not in conversation.marks:
                self.ignored.add((chain_hash, key))

    def add(self, chain_hash: str, conversation: Conversation, mark: Mark) -> None:
        """A mark `Conversation.mark` wrote: noted, and in the shared index (with --store) or the memory's."""
        conversation.note(mark)
        if self.hash_index is not None:
            self.hash_index.add([(chain_hash, conversation.key)])
            return
        keys = self.keys_of.setdefault(chain_hash, [])
        if conversation.key not in keys:
            keys.append(conversation.key)

    @contextlib.asynccontextmanager
    async def held(self, key: str, wait: bool = True) -> AsyncIterator[Conversation]:
        """The conversation ``key``, held by this request: its lock in this process and, with --store, its store
        opened and locked (another process holding it: waited for up to ``lock_wait_s``, then 503 store_busy;
        ConversationBusy at once when not ``wait``), with the rows and marks written since this process last
        held it read; released after the request. ConversationGone when it cannot be used (set aside with the
        reason)."""
        conversation = self.by_key.get(key)
        if conversation is None:
            if not self.durable or key in self.set_aside:
                raise ConversationGone(f"conversation {key} is not in memory")
            assert self.settings.store is not None
            conversation = Conversation(key, None, None, self.settings.store / key)
            self.by_key[key] = conversation
        conversation.requests += 1
        try:
            async with conversation.lock:
                self.used(conversation)
                if self.durable and conversation.store is None:
                    try:
                        await self._take_waiting(conversation, wait)
                    except StoreLocked:
                        if not wait:
                            raise ConversationBusy(f"conversation {key} is held by another process") from None
                        raise Failed(503, "store_busy", f"conversation {key} is held by another proxy process for"
                                     f" more than {self.settings.lock_wait_s:g} s; try again",
                                     retry_after=max(1, round(self.settings.lock_wait_s))) from None
                    except (StoreError, OSError, ValueError) as problem:
                        if not _damaged(problem):  # a full disk, a read-only mount, no file descriptor left:
                            # may pass; the conversation is kept (set aside, its next request would start anew)
                            raise Failed(503, "store_unavailable", f"conversation {key}'s store cannot be opened"
                                         f" now: {' '.join(str(problem).split())}", retry_after=5) from None
                        self._set_aside(key, problem)  # damaged or missing: never usable as it is
                        raise ConversationGone(self.set_aside[key]) from None
                try:
                    yield conversation
                finally:
                    if conversation.store is not None:
                        await asyncio.to_thread(self._release, conversation)
        finally:
            conversation.requests -= 1
            conversation.used_at = time.monotonic()

    async def _take_waiting(self, conversation: Conversation, wait: bool = True) -> None:
        """`_take`, tried again every 10 to 200 ms while another process holds the store, for up to
        ``lock_wait_s`` (then StoreLocked; at once when not ``wait``); the waits are the event loop's, no worker
        thread is held."""
        deadline = time.monotonic() + (self.settings.lock_wait_s if wait else 0.0)
        delay = 0.01
        while True:
            try:
                return await in_thread_undone_if_cancelled(lambda: self._take(conversation),
                                                           lambda _: self._release(conversation))
            except StoreLocked:
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(0.2, delay * 2)

    def _take(self, conversation: Conversation) -> None:
        """Open and lock the store (blocking: a worker thread; StoreLocked while another process holds it), then
        the state caught up (only the rows after ``resume`` are folded) and the new marks read and checked."""
        assert conversation.directory is not None
        store = DurableStore.open(conversation.directory / "task.arc", resume=conversation.resume)
        try:
            if conversation.index is None or conversation.loaded is None:  # read whole: first in this process
                conversation.index, marks = MarkFile.open(conversation.directory, store.seq,
                                                          ((row.seq, row.checksum) for row in store.events()))
                conversation.marks, conversation.last_mark = {}, None
                self.opened += 1
            else:
                marks = conversation.index.read_new(store.seq, lambda seq: next(
                    (row.checksum for row in store.events(seq, 1)), None))
        except BaseException:
            store.close(snapshot=False)
            raise
        conversation.store, conversation.state, conversation.seq = store, store.state, store.seq
        for item in marks:
            conversation.note(Mark(item.position, item.seq, None, item.chain_hash))
        last = conversation.last_mark
        # events stored after the last mark (a process killed mid-request): never resumed in place; a request
        # forks at a mark instead
        conversation.position = last.position if last is not None and last.seq == store.seq else -1
        conversation.head = last.chain_hash if last is not None else ""

    @staticmethod
    def _release(conversation: Conversation) -> None:
        """The store closed and its lock dropped (blocking); what is needed to catch up next time kept."""
        store = conversation.store
        if store is None:
            return
        conversation.store = None
        try:
            conversation.resume = store.resume_point()
        finally:
            store.close(snapshot=False)  # the store snapshots itself when due, as it appends

    def used(self, conversation: Conversation) -> None:
        """``conversation`` used now: the last to leave memory."""
        if self.by_key.pop(conversation.key, None) is not None:
            self.by_key[conversation.key] = conversation

    def evict(self, now: float | None = None) -> int:
        """Conversations out of memory, the least recently used first, while more than ``max_conversations`` are
        in it or they were idle longer than ``idle_seconds`` (none a request holds or waits for). A stored one
        keeps only its chain hashes here and is read from its store by its next request; one in memory only is
        forgotten (its agent's next request, the whole history, builds it again). Returns how many left."""
        now = time.monotonic() if now is None else now
        left = 0
        for conversation in list(self.by_key.values()):
            over = len(self.by_key) > self.settings.max_conversations
            if not over and now - conversation.used_at <= self.settings.idle_seconds:
                break
            if conversation.requests or conversation.store is not None:
                continue
            del self.by_key[conversation.key]
            self.evicted += 1
            left += 1
            if not self.durable:
                for chain_hash in conversation.marks:
                    keys = self.keys_of.get(chain_hash)
                    if keys and conversation.key in keys:
                        keys.remove(conversation.key)
                        if not keys:
                            del self.keys_of[chain_hash]
        return left

    def config(self, system: str, goal: str, tools: list[dict[str, Any]],
               template_kwargs: tuple[tuple[str, Any], ...] = ()) -> Config:
        return conversation_config(self.settings, system, goal, tools, template_kwargs)

    def new(self, config: Config, events: Sequence[Event] = (), requests: int = 0) -> Conversation:
        """A new conversation (its store created, open and locked, when durable), with ``events`` applied first,
        counted as held by ``requests`` requests from the moment `evict` can see it."""
        key = uuid.uuid4().hex
        if self.settings.store is None:
            state = init(config)
            for event in events:
                state, _ = step(state, event)
            conversation = Conversation(key, state, None, None, seq=1 + len(events))
        else:
            directory = self.settings.store / key
            directory.mkdir(mode=0o700)  # owner-only, as the files in it
            try:
                store = DurableStore.create(directory / "task.arc", config)
            except BaseException:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            try:
                store.append_many(events)
                index = MarkFile.create(directory)
            except BaseException:
                store.close(snapshot=False)
                shutil.rmtree(directory, ignore_errors=True)
                raise
            conversation = Conversation(key, store.state, store, directory, seq=store.seq, index=index)
        conversation.requests = requests
        self.by_key[key] = conversation
        return conversation

    def discard(self, conversation: Conversation) -> None:
        """A conversation `new` made that no mark names yet (the same history arrived first in another
        request): out of memory, its store closed and removed (blocking: a worker thread)."""
        if self.by_key.get(conversation.key) is conversation:
            del self.by_key[conversation.key]
        if conversation.store is not None:
            conversation.store.close(snapshot=False)
            conversation.store = None
        if conversation.directory is not None:
            shutil.rmtree(conversation.directory, ignore_errors=True)

    def fork(self, parent: Conversation, mark: Mark) -> Conversation:
        """A new conversation equal to ``parent`` at ``mark`` (an edited or regenerated message follows it), made
        while this request holds ``parent``."""
        if parent.store is not None:
            events = row_events(parent.store.events(2, mark.seq - 1), f"{str(parent.store.path)!r}")
        else:
            events = []
        return self._forked(parent.state.config, events, mark)

    def fork_unheld(self, key: str, hashes: Sequence[str]) -> tuple[Conversation, int] | None:
        """(A worker thread.) A new conversation equal to ``key``'s at the deepest of ``hashes`` it passed, and that
        depth, made while another request holds ``key`` (agents that start alike, best-of-n; a history sent again
        while its first request is answered), without waiting for it: what a fork copies is settled at the mark.
        In memory the mark keeps its state (the core's states are immutable); with --store the mark and the rows
        up to it were committed before the holder went on, and are read without its lock (the marks' chain and the
        rows' chain up to the mark's checksum checked). None when there is no such mark to read: the request
        waits for the conversation instead."""
        if not self.durable:
            parent = self.by_key.get(key)
            found = parent.deepest_mark(list(hashes)) if parent is not None else None
            if parent is None or found is None or found[0].state is None:
                return None
            return self._forked(parent.state.config, [], found[0]), found[1]
        assert self.settings.store is not None
        directory = self.settings.store / key
        where = f"{str(directory / 'task.arc')!r}"
        try:
            marks = {mark.chain_hash: mark for mark in read_marks(directory)}
            depth = next((depth for depth in range(len(hashes), 0, -1) if hashes[depth - 1] in marks), 0)
            if depth == 0:
                return None
            at = marks[hashes[depth - 1]]
            rows = []
            for row in read_rows(directory / "task.arc"):  # no lock: the rows committed when the read began
                rows.append(row)
                if row.seq >= at.seq:
                    break
            if rows[-1].seq != at.seq or rows[-1].checksum != at.checksum:
                return None  # the mark is not of these rows: the holder's reopen will say why
            config = read_row(1, rows[0].line, where)
            if not isinstance(config, Config):
                return None
            events = row_events(rows[1:], where)
        except (StoreError, OSError, ValueError, IndexError):
            return None  # unreadable without its lock: waited for, and opened as every request opens it
        return self._forked(config, events, Mark(at.position, at.seq, None, at.chain_hash)), depth

    def _forked(self, config: Config, events: Sequence[Event], mark: Mark) -> Conversation:
        """A new conversation of ``config`` and ``events`` (with --store), or the state ``mark`` keeps (in memory),
        at ``mark``'s position, its first mark ``mark``'s hash; counted as held by the request that made it (never
        evicted before that request holds it: it lets go with `let_go_of_fork`)."""
        child = self.new(config, events, requests=1)
        try:
            if mark.state is not None:
                child.state = mark.state
                child.seq = mark.seq
            child.position = mark.position
            self.add(mark.chain_hash, child, child.mark(mark.chain_hash))  # the chain goes on from the fork point
        except BaseException:  # its mark not written: nothing names it, so it is not left open (and locked)
            self.discard(child)
            raise
        return child

    @staticmethod
    def let_go_of_fork(child: Conversation) -> None:
        """The request that made the fork ``child`` (`_forked`) no longer counts on it."""
        child.requests -= 1

    def close(self) -> None:
        for conversation in list(self.by_key.values()):
            if conversation.store is not None:
                conversation.store.close()
        if self.hash_index is not None:
            self.hash_index.close()


# --- one request -----------------------------------------------------------------------------------------


def _budget(state: ArcState) -> dict[str, int]:
    config = state.config
    return {"K": state.setup.budget, "L": state.setup.limit, "B": state.setup.prefix_tokens,
            "R": config.recent_budget, "G_max": config.max_completion, "N_max": config.capacity,
            "stored": state.stored}


def _event(message: AgentMessage, late_system: str = LATE_SYSTEM_REFUSED) -> Event:
    """The core's event for an agent message after the prefix: the Session's mapping (`message_event`). A system or
    developer message there is refused, or with ``--late-system user`` the user message of its text (ARC's views
    hold user, assistant and tool messages after the prefix F: review h5 B1)."""
    role = message.role
    if role == "system":
        if late_system != LATE_SYSTEM_AS_USER:
            raise Refused("bad_message", "a system or developer message may only open the conversation (start the"
                          " proxy with --late-system user to show a later one to the model as a user message)")
        role = "user"
    try:
        return message_event(role, message.text, message.calls, message.tool_call_id)
    except ArcError as problem:
        raise Refused("bad_message", str(problem)) from None


class _Messages:
    """A request's messages, each read (`agent_message`) at most once and only when a request needs it: a message
    the proxy knows by its digest (`KnownMessages`) gives its role without being read."""

    def __init__(self, items: list[Any], known: KnownMessages | None) -> None:
        self.items = items
        self.known = known
        self.read: dict[int, AgentMessage] = {}
        self.values: dict[int, Any] = {}
        if isinstance(items, BodyMessages):  # the values its decoding read: this request's only (not kept)
            self.values, items.values = items.values, {}

    def message(self, index: int) -> AgentMessage:
        found = self.read.get(index)
        if found is None:
            item = self.items[index]
            raw = item if isinstance(item, RawMessage) else None
            value = self.values.pop(index, UNREADABLE) if raw is not None else item
            found = self.read[index] = agent_message(raw.read() if value is UNREADABLE and raw is not None
                                                     else value, index + 1)
            if self.known is not None:
                self.known.read += 1
                if raw is not None:
                    self.known.valid(raw.digest, found.role)
        return found

    def role(self, index: int) -> str:
        item = self.items[index]
        if self.known is not None and isinstance(item, RawMessage) and index not in self.read:
            role = self.known.roles.get(item.digest)
            if role is not None:
                return role
        return self.message(index).role


class AgentMessages(Sequence[AgentMessage]):
    """The agent messages of a request after its system messages, each read when first asked for."""

    def __init__(self, messages: _Messages, first: int) -> None:
        self._messages = messages
        self._first = first

    def __len__(self) -> int:
        return len(self._messages.items) - self._first

    @overload
    def __getitem__(self, index: int) -> AgentMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[AgentMessage]: ...

    def __getitem__(self, index: int | slice) -> AgentMessage | list[AgentMessage]:
        if isinstance(index, slice):
            return [self[at] for at in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self._messages.message(self._first + index % len(self))

    def role(self, index: int) -> str:
        """The role of message ``index`` (not read when the proxy knows its text)."""
        return self._messages.role(self._first + index)


def parse_request(body: Mapping[str, Any], explicit: str | None, known: KnownMessages | None = None
                  ) -> tuple[AgentMessages, list[dict[str, Any]], str, list[str], tuple[tuple[str, Any], ...]]:
    """A chat request's agent messages (the leading system messages taken out), its tools, its system text, the
    hash chain over its messages (one hash per message) and the chat template's kwargs the upstream renders it
    with (`request_template_kwargs`: part of the chain's root); Refused when it is malformed.

    With ``known``, a message whose raw text (`RawMessage`) the proxy has read before is not read again, and the
    link from the previous hash over its digest gives its chain hash: a request reads and hashes its new messages
    only (and its system messages, the root's). The messages a `BodyMessages` shares with an earlier body are not
    walked at all: their chain hashes are the earlier body's when the root is the same. A malformed request gets the
    refusal of the first problem in the order the checks take over the whole request (`_refusal`), whatever it
    knew."""
    try:
        return _parse(body, explicit, known)
    except Refused:
        _refusal(body)
        raise
    finally:  # the values its decoding read are this request's (taken by its `_Messages`), never kept with it
        items = body.get("messages")
        if isinstance(items, BodyMessages):
            items.values = {}


def _parse(body: Mapping[str, Any], explicit: str | None, known: KnownMessages | None
           ) -> tuple[AgentMessages, list[dict[str, Any]], str, list[str], tuple[tuple[str, Any], ...]]:
    items = body.get("messages")
    if not isinstance(items, list) or not items:
        raise Refused("bad_request", "messages must be a non-empty list")
    model = body.get("model")
    if not isinstance(model, str):
        raise Refused("bad_request", "model must be a string")
    _check_options(body)
    messages = _Messages(items, known)
    first = 0
    system_parts = []
    while first < len(items) and messages.role(first) == "system":
        system_parts.append(messages.message(first).text)
        first += 1
    tools = agent_tools(body.get("tools"))
    if first == len(items) or messages.role(first) != "user":
        raise Refused("bad_message", "the first message after the system prompt must be the user's task")
    system = "\n\n".join(system_parts)
    try:  # counted as the upstream renders this request (without them Qwen3's enable_thinking is undefined)
        template_kwargs = request_template_kwargs(body)
    except ArcError as problem:
        raise Refused("unsupported", str(problem)) from None
    root = previous = chain_root(model, tools, system, explicit, template_kwargs)
    hashes: list[str] = []
    start = first
    body_messages = items if isinstance(items, BodyMessages) else None
    earlier = body_messages.earlier if body_messages is not None else None
    if (body_messages is not None and earlier is not None and earlier.root == root and earlier.first == first
            and body_messages.shared > first):
        # the first `shared` messages are the earlier body's bytes, hashed from this very root: its chain holds
        hashes = list(earlier.hashes[:body_messages.shared - first])
        start, previous = body_messages.shared, hashes[-1]
    for index in range(start, len(items)):
        item = items[index]
        raw = item if known is not None and isinstance(item, RawMessage) else None
        chain_hash = known.links.get((previous, raw.digest)) if known is not None and raw is not None else None
        if chain_hash is None:
            chain_hash = chain_next(previous, messages.message(index))
            if known is not None and raw is not None:
                known.link(previous, raw.digest, chain_hash)
        hashes.append(chain_hash)
        previous = chain_hash
    if body_messages is not None:
        body_messages.parsed, body_messages.earlier = ChainPrefix(root, first, tuple(hashes)), None
    return AgentMessages(messages, first), tools, system, hashes, template_kwargs


def _refusal(body: Mapping[str, Any]) -> None:
    """The checks of a request in their order over the whole of it, every message read: raises the refusal of
    its first problem (a message before the tools, the tools before the first message's role)."""
    items = body.get("messages")
    if not isinstance(items, list) or not items:
        raise Refused("bad_request", "messages must be a non-empty list")
    if not isinstance(body.get("model"), str):
        raise Refused("bad_request", "model must be a string")
    _check_options(body)
    messages = [agent_message(item.read() if isinstance(item, RawMessage) else item, number)
                for number, item in enumerate(items, start=1)]
    agent_tools(body.get("tools"))
    system = 0
    while system < len(messages) and messages[system].role == "system":
        system += 1
    if system == len(messages) or messages[system].role != "user":
        raise Refused("bad_message", "the first message after the system prompt must be the user's task")


def _check_options(body: Mapping[str, Any]) -> None:
    """The request's own options the proxy cannot pass on as they are: Refused (400) naming the option."""
    choices = body.get("n")
    if choices is not None and (type(choices) is not int or choices != 1):
        raise Refused("unsupported", f"n={json.dumps(choices)[:20]}: the proxy keeps one conversation per history,"
                      " so it asks for one choice (n=1)")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (type(value) is not int or value < 1):
            raise Refused("bad_request", f"{name} must be a positive integer, got {json.dumps(value)[:40]}")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise Refused("bad_request", f"stream must be true or false, got {json.dumps(stream)[:40]}")
    choice = body.get("tool_choice")
    function = choice.get("function") if isinstance(choice, Mapping) else None
    named = function.get("name") if isinstance(function, Mapping) else None
    if named in ARC_TOOL_NAMES:
        raise Refused("bad_request", f"tool_choice names {named!r}, one of ARC's tools: the agent never sees them"
                      " (the model calls them on its own, inside the proxy)")


@attrs.frozen
class UpstreamReply:
    """A completion the upstream sent, read: its first choice, its text and calls (what is recorded), its usage."""

    completion: dict[str, Any]
    choice: dict[str, Any]
    content: str
    calls: tuple[ToolCall, ...]
    usage: Mapping[str, Any]


def read_completion(completion: Any) -> UpstreamReply:
    """An upstream's 200 answer read as a chat completion; Failed (502, nothing recorded) when it is not one."""
    def malformed(why: str) -> Failed:
        return Failed(502, "upstream_malformed", f"the upstream's reply is not a chat completion: {why}")

    if not isinstance(completion, dict):
        raise malformed(f"the body is {json.dumps(completion)[:40]}, not an object")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        raise malformed("no choices")
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), Mapping):
        raise malformed("its first choice has no message")
    usage = completion.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        raise malformed("usage is not an object")
    message = choice["message"]
    if message.get("tool_calls") is not None and not isinstance(message.get("tool_calls"), list):
        raise malformed("tool_calls is not a list")
    try:
        content = _text(message.get("content"), "the upstream reply")
        calls = _calls(message, "the upstream reply")
    except Refused as problem:
        raise malformed(str(problem)) from None
    return UpstreamReply(completion, choice, content, calls, usage or {})


@attrs.define
class Reply:
    """What the agent gets back: the final completion, the rounds it took, the last view's count."""

    completion: dict[str, Any]
    hidden_rounds: int
    view_tokens: int
    conversation: str


class Proxy:
    """The proxy's logic, independent of the HTTP server: `complete` answers one chat request."""

    def __init__(self, settings: ProxySettings, client: Any) -> None:
        self.settings = settings
        self.client = client  # an httpx.AsyncClient
        self.conversations = Conversations(settings)
        try:  # a server counts much text: its tokenizer's fast engine built now, not by a request (prepare refuses
            tokenizer = get_tokenizer(settings.tokenizer)  # a tokenizer that cannot load)
        except ArcError:
            tokenizer = None
        if isinstance(tokenizer, HuggingFaceTokenizer):
            tokenizer.build_fast_engine()
        self.rounds: deque[RoundRecord] = deque(maxlen=ROUND_LOG_SIZE)
        self.counts_differing = 0  # upstream calls whose usage.prompt_tokens was not the view's count
        self.retries_answered = 0  # clients' retries answered with the reply they had missed
        self.metrics = ProxyMetrics()  # what GET /metrics adds to these counters
        self._sweeper: asyncio.Task[None] | None = None
        self.known = KnownMessages()  # the message texts read before: a request reads its new messages only
        # forks copy a conversation up to a mark (its rows replayed, with --store) on threads of their own, so that
        # a burst of them (agents that start alike, a history resent many times) never takes the worker threads
        # every other client's requests need; the forks of one conversation one at a time (`fork_turn`), so such
        # a burst never delays the fork of another conversation (a retry, an edit) by more than one copy
        self.fork_copies = concurrent.futures.ThreadPoolExecutor(FORK_THREADS, thread_name_prefix="arc-proxy-fork")
        # a request bringing a large output (seconds of counting) is taken through the core on threads of its own,
        # so that a few such requests at once never take the worker threads every other client's requests need
        # (review h40: 8 clients each sending a 20 MB tool output held another client's request 27 s)
        self.large_work = concurrent.futures.ThreadPoolExecutor(LARGE_WORK_THREADS,
                                                                thread_name_prefix="arc-proxy-large")
        self._fork_gates: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def stats(self) -> dict[str, int]:
        """This instance's counters since it started (GET /arc/stats)."""
        return {"upstream_calls_logged": len(self.rounds), "conversations_in_memory": len(self.conversations.by_key),
                "conversations_evicted": self.conversations.evicted, "conversations_opened": self.conversations.opened,
                "counts_differing": self.counts_differing}

    def write_metrics(self, out: Exposition) -> None:
        """This instance's counters for GET /metrics: `ProxyMetrics`', those of `stats`, its conversations'."""
        self.metrics.write(out)
        out.counter("arc_client_retries_answered_total", "Clients' retries (x-stainless-retry-count) answered with the"
                    " reply their first attempt committed, the upstream not asked again", self.retries_answered)
        out.counter("arc_counts_differing_total", "Upstream calls whose usage.prompt_tokens was not the proxy's count"
                    " of the view (an alarm: is --tokenizer the served model's?)", self.counts_differing)
        out.gauge("arc_upstream_calls_logged", "Upstream calls in GET /arc/rounds' log (the last 10,000 kept)",
                  len(self.rounds))
        self.write_store_metrics(out)

    def write_store_metrics(self, out: Exposition) -> None:
        """The families of where this instance keeps its conversations (in memory, or --store DIR)."""
        out.gauge("arc_conversations_in_memory", "Conversations this process holds in memory",
                  len(self.conversations.by_key))
        out.counter("arc_conversations_opened_total", "Stored conversations (--store DIR) this process read from"
                    " their store", self.conversations.opened)
        out.counter("arc_conversations_evicted_total", "Conversations that left memory (--max-conversations,"
                    " --idle-seconds)", self.conversations.evicted)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.fork_copies.shutdown(wait=False)
        self.large_work.shutdown(wait=False)
        self.conversations.close()

    async def complete(self, body: dict[str, Any], explicit: str | None, retry: bool = False) -> Reply:
        """The reply to one chat request. ``retry``: the client says the request is a retry of one it sent before
        (the OpenAI SDK's ``x-stainless-retry-count``): when the conversation's latest reply answered this very
        request and nothing followed it, that reply again (the first attempt's reply was committed but never
        received: a timeout, a cut connection), waiting for the first attempt when it still runs, rather than a
        fork that copies the conversation and asks the upstream again."""
        messages, tools, system, hashes, template_kwargs = parse_request(body, explicit, self.known)
        self._sweep_idle()
        try:
            return await self._complete(messages, tools, system, hashes, template_kwargs, body, retry)
        except TimeoutError:  # an OSError, but not the store's
            raise
        except (StoreError, OSError) as problem:  # a mark, the shared index, a fork's store: may pass on a retry
            raise Failed(503, "store_unavailable", f"the conversation's store failed: {' '.join(str(problem).split())}",
                         retry_after=5) from None
        finally:
            self.conversations.evict()

    async def _complete(self, messages: Sequence[AgentMessage], tools: list[dict[str, Any]], system: str,
                        hashes: list[str], template_kwargs: tuple[tuple[str, Any], ...], body: dict[str, Any],
                        retry: bool = False) -> Reply:
        """`complete` after the request is read: the conversation found (or made, or forked) and held, then run."""
        asked = AskedRequest.of(hashes, body)
        wait = False
        while True:
            key = await self._resume(hashes, messages, system, tools, template_kwargs)
            try:
                if not wait and self.conversations.busy(key):
                    holder = self.conversations.by_key.get(key)
                    if not (retry and holder is not None and holder.answering == asked):
                        raise ConversationBusy(f"conversation {key} is held by another request")
                    wait = True  # a retry of the request it answers now: that attempt's reply is this one's
                async with self.conversations.held(key, wait) as conversation:
                    found = conversation.deepest_mark(hashes)  # its rows and marks caught up: maybe deeper
                    if found is None:  # the index named it for a mark its marks file lost: look again
                        self.conversations.forget(key, hashes, conversation)
                        continue
                    mark, start = found
                    if conversation.position == mark.position:
                        return await self._answer(conversation, messages[start:], hashes[start:], body, asked)
                    answered = conversation.last_reply
                    if (retry and answered is not None and answered.request == asked
                            and answered.answered_at == conversation.head):
                        self.retries_answered += 1
                        return answered.reply  # the first attempt's reply, committed but never received
                    # it moved on (another request of this history, or the agent edited or regenerated): fork
                    async with self.fork_turn(key):
                        forked = await in_thread_undone_if_cancelled(
                            lambda: self.conversations.fork(conversation, mark), self._drop_fork, self.fork_copies)
                    self.metrics.conversations_forked += 1
            except ConversationGone:
                continue  # set aside (or forgotten): matched again without it
            except ConversationBusy:  # another request holds it: forked at this request's deepest mark at once
                async with self.fork_turn(key):
                    unheld = await in_thread_undone_if_cancelled(
                        lambda: self.conversations.fork_unheld(key, hashes),
                        lambda made: self._drop_fork(made[0]) if made is not None else None, self.fork_copies)
                if unheld is None:  # no mark to fork at without it: waited for, as before
                    wait = True
                    continue
                forked, start = unheld
                self.metrics.conversations_forked += 1
            try:
                async with self.conversations.held(forked.key) as child:
                    return await self._answer(child, messages[start:], hashes[start:], body, asked)
            finally:
                self.conversations.let_go_of_fork(forked)

    async def _answer(self, conversation: Conversation, new: Sequence[AgentMessage], hashes: Sequence[str],
                      body: dict[str, Any], asked: AskedRequest) -> Reply:
        """`_run` on a conversation this request holds, noting the request while it runs and its reply after it
        (for a client's retry of it)."""
        conversation.answering = asked
        try:
            reply = await self._run(conversation, new, hashes, body)
        finally:
            conversation.answering = None
        conversation.last_reply = AnsweredRequest(asked, conversation.head, reply)
        return reply

    @contextlib.asynccontextmanager
    async def fork_turn(self, parent: str) -> AsyncIterator[None]:
        """This request's turn to copy conversation ``parent`` up to a mark: after the copies of ``parent`` other
        requests asked for first (waited for on the event loop, so a request cancelled while it waits copies
        nothing), beside copies of other conversations."""
        gate = self._fork_gates.get(parent)
        if gate is None:
            gate = self._fork_gates[parent] = (asyncio.Lock(), [0])
        gate[1][0] += 1
        try:
            async with gate[0]:
                yield
        finally:
            gate[1][0] -= 1
            if not gate[1][0]:
                del self._fork_gates[parent]

    def _drop_fork(self, child: Conversation) -> None:
        """A fork made for a request that was cancelled meanwhile: its store released, its count dropped."""
        self.conversations._release(child)
        self.conversations.let_go_of_fork(child)

    def _sweep_idle(self) -> None:
        """From the first request on: every few seconds, conversations idle past ``idle_seconds`` leave memory
        (also when no request comes)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        period = max(0.5, min(60.0, self.settings.idle_seconds / 4))
        while True:
            await asyncio.sleep(period)
            if self.conversations.evict():
                gc.collect()  # the states' reference cycles: their memory back now, not at the next collection
                _give_back_freed_memory()

    async def _resume(self, hashes: list[str], messages: Sequence[AgentMessage], system: str,
                      tools: list[dict[str, Any]], template_kwargs: tuple[tuple[str, Any], ...]) -> str:
        """The conversation that passed the request's deepest known message (a new one when none did). With
        --store the shared index is asked in a worker thread (a busy index stalls this request, not the event
        loop): the hand-off that before released the store after the request (now the last round's)."""
        def no_reply_at(depth: int) -> bool:
            role = messages.role(depth - 1) if isinstance(messages, AgentMessages) else messages[depth - 1].role
            return role != "assistant"

        if self.conversations.hash_index is None:
            found = self._found(hashes, no_reply_at)
        else:
            found = await asyncio.to_thread(self._found, hashes, no_reply_at)
        if found is not None:
            return found
        # a new conversation: one worker-thread hand-off makes it (its configuration, state and store, outside
        # every lock) and, under the lock every new conversation takes, checks that the same history did not
        # arrive meanwhile and writes its first mark
        goal = messages[0].text
        made, key = await in_thread_undone_if_cancelled(
            lambda: self._made(hashes, system, goal, tools, template_kwargs),
            lambda made: made[0] is not None and self.conversations._release(made[0]))
        if made is not None:
            self.metrics.conversations_new += 1
        return key

    def _made(self, hashes: list[str], system: str, goal: str, tools: list[dict[str, Any]],
              template_kwargs: tuple[tuple[str, Any], ...]) -> tuple[Conversation | None, str]:
        """(A worker thread.) A new conversation for ``hashes`` with its first mark, or (None, the conversation
        that passed them meanwhile) when the same history arrived first (the one made is removed)."""
        try:  # the configuration (Refused when it cannot fit), then the conversation
            conversation = self.conversations.new(self._config(system, goal, tools, template_kwargs))
        except Refused:
            raise
        except (StoreError, OSError) as problem:
            raise Failed(503, "store_unavailable", f"a new conversation's store cannot be created: {problem}",
                         retry_after=5) from None
        except ArcError as problem:  # K > L for this system prompt and goal, most often
            raise Refused("configuration", f"ARC cannot hold this conversation: {problem}") from None
        try:
            with self.conversations.registering:
                found = self._found(hashes)  # the same history may have arrived meanwhile: that one goes on,
                # unless a request holds it (agents that start alike): this one is then as good as a fork of it
                if found is None or self.conversations.busy(found):
                    conversation.position = 1  # the system prompt and the goal are its prefix F
                    self.conversations.add(hashes[0], conversation, conversation.mark(hashes[0]))
                    return conversation, conversation.key
        except BaseException as problem:  # nothing names it: not left open (and locked) in memory
            self.conversations.discard(conversation)
            if isinstance(problem, StoreError):
                raise Failed(503, "store_unavailable", f"a new conversation's index cannot be written: {problem}",
                             retry_after=5) from None
            raise
        self.conversations.discard(conversation)
        return None, found

    def _found(self, hashes: list[str], no_reply_at: Callable[[int], bool] | None = None) -> str | None:
        """The conversation that passed the deepest of ``hashes`` (with --store: one query of the shared index)."""
        try:
            found = self.conversations.deepest(hashes, no_reply_at)
        except StoreError as problem:
            raise Failed(503, "store_unavailable", str(problem), retry_after=5) from None
        return found[0] if found is not None else None

    def _config(self, system: str, goal: str, tools: list[dict[str, Any]],
                template_kwargs: tuple[tuple[str, Any], ...]) -> Config:
        shown_system = f"{system}\n\n{ARC_NOTE}" if system else TOOL_MODE_SYSTEM
        too_long = prefix_past_window(self.settings, len(shown_system) + len(goal))
        if too_long is not None:  # before any count: a task of megabytes is refused at once, never tokenized
            raise Refused("configuration", f"ARC cannot hold this conversation: {too_long}")
        try:
            return self.conversations.config(shown_system, goal, tools, template_kwargs)
        except WindowTooSmall as problem:  # the numbers a client can act on (review h70 F6: the budget was {})
            raise Refused("configuration", f"ARC cannot hold this conversation: {problem}",
                          {"needed": problem.needed, "smallest_window": problem.smallest_window}) from None
        except ArcError as problem:
            raise Refused("configuration", f"ARC cannot hold this conversation: {problem}") from None

    async def _run(self, conversation: Conversation, new: Sequence[AgentMessage], hashes: Sequence[str],
                   body: dict[str, Any]) -> Reply:
        """The agent's new messages through the core, then the upstream's rounds: the core's work of a request in
        one worker-thread hand-off before the first upstream call (`_advance`) and one after each (`_answered`),
        so that the event loop serves the other clients meanwhile and no event hops on its own."""
        if sum(len(message.text) + sum(len(call.arguments) for call in message.calls) for message in new
               ) > LARGE_WORK_CHARACTERS:  # seconds of counting: on the threads for large work
            work = functools.partial(contextvars.copy_context().run, self._advance, conversation, new, hashes)
            shown = await asyncio.get_running_loop().run_in_executor(self.large_work, work)
        else:
            shown = await asyncio.to_thread(self._advance, conversation, new, hashes)
        usage: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        cached: int | None = None  # the upstream's prompt_tokens_details.cached_tokens, summed over the rounds
        hidden = HiddenRounds(self.settings.max_hidden_rounds, self.settings.max_read_rounds)
        while True:
            reply = await self._upstream(conversation, shown.chat_messages(), shown.tools() or [], body,
                                         shown.tokens, hidden.count > 0)
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                value = reply.usage.get(key)
                usage[key] += value if type(value) is int else 0
            round_cached = cached_tokens(reply.usage)
            if round_cached is not None:
                cached = (cached or 0) + round_cached
            answered = await asyncio.to_thread(self._answered, conversation, reply, hidden)
            counted = self.metrics.arc_tool_calls
            for call in reply.calls:
                if call.name in ARC_TOOL_NAMES:
                    counted[call.name] = counted.get(call.name, 0) + 1
            if isinstance(answered, View):  # ARC answered every call: another (hidden) round
                shown = answered
                continue
            break
        self.metrics.rounds_per_request.observe(hidden.count + 1)
        environment = answered
        choice, content, calls = reply.choice, reply.content, reply.calls
        returned: dict[str, Any] = {"role": "assistant", "content": content or None}
        said = choice.get("message")
        for key in REASONING_KEYS:  # the last round's reasoning, as the server returned it (not kept in the view)
            if isinstance(said, Mapping) and isinstance(said.get(key), str):
                returned[key] = said[key]
        if environment:
            returned["tool_calls"] = [call.openai() for call in environment]
        finish = choice.get("finish_reason")
        if calls and not environment:
            finish = "stop"  # ARC's calls are never shown; the round cap was reached
            self.metrics.round_limit_replies += 1
        elif environment:
            finish = "tool_calls"
        result = dict(reply.completion)
        result["choices"] = [{**choice, "index": 0, "message": returned, "finish_reason": finish}]
        if cached is not None:  # (review h30 F4: dropped, the prefix cache's part was invisible through the proxy)
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        result["usage"] = usage
        return Reply(result, hidden.count, shown.tokens, conversation.key)

    def _advance(self, conversation: Conversation, new: Sequence[AgentMessage], hashes: Sequence[str]) -> View:
        """(A worker thread.) Each new agent message as the core's event, marked (in the shared index too, with
        --store), then the view of the first round; Refused when the last assistant message's calls are not all
        answered."""
        marks: list[tuple[str, Mark]] = []
        try:
            for agent_said, chain_hash in zip(new, hashes):
                try:
                    self._apply(conversation, _event(agent_said, self.settings.late_system))
                except Refused as problem:
                    if agent_said.role != "system" or self.settings.late_system != LATE_SYSTEM_AS_USER:
                        raise
                    raise Refused(problem.code, f"{problem} (a system or developer message after the task is shown"
                                  " to the model as a user message: --late-system user)", problem.budget) from None
                conversation.position += 1
                marks.append((chain_hash, conversation.mark(chain_hash)))
        finally:  # the marks of what was applied, even when a later message is refused (the retry resumes there)
            for chain_hash, mark in marks:
                self.conversations.add(chain_hash, conversation, mark)
        state = conversation.state
        if state.pending:
            waiting = ", ".join(call.call_id for call in state.pending)
            raise Refused("pending_calls", f"tool call(s) {waiting} of the last assistant message have no tool"
                          " message answering them", _budget(state))
        return view(state)

    def _answered(self, conversation: Conversation, reply: UpstreamReply, hidden: HiddenRounds
                  ) -> View | tuple[ToolCall, ...]:
        """(A worker thread.) The upstream's reply as the model's turn: the next round's view when it called only
        ARC's tools and ``hidden`` allows another round (counted there); else the calls that go back to the agent, after the mark
        of the assistant message the agent will send back (in the shared index too) and, with --store, the store
        released (the request's last hand-off)."""
        shown_before = _shown_items(conversation.state)
        output = self._apply(conversation, ToolTurn(reply.content, reply.calls))
        assert isinstance(output, ToolTurnResult)
        environment = output.environment_calls
        if reply.calls and not environment:
            chunks = [("chunk", recall.obs_id, str(recall.chunk)) for recall in output.recalls]
            if hidden.another(shown_before, [*chunks, *_shown_items(conversation.state)[:1]]):
                return view(conversation.state)
        conversation.position += 1
        chain_hash = chain_next(conversation.head, AgentMessage("assistant", reply.content, environment))
        self.conversations.add(chain_hash, conversation, conversation.mark(chain_hash))
        if isinstance(conversation, Conversation) and conversation.store is not None:
            Conversations._release(conversation)
        return environment

    def _apply(self, conversation: Conversation, event: Event) -> Output:
        try:
            output = conversation.apply(event)
        except StoreError as problem:  # a full disk, an I/O error: may pass on a retry (the same history)
            raise Failed(503, "store_unavailable", f"the conversation's store failed: {problem}",
                         retry_after=5) from None
        except ArcError as problem:
            raise Refused(problem.code, f"ARC refused the conversation: {problem}", _budget(conversation.state)) from None
        folded = getattr(output, "folded", 0)
        if folded:
            self.metrics.fold(folded)
        return output

    def _log_round(self, conversation: Conversation, record: RoundRecord) -> None:
        """An upstream call, for GET /arc/rounds."""
        self.rounds.append(record)

    async def _upstream(self, conversation: Conversation, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]], body: dict[str, Any], tokens: int, hidden: bool) -> UpstreamReply:
        state = conversation.state
        cap = state.config.max_completion
        request = {key: value for key, value in body.items()
                   if key not in ("messages", "tools", "stream", "stream_options")}
        metadata = request.get("metadata")
        if isinstance(metadata, Mapping) and "conversation_id" in metadata:  # ours: not the upstream's
            request["metadata"] = {key: value for key, value in metadata.items() if key != "conversation_id"} or None
            if request["metadata"] is None:
                del request["metadata"]
        request.update(messages=messages, tools=tools, stream=False)
        # vLLM 0.32 reads max_completion_tokens when it is given, else max_tokens (`ChatCompletionRequest`)
        asked = [request[key] for key in ("max_completion_tokens", "max_tokens") if isinstance(request.get(key), int)]
        max_tokens = min(cap, asked[0]) if asked else cap
        request.pop("max_completion_tokens", None)
        request["max_tokens"] = max_tokens
        least = request.get("min_tokens")
        if type(least) is int and max_tokens < least <= (asked[0] if asked else least):
            # lowered with the cap (review h30 F10: the cap made vLLM's 'min_tokens > max_tokens' 400); a client's
            # min_tokens above its own max_tokens is sent as written, the upstream's 400 its answer (review h34 F7)
            request["min_tokens"] = max_tokens
        record = RoundRecord(conversation.key, hidden, tokens, state.setup.budget, state.setup.limit, max_tokens,
                             0, None, bool(body.get("stream")), view_digest(messages, tools), conversation.seq,
                             REQUEST_OWNER.get(), completion_reserve=cap,
                             asked_max_tokens=asked[0] if asked else None)
        self._log_round(conversation, record)
        metrics = self.metrics
        metrics.view_tokens_sent += tokens
        if record.budget > 0:
            metrics.budget_fill.observe(tokens / record.budget)
        try:
            return await self._called(record, request, conversation.key)
        except Failed as failed:
            # no answer, or none that reads as a completion: arc_upstream_calls_total counts it under 502 or 504
            # with the server's own answers, arc_upstream_failures_total tells it apart (review h54 F9)
            metrics.upstream_failures[failed.code] = metrics.upstream_failures.get(failed.code, 0) + 1
            raise
        finally:  # counted by the status its record ends with (0: cancelled, no answer)
            key = (record.status, hidden)
            metrics.upstream_calls[key] = metrics.upstream_calls.get(key, 0) + 1

    async def _called(self, record: RoundRecord, request: dict[str, Any], conversation: str) -> UpstreamReply:
        """`_upstream`'s call (timed for GET /metrics) and its reply read: ``record`` told the status and both
        counts."""
        started = time.perf_counter()
        try:
            response = await self.client.post(f"{self.settings.upstream}/chat/completions", json=request,
                                              headers=UPSTREAM_HEADERS.get(), timeout=self.settings.timeout_s)
        except httpx.TimeoutException as problem:
            record.status = 504
            raise Failed(504, "upstream_timeout", f"the upstream did not answer within {self.settings.timeout_s:g} s"
                         f" ({problem!r})") from None
        except httpx.HTTPError as problem:
            record.status = 502
            raise Failed(502, "upstream_unreachable", f"the upstream did not answer: {problem!r}") from None
        finally:
            self.metrics.upstream_seconds.observe(time.perf_counter() - started)
        record.status = response.status_code
        if response.status_code != 200:
            raise UpstreamError(response.status_code, response.content,
                                response.headers.get("content-type", "application/json"), conversation)
        record.status = 502  # until it reads as a completion
        raw = response.content
        too_deep = nesting_problem(raw)
        if too_deep is not None:
            raise Failed(502, "upstream_malformed", f"the upstream's reply is JSON {too_deep}")
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            raise Failed(502, "upstream_malformed", f"the upstream's reply is not JSON: {raw[:80]!r}") from None
        reply = read_completion(decoded)
        record.status = 200
        prompt_tokens = reply.usage.get("prompt_tokens")
        record.upstream_prompt_tokens = prompt_tokens if type(prompt_tokens) is int else None
        record.upstream_cached_tokens = cached_tokens(reply.usage)
        self.metrics.usage(reply.usage, record.upstream_prompt_tokens, record.upstream_cached_tokens)
        if record.upstream_prompt_tokens is not None and record.upstream_prompt_tokens != record.view_tokens:
            self.counts_differing += 1
            if self.counts_differing == 1:  # (review h30 F6: silent; each in /arc/rounds, their number in /arc/stats)
                print(f"arc-ref proxy: warning: the upstream counted {record.upstream_prompt_tokens} prompt tokens"
                      f" where the proxy counted {record.view_tokens}: is --tokenizer the served model's tokenizer"
                      " and chat template? K <= L holds only for the count the proxy makes (said once; GET"
                      " /arc/stats counts them)", file=sys.stderr, flush=True)
        return reply


async def in_thread_undone_if_cancelled(work: Callable[[], T], undo: Callable[[T], object],
                                        executor: concurrent.futures.Executor | None = None) -> T:
    """``work()`` in a worker thread (of ``executor`` when given); when the request is cancelled meanwhile (its
    client gone, the server stopping), the thread still finishes, and ``undo`` is applied to what it made (a
    store opened: closed)."""
    task: asyncio.Future[T] = asyncio.ensure_future(
        asyncio.to_thread(work) if executor is None else asyncio.get_running_loop().run_in_executor(executor, work))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        def finished(done: asyncio.Future[T]) -> None:
            if not done.cancelled() and done.exception() is None:
                undo(done.result())

        task.add_done_callback(finished)
        raise


def _give_back_freed_memory() -> None:
    """The C allocator's free memory returned to the system (glibc's malloc_trim), so that RSS falls after idle
    conversations left; nothing elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _damaged(problem: BaseException) -> bool:
    """A stored conversation that cannot be opened because of what is on disk (damaged rows or marks, a missing
    file: set aside), rather than for a passing reason (a full or read-only file system, no file descriptor
    left, a busy index: 503, kept)."""
    if isinstance(problem, (StoreFull, StoreReadOnly)):
        return False
    if isinstance(problem, StoreError):
        return True  # StoreCorrupt, StoreNotFound, a file that is not a store
    if isinstance(problem, OSError):
        return isinstance(problem, (FileNotFoundError, NotADirectoryError, IsADirectoryError))
    return True  # ValueError: a row or mark that does not read


def view_digest(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """What the upstream was shown, as one digest: runs of the same requests compare by it (issue 30)."""
    return _digest(json.dumps({"messages": messages, "tools": tools}, sort_keys=True, ensure_ascii=False))


# --- streaming -------------------------------------------------------------------------------------------


REASONING_KEYS = ("reasoning", "reasoning_content")
"""A reply message's reasoning as a server with a reasoning parser returns it (vLLM 0.32 writes ``reasoning``; earlier
releases and other servers ``reasoning_content``): passed back to the agent with the reply."""


def sse_chunks(completion: Mapping[str, Any], include_usage: bool) -> list[str]:
    """The SSE events of a completion built whole: the role with the reasoning where the reply has one, the content,
    each tool call, the finish, the usage when asked, then [DONE]."""
    base = {"id": completion.get("id", "chatcmpl-arc"), "object": "chat.completion.chunk",
            "created": completion.get("created", int(time.time())), "model": completion.get("model", "")}
    choice = completion["choices"][0]
    message = choice["message"]
    events = []

    def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
        payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        events.append(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n")

    reasoning = {key: message[key] for key in REASONING_KEYS if key in message}
    if reasoning:  # the thinking first, as a server streams it
        chunk({"role": "assistant", **reasoning})
    chunk({**({} if reasoning else {"role": "assistant"}), "content": message.get("content") or ""})
    for number, call in enumerate(message.get("tool_calls") or ()):
        chunk({"tool_calls": [{"index": number, "id": call["id"], "type": "function",
                               "function": {"name": call["function"]["name"],
                                            "arguments": call["function"]["arguments"]}}]})
    chunk({}, choice.get("finish_reason") or "stop")
    if include_usage:
        events.append(f"data: {json.dumps({**base, 'choices': [], 'usage': completion.get('usage')})}\n\n")
    events.append("data: [DONE]\n\n")
    return events


# --- the settings of `arc-ref proxy` (its HTTP server: arc_ref.frontends.proxy_app) -------------------------


class StartRefused(ArcError):
    """A setting that would make every request fail: `arc-ref proxy` exits with status 2 and this one line,
    before it listens or creates anything."""

    code = "start_refused"


def settings_from(options: ProxyOptions, parse_setting: Callable[[str], tuple[str, object]]) -> ProxySettings:
    """The settings of `arc-ref proxy`'s options (StartRefused when they are refused; nothing is created)."""
    if options.upstream is None or options.tokenizer is None:
        missing = " and ".join(flag for flag, value in (("--upstream", options.upstream),
                                                        ("--tokenizer", options.tokenizer)) if value is None)
        raise StartRefused(f"{missing} required (arc-ref proxy --upstream URL --tokenizer hf-dir:DIR)")
    try:
        overrides = unique_settings(parse_setting(text) for text in options.set)
    except (ValueError, ArcError) as problem:
        raise StartRefused(str(problem)) from None
    fixed = sorted(set(overrides) & {"tokenizer", "chat_format", "action_mode", "tools", "system", "goal",
                                     "template_kwargs"})
    if fixed:
        raise StartRefused(f"--set {', '.join(fixed)}: fixed by the proxy (from --tokenizer and each request)")
    context_limit = options.context_limit
    if "context_limit" in overrides:
        given = overrides.pop("context_limit")
        if context_limit is not None and given != context_limit:
            raise StartRefused(f"--context-limit {context_limit} and --set context_limit={given} disagree")
        if not isinstance(given, int):
            raise StartRefused(f"--set context_limit must be an integer, got {given!r}")
        context_limit = given
    upstream = options.upstream.rstrip("/")
    parts = urlsplit(upstream)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StartRefused(f"--upstream {_shown(options.upstream)} is not an http(s) URL (e.g. http://host:8000/v1)")
    tokenizer = options.tokenizer
    if not tokenizer.startswith(HF_DIR_PREFIX) and Path(tokenizer).is_dir():
        tokenizer = HF_DIR_PREFIX + tokenizer
    elif ":" not in tokenizer and ("/" in tokenizer or os.sep in tokenizer or tokenizer.startswith("~")):
        tokenizer = HF_DIR_PREFIX + tokenizer  # a path, not a tokenizer's name: said below to be no directory
    if not tokenizer.startswith(HF_DIR_PREFIX):
        raise StartRefused(f"--tokenizer {_shown(options.tokenizer)}: the proxy counts with the served model's own"
                           " tokenizer and chat template: give its directory (hf-dir:DIR)")
    directory = Path(tokenizer[len(HF_DIR_PREFIX):]).expanduser()
    if not (directory / "tokenizer.json").is_file() and not (directory / "tokenizer_config.json").is_file():
        raise StartRefused(f"--tokenizer {_shown(options.tokenizer)}: "
                           f"{'no such directory' if not directory.is_dir() else 'no tokenizer files in it'}")
    database = options.store if is_database_url(options.store) else None
    if database is not None and "#" in database:
        raise StartRefused("--store postgresql://...: the proxy names its conversations itself (no #KEY)")
    store = Path(options.store) if options.store and database is None else None
    if store is not None and store.exists() and not store.is_dir():
        raise StartRefused(f"--store {_shown(str(store))} is not a directory")
    upstream_key = options.upstream_api_key or os.environ.get(UPSTREAM_KEY_ENV) or None
    client_keys = _client_keys(options.client_keys)
    metrics_keys = _client_keys(options.metrics_keys, METRICS_KEYS_ENV, "--metrics-keys")
    bodies_in_flight_mb = options.bodies_in_flight_mb or BODIES_IN_FLIGHT_PER_BODY * options.max_body_mb
    if bodies_in_flight_mb < options.max_body_mb:
        raise StartRefused(f"--bodies-in-flight-mb {bodies_in_flight_mb} is below --max-body-mb"
                           f" {options.max_body_mb}: a body of the largest size accepted could never be held")
    return ProxySettings(upstream=upstream, tokenizer=f"{HF_DIR_PREFIX}{directory.resolve()}", preset_name=options.preset,
                         overrides=overrides, store=store, database=database,
                         max_hidden_rounds=options.max_hidden_rounds, max_read_rounds=options.max_read_rounds,
                         context_limit=context_limit,
                         max_body_bytes=options.max_body_mb * 2**20, body_memory_bytes=options.body_memory_mb * 2**20,
                         bodies_in_flight_bytes=bodies_in_flight_mb * 2**20,
                         timeout_s=float(options.upstream_timeout), running_lease_s=float(options.running_lease),
                         upstream_api_key=upstream_key,
                         max_conversations=options.max_conversations, idle_seconds=options.idle_seconds,
                         client_keys=client_keys, metrics_keys=metrics_keys, db_connections=options.db_connections,
                         late_system=options.late_system)


def _client_keys(path: str | None, variable: str = CLIENT_KEYS_ENV, flag: str = "--client-keys") -> frozenset[str]:
    """The keys of --client-keys FILE (one per line, # comments), else of $ARC_PROXY_CLIENT_KEYS (comma-separated);
    StartRefused when the file cannot be read or holds none. (``variable`` and ``flag``: those of another list of
    keys, --metrics-keys.)"""
    if path is None:
        listed = os.environ.get(variable, "")
        return frozenset(key.strip() for key in listed.split(",") if key.strip())
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as problem:
        raise StartRefused(f"{flag} {_shown(path)} cannot be read: {problem}") from None
    keys = frozenset(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise StartRefused(f"{flag} {_shown(path)} holds no key (one per line)")
    return keys


def client_owner(settings: ProxySettings, authorization: str | None) -> str | None:
    """With --client-keys: a digest of the request's key when it is one of them, None when it is not (401);
    without: "" (every client is the same one)."""
    if not settings.client_keys:
        return ""
    token = bearer_in(settings.client_keys, authorization)
    return None if token is None else _digest("client key\n" + token)


def bearer_in(keys: frozenset[str], authorization: str | None) -> str | None:
    """The key of ``Authorization: Bearer KEY`` when it is one of ``keys`` (each compared in constant time)."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not any(hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                                 key.encode("utf-8", "surrogatepass"))
                                             for key in keys):
        return None
    return token


def counters_refused(settings: ProxySettings, authorization: str | None, path: str) -> Failed | None:
    """Why a request may not read every client's counters (GET ``path``: /metrics, /arc/stats), None when it may.
    With --metrics-keys only a request bearing one of them may (401 otherwise: a scraper's key, never a client's
    unless listed in both); without, any client may when there are no client keys (whoever reaches the port may
    send requests and read /arc/rounds already), and none with --client-keys (401 without a client key, then 403:
    one client would read the others' activity)."""
    if settings.metrics_keys:
        if bearer_in(settings.metrics_keys, authorization) is None:
            return Failed(401, "unauthorized", f"GET {path} needs one of the proxy's metrics keys (--metrics-keys):"
                          " Authorization: Bearer KEY")
        return None
    if client_owner(settings, authorization) is None:
        return Failed(401, "unauthorized", "this proxy needs a client key: Authorization: Bearer KEY")
    if settings.client_keys:
        return Failed(403, "forbidden", f"GET {path} counts every client's requests: it is not served with"
                      " --client-keys unless --metrics-keys names the keys that may read it")
    return None


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:80]) + "..."


class NotAnApiBase(StartRefused):
    """The upstream answers, but not as an OpenAI-compatible API at that URL (404 for ``/models``)."""


def served_window(settings: ProxySettings, timeout_s: float = 10.0) -> int | None:
    """The smallest window the upstream serves (``GET /models``: vLLM's ``max_model_len`` of each model), None
    when it does not say; StartRefused when it does not answer."""
    try:
        response = httpx.get(f"{settings.upstream}/models", headers=upstream_headers(settings, None),
                             timeout=timeout_s)
    except httpx.HTTPError as problem:
        raise StartRefused(f"the upstream {settings.upstream} does not answer GET /models ({problem!r}); start it"
                           " first, or give its window:"
                           " --context-limit N") from None
    if response.status_code == 404:  # (review h30 F11: the advice was --context-limit, then every request a 404)
        raise NotAnApiBase(f"GET {settings.upstream}/models answered 404: --upstream is not the base of an"
                           " OpenAI-compatible API (vLLM's ends in /v1: http://HOST:8000/v1)")
    if response.status_code in (401, 403):
        raise StartRefused(f"GET {settings.upstream}/models answered {response.status_code}: the upstream needs a key"
                           " (--upstream-api-key, or $ARC_UPSTREAM_API_KEY), or give its window: --context-limit N")
    try:
        cards = response.json().get("data") if response.status_code == 200 else None
    except (ValueError, RecursionError, AttributeError):
        cards = None
    windows = [card["max_model_len"] for card in cards if isinstance(card, Mapping)
               and type(card.get("max_model_len")) is int and card["max_model_len"] > 1] \
        if isinstance(cards, list) else []
    return min(windows) if windows else None


def prepare(settings: ProxySettings) -> ProxySettings:
    """Every check that can be made before listening (StartRefused with one line): the served window (from the
    upstream unless --context-limit gives it; a larger --context-limit than the upstream's is refused), the
    tokenizer and its chat template and the overrides (a probe conversation is built with them), the store
    directory (created, written once) and its conversations' index (hashes.sqlite, read). Returns the settings with the window."""
    try:  # also with --context-limit and a database, where the instances may start before their upstream
        served = served_window(settings)  # (review h34 F5: a URL without /v1 was then served, every request a 404)
    except StartRefused as problem:
        if settings.context_limit is None or isinstance(problem, NotAnApiBase):
            raise
        served = None  # the window given stands; the upstream may come later
    window = settings.context_limit if settings.context_limit is not None else served
    if window is None:
        raise StartRefused(f"GET {settings.upstream}/models names no max_model_len (the window vLLM reports);"
                           " give the served model's window: --context-limit N")
    if served is not None and window > served:
        raise StartRefused(f"--context-limit {window} is more than the window the upstream serves ({served})")
    prepared = attrs.evolve(settings, context_limit=window)
    try:
        init(conversation_config(prepared, TOOL_MODE_SYSTEM, PROBE_GOAL, [], ()))
        # what every conversation needs, built before the first request rather than by it: the tokenizer's
        # longest token (`prefix_past_window`), the template of a request with tools of its own
        prefix_past_window(prepared, 0)
        init(conversation_config(prepared, TOOL_MODE_SYSTEM, PROBE_GOAL, [PROBE_TOOL], ()))
    except ArcError as problem:
        raise StartRefused(" ".join(str(problem).split())) from None
    if settings.store is not None:
        try:
            settings.store.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = settings.store / f".arc-proxy-write-check-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as problem:
            raise StartRefused(f"--store {str(settings.store)!r} cannot be written: "
                               f"{problem.strerror or problem}") from None
        try:  # the conversations' shared index: opened (created when absent) and read once
            index = HashIndex(settings.store)
            try:
                index.keys()
            finally:
                index.close()
        except StoreError as problem:
            raise StartRefused(f"--store {str(settings.store)!r}: {problem}") from None
    return prepared


def conversation_config(settings: ProxySettings, system: str, goal: str, tools: Sequence[Mapping[str, Any]],
                        template_kwargs: tuple[tuple[str, Any], ...]) -> Config:
    """A conversation's configuration: the served window, the prefix its agent sent (system text with ARC's note,
    tools listing, goal) and budgets derived from both (`arc_ref.budgets.fit_to_window`, the one owner of that
    rule; spec/parameters.md), but those ``--set`` gives, which are kept. The completion reserve G_max, unless
    ``--set max_completion`` gives one, is `arc_ref.budgets.completion_reserve`: the preset's 4096, or half of
    what the prefix's smallest view leaves of the window when that is less, so that a larger window never gives a
    smaller view (review h70 F1) and a long system prompt on a small window needs nothing configured (review h54 F6).
    ConfigError (WindowTooSmall naming the numbers) when the prefix cannot fit."""
    overrides = dict(settings.overrides)
    window = settings.context_limit if settings.context_limit is not None else overrides.get("context_limit")
    if window is None:
        window = PRESETS[settings.preset_name].context_limit
    overrides["context_limit"] = window
    reserve_cap = PRESETS[settings.preset_name].max_completion
    overrides.setdefault("max_completion", reserve_cap)
    config = preset(settings.preset_name, **overrides, tokenizer=settings.tokenizer, chat_format="template",
                    action_mode="tools", tools=list(tools), system=system, goal=goal, template_kwargs=template_kwargs)
    kept = {name: value for name, value in settings.overrides.items() if name in DERIVED_FIELDS}
    if "max_completion" not in settings.overrides:
        config = config.replace(max_completion=reserve_for_window(config, reserve_cap, reserver="this proxy",
                                                                  setting="--set max_completion=N"))
    return fit_to_window(config, keep=kept, check=False)  # init checks it (K <= L, every floor)


def prefix_past_window(settings: ProxySettings, characters: int) -> str | None:
    """Why a system text and task of ``characters`` characters cannot fit the window, whatever their tokens: one
    token covers at most ``max_token_chars`` characters of the served tokenizer, so they are at least
    ``characters // max_token_chars`` tokens; None when that floor fits (only then are they counted)."""
    tokenizer = get_tokenizer(settings.tokenizer)
    per_token = tokenizer.max_token_chars if isinstance(tokenizer, HuggingFaceTokenizer) else 1
    window = settings.context_limit or PRESETS[settings.preset_name].context_limit
    floor = characters // per_token
    if floor <= window:
        return None
    return (f"the system text and task are {characters} characters, at least {floor} tokens (one token of this"
            f" tokenizer covers at most {per_token} characters): more than the window L_ctx = {window}")


def upstream_headers(settings: ProxySettings, authorization: str | None) -> dict[str, str]:
    """The headers of a request to the upstream: its key (--upstream-api-key or $ARC_UPSTREAM_API_KEY), else the
    client's own Authorization."""
    if settings.upstream_api_key:
        return {"Authorization": f"Bearer {settings.upstream_api_key}"}
    if settings.client_keys:  # the client's key is the proxy's, not the upstream's
        return {}
    return {"Authorization": authorization} if authorization else {}


__all__ = ["ARC_NOTE", "AgentMessage", "AgentMessages", "Conversations", "KnownMessages", "Proxy", "ProxySettings", "Refused", "StartRefused",
           "agent_message", "chain_next", "chain_root", "conversation_config", "listening_socket", "prepare",
           "RawMessage", "BodyMessages", "ChainPrefix", "UNREADABLE", "read_json_value", "settings_from", "sse_chunks",
           "upstream_headers"]
