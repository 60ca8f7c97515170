"""OpenAI's chat wire shapes, read: the one reader of a message's content, its tool calls, the tools offered
and an error body, for every front end (the proxy, the Session, the trace) and the evaluation layer.

The writer side is `arc_ref.message` (``ToolCall.openai``, ``ToolSpec.openai``, ``openai_message``); here is
the reading of what an agent, a client library or a server sends. A reader checks the shape and raises
``ShapeError`` naming the rule broken (``rule``) and where (``index``); each caller words the refusal for its
own users (an HTTP 400 of the proxy, a ``SessionError``, a trace error line, a backend's reply error), so the
shape is read once and the messages stay each front end's. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from attrs import frozen

from arc_ref.errors import ArcError

TOOL_CALL_SHAPE = '{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}'
TOOL_SHAPE = '{"type": "function", "function": {"name": ...}}'
# The content parts vLLM joins into a message's text for the chat template (its other parts are not text).
SERVER_TEXT_PARTS = ("text", "input_text", "output_text", "refusal")
_JSON_SCALARS = (str, bytes, int, float, bool, list, tuple, type(None))


class ShapeError(ArcError):
    """A value that is not the OpenAI shape a reader expects. ``rule`` names what is wrong (``"content"``,
    ``"part"``, ``"call"``, ``"function"``, ``"tool"``, a tool's flag: `read_tool_flags`), ``value`` is the offending value, ``index`` its
    0-based place in its list (None when it is not in one)."""

    code = "bad_shape"

    def __init__(self, rule: str, value: Any = None, index: int | None = None) -> None:
        super().__init__(f"not an OpenAI {rule}: {str(value)[:80]!r}")
        self.rule = rule
        self.value = value
        self.index = index


def field_of(value: Any, name: str) -> Any:
    """A field of a mapping (a JSON object) or of an object (the openai client's pydantic models); None when
    absent."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _is_object(value: Any) -> bool:
    """A JSON object, or a client library's object standing for one (anything but a scalar or a list)."""
    return isinstance(value, Mapping) or not isinstance(value, _JSON_SCALARS)


# --- content ---------------------------------------------------------------------------------------------


def content_parts(content: Any, *, as_server: bool = False) -> tuple[str, ...]:
    """The texts of a message's ``content``: none for null, the string itself, or each text part of a list.

    An agent's parts (the proxy's reading) are ``{"type": "text", "text": STRING}``, nothing else. Read
    ``as_server`` (what vLLM hands the chat template), a part may also be a bare string or a part of a type of
    ``SERVER_TEXT_PARTS`` whose ``text`` (or ``refusal``) is kept as text, a null one skipped.
    ShapeError ``"part"`` for another part, ``"content"`` for content that is none of these.
    """
    if content is None:
        return ()
    if isinstance(content, str):
        return (content,)
    if not isinstance(content, list):
        raise ShapeError("content", content)
    texts = []
    for index, part in enumerate(content):
        if as_server and isinstance(part, str):
            texts.append(part)
        elif as_server and isinstance(part, Mapping) and part.get("type") in SERVER_TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            if text is not None:
                texts.append(str(text))
        elif not as_server and isinstance(part, Mapping) and part.get("type") == "text" \
                and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise ShapeError("part", part, index)
    return tuple(texts)


# --- tool calls ------------------------------------------------------------------------------------------


@frozen
class WireToolCall:
    """The fields of one tool call as sent (not yet checked for type: each caller has its own rule)."""

    call_id: Any
    name: Any
    arguments: Any  # None when absent


def read_tool_call(call: Any, index: int, *, exact: bool = False) -> WireToolCall:
    """The id, function name and arguments of a tool call ``TOOL_CALL_SHAPE`` (a mapping or a client object).

    ShapeError ``"function"`` when the call or its ``function`` is not an object. ``exact`` (the trace
    format, spec/trace.md): a JSON object with exactly the keys of ``TOOL_CALL_SHAPE``, ``type`` "function"
    (else ``"call"``), and a ``function`` of exactly ``name`` and ``arguments`` (else ``"function"``).
    """
    if exact:
        if not isinstance(call, dict) or set(call) != {"id", "type", "function"} or call["type"] != "function":
            raise ShapeError("call", call, index)
        function = call["function"]
        if not isinstance(function, dict) or set(function) != {"name", "arguments"}:
            raise ShapeError("function", function, index)
        return WireToolCall(call["id"], function["name"], function["arguments"])
    function = field_of(call, "function") if _is_object(call) else None
    if not _is_object(function):
        raise ShapeError("function", call, index)
    return WireToolCall(field_of(call, "id"), field_of(function, "name"), field_of(function, "arguments"))


def arguments_text(arguments: Any, *, ensure_ascii: bool = True) -> str:
    """A call's ``arguments`` as the JSON text the model produced: text kept as it is, null or absent "", any
    other value (an object some clients send) written as JSON."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=ensure_ascii)


# --- tools -----------------------------------------------------------------------------------------------


def read_tool(tool: Any, index: int, type_optional: bool = False) -> Mapping[str, Any]:
    """The ``function`` of an OpenAI function tool ``TOOL_SHAPE`` (its name a string); ShapeError ``"tool"``.
    ``type_optional``: a tool without ``"type"`` is a function tool, as vLLM 0.32 reads a request's tools
    (`ChatCompletionToolsParam`: ``type`` defaults to ``"function"``)."""
    kind = tool.get("type", "function" if type_optional else None) if isinstance(tool, Mapping) else None
    function = tool.get("function") if isinstance(tool, Mapping) and kind == "function" else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ShapeError("tool", tool, index)
    return function


def read_tool_flags(tool: Mapping[str, Any], function: Mapping[str, Any],
                    index: int) -> tuple[bool | None, bool | None, bool | None]:
    """(``strict``, ``defer_loading``) of a tool's ``function`` and the tool object's own ``defer_loading``, each
    true, false or None (null or absent), as vLLM 0.32 keeps them (`arc_ref.message.ToolSpec`); ShapeError whose
    ``rule`` names the flag (``"function.strict"``, ``"function.defer_loading"``, ``"defer_loading"``) for another
    value."""
    flags: list[bool | None] = []
    for holder, key, name in ((function, "strict", "function.strict"),
                              (function, "defer_loading", "function.defer_loading"),
                              (tool, "defer_loading", "defer_loading")):
        value = holder.get(key)
        if value is not None and not isinstance(value, bool):
            raise ShapeError(name, value, index)
        flags.append(value)
    return flags[0], flags[1], flags[2]


# --- error bodies ----------------------------------------------------------------------------------------


def error_body(message: str, kind: str, code: int | str, param: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """An OpenAI error body as vLLM nests it: ``{"error": {"message", "type", "param", "code", ...extra}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code, **extra}}


def error_message(body: Any) -> str | None:
    """The ``message`` of an error body (nested under ``error`` as vLLM does, or at the top; vLLM's 401 is
    ``{"error": "Unauthorized"}``); None when the body holds none."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error", body)
    if isinstance(error, Mapping) and "message" in error:
        return str(error["message"])
    if isinstance(error, str):
        return error
    if "message" in body:
        return str(body["message"])
    return None
