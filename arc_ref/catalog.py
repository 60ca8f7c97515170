"""A3: the persistent external catalog, its bounded pages and the stateful cursor.

The catalog is the store itself read through the stubs z_j (one per record, in creation order, never
removed): page s holds z_((s-1)p+1) .. z_min(sp, N). Only one page is materialized in the view.
"""

from __future__ import annotations

from attrs import frozen

from arc_ref import render
from arc_ref.chat import CHAT_FORMATS, ChatFormat
from arc_ref.config import Setup
from arc_ref.counting import Part
from arc_ref.errors import BudgetViolation
from arc_ref.message import Context, Message
from arc_ref.store import Store


def page_count(stored: int, page_size: int) -> int:
    """ceil(N / p): the number of pages of a catalog of ``stored`` stubs.

    pre: stored >= 0
    pre: page_size >= 1
    post: (__return__ - 1) * page_size < stored <= __return__ * page_size or (stored == 0 and __return__ == 0)
    """
    return -(-stored // page_size)


def page_of(index: int, page_size: int) -> int:
    """s_j = ceil(j / p): the page holding stub z_j (Lemma 3).

    pre: index >= 1
    pre: page_size >= 1
    post: (__return__ - 1) * page_size + 1 <= index <= __return__ * page_size
    """
    return (index - 1) // page_size + 1


def page_span(page: int, page_size: int, stored: int) -> tuple[int, int]:
    """Indices (first, last) of the stubs on ``page`` (A3), both inclusive.

    pre: page_size >= 1
    pre: 1 <= page <= -(-stored // page_size)
    post: __return__[0] == (page - 1) * page_size + 1
    post: __return__[0] <= __return__[1] <= stored
    post: __return__[1] - __return__[0] + 1 <= page_size
    """
    first = (page - 1) * page_size + 1
    return first, min(page * page_size, stored)


@frozen
class PageText:
    """A catalog page's text before it is priced: its number, content, header and each stub line (its newline
    first) with the stub's cached count."""

    page: int
    content: str
    header: str
    lines: tuple[tuple[str, int], ...]

    def parts(self) -> list[Part]:
        """The content as parts of known counts (`arc_ref.counting`): the header, uncounted, then the lines."""
        return [(self.header, None), *self.lines]


def page_text(setup: Setup, store: Store, page: int, upto: int | None = None) -> PageText:
    """The text of G for ``page`` (1 <= page <= pages), as `render_page` shows it.

    ``upto`` (layout "lean", spec/rendering.md section 14): the page of the catalog of observations 1..upto,
    those that have left the verbatim view; its header counts them (pages and total), not later ones.
    """
    size = setup.config.page_size
    stored = len(store) if upto is None else upto
    pages = page_count(stored, size)
    first, last = page_span(page, size, stored)
    header = render.catalog_header(page, pages, first, last, stored)
    records = [store[index - 1] for index in range(first, last + 1)]
    content = render.catalog_content(header, (record.stub for record in records))
    return PageText(page, content, header, tuple(("\n" + record.stub, record.stub_tokens) for record in records))


def render_page(setup: Setup, store: Store, page: int, upto: int | None = None) -> Message:
    """G: the catalog message for ``page`` (1 <= page <= pages, ``upto`` as in `page_text`); its tokens are <= P
    (Lemma 3)."""
    return page_message(setup, page_text(setup, store, page, upto))


# The chat formats whose message end costs as much after the header's closing "]" as the first stub line's "\n"
# does ("]\n" and "]<" are one token each: spec/rendering.md section 8); a page of any other format is counted
# from its parts, by the tokenizer's boundary rule.
_PAGE_LINES_ADD_UP = tuple(CHAT_FORMATS.values())


def page_message(setup: Setup, text: PageText) -> Message:
    """The catalog message of ``text`` with its cost; its tokens are <= P (Lemma 3)."""
    if setup.tokenizer.stub_lines_add_up and setup.chat in _PAGE_LINES_ADD_UP:
        # the page costs its header message plus each stub's cached line cost (exact for these tokenizers and
        # formats: proofs_check.test_catalog.test_a3_page_tokens_are_header_plus_stub_lines)
        tokens = setup.message_tokens(render.USER, text.header) + sum(tokens for _, tokens in text.lines)
        message = Message(render.USER, text.content, tokens)
    else:  # each stub line's cached count reused where the tokenizer's boundary rule allows (arc_ref.counting)
        message = setup.message(render.USER, text.content, parts=text.parts())
    if message.tokens > setup.config.page_budget:
        raise BudgetViolation(
            f"catalog page {text.page} costs {message.tokens} tokens > page_budget P = {setup.config.page_budget}"
        )
    return message


def page_cost_at(setup: Setup, text: PageText, context: Context) -> int:
    """Tokens of the catalog message of ``text`` where the view places it (``context``): exactly what the view
    of `page_message`'s message counts there. A served template renders only the one probe conversation that
    gives the message this place (`TemplateFormat.placed_cost_at`), for a page that may be thrown away unseen."""
    if isinstance(setup.chat, ChatFormat):
        return page_message(setup, text).tokens
    return setup.chat.placed_cost_at(context, render.USER, text.content, parts=text.parts())
