"""spec/vectors/tokens.json pins what it claims: each case tells the reference's pre-tokenizer from a port's.

tiktoken runs its pattern with Rust's regex classes (Unicode 16.0; `\\s` = White_Space). A port may run the
same pattern with JavaScript's `\\s` (U+FEFF yes, U+0085 no), Python's `re` `\\s` (U+001C..U+001F yes) or newer
Unicode tables. Each is simulated here with the `regex` package and tiktoken's own byte-pair merging of each
piece; the simulation of Rust's classes must reproduce the vector exactly, and every flagged case must come
out differently under the engine its flag names (spec/rendering.md §2).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from arc_ref.tokenizers import get_tokenizer

regex = pytest.importorskip("regex")

VECTOR = Path(__file__).resolve().parent.parent / "spec" / "vectors" / "tokens.json"

WHITESPACE = {
    # Unicode White_Space, as Rust's regex (and tiktoken) has it
    "white_space": "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000",
    # ECMAScript's WhiteSpace and LineTerminator
    "javascript": "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff",
    # Python's re: every character whose str.isspace() is true
    "python_re": "".join(regex.escape(chr(code)) for code in range(0x110000) if chr(code).isspace()),
}


def _pattern(pat_str: str, whitespace: str) -> Any:
    """tiktoken's pattern with its whitespace class spelled out (`\\s`, `\\S` and `[^\\s...]`)."""
    spelled = pat_str.replace("[^\\s\\p{L}\\p{N}]", f"[^{whitespace}\\p{{L}}\\p{{N}}]")
    spelled = spelled.replace("(?!\\S)", f"(?![^{whitespace}])").replace("\\s", f"[{whitespace}]")
    assert "\\s" not in spelled and "\\S" not in spelled
    return regex.compile(spelled)


@cache
def _encoding(name: str) -> Any:
    return get_tokenizer(name)._encoding  # type: ignore[attr-defined]


def _simulated(tokenizer: str, engine: str, text: str) -> list[int]:
    encoding = _encoding(tokenizer)
    pattern = _pattern(encoding._pat_str, WHITESPACE[engine])
    tokens: list[int] = []
    for piece in pattern.finditer(text):
        tokens += encoding._core_bpe.encode_single_piece(piece.group().encode("utf-8"))
    return tokens


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(VECTOR.read_text(encoding="utf-8"))["cases"]
    return cases


def test_the_simulation_of_rusts_classes_reproduces_every_whitespace_case() -> None:
    for case in _cases():
        if "UnicodeVersion" in case["flags"]:
            continue  # the regex package's tables are newer than 16.0
        if "MergeOrder" in case["flags"]:
            continue  # no whitespace: the merge order's cases (below)
        inputs = case["inputs"]
        simulated = _simulated(inputs["tokenizer"], "white_space", inputs["text"])
        assert simulated == case["result"]["tokens"], case["comment"]


def test_each_whitespace_case_is_tokenized_differently_by_the_engine_it_concerns() -> None:
    for case in _cases():
        inputs = case["inputs"]
        if "UnicodeVersion" in case["flags"] or "MergeOrder" in case["flags"]:
            continue
        engine = "python_re" if "\u001c" in inputs["text"] else "javascript"
        assert _simulated(inputs["tokenizer"], engine, inputs["text"]) != case["result"]["tokens"], (
            f"{case['comment']}: {engine}'s whitespace class gives the reference's tokens; the case pins nothing"
        )


def test_a_letter_of_unicode_17_is_not_a_letter_to_the_reference() -> None:
    """The regex package knows Unicode 17.0 letters; tiktoken's 16.0 tables do not: the vector tells them apart."""
    newer = [case for case in _cases() if "\U0001e6c0" in case["inputs"]["text"]]
    assert newer
    for case in newer:
        assert regex.fullmatch(r"\p{L}", "\U0001e6c0"), "this regex package predates Unicode 17.0"
        inputs = case["inputs"]
        assert _simulated(inputs["tokenizer"], "white_space", inputs["text"]) != case["result"]["tokens"]


def _merged(tokenizer: str, piece: bytes, order: str) -> list[int]:
    """Byte-pair merging of one piece: ``lowest_leftmost`` as rendering.md §2 states it, or a port's wrong
    reading: ``lowest_rightmost`` (the last of the tied pairs) or ``first_mergeable`` (the leftmost pair that
    merges at all, whatever its rank)."""
    ranks = _encoding(tokenizer)._mergeable_ranks
    symbols = [bytes([byte]) for byte in piece]
    while len(symbols) > 1:
        candidates = [(ranks[left + right], index) for index, (left, right) in enumerate(zip(symbols, symbols[1:]))
                      if left + right in ranks]
        if not candidates:
            break
        if order == "first_mergeable":
            _, index = candidates[0]
        elif order == "lowest_rightmost":
            _, index = min(candidates, key=lambda candidate: (candidate[0], -candidate[1]))
        else:
            _, index = min(candidates)
        symbols[index:index + 2] = [symbols[index] + symbols[index + 1]]
    return [ranks[symbol] for symbol in symbols]


def test_each_merge_order_case_is_tokenized_differently_by_a_wrong_merge_order() -> None:
    """The MergeOrder cases: the stated order (lowest rank, leftmost on ties) gives the reference's tokens; a
    rightmost tie fails every case, taking the first mergeable pair fails the eeeee cases."""
    cases = [case for case in _cases() if "MergeOrder" in case["flags"]]
    assert len(cases) == 4
    for case in cases:
        inputs, expected = case["inputs"], case["result"]["tokens"]
        piece = inputs["text"].encode("utf-8")
        assert _merged(inputs["tokenizer"], piece, "lowest_leftmost") == expected, case["comment"]
        assert _merged(inputs["tokenizer"], piece, "lowest_rightmost") != expected, case["comment"]
        if "eeeee" in inputs["text"]:
            assert _merged(inputs["tokenizer"], piece, "first_mergeable") != expected, case["comment"]
