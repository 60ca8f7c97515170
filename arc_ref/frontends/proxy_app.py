"""`arc-ref proxy`'s HTTP server: the Starlette application in front of one process's `Proxy`, or of the
`SharedProxy` of many instances on one database (arc_ref.frontends.proxy_shared), and `serve`.

Apart from `arc_ref.frontends.proxy` so that neither proxy module imports the other (no circle of imports).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any, AsyncIterator, Callable, Mapping

import attrs
import httpx
import msgspec

from arc_ref.frontends.exit_status import OK, USAGE
from arc_ref.frontends.proxy import (
    CONVERSATION_HEADER,
    REQUEST_OWNER,
    UPSTREAM_HEADERS,
    Failed,
    KnownMessages,
    Proxy,
    RawMessage,
    ProxySettings,
    Refused,
    Reply,
    UpstreamError,
    StartRefused,
    UNREADABLE,
    prepare,
    settings_from,
    sse_chunks,
    client_owner,
    read_json_value,
    upstream_headers,
)

from arc_ref.frontends.proxy_options import ProxyOptions
from arc_ref.json_limits import nesting_problem
from arc_ref.openai_wire import error_body
from arc_ref.persist import StoreError
from arc_ref.persist.postgres import shown_url
from arc_ref.serving import listening_socket


LARGE_BODY_BYTES = 4 * 2**20  # a body above this is decoded in a worker thread
_SPLIT_BODY = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SPLIT_LIST = msgspec.json.Decoder(list[msgspec.Raw])


def decode_body(raw: bytes, known: KnownMessages | None = None) -> dict[str, Any]:
    """The body's JSON object, its ``messages`` as `RawMessage`s (their texts and digests; read unless ``known``
    holds their digest: a message read before is not read again); Refused when it is not JSON, not an object, or
    nested deeper than the limit of json_limits (checked before any reader recurses: spec/trace.md section 2).

    The body is split into its members' texts (msgspec, which recurses no deeper than the interpreter allows),
    each read as the json module reads it (`read_json_value`), each message's depth counted with the body's two
    levels around it; anything the split does not pass (not JSON, not an object, too deep, NaN...) is decoded
    whole as before (`decode_whole`), so every body is read or refused as the json module would."""
    split = _split_body(raw, known)
    return split if split is not None else decode_whole(raw)


def _split_body(raw: bytes, known: KnownMessages | None) -> dict[str, Any] | None:
    try:
        members = _SPLIT_BODY.decode(raw)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    body: dict[str, Any] = {}
    for name, text in members.items():
        if name != "messages":
            value = read_json_value(text, 1)
            if value is UNREADABLE:
                return None
            body[name] = value
            continue
        try:
            items = _SPLIT_LIST.decode(text)
        except (msgspec.MsgspecError, ValueError, RecursionError):
            return None  # not an array: decoded whole, refused by parse_request
        messages = []
        for item in items:
            message = RawMessage(item, hashlib.sha256(item).digest())
            if known is None or message.digest not in known.roles:
                message.value = read_json_value(item, 2)
                if message.value is UNREADABLE:
                    return None
            messages.append(message)
        body[name] = messages
    return body


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


def error_event(problem: Exception) -> str:
    """The SSE event of a failure met after the stream began (its status cannot change any more): the typed
    body of a refusal or failure, the upstream's own error body when it is one."""
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


def build_app(settings: ProxySettings) -> Any:
    """The Starlette application of the proxy (its httpx client opened and closed with the app)."""
    import contextlib

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    holder: dict[str, Proxy] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async with httpx.AsyncClient(limits=limits, timeout=settings.timeout_s) as client:
            if settings.database is not None:  # many instances on one database (issue 30)
                from arc_ref.frontends.proxy_shared import SharedProxy

                holder["proxy"] = SharedProxy(settings, client)
            else:
                holder["proxy"] = Proxy(settings, client)
            app.state.proxy = holder["proxy"]
            try:
                yield
            finally:
                await holder["proxy"].close()

    def headers(reply: Reply) -> dict[str, str]:
        return {"x-arc-hidden-rounds": str(reply.hidden_rounds), "x-arc-view-tokens": str(reply.view_tokens),
                "x-arc-conversation": reply.conversation}

    def failure(problem: Exception) -> Response:
        if isinstance(problem, Refused):
            return JSONResponse(problem.body(), status_code=problem.http_status_hint)
        if isinstance(problem, Failed):
            extra = {"retry-after": str(problem.retry_after)} if problem.retry_after is not None else None
            return JSONResponse(problem.body(), status_code=problem.status, headers=extra)
        assert isinstance(problem, UpstreamError)
        return Response(problem.body, status_code=problem.status, media_type=problem.content_type)

    async def read_body(request: Request) -> bytes:
        """The body, refused (413) as soon as it passes the limit: never held whole when too large."""
        limit = settings.max_body_bytes
        too_large = Failed(413, "request_too_large", f"the request body is over the proxy's limit of {limit} bytes"
                           " (--max-body-mb)")
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    unauthorized = Failed(401, "unauthorized", "this proxy needs a client key: Authorization: Bearer KEY")

    async def chat(request: Request) -> Response:
        proxy = holder["proxy"]
        owner = client_owner(settings, request.headers.get("authorization"))
        if owner is None:
            return failure(unauthorized)
        try:
            raw = await read_body(request)
            # a very large body is decoded in a worker thread: the other clients' requests go on meanwhile
            body = (decode_body(raw, proxy.known) if len(raw) <= LARGE_BODY_BYTES
                    else await asyncio.to_thread(decode_body, raw, proxy.known))
        except (Refused, Failed) as problem:
            return failure(problem)
        metadata = body.get("metadata")
        explicit = request.headers.get(CONVERSATION_HEADER)
        if explicit is None and isinstance(metadata, Mapping) and isinstance(metadata.get("conversation_id"), str):
            explicit = metadata["conversation_id"]
        if owner:  # each key's conversations its own: another key replaying a history starts its own
            explicit = f"{owner}:{explicit or ''}"
        REQUEST_OWNER.set(owner)
        UPSTREAM_HEADERS.set(upstream_headers(settings, request.headers.get("authorization")))
        task = asyncio.ensure_future(proxy.complete(body, explicit))  # a copy of this context: its headers
        if body.get("stream") is not True:
            try:
                reply = await task
            except (Refused, Failed, UpstreamError) as problem:
                return failure(problem)
            return JSONResponse(reply.completion, headers=headers(reply))
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        done, _ = await asyncio.wait({task}, timeout=settings.keepalive_s)
        if done:  # answered before the first keepalive: a plain status is still possible
            try:
                reply = task.result()
            except (Refused, Failed, UpstreamError) as problem:
                return failure(problem)
            return StreamingResponse(iter(sse_chunks(reply.completion, include_usage)),
                                     media_type="text/event-stream", headers=headers(reply))

        async def events() -> AsyncIterator[str]:
            while not task.done():
                yield ": keepalive\n\n"
                await asyncio.wait({task}, timeout=settings.keepalive_s)
            try:
                reply = task.result()
            except (Refused, Failed, UpstreamError) as problem:  # the status is sent: an error event, then the end
                yield error_event(problem)
                yield "data: [DONE]\n\n"
                return
            for event in sse_chunks(reply.completion, include_usage):
                yield event

        return StreamingResponse(events(), media_type="text/event-stream")

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
        """Every upstream call; with --client-keys only the caller's own."""
        owner = client_owner(settings, request.headers.get("authorization"))
        if owner is None:
            return failure(unauthorized)
        return JSONResponse([{name: value for name, value in attrs.asdict(record).items() if name != "owner"}
                             for record in holder["proxy"].rounds if record.owner == owner])

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/arc/rounds", rounds, methods=["GET"]),
    ], lifespan=lifespan)


def serve(options: ProxyOptions, parse_setting: Callable[[str], tuple[str, object]]) -> int:
    """`arc-ref proxy`: check everything that can be checked (exit status 2 and one line, nothing created), then
    serve until interrupted."""
    import uvicorn

    try:
        settings = prepare(settings_from(options, parse_setting))
    except StartRefused as problem:
        print(f"arc-ref proxy: {problem}", file=sys.stderr)
        return USAGE.code
    if settings.database is not None:  # reachable, and an ARC database (its schema created when empty)
        from arc_ref.persist.postgres_conversations import AsyncDatabase

        try:
            AsyncDatabase(settings.database).check_schema()
        except StoreError as problem:
            print(f"arc-ref proxy: --store: {problem}", file=sys.stderr)
            return USAGE.code
    try:
        listener = listening_socket(options.host, options.port)
    except (OSError, OverflowError) as problem:
        print(f"arc-ref proxy: cannot listen on {options.host}:{options.port}: "
              f"{getattr(problem, 'strerror', None) or problem}", file=sys.stderr)
        return USAGE.code
    shown_store = settings.store or (shown_url(settings.database) if settings.database else "memory")
    print(f"arc-ref proxy: http://{options.host}:{options.port}/v1 -> {settings.upstream} (window"
          f" {settings.context_limit}, store: {shown_store})", flush=True)
    server = uvicorn.Server(uvicorn.Config(build_app(settings), log_level="warning", access_log=False))
    asyncio.run(server.serve(sockets=[listener]))
    return OK.code


__all__ = ["build_app", "serve"]
