"""`arc-ref proxy`'s HTTP server: the Starlette application in front of one process's `Proxy`, or of the
`SharedProxy` of many instances on one database (arc_ref.frontends.proxy_shared), and `serve`.

Apart from `arc_ref.frontends.proxy` so that neither proxy module imports the other (no circle of imports).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, AsyncIterator, Callable, Mapping

import attrs
import httpx

from arc_ref.errors import ArcError
from arc_ref.frontends.exit_status import OK, USAGE
from arc_ref.frontends.proxy import (
    CONVERSATION_HEADER,
    Proxy,
    ProxySettings,
    Refused,
    Reply,
    UpstreamError,
    settings_from,
    sse_chunks,
)
from arc_ref.json_limits import nesting_problem
from arc_ref.openai_wire import error_body
from arc_ref.persist import StoreError
from arc_ref.persist.postgres import shown_url
from arc_ref.serving import listening_socket


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
        assert isinstance(problem, UpstreamError)
        return Response(problem.body, status_code=problem.status, media_type=problem.content_type)

    async def chat(request: Request) -> Response:
        proxy = holder["proxy"]
        raw = await request.body()
        too_deep = nesting_problem(raw)  # before json.loads, which recurses (spec/trace.md section 2)
        if too_deep is not None:
            return JSONResponse(Refused("bad_request", f"the body is JSON {too_deep}").body(), status_code=400)
        try:
            body = json.loads(raw)
        except ValueError:
            return JSONResponse(Refused("bad_request", "the body is not JSON").body(), status_code=400)
        if not isinstance(body, dict):
            return JSONResponse(Refused("bad_request", "the body must be a JSON object").body(), status_code=400)
        metadata = body.get("metadata")
        explicit = request.headers.get(CONVERSATION_HEADER)
        if explicit is None and isinstance(metadata, Mapping) and isinstance(metadata.get("conversation_id"), str):
            explicit = metadata["conversation_id"]
        task = asyncio.ensure_future(proxy.complete(body, explicit))
        if not body.get("stream"):
            try:
                reply = await task
            except (Refused, UpstreamError) as problem:
                return failure(problem)
            return JSONResponse(reply.completion, headers=headers(reply))
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        done, _ = await asyncio.wait({task}, timeout=settings.keepalive_s)
        if done:  # answered before the first keepalive: a plain status is still possible
            try:
                reply = task.result()
            except (Refused, UpstreamError) as problem:
                return failure(problem)
            return StreamingResponse(iter(sse_chunks(reply.completion, include_usage)),
                                     media_type="text/event-stream", headers=headers(reply))

        async def events() -> AsyncIterator[str]:
            while not task.done():
                yield ": keepalive\n\n"
                await asyncio.wait({task}, timeout=settings.keepalive_s)
            try:
                reply = task.result()
            except Refused as problem:
                yield f"data: {json.dumps(problem.body())}\n\n"
                return
            except UpstreamError as problem:
                error = error_body(problem.body.decode("utf-8", "replace"), "upstream_error", problem.status)
                yield f"data: {json.dumps(error)}\n\n"
                return
            for event in sse_chunks(reply.completion, include_usage):
                yield event

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        response = await holder["proxy"].client.get(f"{settings.upstream}/models")
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type", "application/json"))

    async def rounds(request: Request) -> Response:
        return JSONResponse([attrs.asdict(record) for record in holder["proxy"].rounds])

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/arc/rounds", rounds, methods=["GET"]),
    ], lifespan=lifespan)


def serve(arguments: argparse.Namespace, parse_setting: Callable[[str], tuple[str, object]]) -> int:
    """`arc-ref proxy`: serve until interrupted."""
    import uvicorn

    try:
        settings = settings_from(arguments, parse_setting)
    except (ValueError, ArcError) as problem:
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
        listener = listening_socket(arguments.host, arguments.port)
    except OSError as problem:
        print(f"arc-ref proxy: cannot listen on {arguments.host}:{arguments.port}: {problem.strerror or problem}",
              file=sys.stderr)
        return USAGE.code
    print(f"arc-ref proxy: http://{arguments.host}:{arguments.port}/v1 -> {settings.upstream}"
          f" (store: {settings.store or (shown_url(settings.database) if settings.database else 'memory')})",
          flush=True)
    server = uvicorn.Server(uvicorn.Config(build_app(settings), log_level="warning", access_log=False))
    asyncio.run(server.serve(sockets=[listener]))
    return OK.code


__all__ = ["build_app", "serve"]
