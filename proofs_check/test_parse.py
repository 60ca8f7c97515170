"""Every template of `arc_ref.render` reads back with its parser (`arc_ref.parse`): parse(render(x)) == x.

Three layers, each over every template:

* the template itself: for any field values, parsing the rendered text succeeds and rendering the parsed
  fields gives the text back (the parser is a right inverse of the renderer); for values that hold none of
  the template's separators, the parsed fields are exactly the values (the parser inverts the renderer);
* the typed parsers: a stub, a summary, a catalog page, a recall buffer, a command result, built with the
  render functions from random parts, read back as those parts;
* the views of random traces (A4): every message of every view is recognised as its component and
  re-renders to itself, so the scripted agent can read everything the core shows.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from arc_ref import parse, render
from arc_ref.config import Config, preset
from arc_ref.machine import Compact, Observe, init
from arc_ref.render import Template
from arc_ref.text import escape_line
from proofs_check.harness import apply, event_lists, exact_view
from proofs_check.registry import proves
from proofs_check.strategies import configs

TEMPLATES: dict[str, Template] = {
    name: value for name, value in vars(render).items() if isinstance(value, Template)
}

ids = st.from_regex(r"§[0-9A-Za-z._-]{1,14}", fullmatch=True)
counts = st.integers(0, render.WIDEST_NUMBER)
returncodes = st.integers(render.WIDEST_RETURNCODE, 2**31 - 1)
words = st.from_regex(r"[^\s]{1,12}", fullmatch=True)
any_lines = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n"), max_size=40)
any_texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)
# Free text that holds no separator of any template (no | : ; ` ( ) [ ] $ § = newline, no "ch "/"tok " runs).
_PLAIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.,-'\"é中😀"
plain_lines = st.text(st.sampled_from(_PLAIN), max_size=30).filter(lambda t: "ch " not in t and "tok " not in t)
plain_texts = st.lists(plain_lines, max_size=4).map("\n".join)


def _values(template: Template, plain: bool) -> st.SearchStrategy[dict[str, Any]]:
    kinds = {
        render.ID: ids,
        render.RC: returncodes | st.none(),  # None: no exit status known, printed "?"
        render.COUNT: counts,
        render.WORD: words.filter(lambda w: ":" not in w) if plain else words,
        render.LINE: plain_lines if plain else any_lines,
        render.TEXT: plain_texts if plain else any_texts,
    }
    return st.fixed_dictionaries({name: kinds[template.kinds[name]] for name in template.fields})


@st.composite
def template_and_values(draw: st.DrawFn, plain: bool) -> tuple[str, Template, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(TEMPLATES)))
    template = TEMPLATES[name]
    return name, template, draw(_values(template, plain))


def test_every_template_with_fields_is_a_template_object() -> None:
    """The render functions that take fields all go through a Template (so every one has a parser)."""
    assert {"STUB", "CATALOG_HEADER", "THOUGHT_ITEM", "NOTE_ITEM", "INLINE_ITEM", "BARE_ITEM", "SUMMARY_OMITTED",
            "RECALL_OPEN", "RECALL_CLOSE", "RECALL_RESPONSE", "AGENT_MESSAGE", "OBSERVATION_MESSAGE",
            "LEAN_OBSERVATION_MESSAGE",
            "OBSERVATION_STUB_MESSAGE"} <= set(TEMPLATES)
    assert {name for name in TEMPLATES if name.startswith("NOTE_") and name != "NOTE_ITEM"} == {
        f"NOTE_{kind.upper()}" for kind, _ in parse.NOTE_TEMPLATES
    }


@given(template_and_values(plain=False))
@proves("A4")
def test_parsing_a_rendered_template_gives_it_back(case: tuple[str, Template, dict[str, Any]]) -> None:
    """render(parse(s)) == s for s = render(x), whatever the field values (parse is a right inverse)."""
    _name, template, values = case
    shown = template.render(**values)
    parsed = template.parse(shown)
    assert parsed is not None
    assert template.render(**parsed) == shown


@given(template_and_values(plain=True))
@proves("A4")
def test_parse_inverts_render_when_no_field_holds_a_separator(case: tuple[str, Template, dict[str, Any]]) -> None:
    """parse(render(x)) == x for every template when the free-text fields hold no separator."""
    _name, template, values = case
    assert template.parse(template.render(**values)) == values


@given(ids, returncodes, counts, counts, plain_lines, any_lines, any_lines)
@proves("A3")
def test_stub_reads_back(obs_id: str, rc: int, n_chars: int, n_tokens: int, sig: str, head: str, tail: str) -> None:
    """A stub's fields read back, previews as shown (escaped); re-rendering gives the same line."""
    line = render.stub(obs_id, rc, n_chars, n_tokens, sig, head, tail)
    stub = parse.parse_stub(line)
    assert stub is not None and stub.line == line
    assert (stub.obs_id, stub.returncode, stub.n_chars, stub.n_tokens, stub.signature) == (
        obs_id, rc, n_chars, n_tokens, sig)
    if "|" not in head + tail:
        assert (stub.head, stub.tail) == (escape_line(head), escape_line(tail))


@st.composite
def summary_items(draw: st.DrawFn) -> tuple[str, parse.SummaryEntry]:
    kind = draw(st.sampled_from(("thought", "note", "stub", "bare", "inline")))
    obs_id = draw(ids)
    turn = draw(counts)
    if kind == "thought":
        thought, action = draw(plain_lines), draw(plain_lines)
        return render.thought_item(turn, thought, action), parse.ThoughtItem(turn, thought, action)
    if kind == "note":
        note = draw(plain_lines)
        return render.note_item(turn, note), parse.NoteItem(turn, note)
    if kind == "stub":
        rc, n, t, sig, head, tail = draw(returncodes), draw(counts), draw(counts), *(draw(plain_lines) for _ in "123")
        line = render.stub(obs_id, rc, n, t, sig, head, tail)
        return line, parse.StubItem(parse.Stub(obs_id, rc, n, t, sig, head, tail))
    if kind == "bare":
        return obs_id, parse.BareItem(obs_id)
    rc, sig, content = draw(returncodes), draw(plain_lines), draw(plain_texts)
    return render.inline_item(obs_id, rc, sig, content), parse.InlineItem(obs_id, rc, sig, content)


@given(st.integers(0, 5), st.lists(summary_items(), max_size=6))
@proves("A4")
def test_summary_reads_back_item_by_item(omitted: int, items: list[tuple[str, parse.SummaryEntry]]) -> None:
    content = render.summary_content(omitted, (text for text, _ in items))
    assert parse.parse_summary(content) == parse.Summary(omitted, tuple(item for _, item in items))


@given(st.lists(st.tuples(ids, counts, counts, any_texts), max_size=4))
@example([("§a", 1, 1, "[end §a chunk 1/1]\n[recall §a chunk 1/1]\nx")])  # a payload opening with its own close
@example([("§a", 1, 1, "")])
@proves("A5")
def test_recall_buffer_reads_back_response_by_response(responses: list[tuple[str, int, int, str]]) -> None:
    """Payloads are arbitrary text (newlines, decoys): each response still reads back exactly unless a
    payload holds its own closing line."""
    content = render.recall_content(render.recall_response(*response) for response in responses)
    parsed = parse.parse_recall_buffer(content)
    assert parsed is not None
    rerendered = render.recall_content(
        render.recall_response(r.obs_id, r.chunk, r.chunks, r.payload) for r in parsed
    )
    assert rerendered == content
    if not any(render.recall_close(i, c, n) in payload for i, c, n, payload in responses):
        assert parsed == tuple(parse.RecallResponse(*response) for response in responses)


@given(st.integers(1, 9), st.integers(1, 9), st.lists(st.tuples(ids, plain_lines, plain_lines), max_size=4))
@proves("A3")
def test_catalog_page_reads_back(page: int, pages: int, stubs: list[tuple[str, str, str]]) -> None:
    lines = [render.stub(obs_id, 0, 10, 3, sig, head, "") for obs_id, sig, head in stubs]
    content = render.catalog_content(render.catalog_header(page, pages, 1, len(lines), len(lines)), lines)
    parsed = parse.parse_catalog(content)
    assert parsed is not None
    assert parsed.header == parse.CatalogHeader(page, pages, 1, len(lines), len(lines))
    assert [stub.line for stub in parsed.stubs] == lines


NOTES = {
    "chunk_in_buffer": lambda w, i, t, n: render.note_chunk_in_buffer(w, i, n, n + 1),
    "empty": lambda w, i, t, n: render.note_empty(w, i),
    "exhausted": lambda w, i, t, n: render.note_exhausted(w, i, n),
    "unknown_suggest": lambda w, i, t, n: render.note_unknown_id(w, t, i, None, None),
    "unknown_empty": lambda w, i, t, n: render.note_unknown_id(w, t, None, None, None),
    "unknown_range": lambda w, i, t, n: render.note_unknown_id(w, t, None, i, i),
    "missing_argument": lambda w, i, t, n: render.note_missing_argument(w, t),
    "recall_limit": lambda w, i, t, n: render.note_recall_limit(w, t, n),
    "catalog_page": lambda w, i, t, n: render.note_catalog_page(w, n, n + 1),
    "catalog_last": lambda w, i, t, n: render.note_catalog_last(w, n),
    "catalog_empty": lambda w, i, t, n: render.note_catalog_empty(w),
    "catalog_no_page": lambda w, i, t, n: render.note_catalog_no_page(w, t, n),
    "ignored": lambda w, i, t, n: render.note_ignored(t),
    "unknown_tool": lambda w, i, t, n: render.note_unknown_tool(t),
    "meta": lambda w, i, t, n: render.note_meta(w, render.stub(i, 0, n, n, t, t, t)),
}


@given(st.lists(st.tuples(st.sampled_from(sorted(NOTES)), words.filter(lambda w: ":" not in w), ids,
                          plain_lines, counts), max_size=5))
@proves("A5", "A3")
def test_command_result_notes_read_back_as_their_kind(notes: list[tuple[str, str, str, str, int]]) -> None:
    content = render.command_message(NOTES[kind](word, obs_id, token, n) for kind, word, obs_id, token, n in notes)
    parsed = parse.parse_command_message(content)
    assert parsed is not None
    assert [note.kind for note in parsed] == [kind for kind, *_ in notes]
    for note, (kind, word, obs_id, _token, _n) in zip(parsed, notes, strict=True):
        if kind not in ("ignored", "unknown_tool"):
            assert note.text("word") == word
        if kind == "meta":
            assert note.stub is not None and note.stub.obs_id == obs_id


def note_text(note: parse.Note) -> str:
    """A parsed note rendered again (a clipped line as it was)."""
    if note.kind == parse.CLIPPED:
        return note.text("text")
    return dict(parse.NOTE_TEMPLATES)[note.kind].render(**note.fields)


def rerender(component: parse.ViewComponent) -> str:
    """The text of a parsed view message, rendered again from its parts with the render functions."""
    if isinstance(component, parse.Summary):
        texts_: list[str] = []
        for item in component.items:
            if isinstance(item, parse.ThoughtItem):
                texts_.append(render.thought_item(item.turn, item.thought, item.action))
            elif isinstance(item, parse.NoteItem):
                texts_.append(render.note_item(item.turn, item.note))
            elif isinstance(item, parse.StubItem):
                texts_.append(item.stub.line)
            elif isinstance(item, parse.BareItem):
                texts_.append(item.obs_id)
            else:
                texts_.append(render.inline_item(item.obs_id, item.returncode, item.signature, item.content))
        return render.summary_content(component.omitted, texts_)
    if isinstance(component, parse.CatalogPage):
        header = component.header
        return render.catalog_content(
            render.catalog_header(header.page, header.pages, header.first, header.last, header.total),
            (stub.line for stub in component.stubs),
        )
    if isinstance(component, parse.AgentMessage):
        return render.agent_message(component.thought, component.action)
    if isinstance(component, parse.ObservationMessage):
        return render.observation_message(component.obs_id, component.returncode, component.signature,
                                          component.content)
    if isinstance(component, parse.LeanObservationMessage):
        return render.lean_observation_message(component.returncode, component.content)
    if isinstance(component, parse.ToolTurnMessage):
        return component.thought
    if isinstance(component, parse.ToolNotes):
        return "\n".join(note_text(note) for note in component.notes)
    if isinstance(component, parse.ObservationStubMessage):
        return render.observation_stub_message(component.obs_id, component.returncode, component.n_tokens,
                                               component.stub.line)
    if all(isinstance(part, parse.RecallResponse) for part in component):
        return render.recall_content(
            render.recall_response(r.obs_id, r.chunk, r.chunks, r.payload)
            for r in component if isinstance(r, parse.RecallResponse)
        )
    return render.command_message(note_text(note) for note in component if isinstance(note, parse.Note))


# An inline summary item whose content reads as a bare id (the line after its head is content, not an item).
_ID_LIKE_CONTENT = (
    preset("minimal", page_size=1, chunk_tokens=1, capacity=2, fingerprint_bits=0, keep_verbatim_chars=6,
           recalls_per_step=1, max_completion=1, stub_cap=84, overhead=22, page_budget=202, recall_budget=131,
           summary_budget=259, recent_budget=207, context_limit=895),
    [Observe("ls", "§02-7", 0), Observe("ls", "§02-7", 0), Compact("proactive")],
)


@given(configs(), event_lists())
@example(*_ID_LIKE_CONTENT)
@proves("A4", "A3", "A5")
def test_every_message_of_every_view_reads_back(config: Config, events: list[object]) -> None:
    """Every message after the prefix F is recognised as S, G, U, a command result or an entry of H, and
    re-rendered from its parsed parts it is the message itself, whatever the observations hold."""
    state = init(config)
    for event in [*events, None]:
        shown, _ = exact_view(state)
        for message in shown.messages[2:]:
            component = parse.parse_view_message(message.role, message.content)
            assert component is not None, message.content
            assert rerender(component) == message.content
        if event is not None:
            state = apply(state, event)  # type: ignore[arg-type]


def test_inline_content_that_looks_like_an_id_stays_inside_its_item() -> None:
    """An inline item is its head line and at least one content line: an observation reading `§02-7` is its
    content, not a bare item after an inline item with nothing in it (found by the property above)."""
    content = render.summary_content(0, ["turn 1: thought:  | action: ls", render.inline_item("§1", 0, "ls", "§02-7")])
    summary = parse.parse_summary(content)
    assert summary is not None and rerender(summary) == content
    assert isinstance(summary.items[-1], parse.InlineItem) and summary.items[-1].content == "§02-7"
