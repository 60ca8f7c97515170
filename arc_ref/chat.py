"""Chat serialization: the text a server sees for a list of messages (A4's Serialize).

ChatML is Qwen's format: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then the
generation prompt ``<|im_start|>assistant\\n``. The ``qwen3-nothink`` format appends the empty
think block that Qwen3's template adds when ``enable_thinking`` is false.
"""

from __future__ import annotations

from typing import Iterable

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
