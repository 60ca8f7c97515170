"""Counting a prompt as an OpenAI-compatible server will charge it, before it is sent (the OpenAI backend's
counting; `arc_eval.backends.openai_backend`).

With what the server offers, exactly as the chat endpoint will count it: vLLM's ``POST /tokenize`` with the same
``messages`` (plus ``add_generation_prompt``, ``chat_template_kwargs`` and ``tools``), or llama.cpp's ``POST
/apply-template`` then ``POST /tokenize`` of the rendered prompt. A server with neither (or ``count_with="local"``)
is counted locally (the run's counter, `arc_eval.counting`, the same function the methods count with; with
``--tokenizer DIR`` the model directory's own template and tokenizer, exact); a local count gets a safety margin,
the largest amount by which the server's ``usage.prompt_tokens`` has exceeded it so far.

`ServerView` holds what the server said of itself (``GET /v1/models``: its kind and window), asked once, and the
notes the run says once on stderr; the probing (`arc_eval.backends.probing`) and the counting share it.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Mapping, Sequence

from attrs import frozen

from arc_ref.chat import chatml_format, get_chat_format
from arc_ref.config import DEFAULT_TEMPLATE_KWARGS
from arc_ref.message import ToolSpec
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.servers import (
    LLAMA_CPP,
    VLLM,
    ServerInfo,
    parse_models,
    template_prompt,
    tokenize_count,
    tokens_list_length,
)
from arc_eval.backends.transport import PROBE_TIMEOUT_CAP_S, Route, Transport, error_message, json_of, refused
from arc_eval.counting import TemplateCounter, TokenCounter
from arc_eval.types import BackendRequestError, ContextOverflow, Message
from arc_ref.openai_wire import ShapeError, WireToolCall, read_tool_call

COUNT_MODES = ("auto", "server", "local")
# The chat template's switches every request carries: Qwen3's thinking off (arc_ref.config's, which the local
# count renders with; other templates ignore it).
TEMPLATE_KWARGS: dict[str, Any] = dict(DEFAULT_TEMPLATE_KWARGS)


def chat_template_fields(tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What a counting or template request adds to the messages: the generation prompt, the template's switches,
    the tools offered."""
    fields: dict[str, Any] = {"add_generation_prompt": True, "chat_template_kwargs": dict(TEMPLATE_KWARGS)}
    if tools:
        fields["tools"] = tools
    return fields


def render_for_count(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    chat_format: str,
) -> str:
    """The ChatML text of OpenAI JSON messages (hermes-style tool calls): how serve-scripted renders a
    request when it is given no model directory (an approximation of Qwen's template, ~10% under it on a
    tool transcript; the harness itself counts tool mode with the model directory's own template)."""
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
        for number, call in enumerate(message.get("tool_calls") or ()):
            try:
                read = read_tool_call(call, number)
            except ShapeError:
                read = WireToolCall(None, None, None)
            content += (
                "\n<tool_call>\n"
                + json.dumps({"name": read.name, "arguments": read.arguments}, ensure_ascii=False)
                + "\n</tool_call>"
            )
        role = str(message.get("role", "user"))
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        pairs.append((role, content))
    return fmt.render(pairs)


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


class ServerView:
    """What the server said of itself, asked once (``GET /v1/models`` of the first replica; the preflight asks
    every one), and the notes the run says once each on stderr."""

    def __init__(self, transport: Transport, model: str, context_limit: int) -> None:
        self.transport = transport
        self.model = model
        self.context_limit = context_limit
        self.info: ServerInfo | None = None  # what GET /v1/models said (the preflight, or when first needed)
        self.window: int | None = None  # the window the server reported, if any
        self._warned: set[str] = set()

    def note(self, key: str, text: str) -> None:
        """Say `text` on stderr once per `key` (the run's log)."""
        if key not in self._warned:
            self._warned.add(key)
            print(f"arc-eval: {text}", file=sys.stderr, flush=True)

    async def models(self, replica: int, preflight: bool = False) -> ServerInfo:
        """GET /v1/models of one replica, classified (`arc_eval.backends.servers`)."""
        url = self.transport.url(replica, "models")
        response, _ = await self.transport.send("models", None, (replica, 0),
                                                timeout_s=min(self.transport.probe_timeout_s, PROBE_TIMEOUT_CAP_S),
                                                preflight=preflight)
        if response.status_code != 200:
            raise refused(url, response)
        return parse_models(json_of(response, url), url)

    async def first(self) -> ServerInfo:
        """What the first replica's /v1/models says, asked once."""
        if self.info is None:
            self.info = await self.models(0)
            if self.info.window is not None:
                self.window = self.info.window
        return self.info

    def note_window(self, window: int) -> None:
        """A window a counting endpoint reported; a warning when it is below the run's context limit."""
        self.window = window
        if window < self.context_limit:
            self.note(
                "window-smaller",
                f"warning: the server's max_model_len is {window}, below the run's context limit "
                f"{self.context_limit}; the server will refuse prompts the harness allows",
            )


class ServerCounting:
    """Counts a prompt with the server's endpoints, else locally with the run's counter (see the module
    docstring); keeps the harness's counts beside the server's ``usage`` (``calibration``)."""

    def __init__(self, view: ServerView, counter: TokenCounter, count_with: str, max_tokens: int) -> None:
        self.view = view
        self.counter = counter
        self.count_with = count_with
        self.max_tokens = max_tokens
        self.server_tokenize = count_with != "local"  # False once the server turned out unable
        # per call: (harness count, server's usage.prompt_tokens); local counts exclude the margin
        self._counts: list[tuple[int, int]] = []
        self._local_underrun: list[int] = []  # server - local count, for the local margin
        self._counter_differs = False  # the run's counter was seen to count a prompt otherwise than the server

    def local_count(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """The harness's own count of `messages` offered `tools`, plus the generation prompt: the run's
        counter (`arc_eval.counting`, the one counting seam: with a model directory, its own template
        and tokenizer, exact). A ChatML counter cannot render tool calls: a request with tools is then
        rendered the hermes way (``render_for_count``), an estimate (the runner refuses tool mode
        without a model directory)."""
        if tools and not isinstance(self.counter, TemplateCounter):
            encoded = [message.as_json() for message in messages]
            chat_format = chatml_format(bool(TEMPLATE_KWARGS.get("enable_thinking")))
            text = render_for_count(encoded, [tool.openai() for tool in tools], chat_format)
            return self.counter.tokenizer.count(text)
        return self.counter.count(messages, tools) if tools else self.counter.count(messages)

    @property
    def source(self) -> str:
        """ "server" (vLLM /tokenize or llama.cpp apply-template + tokenize), "local", or
        "unknown" before the first count."""
        if not self.server_tokenize:
            return "local"
        if self.view.info is None:
            return "unknown"
        return "server" if self.view.info.kind in (VLLM, LLAMA_CPP) else "local"

    def _local_margin(self) -> int:
        return max([0, *self._local_underrun])

    async def count(self, messages: Sequence[Message], tools: Sequence[ToolSpec], route: Route) -> PromptCount:
        """The prompt's tokens as the server will charge them (exact where the server counts)."""
        encoded = [message.as_json() for message in messages]
        listing = [tool.openai() for tool in tools] or None
        if self.server_tokenize:
            info = await self.view.first()
            if info.kind == VLLM:
                count = await self._count_vllm(encoded, listing, route)
                if count is not None:
                    return self._compare_counter(count, messages, tools)
            elif info.kind == LLAMA_CPP:
                return self._compare_counter(await self._count_llama_cpp(encoded, listing, route), messages, tools)
            elif self.count_with == "server":
                raise BackendRequestError(
                    f"{info.url}: this server offers no way to count tokens (neither vLLM's "
                    "/tokenize nor llama.cpp's /apply-template). Fix: --count-with local, with the "
                    "served model's directory (--tokenizer DIR)"
                )
            else:
                self.server_tokenize = False
                self.view.note("local-count", "note: the server cannot count tokens; counting locally")
        return PromptCount(self.local_count(messages, tools), exact=False, margin=self._local_margin())

    async def _count_vllm(
        self, encoded: list[dict[str, Any]], tools: list[dict[str, Any]] | None, route: Route
    ) -> PromptCount | None:
        transport = self.view.transport
        url = transport.url(route[0], "tokenize")
        payload = {"model": self.view.model, "messages": encoded, **chat_template_fields(tools)}
        response, _ = await transport.send("tokenize", payload, route)
        if response.status_code == 200:
            body = json_of(response, url)
            tokens = tokenize_count(body, url)
            reported = body.get("max_model_len")
            if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0:
                self.view.note_window(reported)
            return PromptCount(tokens, exact=True)
        message = error_message(response)
        if is_context_overflow(response.status_code, message):
            raise ContextOverflow(message, None, self.view.context_limit - self.max_tokens)
        if response.status_code in (404, 405) and self.count_with == "auto":
            self.server_tokenize = False
            self.view.note("local-count", f"note: {url} answered HTTP {response.status_code}; counting locally")
            return None
        raise refused(url, response)

    async def _count_llama_cpp(
        self, encoded: list[dict[str, Any]], tools: list[dict[str, Any]] | None, route: Route
    ) -> PromptCount:
        """llama-server renders with its own template, then tokenizes that text as chat does."""
        transport = self.view.transport
        template_url = transport.url(route[0], "apply_template")
        payload = {"model": self.view.model, "messages": encoded, **chat_template_fields(tools)}
        response, _ = await transport.send("apply_template", payload, route)
        if response.status_code != 200:
            raise refused(template_url, response)
        prompt = template_prompt(json_of(response, template_url), template_url)
        tokenize_url = transport.url(route[0], "tokenize")
        # add_special and parse_special as llama-server's chat endpoint tokenizes its prompt
        body = {"content": prompt, "add_special": True, "parse_special": True}
        response, _ = await transport.send("tokenize", body, route)
        if response.status_code != 200:
            raise refused(tokenize_url, response)
        return PromptCount(tokens_list_length(json_of(response, tokenize_url), tokenize_url), exact=True)

    def observe(self, count: PromptCount, prompt_tokens: int) -> None:
        """The server's ``usage.prompt_tokens`` for a prompt the harness counted (calibration; a local count's
        under-count widens its margin)."""
        self._counts.append((count.tokens, prompt_tokens))
        if not count.exact:
            self._local_underrun.append(prompt_tokens - count.tokens)
            if prompt_tokens != count.tokens and not self._counter_differs:
                self._counter_differs = True
                self.view.note(
                    "counter-differs",
                    f"warning: the server charged {prompt_tokens} prompt tokens for a prompt the harness counted "
                    f"locally as {count.tokens} ({self._counter_said()}): that tokenizer or chat template is not "
                    "the served model's. Budget checks add the largest under-count seen so far, and the methods "
                    "decide when to compact on these counts. Fix: --tokenizer DIR, the served model's directory",
                )

    def _counter_said(self) -> str:
        return f"--tokenizer {self.counter.tokenizer_name}, chat format {self.counter.chat_format_name}"

    def _compare_counter(self, count: PromptCount, messages: Sequence[Message],
                         tools: Sequence[ToolSpec]) -> PromptCount:
        """The server's exact count of a prompt beside the run's counter's, which the methods decide with (when to
        compact, ARC's K <= L): said once when they differ (a tokenizer or template that is not the served
        model's, e.g. the default o200k_base); compared until then."""
        if not self._counter_differs:
            local = self.local_count(messages, tools)
            if local != count.tokens:
                self._counter_differs = True
                self.view.note(
                    "counter-differs",
                    f"warning: the methods count prompts with {self._counter_said()}, which counts a prompt as "
                    f"{local} tokens where the server counts {count.tokens}: they decide when to compact (and ARC "
                    "keeps K <= L) on those estimates, and the harness's check of the server's count then "
                    "overflows the prompts they under-count. Fix: --tokenizer DIR, the served model's directory",
                )
        return count

    def calibration(self, retries: int) -> dict[str, Any]:
        """The harness's prompt counts vs the server's `usage.prompt_tokens` over the calls so far."""
        diffs = [server - own for own, server in self._counts]
        return {
            "source": self.source,
            "calls": len(diffs),
            "mean_diff": sum(diffs) / len(diffs) if diffs else 0.0,
            "mean_abs_diff": sum(abs(d) for d in diffs) / len(diffs) if diffs else 0.0,
            "max_abs_diff": max((abs(d) for d in diffs), default=0),
            "retries": retries,
        }
