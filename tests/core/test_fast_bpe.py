"""The fast engine of a Hugging Face tokenizer file (spec/rendering.md section 2, "The fast engine"): tiktoken over
the file's ASCII tokens gives exactly the ids, counts and token starts of ``tokenizers`` on every text it takes, and
the texts it does not take (non-ASCII, holding an added token's text) and the files that fail its conditions are
counted by ``tokenizers`` itself.

The reference in every comparison is ``tokenizers``' own ``encode(text, add_special_tokens=False)``: its ids, and its
offsets' starts made non-decreasing (spec/rendering.md section 2). Real material: Qwen3's ``tokenizer.json``, its 47
llama.cpp cases and the recorded agent trajectories in ``../shared/data`` (skipped, saying why, when absent).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from arc_ref import tokenizers
from arc_ref.tokenizers import (
    QWEN2_SPLIT, FastAsciiEncoder, HuggingFaceTokenizer, byte_level_characters, get_tokenizer,
)
from proofs_check.profiles import DEFAULT_PROFILE, PROFILE_ENV
from proofs_check.shared_data import QWEN3_ABSENT, json_strings, qwen3_dir, shared_data_dir

QWEN3 = qwen3_dir()
needs_qwen3 = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
PROFILE = settings.get_profile(os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE)  # `ci` unless told otherwise
EVERY = (1, 2, 7, 16, 256)  # token-start strides: 16 and more take tokenizers' sparse reading of starts
ASCII = "".join(map(chr, range(128)))
# what an ASCII character is put beside: letters, digits, spaces, line ends, an apostrophe (the contractions)
CONTEXT = ("a", "Z", "s", "0", "7", " ", "  ", "\n", "\r", "\r\n", "\t", "'", ".", "-")
ADDED = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_response>",
         "<|fim_middle|>")


def qwen3() -> HuggingFaceTokenizer:
    assert QWEN3 is not None
    tokenizer = get_tokenizer(f"hf:{QWEN3 / 'tokenizer.json'}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    assert tokenizer.fast_path_refusal == "", tokenizer.fast_path_refusal
    return tokenizer


def reference(tokenizer: HuggingFaceTokenizer, text: str) -> tuple[list[int], list[int]]:
    """tokenizers' own ids and token starts (offsets' starts, made non-decreasing) of ``text``."""
    encoding = tokenizer._tokenizer.encode(text, add_special_tokens=False)
    starts = list(itertools.accumulate((min(start, len(text)) for start, _end in encoding.offsets), max))
    return encoding.ids, starts


def fast_taken(tokenizer: HuggingFaceTokenizer, text: str) -> bool:
    """True when ``text`` is encoded by the fast engine (its one encode is a list of ids)."""
    return isinstance(tokenizer._encoding(text), list)


def assert_same(tokenizer: HuggingFaceTokenizer, text: str, every: tuple[int, ...] = EVERY) -> None:
    ids, starts = reference(tokenizer, text)
    assert tokenizer.encode(text) == ids, text
    assert tokenizer.count(text) == len(ids), text
    for stride in every:
        assert tokenizer.count_and_starts(text, stride) == (len(ids), starts[::stride]), (text, stride)


# --- (a) every ASCII character, alone and beside letters, digits, spaces and line ends -------------------------


@needs_qwen3
def test_every_ascii_character_alone_in_pairs_and_in_triples() -> None:
    tokenizer = qwen3()
    texts = [*ASCII, *(a + b for a in ASCII for b in ASCII)]
    texts += [left + c + right for c in ASCII for left in CONTEXT for right in CONTEXT]
    texts += [c * 3 for c in ASCII] + [c + word for c in ASCII for word in ("'s", "'S", "'ll", "'LL", "'Ve", "'d")]
    for text in texts:
        assert fast_taken(tokenizer, text), text
        ids, starts = reference(tokenizer, text)
        assert tokenizer.encode(text) == ids, text
        assert tokenizer.count_and_starts(text, 1) == (len(ids), starts), text


@needs_qwen3
def test_the_characters_the_regex_engines_could_read_apart() -> None:
    """White space that Python's re counts and Unicode does not (U+001C..U+001F), vertical tab and form feed, DEL,
    NUL and the contractions in every letter case, in runs and beside each other."""
    tokenizer = qwen3()
    odd = "\x0b\x0c\x1c\x1d\x1e\x1f\x7f\x00"
    for text in [odd, odd * 5, " " + odd + " x", "a\x0b\x0bb", "x\x1c\n\x1fy", "\x0c\n\n\x0c a", *(
            f"it{a}{b}" for a in "'" for b in ["s", "S", "t", "T", "re", "RE", "rE", "ve", "VE", "m", "M", "ll", "LL",
                                               "lL", "d", "D"])]:
        assert fast_taken(tokenizer, text)
        assert_same(tokenizer, text)


@needs_qwen3
def test_long_pieces_which_tiktoken_merges_with_its_other_loop() -> None:
    """tiktoken merges a piece of 100 bytes or more with a heap instead of a scan (both lowest rank, leftmost):
    long runs of letters, spaces, punctuation and line ends, alone and mixed, past Qwen3's longest token (128)."""
    tokenizer = qwen3()
    runs = ["a" * 150, "ab" * 120, "Zq" * 99 + "x", " " * 100, " " * 129, " " * 500 + "x", "-" * 257, "=-" * 130,
            "\n" * 140, "\r\n" * 70, "\t " * 90, "." * 99, "." * 100, "//" + "-" * 300, " " + "!@#$%^&*()" * 15,
            "'s" * 60, "aaaaa" * 40, "eeeee " * 30 + "\n"]
    for text in runs + [" ".join(runs), "\n".join(runs)]:
        assert fast_taken(tokenizer, text)
        assert_same(tokenizer, text)


# --- (b) random ASCII text --------------------------------------------------------------------------------------


_ASCII_PIECES = st.sampled_from(["\n", "\n\n", " \n", "\r\n", "\t", " ", "   ", "a", "Z", "ab", "The", "7", "42",
                                 "1.5", "'s", "'LL", ":", ".\n", "-", "--", "==", "//", "\x0b", "\x0c", "\x1c", "\x7f",
                                 "<", ">", "<thin", "k>", "|", "_", "{", "}", "x = f(y)\n", "    return 0\n"])


@needs_qwen3
@settings(PROFILE)
@example("")
@example("<thin" + "k>")
@given(st.text(st.characters(max_codepoint=127), max_size=300) | st.lists(_ASCII_PIECES, max_size=80).map("".join))
def test_random_ascii_text_is_encoded_alike(text: str) -> None:
    tokenizer = qwen3()
    assert fast_taken(tokenizer, text) == (not any(added in text for added in tokenizer.added_tokens()))
    assert_same(tokenizer, text)


# --- (c) real text: the 47 llama.cpp cases and recorded agent trajectories --------------------------------------


@needs_qwen3
def test_the_47_vocabulary_cases() -> None:
    assert QWEN3 is not None
    inputs = (QWEN3 / "vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    expected = (QWEN3 / "vocab-test.out").read_text(encoding="utf-8").split("\n")
    assert len(inputs) == len(expected) == 47
    tokenizer = qwen3()
    taken = 0
    for text, ids in zip(inputs, expected):
        taken += fast_taken(tokenizer, text)
        assert tokenizer.encode(text) == [int(token) for token in ids.split()], text
        assert_same(tokenizer, text)
    assert taken >= 30  # most cases are ASCII: the fast engine's own answers are what was compared


def trajectory_texts() -> list[str]:
    """Every string of the recorded agent trajectories (observations, actions, thoughts, prompts), in file order."""
    folder = shared_data_dir() / "trajectories"
    texts: list[str] = []
    for path in sorted(folder.glob("*.traj")) + sorted(folder.glob("*.jsonl")):
        raw = path.read_text(encoding="utf-8")
        values = [json.loads(line) for line in raw.splitlines() if line.strip()] if path.suffix == ".jsonl" else [
            json.loads(raw)]
        texts += [text for value in values for text in json_strings(value) if text]
    return texts


@needs_qwen3
def test_recorded_agent_trajectories() -> None:
    folder = shared_data_dir() / "trajectories"
    if not any(folder.glob("*.traj")):
        pytest.skip(f"no recorded trajectories in {folder} (real material lives in ../shared/data)")
    tokenizer = qwen3()
    texts = trajectory_texts()
    fast = [text for text in texts if fast_taken(tokenizer, text)]
    assert len(fast) >= len(texts) // 2 and sum(map(len, fast)) > 500_000  # mostly ASCII tool output and code
    for text in texts:
        assert_same(tokenizer, text, (1, 7, 256))


# --- (d) added tokens go to tokenizers; long texts in slices -----------------------------------------------------


@needs_qwen3
def test_texts_holding_an_added_token_are_encoded_by_tokenizers() -> None:
    tokenizer = qwen3()
    for added in ADDED:
        for text in (added, f"x{added}y", f"{added}\n{added}", f"a <b> {added} 'll\n\n", f"{added[:-1]} {added[1:]}"):
            assert not fast_taken(tokenizer, text) if added in text else fast_taken(tokenizer, text)
            assert_same(tokenizer, text)
    for near in ("<|im_start", "im_start|>", "<think", "think>", "</tool_call", "<|endoftext", "< think>"):
        assert fast_taken(tokenizer, near) and fast_taken(tokenizer, f"a{near}b")
        assert_same(tokenizer, f"a{near}b")


@needs_qwen3
@pytest.mark.parametrize("every", EVERY)
def test_slices_mixing_both_engines_give_the_tokens_and_starts_of_the_whole(
        every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long text is encoded in slices (peak memory), each by the engine that takes it: ASCII slices by the fast
    engine, a slice with a non-ASCII character or an added token by tokenizers; together the whole's tokens."""
    tokenizer = qwen3()
    lines = ["def f(x):", "    return x  # done", "Ärger über Öl", "<think>", "plain text 42", "中文 and more", "ok"]
    text = "\n".join(lines[k % len(lines)] + f" {k}" for k in range(400)) + "\n"
    monkeypatch.setattr(tokenizers, "SLICE_CHARS", 40)
    slices = [piece for _, piece in tokenizer._slices(text)]
    assert len(slices) > 50 and any(map(str.isascii, slices)) and not all(map(str.isascii, slices))
    ids, starts = reference(tokenizer, text)
    assert tokenizer.encode(text) == ids
    assert tokenizer.count_and_starts(text, every) == (len(ids), starts[::every])


@needs_qwen3
def test_fast_encodes_are_counted_as_encodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fast encode is one call of `HuggingFaceTokenizer._encoding`, the method the counting tests patch
    (tests/proxy/test_new_conversation.py, tests/core/test_count_once.py): no work is hidden from them."""
    tokenizer = qwen3()
    calls = {"encodings": 0, "fast": 0}
    encoding, fast_encode = HuggingFaceTokenizer._encoding, FastAsciiEncoder.encode

    def counted_encoding(self: HuggingFaceTokenizer, text: str) -> Any:
        calls["encodings"] += 1
        return encoding(self, text)

    def counted_fast(self: FastAsciiEncoder, text: str) -> list[int]:
        calls["fast"] += 1
        assert calls["fast"] == calls["encodings"]  # inside the counted call
        return fast_encode(self, text)

    monkeypatch.setattr(HuggingFaceTokenizer, "_encoding", counted_encoding)
    monkeypatch.setattr(FastAsciiEncoder, "encode", counted_fast)
    tokenizer.count("ls -la\ntotal 0\n")
    tokenizer.encode("hello")
    tokenizer.count_and_starts("a b c", 1)
    assert calls == {"encodings": 3, "fast": 3}
    tokenizer.count("<think>")
    assert calls == {"encodings": 4, "fast": 3}


# --- files that fail a condition get no fast engine ---------------------------------------------------------------


def synthetic_file(merges: list[tuple[str, str]], first: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    """A small tokenizer.json of Qwen2's shape: the 256 byte-level symbols (ids 0-255), the tokens ``first``, then
    the products of ``merges`` in merge order (the next ids), one added token; ``changes`` replace top-level parts."""
    symbols = byte_level_characters()
    vocab = {symbol: value for value, symbol in enumerate(symbols)}
    for token in (*first, *(left + right for left, right in merges)):
        vocab.setdefault(token, len(vocab))
    data: dict[str, Any] = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": "<|im_start|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": copy.deepcopy(tokenizers._QWEN2_PRE_TOKENIZER),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[left, right] for left, right in merges]},
    }
    data.update(changes)
    return data


def load(tmp_path: Path, name: str, data: dict[str, Any]) -> HuggingFaceTokenizer:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tokenizer = get_tokenizer(f"hf:{path}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    tokenizer.build_fast_engine()  # at once, not after FAST_ENGINE_AFTER characters
    return tokenizer


def unchecked_tiktoken(data: dict[str, Any]) -> Any:
    """tiktoken built from a file's vocabulary without any check (what the fast engine would be without them)."""
    import tiktoken

    byte_of = {symbol: value for value, symbol in enumerate(byte_level_characters())}
    ranks = {bytes(byte_of[c] for c in token): value for token, value in data["model"]["vocab"].items()}
    return tiktoken.Encoding("unchecked", pat_str=QWEN2_SPLIT, mergeable_ranks=ranks, special_tokens={})


GOOD = [("Ġ", "a"), ("a", "b"), ("b", "c"), ("ab", "c"), ("Ġa", "b"), ("c", "c"), ("cc", "cc")]
SAMPLE = "abc abcc bcab cccc ab c ccccc"


def test_a_file_passing_every_condition_gets_the_fast_engine(tmp_path: Path) -> None:
    tokenizer = load(tmp_path, "good", synthetic_file(GOOD))
    assert tokenizer.fast_path_refusal == ""
    for text in (SAMPLE, "abcabc", " ab c", "cccccccc", "a<|im_start|>b"):
        assert fast_taken(tokenizer, text) == ("<|im_start|>" not in text)
        assert_same(tokenizer, text)


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> HuggingFaceTokenizer:
    return load(tmp_path_factory.mktemp("good"), "good", synthetic_file(GOOD))


@settings(PROFILE)
@given(st.text(st.sampled_from("abc \n"), max_size=60))
def test_the_synthetic_file_agrees_on_random_text(good_file: HuggingFaceTokenizer, text: str) -> None:
    assert fast_taken(good_file, text)
    assert_same(good_file, text)


@pytest.mark.parametrize("case, merges, first, refusal, differs", [
    # c1: two merges swapped: merge order is no longer id order ("abc": tokenizers makes "bc" first, tiktoken "ab")
    ("swapped", [("b", "c"), ("a", "b"), ("ab", "c")], ("ab", "bc"), "c1:", True),
    # c1: the id order against the merge order, nothing else wrong ("abc": tokenizers makes "ab", tiktoken "bc")
    ("order", [("a", "b"), ("b", "c")], ("bc", "ab"), "c1:", True),
    # c1: one token made by two merges ("abcc": tokenizers merges "cc" before the second merge of "abc")
    ("twice", [("a", "b"), ("b", "c"), ("a", "bc"), ("c", "c"), ("ab", "c")], (), "c1:", True),
    # c2: the merge of "abc" replaced by another split of it, which tokenizers never reaches ("ab" wins over "bc")
    ("other split", [("a", "b"), ("b", "c"), ("a", "bc")], (), "c2:", True),
    # c2: a token no merge makes, which tiktoken's concatenation rule still forms
    ("unmade", [("a", "b")], ("abc",), "c2:", True),
    # c3: a merge of a token made by a later merge (the proof's induction needs parts before products)
    ("part after", [("ab", "c"), ("a", "b")], ("abc", "ab"), "c3:", False),
])
def test_a_file_failing_a_condition_is_counted_by_tokenizers(case: str, merges: list[tuple[str, str]],
                                                             first: tuple[str, ...], refusal: str, differs: bool,
                                                             tmp_path: Path) -> None:
    data = synthetic_file(merges, first)
    tokenizer = load(tmp_path, case.replace(" ", "-"), data)
    assert_same(tokenizer, SAMPLE)
    ids, _starts = reference(tokenizer, SAMPLE)
    # where the condition matters, tiktoken built from this vocabulary without the checks gives other ids
    assert (unchecked_tiktoken(data).encode_ordinary(SAMPLE) != ids) == differs
    assert tokenizer.fast_path_refusal.startswith(refusal), tokenizer.fast_path_refusal
    assert not fast_taken(tokenizer, SAMPLE)


def test_a_file_of_another_shape_is_counted_by_tokenizers(tmp_path: Path) -> None:
    """GPT-2's byte-level pre-tokenizer (its own regex) is not Qwen2's: no fast engine, whatever the merges."""
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    tokenizer = load(tmp_path, "gpt2", synthetic_file(GOOD, pre_tokenizer=gpt2))
    assert tokenizer.fast_path_refusal == "a pre-tokenizer other than Qwen2's"
    assert_same(tokenizer, SAMPLE + " 'll x")
    trimming = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tokenizer = load(tmp_path, "trimming", synthetic_file(GOOD, post_processor=trimming))
    assert tokenizer.fast_path_refusal.startswith("a post processor")
    assert_same(tokenizer, SAMPLE)


@needs_qwen3
def test_a_tokenizer_with_its_engine_built_is_pickled_and_copied() -> None:
    """tiktoken's object keeps no ranks to pickle (the build drops them): the tokenizer is copied without its engine,
    which the copy takes from the per-content cache."""
    tokenizer = qwen3()
    text = "def f(x):\n    return x  # 'LL\n"
    for copied in (pickle.loads(pickle.dumps(tokenizer)), copy.deepcopy(tokenizer)):
        assert isinstance(copied, HuggingFaceTokenizer) and copied._fast is None
        assert fast_taken(copied, text) and copied.count_and_starts(text, 1) == tokenizer.count_and_starts(text, 1)
        assert copied._fast_encoder() is tokenizer._fast_encoder()


def test_the_engine_is_built_once_a_file_has_encoded_enough_ascii_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short command never pays the build: ASCII texts go through tokenizers until FAST_ENGINE_AFTER characters
    have been asked for, then through the engine; a second tokenizer of the same content takes it at once."""
    monkeypatch.setattr(tokenizers, "FAST_ENGINE_AFTER", 100)
    data = synthetic_file(GOOD)
    data["added_tokens"][0]["content"] = "<|threshold|>"  # content of its own: no engine built for it yet
    path = tmp_path / "threshold.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    tokenizer = get_tokenizer(f"hf:{path}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    text = "abc abcc cccc ab c cc"  # 21 characters
    for _ in range(4):  # 21, 42, 63, 84 characters asked for
        assert not fast_taken(tokenizer, text) and tokenizer._fast is None
    assert fast_taken(tokenizer, text) and tokenizer.fast_path_refusal == ""  # 105
    assert_same(tokenizer, text)
    again = HuggingFaceTokenizer(str(path), tokenizer._tokenizer, digest=tokenizer._digest)
    assert fast_taken(again, "ab")


def test_no_engine_with_a_tiktoken_that_merges_long_pieces_in_quadratic_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tiktoken before 0.13 has no heap merge for pieces of 100 bytes or more: a 100 KB run of letters took seconds."""
    import tiktoken

    monkeypatch.setattr(tiktoken, "__version__", "0.12.0")
    data = synthetic_file(GOOD)
    data["added_tokens"][0]["content"] = "<|old tiktoken|>"  # content of its own: no engine built for it yet
    tokenizer = load(tmp_path, "old-tiktoken", data)
    assert tokenizer.fast_path_refusal == "tiktoken before 0.13 merges a long piece in quadratic time"
    assert not fast_taken(tokenizer, SAMPLE)
    assert_same(tokenizer, SAMPLE)


def test_no_engine_for_a_vocabulary_of_sparse_ids(tmp_path: Path) -> None:
    """Token ids far past the vocabulary's size are refused before the model is serialized (its memory, and the byte
    lengths by id, grow with the largest id)."""
    data = synthetic_file(GOOD)
    data["model"]["vocab"]["cc"] = 10**6  # a product of GOOD's merges, renumbered
    data["added_tokens"][0]["id"] = 10**6 + 1
    tokenizer = load(tmp_path, "sparse", data)
    assert tokenizer.fast_path_refusal == "c0: a token id far past the vocabulary's size"
    assert_same(tokenizer, SAMPLE)


def test_a_normalized_added_token_falls_back_in_its_nfc_form() -> None:
    """``tokenizers`` matches a ``normalized`` added token in the normalized text: U+212A (Kelvin) is "K" after NFC,
    so "OK" would hold it. (Such a file fails the lossless check at load; the engine's rule is checked on the
    ``tokenizers`` object itself.)"""
    from tokenizers import Tokenizer as RustTokenizer

    data = synthetic_file(GOOD)
    data["added_tokens"].append({"id": data["added_tokens"][0]["id"] + 1, "content": "\u212a", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": True, "special": False})
    loaded = RustTokenizer.from_str(json.dumps(data))
    assert loaded.encode("OK", add_special_tokens=False).ids[-1] == data["added_tokens"][1]["id"]
    engine, refusal = tokenizers.fast_ascii_encoder(loaded)
    assert engine is not None and refusal == ""
    assert not engine.takes("OK") and not engine.takes("a<|im_start|>") and engine.takes("ok abc")


def test_a_file_that_makes_tokenizers_panic_is_one_clear_error(tmp_path: Path) -> None:
    """A subword prefix longer than a merge's right part makes tokenizers 0.23 panic while loading; pyo3's
    PanicException is no Exception: the loader names the file in one line (exit status 2), no traceback."""
    from arc_ref.errors import ConfigError
    from arc_ref.frontends import cli

    data = synthetic_file(GOOD)
    data["model"]["continuing_subword_prefix"] = "##"
    path = tmp_path / "panics.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="tokenizers failed on it"):
        get_tokenizer(f"hf:{path}")
    assert cli.main(["budgets", "--set", f"tokenizer=hf:{path}"]) == 2


def test_ascii_tokens_are_read_through_the_byte_level_table() -> None:
    characters = byte_level_characters()
    assert len(set(characters)) == 256 and characters[ord("a")] == "a" and characters[ord(" ")] == "\u0120"
    assert characters[ord("\n")] == "\u010a" and characters[0x7F] == "\u0121" and characters[0xAD] == "\u0143"
    assert all(ord(characters[value]) in range(0x21, 0x7F) or ord(characters[value]) in range(0x100, 0x122)
               for value in range(128))


# --- (d) a short text with a few non-ASCII runs: encoded in parts cut at vouched junctions --------------------------

_MIXED_PIECES = st.sampled_from(["§", "é", "e\u0301", "\u0301", "中文", "Ä", "🙂", "·", "\u00a0", "\u2028", "ſ", "'ſ",
                                 "’s", "１２", "\u200d", "\ufeff", "<think>", "<|im_end|>", "x" * 40 + "\n",
                                 "\u0958-", "\ufb1f.", "\u0f43_", "\u095a-e-", "\u212b", "\u037e"])  # NFC changes these


@needs_qwen3
@settings(PROFILE)
@example("\n§a1b2c3d4 rc=0 1234ch 300tok $ bash ls d3 | head: def return self import class | tail: here | _recall §a1b2")
@example("é" + "word " * 10 + "é")
@given(st.lists(_ASCII_PIECES | _MIXED_PIECES, max_size=60).map("".join))
def test_a_text_of_few_non_ascii_runs_is_encoded_in_parts_alike(text: str) -> None:
    """`_PartsEncoding`: the ids, count and token starts of a text encoded in parts (ASCII parts by the fast engine,
    the parts holding a run by tokenizers, cut only at junctions the boundary rule vouches for) are the whole's."""
    tokenizer = qwen3()
    assert_same(tokenizer, text)


@needs_qwen3
def test_a_stub_line_is_encoded_in_parts_once() -> None:
    """A stub's line (ASCII but its id's two "§") is one encode: its id's few characters by tokenizers, the rest
    (its previews) by the fast engine; every cut is a vouched junction."""
    tokenizer = qwen3()
    line = "\n§k3f9 rc=0 2700ch 640tok $ bash ls | head: def return self import the file line | tail: 0 1 None | _recall §k3f9"
    encoding = tokenizer._encoding(line)
    assert isinstance(encoding, tokenizers._PartsEncoding), type(encoding)
    cuts = tokenizer._cuts_around_non_ascii(line)
    assert cuts and all(tokenizer.splits_between(line[cut - 1], line[cut]) for cut in cuts), cuts
    assert any(isinstance(encoded, list) and len(encoded) > 20 for _, encoded in encoding._spans)
    assert_same(tokenizer, line)


@needs_qwen3
def test_every_character_nfc_changes_beside_long_ascii_is_encoded_alike() -> None:
    """Each character NFC changes (U+0958 is written U+0915 U+093C, and the pattern reads the mark with a following
    "-"), followed by each of a few ASCII neighbours, between 40 ASCII characters that hold vouched junctions: the
    parts path (engine built) gives the whole's ids, count and starts (the boundary rule vouches for no junction
    beside such a character, so the part holding it keeps its neighbours)."""
    import unicodedata

    tokenizer = qwen3()
    changed = [chr(point) for point in range(0x80, 0x30000) if not 0xD800 <= point <= 0xDFFF
               and unicodedata.normalize("NFC", chr(point)) != chr(point)]
    parts = 0
    for character in changed:
        for neighbour in "-._ ":
            text = "word " * 8 + character + neighbour + "yyyy 7 " + "more " * 8
            parts += isinstance(tokenizer._encoding(text), tokenizers._PartsEncoding)
            assert_same(tokenizer, text, (1, 16))
    assert parts > len(changed)  # most go through the parts path


class _CountedLengths(list[int]):
    """The fast engine's byte lengths, counting the lookups made in them."""

    lookups = 0

    def __getitem__(self, index: Any) -> Any:
        type(self).lookups += 1
        return super().__getitem__(index)


@needs_qwen3
@pytest.mark.parametrize("every", (1920, 256, 7))
def test_starts_every_q_tokens_read_the_lengths_of_the_tokens_before_each_wanted_start_only(
        every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`count_and_starts` of an ASCII text on the fast engine: the starts of tokens 0, q, 2q... (a record's chunk cuts,
    q = 1,920 by default) sum the lengths of the tokens before each wanted start, and the last token's offset is the
    text's length less that token's; so a tool output shorter than q tokens reads one length, not one per token
    (issue 28: ~22 us of a 3 KB output's 118). The starts are tokenizers' own."""
    tokenizer = qwen3()
    text = "\n".join(f"    value_{k} = compute(x, {k})  # step {k}" for k in range(90))
    lengths = _CountedLengths(tokenizer._fast_byte_lengths())
    monkeypatch.setattr(tokenizer, "_fast_byte_lengths", lambda: lengths)
    _CountedLengths.lookups = 0
    ids, starts = reference(tokenizer, text)
    assert fast_taken(tokenizer, text) and 1000 < len(ids) < 1920
    assert tokenizer.count_and_starts(text, every) == (len(ids), starts[::every])
    assert _CountedLengths.lookups <= (len(ids) - 1) // every * every + 1  # the tokens before the last start, the last


class _CountedEncodes:
    """A ``tokenizers`` tokenizer whose ``encode`` calls are counted (every other attribute is the real one's)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.encoded: list[str] = []

    def encode(self, text: str, **kwargs: Any) -> Any:
        self.encoded.append(text)
        return self.real.encode(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@needs_qwen3
def test_a_stub_line_s_id_and_recall_hint_are_encoded_by_tokenizers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parts of a stub line that hold its "§" are remembered per tokenizer (PART_MEMO_CHARS): the candidate lines
    of one record (previews halved, `arc_ref.store.stub_lines`) share their id's part and their recall hint, and a
    record at the same index in another conversation shares the id's part; ``tokenizers`` encodes each part once
    (issue 28: two calls of ~9-15 us a line saved on the second candidate). Ids, counts and starts stay the whole's,
    also past the memo's bound (cleared when full)."""
    tokenizer = qwen3()
    counted = _CountedEncodes(tokenizer._tokenizer)
    monkeypatch.setattr(tokenizer, "_tokenizer", counted)
    monkeypatch.setattr(tokenizer, "_parts", {}, raising=False)
    head, tail = "def return self import the file line x " * 3, " 0 1 None the end of it all here"

    def line(fingerprint: str, keep: int) -> str:
        return (f"\n§00007-{fingerprint} rc=0 2700ch 640tok $ bash: ls -la d7 | head: {head[:keep]} | tail:"
                f" {tail[-keep:]} | _recall §00007-{fingerprint}")

    for keep in (96, 48, 24):
        tokenizer.count(line("5d2c1a9e", keep))
    assert len(counted.encoded) == 2 and all("§" in part for part in counted.encoded), counted.encoded
    tokenizer.count(line("0b7e4f11", 96))  # another record at the same index: its recall hint alone
    assert len(counted.encoded) == 3 and "0b7e4f11" in counted.encoded[-1], counted.encoded
    monkeypatch.setattr(tokenizer, "_tokenizer", counted.real)
    monkeypatch.setattr(tokenizers, "PART_MEMO_SIZE", 2, raising=False)
    for k in range(6):
        for keep in (96, 40):
            assert_same(tokenizer, line(f"{k:08x}", keep), (1, 7, 16))
    assert len(tokenizer._parts) <= 2
