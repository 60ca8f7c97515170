"""Recognizing a context-overflow rejection from an OpenAI-compatible server (vLLM first of all).

vLLM answers an over-long chat request with HTTP 400 and an OpenAI error object whose message
holds "maximum context length" in every version we found; the wording around it changed:

- v0.4-v0.6 serving layer (`serving_engine.py`, `_validate_prompt_and_tokenize`):
  "This model's maximum context length is 16384 tokens. However, you requested 17000 tokens
  (12904 in the messages, 4096 in the completion). Please reduce the length of the messages or
  completion."
- v0.7-v0.10 (`_validate_input`), when max_tokens alone does not fit:
  "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context
  length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778)."
- recent renderers (`TokenizeParams` length check):
  "This model's maximum context length is 16384 tokens. However, you requested 4096 output tokens
  and your prompt contains at least 12289 input tokens, for a total of at least 16385 tokens.
  Please reduce the length of the input prompt or the number of requested output tokens.
  (parameter=input_tokens, value=12289)"
- the engine's own check (v0.6-v0.8 `Processor`), reached only when the serving layer let the
  prompt through: "The decoder prompt (length 16500) is longer than the maximum model length of
  16384. Make sure that `max_model_len` is no smaller than the number of text tokens."

A 400 is a context overflow when its message contains any of `OVERFLOW_MARKERS`
(case-insensitive). Any other status (5xx, 429, 404...) is never an overflow.
"""

from __future__ import annotations

OVERFLOW_MARKERS = (
    "maximum context length",
    "is too large",
    "please reduce the length of",
    "longer than the maximum model length",
)


def is_context_overflow(status: int, message: str) -> bool:
    """True when an HTTP `status` and error `message` mean "the prompt does not fit"."""
    if status != 400:
        return False
    lowered = message.lower()
    return any(marker in lowered for marker in OVERFLOW_MARKERS)
