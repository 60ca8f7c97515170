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

from arc_eval.errors import InvalidInput
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.tools import ARC_TOOLS
from arc_eval.types import Message

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


# -- tool-calling mode (``--tool-calling``) -------------------------------------------------------
# The same protocol with OpenAI function tools instead of text actions, for every method alike: the
# task's commands are offered as tools (``TASK_TOOL_SPECS``; ARC adds its own recall and catalog
# tools, `arc_ref.tools.ARC_TOOLS`, before them); a reply's one tool call is its action, its text is
# the thought; the result of a call comes back as a ``tool`` message answering the call's id. The
# function-name rule ^[a-zA-Z0-9_-]{1,64}$ is the OpenAI chat-completions API's.

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def command_tool_spec(name: str, description: str, arguments: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """An OpenAI ``tools`` entry for one command; ``arguments`` = (name, description) pairs, all strings."""
    if not _TOOL_NAME.match(name):
        raise InvalidInput(f"tool name {name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
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


def _tool_spec(name: str, description: str, arguments: Sequence[tuple[str, str]]) -> ToolSpec:
    function = command_tool_spec(name, description, arguments)["function"]
    return ToolSpec(name, description, json.dumps(function["parameters"], ensure_ascii=False))


# The task's commands as tools: the parameters are the command's words in order, so a call's text
# action (``call_action``) is the command itself (``cat notes_02.txt``, ``read context.txt 3``).
_FILE = ("file", "the file name, as ls prints it")
TASK_TOOL_SPECS: tuple[ToolSpec, ...] = (
    _tool_spec("ls", "List the files of the task.", ()),
    _tool_spec("cat", "Print a whole file.", (_FILE,)),
    _tool_spec("head", "Print the first N lines of a file.", (_FILE, ("n", "the number of lines"))),
    _tool_spec("grep", "Print the lines of a file that contain a pattern.",
               (("pattern", "the text to look for"), _FILE)),
    _tool_spec("read", "Print one page (1, 2, ...) of a long file.", (_FILE, ("page", "the page number, from 1"))),
    _tool_spec("submit", "Give your final answer; this ends the task.",
               (("answer", "the answer, in the form the task asks for"),)),
)

TOOL_SYSTEM_PROMPT = """You are an agent solving a task inside a sandbox with a small virtual file system. There is no \
real shell: you act only by calling the tools you are given, exactly one tool call per reply. \
Before the call, say in a few words what you are doing and why.

The result of your call comes back as the tool's answer, starting with "Observation". Answer only \
from what you have seen; when you are done, call submit with the answer in the form the task asks \
for."""


def tool_system_prompt(method_instructions: str = "") -> str:
    """The tool-calling mode's system prompt, with a method's own instructions appended when given."""
    extra = method_instructions.strip()
    return f"{TOOL_SYSTEM_PROMPT}\n\n{extra}" if extra else TOOL_SYSTEM_PROMPT


def call_action(call: ToolCall, tools: Sequence[ToolSpec]) -> str:
    """The text action a tool call stands for: its name, then its argument values in the tool's parameter order.

    The action runs in the sandbox and is what the records show; the call itself (its id, name and
    arguments exactly as the model produced them) is what the transcript keeps.
    """
    return tool_call_action({"name": call.name, "arguments": call.arguments}, tool_names([t.openai() for t in tools]))


def recall_tool_specs() -> list[dict[str, Any]]:
    """OpenAI ``tools`` for ARC's recall and catalog commands (the core's listing, `arc_ref.tools.ARC_TOOLS`)."""
    return [tool.openai() for tool in ARC_TOOLS]


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


def reply_tool_call(text: str, tools: Sequence[ToolSpec], call_id: str) -> tuple[str, tuple[ToolCall, ...]]:
    """A text reply (the scripted agent's) as a tool-calling model's: (its thought, its one call), or (text, ()).

    When the reply's action (``split_tool_action``) is a call of an offered tool, the call is built
    with ``action_to_tool_call`` and the content is the thought; otherwise the reply is plain text.
    """
    params = tool_names([tool.openai() for tool in tools])
    split = split_tool_action(text, params) if params else None
    if split is None:
        return text, ()
    made = action_to_tool_call(split[1], params)
    if made is None:
        return text, ()
    return split[0], (ToolCall(call_id, made[0], made[1]),)


def text_view(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> list[Message]:
    """Messages as a text-action reader sees them: an assistant's tool calls become ``Action:`` lines.

    For the scripted agent, which reads the text protocol: each call is appended to the assistant's
    content as ``Action: <its text action>`` (``call_action``, parameters in the order of ``tools``);
    tool messages keep their role and content.
    """
    viewed: list[Message] = []
    for message in messages:
        content = message.content
        for call in message.tool_calls:
            action = call_action(call, tools)
            content = f"{content.rstrip()}\nAction: {action}" if content.strip() else f"Action: {action}"
        viewed.append(Message(message.role, content))
    return viewed
