"""A chat completion read as the OpenAI API promises it, every field checked (issue 9.3), and made the run's
``ChatReply`` (the OpenAI backend's reply parsing; `arc_eval.backends.openai_backend`).

A reply that breaks the promise (no ``choices``, a ``message`` that is not an object, a string
``usage``, a non-numeric token count, tool calls without a function name...) is a
`BackendReplyError` whose message names the field and shows the value: never a KeyError or a
TypeError deep in the loop, and never a task scored on a half-read reply.

Optional fields stay optional where servers differ: ``usage`` may be absent (the harness then
uses its own count), ``finish_reason`` may be null, ``content`` may be null when a tool call
carries the answer.

``chat_reply`` makes the run's reply of it: the text with its reasoning block removed, the tool calls as the
core's (an id for a call without one, an object of arguments written as JSON text), the server's ``usage``
(authoritative; the harness's own count where the server gives none) and ``finish_reason`` ("length" when the
completion hit its cap, clamped or not; "tool_calls" is reported as "stop").
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from attrs import frozen

from arc_ref.message import ToolCall as CoreToolCall
from arc_eval.types import BackendReplyError, ChatReply
from arc_ref.openai_wire import ShapeError, read_tool_call

_THINK_PREFIX = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


@frozen
class ToolCall:
    name: str
    arguments: str | Mapping[str, Any]
    call_id: str = ""  # the call's ``id`` ("" when the server gave none)


@frozen
class Completion:
    """The fields of a chat completion the harness reads."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    prompt_tokens: int | None  # usage.prompt_tokens, None when the server reports no usage
    completion_tokens: int | None
    # usage.prompt_tokens_details.cached_tokens: the prompt tokens served from the server's prefix cache (vLLM with
    # --enable-prompt-tokens-details); None when the server does not say
    cached_tokens: int | None = None


def _count(usage: Mapping[str, Any], key: str, where: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BackendReplyError(f"{where}: usage.{key} must be a non-negative integer, got {value!r}")
    return value


def _tool_calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BackendReplyError(f"{where}: message.tool_calls must be a list, got {raw!r:.200}")
    calls = []
    for index, call in enumerate(raw):
        try:
            read = read_tool_call(call, index)
        except ShapeError:
            read = None
        if read is None or not isinstance(read.name, str):
            raise BackendReplyError(
                f"{where}: message.tool_calls[{index}] needs a function with a string name, "
                f"got {call!r:.200}"
            )
        arguments = "" if read.arguments is None else read.arguments
        if not isinstance(arguments, (str, Mapping)):
            raise BackendReplyError(
                f"{where}: message.tool_calls[{index}].function.arguments must be a JSON string, "
                f"got {arguments!r:.200}"
            )
        call_id = read.call_id
        if call_id is not None and not isinstance(call_id, str):
            raise BackendReplyError(f"{where}: message.tool_calls[{index}].id must be text, got {call_id!r:.200}")
        calls.append(ToolCall(read.name, arguments, call_id or ""))
    return tuple(calls)


def parse_completion(body: Any, where: str) -> Completion:
    """`body` (decoded JSON) as a `Completion`; `BackendReplyError` naming what is wrong."""
    if not isinstance(body, Mapping):
        raise BackendReplyError(f"{where}: a chat completion must be a JSON object, got {body!r:.200}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BackendReplyError(f"{where}: `choices` must be a non-empty list, got {choices!r:.200}")
    choice = choices[0]
    if not isinstance(choice, Mapping):
        raise BackendReplyError(f"{where}: choices[0] must be an object, got {choice!r:.200}")
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise BackendReplyError(f"{where}: choices[0].message must be an object, got {message!r:.200}")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise BackendReplyError(f"{where}: message.content must be text or null, got {content!r:.200}")
    finish_reason = choice.get("finish_reason")
    if finish_reason is not None and not isinstance(finish_reason, str):
        raise BackendReplyError(
            f"{where}: choices[0].finish_reason must be text or null, got {finish_reason!r:.200}"
        )
    usage = body.get("usage")
    prompt_tokens = completion_tokens = cached_tokens = None
    if usage is not None:
        if not isinstance(usage, Mapping):
            raise BackendReplyError(f"{where}: `usage` must be an object, got {usage!r:.200}")
        prompt_tokens = _count(usage, "prompt_tokens", where)
        completion_tokens = _count(usage, "completion_tokens", where)
        details = usage.get("prompt_tokens_details")
        if details is not None:
            if not isinstance(details, Mapping):
                raise BackendReplyError(
                    f"{where}: usage.prompt_tokens_details must be an object, got {details!r:.200}")
            cached_tokens = _count(details, "cached_tokens", where + " (prompt_tokens_details)")
            if cached_tokens is not None and prompt_tokens is not None and cached_tokens > prompt_tokens:
                raise BackendReplyError(
                    f"{where}: usage.prompt_tokens_details.cached_tokens {cached_tokens} exceeds usage.prompt_tokens "
                    f"{prompt_tokens}")
    return Completion(
        content=content,
        tool_calls=_tool_calls(message.get("tool_calls"), where),
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
    )


def chat_reply(completion: Completion, counted_tokens: int, latency_s: float,
               text_tokens: Callable[[str], int]) -> ChatReply:
    """The run's reply of a completion (see the module docstring). ``counted_tokens``: the harness's count of the
    prompt; ``text_tokens``: the run's count of a bare text, for a server that reports no completion tokens."""
    content = _THINK_PREFIX.sub("", completion.content)
    calls = tuple(
        CoreToolCall(
            call.call_id or f"call_{number}",
            call.name,
            call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False),
        )
        for number, call in enumerate(completion.tool_calls)
    )
    prompt_tokens = completion.prompt_tokens if completion.prompt_tokens is not None else counted_tokens
    completion_tokens = completion.completion_tokens
    if completion_tokens is None:
        completion_tokens = text_tokens(content)
    finish_reason = completion.finish_reason or "stop"
    if finish_reason == "tool_calls":
        finish_reason = "stop"
    return ChatReply(
        content=content,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish_reason=finish_reason,
        latency_s=latency_s,
        counted_prompt_tokens=counted_tokens,
        tool_calls=calls,
        cached_prompt_tokens=completion.cached_tokens if completion.prompt_tokens is not None else None,
    )
