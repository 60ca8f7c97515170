"""The paper's text-action protocol: the system prompt, and how a reply becomes (thought, action).

Every model reply is a thought and exactly one action (paper, "Background": the agent "produces a
thought and an action"). Normal actions go to the task's sandbox (``ls``, ``cat FILE``,
``head FILE N``, ``grep PATTERN FILE``, ``read FILE PAGE``, ``submit ...``); a method may add its
own commands (ARC's ``_recall §id`` and catalog commands), which the method intercepts before any
environment sees them. A method adds its instructions to the system prompt in ``Method.begin``.

Reply parsing rule (``parse_reply``), in order:

1. Reasoning blocks ``<think>...</think>`` are removed (an unclosed ``<think>`` drops the rest;
   a lone ``</think>`` drops everything before it).
2. The action is taken from the LAST line labelled ``Action:`` (case-insensitive, optional ``**``
   bold markers): the text after the label, or, when that is empty, the next non-empty line that
   is not a code fence. One line only: anything after it is ignored.
3. Without an ``Action:`` label, the action is the last line whose first word is a known command
   (a task tool, or any word starting with ``_`` such as ARC's ``_recall``).
4. Surrounding backticks or ``**``, a leading ``$ `` and surrounding whitespace are stripped from
   the action.
5. The thought is the text after the last ``Thought:`` label that precedes the action line (or all
   text before the action line when there is no such label), stripped.
6. When no action can be found the action is ``""``: the loop answers it with
   ``NO_ACTION_MESSAGE`` (return code 2) and the step counts like any other.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

TASK_VERBS = ("ls", "cat", "head", "grep", "read", "submit")

TASK_TOOLS = """\
  ls                    list the files of the task
  cat FILE              print a whole file
  head FILE N           print the first N lines of FILE
  grep PATTERN FILE     print the lines of FILE that contain PATTERN
  read FILE PAGE        print page PAGE (1, 2, ...) of a long FILE
  submit ANSWER         give your final answer; this ends the task"""

SYSTEM_PROMPT = f"""\
You are an agent solving a task inside a sandbox with a small virtual file system. There is no \
real shell: only the commands below exist, and each reply runs exactly one of them.

Commands:
{TASK_TOOLS}

Reply in exactly this format:
Thought: <your reasoning about what to do next>
Action: <exactly one command>

The result of your action comes back as the next message, starting with "Observation". \
Answer only from what you have seen; when you are done, use submit with the answer in the form \
the task asks for."""

NO_ACTION_MESSAGE = (
    "No action found in your reply. Reply with a line 'Thought: ...' and then a line "
    "'Action: <one command>'."
)

# Headers of the auxiliary requests that llm_summary / structured_state send to the model. The
# scripted agent recognizes an auxiliary request by these exact first lines, like a model would by
# reading its instructions.
SUMMARY_REQUEST_HEADER = "TRANSCRIPT SUMMARY REQUEST"
STATE_REQUEST_HEADER = "TASK STATE UPDATE REQUEST"


def system_prompt(method_instructions: str = "") -> str:
    """The protocol's system prompt, with a method's own instructions appended when given."""
    extra = method_instructions.strip()
    return f"{SYSTEM_PROMPT}\n\n{extra}" if extra else SYSTEM_PROMPT


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LABEL = r"^\s*(?:[*#>-]+\s*)?{name}(?:\s*\*+)?\s*:\s*(?:\*+\s*)?"
_ACTION_LABEL = re.compile(_LABEL.format(name="action"), re.IGNORECASE)
_THOUGHT_LABEL = re.compile(_LABEL.format(name="thought"), re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w-]*\s*$")


def strip_reasoning(text: str) -> str:
    """Remove ``<think>`` blocks (rule 1)."""
    text = _THINK_BLOCK.sub("", text)
    lowered = text.lower()
    if "</think>" in lowered:
        text = text[lowered.rindex("</think>") + len("</think>") :]
    elif "<think>" in lowered:
        text = text[: lowered.index("<think>")]
    return text


def clean_action(text: str) -> str:
    """Rule 4: strip whitespace, surrounding backticks or ``**`` and a leading shell prompt."""
    action = text.strip()
    while True:
        if len(action) >= 4 and action.startswith("**") and action.endswith("**"):
            action = action[2:-2].strip()
        elif len(action) >= 2 and action[0] == "`" and action[-1] == "`":
            action = action[1:-1].strip()
        else:
            break
    action = re.sub(r"^\*{2,}|\*{2,}$", "", action).strip("`").strip()
    if action.startswith("$ "):
        action = action[2:].strip()
    return action


def command_word(action: str) -> str:
    """The first word of an action, lowercased ("" for an empty action)."""
    parts = action.split(None, 1)
    return parts[0].lower() if parts else ""


def is_known_command(line: str) -> bool:
    word = command_word(clean_action(line))
    return word in TASK_VERBS or (len(word) > 1 and word.startswith("_"))


def parse_reply(text: str) -> tuple[str, str]:
    """Split a model reply into (thought, action) by the module's documented rule."""
    lines = strip_reasoning(text).split("\n")
    action_line = -1
    action = ""
    for index in range(len(lines) - 1, -1, -1):
        match = _ACTION_LABEL.match(lines[index])
        if match is None:
            continue
        action_line = index
        action = clean_action(lines[index][match.end() :])
        if not action:
            for following in lines[index + 1 :]:
                if following.strip() and not _FENCE.match(following):
                    action = clean_action(following)
                    break
        break
    if action_line < 0:
        for index in range(len(lines) - 1, -1, -1):
            if is_known_command(lines[index]):
                action_line = index
                action = clean_action(lines[index])
                break
    before = lines[: action_line if action_line >= 0 else len(lines)]
    thought_start = 0
    for index in range(len(before) - 1, -1, -1):
        match = _THOUGHT_LABEL.match(before[index])
        if match is not None:
            before[index] = before[index][match.end() :]
            thought_start = index
            break
    thought = "\n".join(before[thought_start:]).strip()
    return thought, action


def is_submission(action: str) -> bool:
    return command_word(action) == "submit"


def submitted_text(action: str) -> str:
    """What follows ``submit`` in a submission action ("" when nothing does)."""
    parts = action.strip().split(None, 1)
    return parts[1].strip() if len(parts) == 2 else ""


# -- native tool calling (optional) --------------------------------------------------------------
# In tool-calling mode the method's own commands (ARC's recall and catalog commands) are offered to
# the server as OpenAI "function" tools; a tool call the model makes is turned back into the same
# text action (``name arg1 arg2``), so methods and records see one protocol. The function-name rule
# ^[a-zA-Z0-9_-]{1,64}$ is the OpenAI chat-completions API's.

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def command_tool_spec(name: str, description: str, arguments: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """An OpenAI ``tools`` entry for one command; ``arguments`` = (name, description) pairs, all strings."""
    if not _TOOL_NAME.match(name):
        raise ValueError(f"tool name {name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": text} for arg, text in arguments},
                "required": [arg for arg, _ in arguments],
            },
        },
    }


def tool_call_to_action(name: str, arguments: str | Mapping[str, Any], order: Sequence[str] = ()) -> str:
    """The text action for a native tool call: the name, then the argument values (in ``order`` first).

    ``arguments`` is the JSON text the server returned (or the decoded mapping). A value that is not
    valid JSON is taken as a single positional argument.
    """
    values: list[str] = []
    if isinstance(arguments, str):
        try:
            decoded: Any = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            decoded = arguments
    else:
        decoded = dict(arguments)
    if isinstance(decoded, Mapping):
        keys = [key for key in order if key in decoded] + [key for key in decoded if key not in order]
        values = [str(decoded[key]).strip() for key in keys]
    elif decoded is not None:
        values = [str(decoded).strip()]
    return " ".join([name, *[value for value in values if value]])


# ARC's recall and catalog commands (``arc_ref.commands``) as tools, for ``--tool-calling``. The
# parameter order is the order of the command's words, so ``tool_call_to_action`` rebuilds the
# exact text command (``_recall §0001-3fa9c1e2``, ``catalog-page 2``).
_RECALL_ID = ("id", "the observation id, e.g. §0001-3fa9c1e2, exactly as printed")
RECALL_TOOL_COMMANDS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("_recall", "Return the first chunk of a stored observation, exactly (never re-runs the tool).", (_RECALL_ID,)),
    ("_recall-next", "Return the next chunk of a stored observation being recalled.", (_RECALL_ID,)),
    ("_recall-start", "Read a stored observation again from its first chunk.", (_RECALL_ID,)),
    ("_recall_meta", "Show only the citation stub (metadata and previews) of a stored observation.", (_RECALL_ID,)),
    ("catalog-first", "Show the first page of the catalog of every stored observation.", ()),
    ("catalog-next", "Show the next page of the catalog of stored observations.", ()),
    ("catalog-page", "Show a given page of the catalog of stored observations.", (("page", "page number, from 1"),)),
)


def recall_tool_specs() -> list[dict[str, Any]]:
    """OpenAI ``tools`` for ARC's recall and catalog commands (native tool-calling mode)."""
    return [command_tool_spec(name, description, arguments) for name, description, arguments in RECALL_TOOL_COMMANDS]


# -- text actions <-> tool calls (the model's side: the scripted server and the scripted backend) ------


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


_TOOL_ACTION_LINE = re.compile(r"^\s*\**\s*action\s*\**\s*:\s*\**\s*(.*?)\s*$", re.IGNORECASE)
_TOOL_THOUGHT_LABEL = re.compile(r"^\s*\**\s*thought\s*\**\s*:\s*\**\s*", re.IGNORECASE)


def split_tool_action(text: str, tools: Mapping[str, list[str]]) -> tuple[str, str] | None:
    """(thought, action) when the reply's action is a call of one of `tools`; else None.

    The action is the last ``Action:`` line (or, without one, the last line that starts with a
    tool name); the thought is the text before it, without its ``Thought:`` label.
    """
    lines = text.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        match = _TOOL_ACTION_LINE.match(lines[index])
        candidate = match.group(1).strip("`").strip() if match else lines[index].strip()
        words = candidate.split()
        if match is None and not (words and words[0] in tools):
            continue
        if not words or words[0] not in tools:
            return None
        thought = "\n".join(lines[:index]).strip()
        thought = _TOOL_THOUGHT_LABEL.sub("", thought, count=1).strip()
        return thought, candidate
    return None
