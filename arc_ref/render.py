"""Every string the model sees, in one place (spec: `spec/rendering.md`).

Each component of the active view (A4) is one chat message, or several for the recent suffix H:
F = system + goal, S = summary, G = catalog page, U = recall buffer, H = recent entries.
Widths: counts and token numbers are printed in decimal without padding; the budget checks of
`arc_ref.config` use the widest values (``WIDEST_NUMBER`` and ``WIDEST_RETURNCODE``).

Every template with fields is one ``Template``: its format string (the spec's notation) renders it, and
the same string, read as a pattern, parses it back (``arc_ref.parse`` gives a typed parser per template).
A template is therefore written once: change it here and the renderer and every reader change together.
"""

from __future__ import annotations

import re
import string
from typing import Iterable, Mapping

from arc_ref.text import escape_line

WIDEST_NUMBER = 9_999_999_999  # counts (chars, tokens, chunks, pages, turns) are below 10**10
WIDEST_RETURNCODE = -(2**31)  # return codes are 32-bit signed integers
RETURNCODE_RANGE = range(-(2**31), 2**31)
UNKNOWN_RETURNCODE = "?"  # rc of an observation whose environment gave no exit status (an OpenAI tool message)

USER = "user"
ASSISTANT = "assistant"
SYSTEM = "system"
TOOL = "tool"

# --- templates: one format string renders and parses ------------------------------------------

# Kinds of field: what a field may hold, as a pattern (and whether it is read back as an int).
ID = "id"  # a printed id (A1): § and id characters
RC = "rc"  # a return code: a decimal integer, possibly negative, or UNKNOWN_RETURNCODE (read back as None)
COUNT = "count"  # a non-negative decimal integer
WORD = "word"  # a command word: no whitespace
LINE = "line"  # any text without a newline (escaped previews, signatures, thoughts)
TEXT = "text"  # any text, newlines included (observation contents, recall payloads)

FIELD_PATTERNS: Mapping[str, str] = {
    ID: r"§[0-9A-Za-z._-]+",
    RC: r"-?[0-9]+|\?",
    COUNT: r"[0-9]+",
    WORD: r"[^\s]+?",
    LINE: r"[^\n]*?",
    TEXT: r".*?",
}
INTEGER_KINDS = frozenset((COUNT,))


class Template:
    """A message template with named fields: ``render`` fills it, ``parse`` reads the fields back.

    ``text`` uses ``str.format`` fields (``{obs_id}``); ``kinds`` gives each field's kind. A field named
    twice must hold the same value twice (parsed as a back-reference). ``parse`` is a right inverse of
    ``render`` on every rendered string: ``render(**parse(s)) == s``; it is the exact inverse when no
    LINE or TEXT field holds a separator of the template itself (then the split is unique).
    """

    __slots__ = ("text", "kinds", "fields", "pattern", "returncode_fields")

    def __init__(self, text: str, /, **kinds: str) -> None:
        self.text = text
        self.kinds: Mapping[str, str] = kinds
        parts: list[str] = []
        fields: list[str] = []
        for literal, name, spec, conversion in string.Formatter().parse(text):
            parts.append(re.escape(literal))
            if name is None:
                continue
            if spec or conversion or name not in kinds:
                raise ValueError(f"template field {{{name}}} needs a kind and no format spec: {text!r}")
            if name in fields:
                parts.append(f"(?P={name})")
            else:
                fields.append(name)
                parts.append(f"(?P<{name}>{FIELD_PATTERNS[kinds[name]]})")
        unknown = set(kinds) - set(fields)
        if unknown:
            raise ValueError(f"kinds given for fields the template does not have: {sorted(unknown)}")
        self.fields = tuple(fields)
        self.pattern = re.compile("".join(parts), re.DOTALL)
        self.returncode_fields = tuple(name for name in fields if kinds[name] == RC)

    def render(self, **values: object) -> str:
        for name in self.returncode_fields:  # an RC field's None (no exit status known) is printed "?"
            if values[name] is None:
                values[name] = UNKNOWN_RETURNCODE
        return self.text.format(**values)

    def parse(self, text: str) -> dict[str, str | int | None] | None:
        """The fields of ``text`` when it is this template, rendered; else None."""
        match = self.pattern.fullmatch(text)
        if match is None:
            return None
        return {
            name: int(value) if self.kinds[name] in INTEGER_KINDS else (
                (None if value == UNKNOWN_RETURNCODE else int(value)) if self.kinds[name] == RC else value)
            for name, value in match.groupdict().items()
        }


# --- A3: citation stub and catalog page -------------------------------------------------------

STUB = Template(
    "{obs_id} rc={returncode} {n_chars}ch {n_tokens}tok $ {signature} | head: {head} | tail: {tail} | _recall {obs_id}",
    obs_id=ID, returncode=RC, n_chars=COUNT, n_tokens=COUNT, signature=LINE, head=LINE, tail=LINE,
)
CATALOG_HEADER = Template(
    "[ARC catalog page {page}/{pages}: observations {first}-{last} of {total}; catalog-first, catalog-next, catalog-page N]",
    page=COUNT, pages=COUNT, first=COUNT, last=COUNT, total=COUNT,
)


def stub(
    obs_id: str, returncode: int | None, n_chars: int, n_tokens: int, signature: str, head: str, tail: str
) -> str:
    """z_j: one line holding the id, metadata, previews and the recall hint (``signature`` already shown)."""
    return STUB.render(
        obs_id=obs_id, returncode=returncode, n_chars=n_chars, n_tokens=n_tokens, signature=signature,
        head=escape_line(head), tail=escape_line(tail),
    )


def catalog_header(page: int, pages: int, first: int, last: int, total: int) -> str:
    return CATALOG_HEADER.render(page=page, pages=pages, first=first, last=last, total=total)


def catalog_content(header: str, stubs: Iterable[str]) -> str:
    return header + "".join("\n" + line for line in stubs)


# --- S: deterministic summary -----------------------------------------------------------------

SUMMARY_HEADER = "[ARC summary of earlier turns; _recall §id brings back any observation]"
SUMMARY_OMITTED = Template("({count} earlier items omitted; every observation stays in the catalog)", count=COUNT)
THOUGHT_ITEM = Template("turn {turn}: thought: {thought} | action: {action}", turn=COUNT, thought=LINE, action=LINE)
NOTE_ITEM = Template("turn {turn}: result: {note}", turn=COUNT, note=LINE)
BARE_ITEM = Template("{obs_id}", obs_id=ID)  # a stub collapsed to its id (summary.bare_item prints record.obs_id)
INLINE_ITEM = Template(
    "{obs_id} (rc={returncode}) of `{signature}`:\n{content}", obs_id=ID, returncode=RC, signature=LINE, content=TEXT
)


def summary_omitted(count: int) -> str:
    return SUMMARY_OMITTED.render(count=count)


def summary_content(omitted: int, items: Iterable[str]) -> str:
    head = SUMMARY_HEADER + ("\n" + summary_omitted(omitted) if omitted else "")
    return head + "".join("\n" + item for item in items)


def thought_item(turn: int, thought: str, action: str) -> str:
    return THOUGHT_ITEM.render(turn=turn, thought=thought, action=action)


def note_item(turn: int, note: str) -> str:
    return NOTE_ITEM.render(turn=turn, note=note)


def inline_item(obs_id: str, returncode: int | None, signature: str, content: str) -> str:
    return INLINE_ITEM.render(obs_id=obs_id, returncode=returncode, signature=signature, content=content)


# --- U: recall buffer -------------------------------------------------------------------------

RECALL_HEADER = "[ARC recall buffer]"
RECALL_OPEN = Template("[recall {obs_id} chunk {chunk}/{chunks}]", obs_id=ID, chunk=COUNT, chunks=COUNT)
RECALL_CLOSE = Template("[end {obs_id} chunk {chunk}/{chunks}]", obs_id=ID, chunk=COUNT, chunks=COUNT)
RECALL_BODY = Template(RECALL_OPEN.text + "\n{payload}\n", obs_id=ID, chunk=COUNT, chunks=COUNT, payload=TEXT)
RECALL_RESPONSE = Template(RECALL_BODY.text + RECALL_CLOSE.text, obs_id=ID, chunk=COUNT, chunks=COUNT, payload=TEXT)
RECALL_FRAME_OPENINGS = tuple(frame.text[:frame.text.index("{obs_id}")] + "§" for frame in (RECALL_OPEN, RECALL_CLOSE))
"""``[recall §`` and ``[end §``: how a recall response's opening and closing lines start, control strings of every
setup (spec/rendering.md 7.1), so that no text the view shows can forge a chunk of a stored observation in U."""


def recall_close(obs_id: str, chunk: int, chunks: int) -> str:
    return RECALL_CLOSE.render(obs_id=obs_id, chunk=chunk, chunks=chunks)


def recall_response(obs_id: str, chunk: int, chunks: int, payload: str) -> str:
    """A5 response: wrapper (opening and closing line) around the exact payload."""
    return RECALL_RESPONSE.render(obs_id=obs_id, chunk=chunk, chunks=chunks, payload=payload)


def recall_body(obs_id: str, chunk: int, chunks: int, payload: str) -> str:
    """The response up to its closing line: opening line, payload, newline (body + close = response)."""
    return RECALL_BODY.render(obs_id=obs_id, chunk=chunk, chunks=chunks, payload=payload)


def recall_content(responses: Iterable[str]) -> str:
    return RECALL_HEADER + "".join("\n" + response for response in responses)


# --- H: recent entries ------------------------------------------------------------------------

AGENT_MESSAGE = Template("Thought: {thought}\nAction: {action}", thought=TEXT, action=LINE)
OBSERVATION_MESSAGE = Template(
    "Observation {obs_id} (rc={returncode}) of `{signature}`:\n{content}",
    obs_id=ID, returncode=RC, signature=LINE, content=TEXT,
)
OBSERVATION_STUB_MESSAGE = Template(
    "Observation {obs_id} (rc={returncode}) is too large for the recent window ({n_tokens} tokens); stub:\n{stub_line}",
    obs_id=ID, returncode=RC, n_tokens=COUNT, stub_line=LINE,
)


# layout "lean" (spec/rendering.md section 14): a verbatim observation as the plain transcript shows it, its id and
# signature left out (the assistant message before it shows the action; its stub shows the id once it is compacted)
LEAN_OBSERVATION_MESSAGE = Template("Observation (rc={returncode}):\n{content}", returncode=RC, content=TEXT)


def agent_message(thought: str, action: str) -> str:
    return AGENT_MESSAGE.render(thought=thought, action=action)


def observation_message(obs_id: str, returncode: int | None, signature: str, content: str) -> str:
    return OBSERVATION_MESSAGE.render(obs_id=obs_id, returncode=returncode, signature=signature, content=content)


def observation_head(obs_id: str, returncode: int | None, signature: str) -> str:
    """The observation message before its verbatim content (the template with empty content)."""
    return OBSERVATION_MESSAGE.render(obs_id=obs_id, returncode=returncode, signature=signature, content="")


def lean_observation_message(returncode: int | None, content: str) -> str:
    return LEAN_OBSERVATION_MESSAGE.render(returncode=returncode, content=content)


def lean_observation_head(returncode: int | None) -> str:
    """The lean observation message before its verbatim content."""
    return LEAN_OBSERVATION_MESSAGE.render(returncode=returncode, content="")


def observation_stub_message(obs_id: str, returncode: int | None, n_tokens: int, stub_line: str) -> str:
    return OBSERVATION_STUB_MESSAGE.render(obs_id=obs_id, returncode=returncode, n_tokens=n_tokens, stub_line=stub_line)


COMMAND_RESULT_HEADER = "Result of your command:"


def command_message(notes: Iterable[str]) -> str:
    return COMMAND_RESULT_HEADER + "".join("\n" + note for note in notes)


# --- notes answering agent commands (H) -------------------------------------------------------

NOTE_CHUNK_IN_BUFFER = Template(
    "{word} {obs_id}: chunk {chunk}/{chunks} is in the recall buffer", word=WORD, obs_id=ID, chunk=COUNT, chunks=COUNT
)
NOTE_EMPTY = Template("{word} {obs_id}: the observation is empty (0 chunks)", word=WORD, obs_id=ID)
NOTE_EXHAUSTED = Template(
    "{word} {obs_id}: all {chunks} chunks were already returned; _recall-start {obs_id} reads it again",
    word=WORD, obs_id=ID, chunks=COUNT,
)
NOTE_META = Template("{word}: {stub_line}", word=WORD, stub_line=LINE)
NOTE_UNKNOWN_SUGGEST = Template(
    "{word} {token}: no stored observation has this id; did you mean {suggestion}?",
    word=WORD, token=LINE, suggestion=ID,
)
NOTE_UNKNOWN_EMPTY = Template(
    "{word} {token}: no stored observation has this id; nothing is stored yet", word=WORD, token=LINE
)
NOTE_UNKNOWN_RANGE = Template(
    "{word} {token}: no stored observation has this id; ids run from {first} to {last}; catalog-first lists them",
    word=WORD, token=LINE, first=ID, last=ID,
)
NOTE_MISSING_ARGUMENT = Template("{word}: missing argument (usage: {usage})", word=WORD, usage=LINE)
NOTE_RECALL_LIMIT = Template(
    "{word} {token}: not run, at most {limit} recalls per step", word=WORD, token=LINE, limit=COUNT
)
NOTE_CATALOG_PAGE = Template(
    "{word}: catalog page {page}/{pages} is shown in the catalog section", word=WORD, page=COUNT, pages=COUNT
)
NOTE_CATALOG_LAST = Template("{word}: already at the last page {pages}/{pages}", word=WORD, pages=COUNT)
NOTE_CATALOG_EMPTY = Template("{word}: the catalog is empty", word=WORD)
NOTE_CATALOG_NO_PAGE = Template(
    "{word} {argument}: no such page (pages 1-{pages})", word=WORD, argument=LINE, pages=COUNT
)
NOTE_IGNORED = Template("ignored (not a command): {line}", line=LINE)
NOTE_UNKNOWN_TOOL = Template("{name}: no tool has this name; not run", name=LINE)


def note_chunk_in_buffer(word: str, obs_id: str, chunk: int, chunks: int) -> str:
    return NOTE_CHUNK_IN_BUFFER.render(word=word, obs_id=obs_id, chunk=chunk, chunks=chunks)


def note_empty(word: str, obs_id: str) -> str:
    return NOTE_EMPTY.render(word=word, obs_id=obs_id)


def note_exhausted(word: str, obs_id: str, chunks: int) -> str:
    return NOTE_EXHAUSTED.render(word=word, obs_id=obs_id, chunks=chunks)


def note_meta(word: str, stub_line: str) -> str:
    return NOTE_META.render(word=word, stub_line=stub_line)


def note_unknown_id(word: str, token: str, suggestion: str | None, first: str | None, last: str | None) -> str:
    shown = escape_line(token)
    if suggestion is not None:
        return NOTE_UNKNOWN_SUGGEST.render(word=word, token=shown, suggestion=suggestion)
    if first is None or last is None:
        return NOTE_UNKNOWN_EMPTY.render(word=word, token=shown)
    return NOTE_UNKNOWN_RANGE.render(word=word, token=shown, first=first, last=last)


def note_missing_argument(word: str, usage: str) -> str:
    return NOTE_MISSING_ARGUMENT.render(word=word, usage=usage)


def note_recall_limit(word: str, token: str, limit: int) -> str:
    return NOTE_RECALL_LIMIT.render(word=word, token=escape_line(token), limit=limit)


def note_catalog_page(word: str, page: int, pages: int) -> str:
    return NOTE_CATALOG_PAGE.render(word=word, page=page, pages=pages)


def note_catalog_last(word: str, pages: int) -> str:
    return NOTE_CATALOG_LAST.render(word=word, pages=pages)


def note_catalog_empty(word: str) -> str:
    return NOTE_CATALOG_EMPTY.render(word=word)


def note_catalog_no_page(word: str, argument: str, pages: int) -> str:
    return NOTE_CATALOG_NO_PAGE.render(word=word, argument=escape_line(argument), pages=pages)


def note_ignored(line: str) -> str:
    return NOTE_IGNORED.render(line=escape_line(line))


def note_unknown_tool(name: str) -> str:
    return NOTE_UNKNOWN_TOOL.render(name=escape_line(name))


def tool_calls_action(actions: Iterable[str]) -> str:
    """A folded tool turn's action in S: its calls (``name arguments``) joined by "; "."""
    return "; ".join(actions)


# --- default task prefix ----------------------------------------------------------------------

ARC_INSTRUCTIONS = (
    "Tool observations are stored verbatim under ids like §00042-0591234567. Older turns are summarized;"
    " a long observation appears as a one-line citation stub. To read a stored observation exactly,"
    " use these actions (they never re-run a tool):\n"
    "_recall §id  (first chunk)   _recall-next §id  (next chunk)   _recall-start §id  (restart)\n"
    "_recall_meta §id  (the stub only)\n"
    "catalog-first / catalog-next / catalog-page N  (browse the list of every stored observation)\n"
    "Recalled chunks appear in the recall buffer section."
)

DEFAULT_SYSTEM = (
    "You are an agent that solves a task with tools. Each reply is a thought and one action:\n"
    "Thought: <your reasoning>\nAction: <one action>\n" + ARC_INSTRUCTIONS
)
