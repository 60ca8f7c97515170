"""`OpenAIBackend`: an OpenAI-compatible chat server (vLLM, llama.cpp's `llama-server`, or any other
that speaks the API), driven with `httpx.AsyncClient` so N trajectories are in flight at once.

It is made of three parts, each in its own module: the transport (`arc_eval.backends.transport`: the replicas,
their clients, routing, timeouts and retries), the probing before the first task (`arc_eval.backends.probing`:
the model served, the window, the key, tool mode) and the counting (`arc_eval.backends.server_counting`: the
server's endpoints, else the run's counter); a reply is read by `arc_eval.backends.replies`. It is built from its
options (`OpenAIOptions`, the flags of `--backend openai`) and the run's settings (`BackendRun`: the model, the
budgets, the counter, tool mode), plus what no flag sets (`TransportTuning`).

What one `complete()` does:

1. Counts the prompt as the server will (`server_counting`).
2. Enforces the usable budget itself: prompt > context_limit - max_tokens raises `ContextOverflow`
   with no request sent (vLLM >= 0.32 and llama.cpp clamp a too-large max_tokens instead of
   refusing it; vLLM <= 0.31 refuses; see `arc_eval.backends.overflow`).
3. ``POST {base}/chat/completions`` with ``max_tokens``, ``temperature`` and
   ``chat_template_kwargs: {"enable_thinking": false}`` (Qwen3's switch; other templates ignore
   it). A 400 whose message says the context is too long raises `ContextOverflow`, unless the
   prompt is far under the server's own window (an exact count that fits, or a local one under
   half of it): that server misreports its window, which `BackendRequestError` reports rather than
   letting every task be scored as no answer. Any other refusal raises `BackendRequestError` with
   the cause and the fix (`arc_eval.backends.faults`), never retried; refused or dropped connections,
   5xx and 429 are retried (`transport`).
4. Reads the reply strictly (`arc_eval.backends.replies`: a reply that is not what the API
   promises is a `BackendReplyError`) and returns it with the server's ``usage`` (authoritative),
   the harness's own count (``counted_prompt_tokens``) and ``finish_reason``.

All three errors are `arc_eval.types.BackendError`s: the run stops, the task in flight is not
recorded, and the same command resumes after the fix.

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

from typing import Any, Sequence, TextIO

import httpx
from attrs import frozen

from arc_ref.errors import ConfigError
from arc_ref.message import ToolSpec
from arc_eval.arguments import http_url
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.probing import ServerProbe
from arc_eval.backends.replies import chat_reply, parse_completion
from arc_eval.backends.server_counting import (
    COUNT_MODES,
    TEMPLATE_KWARGS,
    PromptCount,
    ServerCounting,
    ServerView,
)
from arc_eval.backends.servers import LLAMA_CPP, ServerInfo
from arc_eval.backends.transport import MAX_RETRIES, MAX_TIMEOUT_S, Transport, TransportTuning, error_message
from arc_eval.backends.transport import json_of, refused
from arc_eval.errors import InvalidInput
from arc_eval.protocol import TASK_TOOL_SPECS
from arc_eval.registry import BackendEntry, BackendRun, ComponentOptions, float_option, int_option, option
from arc_eval.registry import register_backend
from arc_eval.types import Backend, BackendRequestError, ChatReply, ChatRequest, ContextOverflow, Message

# A prompt that a local count puts under this fraction of the usable budget cannot credibly
# overflow: such a refusal is reported as a server fault rather than compacted away.
FAR_UNDER_FRACTION = 0.5

__all__ = ["COUNT_MODES", "OpenAIBackend", "OpenAIOptions", "PromptCount", "TransportTuning"]


class OpenAIBackend(Backend):
    """An OpenAI-compatible server as an `arc_eval.types.Backend` (see the module docstring)."""

    name = "openai"

    def __init__(self, options: OpenAIOptions, run: BackendRun, *, tuning: TransportTuning = TransportTuning(),
                 transport: httpx.AsyncBaseTransport | None = None,
                 tools: Sequence[ToolSpec] | None = None) -> None:
        """``options``: where the server is and how to talk to it; ``run``: the model, the budgets, the run's
        counter (every local count) and tool mode (the probe offers the task's tools, or ``tools``; every request
        sends its own ``ChatRequest.tools``); ``tuning`` and ``transport`` (an httpx test transport): what no flag
        sets."""
        if run.max_tokens < 1 or run.context_limit <= run.max_tokens:
            raise InvalidInput(
                f"need 0 < max_tokens < context_limit, got max_tokens={run.max_tokens}, "
                f"context_limit={run.context_limit}"
            )
        self.model = run.model
        self.context_limit = run.context_limit
        self.max_tokens = run.max_tokens
        self.temperature = run.temperature
        self.counter = run.counter
        offered = tools if tools is not None else TASK_TOOL_SPECS if run.tool_calling else ()
        self.tools = [tool.openai() for tool in offered] or None
        self.transport = Transport(options, tuning, transport)
        self.server = ServerView(self.transport, run.model, run.context_limit)
        self.counting = ServerCounting(self.server, run.counter, options.count_with, run.max_tokens)
        self.probing = ServerProbe(self.server, self.counting, self.tools)

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def retries(self) -> int:
        return self.transport.retries

    @property
    def count_source(self) -> str:
        """ "server", "local", or "unknown" before the first count (`ServerCounting.source`)."""
        return self.counting.source

    def retry_policy(self) -> str:
        return self.transport.retry_policy()

    def calibration(self) -> dict[str, Any]:
        """The harness's prompt counts vs the server's `usage.prompt_tokens` over the calls so far."""
        return self.counting.calibration(self.transport.retries)

    async def check_server(self) -> list[ServerInfo]:
        """The checks before the first task (`ServerProbe.check_server`)."""
        return await self.probing.check_server()

    async def preflight(self, out: TextIO) -> None:
        await self.probing.preflight(out)

    def servers_checked(self) -> list[dict[str, Any]]:
        return list(self.probing.found)

    async def count_prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens the server will charge for `messages` offered `tools`, plus the generation prompt."""
        return (await self.counting.count(messages, tools, self.transport.route({}))).tokens

    async def _unexplained_overflow(self, count: PromptCount) -> bool:
        """True when a server's overflow refusal cannot be the prompt's length: an exact count
        that fits the server's window with max_tokens, or a local count under `FAR_UNDER_FRACTION`
        of the usable budget. The server's window is asked for when still unknown."""
        if self.server.info is None:
            await self.server.first()
        window = self.server.window
        if count.exact:
            limit = self.context_limit if window is None else window
            if self.server.info is not None and self.server.info.kind == LLAMA_CPP:
                return count.tokens < limit  # llama-server refuses only a prompt >= n_ctx
            return count.tokens + self.max_tokens <= limit  # vLLM <= 0.31 refuses N + M > L
        limit = self.context_limit if window is None else min(self.context_limit, window)
        return count.tokens < FAR_UNDER_FRACTION * (limit - self.max_tokens)

    async def complete(self, request: ChatRequest) -> ChatReply:
        route = self.transport.route(request.tags)
        count = await self.counting.count(request.messages, request.tools, route)
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
            "chat_template_kwargs": dict(TEMPLATE_KWARGS),
        }
        if request.seed is not None:
            payload["seed"] = request.seed
        if request.tools:
            payload["tools"] = [tool.openai() for tool in request.tools]
            payload["tool_choice"] = "auto"
            payload["parallel_tool_calls"] = False  # one call per reply, as one action per reply
        url = self.transport.url(route[0], "chat")
        response, latency = await self.transport.send("chat", payload, route)
        if response.status_code != 200:
            message = error_message(response)
            if is_context_overflow(response.status_code, message):
                if await self._unexplained_overflow(count):
                    window = self.server.window
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
            raise refused(url, response)
        completion = parse_completion(json_of(response, url), url)
        if completion.prompt_tokens is not None:
            self.counting.observe(count, completion.prompt_tokens)
        return chat_reply(completion, count.tokens, latency, self.counter.text_tokens)


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
    connect_timeout_s: float = float_option(10.0, flag="--connect-timeout", exclusive_minimum=0,
                                            maximum=MAX_TIMEOUT_S, metavar="S", recorded=False,
                                            help="seconds to connect")
    first_byte_timeout_s: float | None = float_option(None, flag="--first-byte-timeout", exclusive_minimum=0,
                                                      maximum=MAX_TIMEOUT_S, metavar="S", recorded=False,
                                                      help="seconds until the answer starts (default: the request "
                                                           "timeout)")
    request_timeout_s: float = float_option(600.0, flag="--request-timeout", exclusive_minimum=0,
                                            maximum=MAX_TIMEOUT_S, metavar="S", recorded=False,
                                            help="seconds for a whole request")
    max_retries: int = int_option(6, minimum=0, maximum=MAX_RETRIES, metavar="N", recorded=False,
                                  help="retries of refused or dropped connections, timeouts, 5xx and 429; one call "
                                       "never takes longer than two whole requests plus 30 s")
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
    return OpenAIBackend(options, run)


register_backend(BackendEntry(
    name=OpenAIBackend.name,
    help="an OpenAI-compatible server (vLLM, llama.cpp; eval/SERVING.md)",
    factory=_openai_backend,
    options=OpenAIOptions,
    order=2,
))
