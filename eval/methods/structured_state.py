"""``structured_state``: the model maintains a fixed JSON schema of task state (paper, Related Works).

On a compaction the recent suffix of turns stays verbatim; the older turns are folded by the model
into a JSON object of a fixed schema, through ``aux(messages, "state")`` (recorded like any other
call). Older observations shorter than 500 characters are kept verbatim next to the state, as in
``llm_summary``. Anything the schema does not model is discarded for good.

The schema (``STATE_SCHEMA``; every key always present):

=================  ==================  =====================================================
key                type                meaning
=================  ==================  =====================================================
``task``           string              the task in one line
``done``           list of strings     one entry per action taken, oldest first, with what it returned
``facts``          object str -> str   exact values found that the task may need, copied verbatim
``sources``        object str -> str   action (file, page...) -> what its output contained
``open_questions`` list of strings     what is still unknown
``next_step``      string              what to do next
=================  ==================  =====================================================

A reply that is not a JSON object is ignored (the previous state is kept and
``invalid_replies`` counts it); unknown keys are dropped and values of the wrong type coerced to
strings. The state shown to the agent is capped at the memory budget: the oldest ``done`` entries,
then the oldest ``sources``, then the oldest ``facts`` are dropped until it fits.
"""

from __future__ import annotations

import json
from typing import Any

from arc_ref.render import TEXT, Template
from arc_eval.methods.base import MethodSettings
from arc_eval.methods.llm_summary import TURNS_HEADER, ModelCondensedMethod
from arc_eval.protocol import STATE_REQUEST_HEADER
from arc_eval.types import Message
from arc_eval.registry import MethodEntry, register_method

STATE_SCHEMA: dict[str, Any] = {
    "task": "string: the task in one line",
    "done": ["string: one entry per action taken, oldest first, with what it returned"],
    "facts": {"NAME": "string: an exact value found that the task may need, copied verbatim"},
    "sources": {"ACTION": "string: what that action's output contained"},
    "open_questions": ["string: what is still unknown"],
    "next_step": "string: what to do next",
}
STATE_KEYS = tuple(STATE_SCHEMA)
STATE_HEADER = "Task state (JSON, maintained by the model across compactions):"
STATE_REQUEST = Template(
    "Task:\n{goal}\n\nCurrent state:\n{current}\n\n" + TURNS_HEADER + "\n{body}\n\nReply with the updated JSON state.",
    goal=TEXT, current=TEXT, body=TEXT,
)

STATE_INSTRUCTIONS = f"""\
{STATE_REQUEST_HEADER}
You maintain the state of an agent's work on a task as one JSON object with exactly this schema:
{json.dumps(STATE_SCHEMA, indent=1)}
Update the current state with the turns below: append to "done", add exact values to "facts" \
(copied verbatim), describe what each action returned in "sources". Reply with the JSON object \
only."""


def empty_state(task: str = "") -> dict[str, Any]:
    return {"task": task, "done": [], "facts": {}, "sources": {}, "open_questions": [], "next_step": ""}


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def normalize_state(value: Any) -> dict[str, Any] | None:
    """A state of exactly the schema's keys and types, or None when ``value`` is not a JSON object."""
    if not isinstance(value, dict):
        return None
    state = empty_state(_as_text(value.get("task", "")))
    for key in ("done", "open_questions"):
        items = value.get(key, [])
        state[key] = [_as_text(item) for item in items] if isinstance(items, list) else [_as_text(items)]
    for key in ("facts", "sources"):
        mapping = value.get(key, {})
        if isinstance(mapping, dict):
            state[key] = {str(name): _as_text(item) for name, item in mapping.items()}
    state["next_step"] = _as_text(value.get("next_step", ""))
    return state


def parse_state(reply: str) -> dict[str, Any] | None:
    """The JSON object in a reply (the outermost ``{...}``; code fences allowed), normalized."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        decoded = json.loads(reply[start : end + 1])
    except json.JSONDecodeError:
        return None
    return normalize_state(decoded)


class StructuredStateMethod(ModelCondensedMethod):
    """Prefix + a model-maintained JSON state + short older observations + recent turns."""

    name = "structured_state"
    purpose = "state"

    def __init__(self, settings: MethodSettings):
        super().__init__(settings)
        self.state: dict[str, Any] | None = None
        self.invalid_replies = 0
        self._shown: tuple[dict[str, Any], str] | None = None  # the state last rendered for the agent, and its text

    def _current(self) -> dict[str, Any]:
        return self.state if self.state is not None else empty_state(self.goal.split("\n", 1)[0])

    def _request(self, body: str) -> tuple[Message, ...]:
        current = json.dumps(self._current(), ensure_ascii=False, indent=1)
        user = STATE_REQUEST.render(goal=self.goal, current=current, body=body)
        return (Message("system", STATE_INSTRUCTIONS), Message("user", user))

    def _absorb(self, reply: str) -> None:
        parsed = parse_state(reply)
        if parsed is None:
            self.invalid_replies += 1
            return
        self.state = self._fit(parsed)

    def _render(self, state: dict[str, Any]) -> str:
        return f"{STATE_HEADER}\n{json.dumps(state, ensure_ascii=False, indent=1)}"

    def _fit(self, state: dict[str, Any]) -> dict[str, Any]:
        """Drop the oldest entries until the rendered state fits the memory budget."""
        while self.counter.text_tokens(self._render(state)) > self.memory_budget:
            if state["done"]:
                state["done"] = state["done"][1:]
            elif state["sources"]:
                state["sources"] = dict(list(state["sources"].items())[1:])
            elif state["facts"]:
                state["facts"] = dict(list(state["facts"].items())[1:])
            elif state["open_questions"]:
                state["open_questions"] = state["open_questions"][1:]
            else:
                state["task"] = self.clip_to_tokens(state["task"], self.memory_budget // 4)
                state["next_step"] = self.clip_to_tokens(state["next_step"], self.memory_budget // 4)
                break
        return state

    def _memory_text(self) -> str:
        """The state as shown, rendered once per state (a new state comes only from a compaction's reply)."""
        if self.state is None:
            return ""
        if self._shown is None or self._shown[0] is not self.state:
            self._shown = (self.state, self._render(self.state))
        return self._shown[1]


register_method(MethodEntry(name=StructuredStateMethod.name, label="Structured_state", order=4, factory=StructuredStateMethod))
