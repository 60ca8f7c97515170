"""Deterministic text helpers shared by every rendered component: escaping and id-safe clipping.

A port must reproduce these byte for byte: the spec (`spec/rendering.md`) states each rule.
"""

from __future__ import annotations

import re
from typing import Callable

ELLIPSIS = "\u2026"

# The printed form of an id (A1): a section sign followed by id characters.
ID_PATTERN = re.compile(r"§[0-9A-Za-z._-]+")
_ID_CHAR = re.compile(r"[0-9A-Za-z._-]")

# The last text utf8_bytes encoded, with its bytes (one entry; a tuple, replaced whole).
_LAST_UTF8: tuple[str, bytes] = ("", b"")


def utf8_bytes(text: str) -> bytes:
    """The UTF-8 bytes of ``text`` (UnicodeEncodeError on a lone surrogate), encoded once for the text in hand.

    An observation is checked for surrogates, fingerprinted, measured in bytes and tokenized one after the
    other; the last text's bytes are kept (by identity) so that it is encoded once for all of them. Only a
    copy is made: the string itself never caches a UTF-8 form.
    """
    last_text, last_bytes = _LAST_UTF8
    if last_text is text:
        return last_bytes
    data = text.encode("utf-8")
    globals()["_LAST_UTF8"] = (text, data)
    return data


ASCII_WHITESPACE = " \t\n\r\x0b\x0c"
_WHITESPACE_RUN = re.compile(r"[ \t\n\r\x0b\x0c]+")


def ascii_words(text: str) -> list[str]:
    """``text`` split on runs of ASCII whitespace (the only whitespace the spec recognises)."""
    return [word for word in _WHITESPACE_RUN.split(text) if word]

_ESCAPES: dict[int, str] = {code: f"\\x{code:02x}" for code in [*range(0x20), 0x7F]}
_ESCAPES.update({ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_OTHER_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # the characters escaped as \\xNN
_CONTROL_ESCAPES = {code: escaped for code, escaped in _ESCAPES.items() if escaped.startswith("\\x")}


def escape_line(text: str) -> str:
    """Make ``text`` a single line: backslash, newline, CR and tab escaped; other control chars as \\xNN.

    The same as ``text.translate(_ESCAPES)`` (spec/rendering.md section 4), written as four replacements (the
    backslash first, so no escape is escaped again) and a search for the rarer controls: str.translate looks
    every character of a non-ASCII text up in the table, about six times slower on a stub's previews.
    """
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    text = text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if _OTHER_CONTROL.search(text) is None:
        return text
    return text.translate(_CONTROL_ESCAPES)  # the backslashes now in the text are escapes: left as they are


def id_safe_cut(text: str, cut: int) -> int:
    """Largest cut position <= ``cut`` that does not split a ``§id`` printed in ``text``.

    If ``text[:cut]`` ends inside an id (a § and zero or more id characters, with another id character
    following at ``cut``), the cut moves back to just before that §, so a handle is never shown mangled.
    """
    if cut <= 0:
        return 0
    if cut >= len(text):
        return len(text)
    start = cut
    while start > 0 and _ID_CHAR.match(text[start - 1]):
        start -= 1
    if start > 0 and text[start - 1] == "§" and _ID_CHAR.match(text[cut]):
        return start - 1
    return cut


def shown_signature(signature: str, limit: int) -> str:
    """How an action signature is shown in stubs, headers and summary items: escaped, then clipped."""
    return clipped(escape_line(signature), limit)


def halving_lengths(length: int) -> list[int]:
    """Candidate prefix lengths for clipping: the full length, then halves down to 0 (deterministic)."""
    lengths = [length]
    current = length
    while current > 0:
        current //= 2
        lengths.append(current)
    return lengths


def clipped(text: str, keep: int) -> str:
    """``text`` cut id-safely to at most ``keep`` characters, with an ellipsis when anything was cut."""
    if keep >= len(text):
        return text
    return text[: id_safe_cut(text, keep)] + ELLIPSIS


def clip_until(text: str, fits: Callable[[str], bool]) -> str | None:
    """First of ``clipped(text, k)`` for k in ``halving_lengths(len(text))`` that ``fits``; None if none does."""
    for keep in halving_lengths(len(text)):
        candidate = clipped(text, keep)
        if fits(candidate):
            return candidate
    return None
