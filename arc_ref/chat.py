"""Chat serialization: the text a server sees for a list of messages (A4's Serialize).

ChatML is Qwen's format: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then the
generation prompt ``<|im_start|>assistant\\n``. The ``qwen3-nothink`` format appends the empty
think block that Qwen3's template adds when ``enable_thinking`` is false.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from attrs import frozen

from arc_ref.errors import ConfigError


@frozen
class ChatFormat:
    """Role markers around each message and the generation prompt after the last one."""

    name: str
    message_start: str  # followed by the role and a newline
    message_end: str
    generation_prompt: str
    positional = False  # a message costs the same wherever it sits (a served template's may not)

    def render_message(self, role: str, content: str) -> str:
        return f"{self.message_start}{role}\n{content}{self.message_end}"

    def frame(self, role: str) -> tuple[str, str] | None:
        """``(before, after)`` with ``render_message(role, c) == before + c + after`` for every content c:
        the content is embedded verbatim, so a message's tokens can be summed from its parts (None for a
        format that rewrites the content: its messages are counted whole)."""
        return f"{self.message_start}{role}\n", self.message_end

    def render(self, messages: Iterable[tuple[str, str]], add_generation_prompt: bool = True) -> str:
        text = "".join(self.render_message(role, content) for role, content in messages)
        return text + self.generation_prompt if add_generation_prompt else text


CHATML = ChatFormat(
    name="chatml",
    message_start="<|im_start|>",
    message_end="<|im_end|>\n",
    generation_prompt="<|im_start|>assistant\n",
)

QWEN3_NOTHINK = ChatFormat(
    name="qwen3-nothink",
    message_start="<|im_start|>",
    message_end="<|im_end|>\n",
    generation_prompt="<|im_start|>assistant\n<think>\n\n</think>\n\n",
)

CHAT_FORMATS = {fmt.name: fmt for fmt in (CHATML, QWEN3_NOTHINK)}
DEFAULT_CHAT_FORMAT = CHATML.name  # a configuration's, the evaluation's and serve-scripted's default


def chatml_format(enable_thinking: bool) -> str:
    """The ChatML format a request's ``enable_thinking`` asks for (Qwen3's no-think variant when it is off)."""
    return CHATML.name if enable_thinking else QWEN3_NOTHINK.name


def get_chat_format(name: str) -> ChatFormat:
    try:
        return CHAT_FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"unknown chat format {name!r}; known: {', '.join(sorted(CHAT_FORMATS))}"
        ) from None


APPLY_CHAT_TEMPLATE_PARAMETERS = frozenset({
    "conversation", "continue_final_message", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs"})
"""The other parameters of transformers 5's ``apply_chat_template`` (vLLM 0.32 lets a request's keywords reach
them, `resolve_chat_template_kwargs`): the template never sees them."""


def parse_template_kwargs(value: Any) -> tuple[tuple[str, Any], ...]:
    """The ``template_kwargs`` override: a JSON object of scalars (the request's ``chat_template_kwargs``), the
    keyword arguments a served chat template renders with (read by the config and by the proxy's requests)."""
    if isinstance(value, tuple):
        items = list(value)
    elif isinstance(value, dict):
        items = list(value.items())
    else:
        raise ConfigError(f"config key 'template_kwargs' must be an object, got {json.dumps(value)[:40]}")
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise ConfigError("config key 'template_kwargs' must map names to values")
        key, scalar = item
        if scalar is not None and not isinstance(scalar, (str, int, float, bool)):
            raise ConfigError(f"config key 'template_kwargs': {key!r} must be a string, number, boolean or null")
        if key in ("messages", "tools", "documents", "add_generation_prompt", "chat_template", "tokenize"):
            raise ConfigError(f"config key 'template_kwargs': {key!r} is set by the request itself")
        if key in APPLY_CHAT_TEMPLATE_PARAMETERS:
            raise ConfigError(f"config key 'template_kwargs': {key!r} is a parameter of the server's"
                              " apply_chat_template (it changes the rendering or is consumed), not a template variable")
    return tuple(items)
