"""Counting prompts as the server counts them: the one counting seam of the evaluation layer.

``PromptCounter``: token counts of a message list, serialized the way the server sees it
(``arc_ref.chat`` + an ``arc_ref`` tokenizer), with a cache per message so that a call never
recounts the whole history (the per-call harness overhead target is < 1 ms at the 16k preset).
``shared_counter`` gives the process-wide counter of a tokenizer and chat format: methods and
backends share it (one cache).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from arc_ref.chat import get_chat_format
from arc_ref.tokenizers import get_tokenizer
from arc_eval.types import Message


class PromptCounter:
    """Counts the tokens a server charges for a message list, one cached count per message.

    A message is rendered alone (``<|im_start|>role\\ncontent<|im_end|>\\n`` for ChatML) and
    counted once; a list costs the sum of its messages plus the generation prompt. For ChatML and
    the tiktoken/byte tokenizers the sum equals the count of the whole rendered text, because the
    role markers start a new pre-token at every message boundary.
    """

    def __init__(self, tokenizer: str = "o200k_base", chat_format: str = "chatml", cache_size: int = 8192):
        self.tokenizer = get_tokenizer(tokenizer)
        self.chat_format = get_chat_format(chat_format)
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cache_size = cache_size
        self.generation_prompt_tokens = self.tokenizer.count(self.chat_format.generation_prompt)

    def message_tokens(self, message: Message) -> int:
        key = (message.role, message.content)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        tokens = self.tokenizer.count(self.chat_format.render_message(message.role, message.content))
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens

    def clear(self) -> None:
        """Forget every cached count (benchmarks measure cold caches with it)."""
        self._cache.clear()

    def count(self, messages: Sequence[Message]) -> int:
        """Prompt tokens of ``messages`` with the generation prompt appended."""
        return sum(self.message_tokens(message) for message in messages) + self.generation_prompt_tokens

    def text_tokens(self, text: str) -> int:
        """Tokens of a bare text (no role markers), cached like messages (retrieved memory repeats)."""
        key = ("", text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        tokens = self.tokenizer.count(text)
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens


_COUNTERS: dict[tuple[str, str], PromptCounter] = {}


def shared_counter(tokenizer: str, chat_format: str) -> PromptCounter:
    """The process-wide counter of a tokenizer and chat format (one cache for methods and backends)."""
    key = (tokenizer, chat_format)
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = PromptCounter(tokenizer, chat_format)
        _COUNTERS[key] = counter
    return counter


def clear_counter_caches() -> None:
    """Empty the caches of every shared counter."""
    for counter in _COUNTERS.values():
        counter.clear()
