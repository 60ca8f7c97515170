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
from proofs_check.shared_data import qwen3_dir

LARGE = 100_000


def _qwen3() -> str:
    directory = qwen3_dir()
    if directory is None:
        pytest.skip("the Qwen3 tokenizer directory (../shared/data/qwen3-tokenizer) is absent")
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
    session.add_tool_result("c1", output)
    shown = session.messages()
    assert encodes == [len(output)]  # n_j only
    assert "Observation" in shown[-1]["content"] and output not in shown[-1]["content"]  # its stub
    record = session.start().records[-1]
    assert record.content == output and record.n_tokens == get_tokenizer(directory).count(output)
