"""`OpenAIBackend`: an OpenAI-compatible chat server (vLLM, llama.cpp's `llama-server`, or any other
that speaks the API), driven with `httpx.AsyncClient` so N trajectories are in flight at once.

Before the first task, `check_server()` (the runner calls it) asks every replica's
``GET /v1/models``: which server it is (`arc_eval.backends.servers`), that it serves ``model``, and
that its window is not smaller than ``context_limit`` (an error naming the fix; a larger window is
said once); then a 1-token chat completion per replica checks that the server answers at all, with
the API key, and, in tool mode, that tool calling is switched on.

What one `complete()` does:

1. Counts the prompt with what the server offers, exactly as the chat endpoint will count it:
   vLLM's ``POST /tokenize`` with the same ``messages`` (plus ``add_generation_prompt``,
   ``chat_template_kwargs`` and ``tools``), or llama.cpp's ``POST /apply-template`` then ``POST
   /tokenize`` of the rendered prompt. A server with neither (or ``count_with="local"``) is
   counted locally (`_local_count`: the run's counter, `arc_eval.counting`, the same function the
   methods count with; with ``--tokenizer DIR`` the model directory's own template and tokenizer,
   exact); a local count gets a safety margin, the largest amount by which the server's
   ``usage.prompt_tokens`` has exceeded it so far.
2. Enforces the usable budget itself: prompt > context_limit - max_tokens raises `ContextOverflow`
   with no request sent (vLLM >= 0.32 and llama.cpp clamp a too-large max_tokens instead of
   refusing it; vLLM <= 0.31 refuses; see `arc_eval.backends.overflow`).
3. ``POST {base}/chat/completions`` with ``max_tokens``, ``temperature`` and
   ``chat_template_kwargs: {"enable_thinking": false}`` (Qwen3's switch; other templates ignore
   it). A 400 whose message says the context is too long raises `ContextOverflow`, unless the
   prompt is far under the server's own window (an exact count that fits, or a local one under
   half of it): that server misreports its window, which `BackendRequestError` reports rather than
   letting every task be scored as no answer. Any other refusal raises `BackendRequestError` with
   the cause and the fix (`arc_eval.backends.faults`), never retried. Refused or dropped
   connections, 5xx and 429 are retried with exponential backoff and jitter, on the next replica;
   then `BackendUnavailable`. Timeouts are bounded per attempt (connect, first byte, whole
   request) and per call (`call_budget_s`): `retry_policy()` states the budget.
4. Reads the reply strictly (`arc_eval.backends.replies`: a reply that is not what the API
   promises is a `BackendReplyError`) and returns it with the server's ``usage`` (authoritative),
   the harness's own count (``counted_prompt_tokens``) and ``finish_reason`` ("length" when the
   completion hit its cap, clamped or not; "tool_calls" is reported as "stop").

All three errors are `arc_eval.types.BackendError`s: the run stops, the task in flight is not
recorded, and the same command resumes after the fix.

Replicas. With several base URLs a call goes to the replica chosen by a CRC-32 of
``request.tags["task_id"]``, so one trajectory stays on one replica and the server's prefix cache
keeps serving its growing prompt; calls without a task id go round-robin. A retry moves to the next
replica. Base URLs may be given with or without the trailing ``/v1``.

Tool calling. Messages are sent exactly as the method built them (`arc_eval.types.Message.as_json`:
an assistant's ``tool_calls`` with the arguments' JSON text as the model produced it, a ``tool``
message's ``tool_call_id``), with the request's own ``tools`` (``ChatRequest.tools``: the method's
listing on agent calls, none on condensing calls), ``tool_choice: "auto"`` and
``parallel_tool_calls: false`` (one call per reply); what is counted is exactly what is sent. vLLM
needs ``--enable-auto-tool-choice --tool-call-parser hermes`` for Qwen3, and >= 0.9.0 for
`/tokenize` to count the tool listing; llama-server needs ``--jinja``, its default. The reply's
calls come back as ``ChatReply.tool_calls`` (id, name, arguments as returned; an object of
arguments is written as JSON text), its text (reasoning removed) as the content.

Temperature and max_tokens: the backend's settings are the run's; a request's ``max_tokens`` may
only lower the completion cap. ``latency_s`` is the wall time of the successful HTTP attempt.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import ssl
import sys
import time
import zlib
from typing import Any, Mapping, Sequence, TextIO

import httpx
from attrs import frozen

from arc_eval.errors import InvalidInput
from arc_eval.backends.faults import configuration_fault, refusal_message, retry_hint
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.replies import parse_completion
from arc_eval.backends.servers import (
    LLAMA_CPP,
    VLLM,
    ServerInfo,
    parse_models,
    template_prompt,
    tokenize_count,
    tokens_list_length,
)
# re-exported: these moved to arc_eval.protocol
from arc_eval.protocol import action_to_tool_call as action_to_tool_call
from arc_eval.protocol import split_tool_action as split_tool_action
from arc_eval.protocol import tool_call_action as tool_call_action
from arc_eval.protocol import tool_names as tool_names
from arc_ref.chat import chatml_format
from arc_ref.config import PRESETS, parse_tools
from arc_ref.tokenizers import hf_tokenizer_name
from arc_ref.errors import ConfigError
from arc_eval.arguments import http_url
from arc_eval.protocol import TASK_TOOL_SPECS
from arc_eval.registry import BackendEntry, BackendRun, ComponentOptions, float_option, int_option, option, register_backend
from arc_ref.message import ToolCall, ToolSpec
from arc_eval.counting import DEFAULT_TOKENIZER, TemplateCounter, TokenCounter, make_counter
from arc_eval.types import (
    Backend,
    BackendReplyError,
    BackendRequestError,
    BackendUnavailable,
    ChatReply,
    ChatRequest,
    ContextOverflow,
    Message,
)

COUNT_MODES = ("auto", "server", "local")
_THINK_PREFIX = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
# A prompt that a local count puts under this fraction of the usable budget cannot credibly
# overflow: such a refusal is reported as a server fault rather than compacted away.
FAR_UNDER_FRACTION = 0.5
PROBE_MESSAGES = (Message("user", "Reply with the word OK."),)
# The check before the first task (issue 19): a server that is down fails in seconds, a line per attempt.
PREFLIGHT_RETRIES = 2
PREFLIGHT_MAX_PAUSE_S = 1.0
# The bounds of the connection's numbers (issue 31): a timeout of a day at most (an answer later than that is a hung
# server's); 100 retries at most (each backs off up to 30 s: 50 minutes for one call).
MAX_TIMEOUT_S = 86_400.0
MAX_RETRIES = 100

__all__ = [
    "BackendRequestError",  # defined in arc_eval.types; kept importable from here
    "COUNT_MODES",
    "OpenAIBackend",
    "PromptCount",
    "action_to_tool_call",
    "api_urls",
    "render_for_count",
    "split_tool_action",
    "tool_call_action",
    "tool_names",
]


# -- message encoding ---------------------------------------------------------------------------


def render_for_count(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    chat_format: str,
) -> str:
    """The ChatML text of OpenAI JSON messages (hermes-style tool calls): how serve-scripted renders a
    request when it is given no model directory (an approximation of Qwen's template, ~10% under it on a
    tool transcript; the harness itself counts tool mode with the model directory's own template)."""
    from arc_ref.chat import get_chat_format

    fmt = get_chat_format(chat_format)
    pairs: list[tuple[str, str]] = []
    if tools:
        listing = "\n".join(json.dumps(tool, ensure_ascii=False, sort_keys=True) for tool in tools)
        tools_text = f"# Tools\n\n<tools>\n{listing}\n</tools>"
        if messages and messages[0].get("role") == "system":
            first = dict(messages[0])
            first["content"] = f"{first.get('content') or ''}\n\n{tools_text}"
            messages = [first, *messages[1:]]
        else:
            messages = [{"role": "system", "content": tools_text}, *messages]
    for message in messages:
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            content += (
                "\n<tool_call>\n"
                + json.dumps(
                    {"name": function.get("name"), "arguments": function.get("arguments")},
                    ensure_ascii=False,
                )
                + "\n</tool_call>"
            )
        role = str(message.get("role", "user"))
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        pairs.append((role, content))
    return fmt.render(pairs)


def api_urls(base_url: str) -> dict[str, str]:
    """Endpoints of one replica; `base_url` with or without its trailing `/v1`."""
    base = base_url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise InvalidInput(f"base URL must start with http:// or https://, got {base_url!r}")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    api = root + "/v1"
    return {
        "chat": api + "/chat/completions",
        "models": api + "/models",
        "tokenize": root + "/tokenize",
        "apply_template": root + "/apply-template",  # llama.cpp
    }


def _error_message(response: httpx.Response) -> str:
    """The `message` of an OpenAI error object (vLLM nests it under `error`), else the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:2000]
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and "message" in error:
            return str(error["message"])
        if isinstance(error, str):  # vLLM's 401: {"error": "Unauthorized"}
            return error
        if "message" in body:
            return str(body["message"])
    return response.text[:2000]


@frozen
class PromptCount:
    """The harness's count of one prompt, before it is sent."""

    tokens: int  # the count itself (the server's own tokenizer and template, or the local seam)
    exact: bool  # counted by the server (vLLM /tokenize, llama.cpp apply-template + tokenize)
    margin: int = 0  # added to a local count for the budget check (the largest under-count seen)

    @property
    def budgeted(self) -> int:
        """What the budget check compares with context_limit - max_tokens."""
        return self.tokens + self.margin


class OpenAIBackend(Backend):
    """An OpenAI-compatible server as an `arc_eval.types.Backend` (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        *,
        context_limit: int,
        max_tokens: int = PRESETS["paper"].max_completion,
        temperature: float = 0.0,
        connect_timeout_s: float = 10.0,
        first_byte_timeout_s: float | None = None,
        request_timeout_s: float = 600.0,
        call_budget_s: float | None = None,
        probe_timeout_s: float = 120.0,
        max_retries: int = 6,
        api_key: str | None = None,
        tokenizer_json: str | None = None,
        enable_thinking: bool = False,
        tools: Sequence[dict[str, Any] | ToolSpec] | None = None,
        counter: TokenCounter | None = None,
        count_with: str = "auto",
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_connections: int = 512,
        client_shards: int = 32,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`api_key` None reads ``OPENAI_API_KEY`` (empty: none). ``first_byte_timeout_s`` None is
        the request timeout (a non-streamed answer starts when it is complete); ``call_budget_s``
        None is two whole requests and the longest backoff. ``tools``: the tools of tool-calling
        mode, offered with the probe of `check_server` (every request sends its own
        ``ChatRequest.tools``). ``counter``: the run's token counter (`arc_eval.counting`), used for
        every local count; None: ``tokenizer_json`` (else ``o200k_base``) over ChatML, Qwen3's
        no-think variant when thinking is off."""
        if not base_urls:
            raise InvalidInput("at least one base URL is needed (e.g. http://localhost:8000/v1)")
        if max_tokens < 1 or context_limit <= max_tokens:
            raise InvalidInput(
                f"need 0 < max_tokens < context_limit, got max_tokens={max_tokens}, "
                f"context_limit={context_limit}"
            )
        if count_with not in COUNT_MODES:
            raise InvalidInput(
                f"count_with must be one of {', '.join(COUNT_MODES)}, got {count_with!r}"
            )
        if max_retries < 0:
            raise InvalidInput(f"max_retries must be >= 0, got {max_retries}")
        if client_shards < 1:
            raise InvalidInput(f"client_shards must be >= 1, got {client_shards}")
        first_byte = request_timeout_s if first_byte_timeout_s is None else first_byte_timeout_s
        for label, value in (
            ("connect_timeout_s", connect_timeout_s),
            ("first_byte_timeout_s", first_byte),
            ("request_timeout_s", request_timeout_s),
            ("probe_timeout_s", probe_timeout_s),
        ):
            if not value > 0:
                raise InvalidInput(f"{label} must be > 0, got {value}")
        self.base_urls = tuple(base_urls)
        self.replicas = [api_urls(url) for url in base_urls]
        self.model = model
        self.context_limit = context_limit
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.connect_timeout_s = connect_timeout_s
        self.first_byte_timeout_s = first_byte
        self.request_timeout_s = request_timeout_s
        self.call_budget_s = (
            2 * request_timeout_s + backoff_max_s if call_budget_s is None else call_budget_s
        )
        if not self.call_budget_s > 0:
            raise InvalidInput(f"call_budget_s must be > 0, got {call_budget_s}")
        self.probe_timeout_s = probe_timeout_s
        self.max_retries = max_retries
        self.enable_thinking = enable_thinking
        self.tools = [tool.openai() if isinstance(tool, ToolSpec) else dict(tool) for tool in tools] if tools else None
        self._probe_tools = parse_tools(self.tools) if self.tools else ()
        self.count_with = count_with
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_connections = max_connections
        self.client_shards = client_shards
        self._transport = transport
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        if not (key.isascii() and key.isprintable()):
            raise InvalidInput("the API key must be printable ASCII (it travels in an HTTP header)")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        if counter is None:
            name = hf_tokenizer_name(tokenizer_json) if tokenizer_json else DEFAULT_TOKENIZER
            counter = make_counter(name, chatml_format(enable_thinking))
        self.counter = counter
        self._round_robin = 0
        self._clients: dict[int, httpx.AsyncClient] = {}
        self._ssl_context: ssl.SSLContext | None = None
        self._clients_loop: asyncio.AbstractEventLoop | None = None
        self.server: ServerInfo | None = None  # what GET /v1/models said (check_server, or lazily)
        self.server_max_model_len: int | None = None  # the window the server reported, if any
        self._server_tokenize = count_with != "local"  # False once the server turned out unable
        self._warned: set[str] = set()
        self.retries = 0
        # per call: (harness count, server's usage.prompt_tokens); local counts exclude the margin
        self._counts: list[tuple[int, int]] = []
        self._local_underrun: list[int] = []  # server - local count, for the local margin

    # -- plumbing -------------------------------------------------------------------------------

    def _client(self, shard: int = 0) -> httpx.AsyncClient:
        """The HTTP client of `shard`, created in the running event loop.

        Calls are spread over `client_shards` clients by task id: httpcore's pool scans every
        connection of a client on each request (quadratic in the requests in flight; measured
        2.7 s of client CPU for 64 concurrent warm requests on one client), so small pools keep
        the client's cost flat when N trajectories are in flight.
        """
        loop = asyncio.get_running_loop()
        if self._clients_loop is not loop:
            self._clients = {}  # clients are bound to the loop that made them
            self._clients_loop = loop
        client = self._clients.get(shard)
        if client is None:
            limits = httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            )
            if self._ssl_context is None:
                # one context for every shard: building one loads the CA bundle (tens of ms)
                self._ssl_context = httpx.create_ssl_context()
            client = httpx.AsyncClient(
                timeout=httpx.Timeout(
                    connect=self.connect_timeout_s,
                    read=self.first_byte_timeout_s,
                    write=self.request_timeout_s,
                    pool=self.request_timeout_s,
                ),
                limits=limits,
                headers=self._headers,
                transport=self._transport,
                verify=self._ssl_context,
            )
            self._clients[shard] = client
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _route(self, tags: Mapping[str, Any]) -> tuple[int, int]:
        """(replica, client shard) of a call: by task id when there is one, else round-robin."""
        task_id = tags.get("task_id")
        if task_id is not None:
            key = zlib.crc32(str(task_id).encode("utf-8"))
        else:
            self._round_robin += 1
            key = self._round_robin
        return key % len(self.replicas), key % self.client_shards

    def _backoff(self, attempt: int) -> float:
        delay: float = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        return delay * random.uniform(0.5, 1.0)

    def _note(self, key: str, text: str) -> None:
        """Say `text` on stderr once per `key` (the run's log)."""
        if key not in self._warned:
            self._warned.add(key)
            print(f"arc-eval: {text}", file=sys.stderr, flush=True)

    def retry_policy(self) -> str:
        """The timeouts and the retry budget, in words (printed at the start of a run)."""
        return (
            f"timeouts per attempt: connect {self.connect_timeout_s:g} s, first byte "
            f"{self.first_byte_timeout_s:g} s, whole request {self.request_timeout_s:g} s; up to "
            f"{self.max_retries} retries (refused or dropped connections, timeouts, HTTP 5xx and "
            f"429; backoff {self.backoff_base_s:g}-{self.backoff_max_s:g} s, next replica); one call "
            f"gives up after {self.call_budget_s:g} s at most, and the run then stops (resumable)"
        )

    async def _send(
        self,
        endpoint: str,
        payload: Mapping[str, Any] | None,
        route: tuple[int, int],
        *,
        timeout_s: float | None = None,
        retries: int | None = None,
        preflight: bool = False,
    ) -> tuple[httpx.Response, float]:
        """POST `payload` (GET when None) with retries on refused or dropped connections,
        timeouts, 5xx and 429; other answers return. Returns the response and the wall time of
        the attempt that produced it.

        A 5xx that names a configuration fault (`faults.configuration_fault`) is returned at once.
        Every attempt is cut at `timeout_s` (the whole request), and no attempt starts once the
        call's budget is spent. ``preflight`` (the check before the first task): at most
        ``PREFLIGHT_RETRIES`` retries, pauses of at most ``PREFLIGHT_MAX_PAUSE_S``, and a line on stderr per
        failed attempt, so a server that is down fails in seconds, saying so (issue 19).
        """
        last_error = "no attempt made"
        replica, shard = route
        limit = self.request_timeout_s if timeout_s is None else timeout_s
        attempts = (self.max_retries if retries is None else retries) + 1
        if preflight:
            attempts = min(attempts, PREFLIGHT_RETRIES + 1)
        budget_end = time.monotonic() + max(self.call_budget_s, limit)
        url = self.replicas[replica][endpoint]
        made = 0
        for attempt in range(attempts):
            url = self.replicas[(replica + attempt) % len(self.replicas)][endpoint]
            remaining = budget_end - time.monotonic()
            if remaining <= 0:
                break
            made += 1
            started = time.perf_counter()
            client = self._client(shard)
            request = client.post(url, json=payload) if payload is not None else client.get(url)
            try:
                response = await asyncio.wait_for(request, timeout=min(limit, remaining))
            except (asyncio.TimeoutError, httpx.TimeoutException) as failure:
                waited = time.perf_counter() - started
                kind = "connect" if isinstance(failure, httpx.ConnectTimeout) else "answer"
                last_error = f"no {kind} within {waited:.3g} s"
            except httpx.TransportError as failure:
                last_error = f"{type(failure).__name__}: {failure}"
            else:
                status = response.status_code
                if status < 500 and status != 429:
                    return response, time.perf_counter() - started
                message = _error_message(response)
                if configuration_fault(status, message) is not None:
                    return response, time.perf_counter() - started
                last_error = f"HTTP {status}: {message[:300]}"
            if attempt < attempts - 1:
                pause = self._backoff(attempt)
                if preflight:
                    pause = min(pause, PREFLIGHT_MAX_PAUSE_S)
                if time.monotonic() + pause >= budget_end:
                    break
                if preflight:
                    print(f"arc-eval: {url}: attempt {made}/{attempts}: {last_error}; retrying in {pause:.1f} s",
                          file=sys.stderr, flush=True)
                self.retries += 1
                await asyncio.sleep(pause)
        hint = retry_hint(last_error)
        raise BackendUnavailable(
            f"{url}: gave up after {made} attempt{'s' if made != 1 else ''}; last error: "
            f"{last_error}. "
            + (f"Fix: {hint}." if hint else "Fix: check that the server is up and answering "
               "(its log), then rerun the same command to continue.")
        )

    def _refused(self, endpoint_url: str, response: httpx.Response) -> BackendRequestError:
        message = _error_message(response)
        return BackendRequestError(
            refusal_message(endpoint_url, response.status_code, message), response.status_code
        )

    @staticmethod
    def _json(response: httpx.Response, url: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise BackendReplyError(
                f"{url}: the answer is not JSON: {response.text[:200]!r}"
            ) from None

    # -- the server -----------------------------------------------------------------------------

    async def _models(self, replica: int, preflight: bool = False) -> ServerInfo:
        """GET /v1/models of one replica, classified (see `check_server`)."""
        url = self.replicas[replica]["models"]
        response, _ = await self._send(
            "models", None, (replica, 0), timeout_s=min(self.probe_timeout_s, 60.0), preflight=preflight
        )
        if response.status_code != 200:
            raise self._refused(url, response)
        return parse_models(self._json(response, url), url)

    async def _server_info(self) -> ServerInfo:
        """What the first replica's /v1/models says, asked once (check_server asks every one)."""
        if self.server is None:
            self.server = await self._models(0)
            if self.server.window is not None:
                self.server_max_model_len = self.server.window
        return self.server

    def _check_card(self, info: ServerInfo) -> None:
        """The model is served and the window holds --context-limit; else BackendRequestError."""
        if self.model not in info.model_ids:
            served = ", ".join(info.model_ids) or "no model"
            first = info.model_ids[0] if info.model_ids else "NAME"
            raise BackendRequestError(
                f"{info.url} serves {served}, not {self.model!r}. Fix: pass --model {first} "
                "(vLLM: the --served-model-name, else the model path; llama-server: its --alias, "
                "else the model file's name)"
            )
        if info.window is None:
            self._note(
                "window-unknown",
                f"note: {info.url} does not say its context window; --context-limit "
                f"{self.context_limit} is trusted",
            )
        elif info.window < self.context_limit:
            where = "vLLM --max-model-len" if info.kind != LLAMA_CPP else (
                "llama-server -c with --kv-unified-per-slot, or -c N*L with -np N (each slot "
                "gets -c / -np)"
            )
            raise BackendRequestError(
                f"{info.url}: the server's window is {info.window} tokens ({info.window_field}), "
                f"smaller than --context-limit {self.context_limit}: every prompt the run allows "
                f"above {info.window} would be refused. Fix: pass --context-limit {info.window} "
                f"(with --max-tokens below it), or restart the server with a window of "
                f"{self.context_limit} ({where})"
            )
        elif info.window > self.context_limit:
            self._note(
                "window-larger",
                f"note: the server's window is {info.window} tokens ({info.window_field}); the "
                f"run keeps prompt + completion within --context-limit {self.context_limit}",
            )

    async def check_server(self) -> list[ServerInfo]:
        """Fail fast before the first task: every replica serves the model with a window that
        holds ``context_limit``, answers a 1-token completion (with the API key; with tools, in
        tool mode) and is the same kind of server. Raises `BackendRequestError` (naming the fix),
        `BackendReplyError` or `BackendUnavailable`; returns one `ServerInfo` per replica."""
        infos = [await self._models(index, preflight=True) for index in range(len(self.replicas))]
        for info in infos:
            self._check_card(info)
        kinds = sorted({info.kind for info in infos})
        if len(kinds) > 1:
            raise BackendRequestError(
                f"the replicas are different servers ({', '.join(kinds)}). Fix: give --base-url "
                "replicas of one server"
            )
        self.server = infos[0]
        windows = [info.window for info in infos if info.window is not None]
        if windows:
            self.server_max_model_len = min(windows)
        for index in range(len(self.replicas)):
            await self._probe(index)
        return infos

    async def _probe(self, replica: int) -> None:
        """One 1-token completion: the server answers, accepts the key, and (tools) tool mode."""
        url = self.replicas[replica]["chat"]
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [message.as_json() for message in PROBE_MESSAGES],
            "max_tokens": 1,
            "temperature": 0.0,
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
        }
        if self.tools:
            payload["tools"] = self.tools
            payload["tool_choice"] = "auto"
        response, _ = await self._send(
            "chat", payload, (replica, 0), timeout_s=self.probe_timeout_s, retries=1
        )
        if response.status_code != 200:
            message = _error_message(response)
            if is_context_overflow(response.status_code, message):
                window = self.server_max_model_len
                raise BackendRequestError(
                    f"{url} refused a 1-token probe of a one-line prompt as too long although it "
                    f"reports a window of {window if window else 'unknown size'} tokens: its real "
                    f"window is far smaller than it says. Its message: {message[:500]}. Fix: check "
                    "the server's window (vLLM --max-model-len, llama-server -c / -np) and its log",
                    response.status_code,
                )
            raise self._refused(url, response)
        completion = parse_completion(self._json(response, url), url)
        if self.tools and self.server is not None and self.server.kind == LLAMA_CPP:
            await self._probe_prefill(replica)
        if completion.prompt_tokens is not None and self._server_tokenize:
            count = await self._count(PROBE_MESSAGES, self._probe_tools, (replica, 0))
            if count.exact and count.tokens != completion.prompt_tokens:
                self._note(
                    "probe-count",
                    f"warning: the server counts the probe prompt as {completion.prompt_tokens} "
                    f"tokens in chat and {count.tokens} with its counting endpoint; the run's "
                    "budget follows the latter",
                )

    async def _probe_prefill(self, replica: int) -> None:
        """Tool mode on llama-server: a prompt may end with the assistant's message (a reply without a call),
        which must be answered after, as vLLM does, not continued: llama-server's ``--prefill-assistant``
        (its default) refuses two assistant messages at the end, so /apply-template on such a conversation
        tells which it is."""
        url = self.replicas[replica]["apply_template"]
        conversation = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                        {"role": "assistant", "content": "z"}]
        payload = {"model": self.model, "messages": conversation, **self._chat_template_fields(self.tools)}
        response, _ = await self._send("apply_template", payload, (replica, 0), timeout_s=self.probe_timeout_s,
                                       retries=1)
        if response.status_code != 200:
            raise self._refused(url, response)

    async def preflight(self, out: TextIO) -> None:
        """``check_server`` before a run's first task, saying on ``out`` what was found and the retry budget."""
        print(f"checking {', '.join(self.base_urls)}: GET /v1/models, then a 1-token completion "
              f"(at most {self.probe_timeout_s:g} s per attempt)", file=out, flush=True)
        for info in await self.check_server():
            window = f"window {info.window} ({info.window_field})" if info.window else "window not said"
            tools = "; tool mode checked" if self.tools else ""
            print(f"server {info.url.removesuffix('/models')}: {info.label}, serves {self.model}, "
                  f"{window}; counts with {self.count_source}{tools}", file=out)
        print(self.retry_policy(), file=out)

    # -- counting -------------------------------------------------------------------------------

    def _local_count(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """The harness's own count of `messages` offered `tools`, plus the generation prompt: the run's
        counter (`arc_eval.counting`, the one counting seam: with a model directory, its own template
        and tokenizer, exact). A ChatML counter cannot render tool calls: a request with tools is then
        rendered the hermes way (``render_for_count``), an estimate (the runner refuses tool mode
        without a model directory)."""
        if tools and not isinstance(self.counter, TemplateCounter):
            chat_format = chatml_format(self.enable_thinking)
            encoded = [message.as_json() for message in messages]
            text = render_for_count(encoded, [tool.openai() for tool in tools], chat_format)
            return self.counter.tokenizer.count(text)
        return self.counter.count(messages, tools) if tools else self.counter.count(messages)

    @property
    def count_source(self) -> str:
        """ "server" (vLLM /tokenize or llama.cpp apply-template + tokenize), "local", or
        "unknown" before the first count."""
        if not self._server_tokenize:
            return "local"
        if self.server is None:
            return "unknown"
        return "server" if self.server.kind in (VLLM, LLAMA_CPP) else "local"

    def _local_margin(self) -> int:
        return max([0, *self._local_underrun])

    def _chat_template_fields(self, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "add_generation_prompt": True,
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
        }
        if tools:
            fields["tools"] = tools
        return fields

    async def _count(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], route: tuple[int, int]
    ) -> PromptCount:
        encoded = [message.as_json() for message in messages]
        listing = [tool.openai() for tool in tools] or None
        if self._server_tokenize:
            info = await self._server_info()
            if info.kind == VLLM:
                count = await self._count_vllm(encoded, listing, route)
                if count is not None:
                    return count
            elif info.kind == LLAMA_CPP:
                return await self._count_llama_cpp(encoded, listing, route)
            elif self.count_with == "server":
                raise BackendRequestError(
                    f"{info.url}: this server offers no way to count tokens (neither vLLM's "
                    "/tokenize nor llama.cpp's /apply-template). Fix: --count-with local, with the "
                    "served model's directory (--tokenizer DIR)"
                )
            else:
                self._server_tokenize = False
                self._note("local-count", "note: the server cannot count tokens; counting locally")
        return PromptCount(self._local_count(messages, tools), exact=False, margin=self._local_margin())

    async def _count_vllm(
        self, encoded: list[dict[str, Any]], tools: list[dict[str, Any]] | None, route: tuple[int, int]
    ) -> PromptCount | None:
        url = self.replicas[route[0]]["tokenize"]
        payload = {"model": self.model, "messages": encoded, **self._chat_template_fields(tools)}
        response, _ = await self._send("tokenize", payload, route)
        if response.status_code == 200:
            body = self._json(response, url)
            tokens = tokenize_count(body, url)
            reported = body.get("max_model_len")
            if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0:
                self._note_window(reported)
            return PromptCount(tokens, exact=True)
        message = _error_message(response)
        if is_context_overflow(response.status_code, message):
            raise ContextOverflow(message, None, self.context_limit - self.max_tokens)
        if response.status_code in (404, 405) and self.count_with == "auto":
            self._server_tokenize = False
            self._note(
                "local-count",
                f"note: {url} answered HTTP {response.status_code}; counting locally",
            )
            return None
        raise self._refused(url, response)

    async def _count_llama_cpp(
        self, encoded: list[dict[str, Any]], tools: list[dict[str, Any]] | None, route: tuple[int, int]
    ) -> PromptCount:
        """llama-server renders with its own template, then tokenizes that text as chat does."""
        template_url = self.replicas[route[0]]["apply_template"]
        payload = {"model": self.model, "messages": encoded, **self._chat_template_fields(tools)}
        response, _ = await self._send("apply_template", payload, route)
        if response.status_code != 200:
            raise self._refused(template_url, response)
        prompt = template_prompt(self._json(response, template_url), template_url)
        tokenize_url = self.replicas[route[0]]["tokenize"]
        # add_special and parse_special as llama-server's chat endpoint tokenizes its prompt
        body = {"content": prompt, "add_special": True, "parse_special": True}
        response, _ = await self._send("tokenize", body, route)
        if response.status_code != 200:
            raise self._refused(tokenize_url, response)
        return PromptCount(tokens_list_length(self._json(response, tokenize_url), tokenize_url),
                           exact=True)

    def _note_window(self, window: int) -> None:
        self.server_max_model_len = window
        if window < self.context_limit:
            self._note(
                "window-smaller",
                f"warning: the server's max_model_len is {window}, below the run's context limit "
                f"{self.context_limit}; the server will refuse prompts the harness allows",
            )

    async def count_prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens the server will charge for `messages` offered `tools`, plus the generation prompt."""
        return (await self._count(messages, tools, self._route({}))).tokens

    def calibration(self) -> dict[str, Any]:
        """The harness's prompt counts vs the server's `usage.prompt_tokens` over the calls so far."""
        diffs = [server - own for own, server in self._counts]
        return {
            "source": self.count_source,
            "calls": len(diffs),
            "mean_diff": sum(diffs) / len(diffs) if diffs else 0.0,
            "mean_abs_diff": sum(abs(d) for d in diffs) / len(diffs) if diffs else 0.0,
            "max_abs_diff": max((abs(d) for d in diffs), default=0),
            "retries": self.retries,
        }

    # -- the call -------------------------------------------------------------------------------

    async def _unexplained_overflow(self, count: PromptCount) -> bool:
        """True when a server's overflow refusal cannot be the prompt's length: an exact count
        that fits the server's window with max_tokens, or a local count under `FAR_UNDER_FRACTION`
        of the usable budget. The server's window is asked for when still unknown."""
        if self.server is None:
            info = await self._server_info()
            if info.window is not None:
                self.server_max_model_len = info.window
        window = self.server_max_model_len
        if count.exact:
            limit = self.context_limit if window is None else window
            if self.server is not None and self.server.kind == LLAMA_CPP:
                return count.tokens < limit  # llama-server refuses only a prompt >= n_ctx
            return count.tokens + self.max_tokens <= limit  # vLLM <= 0.31 refuses N + M > L
        limit = self.context_limit if window is None else min(self.context_limit, window)
        return count.tokens < FAR_UNDER_FRACTION * (limit - self.max_tokens)

    async def complete(self, request: ChatRequest) -> ChatReply:
        route = self._route(request.tags)
        count = await self._count(request.messages, request.tools, route)
        usable = self.context_limit - self.max_tokens
        if count.budgeted > usable:
            margin = f" (+{count.margin} margin for a local count)" if count.margin else ""
            raise ContextOverflow(
                f"prompt of {count.tokens} tokens{margin} exceeds the usable budget L_ctx - G_max "
                f"= {self.context_limit} - {self.max_tokens} = {usable}",
                count.tokens,
                usable,
            )
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [message.as_json() for message in request.messages],
            "max_tokens": min(self.max_tokens, request.max_tokens),
            "temperature": self.temperature,
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
        }
        if request.seed is not None:
            payload["seed"] = request.seed
        if request.tools:
            payload["tools"] = [tool.openai() for tool in request.tools]
            payload["tool_choice"] = "auto"
            payload["parallel_tool_calls"] = False  # one call per reply, as one action per reply
        url = self.replicas[route[0]]["chat"]
        response, latency = await self._send("chat", payload, route)
        if response.status_code != 200:
            message = _error_message(response)
            if is_context_overflow(response.status_code, message):
                if await self._unexplained_overflow(count):
                    window = self.server_max_model_len
                    said = f"reports a window of {window} tokens" if window else "reports no window"
                    how = "by its own counting endpoint" if count.exact else "locally by the harness"
                    raise BackendRequestError(
                        f"{url} refused as too long a prompt of {count.tokens} tokens (counted "
                        f"{how}) with max_tokens {payload['max_tokens']}, although it {said} and "
                        f"--context-limit is {self.context_limit}: the server's real window is "
                        f"smaller than it says, or it counts prompts differently. Its message: "
                        f"{message[:500]}. Fix: check the server's window (vLLM --max-model-len, "
                        "llama-server -c / -np) and its log, then rerun the same command",
                        400,
                    )
                raise ContextOverflow(message, count.tokens, usable)
            raise self._refused(url, response)
        return self._reply(response, url, count, latency)

    def _reply(
        self, response: httpx.Response, url: str, count: PromptCount, latency: float
    ) -> ChatReply:
        completion = parse_completion(self._json(response, url), url)
        content = _THINK_PREFIX.sub("", completion.content)
        calls = tuple(
            ToolCall(
                call.call_id or f"call_{number}",
                call.name,
                call.arguments if isinstance(call.arguments, str)
                else json.dumps(call.arguments, ensure_ascii=False),
            )
            for number, call in enumerate(completion.tool_calls)
        )
        prompt_tokens = completion.prompt_tokens
        if prompt_tokens is not None:
            self._counts.append((count.tokens, prompt_tokens))
            if not count.exact:
                self._local_underrun.append(prompt_tokens - count.tokens)
        else:
            prompt_tokens = count.tokens
        completion_tokens = completion.completion_tokens
        if completion_tokens is None:
            completion_tokens = self.counter.text_tokens(content)
        finish_reason = completion.finish_reason or "stop"
        if finish_reason == "tool_calls":
            finish_reason = "stop"
        return ChatReply(
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
            latency_s=latency,
            counted_prompt_tokens=count.tokens,
            tool_calls=calls,
        )


@frozen
class OpenAIOptions(ComponentOptions):
    """Where the server is and how to talk to it (eval/SERVING.md). Only ``base_urls`` is recorded (not part of
    the run's meaning): the key, timeouts, retries and counting mode are the connection's, never recorded."""

    base_urls: tuple[str, ...] = option((), flag="--base-url", parse=http_url, append=True, metavar="URL",
                                        converter=tuple,
                                        help="server URL, e.g. http://localhost:8000/v1 (repeat for replicas)")
    api_key: str | None = option(None, metavar="KEY", recorded=False,
                                 help="the server's API key (vllm --api-key); default: $OPENAI_API_KEY; never "
                                      "recorded")
    connect_timeout_s: float = float_option(10.0, flag="--connect-timeout", exclusive_minimum=0, maximum=MAX_TIMEOUT_S,
                                      metavar="S", recorded=False, help="seconds to connect")
    first_byte_timeout_s: float | None = float_option(None, flag="--first-byte-timeout",
                                                      exclusive_minimum=0, maximum=MAX_TIMEOUT_S, metavar="S", recorded=False,
                                                help="seconds until the answer starts (default: the request "
                                                     "timeout)")
    request_timeout_s: float = float_option(600.0, flag="--request-timeout", exclusive_minimum=0, maximum=MAX_TIMEOUT_S,
                                      metavar="S", recorded=False, help="seconds for a whole request")
    max_retries: int = int_option(6, minimum=0, maximum=MAX_RETRIES, metavar="N", recorded=False,
                              help="retries of refused or dropped connections, timeouts, 5xx and 429; one call never "
                                   "takes longer than two whole requests plus 30 s")
    count_with: str = option("auto", choices=COUNT_MODES, recorded=False,
                             help="count prompts with the server's endpoints (vLLM /tokenize, llama.cpp "
                                  "/apply-template + /tokenize) or locally (auto: the server's when it has them)")

    def describe(self, model: str) -> str:
        """The backend as a run's plan names it."""
        return f"backend openai {', '.join(self.base_urls)} serving {model}"

    def check(self) -> None:
        if not self.base_urls:
            raise ConfigError("--backend openai needs at least one --base-url (e.g. http://localhost:8000/v1)")
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable()):
            raise ConfigError("--api-key must be printable ASCII (it travels in an HTTP header)")


def _openai_backend(options: Any, run: BackendRun) -> Backend:
    assert isinstance(options, OpenAIOptions)
    return OpenAIBackend(
        list(options.base_urls),
        run.model,
        context_limit=run.context_limit,
        max_tokens=run.max_tokens,
        temperature=run.temperature,
        counter=run.counter,
        tools=TASK_TOOL_SPECS if run.tool_calling else None,
        api_key=options.api_key,
        connect_timeout_s=options.connect_timeout_s,
        first_byte_timeout_s=options.first_byte_timeout_s,
        request_timeout_s=options.request_timeout_s,
        probe_timeout_s=min(60.0, options.request_timeout_s),
        max_retries=options.max_retries,
        count_with=options.count_with,
    )


register_backend(BackendEntry(
    name=OpenAIBackend.name,
    help="an OpenAI-compatible server (vLLM, llama.cpp; eval/SERVING.md)",
    factory=_openai_backend,
    options=OpenAIOptions,
    order=2,
))
