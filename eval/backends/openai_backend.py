"""`OpenAIBackend`: any OpenAI-compatible chat server (vLLM is the target; SGLang and llama.cpp's
server speak the same API), driven with `httpx.AsyncClient` so N trajectories are in flight at once.

What one `complete()` does:

1. Counts the prompt. With vLLM: ``POST {root}/tokenize`` with the same ``messages`` (plus
   ``add_generation_prompt``, ``chat_template_kwargs`` and ``tools``), which answers ``count``
   and ``max_model_len`` (vLLM's `TokenizeResponse`). When the server has no `/tokenize` (404 or
   405), the local counter is used: the served model's `tokenizer.json` (``tokenizer_json=``) over
   ChatML (Qwen3's no-think variant when thinking is off), via `arc_ref.chat`; without one, the
   `o200k_base` approximation. A local count gets a safety margin: the largest amount by which the
   server's reported `usage.prompt_tokens` has exceeded it so far.
2. Enforces the usable budget itself: prompt > context_limit - max_tokens raises `ContextOverflow`
   (recent vLLM no longer rejects prompt + max_tokens > max_model_len; it clamps max_tokens).
3. ``POST {base}/chat/completions`` with ``max_tokens``, ``temperature`` and
   ``chat_template_kwargs: {"enable_thinking": false}`` (Qwen3's switch; other templates ignore
   it). A 400 whose message says the context is too long (`is_context_overflow`) raises
   `ContextOverflow`; any other 4xx raises `BackendRequestError` (a configuration problem, e.g. a
   wrong model name: not retried). 5xx, 429, timeouts and dropped connections are retried with
   exponential backoff and jitter, on the next replica; after `max_retries` retries
   `BackendUnavailable` is raised (the runner must not score that as a wrong answer).
4. Returns the reply with the server's `usage` (authoritative) and its `finish_reason` ("length"
   when the completion hit its cap, clamped or not; "tool_calls" is reported as "stop").

Replicas. With several base URLs a call goes to the replica chosen by a CRC-32 of
``request.tags["task_id"]``, so one trajectory stays on one replica and vLLM's prefix cache keeps
serving its growing prompt; calls without a task id go round-robin. A retry moves to the next
replica. Base URLs may be given with or without the trailing ``/v1``.

Tool calling (``tools=``). The OpenAI function tools (see `arc_eval.protocol.command_tool_spec`) are
sent with ``tool_choice: "auto"`` (vLLM needs ``--enable-auto-tool-choice --tool-call-parser
hermes`` for Qwen3). A returned tool call becomes the text action ``name arg1 arg2`` (argument
values in the tool's parameter order, the rule of `arc_eval.protocol.tool_call_to_action`),
appended to the reply's content as a final ``Action:`` line, so the loop parses one protocol.
On the way back,
an assistant message whose action is a tool command and that is followed by a ``tool`` message
is re-encoded as an assistant ``tool_calls`` entry plus a ``tool`` message with the matching
``tool_call_id``: the pair always travels together. A ``tool`` message with no such assistant
message before it is sent with role ``user``.

Temperature and max_tokens: the backend's settings are the run's; a request's ``max_tokens`` may
only lower the completion cap. ``latency_s`` is the wall time of the successful HTTP attempt.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import ssl
import sys
import time
import zlib
from typing import Any, Mapping, Sequence

import httpx

from arc_eval.backends.overflow import is_context_overflow
from arc_eval.types import BackendUnavailable, ChatReply, ChatRequest, ContextOverflow, Message

COUNT_MODES = ("auto", "server", "local")
_THINK_PREFIX = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


class BackendRequestError(Exception):
    """The server refused a request for a reason retrying cannot fix (4xx other than overflow)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


# -- message encoding shared with the scripted server ----------------------------------------------


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, list[str]]:
    """Function name -> its parameter names in declaration order."""
    names: dict[str, list[str]] = {}
    for tool in tools or ():
        function = tool.get("function", {})
        name = function.get("name")
        if isinstance(name, str):
            properties = function.get("parameters", {}).get("properties", {})
            names[name] = list(properties) if isinstance(properties, Mapping) else []
    return names


def action_to_tool_call(action: str, tools: Mapping[str, list[str]]) -> tuple[str, str] | None:
    """(name, JSON arguments) when `action` is a call of one of `tools`; else None.

    Words after the name fill the parameters in order; extra words join the last parameter.
    """
    words = action.split()
    if not words or words[0] not in tools:
        return None
    parameters = tools[words[0]]
    values = words[1:]
    arguments: dict[str, str] = {}
    for position, parameter in enumerate(parameters):
        if position >= len(values):
            break
        arguments[parameter] = (
            " ".join(values[position:]) if position == len(parameters) - 1 else values[position]
        )
    return words[0], json.dumps(arguments, ensure_ascii=False)


def tool_call_action(function: Mapping[str, Any], tools: Mapping[str, list[str]]) -> str:
    """The text action of one returned tool call: the name, then the argument values.

    Values come in the tool's parameter order, then any others; this is the rule of
    `arc_eval.protocol.tool_call_to_action`. Arguments that are not a JSON object count as one value.
    """
    name = str(function.get("name", "")).strip()
    arguments = function.get("arguments", "")
    decoded: Any = arguments
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            decoded = arguments
    if isinstance(decoded, Mapping):
        order = [key for key in tools.get(name, ()) if key in decoded]
        order += [key for key in decoded if key not in order]
        values = [str(decoded[key]).strip() for key in order]
    elif decoded is None:
        values = []
    else:
        values = [str(decoded).strip()]
    return " ".join([name, *(value for value in values if value)])


_ACTION_LINE = re.compile(r"^\s*\**\s*action\s*\**\s*:\s*\**\s*(.*?)\s*$", re.IGNORECASE)
_THOUGHT_LABEL = re.compile(r"^\s*\**\s*thought\s*\**\s*:\s*\**\s*", re.IGNORECASE)


def split_tool_action(text: str, tools: Mapping[str, list[str]]) -> tuple[str, str] | None:
    """(thought, action) when the reply's action is a call of one of `tools`; else None.

    The action is the last ``Action:`` line (or, without one, the last line that starts with a
    tool name); the thought is the text before it, without its ``Thought:`` label.
    """
    lines = text.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        match = _ACTION_LINE.match(lines[index])
        candidate = match.group(1).strip("`").strip() if match else lines[index].strip()
        words = candidate.split()
        if match is None and not (words and words[0] in tools):
            continue
        if not words or words[0] not in tools:
            return None
        thought = "\n".join(lines[:index]).strip()
        thought = _THOUGHT_LABEL.sub("", thought, count=1).strip()
        return thought, candidate
    return None


def encode_messages(
    messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """Messages as OpenAI JSON; in tool mode, assistant tool calls and their results are paired."""
    known = tool_names(tools)
    encoded: list[dict[str, Any]] = []
    pending_call: str | None = None
    for index, message in enumerate(messages):
        following = messages[index + 1] if index + 1 < len(messages) else None
        if (
            message.role == "assistant"
            and known
            and following is not None
            and following.role == "tool"
        ):
            split = split_tool_action(message.content, known)
            call = action_to_tool_call(split[1], known) if split is not None else None
            if split is not None and call is not None:
                thought = split[0]
                pending_call = f"call_{index}"
                encoded.append(
                    {
                        "role": "assistant",
                        "content": thought or None,
                        "tool_calls": [
                            {
                                "id": pending_call,
                                "type": "function",
                                "function": {"name": call[0], "arguments": call[1]},
                            }
                        ],
                    }
                )
                continue
        if message.role == "tool":
            if pending_call is not None:
                encoded.append(
                    {"role": "tool", "tool_call_id": pending_call, "content": message.content}
                )
                pending_call = None
            else:
                encoded.append({"role": "user", "content": message.content})
            continue
        pending_call = None
        encoded.append({"role": message.role, "content": message.content})
    return encoded


def render_for_count(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    chat_format: str,
) -> str:
    """The ChatML text of OpenAI JSON messages (hermes-style tool calls), for local counting."""
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
        raise ValueError(f"base URL must start with http:// or https://, got {base_url!r}")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    api = root + "/v1"
    return {
        "chat": api + "/chat/completions",
        "models": api + "/models",
        "tokenize": root + "/tokenize",
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
        if "message" in body:
            return str(body["message"])
    return response.text[:2000]


class OpenAIBackend:
    """An OpenAI-compatible server as an `arc_eval.types.Backend` (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        base_urls: Sequence[str],
        model: str,
        *,
        context_limit: int,
        max_tokens: int = 4096,
        temperature: float = 0.0,
        timeout_s: float = 600.0,
        max_retries: int = 6,
        api_key: str | None = None,
        tokenizer_json: str | None = None,
        enable_thinking: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
        count_with: str = "auto",
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_connections: int = 512,
        client_shards: int = 32,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_urls:
            raise ValueError("at least one base URL is needed (e.g. http://localhost:8000/v1)")
        if max_tokens < 1 or context_limit <= max_tokens:
            raise ValueError(
                f"need 0 < max_tokens < context_limit, got max_tokens={max_tokens}, "
                f"context_limit={context_limit}"
            )
        if count_with not in COUNT_MODES:
            raise ValueError(
                f"count_with must be one of {', '.join(COUNT_MODES)}, got {count_with!r}"
            )
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.replicas = [api_urls(url) for url in base_urls]
        self.model = model
        self.context_limit = context_limit
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.enable_thinking = enable_thinking
        self.tools = [dict(tool) for tool in tools] if tools else None
        self._tool_params = tool_names(self.tools)
        self.count_with = count_with
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_connections = max_connections
        if client_shards < 1:
            raise ValueError(f"client_shards must be >= 1, got {client_shards}")
        self.client_shards = client_shards
        self._transport = transport
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._tokenizer_json = tokenizer_json
        self._local_tokenizer: Any = None
        self._server_tokenize: bool | None = None if count_with != "local" else False
        self._round_robin = 0
        self._clients: dict[int, httpx.AsyncClient] = {}
        self._ssl_context: ssl.SSLContext | None = None
        self._clients_loop: asyncio.AbstractEventLoop | None = None
        self.server_max_model_len: int | None = None
        self._warned_max_len = False
        self.retries = 0
        self._calibration: list[int] = []  # server-reported prompt tokens - own count, per call

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
                timeout=httpx.Timeout(self.timeout_s),
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

    async def _send(
        self, endpoint: str, payload: Mapping[str, Any], route: tuple[int, int]
    ) -> tuple[httpx.Response, float]:
        """POST with retries on 5xx / 429 / timeouts / dropped connections; other codes return.

        Returns the response and the wall time of the attempt that produced it.
        """
        last_error = "no attempt made"
        replica, shard = route
        url = self.replicas[replica][endpoint]
        for attempt in range(self.max_retries + 1):
            url = self.replicas[(replica + attempt) % len(self.replicas)][endpoint]
            started = time.perf_counter()
            try:
                response = await self._client(shard).post(url, json=payload)
            except httpx.TimeoutException:
                last_error = f"no answer within {self.timeout_s:g} s"
            except httpx.TransportError as failure:
                last_error = f"{type(failure).__name__}: {failure}"
            else:
                if response.status_code < 500 and response.status_code != 429:
                    return response, time.perf_counter() - started
                last_error = f"HTTP {response.status_code}: {_error_message(response)[:300]}"
            if attempt < self.max_retries:
                self.retries += 1
                await asyncio.sleep(self._backoff(attempt))
        raise BackendUnavailable(
            f"{url}: gave up after {self.max_retries + 1} attempts; last error: {last_error}"
        )

    # -- counting -------------------------------------------------------------------------------

    def _local_count(self, encoded: Sequence[Mapping[str, Any]]) -> int:
        if self._local_tokenizer is None:
            from arc_ref.tokenizers import get_tokenizer

            name = f"hf:{self._tokenizer_json}" if self._tokenizer_json else "o200k_base"
            self._local_tokenizer = get_tokenizer(name)
        chat_format = "chatml" if self.enable_thinking else "qwen3-nothink"
        count: int = self._local_tokenizer.count(render_for_count(encoded, self.tools, chat_format))
        return count

    @property
    def count_source(self) -> str:
        """ "server" (vLLM /tokenize), "local" (tokenizer.json or o200k_base), or "unknown" yet."""
        if self._server_tokenize is None:
            return "unknown"
        return "server" if self._server_tokenize else "local"

    def _local_margin(self) -> int:
        return max([0, *self._calibration])

    async def _count(self, encoded: list[dict[str, Any]], route: tuple[int, int]) -> int:
        if self._server_tokenize is not False:
            payload: dict[str, Any] = {
                "model": self.model,
                "messages": encoded,
                "add_generation_prompt": True,
                "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
            }
            if self.tools:
                payload["tools"] = self.tools
            response, _ = await self._send("tokenize", payload, route)
            if response.status_code == 200:
                body = response.json()
                self._server_tokenize = True
                max_len = body.get("max_model_len")
                if isinstance(max_len, int):
                    self._note_max_model_len(max_len)
                return int(body["count"])
            message = _error_message(response)
            if is_context_overflow(response.status_code, message):
                raise ContextOverflow(message, None, self.context_limit - self.max_tokens)
            if response.status_code in (404, 405) and self.count_with == "auto":
                self._server_tokenize = False
            elif self.count_with == "server":
                raise BackendRequestError(
                    f"the server cannot count tokens (POST /tokenize: HTTP {response.status_code}: "
                    f"{message[:200]}); use count_with='local' with the model's tokenizer.json",
                    response.status_code,
                )
            else:
                raise BackendRequestError(
                    f"POST /tokenize failed: HTTP {response.status_code}: {message[:300]}",
                    response.status_code,
                )
        return self._local_count(encoded) + self._local_margin()

    def _note_max_model_len(self, max_len: int) -> None:
        self.server_max_model_len = max_len
        if max_len < self.context_limit and not self._warned_max_len:
            self._warned_max_len = True
            print(
                f"warning: the server's max_model_len is {max_len}, below the run's context limit "
                f"{self.context_limit}; the server will reject prompts the harness allows",
                file=sys.stderr,
            )

    async def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens the server will charge for `messages` plus the generation prompt."""
        encoded = encode_messages(messages, self.tools)
        return await self._count(encoded, self._route({}))

    def calibration(self) -> dict[str, Any]:
        """Own prompt count vs the server's `usage.prompt_tokens` over the calls so far."""
        diffs = self._calibration
        return {
            "source": self.count_source,
            "calls": len(diffs),
            "mean_diff": sum(diffs) / len(diffs) if diffs else 0.0,
            "mean_abs_diff": sum(abs(d) for d in diffs) / len(diffs) if diffs else 0.0,
            "max_abs_diff": max((abs(d) for d in diffs), default=0),
            "retries": self.retries,
        }

    # -- the call -------------------------------------------------------------------------------

    async def complete(self, request: ChatRequest) -> ChatReply:
        route = self._route(request.tags)
        encoded = encode_messages(request.messages, self.tools)
        own_count = await self._count(encoded, route)
        usable = self.context_limit - self.max_tokens
        if own_count > usable:
            raise ContextOverflow(
                f"prompt of {own_count} tokens exceeds the usable budget L_ctx - G_max = "
                f"{self.context_limit} - {self.max_tokens} = {usable}",
                own_count,
                usable,
            )
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": encoded,
            "max_tokens": min(self.max_tokens, request.max_tokens),
            "temperature": self.temperature,
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
        }
        if request.seed is not None:
            payload["seed"] = request.seed
        if self.tools:
            payload["tools"] = self.tools
            payload["tool_choice"] = "auto"
        response, latency = await self._send("chat", payload, route)
        if response.status_code != 200:
            message = _error_message(response)
            if is_context_overflow(response.status_code, message):
                raise ContextOverflow(message, own_count, usable)
            raise BackendRequestError(
                f"the server refused the request: HTTP {response.status_code}: {message[:500]}",
                response.status_code,
            )
        return self._reply(response, own_count, latency)

    def _reply(self, response: httpx.Response, own_count: int, latency: float) -> ChatReply:
        try:
            body = response.json()
            choice = body["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise BackendUnavailable(
                f"malformed chat completion from the server: {response.text[:300]!r}"
            ) from None
        content = message.get("content") or ""
        content = _THINK_PREFIX.sub("", content)
        for call in message.get("tool_calls") or ():
            action = tool_call_action(call.get("function") or {}, self._tool_params)
            content = (
                f"{content.rstrip()}\nAction: {action}" if content.strip() else f"Action: {action}"
            )
        usage = body.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int):
            self._calibration.append(prompt_tokens - own_count)
        else:
            prompt_tokens = own_count
        completion_tokens = usage.get("completion_tokens")
        if not isinstance(completion_tokens, int):
            completion_tokens = self._local_count([{"role": "assistant", "content": content}])
        finish_reason = str(choice.get("finish_reason") or "stop")
        if finish_reason == "tool_calls":
            finish_reason = "stop"
        return ChatReply(
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
            latency_s=latency,
        )

    async def check_server(self) -> list[dict[str, Any]]:
        """Ask every replica for its models; raise `BackendRequestError` when the model is missing.

        Returns one entry per replica: ``{"url", "models", "max_model_len"}``. Call it once before
        a run to fail fast on a wrong URL or model name.
        """
        found: list[dict[str, Any]] = []
        for replica in self.replicas:
            try:
                response = await self._client().get(replica["models"])
            except httpx.HTTPError as failure:
                raise BackendUnavailable(
                    f"{replica['models']}: {type(failure).__name__}: {failure}"
                ) from None
            if response.status_code != 200:
                raise BackendRequestError(
                    f"{replica['models']}: HTTP {response.status_code}: "
                    f"{_error_message(response)[:300]}",
                    response.status_code,
                )
            cards = response.json().get("data", [])
            ids = [card.get("id") for card in cards]
            if self.model not in ids:
                raise BackendRequestError(
                    f"{replica['models']} serves {', '.join(map(str, ids)) or 'no model'}, "
                    f"not {self.model!r}; pass the served model name"
                )
            card = cards[ids.index(self.model)]
            max_len = card.get("max_model_len")
            if isinstance(max_len, int):
                self._note_max_model_len(max_len)
            found.append({"url": replica["chat"], "models": ids, "max_model_len": max_len})
        return found
