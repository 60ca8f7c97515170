"""A5: exact chunked recall and the LRU recall buffer U.

Chunk l of an n-token observation covers the tokens (l-1)q .. min(lq, n) - 1 (0-based), so there are
m = ceil(n/q) chunks of at most q tokens (Lemma 4). Token boundaries can fall inside a multi-byte
character; a chunk's *text* therefore starts at the character that holds the first byte of its first
token: cut(0) = 0, cut(l) = start(lq) for 0 < l < m, cut(m) = len(O), chunk text = O[cut(l-1):cut(l)].
The cuts never decrease, so the chunk texts are contiguous, disjoint, and concatenate to O exactly.
"""

from __future__ import annotations

from typing import Sequence

from attrs import frozen

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.counting import Part, joined_tokens
from arc_ref.errors import BudgetViolation
from arc_ref.escape import unshow
from arc_ref.message import Message


def chunk_count(n_tokens: int, chunk_tokens: int) -> int:
    """m_j = ceil(n_j / q); 0 for an empty observation.

    pre: n_tokens >= 0
    pre: chunk_tokens >= 1
    post: (__return__ - 1) * chunk_tokens < n_tokens <= __return__ * chunk_tokens or (n_tokens == 0 and __return__ == 0)
    """
    return -(-n_tokens // chunk_tokens)


def chunk_bounds(n_tokens: int, chunk_tokens: int, chunk: int) -> tuple[int, int]:
    """Token interval [start, end) of chunk ``chunk`` (1-based): a_(j,l) - 1 and b_(j,l) of A5.

    pre: chunk_tokens >= 1
    pre: 1 <= chunk <= -(-n_tokens // chunk_tokens)
    post: 0 <= __return__[0] < __return__[1] <= n_tokens
    post: __return__[1] - __return__[0] <= chunk_tokens
    post: __return__[0] == (chunk - 1) * chunk_tokens
    """
    start = (chunk - 1) * chunk_tokens
    return start, min(chunk * chunk_tokens, n_tokens)


def chunk_cuts(token_starts: Sequence[int], text_length: int, chunk_tokens: int) -> list[int]:
    """Character cut positions cut(0) .. cut(m) of the chunk texts (see the module docstring).

    pre: chunk_tokens >= 1
    pre: all(0 <= start <= text_length for start in token_starts)
    pre: all(token_starts[i] <= token_starts[i + 1] for i in range(len(token_starts) - 1))
    post: __return__[0] == 0
    post: len(__return__) == -(-len(token_starts) // chunk_tokens) + 1 or (len(token_starts) == 0 and __return__ == [0])
    post: all(__return__[i] <= __return__[i + 1] for i in range(len(__return__) - 1))
    post: len(token_starts) == 0 or __return__[-1] == text_length
    """
    chunks = chunk_count(len(token_starts), chunk_tokens)
    if chunks == 0:
        return [0]
    inner = [token_starts[chunk * chunk_tokens] for chunk in range(1, chunks)]
    return [0, *inner, text_length]


def chunk_texts(setup: Setup, content: str) -> list[str]:
    """R_(j,1) .. R_(j,m): the exact texts of every chunk of ``content`` (Lemma 4)."""
    starts = setup.tokenizer.token_starts(content)
    cuts = chunk_cuts(starts, len(content), setup.config.chunk_tokens)
    return [content[cuts[i] : cuts[i + 1]] for i in range(len(cuts) - 1)]


def chunk_text(setup: Setup, content: str, chunk: int) -> tuple[str, int]:
    """The text of one chunk (1-based) and the number of chunks m."""
    starts = setup.tokenizer.token_starts(content)
    cuts = chunk_cuts(starts, len(content), setup.config.chunk_tokens)
    return content[cuts[chunk - 1] : cuts[chunk]], len(cuts) - 1


def count_and_inner_cuts(setup: Setup, content: str) -> tuple[int, tuple[int, ...]]:
    """n_j and the inner cuts cut(1) .. cut(m-1), from one tokenization of ``content``.

    ``token_starts(content, q)`` gives the starts of tokens 0, q, 2q, ...; cut(l) = start(lq) for 0 < l < m.
    A record keeps them, so that a recall slices its chunk without tokenizing the observation again.
    """
    n_tokens, starts = setup.tokenizer.count_and_starts(content, setup.config.chunk_tokens)
    return n_tokens, tuple(starts[1:])


def reassemble(payloads: Sequence[str]) -> str:
    """D's step for one observation (Theorem claim 5): its chunks, concatenated, with S^-1 applied
    (spec/rendering.md 7.1), are the stored observation O byte for byte."""
    return unshow("".join(payloads))


def stored_chunk(content: str, inner_cuts: Sequence[int], chunk: int) -> str:
    """Chunk ``chunk`` (1-based) of an observation from its stored inner cuts (Lemma 4)."""
    start = inner_cuts[chunk - 2] if chunk > 1 else 0
    end = inner_cuts[chunk - 1] if chunk <= len(inner_cuts) else len(content)
    return content[start:end]


def stored_chunk_tokens(setup: Setup, shown: str, inner_cuts: Sequence[int], n_tokens: int, chunk: int) -> int | None:
    """Tokens of chunk ``chunk`` of a record's shown text when they follow from its stored count, else None.

    Chunk l holds tokens (l-1)q .. min(lq, n) - 1 of the whole (Lemma 4). Its text, counted alone, has exactly
    that many tokens when no token can cross either of its cuts: at a cut inside the text, the tokenizer's
    boundary rule vouches for the junction (`Tokenizer.splits_between`: the tokens of the whole are those of
    the text before the cut followed by those of the text after it), and the character after the cut is ASCII
    (one byte: the token that starts at the cut starts at its first byte, so the text before the cut holds
    exactly the tokens before that one). A single chunk is the whole text: n_j, with no condition.
    """
    q = setup.config.chunk_tokens
    chunks = len(inner_cuts) + 1
    inner = (inner_cuts[chunk - 2] if chunk > 1 else None, inner_cuts[chunk - 1] if chunk < chunks else None)
    splits = setup.tokenizer.splits_between
    for cut in inner:  # an inner cut at 0 (tokens of one character) has no character before it: not vouched
        if cut is not None and not (0 < cut < len(shown) and shown[cut].isascii()
                                    and splits(shown[cut - 1], shown[cut])):
            return None
    return q if chunk < chunks else n_tokens - (chunks - 1) * q


@frozen
class BufferEntry:
    """One recall response held in U: its body (opening line, payload, newline) and its closing line.

    ``body_tokens`` counts the body once, when the chunk is recalled; ``tokens`` is the cost of the
    response with its leading newline.
    """

    index: int
    chunk: int
    chunks: int
    body: str
    close: str
    body_tokens: int
    tokens: int

    @property
    def response(self) -> str:
        return self.body + self.close


def make_entry(setup: Setup, index: int, obs_id: str, chunk: int, chunks: int, payload: str,
               payload_tokens: int | None = None) -> BufferEntry:
    """A recall response for U; ``payload_tokens``: the payload's count when already known
    (`stored_chunk_tokens`), so that the body's count reuses it (`arc_ref.counting`)."""
    body = render.recall_body(obs_id, chunk, chunks, payload)
    close = render.recall_close(obs_id, chunk, chunks)
    if payload_tokens is None:
        body_tokens = setup.tokenizer.count(body)  # the chunk's text is counted here, once
    else:  # the body is the opening line, a newline, the payload and a newline
        opening = body[: len(body) - len(payload) - 1]
        body_tokens = joined_tokens(setup.tokenizer, ((opening, None), (payload, payload_tokens), ("\n", None)))
    tokens = joined_tokens(setup.tokenizer, (("\n", None), (body, body_tokens), (close, None)))
    return BufferEntry(index, chunk, chunks, body, close, body_tokens, tokens)


def _buffer_message(setup: Setup, entries: Sequence[BufferEntry]) -> Message:
    """U: the header, then each response on its own line; every body's count is reused.

    The content is ``header + "\n" + body_1 + close_1 + "\n" + body_2 + ... + close_k``: each body and
    each closing line starts with "[" right after a newline, where the shipped tokenizers split.
    """
    parts: list[Part] = [(render.RECALL_HEADER + "\n", None)]
    last = len(entries) - 1
    for position, entry in enumerate(entries):
        parts.append((entry.body, entry.body_tokens))
        parts.append((entry.close if position == last else entry.close + "\n", None))
    content = render.recall_content(entry.response for entry in entries)
    return setup.message(render.USER, content, parts=parts)


def admit(
    setup: Setup, entries: tuple[BufferEntry, ...], new: BufferEntry
) -> tuple[tuple[BufferEntry, ...], Message, tuple[BufferEntry, ...]]:
    """Put ``new`` at the most-recently-used end of U and evict least-recently-used bodies until U <= Q.

    Returns (entries oldest first, the U message, the evicted entries). A response recalled again moves to
    the MRU end instead of being duplicated. Eviction is minimal: the kept entries are the longest
    most-recently-used suffix whose message fits Q.
    """
    budget = setup.config.recall_budget
    kept = [entry for entry in entries if (entry.index, entry.chunk) != (new.index, new.chunk)]
    kept.append(new)
    evicted: list[BufferEntry] = []
    message = _buffer_message(setup, kept)  # summed exactly after each eviction: U holds <= r + Q/q bodies
    while message.tokens > budget and len(kept) > 1:
        evicted.append(kept.pop(0))
        message = _buffer_message(setup, kept)
    if message.tokens > budget:
        raise BudgetViolation(
            f"one recall response costs {message.tokens} tokens > recall_budget Q = {budget}"
        )
    return tuple(kept), message, tuple(evicted)
