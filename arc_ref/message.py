"""A chat message of the active view with its exact token cost, and the tool-calling values it can carry.

The view is a list of these (A4). A message is what is sent in OpenAI chat format: a role, a content, and in
tool-calling mode the assistant's ``tool_calls`` or the ``tool_call_id`` a tool result answers. Its cost is
counted once, when it is built (`arc_ref.config.Setup.message`, summed from parts of known cost where the
chat format and the tokenizer allow: `arc_ref.counting`): ``tokens`` is what the budgets of A4 are checked
against; for a chat format whose rendering of a message depends on its neighbours (a served model's
template, `arc_ref.templates`), ``placed`` holds the exact cost in every context the view can give it and
``tokens`` is the largest of them.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Sequence

from attrs import field, frozen


@frozen(cache_hash=True)
class Context:
    """Where a message sits in a view: the role before it, the role after it (None: last), a user message later
    (its hash kept: contexts key every message's costs)."""

    before: str | None
    after: str | None
    user_after: bool


@functools.lru_cache(maxsize=256)
def shared_context(before: str | None, after: str | None, user_after: bool) -> Context:
    """The one Context of these fields that the core's messages and views share (an equal one may be built apart:
    `Message.tokens_at` finds it by identity first, by equality otherwise)."""
    return Context(before, after, user_after)


@frozen
class ToolCall:
    """One function call of an assistant turn, as the model produced it (``arguments`` is its JSON text)."""

    call_id: str
    name: str
    arguments: str

    def openai(self) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def action(self) -> str:
        """The call as one action line: its name, a space, its arguments (the text A1's signature is taken of)."""
        return f"{self.name} {self.arguments}"


@frozen
class ToolSpec:
    """One function tool offered to the model; ``parameters`` is the JSON text of its JSON Schema (key order kept).

    ``strict`` and ``defer_loading`` are the function's own flags, and ``listed_defer_loading`` the tool object's
    ``defer_loading`` (vLLM 0.32 copies it into the function's when that is unset): vLLM keeps each in the tool it
    hands the template when it is set (and a strict tool's arguments follow its schema), so the core sends and
    counts them as given; None is unset."""

    name: str
    description: str | None = None
    parameters: str | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    listed_defer_loading: bool | None = None

    def parameters_value(self) -> Any:
        return None if self.parameters is None else json.loads(self.parameters)

    def _flags(self) -> dict[str, bool]:
        return {key: value for key, value in (("strict", self.strict), ("defer_loading", self.defer_loading))
                if value is not None}

    def _listed(self, function: dict[str, Any]) -> dict[str, Any]:
        tool: dict[str, Any] = {"type": "function", "function": function}
        if self.listed_defer_loading is not None:
            tool["defer_loading"] = self.listed_defer_loading
        return tool

    def openai(self) -> dict[str, Any]:
        """The tool as an OpenAI request carries it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        if self.parameters is not None:
            function["parameters"] = self.parameters_value()
        return self._listed({**function, **self._flags()})

    def server_dump(self) -> dict[str, Any]:
        """The tool as vLLM hands it to the template: its pydantic dump, a missing description or parameters as
        None, the flags only where set (`FunctionDefinition` and `ChatCompletionToolsParam` drop them unset)."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters_value()}
        return self._listed({**function, **self._flags()})


@frozen
class Message:
    """One serialized message; ``tokens`` is counted once, when the message is built."""

    role: str
    content: str
    tokens: int
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    placed: tuple[tuple[Context, int], ...] = field(default=(), repr=False)

    def tokens_at(self, context: Context) -> int | None:
        """The exact cost where the view places it; ``tokens`` when the cost does not depend on the place."""
        if not self.placed:
            return self.tokens
        for candidate, cost in self.placed:  # the shared Context (`shared_context`): no field compared
            if candidate is context:
                return cost
        for candidate, cost in self.placed:
            if candidate == context:
                return cost
        return None

    def openai(self) -> dict[str, Any]:
        """The message in OpenAI chat format."""
        return openai_message(self.role, self.content, self.tool_calls, self.tool_call_id)


def openai_message(role: str, content: str, tool_calls: Sequence[ToolCall] = (),
                   tool_call_id: str | None = None) -> dict[str, Any]:
    """A message in OpenAI chat format (``tool_calls`` / ``tool_call_id`` only when set): the one wire shape of the
    core's messages and the evaluation's (``arc_eval.types.Message``)."""
    message: dict[str, Any] = {"role": role, "content": content}
    if tool_calls:
        message["tool_calls"] = [call.openai() for call in tool_calls]
    if tool_call_id is not None:
        message["tool_call_id"] = tool_call_id
    return message
