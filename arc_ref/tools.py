"""ARC's own recall and catalog commands as function tools (tool-calling mode, A3 and A5).

In tool mode (config ``action_mode = "tools"``) the model acts through OpenAI tool calls. ARC offers one
tool per command of `arc_ref.commands`; a call to one of them is turned into the command line it names
(``_recall §00042-0591234567``, ``catalog-page 2``) and answered by the core, never by the environment. The
tool names are the command words, and each tool's parameters are the command's argument (an id or a page
number), so the listing the model reads and the text commands of text mode are the same vocabulary.
"""

from __future__ import annotations

import json
from typing import Any

from arc_ref.commands import Command
from arc_ref.json_limits import MAX_INTEGER_DIGITS, long_integer, nesting_problem
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.text import ASCII_WHITESPACE, ascii_words, clipped

# Rounds of the model's calls to ARC's own tools that a front end (the proxy) answers alone, before the reply goes
# back to the agent: the default of ``arc-ref proxy --max-hidden-rounds`` (rounds that show the model nothing it had
# not seen in the request: a chunk or catalog page again, a stub's metadata, a call ARC refuses) and of
# ``--max-read-rounds`` (rounds that show it a chunk or catalog page it had not: reading a long output chunk by chunk).
DEFAULT_MAX_HIDDEN_ROUNDS = 8
DEFAULT_MAX_READ_ROUNDS = 64

_ID_PARAMETER = ("id", "the observation id, e.g. §00042-0591234567, exactly as printed")
_COMMANDS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("_recall", "Return the first chunk of a stored observation, exactly (never re-runs the tool).", (_ID_PARAMETER,)),
    ("_recall-next", "Return the next chunk of a stored observation being recalled.", (_ID_PARAMETER,)),
    ("_recall-start", "Read a stored observation again from its first chunk.", (_ID_PARAMETER,)),
    ("_recall_meta", "Show only the citation stub (metadata and previews) of a stored observation.", (_ID_PARAMETER,)),
    ("catalog-first", "Show the first page of the catalog of every stored observation.", ()),
    ("catalog-next", "Show the next page of the catalog of stored observations.", ()),
    ("catalog-page", "Show a given page of the catalog of stored observations.", (("page", "page number, from 1"),)),
)


def _parameters(arguments: tuple[tuple[str, str], ...]) -> str:
    schema = {
        "type": "object",
        "properties": {name: {"type": "string", "description": text} for name, text in arguments},
        "required": [name for name, _ in arguments],
    }
    return json.dumps(schema, ensure_ascii=False)


ARC_TOOLS: tuple[ToolSpec, ...] = tuple(
    ToolSpec(name, description, _parameters(arguments)) for name, description, arguments in _COMMANDS
)
ARC_TOOL_NAMES = frozenset(tool.name for tool in ARC_TOOLS)
_ARGUMENT_ORDER = {name: tuple(argument for argument, _ in arguments) for name, _, arguments in _COMMANDS}


# A call's arguments are read by the server (json.loads) and written again by the template (tojson), both
# recursively: they are held to the limits of every JSON reader (arc_ref.json_limits, spec/trace.md section 8).


def arguments_problem(arguments: str) -> str | None:
    """Why a call's ``arguments`` cannot be read back by the server, or None (A2: an event the core refuses).

    The server reads them (json.loads) and the template writes them again (tojson), both recursively, so they
    are held to the limits of every JSON reader (`arc_ref.json_limits`, spec/trace.md section 8). Arguments that
    are not valid JSON are fine (the server reads them as ``{}``), but the limits hold for the raw
    text all the same: nesting deeper than ``MAX_NESTING`` (`arc_ref.json_limits.nesting`) or an integer literal
    of more than ``MAX_INTEGER_DIGITS`` digits is refused.
    """
    too_deep = nesting_problem(arguments)
    if too_deep is not None:
        return f"its arguments are {too_deep}"
    digits = long_integer(arguments)
    if digits is not None:
        return f"its arguments hold an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})"
    return None


def arguments_surrogate(arguments: str) -> str | None:
    """The first lone surrogate (U+D800..U+DFFF) that the JSON text ``arguments`` decodes to, as ``U+XXXX``; or None.

    A call's arguments are JSON text that the server decodes (``\\ud800`` inside it is an escape of a lone
    surrogate): such arguments are not text, and a tool turn holding them is refused (spec/rendering.md §13).
    """
    if "\\u" not in arguments:
        return None
    try:
        decoded: Any = json.loads(arguments)
    except json.JSONDecodeError:
        return None  # kept as text, which holds no surrogate (the trace line was checked)
    pending = [decoded]
    while pending:
        item = pending.pop()
        texts = [item] if isinstance(item, str) else list(item) if isinstance(item, dict) else []
        for text in texts:
            lone = next((char for char in text if "\ud800" <= char <= "\udfff"), None)
            if lone is not None:
                return f"U+{ord(lone):04X}"
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return None


def _server_object(arguments: str) -> dict[str, Any]:
    """The object the server reads from ``arguments`` ({} when it reads none: it then prints ``{}``)."""
    from arc_ref.templates import server_arguments  # the server's reading, one place (the core's tool mode only)

    return server_arguments(arguments)


def longest_string_value(arguments: str) -> int:
    """The length of the longest string value (keys aside, at any depth) of the object the server reads from
    ``arguments``; 0 when it reads no object."""
    pending: list[Any] = [_server_object(arguments)]
    longest = 0
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            longest = max(longest, len(item))
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return longest


def clipped_arguments(arguments: str, keep: int) -> str:
    """``arguments`` as the view shows them when the call cannot fit R whole (spec/rendering.md section 13): every
    string value (keys aside, at any depth) of the object the server reads from them that is longer than ``keep``
    characters clipped to ``clipped(value, keep)``, the object written as the template's ``tojson`` writes it; the
    text itself when nothing is clipped or the server reads no object (it prints ``{}``)."""
    changed = False

    def clip(item: Any) -> Any:
        nonlocal changed
        if isinstance(item, str):
            if len(item) > keep:
                changed = True
                return clipped(item, keep)
            return item
        if isinstance(item, list):
            return [clip(element) for element in item]
        if isinstance(item, dict):
            return {key: clip(element) for key, element in item.items()}
        return item

    result = clip(_server_object(arguments))
    return json.dumps(result, ensure_ascii=False) if changed else arguments


def call_command(call: ToolCall) -> Command:
    """The command a call to one of ARC's tools stands for: its name, and the first word of its first argument.

    The arguments are read as a JSON object and its values taken in the tool's parameter order (any other
    keys after them); a value that is not a string is written as JSON; arguments that are not a JSON object
    are one positional value. The command's argument is the first ASCII word of the first non-blank value
    (as a text command takes the word after the command word), None when there is none.
    """
    try:
        decoded: Any = json.loads(call.arguments) if call.arguments.strip(ASCII_WHITESPACE) else {}
    except json.JSONDecodeError:
        decoded = call.arguments
    values: list[str] = []
    if isinstance(decoded, dict):
        order = _ARGUMENT_ORDER.get(call.name, ())
        keys = [key for key in order if key in decoded] + [key for key in decoded if key not in order]
        for key in keys:
            value = decoded[key]
            values.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    elif decoded is not None:
        values.append(decoded if isinstance(decoded, str) else json.dumps(decoded, ensure_ascii=False))
    words = [word for value in values for word in ascii_words(value)]
    return Command(call.name, words[0] if words else None)
