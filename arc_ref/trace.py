"""The replay contract (`spec/trace.md`): JSON Lines events in, exactly one JSON line out per line in.

This is what a port in another language is tested against. It is a pure function of the input lines;
reading files and writing standard output is the CLI's job (`arc_ref.frontends.cli`). No user input produces a
traceback: a malformed line yields ``{"op": "error", "line": N, "message": ...}`` and the replay goes on
with the state it had before that line.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Iterator


from arc_ref.chat import ChatFormat
from arc_ref.config import OVERRIDE_KEYS, PRESETS, Config, config_json, first_lone_surrogate, preset
from arc_ref.errors import ArcError, BudgetViolation
from arc_ref.json_limits import MAX_NESTING, nesting_problem
from arc_ref.machine import (
    AgentResult,
    AgentTurn,
    ArcState,
    Compact,
    CompactResult,
    Event,
    Observe,
    ObserveResult,
    Output,
    RecallResult,
    RequestView,
    ToolResult,
    ToolTurn,
    ToolTurnResult,
    UserMessage,
    init,
    step,
)
from arc_ref.message import ToolCall
from arc_ref.openai_wire import TOOL_CALL_SHAPE, ShapeError, read_tool_call
from arc_ref.view import View, verify_tokens

TRACE_OPS = ("config", "observe", "agent", "tool_turn", "tool_result", "user", "compact", "view")
TEXT_MODE_OPS = ("config", "observe", "agent", "compact", "view")  # named when a line's op is unknown ...
TOOL_MODE_OPS = ("config", "tool_turn", "tool_result", "user", "compact", "view")  # ... by the task's action mode
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # op: (required keys, optional keys) besides "op"
    "observe": (("action", "observation"), ("returncode",)),
    "agent": (("thought", "action"), ()),
    "tool_turn": (("thought",), ("calls",)),
    "tool_result": (("call_id", "observation"), ("returncode",)),
    "user": (("content",), ()),
    "compact": (("reason",), ()),
    "view": ((), ()),
}


class TraceError(ArcError):
    """A line that is not a valid event; becomes an error output line."""

    code = "trace"


class UnreadableValue(TraceError):
    """JSON text holding a value that no reader takes (trace.md sections 2 and 8): nested more than MAX_NESTING
    levels, an integer literal of more than 4,300 digits, a lone surrogate. The text around it is JSON as far as
    it was read, so a member such as a JSON-RPC id may still be read alone (`arc_ref.frontends.mcp_server`)."""


_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def encode(obj: dict[str, Any]) -> str:
    """Canonical JSON for output lines: sorted keys, no spaces, UTF-8 characters kept."""
    return _CANONICAL.encode(obj)


def encode_config_line(obj: dict[str, Any]) -> str:
    """A config line as a store keeps it: its own keys sorted as ``encode`` sorts them, nested values in their order.

    The values are not sorted: a tool's ``parameters`` are counted as the model reads them, in their own key
    order, and ``template_kwargs`` keep theirs, so sorting them would make another configuration.
    """
    return json.dumps(dict(sorted(obj.items())), ensure_ascii=False, separators=(",", ":"))


# Per op: the keys a line must hold and every key it may hold ("op" included), as sets for one comparison each.
_KEY_SETS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    op: (frozenset(required), frozenset((*required, *optional, "op"))) for op, (required, optional) in _FIELDS.items()
}


def _check_keys(obj: dict[str, Any], op: str) -> None:
    """The keys of a line of ``op`` (`_FIELDS`): every required one, no other than the optional ones."""
    needed, allowed = _KEY_SETS[op]
    keys = obj.keys()
    if needed <= keys <= allowed:  # the usual line: nothing to name
        return
    required, optional = _FIELDS[op]
    missing = [key for key in required if key not in obj]
    if missing:
        raise TraceError(f"missing key(s) {', '.join(missing)} for op {obj['op']!r}")
    unknown = sorted(set(obj) - set(required) - set(optional) - {"op"})
    if unknown:
        raise TraceError(f"unknown key(s) {', '.join(unknown)} for op {obj['op']!r}")


def _string(obj: dict[str, Any], key: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise TraceError(f"{key!r} must be a string, got {_shown_value(value)}")
    return value


def _config_output(state: ArcState, preset_name: str) -> dict[str, Any]:
    setup = state.setup
    return {
        "op": "config",
        "preset": preset_name,
        "config": config_json(setup.config),
        "budget": setup.budget,
        "limit": setup.limit,
        "prefix_tokens": setup.prefix_tokens,
        "wrapper_tokens": setup.wrapper_cost,
    }


def _recall_json(recall: RecallResult) -> dict[str, Any]:
    return {"id": recall.obs_id, "chunk": recall.chunk, "chunks": recall.chunks, "payload": recall.payload}


def _agent_output(result: AgentResult) -> dict[str, Any]:
    output: dict[str, Any] = {"op": "agent", "command": result.command, "folded": result.folded}
    if result.command:
        output["response"] = result.response
    if result.recalls:
        output.update(_recall_json(result.recalls[0]))
        output["recalls"] = [_recall_json(recall) for recall in result.recalls]
    return output


def config_from_line(obj: dict[str, Any]) -> tuple[str, Config]:
    """The preset name and the Config of a config line (ConfigError when a value is refused)."""
    preset_name = obj.get("preset")
    if not isinstance(preset_name, str) or preset_name not in PRESETS:
        raise TraceError(f"config needs \"preset\": one of {', '.join(sorted(PRESETS))}")
    overrides = {key: value for key, value in obj.items() if key not in ("op", "preset")}
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise TraceError(f"unknown config key(s) {', '.join(unknown)}; known: {', '.join(OVERRIDE_KEYS)}")
    return preset_name, preset(preset_name, **overrides)


def config_line(config: Config) -> dict[str, Any]:
    """The config line of ``config``: the preset it differs least from, plus every field that differs.

    ``config_from_line(config_line(c))`` gives back ``c`` (checked here, so a field the trace format cannot
    carry is an error, not a silent change).
    """
    best: dict[str, Any] | None = None
    values = config_json(config)  # JSON fields (tools, template_kwargs) as the trace writes them
    for name, base in PRESETS.items():
        line: dict[str, Any] = {"op": "config", "preset": name}
        line.update({key: values[key] for key in OVERRIDE_KEYS if getattr(config, key) != getattr(base, key)})
        if best is None or len(line) < len(best):
            best = line
    assert best is not None
    if config_from_line(best)[1] != config:
        raise TraceError("this configuration has fields the trace format's config line cannot carry")
    return best


def _configure(obj: dict[str, Any]) -> tuple[ArcState, dict[str, Any]]:
    preset_name, config = config_from_line(obj)
    state = init(config)
    return state, _config_output(state, preset_name)


def event_line(event: Event) -> dict[str, Any]:
    """The trace line of an event (spec/trace.md §2): the inverse of ``_event``; ``encode`` makes it one line.

    This is the one serialization of events: the durable store (`arc_ref.persist`) keeps exactly these lines.
    """
    if isinstance(event, Observe):
        return {"op": "observe", "action": event.action, "observation": event.observation,
                "returncode": event.returncode}
    if isinstance(event, AgentTurn):
        return {"op": "agent", "thought": event.thought, "action": event.action}
    if isinstance(event, ToolTurn):
        return {"op": "tool_turn", "thought": event.thought, "calls": [call.openai() for call in event.calls]}
    if isinstance(event, ToolResult):
        return {"op": "tool_result", "call_id": event.call_id, "observation": event.observation,
                "returncode": event.returncode}
    if isinstance(event, UserMessage):
        return {"op": "user", "content": event.content}
    if isinstance(event, Compact):
        return {"op": "compact", "reason": event.reason}
    if isinstance(event, RequestView):
        return {"op": "view"}
    raise TraceError(f"the trace format has no line for {type(event).__name__} events")


def event_from_line(obj: dict[str, Any]) -> Event:
    """The core event of a parsed trace line other than the config line (TraceError for a malformed one)."""
    op = obj.get("op")
    if op not in _FIELDS:
        raise TraceError(f"\"op\" must be one of {', '.join(_FIELDS)}, got {json.dumps(op)[:40]}")
    return _event(obj)


def parse_line(line: str | bytes) -> dict[str, Any]:
    """One trace line parsed to a JSON object (TraceError when it is not valid JSON or not an object)."""
    obj = _parse(line)
    if not isinstance(obj, dict):
        raise TraceError("each line must be a JSON object")
    return obj


def _event(obj: dict[str, Any]) -> Event:
    """The core event of a trace line (keys and types checked here; values by the core)."""
    op = obj["op"]
    _check_keys(obj, op)
    if op == "observe":
        return Observe(_string(obj, "action"), _string(obj, "observation"), _returncode(obj))
    if op == "agent":
        return AgentTurn(_string(obj, "thought"), _string(obj, "action"))
    if op == "tool_turn":
        return ToolTurn(_string(obj, "thought"), _calls(obj.get("calls", [])))
    if op == "tool_result":
        return ToolResult(_string(obj, "call_id"), _string(obj, "observation"), _returncode(obj))
    if op == "user":
        return UserMessage(_string(obj, "content"))
    if op == "compact":
        return Compact(_string(obj, "reason"))
    return RequestView()


def _returncode(obj: dict[str, Any]) -> int | None:
    """``returncode``: an integer (0 when absent), or null when the environment gave no exit status."""
    returncode = obj.get("returncode", 0)
    if returncode is not None and (isinstance(returncode, bool) or not isinstance(returncode, int)):
        raise TraceError(f"'returncode' must be an integer, got {_shown_value(returncode)}")
    return returncode


def _calls(value: Any) -> tuple[ToolCall, ...]:
    """The ``calls`` of a tool_turn line: OpenAI tool calls, each exactly ``TOOL_CALL_SHAPE`` with string values."""
    if not isinstance(value, list):
        raise TraceError(f"'calls' must be an array of tool calls {TOOL_CALL_SHAPE}, got {_shown_value(value)}")
    calls = []
    for number, item in enumerate(value, start=1):
        where = f"call {number} of 'calls'"
        try:
            read = read_tool_call(item, number - 1, exact=True)
        except ShapeError as bad:
            if bad.rule == "call":
                raise TraceError(f"{where} must be {TOOL_CALL_SHAPE}, got {_shown_value(item)}") from None
            raise TraceError(f"{where}: 'function' must be {{\"name\": ..., \"arguments\": ...}},"
                             f" got {_shown_value(bad.value)}") from None
        for key, member in (("id", read.call_id), ("name", read.name), ("arguments", read.arguments)):
            if not isinstance(member, str):
                raise TraceError(f"{where}: {key!r} must be a string, got {_shown_value(member)}")
        calls.append(ToolCall(read.call_id, read.name, read.arguments))
    return tuple(calls)


def _tool_turn_output(result: ToolTurnResult) -> dict[str, Any]:
    output: dict[str, Any] = {
        "op": "tool_turn",
        "answered": [{"call_id": answer.call_id, "content": answer.content, "response": answer.response}
                     for answer in result.answered],
        "environment_calls": [call.call_id for call in result.environment_calls],
        "folded": result.folded,
    }
    if result.recalls:
        output["recalls"] = [_recall_json(recall) for recall in result.recalls]
    return output


def _output_json(state: ArcState, output: Output, verify: bool) -> dict[str, Any]:
    """The output line of one applied event (spec/trace.md)."""
    if isinstance(output, ObserveResult):
        return {
            "op": "observe",
            "id": output.obs_id,
            "index": output.index,
            "tokens": output.tokens,
            "chunks": output.chunks,
            "verbatim": output.verbatim,
            "folded": output.folded,
        }
    if isinstance(output, AgentResult):
        return _agent_output(output)
    if isinstance(output, ToolTurnResult):
        return _tool_turn_output(output)
    if isinstance(output, CompactResult):
        return {"op": "compact", "reason": output.reason, "folded": output.folded}
    if isinstance(output, View):
        return _view_output(state, output, verify)
    raise TraceError(f"no trace output for {type(output).__name__}")


def _view_output(state: ArcState, shown: View, verify: bool) -> dict[str, Any]:
    """The view's count is the sum of its parts (exact: proofs_check.test_view); ``verify`` recounts the
    serialized text as well and refuses a view whose parts disagree with it."""
    if verify:
        verify_tokens(state.setup, shown)
    return {
        "op": "view",
        "text": shown.text(),
        "tokens": shown.tokens,
        "budget": shown.budget,
        "limit": shown.limit,
        "components": shown.components.as_dict(),
    }


def _apply(state: ArcState, obj: dict[str, Any], verify: bool,
           views: _ViewLines | None = None) -> tuple[ArcState, dict[str, Any] | str | bytes]:
    """Map a trace line to its event, apply it with the one dispatcher (machine.step), map the output back
    (``views``: a view's output line encoded directly, when its chat format allows)."""
    event = _event(obj)
    new_state, output = step(state, event)
    if views is not None and not verify:
        if isinstance(output, View):
            if isinstance(output.chat, ChatFormat):
                return new_state, views.line(output)
        else:
            line = _output_line(event, output)
            if line is not None:
                return new_state, line
    answer = _output_json(new_state, output, verify)
    if isinstance(event, ToolResult):  # a stored tool result: an observe output, named by its op and call
        answer.update(op="tool_result", call_id=event.call_id)
    elif isinstance(event, UserMessage):  # a stored user message: an observe output named by its op
        answer["op"] = "user"
    return new_state, answer


_ESCAPE = json.encoder.encode_basestring  # what _CANONICAL writes for a string (ensure_ascii=False)
_STRING = json.encoder.encode_basestring  # the same, for the strings of the other output lines (`_output_line`)
_BOOLEAN = {True: "true", False: "false"}


def _output_line(event: Event, output: Output) -> str | None:
    """The output line of an observe, agent or compact step written directly: exactly what `encode` writes for
    `_apply`'s object (its keys in sorted order, strings escaped as `_CANONICAL` escapes them, integers in
    decimal), without building the object; None for any other output (then the object is encoded)."""
    if isinstance(output, ObserveResult):
        if isinstance(event, Observe):
            head = '{"chunks":'
            op = "observe"
        elif isinstance(event, ToolResult):
            head = '{"call_id":' + _STRING(event.call_id) + ',"chunks":'
            op = "tool_result"
        else:
            head = '{"chunks":'
            op = "user"
        return (f'{head}{output.chunks:d},"folded":{output.folded:d},"id":{_STRING(output.obs_id)},'
                f'"index":{output.index:d},"op":"{op}","tokens":{output.tokens:d},'
                f'"verbatim":{_BOOLEAN[output.verbatim]}}}')
    if isinstance(output, AgentResult):
        response = output.response
        if output.command and response is None:
            return None
        recalls = output.recalls
        line = ""
        if recalls:
            first = recalls[0]
            line = f'"chunk":{first.chunk:d},"chunks":{first.chunks:d},'
        line = f'{{{line}"command":{_BOOLEAN[output.command]},"folded":{output.folded:d},'
        if recalls:
            line += f'"id":{_STRING(recalls[0].obs_id)},"op":"agent","payload":{_STRING(recalls[0].payload)},"recalls":['
            line += ",".join(f'{{"chunk":{recall.chunk:d},"chunks":{recall.chunks:d},"id":{_STRING(recall.obs_id)},'
                             f'"payload":{_STRING(recall.payload)}}}' for recall in recalls)
            line += "]"
        else:
            line += '"op":"agent"'
        if output.command and response is not None:
            line += f',"response":{_STRING(response)}'
        return line + "}"
    if isinstance(output, CompactResult):
        return f'{{"folded":{output.folded:d},"op":"compact","reason":{_STRING(output.reason)}}}'
    return None


class _ViewLines:
    """View output lines encoded as `encode` would, in UTF-8, each message's escaped text kept while it stays in
    view.

    JSON escapes a string character by character, so the escaped serialized text is the concatenation of
    the escaped messages (and generation prompt); a message shown by the view before (the same object) is
    not rendered, escaped or encoded again. Only the current view's messages are kept: O(K) memory.
    """

    def __init__(self) -> None:
        self._escaped: dict[int, tuple[Any, memoryview]] = {}
        self._prompts: dict[str, bytes] = {}

    def line(self, shown: View) -> bytes:
        """The view's output line in UTF-8 (no line end)."""
        chat = shown.chat
        assert isinstance(chat, ChatFormat)
        kept = self._escaped
        escaped: dict[int, tuple[Any, memoryview]] = {}
        parts: list[bytes | memoryview] = []
        for message in shown.messages:
            known = kept.get(id(message))
            if known is None or known[0] is not message:
                text = _ESCAPE(chat.render_message(message.role, message.content))
                known = (message, memoryview(text.encode("utf-8"))[1:-1])  # the quotes left out, no copy made
            escaped[id(message)] = known
            parts.append(known[1])
        prompt = self._prompts.get(chat.generation_prompt)
        if prompt is None:
            prompt = self._prompts[chat.generation_prompt] = _ESCAPE(chat.generation_prompt)[1:-1].encode("utf-8")
        parts.append(prompt)
        self._escaped = escaped
        # the keys in encode's sorted order: budget, components, limit, op, text, tokens
        head = (f'{{"budget":{shown.budget:d},"components":{encode(shown.components.as_dict())},'
                f'"limit":{shown.limit:d},"op":"view","text":"')
        return b"".join((head.encode("utf-8"), *parts, f'","tokens":{shown.tokens:d}}}'.encode("utf-8")))



def mode_ops(state: ArcState | None) -> tuple[str, ...]:
    """The ops a line of this task may hold, named when a line's op is unknown (text mode before a config)."""
    if state is not None and state.config.action_mode == "tools":
        return TOOL_MODE_OPS
    return TEXT_MODE_OPS


def _parse(line: str | bytes, line_end: bool = False) -> Any:
    """One line's JSON value (TraceError, UnreadableValue). ``line_end``: every CR and LF at the end of the line is
    left out first (bytes are decoded without them: no copy of the line is made to cut them off)."""
    # A line decoded here from strict UTF-8 holds no surrogate, so its parsed strings can hold one only
    # through a \u escape: without a "\u" in the line there is nothing to look for.
    # In UTF-8 no ASCII byte stands inside a longer character, so the bytes of a line hold its "\u", "[" and "{"
    # exactly where its text does: counted there, over the bytes, one byte a character.
    may_hold_surrogate = True
    shallow = False  # fewer brackets than MAX_NESTING levels: `nesting_problem` finds none too deep
    if isinstance(line, bytes):
        shallow = line.count(b"[") + line.count(b"{") <= MAX_NESTING  # CR and LF hold neither, nor a "\\u"
        may_hold_surrogate = _ESCAPED_CODE_POINT.search(line) is not None  # what `b"\\u" in line` says, 2x faster
        end = len(line)
        if line_end:
            while end and line[end - 1] in _LINE_END_BYTES:
                end -= 1
        try:
            line = line.decode("utf-8") if end == len(line) else str(memoryview(line)[:end], "utf-8")
        except UnicodeDecodeError as bad:
            raise TraceError(f"not UTF-8 text (invalid byte at offset {bad.start})") from None
    elif line_end:
        line = line.rstrip("\r\n")
    if line.startswith("\ufeff"):
        raise TraceError("not valid JSON: a byte order mark (U+FEFF) before the value")
    # first: it makes the parser's recursion safe (trace.md section 8)
    too_deep = None if shallow else nesting_problem(line)
    if too_deep is not None:
        raise UnreadableValue(f"JSON {too_deep}")
    try:
        value = (_DECODER if may_hold_surrogate else _PLAIN_DECODER).decode(line)
    except json.JSONDecodeError as bad:
        raise TraceError(f"not valid JSON: {bad.msg} at column {bad.colno}") from None
    except ValueError:  # int() refuses a literal of more than 4300 digits (sys.int_info.default_max_str_digits)
        raise UnreadableValue("not valid JSON: an integer literal of more than 4300 digits") from None
    problem = _lone_surrogate(value) if may_hold_surrogate else None
    if problem is not None:
        raise UnreadableValue(f"not valid Unicode text: {problem}")
    return value


def strict_json(text: str) -> Any:
    """One JSON value read as a trace line is (RFC 8259, no NaN, no lone surrogate); TraceError otherwise."""
    return _parse(text)


def _not_json_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity: Python's parser takes them, RFC 8259 does not."""
    raise TraceError(f"not valid JSON: {name} is not a JSON value")


def _object_keeping_last(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a repeated key keeps its last value, and a value it drops must be text too (trace.md §2)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        for key, member in pairs:
            if obj[key] is not member and _surrogate_in(member) is not None:
                raise UnreadableValue(f"not valid Unicode text: a lone surrogate in a value of the repeated key"
                                 f" {_shown_value(key)}")
    return obj


# One decoder for every line (json.loads with options would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_not_json_constant, object_pairs_hook=_object_keeping_last)
# ... and for a line that can hold no surrogate (strict UTF-8 without a \u escape): a repeated key keeps its last
# value as well, with no value to check and no call back into Python per object.
_PLAIN_DECODER = json.JSONDecoder(parse_constant=_not_json_constant)


def _surrogate_in(value: Any) -> tuple[str, int, bool, str | None] | None:
    """The first string of ``value`` holding a lone surrogate, in the order of the line's text: each key before
    its value, members in order, depth first. (string, index, is a key, the top-level key whose member holds
    it: None for a top-level key itself or a line that is no object); or None.

    Walked without recursion, since a line may nest as deep as the parser allows.
    """
    pending: list[tuple[Any, bool, str | None]] = [(value, False, None)]
    while pending:
        item, is_key, top = pending.pop()
        if isinstance(item, str):
            index = first_lone_surrogate(item)
            if index is not None:
                return item, index, is_key, top
        elif isinstance(item, dict):
            entries: list[tuple[Any, bool, str | None]] = []
            for key, member in item.items():
                entries.append((key, True, top))
                entries.append((member, False, key if item is value else top))
            pending.extend(reversed(entries))
        elif isinstance(item, list):
            pending.extend((member, False, top) for member in reversed(item))
    return None


def _lone_surrogate(value: Any) -> str | None:
    """Where a parsed line holds a lone surrogate (trace.md §2: such a string is not text); None if nowhere.

    The first one in the line's order is reported, with the top-level key under which it stands, never the
    string itself.
    """
    found = _surrogate_in(value)
    if found is None:
        return None
    text, index, is_key, top = found
    where = "the line" if top is None else f"the value of {_shown_value(top)}"
    kind = "a key" if is_key else "a string"
    return f"a lone surrogate U+{ord(text[index]):04X} at index {index} of {kind} in {where}"


def _shown_value(value: Any) -> str:
    """A value echoed in an error message: its JSON, clipped to 40 characters (a line nests at most
    MAX_NESTING levels, so json.dumps can write any value of it)."""
    return json.dumps(value)[:40]


def replay(lines: Iterable[str | bytes], verify: bool = False) -> Iterator[dict[str, Any]]:
    """One output object per input line, in order (the config line included). Bytes lines are UTF-8.

    ``verify``: also count each view's serialized text whole (`verify_tokens`); a view whose parts
    disagree with that count becomes an error line. The outputs are the same either way.
    """
    for output in _replay(lines, verify, None):
        assert isinstance(output, dict)
        yield output


def _replay(lines: Iterable[str | bytes], verify: bool, views: _ViewLines | None,
            line_ends: bool = False) -> Iterator[dict[str, Any] | str | bytes]:
    """`replay`, with lines already encoded when ``views`` is given (a view's in UTF-8: `_ViewLines`, others as
    str: `_output_line`); ``line_ends``: each line may end with CR and LF characters, left out."""
    state: ArcState | None = None
    output: dict[str, Any] | str | bytes
    for number, line in enumerate(lines, start=1):
        try:
            obj = _parse(line, line_ends)
            if not isinstance(obj, dict):
                raise TraceError("each line must be a JSON object")
            op = obj.get("op")
            if op not in TRACE_OPS:
                raise TraceError(f"\"op\" must be one of {', '.join(mode_ops(state))}, got {_shown_value(op)}")
            if op == "config":
                if number != 1:
                    raise TraceError("the config line must be the first line of a trace")
                state, output = _configure(obj)
            elif state is None:
                raise TraceError("no valid config line: the first line must be {\"op\": \"config\", ...}")
            else:
                state, output = _apply(state, obj, verify, views)
        except BudgetViolation as violation:
            output = {"op": "error", "line": number, "message": f"internal budget violation: {violation}"}
        except ArcError as problem:  # a TraceError or a core refusal
            output = {"op": "error", "line": number, "message": str(problem)}
        yield output


_LINE_END_BYTES = b"\r\n"
_ESCAPED_CODE_POINT = re.compile(rb"\\u")  # a "\u" escape's start (in a line of JSON text, as bytes)


def replay_text(lines: Iterable[str | bytes], verify: bool = False) -> Iterator[str]:
    """The replay's output lines, canonically encoded (input lines may keep their line ends: every CR and LF at
    the end of a line is left out)."""
    for output in _replay(lines, verify, _ViewLines(), line_ends=True):
        if isinstance(output, bytes):
            yield output.decode("utf-8")
        else:
            yield output if isinstance(output, str) else encode(output)


def replay_bytes(lines: Iterable[str | bytes], verify: bool = False) -> Iterator[bytes]:
    """`replay_text`'s lines in UTF-8 (what `arc-ref replay` writes; a view's line is encoded once, its messages
    kept encoded while they stay in view)."""
    for output in _replay(lines, verify, _ViewLines(), line_ends=True):
        if isinstance(output, bytes):
            yield output
        else:
            yield (output if isinstance(output, str) else encode(output)).encode("utf-8")
