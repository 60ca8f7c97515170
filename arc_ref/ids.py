"""A1: injective fixed-width occurrence identifiers, their printed form, parsing and suggestions.

``id_j = enc_b(j) || fp_d(signature(A_j) || 0x1F || O_j)`` with ``b = ceil(log2(N_max + 1))``.
The printed form is ``§`` + the counter in ``ceil(b/4)`` lowercase hex digits + (when d > 0) ``-`` +
the fingerprint in ``ceil(d/4)`` lowercase hex digits, e.g. ``§002a-3f0c91d2``. Uniqueness comes from
the counter alone (Lemma 1); the fingerprint catches a mistyped id and helps a human.
"""

from __future__ import annotations

import hashlib
import re

from attrs import frozen

from arc_ref.errors import CapacityExceeded, ConfigError

SHA1_BITS = 160
UNIT_SEPARATOR = b"\x1f"


def counter_bits(capacity: int) -> int:
    """b = ceil(log2(N_max + 1)), computed exactly on integers.

    pre: capacity >= 1
    post: 2 ** (__return__ - 1) <= capacity < 2 ** __return__
    """
    return capacity.bit_length()


def hex_width(bits: int) -> int:
    """Number of hex digits that hold ``bits`` bits.

    pre: bits >= 0
    post: 4 * __return__ >= bits
    post: 4 * __return__ < bits + 4
    """
    return (bits + 3) // 4


def encode_counter(index: int, bits: int) -> str:
    """enc_b(j): the occurrence index as fixed-width lowercase hex.

    pre: bits >= 1
    pre: 1 <= index < 2 ** bits
    post: len(__return__) == (bits + 3) // 4
    post: int(__return__, 16) == index
    """
    return format(index, f"0{hex_width(bits)}x")


def decode_counter(text: str, bits: int) -> int | None:
    """Inverse of ``encode_counter`` on well-formed input; None for anything else.

    pre: bits >= 1
    post: __return__ is None or encode_counter(__return__, bits) == text.lower()
    """
    width = hex_width(bits)
    if len(text) != width or not all(char in "0123456789abcdefABCDEF" for char in text):
        return None
    value = int(text, 16)
    if value < 1 or value >= 2**bits:
        return None
    return value


def fingerprint(signature: str, observation: str, bits: int) -> int:
    """fp_d: the top ``bits`` bits of SHA1(signature || 0x1F || observation) over UTF-8 bytes."""
    if bits == 0:
        return 0
    digest = hashlib.sha1(signature.encode("utf-8") + UNIT_SEPARATOR + observation.encode("utf-8")).digest()
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
        return hex_width(self.bits)

    @property
    def fingerprint_width(self) -> int:
        return hex_width(self.fingerprint_bits)

    def format(self, index: int, fingerprint_value: int) -> str:
        """The printed id ``§<counter>[-<fingerprint>]`` of occurrence ``index``."""
        if not 1 <= index <= self.capacity:
            raise CapacityExceeded(
                f"observation #{index} exceeds the declared capacity N_max = {self.capacity}"
            )
        body = encode_counter(index, self.bits)
        if self.fingerprint_bits:
            body += "-" + format(fingerprint_value, f"0{self.fingerprint_width}x")
        return "§" + body

    def make(self, index: int, signature: str, observation: str) -> str:
        """id_j for the j-th stored observation (A1)."""
        return self.format(index, fingerprint(signature, observation, self.fingerprint_bits))

    def widest(self) -> str:
        """The id with the most characters this scheme can print (all ids have this width)."""
        return self.format(self.capacity, 0)

    def split(self, body: str) -> tuple[int | None, str | None]:
        """Parse an id body (no §) into (counter, fingerprint hex); None parts when malformed."""
        if self.fingerprint_bits:
            counter_text, _, fingerprint_text = body.partition("-")
            counter = decode_counter(counter_text, self.bits)
            width = self.fingerprint_width
            well_formed = len(fingerprint_text) == width and all(
                char in "0123456789abcdef" for char in fingerprint_text
            )
            return counter, (fingerprint_text if well_formed else None)
        return decode_counter(body, self.bits), None


_SURROUNDING = re.compile(r"^[^0-9A-Za-z§]+|[^0-9A-Za-z]+$")


def normalize_token(token: str) -> str:
    """Strip surrounding punctuation and a leading §, lowercase: ``'(§002A-3f).'`` -> ``'002a-3f'``."""
    stripped = _SURROUNDING.sub("", token)
    if stripped.startswith("§"):
        stripped = stripped[1:]
    return stripped.lower()


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
