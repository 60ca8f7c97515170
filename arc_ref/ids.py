"""A1: injective fixed-width occurrence identifiers, their printed form, parsing and suggestions.

``id_j = enc_b(j) || fp_d(signature(A_j) || 0x1F || O_j)`` with ``b = ceil(log2(N_max + 1))``.
The printed form is ``§`` + the b-bit counter in decimal, zero-padded to the digits of 2^b - 1, +
(when d > 0) ``-`` + the d-bit fingerprint in decimal, zero-padded to the digits of 2^d - 1, e.g.
``§00042-0591234567`` (N_max = 65535, d = 32). Uniqueness comes from the counter alone (Lemma 1); the
fingerprint catches a mistyped id and helps a human. Decimal digits, unlike hex letters, cost the same
number of tokens whatever their values under the shipped tokenizers, so every id of a scheme has the
same token cost and the budget checks can use the widest id.
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Mapping

from attrs import frozen

from arc_ref.errors import CapacityExceeded, ConfigError
from arc_ref.text import utf8_bytes

SHA1_BITS = 160
UNIT_SEPARATOR = b"\x1f"
DIGITS = "0123456789"


def counter_bits(capacity: int) -> int:
    """b = ceil(log2(N_max + 1)), computed exactly on integers.

    pre: capacity >= 1
    post: 2 ** (__return__ - 1) <= capacity < 2 ** __return__
    """
    return capacity.bit_length()


def decimal_width(bits: int) -> int:
    """Decimal digits needed for every ``bits``-bit value: the digits of 2^bits - 1 (0 for 0 bits).

    pre: 0 <= bits <= 200
    post: bits == 0 or 10 ** (__return__ - 1) <= 2 ** bits - 1 < 10 ** __return__
    post: bits > 0 or __return__ == 0
    """
    return len(str(2**bits - 1)) if bits else 0


def encode_counter(index: int, bits: int) -> str:
    """enc_b(j): the occurrence index in decimal, zero-padded to a fixed width.

    pre: 1 <= bits <= 200
    pre: 1 <= index < 2 ** bits
    post: len(__return__) == len(str(2 ** bits - 1))
    post: int(__return__) == index
    """
    return str(index).zfill(decimal_width(bits))


def decode_counter(text: str, bits: int) -> int | None:
    """Inverse of ``encode_counter`` on well-formed input; None for anything else.

    pre: 1 <= bits <= 200
    post: __return__ is None or encode_counter(__return__, bits) == text
    """
    width = decimal_width(bits)
    if len(text) != width or not all(char in DIGITS for char in text):
        return None
    value = int(text)
    if value < 1 or value >= 2**bits:
        return None
    return value


def fingerprint(signature: str, observation: str, bits: int) -> int:
    """fp_d: the top ``bits`` bits of SHA1(signature || 0x1F || observation) over UTF-8 bytes."""
    if bits == 0:
        return 0
    hashed = hashlib.sha1(signature.encode("utf-8"))
    hashed.update(UNIT_SEPARATOR)
    hashed.update(utf8_bytes(observation))  # fed apart, encoded once for the observation in hand
    digest = hashed.digest()
    return int.from_bytes(digest, "big") >> (SHA1_BITS - bits)


@frozen
class IdScheme:
    """The id layout fixed by the declared capacity N_max and fingerprint width d."""

    capacity: int
    fingerprint_bits: int

    def __attrs_post_init__(self) -> None:
        if self.capacity < 2:
            raise ConfigError(f"capacity (N_max) must be >= 2, got {self.capacity}")
        if not 0 <= self.fingerprint_bits <= SHA1_BITS:
            raise ConfigError(f"fingerprint_bits (d) must be in 0..{SHA1_BITS}, got {self.fingerprint_bits}")

    @property
    def bits(self) -> int:
        return counter_bits(self.capacity)

    @property
    def counter_width(self) -> int:
        return decimal_width(self.bits)

    @property
    def fingerprint_width(self) -> int:
        return decimal_width(self.fingerprint_bits)

    def format(self, index: int, fingerprint_value: int) -> str:
        """The printed id ``§<counter>[-<fingerprint>]`` of occurrence ``index``."""
        if not 1 <= index <= self.capacity:
            raise CapacityExceeded(
                f"observation #{index} exceeds the declared capacity N_max = {self.capacity}"
            )
        body = encode_counter(index, self.bits)
        if self.fingerprint_bits:
            body += "-" + str(fingerprint_value).zfill(self.fingerprint_width)
        return "§" + body

    def make(self, index: int, signature: str, observation: str) -> str:
        """id_j for the j-th stored observation (A1)."""
        return self.format(index, fingerprint(signature, observation, self.fingerprint_bits))

    def widest(self) -> str:
        """An id of this scheme; every id has this width and, in decimal digits, the same token cost."""
        return self.format(self.capacity, 2**self.fingerprint_bits - 1)

    def split(self, body: str) -> tuple[int | None, str | None]:
        """Parse an id body (no §) into (counter, fingerprint digits); None parts when malformed."""
        if self.fingerprint_bits:
            counter_text, _, fingerprint_text = body.partition("-")
            counter = decode_counter(counter_text, self.bits)
            width = self.fingerprint_width
            well_formed = len(fingerprint_text) == width and all(char in DIGITS for char in fingerprint_text)
            return counter, (fingerprint_text if well_formed else None)
        return decode_counter(body, self.bits), None


_SURROUNDING = re.compile(r"^[^0-9A-Za-z§]+|[^0-9A-Za-z]+$")


def normalize_token(token: str) -> str:
    """Strip surrounding punctuation and a leading §: ``'(§00042-05912).'`` -> ``'00042-05912'``."""
    stripped = _SURROUNDING.sub("", token)
    if stripped.startswith("§"):
        stripped = stripped[1:]
    return stripped


def edit_distance(left: str, right: str) -> int:
    """Levenshtein distance (insert, delete, substitute all cost 1)."""
    if len(left) < len(right):
        left, right = right, left
    previous = list(range(len(right) + 1))
    for row, left_char in enumerate(left, start=1):
        current = [row]
        for column, right_char in enumerate(right, start=1):
            current.append(
                min(
                    previous[column] + 1,
                    current[column - 1] + 1,
                    previous[column - 1] + (left_char != right_char),
                )
            )
        previous = current
    return previous[-1]


# --- lookup of a printed id among the stored ones (A1: a mistyped id gets a nearest-match suggestion) ---

IdOf = Callable[[int], str]  # the printed id of stored occurrence j (1 <= j <= stored)


def resolve(scheme: IdScheme, stored: int, id_of: IdOf, token: str) -> int | None:
    """The index j whose printed id is ``token`` (with or without §, surrounding punctuation ignored)."""
    body = normalize_token(token)
    counter, _ = scheme.split(body)
    if counter is not None and counter <= stored and id_of(counter) == "§" + body:
        return counter
    return None


def _one_edit_away(text: str, width: int) -> list[str]:
    """Strings of length ``width`` one digit substitution, deletion or insertion away from ``text``."""
    if len(text) == width:
        return [text[:i] + digit + text[i + 1 :] for i in range(width) for digit in DIGITS]
    if len(text) == width + 1:
        return [text[:i] + text[i + 1 :] for i in range(width + 1)]
    if len(text) == width - 1:
        return [text[:i] + digit + text[i:] for i in range(width) for digit in DIGITS]
    return []


def suggest(
    scheme: IdScheme, stored: int, id_of: IdOf, fingerprints: Mapping[str, int], token: str
) -> int | None:
    """The index of the stored id nearest to a token that resolved to nothing (edit distance over a few candidates).

    Candidates: the id with the same counter (also read by position from the token's digits), the
    latest id with the same fingerprint (``fingerprints``: fingerprint digits -> latest index), and ids
    whose counter is one substitution, deletion or insertion away. The work is bounded by the id width, not N.
    """
    body = normalize_token(token)[: 2 * (scheme.counter_width + scheme.fingerprint_width + 2)]
    counter_text, _, fingerprint_text = body.partition("-")
    candidates: set[int] = set()
    counter, _ = scheme.split(body)
    if counter is not None and counter <= stored:
        candidates.add(counter)
    named = set(candidates)  # the counter the token names, read as an id or from its first digits: wins a tie
    width = scheme.counter_width
    # the counter and fingerprint read by position from the digits alone too, in case a separator was
    # mistyped, left out or added
    digits = "".join(char for char in body if char in DIGITS)
    prefix = decode_counter(digits[:width], scheme.bits)
    if prefix is not None and prefix <= stored:
        candidates.add(prefix)
        named.add(prefix)
    fingerprint_width = scheme.fingerprint_width
    for text in (fingerprint_text, digits[-fingerprint_width:] if fingerprint_width else ""):
        if text and text in fingerprints:
            candidates.add(fingerprints[text])
    # a counter one edit away; without a fingerprint the digits alone are the counter
    for text in (counter_text,) if fingerprint_width else (counter_text, digits):
        for variant in _one_edit_away(text, width):
            value = decode_counter(variant, scheme.bits)
            if value is not None and value <= stored:
                candidates.add(value)
    if not candidates:
        return None
    return min(candidates, key=lambda index: (edit_distance(body, id_of(index)[1:]), index not in named, index))
