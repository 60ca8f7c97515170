"""A large tool result is encoded once (issue 18, item 6): its n_j; its verbatim message is never counted when
no message holding it can fit (`arc_ref.history.cannot_fit`).

Before: a 1 MB result was encoded twice in full (n_j, then the verbatim message to learn that it does not
fit), and the issue's profile saw ~45 encodes on an older main.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from arc_ref import tokenizers
from arc_ref.session import Session
from arc_ref.tokenizers import ByteTokenizer, get_tokenizer
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

LARGE = 1_000  # longer than any header or frame


def _qwen3() -> str:
    directory = qwen3_dir()
    if directory is None:
        pytest.skip(QWEN3_ABSENT)
    return f"hf-dir:{directory}"


@settings(max_examples=200, deadline=None)
@example(" " * 400)  # Qwen3's longest tokens: runs of spaces and dashes
@example("//" + "-" * 300)
@given(st.text(max_size=400) | st.text(st.sampled_from("- \n/ab1"), max_size=400))
def test_no_token_covers_more_characters_than_the_bound(text: str) -> None:
    """count(text) * max_token_chars >= len(text): the lower bound `cannot_fit` relies on."""
    qwen = get_tokenizer(_qwen3())
    assert isinstance(qwen, tokenizers.HuggingFaceTokenizer)
    for tokenizer in (ByteTokenizer(), qwen):
        assert tokenizer.count(text) * tokenizer.max_token_chars >= len(text)


def test_the_qwen3_bound_is_its_longest_token() -> None:
    qwen = get_tokenizer(_qwen3())
    assert isinstance(qwen, tokenizers.HuggingFaceTokenizer)
    assert qwen.max_token_chars == 128  # 128 spaces (byte-level 'Ġ' each)
    assert qwen.count(" " * 128 * 3) == 3  # reached: the bound is tight


def test_a_large_tool_result_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _qwen3()
    encodes: list[int] = []
    original = tokenizers.HuggingFaceTokenizer._encoding

    def counted(self: tokenizers.HuggingFaceTokenizer, text: str) -> object:
        if len(text) > LARGE:
            encodes.append(len(text))
        return original(self, text)

    monkeypatch.setattr(tokenizers.HuggingFaceTokenizer, "_encoding", counted)
    session = Session(directory, goal="Solve it.", tools=[{"type": "function", "function": {"name": "bash"}}])
    session.messages()
    session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    output = "".join(f"{n:08d} INFO request ok in {n % 997} ms\n" for n in range(20_000))  # ~700 kB
    encodes.clear()
    session.add_tool_result("c1", output)
    shown = session.messages()
    assert sum(encodes) == len(output)  # n_j only: one pass over the text, in slices
    assert max(encodes) < 2 * tokenizers.SLICE_CHARS
    assert "Observation" in shown[-1]["content"] and output not in shown[-1]["content"]  # its stub
    record = session.start().records[-1]
    assert record.content == output and record.n_tokens == get_tokenizer(directory).count(output)


_PIECES = st.sampled_from(["\n", "\n\n", " \n", "a", "Z", "7", "42", " ", "  ", ":", ".\n", "é", "\u0301", "中",
                           "'s", "<|im_start|>", "<think>", "-", "\t", "\r\n", "😀", "ok "])


@settings(max_examples=300, deadline=None)
@example(["a", "\n", "b"] * 20, 2)
@given(st.lists(_PIECES, max_size=120), st.integers(1, 5))
def test_slices_encode_to_the_tokens_of_the_whole(pieces: list[str], every: int) -> None:
    """Encoding a long text in slices cut after a line feed before a letter or digit gives the whole's tokens,
    count and token starts (with slices of a few characters, so that every text is cut many times)."""
    qwen = get_tokenizer(_qwen3())
    assert isinstance(qwen, tokenizers.HuggingFaceTokenizer)
    text = "".join(pieces)
    whole = qwen._tokenizer.encode(text, add_special_tokens=False)
    starts, floor = [], 0
    for start, _end in whole.offsets:
        floor = max(floor, min(start, len(text)))
        starts.append(floor)
    saved = tokenizers.SLICE_CHARS
    tokenizers.SLICE_CHARS = 4
    try:
        assert len(list(qwen._slices(text))) >= min(1, text.count("\n"))
        assert qwen.encode(text) == whole.ids
        assert qwen.count(text) == len(whole.ids)
        assert qwen.count_and_starts(text, every) == (len(whole.ids), starts[::every])
    finally:
        tokenizers.SLICE_CHARS = saved


def test_an_observation_over_the_largest_is_refused_at_once_and_the_call_still_waits() -> None:
    from arc_ref.errors import InvalidEvent
    from arc_ref.store import LARGEST_OBSERVATION_BYTES

    session = Session(_qwen3(), goal="Solve it.", tools=[{"type": "function", "function": {"name": "bash"}}])
    session.messages()
    session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    too_large = "é" * (LARGEST_OBSERVATION_BYTES // 2 + 1)  # 2 bytes each: one byte over
    with pytest.raises(InvalidEvent, match="observation of 67,108,866 bytes is larger than the largest stored"):
        session.add_tool_result("c1", too_large)
    session.add_tool_result("c1", "a.txt")  # nothing was stored: the call still waits for its result
    assert session.start().records[-1].content == "a.txt"
