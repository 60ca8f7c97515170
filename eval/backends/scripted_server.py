"""`arc-eval serve-scripted`: an OpenAI-compatible HTTP server around a policy, answering like vLLM.

It exists so the `openai` backend is exercised end to end over real HTTP on a laptop: the same
client code that talks to vLLM talks to this server, which wraps a policy
``Callable[[Sequence[Message]], str]`` (by default the deterministic scripted agent,
`arc_eval.agent.scripted.ScriptedPolicy`).

Endpoints (the subset of vLLM's server the harness uses):

- ``POST /v1/chat/completions``: the policy's reply, with ``usage`` and ``finish_reason``.
- ``POST /tokenize``: ``{"count", "max_model_len", "tokens"}`` for ``messages`` (or ``prompt``),
  counted exactly as the chat endpoint counts them, so a client's count matches ``usage``.
- ``GET /v1/models``, ``GET /health``, and ``GET /stats`` (requests, ``max_in_flight``...).

Prompt length. Given a model directory (``--tokenizer DIR`` or ``hf-dir:DIR``), the prompt is
that model's own chat template rendered as vLLM renders it, tools and tool calls included, and
encoded with its tokenizer (`arc_eval.counting.TemplateCounter`), with the request's own
``chat_template_kwargs`` as vLLM reads them (`arc_ref.templates.request_template_kwargs`: none sent, none used,
so Qwen3's ``enable_thinking`` is undefined); otherwise it is the ChatML
rendering of the messages (hermes-style tool calls, an approximation of Qwen's template) counted
with an `arc_ref` tokenizer (``o200k_base`` by default). With
``max_model_len`` L and a prompt of N tokens, it answers as vLLM >= 0.32 does (the texts of
`arc_eval.backends.overflow`): N > L is refused with HTTP 400 ("This model's maximum context length
is L tokens. However, your prompt contains N input tokens, which exceeds this limit even without
any output tokens. ..."), N == L with "max_tokens must be at least 1, got 0.", and below that
``max_tokens`` is clamped to L - N; a reply cut at the cap ends with ``finish_reason: "length"``.
``reject_long_completion=True`` answers as vLLM 0.22-0.31: N + max_tokens > L is refused ("...
However, you requested M output tokens and your prompt contains N input tokens, for a total of
N+M tokens. ...").

Answering like a misconfigured vLLM (so a new user's mistakes can be tried without a GPU):
``api_key`` refuses every /v1 request without ``Authorization: Bearer KEY`` with 401
``{"error": "Unauthorized"}`` (vLLM's `--api-key`; /tokenize and /health stay open, as in vLLM);
``auto_tool_choice=False`` refuses tool calling with vLLM's 400 '"auto" tool choice requires
--enable-auto-tool-choice and --tool-call-parser to be set'; ``overflow_every_request`` refuses
every chat request as too long, whatever its length (a server whose real window is far smaller
than it reports); ``never_answer`` accepts chat requests and never answers them (a hung engine:
/v1/models, /tokenize and /health still answer). A wrong model name gets vLLM's 404 "The model
`X` does not exist." in every mode.

Concurrency. Up to ``concurrency`` requests are processed at once (an `asyncio.Semaphore`);
``latency_ms`` adds an artificial service time inside that window so the batching of concurrent
clients is observable; `/stats` reports the largest number of requests seen in that window at once.

HTTP. The endpoints are a Starlette application served by uvicorn (the ASGI server vLLM itself
runs on), started inside the caller's event loop so tests and benches can run it in a thread
(`serve_in_thread`). The policy runs on the event loop, so it must be quick; the artificial
latency is an `asyncio.sleep`.

Fault injection for tests: ``faults`` is a list consumed by successive chat requests; an int is
answered with that HTTP status, ``"drop"`` closes the connection without a complete answer (the
ASGI rule: an application that fails after starting its response has the connection closed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Awaitable, Callable, Generator, Iterator, Mapping, Sequence

import uvicorn
from attrs import define
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from arc_ref.config import PRESETS, TEMPLATE_FORMAT, parse_tools
from arc_ref.templates import request_template_kwargs
from arc_ref.errors import ConfigError
from arc_ref.openai_wire import error_body
from arc_ref.serving import listening_socket
from arc_eval.errors import OK, USAGE, EvalError, InvalidInput
from arc_eval.arguments import OneLineParser, once_each
from arc_eval.backends.server_counting import render_for_count
from arc_eval.backends.servers import SCRIPTED_OWNER
from arc_eval.counting import (
    DEFAULT_CHAT_FORMAT,
    DEFAULT_TOKENIZER,
    TemplateCounter,
    model_directory,
    resolve_counting,
)
from arc_eval.protocol import reply_tool_call, text_view
from arc_eval.registry import MAX_CONCURRENCY, add_option_flags, int_option, float_option, option, options_from_args
from arc_ref.chat import CHAT_FORMATS
from arc_ref.config import MAX_CONFIG_INTEGER
from arc_ref.options import strict_integer
from arc_eval.types import ROLES, Message

Policy = Callable[[Sequence[Message]], str]

DEFAULT_POLICY = "arc_eval.agent.scripted:ScriptedPolicy"
MAX_BODY_BYTES = 256 * 1024 * 1024
_DROP = object()
KEEP_ALIVE_S = 5  # uvicorn's default idle keep-alive, which vLLM keeps
# A request's added service time: at most a minute (a slower one measures nothing but the sleep).
MAX_LATENCY_MS = 60_000.0


class InjectedDrop(EvalError):
    """Raised after the response has started, so that uvicorn closes the connection mid-answer."""


class _QuietInjectedDrops(logging.Filter):
    """Keeps uvicorn's log free of the tracebacks of drops injected on purpose (other errors stay)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], InjectedDrop))


logging.getLogger("uvicorn.error").addFilter(_QuietInjectedDrops())


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server without its own signal handling: whoever embeds it decides when it stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@define
class ServerStats:
    """Counters exposed at `GET /stats`."""

    requests: int = 0
    chat_requests: int = 0
    tokenize_requests: int = 0
    completed: int = 0
    overflows: int = 0
    clamped: int = 0
    faults_injected: int = 0
    unauthorized: int = 0
    stalled: int = 0
    in_flight: int = 0
    max_in_flight: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "chat_requests": self.chat_requests,
            "tokenize_requests": self.tokenize_requests,
            "completed": self.completed,
            "overflows": self.overflows,
            "clamped": self.clamped,
            "faults_injected": self.faults_injected,
            "unauthorized": self.unauthorized,
            "stalled": self.stalled,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }


def _error(
    status: int, message: str, kind: str, param: str | None = None
) -> tuple[int, dict[str, Any]]:
    """An OpenAI error object as vLLM nests it."""
    return status, error_body(message, kind, status, param)


def _json(status: int, payload: Mapping[str, Any] | None) -> Response:
    """A JSON response (an empty body when `payload` is None)."""
    if payload is None:
        return Response(status_code=status)
    return JSONResponse(payload, status_code=status)


class _DroppedResponse(Response):
    """Starts a response that promises a body, then fails: uvicorn closes the connection."""

    def __init__(self) -> None:
        super().__init__(status_code=200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"64")],
            }
        )
        raise InjectedDrop("an injected dropped connection")


def _reported_prompt(prompt_tokens: int, max_input_tokens: int) -> tuple[str, int]:
    """vLLM tokenizes at most max_input + 1 tokens, so a longer prompt is said to hold "at least"
    that many (`TokenizeParams.get_encode_kwargs` / `_token_len_check`)."""
    if prompt_tokens > max_input_tokens + 1:
        return "at least ", max_input_tokens + 1
    return "", prompt_tokens


def overflow_message(max_model_len: int, max_tokens: int, prompt_tokens: int) -> str:
    """vLLM 0.22-0.31's refusal of prompt + max_tokens > max_model_len (renderer length check)."""
    qualifier, shown = _reported_prompt(prompt_tokens, max_model_len - max_tokens)
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{max_tokens} output tokens and your prompt contains {qualifier}{shown} input "
        f"tokens, for a total of {qualifier}{shown + max_tokens} tokens. Please reduce the "
        "length of the input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={shown})"
    )


def prompt_overflow_message(max_model_len: int, prompt_tokens: int) -> str:
    """vLLM >= 0.32's refusal of a prompt longer than max_model_len (it clamps max_tokens below)."""
    qualifier, shown = _reported_prompt(prompt_tokens, max_model_len)
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
        f"contains {qualifier}{shown} input tokens, which exceeds this limit even without any "
        "output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={shown})"
    )


NO_ROOM_MESSAGE = "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
TOOL_CHOICE_MESSAGE = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


class ScriptedServer:
    """The server object `build_app` returns; `start`/`stop` it inside an asyncio event loop."""

    def __init__(
        self,
        policy: Policy,
        *,
        max_model_len: int,
        tokenizer: str = DEFAULT_TOKENIZER,
        concurrency: int = 8,
        latency_ms: float = 0.0,
        model_name: str = "scripted",
        chat_format: str = DEFAULT_CHAT_FORMAT,
        reject_long_completion: bool = False,
        faults: Sequence[int | str] = (),
        api_key: str | None = None,
        auto_tool_choice: bool = True,
        overflow_every_request: bool = False,
        never_answer: bool = False,
    ) -> None:
        from arc_ref.chat import get_chat_format
        from arc_ref.tokenizers import get_tokenizer

        if max_model_len < 2:
            raise InvalidInput(f"max_model_len must be at least 2, got {max_model_len}")
        if concurrency < 1:
            raise InvalidInput(f"concurrency must be at least 1, got {concurrency}")
        if latency_ms < 0:
            raise InvalidInput(f"latency_ms must be >= 0, got {latency_ms}")
        for fault in faults:
            if fault != "drop" and not (isinstance(fault, int) and 400 <= fault <= 599):
                raise InvalidInput(f"a fault is an HTTP status 400-599 or 'drop', got {fault!r}")
        tokenizer, chat_format = resolve_counting(tokenizer, TEMPLATE_FORMAT if model_directory(tokenizer) else chat_format)
        self.template: TemplateCounter | None = None
        if chat_format == TEMPLATE_FORMAT:  # the model's own template, as vLLM serves it
            self.template = TemplateCounter(tokenizer)
        else:
            get_chat_format(chat_format)  # fail early on an unknown name
        self.policy = policy
        self.max_model_len = max_model_len
        self.tokenizer = get_tokenizer(tokenizer)
        self.concurrency = concurrency
        self.latency_s = latency_ms / 1000.0
        self.model_name = model_name
        self.chat_format = chat_format
        self.reject_long_completion = reject_long_completion
        self.api_key = api_key or None
        self.auto_tool_choice = auto_tool_choice
        self.overflow_every_request = overflow_every_request
        self.never_answer = never_answer
        self.stats = ServerStats()
        self._stopping: asyncio.Event | None = None
        self._faults: deque[int | str] = deque(faults)
        self._semaphore: asyncio.Semaphore | None = None
        self._server: _EmbeddedServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self.host: str | None = None
        self.port: int | None = None
        self.app = self._asgi_app()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen on (host, port); port 0 picks a free one. Returns the bound address.

        The socket is bound here (an address in use raises `OSError`), then handed to uvicorn.
        """
        self._semaphore = asyncio.Semaphore(self.concurrency)
        self._stopping = asyncio.Event()
        listener = listening_socket(host, port)  # TCP_NODELAY on its connections, as the proxy's
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=5,
        )
        server = _EmbeddedServer(config)
        self._serving = asyncio.create_task(server.serve(sockets=[listener]))
        while not server.started:
            if self._serving.done():
                self._serving.result()  # raises what stopped it
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.005)
        self._server = server
        self.host, self.port = host, int(listener.getsockname()[1])
        return self.host, self.port

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"http://{self.host}:{self.port}/v1"

    async def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()  # requests held by never_answer end now
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving
            self._server = None
            self._serving = None

    def inject_faults(self, faults: Sequence[int | str]) -> None:
        """Queue faults for the next chat requests (see the module docstring)."""
        self._faults.extend(faults)

    # -- HTTP -----------------------------------------------------------------------------------

    def _asgi_app(self) -> ASGIApp:
        """The Starlette routes, wrapped so that every request (routed or not) is counted."""
        routes = [
            Route("/v1/chat/completions", self._endpoint(self._chat), methods=["POST"]),
            Route("/tokenize", self._endpoint(self._tokenize), methods=["POST"]),
            Route("/v1/models", self._endpoint(self._models), methods=["GET"]),
            Route("/health", self._endpoint(self._health), methods=["GET"]),
            Route("/stats", self._endpoint(self._stats), methods=["GET"]),
        ]
        starlette = Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_error},
        )

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                self.stats.requests += 1
                if self.api_key is not None and str(scope["path"]).startswith("/v1"):
                    # vLLM's AuthenticationMiddleware: a bearer token on every /v1 path
                    given = Request(scope).headers.get("authorization", "")
                    if given != f"Bearer {self.api_key}":
                        self.stats.unauthorized += 1
                        refusal = JSONResponse({"error": "Unauthorized"}, status_code=401)
                        await refusal(scope, receive, send)
                        return
            await starlette(scope, receive, send)

        return counted

    @staticmethod
    async def _http_error(request: Request, failure: Exception) -> Response:
        """Routing errors (404, 405) as OpenAI error objects, like every other error here."""
        assert isinstance(failure, HTTPException)
        status = failure.status_code
        if status == 404:
            return _json(*_error(404, f"no route {request.url.path}", "NotFoundError"))
        if status == 405:
            return _json(*_error(405, f"{request.url.path} does not accept {request.method}",
                                 "MethodNotAllowed"))
        return _json(*_error(status, str(failure.detail), "BadRequestError"))

    def _endpoint(
        self, handler: Callable[[bytes], Any]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A Starlette endpoint around ``handler(body) -> (status, JSON or None) | _DROP``."""

        async def endpoint(request: Request) -> Response:
            declared = request.headers.get("content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
                return _json(*_error(413, "bad or too large Content-Length", "BadRequestError"))
            body = await request.body()
            result = handler(body)
            if asyncio.iscoroutine(result):
                result = await result
            if result is _DROP:
                return _DroppedResponse()
            status, payload = result
            return _json(int(status), payload)

        return endpoint

    # -- endpoints ------------------------------------------------------------------------------

    def _health(self, _body: bytes) -> tuple[int, None]:
        return 200, None

    def _stats(self, _body: bytes) -> tuple[int, dict[str, Any]]:
        return 200, self.stats.as_json()

    def _models(self, _body: bytes) -> tuple[int, dict[str, Any]]:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": SCRIPTED_OWNER,
            "root": self.model_name,
            "max_model_len": self.max_model_len,
        }
        return 200, {"object": "list", "data": [card]}

    @staticmethod
    def _json_body(body: bytes) -> dict[str, Any] | tuple[int, dict[str, Any]]:
        try:
            parsed = json.loads(body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as failure:
            return _error(400, f"the body is not JSON: {failure}", "BadRequestError")
        if not isinstance(parsed, dict):
            return _error(400, "the body must be a JSON object", "BadRequestError")
        return parsed

    def _check_messages(
        self, request: Mapping[str, Any]
    ) -> list[dict[str, Any]] | tuple[int, dict[str, Any]]:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError", "messages")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                return _error(
                    400,
                    f"messages[{index}] needs a role among {', '.join(ROLES)}",
                    "BadRequestError",
                    "messages",
                )
            if not isinstance(message.get("content") or "", str):
                return _error(
                    400, f"messages[{index}].content must be text", "BadRequestError", "messages"
                )
        return messages

    def count_messages(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
        request: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Token ids of the prompt the way this server renders it (chat and /tokenize alike): with the model's
        template, the ``chat_template_kwargs`` vLLM derives from ``request`` (none when it sends none)."""
        if self.template is not None:
            specs = parse_tools(list(tools)) if tools else ()
            kwargs = request_template_kwargs(request or {})
            return self.tokenizer.encode(self.template.render_request(messages, specs, kwargs))
        return self.tokenizer.encode(render_for_count(messages, tools, self.chat_format))

    def _tokenize(self, body: bytes) -> tuple[int, dict[str, Any]]:
        self.stats.tokenize_requests += 1
        request = self._json_body(body)
        if isinstance(request, tuple):
            return request
        if "prompt" in request and "messages" not in request:
            tokens = self.tokenizer.encode(str(request["prompt"]))
        else:
            messages = self._check_messages(request)
            if isinstance(messages, tuple):
                return messages
            try:
                tokens = self.count_messages(messages, request.get("tools"), request)
            except ConfigError as bad:  # a malformed tool, or a conversation the template refuses
                return _error(400, str(bad), "BadRequestError")
        return 200, {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens}

    async def _chat(self, body: bytes) -> tuple[int, dict[str, Any]] | object:
        self.stats.chat_requests += 1
        if self._faults:
            fault = self._faults.popleft()
            self.stats.faults_injected += 1
            if fault == "drop":
                return _DROP
            return _error(int(fault), f"injected fault {fault}", "InternalServerError")
        request = self._json_body(body)
        if isinstance(request, tuple):
            return request
        if request.get("model") != self.model_name:
            return _error(
                404, f"The model `{request.get('model')}` does not exist.", "NotFoundError", "model"
            )
        messages = self._check_messages(request)
        if isinstance(messages, tuple):
            return messages
        tools = request.get("tools") or None
        tool_choice = request.get("tool_choice")
        if tools and not self.auto_tool_choice and tool_choice in (None, "auto"):
            return _error(400, TOOL_CHOICE_MESSAGE, "BadRequestError")
        try:
            prompt_tokens = len(self.count_messages(messages, tools, request))
        except ConfigError as bad:  # a malformed tool, or a conversation the template refuses
            return _error(400, str(bad), "BadRequestError")
        requested = request.get("max_tokens")
        if requested is None:
            requested = request.get("max_completion_tokens")
        if requested is not None and (not isinstance(requested, int) or requested < 1):
            return _error(
                400,
                f"max_tokens must be a positive integer, got {requested!r}",
                "BadRequestError",
                "max_tokens",
            )
        refusal = self._length_refusal(prompt_tokens, requested)
        if refusal is not None:
            self.stats.overflows += 1
            return _error(400, refusal[0], "BadRequestError", refusal[1])
        if self.never_answer:
            self.stats.stalled += 1
            assert self._stopping is not None
            await self._stopping.wait()
            return _error(503, "the server is shutting down", "ServiceUnavailableError")
        room = self.max_model_len - prompt_tokens
        cap = room if requested is None else min(requested, room)
        if requested is not None and requested > room:
            self.stats.clamped += 1
        assert self._semaphore is not None
        async with self._semaphore:
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
            try:
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                reply = self.policy(self._policy_messages(messages, tools))
            except Exception as failure:  # the policy's bug is the server's 500, never a reply
                print(f"serve-scripted: the policy failed: {failure!r}", file=sys.stderr)
                return _error(500, f"the policy failed: {failure}", "InternalServerError")
            finally:
                self.stats.in_flight -= 1
        return 200, self._completion(reply, cap, prompt_tokens, tools)

    def _length_refusal(self, prompt_tokens: int, requested: int | None) -> tuple[str, str] | None:
        """(vLLM's message, its parameter) when the request does not fit; None when it does."""
        limit = self.max_model_len
        if self.overflow_every_request:
            return prompt_overflow_message(limit, prompt_tokens), "input_tokens"
        if self.reject_long_completion:  # vLLM 0.22-0.31: max_input_tokens = L - max_tokens
            asked = requested or 0
            if prompt_tokens + asked > limit:
                return overflow_message(limit, asked, prompt_tokens), "input_tokens"
        elif prompt_tokens > limit:  # vLLM >= 0.32: max_input_tokens = L
            return prompt_overflow_message(limit, prompt_tokens), "input_tokens"
        if prompt_tokens >= limit:  # get_max_tokens leaves 0, which SamplingParams refuses
            return NO_ROOM_MESSAGE, "max_tokens"
        return None

    @staticmethod
    def _policy_messages(
        messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[Message]:
        """Request messages as the policy sees them: tool calls back in text-action form
        (`arc_eval.protocol.text_view`, as the in-process scripted backend shows them)."""
        specs = parse_tools(list(tools)) if tools else ()
        return text_view([Message.from_json(message) for message in messages], specs)

    def _completion(
        self, reply: str, cap: int, prompt_tokens: int, tools: Sequence[Mapping[str, Any]] | None
    ) -> dict[str, Any]:
        tokens = self.tokenizer.encode(reply)
        finish_reason = "stop"
        if len(tokens) > cap:
            tokens = tokens[:cap]
            reply = self.tokenizer.decode(tokens)
            finish_reason = "length"
        message: dict[str, Any] = {"role": "assistant", "content": reply}
        if tools and finish_reason == "stop":
            thought, calls = reply_tool_call(reply, parse_tools(list(tools)), f"call_{self.stats.completed}")
            if calls:
                message = {
                    "role": "assistant",
                    "content": thought or None,
                    "tool_calls": [call.openai() for call in calls],
                }
                finish_reason = "tool_calls"
        self.stats.completed += 1
        return {
            "id": f"chatcmpl-scripted-{self.stats.completed}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(tokens),
                "total_tokens": prompt_tokens + len(tokens),
            },
        }


def build_app(
    policy: Policy,
    *,
    max_model_len: int,
    tokenizer: str = DEFAULT_TOKENIZER,
    concurrency: int = 8,
    latency_ms: float = 0.0,
    model_name: str = "scripted",
    **options: Any,
) -> ScriptedServer:
    """The server around `policy`; extra `options` go to `ScriptedServer` (chat_format...)."""
    return ScriptedServer(
        policy,
        max_model_len=max_model_len,
        tokenizer=tokenizer,
        concurrency=concurrency,
        latency_ms=latency_ms,
        model_name=model_name,
        **options,
    )


@contextlib.contextmanager
def serve_in_thread(app: ScriptedServer, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run `app` on its own event loop in a daemon thread; yields its base URL (`.../v1`)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(app.start(host, port))
        except BaseException as error:  # reported to the caller below
            failure.append(error)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(app.stop())
        loop.close()

    thread = threading.Thread(target=run, name="serve-scripted", daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the scripted server did not start within 30 s")
    if failure:
        raise failure[0]
    try:
        yield app.base_url
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def load_policy(spec: str) -> Policy:
    """`module:attribute` -> a policy; a class is instantiated without arguments."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"--policy must look like module:attribute, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as failure:
        raise InvalidInput(f"cannot import the policy module {module_name!r}: {failure}") from None
    try:
        target = getattr(module, attribute)
    except AttributeError:
        raise InvalidInput(f"module {module_name!r} has no {attribute!r}") from None
    policy = target() if isinstance(target, type) else target
    if not callable(policy):
        raise InvalidInput(f"{spec} is not callable")
    return policy  # type: ignore[no-any-return]


def parse_faults(text: str) -> tuple[int | str, ...]:
    """``--inject-faults``: comma-separated answers of the first chat requests, each an HTTP status 400-599 (ASCII
    digits) or ``drop``; a status may repeat (each answers one request)."""
    faults: list[int | str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "drop":
            faults.append(item)
            continue
        try:
            faults.append(strict_integer(item, 400, 599))
        except ValueError:
            raise argparse.ArgumentTypeError(f"a fault is an HTTP status 400-599 or 'drop', got {item!r}") from None
    return tuple(faults)


@define(frozen=True)
class ServeOptions:
    """The knobs of ``arc-eval serve-scripted`` (its flags derive from them, ``arc_ref.options``); the last five
    answer like a misconfigured vLLM, to try a run's failures without a GPU."""

    host: str = option("127.0.0.1", help="the address to listen on")
    port: int = int_option(8000, minimum=0, maximum=65535, help="the port to listen on (0: any free port)")
    max_model_len: int = int_option(PRESETS["paper"].context_limit, minimum=2, maximum=MAX_CONFIG_INTEGER,
                                    metavar="L", help="context window L (tokens)")
    tokenizer: str = option(DEFAULT_TOKENIZER, metavar="DIR|NAME",
                            help="a model directory (its tokenizer.json and chat template, rendered as vLLM renders "
                                 "them), or an arc_ref tokenizer: bytes, o200k_base, cl100k_base, hf:PATH, hf-dir:DIR")
    chat_format: str = option(DEFAULT_CHAT_FORMAT, choices=tuple(CHAT_FORMATS),
                              help="the chat format without a model directory")
    concurrency: int = int_option(8, minimum=1, maximum=MAX_CONCURRENCY, metavar="N",
                                  help="requests processed at once")
    latency_ms: float = float_option(0.0, minimum=0, maximum=MAX_LATENCY_MS, metavar="MS",
                                     help="artificial service time per request")
    model_name: str = option("scripted", aliases=("--served-model-name",), metavar="NAME",
                             help="the served model name")
    policy: str = option(DEFAULT_POLICY, metavar="MODULE:ATTRIBUTE", help="the policy")
    reject_long_completion: bool = option(False, store_true=True,
                                          help="refuse prompt + max_tokens > max-model-len (vLLM <= 0.31) instead of "
                                               "clamping")
    inject_faults: tuple[int | str, ...] = option((), parse=parse_faults, converter=tuple, metavar="FAULTS",
                                                  help="e.g. 503,drop,500: answers of the first chat requests")
    api_key: str | None = option(None, metavar="KEY",
                                 help="require this bearer key on /v1 paths (401 otherwise), like vllm --api-key")
    no_auto_tool_choice: bool = option(False, store_true=True,
                                       help="refuse tool_choice=auto like a vLLM started without "
                                            "--enable-auto-tool-choice")
    overflow_every_request: bool = option(False, store_true=True,
                                          help="refuse every chat request as too long, whatever its length")
    never_answer: bool = option(False, store_true=True,
                                help="accept chat requests and never answer them (a hung engine)")


SERVE_OWNER = "serve"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="arc-eval serve-scripted",
        description="Serve the deterministic scripted agent as an OpenAI-compatible endpoint that "
        "answers over-long prompts the way vLLM does (and, with the last five flags, like a misconfigured vLLM).",
    )
    add_option_flags(parser, SERVE_OWNER, ServeOptions)
    return once_each(parser)  # a flag given twice is refused


def serve_main(argv: list[str]) -> int:
    """`arc-eval serve-scripted`: serves until SIGINT/SIGTERM; returns the exit code (2: bad arguments)."""
    try:
        given = _parser().parse_args(argv)
    except SystemExit as done:  # --help, or a usage error argparse has already printed
        return done.code if isinstance(done.code, int) else 2
    try:
        args = options_from_args(SERVE_OWNER, ServeOptions, given)
        policy = load_policy(args.policy)
        app = build_app(
            policy,
            max_model_len=args.max_model_len,
            tokenizer=args.tokenizer,
            concurrency=args.concurrency,
            latency_ms=args.latency_ms,
            model_name=args.model_name,
            chat_format=args.chat_format,
            reject_long_completion=args.reject_long_completion,
            faults=args.inject_faults,
            api_key=args.api_key,
            auto_tool_choice=not args.no_auto_tool_choice,
            overflow_every_request=args.overflow_every_request,
            never_answer=args.never_answer,
        )
    except Exception as failure:
        print(f"arc-eval serve-scripted: {failure}", file=sys.stderr)
        return USAGE.code

    async def serve() -> None:
        try:
            await app.start(args.host, args.port)
        except OSError as failure:
            reason = failure.strerror or failure
            raise SystemExit(
                f"arc-eval serve-scripted: cannot listen on {args.host}:{args.port}: {reason}"
            ) from None
        modes = [
            label
            for label, on in (
                ("api key required", app.api_key is not None),
                ("tool choice refused", not app.auto_tool_choice),
                ("every request overflows", app.overflow_every_request),
                ("never answers chat", app.never_answer),
                ("refuses prompt + max_tokens > max model len", app.reject_long_completion),
            )
            if on
        ]
        print(
            f"serve-scripted: {app.base_url} (model {app.model_name}, max model len "
            f"{app.max_model_len}, concurrency {app.concurrency}"
            + "".join(f"; {mode}" for mode in modes)
            + "); Ctrl-C stops",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await app.stop()
        print(f"serve-scripted: stopped; {json.dumps(app.stats.as_json())}", flush=True)

    try:
        asyncio.run(serve())
    except SystemExit as exit_request:
        print(exit_request, file=sys.stderr)
        return USAGE.code
    return OK.code
