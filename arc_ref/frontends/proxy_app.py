"""`arc-ref proxy`'s HTTP server: the Starlette application in front of one process's `Proxy`, or of the
`SharedProxy` of many instances on one database (arc_ref.frontends.proxy_shared), and `serve`.

Apart from `arc_ref.frontends.proxy` so that neither proxy module imports the other (no circle of imports).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import json
import operator
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence

import attrs
import httpx
import msgspec

from arc_ref.frontends.exit_status import INTERRUPTED, OK, USAGE
from arc_ref.frontends.proxy import (
    CLIENT_LEFT,
    CONVERSATION_HEADER,
    REQUEST_OWNER,
    UPSTREAM_HEADERS,
    BodyMessages,
    Failed,
    KnownMessages,
    Proxy,
    RawMessage,
    ProxySettings,
    Refused,
    Reply,
    RoundRecord,
    UpstreamError,
    StartRefused,
    UNREADABLE,
    prepare,
    settings_from,
    sse_chunks,
    client_owner,
    counters_refused,
    read_json_value,
    upstream_headers,
)

from arc_ref.frontends.proxy_metrics import CONTENT_TYPE, Exposition
from arc_ref.frontends.proxy_options import DEFAULT_BODY_MEMORY_MB, ProxyOptions
from arc_ref.json_limits import nesting_problem
from arc_ref.openai_wire import error_body, error_message
from arc_ref.persist import StoreError
from arc_ref.persist.postgres import shown_url
from arc_ref.serving import listening_socket
from arc_ref.text import escape_line


LARGE_BODY_BYTES = 4 * 2**20  # a body above this is decoded in a worker thread
CLIENT_GONE = "client_gone"  # the kind of a chat request whose client left before its answer (GET /metrics)
INTERNAL_ERROR = "internal_error"  # the kind of one the proxy failed with an exception of its own (500)
HELD_BODY_BYTES = 2**20  # a body above this is held against the allowance for bodies in flight (`BodyAllowance`)
ROUNDS_SLICE = 500  # GET /arc/rounds encodes this many rounds between two turns of the event loop's other work
_ROUNDS_ENCODER = msgspec.json.Encoder()
_ROUND_FIELDS = tuple(field.name for field in attrs.fields(RoundRecord) if field.name != "owner")
_SPLIT_BODY = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SPLIT_LIST = msgspec.json.Decoder(list[msgspec.Raw])


def decode_body(raw: bytes, known: KnownMessages | None = None) -> dict[str, Any]:
    """The body's JSON object, its ``messages`` as `RawMessage`s (their texts and digests; read unless ``known``
    holds their digest: a message read before is not read again); Refused when it is not JSON, not an object, or
    nested deeper than the limit of json_limits (checked before any reader recurses: spec/trace.md section 2).

    The body is split into its members' texts (msgspec, which recurses no deeper than the interpreter allows),
    each read as the json module reads it (`read_json_value`), each message's depth counted with the body's two
    levels around it; anything the split does not pass (not JSON, not an object, too deep, NaN...) is decoded
    whole as before (`decode_whole`), so every body is read or refused as the json module would.

    With ``known``, a body that begins byte for byte as one of the bodies decoded last (`RecentBodies`), up to the
    end of one of its messages, is decoded from there on only: the same object, in proportion to what is new."""
    if known is not None:
        if not isinstance(known.bodies, RecentBodies):
            known.bodies = RecentBodies()
        return known.bodies.decode(raw, known)
    split = _split_body(raw, known)
    return split[0] if split is not None else decode_whole(raw)


def _split_body(raw: bytes, known: KnownMessages | None) -> tuple[dict[str, Any], msgspec.Raw | None] | None:
    """The body split and read (None when the split does not pass it), and the text of its ``messages``."""
    try:
        members = _SPLIT_BODY.decode(raw)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    text = members.get("messages")
    if text is None:
        body = _read_members(members, [])
        return None if body is None else (body, None)
    try:
        items = _SPLIT_LIST.decode(text)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None  # not an array: decoded whole, refused by parse_request
    values: dict[int, Any] = {}
    messages = _raw_messages(items, known, False, values, 0)
    if messages is None:
        return None
    body = _read_members(members, BodyMessages(messages, values=values))
    return None if body is None else (body, text)


def _raw_messages(items: Sequence[msgspec.Raw], known: KnownMessages | None, copied: bool,
                  values: dict[int, Any], first: int) -> list[RawMessage] | None:
    """Each message text (its own bytes when ``copied``) with its digest, read unless ``known`` holds its digest
    (its value in ``values``, by its index counted from ``first``); None when one is unreadable."""
    messages = []
    for number, item in enumerate(items, start=first):
        message = RawMessage(bytes(item) if copied else item, hashlib.sha256(item).digest())
        if known is None or message.digest not in known.roles:
            value = values[number] = read_json_value(item, 2)
            if value is UNREADABLE:
                return None
        messages.append(message)
    return messages


def _read_members(members: Mapping[str, msgspec.Raw], messages: list[Any]) -> dict[str, Any] | None:
    """The body's members in their order, each read (``messages``: the messages given); None when one is
    unreadable."""
    body: dict[str, Any] = {}
    for name, text in members.items():
        if name == "messages":
            body[name] = messages
            continue
        value = read_json_value(text, 1)
        if value is UNREADABLE:
            return None
        body[name] = value
    return body


# --- the bodies decoded last --------------------------------------------------------------------------------

BODY_MEMORY_BYTES = DEFAULT_BODY_MEMORY_MB * 2**20  # what `RecentBodies` holds at most (the `weight` of the bodies
# it keeps): `arc-ref proxy --body-memory-mb`
BODY_KEY_BYTES = 4096  # bodies alike in their first bytes, this many, are candidates for one another
MESSAGE_BYTES = 1024  # what a message kept costs besides its text (its RawMessage, digest, chain hash, end: ~300)
BODY_BYTES = 4096  # what a body kept costs besides its bytes and its messages (its head's members, lists...)
BODY_CANDIDATES = 32  # the most recent bodies kept for one key (each compared until its first byte that differs)
_SPACE = b" \t\n\r"
_COMMA, _COLON = ord(","), ord(":")
# a body's rest after one of its messages, decoded as the rest of an array of one null (the state a reader is in
# there: inside an array inside the top object, after a value), under two names: a rest with a member of either
# name, or named "messages", is decoded whole
_OPENED = (b'{"arc:rest":[null', b'{"arc:other":[null')
_OPENED_NAMES = ("arc:rest", "arc:other")


@attrs.define(eq=False)
class _Decoded:
    """A body decoded before: its bytes, where its ``messages`` array opens, its members before that array (as
    decoding them alone gives them: ``messages`` null among them), where each message's text ends, and its
    messages (the `BodyMessages` `parse_request` read: each text a part of the body decoded whole it came from,
    or its own bytes; no value read kept)."""

    raw: bytes
    opens: int
    head: dict[str, msgspec.Raw]
    ends: list[int]
    messages: BodyMessages

    @property
    def weight(self) -> int:
        """The memory it holds, over-estimated: its bytes, as much again for the texts its head and messages lie in
        (its bytes, or those of the body decoded whole its first messages came from, or each its own), per message
        its objects, and a body's own."""
        return _weight(len(self.raw), len(self.messages))

    def shared_with(self, raw: bytes, partial: bool) -> int:
        """How many of its messages ``raw`` begins with, byte for byte from the body's first byte (0 when not all
        and not ``partial``)."""
        ends = self.ends
        if not ends:
            return 0
        text = memoryview(self.raw)
        if raw.startswith(text[:ends[-1]]):
            return len(ends)
        if not partial:
            return 0
        low, high = 0, len(ends) - 1  # raw begins with the first `low` messages, not with the first `high + 1`
        while low < high:
            middle = (low + high + 1) // 2
            if raw.startswith(text[:ends[middle - 1]]):
                low = middle
            else:
                high = middle - 1
        return low


class BodyAllowance:
    """The bytes of large request bodies that requests hold at once (``--bodies-in-flight-mb``; review h40 F6: 48
    bodies of 30 MB at once took the process from 805 to 2,287 MiB). A request takes its body's size before reading
    it (`take`, first come first served: one that finds the allowance spent waits, its body unread, so its client
    is held back by TCP) and gives it back when it ends (`give_back`); a body of unknown length takes as it is read
    (`take_now`, never waiting: it might hold part of the allowance while another waits for it)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, size: int, wait_s: float) -> bool:
        """Take ``size`` bytes, waiting up to ``wait_s`` behind the requests before it; False when they did not
        come in time (nothing taken). ``size`` is at most the total (the start refuses an allowance below
        --max-body-mb, and a larger body is refused before it asks)."""
        if not self._waiting and size <= self.free:
            self.free -= size
            return True
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiting.append(entry)
        try:
            async with asyncio.timeout(wait_s):
                await granted
            return True
        except BaseException as problem:
            if granted.done() and not granted.cancelled():  # given just before the time ran out: given back
                self.give_back(size)
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                self._grant()  # the first in line may be another now
            if isinstance(problem, TimeoutError):
                return False
            raise

    def take_now(self, size: int) -> bool:
        """Take ``size`` bytes if they are free and nobody waits; else False (nothing taken)."""
        if self._waiting or size > self.free:
            return False
        self.free -= size
        return True

    def give_back(self, size: int) -> None:
        self.free += size
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            size, granted = self._waiting[0]
            if granted.done():  # cancelled: its taker removes it
                self._waiting.popleft()
                continue
            if size > self.free:
                return
            self._waiting.popleft()
            self.free -= size
            granted.set_result(None)


class RecentBodies:
    """The bodies decoded last (``budget`` bytes at most, each counted with what it holds: `_Decoded.weight`; the
    oldest kept forgotten first), so that a body costs in proportion to what is new in it.

    An agent resends its history with a message or two more: the new body begins byte for byte as the one before,
    up to the end of that one's last message. Such a body is decoded from there on only: its rest, after the last
    message both share, read as the rest of an array of one null (``{"arc:rest":[null`` + rest: the state a JSON
    reader is in at that point, inside an array inside the top object, after a value), so it is read or refused
    exactly as the whole body would be; the messages before are the earlier body's (their digests, and the chain
    `parse_request` derived from them: `BodyMessages`). Anything doubtful (the rest not JSON, a member named
    ``messages`` after the array...) is decoded whole, as without them."""

    def __init__(self, budget: int = BODY_MEMORY_BYTES, key_bytes: int = BODY_KEY_BYTES) -> None:
        self.budget = budget
        self.key_bytes = key_bytes
        self.held = 0  # bytes of the bodies kept (their `weight`)
        self.continued = 0  # bodies decoded from an earlier one's messages on (counted by the tests)
        self._lock = threading.Lock()  # a large body is decoded in a worker thread
        self._keyed: dict[bytes, list[_Decoded]] = {}
        self._recent: dict[_Decoded, bytes] = {}  # least recently used first, with its key

    def decode(self, raw: bytes, known: KnownMessages) -> dict[str, Any]:
        """`decode_body` of ``raw``, from the deepest message it shares with a body decoded before."""
        if len(raw) <= self.key_bytes or _weight(len(raw), 0) > self.budget // 4:
            # no later body has its key (but itself), or never kept: decoded as without them
            split = _split_body(raw, known)
            return split[0] if split is not None else decode_whole(raw)
        key = raw[:self.key_bytes]
        with self._lock:
            candidates = list(self._keyed.get(key, ()))
        earlier, shared = None, 0
        for number, candidate in enumerate(candidates):
            count = candidate.shared_with(raw, number < 2)
            if count > shared:
                earlier, shared = candidate, count
            if count and count == len(candidate.ends):  # (a body without messages continues nothing)
                break
        if earlier is not None and 2 * earlier.ends[shared - 1] >= len(raw):
            # (a rest over half the body, read three times, would cost more than the body read whole once)
            continued = _continued(raw, known, earlier, shared)
            if continued is not None:
                self.continued += 1
                self._keep(key, continued[1], earlier if shared == len(earlier.ends) else None)
                return continued[0]
        split = _split_body(raw, known)  # its messages' texts are parts of its bytes, kept with them
        if split is None:
            return decode_whole(raw)
        body, text = split
        if text is not None and body["messages"] and _weight(len(raw), len(body["messages"])) <= self.budget // 4:
            decoded = _decoded_whole(raw, text, body["messages"])
            if decoded is not None:
                self._keep(key, decoded, None)
        return body

    def _keep(self, key: bytes, decoded: _Decoded, replaced: _Decoded | None) -> None:
        with self._lock:
            bucket = self._keyed.setdefault(key, [])
            if replaced is not None and replaced in self._recent:  # its history goes on in the new body
                bucket.remove(replaced)
                self._forget(replaced)
            if decoded.weight > self.budget // 4:  # not kept (nor the body it continued: a later body of this
                if not bucket:                     # history is decoded whole, never from a stale point)
                    del self._keyed[key]
                return
            bucket.insert(0, decoded)
            self._recent[decoded] = key
            self.held += decoded.weight
            for old in bucket[BODY_CANDIDATES:]:
                self._forget(old)
            del bucket[BODY_CANDIDATES:]
            while self.held > self.budget:
                oldest, oldest_key = next(iter(self._recent.items()))
                self._keyed[oldest_key].remove(oldest)
                if not self._keyed[oldest_key]:
                    del self._keyed[oldest_key]
                self._forget(oldest)

    def _forget(self, decoded: _Decoded) -> None:
        del self._recent[decoded]
        self.held -= decoded.weight


def _skip_space(text: bytes, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at


def _item_ends(text: bytes, at: int, items: Sequence[msgspec.Raw], separated: bool) -> list[int] | None:
    """Where each of ``items`` ends in ``text``, read from ``at`` on (separated from what is before by a comma when
    ``separated``), one after another as a JSON array holds them; None when they do not lie there so."""
    if items:  # as json.dumps writes them, compact or not: proved by one compare of them all
        for separator in (b",", b", "):
            first = at + len(separator) if separated else at
            if (not separated or text.startswith(separator, at)) and text.startswith(separator.join(items), first):
                step = len(separator)
                return list(map(operator.add, itertools.accumulate(map(len, items)),
                                range(first, first + step * len(items), step)))
    ends: list[int] = []
    for item in items:
        at = _skip_space(text, at)
        if ends or separated:
            if at >= len(text) or text[at] != _COMMA:
                return None
            at = _skip_space(text, at + 1)
        if not text.startswith(item, at):
            return None
        at += len(item)
        ends.append(at)
    return ends


def _decoded_whole(raw: bytes, text: msgspec.Raw, messages: BodyMessages) -> _Decoded | None:
    """A body decoded whole, as a later body can continue it: where its ``messages`` array (``text``) opens,
    found and proved (its head, decoded alone with a null or a 0 in the array's place, has that value as its
    ``messages``: the array is the value of the top object's member ``messages``); None when not found so."""
    at = raw.find(b'"messages"')
    for _ in range(4):  # the name written plainly, one of its first occurrences
        if at < 0:
            return None
        opens = _skip_space(raw, at + len(b'"messages"'))
        if opens < len(raw) and raw[opens] == _COLON:
            opens = _skip_space(raw, opens + 1)
            if raw.startswith(text, opens):
                head = _head(raw[:opens])
                if head is not None:
                    ends = _item_ends(raw, opens + 1, [message.raw for message in messages], False)
                    return None if ends is None else _Decoded(raw, opens, head, ends, messages)
        at = raw.find(b'"messages"', at + 1)
    return None


def _head(head: bytes) -> dict[str, msgspec.Raw] | None:
    """The members of a body's head (its text up to the value of ``messages``), when that head is the top object
    up to its member ``messages``'s value: completed with null or with 0, it decodes with that as ``messages``."""
    try:
        with_null = _SPLIT_BODY.decode(head + b"null}")
        with_zero = _SPLIT_BODY.decode(head + b"0}")
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if bytes(with_null.get("messages", b"")) != b"null" or bytes(with_zero.get("messages", b"")) != b"0":
        return None
    return with_null


def _continued(raw: bytes, known: KnownMessages, earlier: _Decoded, shared: int
               ) -> tuple[dict[str, Any], _Decoded] | None:
    """``raw``, which begins byte for byte as ``earlier`` up to the end of its message ``shared``, decoded from there
    on (`RecentBodies`), and as a later body can continue it; None when the rest does not read so."""
    end = earlier.ends[shared - 1]
    rest = raw[end:]
    opened = _OPENED[0] + rest
    try:
        members = _SPLIT_BODY.decode(opened)
        others = _SPLIT_BODY.decode(_OPENED[1] + rest)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None  # not JSON, too deep...: decoded whole
    if "messages" in members or _OPENED_NAMES[1] in members or _OPENED_NAMES[0] in others:
        return None  # the array would not be the body's messages, or a name of the rest taken
    try:
        items = _SPLIT_LIST.decode(members.pop(_OPENED_NAMES[0]))
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if not items or bytes(items[0]) != b"null":
        return None
    ends = _item_ends(opened, len(_OPENED[0]), items[1:], True)
    values: dict[int, Any] = {}
    new = _raw_messages(items[1:], known, True, values, shared)
    if ends is None or new is None:
        return None
    messages = BodyMessages(earlier.messages[:shared] + new, earlier.messages.parsed, shared, values)
    whole = dict(earlier.head)
    whole.update(members)
    body = _read_members(whole, messages)
    if body is None:
        return None
    moved = end - len(_OPENED[0])
    return body, _Decoded(raw, earlier.opens, earlier.head, earlier.ends[:shared] + [at + moved for at in ends],
                          messages)


def _weight(size: int, messages: int) -> int:
    """`_Decoded.weight` of a body of ``size`` bytes and ``messages`` messages."""
    return 2 * size + MESSAGE_BYTES * messages + BODY_BYTES


def decode_whole(raw: bytes) -> dict[str, Any]:
    """The body decoded at once by the json module, after the nesting check of the whole text."""
    too_deep = nesting_problem(raw)
    if too_deep is not None:
        raise Refused("bad_request", f"the body is JSON {too_deep}")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused("bad_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise Refused("bad_request", "the body must be a JSON object")
    return body


RETRY_COUNT_HEADER = "x-stainless-retry-count"  # the OpenAI SDKs' count of the attempts before this one


def is_retry(count: str | None) -> bool:
    """Whether a request says it retries one sent before (``x-stainless-retry-count`` of 1 or more)."""
    return count is not None and count.strip().isdigit() and int(count.strip()) >= 1


def without_frames(problem: BaseException) -> None:
    """Drop the frames a caught refusal or failure holds (its traceback, and those of the exceptions it chains).
    The request's task holds the exception, whose traceback holds the handler's frame, which holds the task: a
    cycle that kept the request's body (and the goal decoded from it) until a full collection, ~60 MB per refused
    30 MB body, 204 -> 620 MiB over 9 of them (review h30 F1). The answer needs only its type and message."""
    seen: set[int] = set()
    chained: BaseException | None = problem
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = None
        chained = chained.__cause__ or chained.__context__


def error_event(problem: Exception) -> str:
    """The SSE event of a failure met after the stream began (its status cannot change any more): the typed
    body of a refusal or failure, the upstream's own error body when it is one."""
    without_frames(problem)
    if isinstance(problem, (Refused, Failed)):
        body = problem.body()
    else:
        assert isinstance(problem, UpstreamError)
        try:
            body = json.loads(problem.body)
            if not isinstance(body, dict) or "error" not in body:
                raise ValueError
        except (ValueError, RecursionError):
            body = error_body(problem.body.decode("utf-8", "replace")[:2000], "upstream_error", problem.status)
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def build_app(settings: ProxySettings, database: Any = None) -> Any:
    """The Starlette application of the proxy (its httpx client opened and closed with the app). ``database``: with
    ``settings.database``, its `AsyncDatabase` whose schema `arc-ref proxy` checked before listening, so the app's
    start connects to nothing again (review h58 F3: the database gone in between was a traceback and exit status 3
    after the listening line); None: made and checked at the app's start."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    holder: dict[str, Proxy] = {}
    # every request's task while it runs: at shutdown uvicorn waits for the requests whose clients are connected,
    # and the lifespan for these too (a stream whose client left after its keepalive still commits its reply)
    running: set[asyncio.Task[Reply]] = set()
    unattended: set[asyncio.Task[Reply]] = set()  # those of them whose clients left (counted by a stop's lines)
    # never below the largest body accepted (the command line refuses such an allowance; settings built in code may
    # not): a body no allowance could hold would wait for nothing and be answered 503 every time
    allowance = BodyAllowance(max(settings.bodies_in_flight_bytes, settings.max_body_bytes))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # one connection per upstream call in flight, no cap: the upstream queues what it cannot run yet (vLLM's
        # scheduler), where a pool's cap made a hidden queue in front of it, in which one client's hanging calls
        # kept every other client's from the upstream (review h40: 256 held, the next waited up to 600 s, then 504)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        async with httpx.AsyncClient(limits=limits, timeout=settings.timeout_s) as client:
            if settings.database is not None:  # many instances on one database (issue 30)
                from arc_ref.frontends.proxy_shared import SharedProxy

                holder["proxy"] = SharedProxy(settings, client, database)
            else:
                holder["proxy"] = Proxy(settings, client)
            holder["proxy"].known.bodies = RecentBodies(settings.body_memory_bytes)
            app.state.proxy = holder["proxy"]
            try:
                yield
            finally:
                if running:  # (review h35 F3: closed under them, then cancelled, their replies lost)
                    app.state.draining = True
                    await asyncio.wait(set(running))
                await holder["proxy"].close()

    def headers(reply: Reply) -> dict[str, str]:
        return {"x-arc-hidden-rounds": str(reply.hidden_rounds), "x-arc-view-tokens": str(reply.view_tokens),
                "x-arc-conversation": reply.conversation}

    def failure(problem: Exception) -> Response:
        without_frames(problem)
        if isinstance(problem, Refused):
            return JSONResponse(problem.body(), status_code=problem.http_status_hint)
        logged(problem)
        if isinstance(problem, Failed):
            extra = {"retry-after": str(problem.retry_after)} if problem.retry_after is not None else {}
            if problem.status == 401:  # RFC 9110 11.6.1: the scheme a client must answer with
                extra["www-authenticate"] = 'Bearer realm="arc-ref proxy"'
            if problem.status == 408:  # the rest of a stalled body is not read: the connection goes with it
                extra["connection"] = "close"
            return JSONResponse(problem.body(), status_code=problem.status, headers=extra or None)
        assert isinstance(problem, UpstreamError)
        return Response(problem.body, status_code=problem.status, media_type=problem.content_type)

    def logged(problem: Exception) -> None:
        """One stderr line for an upstream's error and a request the proxy failed (5xx): the operator's only trace
        of them besides /arc/rounds (review h30 F9: the log held the start line alone, also with the upstream
        down or answering its context-length 400); a refusal (the client's request) and 401/413 are not logged."""
        if isinstance(problem, UpstreamError):
            text = problem.body[:4096].decode("utf-8", "replace")
            try:
                said = error_message(json.loads(problem.body)) or text
            except (ValueError, RecursionError):
                said = text
            whose = f" (conversation {escape_line(problem.conversation)[:80]})" if problem.conversation else ""
            print(f"arc-ref proxy: the upstream answered {problem.status}{whose}: {escape_line(said)[:300]}",
                  file=sys.stderr, flush=True)
        elif isinstance(problem, Failed) and problem.status >= 500:
            print(f"arc-ref proxy: {problem.status} {problem.code}: {escape_line(str(problem))[:300]}",
                  file=sys.stderr, flush=True)

    def busy() -> Failed:
        return Failed(503, "busy", f"the proxy holds {allowance.total // 2**20} MiB of large request"
                      " bodies already (--bodies-in-flight-mb); send it again later", retry_after=5)

    async def read_body(request: Request, held: list[int]) -> bytes:
        """The body, refused (413) as soon as it passes the limit: never held whole when too large; one that stalls
        (no byte for ``body_idle_s``) answered 408. A body over HELD_BODY_BYTES takes its size from the allowance
        for bodies in flight first (its Content-Length, waiting up to ``body_wait_s`` unread; without one, as it
        is read), else 503: ``held[0]`` is what it took, given back by the caller when its request ends."""
        limit = settings.max_body_bytes
        too_large = Failed(413, "request_too_large", f"the request body is over the proxy's limit of {limit} bytes"
                           " (--max-body-mb)")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        if declared is not None and declared.isdigit() and int(declared) > HELD_BODY_BYTES:
            if not await allowance.take(int(declared), settings.body_wait_s):
                raise busy()
            held[0] = int(declared)
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        try:  # (review h35 F8: a body that stalled held its connection, and a SIGTERM's drain, for ever)
            async with asyncio.timeout(settings.body_idle_s) as stalled:  # no task per chunk: no cycle (h30 F1)
                async for chunk in request.stream():
                    stalled.reschedule(loop.time() + settings.body_idle_s)
                    size += len(chunk)
                    if size > limit:
                        raise too_large
                    if size > held[0] and size > HELD_BODY_BYTES:  # a body of no stated length: taken as it comes
                        if not allowance.take_now(size - held[0]):
                            raise busy()
                        held[0] = size
                    chunks.append(chunk)
        except TimeoutError:
            chunks.clear()
            raise Failed(408, "request_timeout", f"the request body stalled: no byte for {settings.body_idle_s:g} s"
                         ) from None
        return b"".join(chunks)

    def said_if_failed(done: asyncio.Task[Reply]) -> None:
        """A request whose client left before its reply: its failure still said on stderr, as any other's (review
        h35 F2: the task's error was never read), its traceback cut (review h30 F1)."""
        problem = None if done.cancelled() else done.exception()
        if problem is None:
            return
        without_frames(problem)
        if isinstance(problem, (Failed, UpstreamError)):
            logged(problem)

    unauthorized = Failed(401, "unauthorized", "this proxy needs a client key: Authorization: Bearer KEY")

    def counted(response: Response, started: float, kind: str, streamed: bool = False) -> Response:
        """``response``, the chat request's answer, counted for GET /metrics (its status, ``kind``: "ok" or the
        error's kind, and the time since it arrived)."""
        holder["proxy"].metrics.request(response.status_code, kind, streamed, time.perf_counter() - started)
        return response

    def failed(problem: Refused | Failed | UpstreamError, started: float, streamed: bool = False) -> Response:
        """`failure`'s answer, counted (`counted`) under the problem's kind."""
        return counted(failure(problem), started, problem.code, streamed)

    class WatchedStream(StreamingResponse):
        """A stream whose end is seen however it comes: ``ended`` runs once the response is over, also when its
        client left before the first event was sent (the generator never started, so nothing in it runs: review h49,
        such a stream was not counted, its failure not said)."""

        def __init__(self, content: AsyncIterator[str], ended: Callable[[], None], media_type: str) -> None:
            super().__init__(content, media_type=media_type)
            self.ended = ended

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            finally:
                self.ended()

    async def chat(request: Request) -> Response:
        started = time.perf_counter()
        proxy = holder["proxy"]
        owner = client_owner(settings, request.headers.get("authorization"))
        if owner is None:
            return failed(unauthorized, started)
        held = [0]  # the bytes this request holds of the allowance for bodies in flight, given back when it ends
        try:
            try:
                raw = await read_body(request, held)
                # a very large body is decoded in a worker thread: the other clients' requests go on meanwhile
                body = (decode_body(raw, proxy.known) if len(raw) <= LARGE_BODY_BYTES
                        else await asyncio.to_thread(decode_body, raw, proxy.known))
            except (Refused, Failed) as problem:
                return failed(problem, started)
            except ClientDisconnect:  # the client left before its body was whole: nobody to answer, nothing to log
                # (review h35 F1: uvicorn logged a 40-line traceback for each)
                return counted(Response(status_code=400), started, CLIENT_GONE)
            return await answer(request, proxy, owner, body, held, started)
        except Exception:  # a fault of the proxy's own: answered 500 by Starlette, counted (an operator's alarm)
            proxy.metrics.request(500, INTERNAL_ERROR, False, time.perf_counter() - started)
            raise
        finally:
            if held[0]:  # (not handed to a request that runs on)
                allowance.give_back(held[0])

    async def answer(request: Request, proxy: Proxy, owner: str, body: dict[str, Any], held: list[int],
                     started: float) -> Response:
        """The reply to a decoded request (`chat`, which it arrived at ``started``); the allowance ``held`` is
        handed to its task, which gives it back when it ends: a stream's may end after this returns."""
        metadata = body.get("metadata")
        explicit = request.headers.get(CONVERSATION_HEADER)
        if explicit is None and isinstance(metadata, Mapping) and isinstance(metadata.get("conversation_id"), str):
            explicit = metadata["conversation_id"]
        if owner:  # each key's conversations its own: another key replaying a history starts its own
            explicit = f"{owner}:{explicit or ''}"
        REQUEST_OWNER.set(owner)
        UPSTREAM_HEADERS.set(upstream_headers(settings, request.headers.get("authorization")))
        CLIENT_LEFT.set(request.is_disconnected)  # (a retry that waited gives up once its client left: proxy_shared)
        retry = is_retry(request.headers.get(RETRY_COUNT_HEADER))
        task = asyncio.ensure_future(proxy.complete(body, explicit, retry))  # a copy of this context: its headers
        running.add(task)
        task.add_done_callback(running.discard)
        if held[0]:
            size, held[0] = held[0], 0
            task.add_done_callback(lambda _done: allowance.give_back(size))
        if body.get("stream") is not True:
            try:
                reply = await task
            except (Refused, Failed, UpstreamError) as problem:
                return failed(problem, started)
            # a client that left meanwhile (its timeout; its retry comes next) gets nothing: not counted answered
            kind = CLIENT_GONE if await request.is_disconnected() else "ok"
            return counted(JSONResponse(reply.completion, headers=headers(reply)), started, kind)
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        done, _ = await asyncio.wait({task}, timeout=settings.keepalive_s)
        if done:  # answered before the first keepalive: a plain status is still possible
            try:
                reply = task.result()
            except (Refused, Failed, UpstreamError) as problem:
                return failed(problem, started, True)
            return counted(StreamingResponse(iter(sse_chunks(reply.completion, include_usage)),
                                             media_type="text/event-stream", headers=headers(reply)),
                           started, "ok", True)

        outcome = [CLIENT_GONE]  # what the stream ends as (counted for GET /metrics under status 200, sent already)

        async def events() -> AsyncIterator[str]:
            while not task.done():
                yield ": keepalive\n\n"
                await asyncio.wait({task}, timeout=settings.keepalive_s)
            try:
                reply = task.result()
            except (Refused, Failed, UpstreamError) as problem:  # the status is sent: an error event, the end
                outcome[0] = problem.code
                if not isinstance(problem, Refused):
                    logged(problem)  # as a plain request's failure is (review h35 F2: a stream's left no line)
                yield error_event(problem)
                yield "data: [DONE]\n\n"
                return
            outcome[0] = "ok"
            # the headers went out with the first keepalive, before the reply existed: the same lines as comments
            yield "".join(f": {name}: {value}\n" for name, value in headers(reply).items()) + "\n"
            for event in sse_chunks(reply.completion, include_usage):
                yield event

        def ended() -> None:
            """The stream's end, however it came: a client that left (even before its first event, when the
            generator never ran) leaves the request running on, its failure still said and a stop's drain counting
            it; the stream counted once."""
            if outcome[0] == CLIENT_GONE:
                task.add_done_callback(said_if_failed)
                unattended.add(task)
                task.add_done_callback(unattended.discard)
            proxy.metrics.request(200, outcome[0], True, time.perf_counter() - started)

        return WatchedStream(events(), ended, media_type="text/event-stream")

    async def models(request: Request) -> Response:
        if client_owner(settings, request.headers.get("authorization")) is None:
            return failure(unauthorized)
        try:
            response = await holder["proxy"].client.get(
                f"{settings.upstream}/models", headers=upstream_headers(settings, request.headers.get("authorization")),
                timeout=min(settings.timeout_s, 30.0))
        except httpx.HTTPError as problem:
            return failure(Failed(502, "upstream_unreachable", f"the upstream did not answer GET /models: {problem!r}"))
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type", "application/json"))

    async def rounds(request: Request) -> Response:
        """Every upstream call; with --client-keys only the caller's own. Listed a slice at a time, the event loop
        serving the other clients in between (review h40: the 10,000 rounds in one go took ~110 ms of the loop:
        one client polling them made every other client's requests 18 times slower)."""
        owner = client_owner(settings, request.headers.get("authorization"))
        if owner is None:
            return failure(unauthorized)
        records = list(holder["proxy"].rounds)  # (the log goes on meanwhile)
        parts = []
        for start in range(0, len(records), ROUNDS_SLICE):
            part = _ROUNDS_ENCODER.encode([{name: getattr(record, name) for name in _ROUND_FIELDS}
                                           for record in records[start:start + ROUNDS_SLICE]
                                           if record.owner == owner])
            if part != b"[]":
                parts.append(part[1:-1])
            await asyncio.sleep(0)
        return Response(b"[" + b",".join(parts) + b"]", media_type="application/json")

    async def stats(request: Request) -> Response:
        """This instance's counters; as /metrics, they count every client's activity (`counters_refused`)."""
        refused = counters_refused(settings, request.headers.get("authorization"), "/arc/stats")
        if refused is not None:
            return failure(refused)
        return JSONResponse(holder["proxy"].stats())

    async def metrics(request: Request) -> Response:
        """This instance's counters in Prometheus's text format (arc_ref.frontends.proxy_metrics): served to the
        requests that may read /arc/stats (`counters_refused`)."""
        refused = counters_refused(settings, request.headers.get("authorization"), "/metrics")
        if refused is not None:
            return failure(refused)
        proxy = holder["proxy"]
        out = Exposition()
        proxy.write_metrics(out)
        out.gauge("arc_requests_in_flight", "Chat requests running now (one whose client left runs on to its"
                  " commit)", len(running))
        out.gauge("arc_large_bodies_held_bytes", "Bytes of large request bodies held now against"
                  " --bodies-in-flight-mb", allowance.total - allowance.free)
        recent = proxy.known.bodies
        out.counter("arc_bodies_continued_total", "Request bodies decoded from the end of an earlier body's"
                    " messages on (the rest read only)", recent.continued if isinstance(recent, RecentBodies) else 0)
        out.gauge("arc_recent_bodies_bytes", "Memory the bodies decoded last hold, as counted against"
                  " --body-memory-mb", recent.held if isinstance(recent, RecentBodies) else 0)
        out.counter("arc_messages_read_total", "Agent messages read and hashed (those the proxy knows by their"
                    " bytes are not read again)", proxy.known.read)
        return Response(out.text(), media_type=CONTENT_TYPE)

    async def health(request: Request) -> Response:
        """Liveness for a load balancer or an orchestrator (HAProxy's httpchk, a Kubernetes probe): the process
        answers HTTP; asks neither the upstream nor the store, and needs no client key (it tells nothing)."""
        return JSONResponse({"status": "ok"})

    async def not_served(request: Request, problem: Exception) -> Response:
        """Any other path (or method): a JSON error naming what is served (review h30 F7: the OpenAI Agents SDK's
        default Responses API got a bare 'Not Found')."""
        status = getattr(problem, "status_code", 404)
        answer = failure(Failed(status, "not_found" if status == 404 else "method_not_allowed",
                                f"{request.method} {request.url.path} is not served by arc-ref proxy: it serves POST"
                                " /v1/chat/completions (Chat Completions; for the OpenAI Agents SDK:"
                                " set_default_openai_api(\"chat_completions\")), GET /v1/models, GET /arc/rounds,"
                                " GET /arc/stats, GET /metrics and GET /health"))
        allowed = (getattr(problem, "headers", None) or {}).get("Allow")
        if allowed:  # a 405 names the methods the path takes (RFC 9110 15.5.6; review h34 F6)
            answer.headers["Allow"] = allowed
        return answer

    app = Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/arc/rounds", rounds, methods=["GET"]),
        Route("/arc/stats", stats, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ], lifespan=lifespan, exception_handlers={404: not_served, 405: not_served})
    app.state.unattended = unattended
    return app


FEW_OPEN_FILES = 4096  # a limit on open files below this is said at start


def raise_open_files_limit() -> int | None:
    """The process's soft limit on open files raised to its hard limit, and the limit now (None where there is
    none to read). Each request in flight holds two descriptors, its client's connection and its upstream call's;
    a shell's soft limit (1,024 on Linux, 256 on macOS) ran out at a few hundred clients at once, and the event
    loop then refused every new connection, the quick clients' too, logging a traceback for each try, some 16,000
    a second (review h40)."""
    try:
        import resource
    except ImportError:  # (not on Windows)
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    for tried in (wanted, min(wanted, 10240)):  # macOS refuses more than OPEN_MAX (10,240) whatever its hard limit
        if soft != resource.RLIM_INFINITY and soft >= tried:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (tried, hard))
            break
        except (ValueError, OSError):
            continue
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


REQUEST_HEAD_S = 60.0  # a connection that sends no request head in this long (after connecting, or after its last
# reply) is closed


async def serve_server(server: Any, listener: Any, head_s: float = REQUEST_HEAD_S) -> None:
    """The uvicorn ``server`` on ``listener`` until it exits, its connections that send no request head for
    ``head_s`` closed meanwhile (`close_silent_connections`)."""
    sweeper = asyncio.get_running_loop().create_task(close_silent_connections(server.server_state.connections,
                                                                               head_s))
    try:
        await server.serve(sockets=[listener])
    finally:
        sweeper.cancel()


async def close_silent_connections(connections: set[Any], head_s: float) -> None:
    """Every ``head_s / 4`` s: each of the server's ``connections`` that has answered its requests (none runs) and
    received no new request head for ``head_s`` (none since it connected, or since its last request) is shut down
    as uvicorn shuts down an idle connection when it stops. uvicorn closes a kept-alive connection that sends
    nothing 5 s after a reply, but not one that sends nothing from the start, nor one that sends part of a request
    head and then nothing: those stayed open for ever, each holding a file descriptor (review h40: 1,100 of them,
    none closed after 20 s; at the process's limit every other client was refused). A request runs on its
    connection from its head on (its body's stalls are `read_body`'s), however long its reply takes."""
    silent_since: dict[Any, tuple[Any, float]] = {}  # connection -> (its request when first seen idle, that time)
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(head_s / 4)
        now = loop.time()
        for connection in list(connections):
            cycle = getattr(connection, "cycle", None)  # its latest request (uvicorn's h11 and httptools protocols)
            if cycle is not None and not getattr(cycle, "response_complete", True):
                silent_since.pop(connection, None)  # a request runs
                continue
            seen = silent_since.get(connection)
            if seen is None or seen[0] is not cycle:
                silent_since[connection] = (cycle, now)
            elif now - seen[1] >= head_s:
                del silent_since[connection]
                try:
                    connection.shutdown()
                except Exception:  # noqa: BLE001 - whatever its protocol's state: closed all the same
                    transport = getattr(connection, "transport", None)
                    if transport is not None:
                        transport.close()
        for gone in silent_since.keys() - connections:
            del silent_since[gone]


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name))


class CountedApp:
    """The proxy's ASGI ``app`` counting its requests in flight for a stop's lines (`stopping_server`): each HTTP
    request from its head until its reply's last byte is handed to the server (or its handler ends), and then the
    streams whose clients left but whose replies are still to be committed (the app's ``unattended``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.replying = 0

    def in_flight(self) -> int:
        return self.replying + len(getattr(self.app.state, "unattended", ()))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.replying += 1
        counted = True

        async def sending(message: Any) -> None:
            nonlocal counted
            if counted and message["type"] == "http.response.body" and not message.get("more_body", False):
                counted = False
                self.replying -= 1
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if counted:
                self.replying -= 1


def _requests(count: int) -> str:
    return f"{count} request{'' if count == 1 else 's'} in flight"


def stopping_server(config: Any, app: CountedApp) -> Any:
    """A uvicorn server stopped by SIGTERM, SIGHUP or SIGINT as a service manager expects (review h43; systemd
    and Kubernetes stop a service by SIGTERM): the first such signal says so on stderr with the number of requests
    in flight, then the server drains as uvicorn does (its port closed, every request in flight finished, the
    store closed) and its ``stopped_by`` holds the signal; a second signal, any of the three, says so and ends the
    process at once with 128 + its number, the requests in flight cut (as a crash leaves them: nothing
    acknowledged is lost). A signal the process was started with ignored (``nohup``'s SIGHUP) stays ignored.

    Before, uvicorn's own handlers drained quietly and then ended the process by the signal itself (no line, no
    exit status of the table); they did not take SIGHUP (its default action killed the process, nothing drained)
    and took a second SIGTERM for nothing; a second Ctrl-C answered the requests in flight 500 and wrote uvicorn's
    tracebacks on stderr."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        stopped_by: int | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # (uvicorn's hook, called by serve)
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            loop = asyncio.get_running_loop()
            earlier: dict[int, Any] = {}

            def say_draining(number: int) -> None:
                count = app.in_flight()
                said = f"draining {_requests(count)} (a second signal stops it at once)" if count else \
                    "no request in flight"
                print(f"arc-ref proxy: stopped by {signal.Signals(number).name}: {said}", file=sys.stderr,
                      flush=True)

            def stop(number: int, frame: object) -> None:
                if self.stopped_by is None:
                    self.stopped_by = number
                    self.should_exit = True
                    loop.call_soon_threadsafe(say_draining, number)
                    return
                cut = app.in_flight()
                os.write(2, f"arc-ref proxy: stopped at once by a second signal ({signal.Signals(number).name}):"
                            f" {_requests(cut)} cut\n".encode())
                os._exit(128 + number)

            for number in STOP_SIGNALS:
                if signal.getsignal(number) is not signal.SIG_IGN:
                    earlier[number] = signal.signal(number, stop)
            try:
                yield
            finally:
                for number, handler in earlier.items():
                    signal.signal(number, handler)

    return StoppingServer(config)


def serve(options: ProxyOptions, parse_setting: Callable[[str], tuple[str, object]]) -> int:
    """`arc-ref proxy`: check everything that can be checked (exit status 2 and one line, nothing created), then
    serve until interrupted."""
    try:  # the port first (bound, not listening yet): prepare creates the store directory, its index, the tables
        listener = listening_socket(options.host, options.port)  # (review h54: a port in use left them created)
    except (OSError, OverflowError) as problem:
        print(f"arc-ref proxy: cannot listen on {options.host}:{options.port}: "
              f"{getattr(problem, 'strerror', None) or problem}", file=sys.stderr)
        return USAGE.code
    try:
        return _serve_on(listener, options, parse_setting)
    finally:
        listener.close()


def _serve_on(listener: socket.socket, options: ProxyOptions,
              parse_setting: Callable[[str], tuple[str, object]]) -> int:
    """`serve` once its port is bound: the checks, then the server on ``listener``."""
    import uvicorn

    try:
        settings = prepare(settings_from(options, parse_setting))
    except StartRefused as problem:
        print(f"arc-ref proxy: {problem}", file=sys.stderr)
        return USAGE.code
    checked: Any = None  # the database checked here, handed to the app (which then checks nothing again)
    if settings.database is not None:  # reachable, and an ARC database (its schema created when empty)
        from arc_ref.persist.postgres_conversations import AsyncDatabase

        database = checked = AsyncDatabase(settings.database, pool_size=settings.db_connections)
        try:
            database.check_schema()
            asyncio.run(database.check_connection())  # as requests connect (a pooler refusing their options)
        except StoreError as problem:
            print(f"arc-ref proxy: --store: {problem}", file=sys.stderr)
            return USAGE.code
        if database.replies_missing is not None:
            print(f"arc-ref proxy: warning: the database {database.shown}: {database.replies_missing}; a client's"
                  " retry of an answered request that reaches another instance forks the conversation (grant the"
                  " role CREATE and rights on arc_replies, or start one instance with the role that owns ARC's"
                  " tables)", file=sys.stderr, flush=True)
        if database.last_active_missing is not None and not database.last_active:
            print(f"arc-ref proxy: warning: the database {database.shown}: {database.last_active_missing}; commits"
                  " do not record their time, and `arc-ref forget --idle-for` refuses this database (start one"
                  " instance with the role that owns ARC's tables)", file=sys.stderr, flush=True)
        elif database.last_active_missing is not None:
            print(f"arc-ref proxy: warning: the database {database.shown}: {database.last_active_missing}; this"
                  " instance's commits record their time, but not those of an instance started before the column"
                  " arc_tasks.last_active was there or of an older arc-ref, which `arc-ref forget --idle-for` then"
                  " takes for idle (start one instance with the role that owns ARC's tables)", file=sys.stderr,
                  flush=True)
        room = database.server_connections()
        if room is not None and settings.db_connections > room[0] - room[1]:
            allowed, open_now = room
            print(f"arc-ref proxy: warning: --db-connections {settings.db_connections}, but the server takes"
                  f" {allowed} client connections and {open_now} are open now: requests may wait for a connection"
                  " or meet 'too many clients'; lower --db-connections or raise the server's max_connections"
                  " (every instance's --db-connections together, with room to spare)", file=sys.stderr, flush=True)
    open_files = raise_open_files_limit()
    if open_files is not None and open_files < FEW_OPEN_FILES:
        print(f"arc-ref proxy: warning: this process may open {open_files} files at most (ulimit -n; its hard limit"
              f" too): a request in flight holds two (its client's connection and its upstream call), so past some"
              f" {open_files // 2 - 16} clients at once new connections are refused; raise the hard limit",
              file=sys.stderr, flush=True)
    shown_store = settings.store or (f"{shown_url(settings.database)}, up to {settings.db_connections} connections"
                                     if settings.database else "memory")
    print(f"arc-ref proxy: http://{options.host}:{options.port}/v1 -> {settings.upstream} (window"
          f" {settings.context_limit}, store: {shown_store})", flush=True)
    app = CountedApp(build_app(settings, checked))
    server = stopping_server(uvicorn.Config(app, log_level="warning", access_log=False), app)
    asyncio.run(serve_server(server, listener))
    if server.stopped_by is None:
        return OK.code
    print("arc-ref proxy: drained: every request in flight finished; stopped", file=sys.stderr, flush=True)
    return INTERRUPTED.code if server.stopped_by == signal.SIGINT else OK.code


__all__ = ["CountedApp", "build_app", "raise_open_files_limit", "serve", "stopping_server"]
