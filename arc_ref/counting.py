"""The token count of a concatenation from its parts' counts: each text is counted once (A4, Lemma 2).

A message is a concatenation of parts: the chat format's frame around the content, wrapper lines, a
stored observation, summary lines, recall bodies. Where the tokenizer's boundary rule
(`Tokenizer.splits_between`) says that no token crosses the junction of two parts, the tokens of the
whole are the sum of the tokens of the parts, and a part whose count is already known (a record's n_j,
a summary item's line cost, a recall body's count) is not counted again. Parts whose junction the rule
cannot vouch for are counted together, as one text; a long part with a known count first gives up
only the few characters at such an edge (up to the nearest junction inside it that the rule vouches
for: tokens(part) = tokens(edge) + tokens(rest), so the rest's count is the known count minus the
edge's). The sum is therefore the exact count of the concatenation whenever the rule keeps its
promise: proofs_check.test_view checks the rule on adversarial texts, and that the sum of a view's
parts equals the count of its serialized text on random traces, for every tokenizer and chat format.

Every component builds its messages through `arc_ref.config.Setup.message`, passing the parts it knows;
this module is used there for a chat format that embeds the content verbatim between a frame of its own
(`arc_ref.chat.ChatFormat.frame`). A served model's template (`arc_ref.templates`) may rewrite the
content and renders a message differently by its place, so its messages are counted per place
(`TemplateFormat.placed_costs`): each piece rendered, and where the piece holds the content verbatim, the
piece's text before it, the parts and the text after it are summed here (spec/rendering.md §2, §3.1).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Tuple

from arc_ref.tokenizers import Tokenizer

Part = Tuple[str, Optional[int]]  # (text, its token count when already known)

EDGE_WINDOW = 64  # characters searched for a vouched junction at an edge of a known part
SPLIT_FROM = 4 * EDGE_WINDOW  # a shorter known part is simply counted with its neighbour


def _vouched_cut(tokenizer: Tokenizer, text: str, positions: range) -> int:
    """The first position p in ``positions`` with a vouched junction text[p-1] | text[p]; 0 if none."""
    for position in positions:
        if tokenizer.splits_between(text[position - 1], text[position]):
            return position
    return 0


def joined_tokens(tokenizer: Tokenizer, parts: Iterable[Part], count: Callable[[str], int] | None = None) -> int:
    """tokens("".join(texts of parts)), counting only the parts (or runs of parts) not known already.

    Empty parts are skipped (the junction is then between their neighbours). A long known part whose
    junction with a neighbour is not vouched for gives up its edge up to the nearest vouched junction
    inside it (within EDGE_WINDOW characters; count: the known count minus the edges' counts); then
    every run of texts joined at junctions not vouched for is counted whole, with ``count`` (default
    ``tokenizer.count``; a caller may pass one that remembers what it counted).
    """
    if count is None:
        count = tokenizer.count
    texts: list[str] = []
    counts: list[int | None] = []
    for text, known in parts:
        if text:
            texts.append(text)
            counts.append(known)
    if not texts:
        return 0
    splits = tokenizer.splits_between
    vouched = [True] + [splits(texts[i - 1][-1], texts[i][0]) for i in range(1, len(texts))] + [True]
    total = 0
    run: list[str] = []  # texts of a run joined at junctions not vouched for: counted together
    for position, text in enumerate(texts):
        known = counts[position]
        opens, closes = vouched[position], vouched[position + 1]
        if known is not None and not (opens and closes) and len(text) > SPLIT_FROM:
            size = len(text)
            head_end = 0 if opens else _vouched_cut(tokenizer, text, range(1, min(EDGE_WINDOW, size - 1) + 1))
            tail_start = size
            if not closes:
                tail_start = _vouched_cut(tokenizer, text, range(size - 1, max(size - 1 - EDGE_WINDOW, head_end), -1))
            if (opens or head_end) and tail_start:
                head, tail = text[:head_end], text[tail_start:]
                if head:  # it ends the run it joins
                    run.append(head)
                    known -= count(head)
                if run:
                    total += count("".join(run))
                if tail:  # it opens the next run
                    known -= count(tail)
                run = [tail] if tail else []
                total += known  # the rest stands between two vouched junctions
                continue
        if opens:
            if run:
                total += count("".join(run))
                run = []
            if closes and known is not None:
                total += known
                continue
        run.append(text)
    if run:
        total += count("".join(run))
    return total
