"""Recognizing a context-overflow rejection from an OpenAI-compatible server (vLLM, llama.cpp).

vLLM answers an over-long chat request with HTTP 400 and an OpenAI error object. What it refuses,
and the words it uses, changed over its releases. Read in the source of the wheels of 0.6.0,
0.8.5, 0.9.0, 0.10.2, 0.11.0, 0.14.0, 0.22.0, 0.25.1, 0.31.0, 0.32.0 and 0.33.0 (the ranges below
join the releases read; L = max_model_len, N = prompt tokens, M = the request's max_tokens):

- 0.6.0 - 0.9.0 (`entrypoints/openai/serving_engine.py`, `OpenAIServing._validate_input`) refuses
  N + M > L: "This model's maximum context length is L tokens. However, you requested N+M tokens
  (N in the messages, M in the completion). Please reduce the length of the messages or
  completion." (without max_tokens and N >= L: "... you requested N tokens in the messages, Please
  reduce the length of the messages.").
- 0.10.2 - 0.14.0 (same function) refuses N >= L: "This model's maximum context length is L tokens.
  However, your request has N input tokens. Please reduce the length of the input messages." and
  N + M > L: "'max_tokens' or 'max_completion_tokens' is too large: M. This model's maximum context
  length is L tokens and your request has N input tokens (M > L - N)." From 0.14 these are
  `VLLMValidationError`s, whose text ends with " (parameter=..., value=...)".
- 0.22.0 - 0.31.0 (`renderers/params.py`, `TokenizeParams._token_len_check`, with
  ``max_input_tokens = L - M``) still refuses N + M > L: "This model's maximum context length is L
  tokens. However, you requested M output tokens and your prompt contains [at least ]N input
  tokens, for a total of [at least ]N+M tokens. Please reduce the length of the input prompt or
  the number of requested output tokens. (parameter=input_tokens, value=N)".
- 0.32.0 - 0.33.0 (same method, ``max_input_tokens = L``) refuses only N > L: "This model's maximum
  context length is L tokens. However, your prompt contains [at least ]N input tokens, which
  exceeds this limit even without any output tokens. Please reduce the length of the input
  prompt. (parameter=input_tokens, value=N)"; below that it clamps max_tokens to L - N
  (`entrypoints/serve/utils/api_utils.py`, `get_max_tokens`), and N == L leaves 0, which
  `SamplingParams._verify_args` refuses: "max_tokens must be at least 1, got 0. (parameter=
  max_tokens, value=0)". That refusal is an overflow too: the prompt left no room to answer.

llama.cpp's `llama-server` (tools/server/server-context.cpp) answers HTTP 400 with
``{"error": {"type": "exceed_context_size_error", "message": "request (N tokens) exceeds the
available context size (M tokens), try increasing it", "n_prompt_tokens": N, "n_ctx": M}}``.
(Its HTTP 500 "Context size has been exceeded." is not an overflow of the prompt but of a KV pool
shared by several slots: see `arc_eval.backends.faults`.)

A 400 is a context overflow when its message contains any of `OVERFLOW_MARKERS`
(case-insensitive). Any other status (5xx, 429, 404...) is never an overflow.
"""

from __future__ import annotations

OVERFLOW_MARKERS = (
    "maximum context length",  # every vLLM release
    "is too large",  # vLLM 0.10-0.14: 'max_tokens' ... is too large
    "please reduce the length of",
    "longer than the maximum model length",  # vLLM 0.6-0.8 engine check
    "context length is only",
    "max_tokens must be at least 1",  # vLLM >= 0.32: a prompt of exactly L tokens
    "exceeds the available context size",  # llama.cpp
    "larger than the max context size",  # llama.cpp, non-causal models
)


def is_context_overflow(status: int, message: str) -> bool:
    """True when an HTTP `status` and error `message` mean "the prompt does not fit"."""
    if status != 400:
        return False
    lowered = message.lower()
    return any(marker in lowered for marker in OVERFLOW_MARKERS)
