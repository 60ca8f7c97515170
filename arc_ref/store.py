"""A2: the append-only observation store, and the decoder D of Theorem claim 5.

A record is written once, when its observation arrives and before any compaction can run, and is
never rewritten: recall cursors and the recall buffer live in the state, outside the record. The
store is a persistent vector: appending costs O(log32 N) and shares every earlier record.
"""

from __future__ import annotations

from typing import Iterator

from attrs import frozen
from pyrsistent import PVector, pvector

from arc_ref import render
from arc_ref.config import Setup
from arc_ref.errors import BudgetViolation, InvalidEvent
from arc_ref.recall import count_and_inner_cuts
from arc_ref.text import ascii_words, clip_until, clipped, halving_lengths, utf8_bytes


def action_signature(action: str) -> str:
    """signature(A): the action with surrounding whitespace removed and inner whitespace runs collapsed."""
    return " ".join(ascii_words(action))


@frozen
class Record:
    """ObsStore[id_j]: full content plus fixed metadata and the citation stub z_j (A2, A3)."""

    index: int  # j, 1-based occurrence index
    obs_id: str  # printed id, with the leading §
    signature: str
    content: str  # full_content = O_j, verbatim
    shown: str  # S(O_j) (spec/rendering.md 7.1): what the view shows of it; the same object when it equals O_j
    returncode: int | None  # None: no exit status known (shown rc=?)
    step: int  # creation step: agent turns taken before this observation arrived
    n_chars: int
    n_bytes: int
    n_tokens: int  # n_j: tokens of the shown form S(O_j) under the configured tokenizer, computed once
    inner_cuts: tuple[int, ...]  # A5 chunk cuts cut(1) .. cut(m-1) (characters of S(O_j)), same tokenization
    head: str  # fixed-size previews of S(O_j)
    tail: str
    stub: str  # z_j, clipped so that its cost is <= c
    stub_tokens: int  # cost of the stub: tokens of "\n" + stub


Store = PVector[Record]

EMPTY_STORE: Store = pvector()


def previews(content: str, head_chars: int, tail_chars: int) -> tuple[str, str]:
    """Head = first ``head_chars`` characters; tail = last ``tail_chars`` characters not in the head."""
    head = content[:head_chars]
    tail_start = max(len(head), len(content) - tail_chars)
    return head, content[tail_start:]


def stub_lines(setup: Setup, obs_id: str, returncode: int | None, n_chars: int, n_tokens: int,
               signature: str, head: str, tail: str) -> Iterator[str]:
    """The candidates for z_j, longest first: the previews clipped (halving, tail and head together), then the
    signature clipped (`clip_until`'s lengths) with no previews."""
    sig = setup.shown_signature(signature)  # S, escaped, clipped: a control string in the action is inert
    for keep in halving_lengths(max(len(head), len(tail))):
        clipped_tail = tail[len(tail) - min(keep, len(tail)) :]
        yield render.stub(obs_id, returncode, n_chars, n_tokens, sig, head[:keep], clipped_tail)
    for keep in halving_lengths(len(sig)):
        yield render.stub(obs_id, returncode, n_chars, n_tokens, clipped(sig, keep), "", "")


def make_stub(setup: Setup, obs_id: str, returncode: int | None, n_chars: int, n_tokens: int,
              signature: str, head: str, tail: str) -> tuple[str, int]:
    """z_j: the first of `stub_lines` whose cost is <= c."""
    cap = setup.config.stub_cap
    for line in stub_lines(setup, obs_id, returncode, n_chars, n_tokens, signature, head, tail):
        tokens = setup.line_tokens(line)
        if tokens <= cap:
            return line, tokens
    raise BudgetViolation(f"stub of {obs_id} cannot fit stub_cap c = {cap} tokens")


# The largest observation stored (UTF-8 bytes; spec/rendering.md section 7). Storing one is linear in its size
# (one encode, in slices of bounded memory), about 10 s and no added peak memory per MB on Qwen3's tokenizer
# (benchmarks/bench_large_observation.py); a larger output is refused before any work is done.
LARGEST_OBSERVATION_BYTES = 64 * 2**20


def make_record(setup: Setup, index: int, action: str, content: str, returncode: int | None,
                step: int) -> Record:
    """Build ObsStore[id_j] for the j-th observation (A1 id, A2 content, A3 stub)."""
    if returncode is not None and returncode not in render.RETURNCODE_RANGE:
        raise InvalidEvent(f"returncode must be a 32-bit signed integer, got {returncode}")
    if len(content) * 4 > LARGEST_OBSERVATION_BYTES:  # only then may its UTF-8 form be over the limit
        size = len(content) if content.isascii() else len(content.encode("utf-8", "surrogatepass"))
        if size > LARGEST_OBSERVATION_BYTES:
            raise InvalidEvent(
                f"observation of {size:,} bytes is larger than the largest stored observation,"
                f" {LARGEST_OBSERVATION_BYTES:,} bytes (64 MiB); store it in parts or keep a reference to it"
            )
    signature = action_signature(action)
    obs_id = setup.ids.make(index, signature, content)
    shown = setup.shown_form.show(content)  # control strings inert (spec/rendering.md 7.1); O itself is stored
    n_tokens, inner_cuts = count_and_inner_cuts(setup, shown)
    if max(len(shown), n_tokens) > render.WIDEST_NUMBER:
        raise InvalidEvent("observation longer than 9,999,999,999 characters or tokens")
    # measured while its UTF-8 form is still the one kept (`utf8_bytes`): counting the stub encodes another text
    n_bytes = len(content) if content.isascii() else len(utf8_bytes(content))
    head, tail = previews(shown, setup.config.preview_head_chars, setup.config.preview_tail_chars)
    stub, stub_tokens = make_stub(setup, obs_id, returncode, len(content), n_tokens, signature, head, tail)
    return Record(
        index=index,
        obs_id=obs_id,
        signature=signature,
        content=content,
        shown=shown,
        returncode=returncode,
        step=step,
        n_chars=len(content),
        n_bytes=n_bytes,
        n_tokens=n_tokens,
        inner_cuts=inner_cuts,
        head=head,
        tail=tail,
        stub=stub,
        stub_tokens=stub_tokens,
    )


def decode_history(store: Store) -> tuple[str, ...]:
    """D (Theorem claim 5): the observation history, ordered by creation index, from the store alone."""
    ordered = sorted(store, key=lambda record: record.index)
    return tuple(record.content for record in ordered)


def payload_tokens(store: Store) -> int:
    """Claim 6: the archived payload, sum of n_j over stored observations (metadata excluded)."""
    return sum(record.n_tokens for record in store)
