"""Whether an OpenAI-compatible server can serve the run, checked before the first task (the OpenAI backend's
probing; `arc_eval.backends.openai_backend`).

``check_server()`` asks every replica's ``GET /v1/models``: which server it is (`arc_eval.backends.servers`), that
it serves ``model``, and that its window is not smaller than ``context_limit`` (an error naming the fix; a larger
window is said once); then a 1-token chat completion per replica checks that the server answers at all, with the
API key, and, in tool mode, that tool calling is switched on (and, on llama-server, that a prompt ending with the
assistant's message is answered, not continued).
"""

from __future__ import annotations

from typing import Any, TextIO

from arc_ref.config import parse_tools
from arc_ref.message import ToolSpec
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.replies import parse_completion
from arc_eval.backends.server_counting import TEMPLATE_KWARGS, ServerCounting, ServerView, chat_template_fields
from arc_eval.backends.servers import LLAMA_CPP, ServerInfo
from arc_eval.backends.transport import error_message, json_of, refused
from arc_eval.types import BackendRequestError, Message

PROBE_MESSAGES = (Message("user", "Reply with the word OK."),)


class ServerProbe:
    """The checks of a server before the run's first task (see the module docstring)."""

    def __init__(self, view: ServerView, counting: ServerCounting, tools: list[dict[str, Any]] | None) -> None:
        self.view = view
        self.counting = counting
        self.tools = tools  # the tools of tool-calling mode, offered with the probe
        self._probe_tools: tuple[ToolSpec, ...] = parse_tools(tools) if tools else ()
        self.found: list[dict[str, Any]] = []  # what check_server found of each replica (the run's servers.jsonl)

    def check_card(self, info: ServerInfo) -> None:
        """The model is served and the window holds --context-limit; else BackendRequestError."""
        model, context_limit = self.view.model, self.view.context_limit
        if model not in info.model_ids:
            served = ", ".join(info.model_ids) or "no model"
            first = info.model_ids[0] if info.model_ids else "NAME"
            raise BackendRequestError(
                f"{info.url} serves {served}, not {model!r}. Fix: pass --model {first} "
                "(vLLM: the --served-model-name, else the model path; llama-server: its --alias, "
                "else the model file's name)"
            )
        if info.window is None:
            self.view.note(
                "window-unknown",
                f"note: {info.url} does not say its context window; --context-limit {context_limit} is trusted",
            )
        elif info.window < context_limit:
            where = "vLLM --max-model-len" if info.kind != LLAMA_CPP else (
                "llama-server -c with --kv-unified-per-slot, or -c N*L with -np N (each slot "
                "gets -c / -np)"
            )
            raise BackendRequestError(
                f"{info.url}: the server's window is {info.window} tokens ({info.window_field}), "
                f"smaller than --context-limit {context_limit}: every prompt the run allows "
                f"above {info.window} would be refused. Fix: pass --context-limit {info.window} "
                f"(with --max-tokens below it), or restart the server with a window of "
                f"{context_limit} ({where})"
            )
        elif info.window > context_limit:
            self.view.note(
                "window-larger",
                f"note: the server's window is {info.window} tokens ({info.window_field}); the "
                f"run keeps prompt + completion within --context-limit {context_limit}",
            )

    async def check_server(self) -> list[ServerInfo]:
        """Fail fast before the first task: every replica serves the model with a window that
        holds ``context_limit``, answers a 1-token completion (with the API key; with tools, in
        tool mode) and is the same kind of server. Raises `BackendRequestError` (naming the fix),
        `BackendReplyError` or `BackendUnavailable`; returns one `ServerInfo` per replica."""
        replicas = range(len(self.view.transport.replicas))
        infos = [await self.view.models(index, preflight=True) for index in replicas]
        for info in infos:
            self.check_card(info)
        kinds = sorted({info.kind for info in infos})
        if len(kinds) > 1:
            raise BackendRequestError(
                f"the replicas are different servers ({', '.join(kinds)}). Fix: give --base-url "
                "replicas of one server"
            )
        self.view.info = infos[0]
        self.found = [{"url": info.url.removesuffix("/models"), "kind": info.kind, "label": info.label,
                       "model_ids": list(info.model_ids), "window": info.window, "window_field": info.window_field,
                       "owned_by": info.owned_by} for info in infos]
        windows = [info.window for info in infos if info.window is not None]
        if windows:
            self.view.window = min(windows)
        for index in replicas:
            await self.probe(index)
        return infos

    async def probe(self, replica: int) -> None:
        """One 1-token completion: the server answers, accepts the key, and (tools) tool mode."""
        transport = self.view.transport
        url = transport.url(replica, "chat")
        payload: dict[str, Any] = {
            "model": self.view.model,
            "messages": [message.as_json() for message in PROBE_MESSAGES],
            "max_tokens": 1,
            "temperature": 0.0,
            "chat_template_kwargs": dict(TEMPLATE_KWARGS),
        }
        if self.tools:
            payload["tools"] = self.tools
            payload["tool_choice"] = "auto"
        response, _ = await transport.send("chat", payload, (replica, 0), timeout_s=transport.probe_timeout_s,
                                           retries=1)
        if response.status_code != 200:
            message = error_message(response)
            if is_context_overflow(response.status_code, message):
                window = self.view.window
                raise BackendRequestError(
                    f"{url} refused a 1-token probe of a one-line prompt as too long although it "
                    f"reports a window of {window if window else 'unknown size'} tokens: its real "
                    f"window is far smaller than it says. Its message: {message[:500]}. Fix: check "
                    "the server's window (vLLM --max-model-len, llama-server -c / -np) and its log",
                    response.status_code,
                )
            raise refused(url, response)
        completion = parse_completion(json_of(response, url), url)
        if self.tools and self.view.info is not None and self.view.info.kind == LLAMA_CPP:
            await self.probe_prefill(replica)
        if completion.prompt_tokens is not None and self.counting.server_tokenize:
            count = await self.counting.count(PROBE_MESSAGES, self._probe_tools, (replica, 0))
            if count.exact and count.tokens != completion.prompt_tokens:
                self.view.note(
                    "probe-count",
                    f"warning: the server counts the probe prompt as {completion.prompt_tokens} "
                    f"tokens in chat and {count.tokens} with its counting endpoint; the run's "
                    "budget follows the latter",
                )

    async def probe_prefill(self, replica: int) -> None:
        """Tool mode on llama-server: a prompt may end with the assistant's message (a reply without a call),
        which must be answered after, as vLLM does, not continued: llama-server's ``--prefill-assistant``
        (its default) refuses two assistant messages at the end, so /apply-template on such a conversation
        tells which it is."""
        transport = self.view.transport
        url = transport.url(replica, "apply_template")
        conversation = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"},
                        {"role": "assistant", "content": "z"}]
        payload = {"model": self.view.model, "messages": conversation, **chat_template_fields(self.tools)}
        response, _ = await transport.send("apply_template", payload, (replica, 0),
                                           timeout_s=transport.probe_timeout_s, retries=1)
        if response.status_code != 200:
            raise refused(url, response)

    async def preflight(self, out: TextIO) -> None:
        """``check_server`` before a run's first task, saying on ``out`` what was found and the retry budget."""
        transport = self.view.transport
        print(f"checking {', '.join(transport.base_urls)}: GET /v1/models, then a 1-token completion "
              f"(at most {transport.probe_timeout_s:g} s per attempt)", file=out, flush=True)
        for info in await self.check_server():
            window = f"window {info.window} ({info.window_field})" if info.window else "window not said"
            tools = "; tool mode checked" if self.tools else ""
            print(f"server {info.url.removesuffix('/models')}: {info.label}, serves {self.view.model}, "
                  f"{window}; counts with {self.counting.source}{tools}", file=out)
        print(transport.retry_policy(), file=out)
