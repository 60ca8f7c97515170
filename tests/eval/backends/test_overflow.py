"""Context-overflow detection on the exact error texts vLLM versions return."""

from __future__ import annotations

import pytest

from arc_eval.backends.overflow import is_context_overflow

# Texts as vLLM produces them (see eval/backends/overflow.py for where each comes from).
VLLM_OVERFLOW_MESSAGES = [
    # v0.4-v0.6 serving layer
    "This model's maximum context length is 16384 tokens. However, you requested 17000 tokens "
    "(12904 in the messages, 4096 in the completion). Please reduce the length of the messages "
    "or completion.",
    # v0.5 without max_tokens
    "This model's maximum context length is 16384 tokens. However, you requested 16500 tokens in "
    "the messages, Please reduce the length of the messages.",
    # v0.7-v0.10 max_tokens check
    "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context "
    "length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
    # recent renderer check
    "This model's maximum context length is 32768 tokens. However, you requested 4096 output "
    "tokens and your prompt contains at least 28673 input tokens, for a total of at least 32769 "
    "tokens. Please reduce the length of the input prompt or the number of requested output "
    "tokens. (parameter=input_tokens, value=28673)",
    # engine-level check
    "The decoder prompt (length 16500) is longer than the maximum model length of 16384. Make "
    "sure that `max_model_len` is no smaller than the number of text tokens.",
]


@pytest.mark.parametrize("message", VLLM_OVERFLOW_MESSAGES)
def test_vllm_overflow_texts_are_overflows(message: str) -> None:
    assert is_context_overflow(400, message)


@pytest.mark.parametrize("message", VLLM_OVERFLOW_MESSAGES)
def test_other_statuses_are_never_overflows(message: str) -> None:
    for status in (200, 404, 413, 429, 500, 503):
        assert not is_context_overflow(status, message)


@pytest.mark.parametrize(
    "message",
    [
        "The model `Qwen/Qwen3-9B` does not exist.",
        "[{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'}]",
        "temperature must be non-negative, got -1.0.",
        "",
    ],
)
def test_other_bad_requests_are_not_overflows(message: str) -> None:
    assert not is_context_overflow(400, message)
