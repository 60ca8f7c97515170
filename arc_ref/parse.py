"""Readers of every message `arc_ref.render` writes: the inverse of each template, from the same definition.

Each parser is built on the ``render.Template`` that renders the text, so a template is written once and
its reader can never drift from it (spec/rendering.md, sections 7-10 and 12). A parser returns the fields
as rendered (escaped previews stay escaped) or None when the text is not that template. For every template
``parse(render(x)) == x`` whenever no free-text field holds one of the template's own separators (then the
split is unique), and ``render(parse(s)) == s`` for every rendered ``s`` (proofs_check/test_parse.py).

Components of the active view (A4) are recognised by their first line: S starts with ``SUMMARY_HEADER``,
G with a catalog header, U with ``RECALL_HEADER``, a command result with ``COMMAND_RESULT_HEADER``; the
recent entries of H are agent messages, observation messages and observation stub messages.
"""

from __future__ import annotations

from typing import Callable, Mapping, Union

from attrs import frozen

from arc_ref import render
from arc_ref.render import Template


def _text(fields: Mapping[str, str | int | None], name: str) -> str:
    value = fields[name]
    assert isinstance(value, str)
    return value


def _int(fields: Mapping[str, str | int | None], name: str) -> int:
    value = fields[name]
    assert isinstance(value, int)
    return value


def _returncode(fields: Mapping[str, str | int | None], name: str) -> int | None:
    """A return code field: its integer, or None for ``?`` (no exit status known)."""
    value = fields[name]
    assert value is None or isinstance(value, int)
    return value


# --- A3: stub and catalog page ------------------------------------------------------------------


@frozen
class Stub:
    """The fields of a citation stub z_j, as shown (``head`` and ``tail`` escaped)."""

    obs_id: str
    returncode: int | None
    n_chars: int
    n_tokens: int
    signature: str
    head: str
    tail: str

    @property
    def line(self) -> str:
        return render.STUB.render(
            obs_id=self.obs_id, returncode=self.returncode, n_chars=self.n_chars, n_tokens=self.n_tokens,
            signature=self.signature, head=self.head, tail=self.tail,
        )


def parse_stub(line: str) -> Stub | None:
    fields = render.STUB.parse(line)
    if fields is None:
        return None
    return Stub(
        _text(fields, "obs_id"), _returncode(fields, "returncode"), _int(fields, "n_chars"), _int(fields, "n_tokens"),
        _text(fields, "signature"), _text(fields, "head"), _text(fields, "tail"),
    )


@frozen
class CatalogHeader:
    page: int
    pages: int
    first: int
    last: int
    total: int


def parse_catalog_header(line: str) -> CatalogHeader | None:
    fields = render.CATALOG_HEADER.parse(line)
    if fields is None:
        return None
    return CatalogHeader(*(_int(fields, name) for name in ("page", "pages", "first", "last", "total")))


@frozen
class CatalogPage:
    """G: the header and the stubs of one page."""

    header: CatalogHeader
    stubs: tuple[Stub, ...]


def parse_catalog(content: str) -> CatalogPage | None:
    first, *rest = content.split("\n")
    header = parse_catalog_header(first)
    if header is None:
        return None
    stubs = tuple(parse_stub(line) for line in rest)
    if any(stub is None for stub in stubs):
        return None
    return CatalogPage(header, tuple(stub for stub in stubs if stub is not None))


# --- S: the summary -------------------------------------------------------------------------------


@frozen
class ThoughtItem:
    turn: int
    thought: str
    action: str


@frozen
class NoteItem:
    turn: int
    note: str


@frozen
class StubItem:
    stub: Stub


@frozen
class BareItem:
    """A stub collapsed to its bare id (paper, "Compaction routine")."""

    obs_id: str


@frozen
class InlineItem:
    obs_id: str
    returncode: int | None
    signature: str
    content: str


SummaryEntry = Union[ThoughtItem, NoteItem, StubItem, BareItem, InlineItem]


@frozen
class Summary:
    omitted: int
    items: tuple[SummaryEntry, ...]


def parse_thought_item(line: str) -> ThoughtItem | None:
    fields = render.THOUGHT_ITEM.parse(line)
    if fields is None:
        return None
    return ThoughtItem(_int(fields, "turn"), _text(fields, "thought"), _text(fields, "action"))


def parse_note_item(line: str) -> NoteItem | None:
    fields = render.NOTE_ITEM.parse(line)
    return None if fields is None else NoteItem(_int(fields, "turn"), _text(fields, "note"))


def parse_inline_item(text: str) -> InlineItem | None:
    fields = render.INLINE_ITEM.parse(text)
    if fields is None:
        return None
    return InlineItem(
        _text(fields, "obs_id"), _returncode(fields, "returncode"), _text(fields, "signature"), _text(fields, "content")
    )


def _inline_head(line: str) -> bool:
    """``line`` is the first line of an inline item (its content follows on the next lines)."""
    return parse_inline_item(line + "\n") is not None


def _line_item(line: str) -> SummaryEntry | None:
    """The one-line summary item ``line`` is, if any (a thought, a result note, a stub or a bare id)."""
    thought = parse_thought_item(line)
    if thought is not None:
        return thought
    note = parse_note_item(line)
    if note is not None:
        return note
    stub = parse_stub(line)
    if stub is not None:
        return StubItem(stub)
    bare = render.BARE_ITEM.parse(line)
    if bare is not None:
        return BareItem(_text(bare, "obs_id"))
    return None


def _split_runs(count: int, single: Callable[[int], bool], opens: Callable[[int], bool],
                closes: Callable[[int, int], bool]) -> list[tuple[int, int]] | None:
    """Split lines 0..count-1 into items: a one-line item, or a run opened at i and ended before j.

    ``single(i)``: line i is a whole item; ``opens(i)``: line i opens a run; ``closes(i, j)``: the run
    opened at i may end just before line j. A run takes the fewest lines that let the rest split too
    (so free text that looks like an item stays inside its run only when it must). Linear in ``count``
    for the summary and buffer shapes; None when no split exists.
    """
    splits: list[list[tuple[int, int]] | None] = [None] * (count + 1)
    splits[count] = []
    for start in range(count - 1, -1, -1):
        rest: list[tuple[int, int]] | None = None
        if single(start) and splits[start + 1] is not None:
            rest = [(start, start + 1), *(splits[start + 1] or [])]
        elif opens(start):
            for end in range(start + 1, count + 1):
                if splits[end] is not None and closes(start, end):
                    rest = [(start, end), *(splits[end] or [])]
                    break
        splits[start] = rest
    return splits[0]


def parse_summary(content: str) -> Summary | None:
    """S read back item by item (an inline item's content takes the fewest lines that let the rest parse, and
    at least one: the line after its head is always content, even when it reads as an item itself)."""
    lines = content.split("\n")
    if lines[0] != render.SUMMARY_HEADER:
        return None
    body, omitted = lines[1:], 0
    if body:
        fields = render.SUMMARY_OMITTED.parse(body[0])
        if fields is not None:
            omitted, body = _int(fields, "count"), body[1:]
    singles = [_line_item(line) for line in body]
    heads = [_inline_head(line) for line in body]
    # an inline item is its head line and at least one content line (empty content is an empty line)
    runs = _split_runs(
        len(body), lambda i: singles[i] is not None and not heads[i], lambda i: heads[i], lambda i, j: j >= i + 2
    )
    if runs is None:
        return None
    items: list[SummaryEntry] = []
    for start, end in runs:
        single = singles[start]
        if single is not None and not heads[start]:
            items.append(single)
            continue
        inline = parse_inline_item("\n".join(body[start:end]))
        if inline is None:  # pragma: no cover - a head line and a content line guarantee the shape
            return None
        items.append(inline)
    return Summary(omitted, tuple(items))


# --- U: the recall buffer -------------------------------------------------------------------------


@frozen
class RecallResponse:
    obs_id: str
    chunk: int
    chunks: int
    payload: str


@frozen
class RecallMarker:
    """An opening (``opening=True``) or closing line of a recall response."""

    obs_id: str
    chunk: int
    chunks: int
    opening: bool


def parse_recall_marker(line: str) -> RecallMarker | None:
    for template, opening in ((render.RECALL_OPEN, True), (render.RECALL_CLOSE, False)):
        fields = template.parse(line)
        if fields is not None:
            return RecallMarker(_text(fields, "obs_id"), _int(fields, "chunk"), _int(fields, "chunks"), opening)
    return None


def parse_recall_buffer(content: str) -> tuple[RecallResponse, ...] | None:
    """U read back: each response runs from its opening line to a matching closing line (the first one
    that lets the rest of the buffer parse)."""
    lines = content.split("\n")
    if lines[0] != render.RECALL_HEADER:
        return None
    body = lines[1:]
    markers = [parse_recall_marker(line) for line in body]

    def opens(i: int) -> bool:
        marker = markers[i]
        return marker is not None and marker.opening

    def closes(i: int, j: int) -> bool:
        opening, closing = markers[i], markers[j - 1]
        return (
            j - 1 > i + 1 and opening is not None and closing is not None and not closing.opening
            and (closing.obs_id, closing.chunk, closing.chunks) == (opening.obs_id, opening.chunk, opening.chunks)
        )

    runs = _split_runs(len(body), lambda i: False, opens, closes)
    if runs is None:
        return None
    responses: list[RecallResponse] = []
    for start, end in runs:
        opening = markers[start]
        assert opening is not None
        payload = "\n".join(body[start + 1 : end - 1])
        responses.append(RecallResponse(opening.obs_id, opening.chunk, opening.chunks, payload))
    return tuple(responses)


# --- H: recent entries and command results ----------------------------------------------------------


@frozen
class AgentMessage:
    thought: str
    action: str


@frozen
class ObservationMessage:
    obs_id: str
    returncode: int | None
    signature: str
    content: str


@frozen
class LeanObservationMessage:
    """A verbatim observation under layout "lean": its return code and content (spec/rendering.md section 14)."""

    returncode: int | None
    content: str


@frozen
class ObservationStubMessage:
    obs_id: str
    returncode: int | None
    n_tokens: int
    stub: Stub


def parse_agent_message(content: str) -> AgentMessage | None:
    fields = render.AGENT_MESSAGE.parse(content)
    return None if fields is None else AgentMessage(_text(fields, "thought"), _text(fields, "action"))


def parse_observation_message(content: str) -> ObservationMessage | None:
    fields = render.OBSERVATION_MESSAGE.parse(content)
    if fields is None:
        return None
    return ObservationMessage(
        _text(fields, "obs_id"), _returncode(fields, "returncode"), _text(fields, "signature"), _text(fields, "content")
    )


def parse_lean_observation_message(content: str) -> LeanObservationMessage | None:
    fields = render.LEAN_OBSERVATION_MESSAGE.parse(content)
    if fields is None:
        return None
    return LeanObservationMessage(_returncode(fields, "returncode"), _text(fields, "content"))


def parse_any_observation(content: str) -> ObservationMessage | LeanObservationMessage | ObservationStubMessage | None:
    """An observation message of either layout, or an observation's stub message."""
    return (parse_observation_stub_message(content) or parse_observation_message(content)
            or parse_lean_observation_message(content))


def parse_observation_stub_message(content: str) -> ObservationStubMessage | None:
    fields = render.OBSERVATION_STUB_MESSAGE.parse(content)
    if fields is None:
        return None
    stub = parse_stub(_text(fields, "stub_line"))
    if stub is None:
        return None
    return ObservationStubMessage(_text(fields, "obs_id"), _returncode(fields, "returncode"), _int(fields, "n_tokens"),
                                  stub)


# Notes, most specific first: NOTE_META ("word: stub") would read any "word: ..." line, so it comes last
# and must hold a stub.
NOTE_TEMPLATES: tuple[tuple[str, Template], ...] = (
    ("chunk_in_buffer", render.NOTE_CHUNK_IN_BUFFER),
    ("empty", render.NOTE_EMPTY),
    ("exhausted", render.NOTE_EXHAUSTED),
    ("unknown_suggest", render.NOTE_UNKNOWN_SUGGEST),
    ("unknown_empty", render.NOTE_UNKNOWN_EMPTY),
    ("unknown_range", render.NOTE_UNKNOWN_RANGE),
    ("missing_argument", render.NOTE_MISSING_ARGUMENT),
    ("recall_limit", render.NOTE_RECALL_LIMIT),
    ("catalog_page", render.NOTE_CATALOG_PAGE),
    ("catalog_last", render.NOTE_CATALOG_LAST),
    ("catalog_empty", render.NOTE_CATALOG_EMPTY),
    ("catalog_no_page", render.NOTE_CATALOG_NO_PAGE),
    ("ignored", render.NOTE_IGNORED),
    ("unknown_tool", render.NOTE_UNKNOWN_TOOL),
    ("meta", render.NOTE_META),
)
# A line of a command result that is no whole note: the notes were clipped together to fit R (history.py).
CLIPPED = "clipped"


@frozen
class Note:
    """One note of a command result: its kind (a name of ``NOTE_TEMPLATES``) and its fields."""

    kind: str
    fields: Mapping[str, str | int | None]

    def text(self, name: str) -> str:
        return _text(self.fields, name)

    def number(self, name: str) -> int:
        return _int(self.fields, name)

    @property
    def stub(self) -> Stub | None:
        """The stub a ``meta`` note shows."""
        return parse_stub(self.text("stub_line")) if self.kind == "meta" else None


def parse_note(line: str) -> Note | None:
    """The note ``line`` is (its kind and fields), or None when it is none of ``NOTE_TEMPLATES``."""
    for kind, template in NOTE_TEMPLATES:
        fields = template.parse(line)
        if fields is None:
            continue
        if kind == "meta" and parse_stub(_text(fields, "stub_line")) is None:
            return None
        return Note(kind, fields)
    return None


def _notes(lines: list[str]) -> tuple[Note, ...]:
    """Each line as its note; a line that is no note (the notes were clipped to fit) is kept as ``clipped``."""
    return tuple(parse_note(line) or Note(CLIPPED, {"text": line}) for line in lines)


def parse_command_message(content: str) -> tuple[Note, ...] | None:
    """A command result of text mode: the header, then one note per line."""
    lines = content.split("\n")
    if lines[0] != render.COMMAND_RESULT_HEADER:
        return None
    return _notes(lines[1:])


@frozen
class ToolTurnMessage:
    """An assistant message of tool mode: its text (the thought); its calls travel beside the content."""

    thought: str


@frozen
class ToolNotes:
    """ARC's answer to a call of one of its tools (tool mode): the notes, one per line, with no header."""

    notes: tuple[Note, ...]


# --- any message of the view -------------------------------------------------------------------------

ViewComponent = Union[
    Summary, CatalogPage, tuple[RecallResponse, ...], tuple[Note, ...], AgentMessage, ObservationMessage,
    LeanObservationMessage, ObservationStubMessage, ToolTurnMessage, ToolNotes,
]


def parse_view_message(role: str, content: str) -> ViewComponent | None:
    """The component (S, G, U, a command result or an entry of H) a message of the view is, read back.

    In tool mode (spec/rendering.md section 13) an assistant message that is not a text-mode turn is a tool
    turn's text, and a ``tool`` message is an observation, an observation's stub, or ARC's notes."""
    if role == render.ASSISTANT:
        return parse_agent_message(content) or ToolTurnMessage(content)
    if role == render.TOOL:
        observed = parse_any_observation(content)
        return observed if observed is not None else ToolNotes(_notes(content.split("\n")))
    first = content.split("\n", 1)[0]
    if first == render.SUMMARY_HEADER:
        return parse_summary(content)
    if first == render.RECALL_HEADER:
        return parse_recall_buffer(content)
    if first == render.COMMAND_RESULT_HEADER:
        return parse_command_message(content)
    if parse_catalog_header(first) is not None:
        return parse_catalog(content)
    return parse_any_observation(content)


def find_stubs(content: str) -> tuple[Stub, ...]:
    """Every stub a message shows, in order: stub lines (S, G, an observation stub message) and meta notes."""
    found: list[Stub] = []
    for line in content.split("\n"):
        stub = parse_stub(line)
        if stub is None:
            fields = render.NOTE_META.parse(line)
            stub = None if fields is None else parse_stub(_text(fields, "stub_line"))
        if stub is not None:
            found.append(stub)
    return tuple(found)
