"""The limits every reader of JSON text applies before it parses (spec/trace.md §8).

A value nested too deep cannot be read (json.loads), written (json.dumps, a template's tojson) or validated
(pydantic) without recursion, and each library stops at its own depth: Python's at about a thousand levels,
less the frames already on the stack, pydantic's JSON parser at 200, its and orjson's writers at 254. So one
limit, well below all of them, holds for every JSON text ARC reads: a trace line (the config line with its tools'
``parameters`` included), a tool call's ``arguments``, a line of ``arc-ref mcp``, the proxy's request body. Each
reader asks `nesting_beyond_limit` before it parses and refuses the text with the depth it names; nothing below
the limit can reach a recursion limit (A2: an event is refused whole, never half read).
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

# The deepest nesting of arrays and objects any JSON text may have: `[[1]]` nests 2 levels, `1` none.
MAX_NESTING = 128
# An integer literal longer than this is refused by Python's int() (sys.int_info.default_max_str_digits).
MAX_INTEGER_DIGITS = 4300
# The longest trace line `arc-ref replay` reads (spec/trace.md section 1), and so the longest row a store keeps: its
# export must be a trace that replays.
MAX_LINE_BYTES = 32 * 1024 * 1024
# The default of arc-ref mcp --max-observation-bytes: the largest output store_observation takes, in bytes of UTF-8 (review h59 F7:
# within the 32 MiB row limit, one output of a single repeated letter took 1.8 GB and 32 s to tokenize; 8 MiB of it
# takes about 0.6 GB and 6 s)
MAX_OBSERVATION_BYTES = 8 * 1024 * 1024

# The text as a sequence of pieces: a JSON string (a backslash escapes any character), a string that never
# closes (it runs to the end of the text), or a run outside strings (group 1). Every position starts a piece,
# and the quantifiers are possessive, so one findall reads each character once.
_PIECES = re.compile(r'"(?:[^"\\]++|\\.)*+"|".*|([^"]++)', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]++")
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes
# An integer literal of more than MAX_INTEGER_DIGITS digits: not a fraction's or an exponent's digits.
_LONG_INTEGER = re.compile(r"(?<![0-9.eE+\-])-?([0-9]{%d,}+)(?![.eE])" % (MAX_INTEGER_DIGITS + 1))
_LONG_DIGITS = re.compile("[0-9]{%d}" % (MAX_INTEGER_DIGITS + 1))


def outside_strings(text: str) -> str:
    """``text`` with every JSON string replaced by a space (one pass, at C speed).

    A ``"`` opens a string that runs to the next ``"`` not escaped by a backslash, or to the end of the text
    when none closes it.
    """
    return " ".join(_PIECES.findall(text))


def nesting(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text``: the largest count, over the prefixes of ``text`` with its strings
    left out (`outside_strings`), of ``[`` and ``{`` less ``]`` and ``}`` (0 when none is positive).

    Linear and without recursion; the text need not be JSON (a tool call's arguments are measured as they are).
    For JSON it is the depth of the value: ``[[1], {}]`` nests 2 levels, ``1`` none.
    """
    brackets = _NOT_BRACKETS.sub("", outside_strings(text))
    if not brackets:
        return 0
    steps = memoryview(brackets.encode("ascii").translate(_BRACKET_STEPS)).cast("b")
    deepest: int = max(accumulate(steps))  # the largest prefix sum of the steps, at C speed
    return max(deepest, 0)


def long_integer(text: str) -> int | None:
    """The digits of the first integer literal of ``text`` longer than MAX_INTEGER_DIGITS, outside strings; or None.

    An integer literal is a run of digits not preceded by a digit, ``.``, ``e``, ``E``, ``+`` or ``-`` (save a
    ``-`` that is its own sign) and not followed by ``.``, ``e`` or ``E``: a fraction's or an exponent's digits
    are no integer. Linear, as `nesting`.
    """
    if _LONG_DIGITS.search(text) is None:  # no run that long at all: nothing to tell apart
        return None
    found = _LONG_INTEGER.search(outside_strings(text))
    return None if found is None else len(found.group(1))


def nesting_beyond_limit(text: str | bytes, enclosing: int = 0) -> int | None:
    """The depth of ``text`` (`nesting`) when it exceeds MAX_NESTING, else None: every reader's check.

    ``enclosing``: the levels of arrays and objects around ``text`` when it is a value inside a larger text (a
    message of a request body: 2, the body's object and its ``messages`` array), counted in its depth.

    Bytes (a request body) are measured as their UTF-8 text, without decoding it: every character the measure
    looks at is ASCII, and UTF-8 never uses an ASCII byte inside a longer character, so reading each byte as
    one character (Latin-1) gives the same depth, whether or not the bytes are valid UTF-8.
    """
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    if text.count("[") + text.count("{") + enclosing <= MAX_NESTING:  # fewer brackets than levels: nothing to do
        return None
    depth = nesting(text) + enclosing
    return depth if depth > MAX_NESTING else None


def nesting_problem(text: str | bytes, enclosing: int = 0) -> str | None:
    """``nested {depth} levels deep (at most 128)`` for a text deeper than MAX_NESTING, else None."""
    depth = nesting_beyond_limit(text, enclosing)
    return None if depth is None else f"nested {depth} levels deep (at most {MAX_NESTING})"


def value_nesting(value: Any) -> int:
    """How deep lists and dicts nest in a Python value (as `nesting` measures its JSON text); no recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            members: Any = item.values()
        elif isinstance(item, (list, tuple)):
            members = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((member, depth + 1) for member in members)
    return deepest
