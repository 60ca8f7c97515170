"""Every string the model sees, in one place (spec: `spec/rendering.md`).

Each component of the active view (A4) is one chat message, or several for the recent suffix H:
F = system + goal, S = summary, G = catalog page, U = recall buffer, H = recent entries.
Widths: counts and token numbers are printed in decimal without padding; the budget checks of
`arc_ref.config` use the widest values (``WIDEST_NUMBER`` and ``WIDEST_RETURNCODE``).
"""

from __future__ import annotations

from typing import Iterable

from arc_ref.text import escape_line

WIDEST_NUMBER = 9_999_999_999  # counts (chars, tokens, chunks, pages, turns) are below 10**10
WIDEST_RETURNCODE = -(2**31)  # return codes are 32-bit signed integers
RETURNCODE_RANGE = range(-(2**31), 2**31)

USER = "user"
ASSISTANT = "assistant"
SYSTEM = "system"
TOOL = "tool"

# --- A3: citation stub and catalog page -------------------------------------------------------


def stub(
    obs_id: str, returncode: int, n_chars: int, n_tokens: int, signature: str, head: str, tail: str
) -> str:
    """z_j: one line holding the id, metadata, previews and the recall hint (``signature`` already shown)."""
    return (
        f"{obs_id} rc={returncode} {n_chars}ch {n_tokens}tok $ {signature}"
        f" | head: {escape_line(head)} | tail: {escape_line(tail)} | _recall {obs_id}"
    )


def catalog_header(page: int, pages: int, first: int, last: int, total: int) -> str:
    return (
        f"[ARC catalog page {page}/{pages}: observations {first}-{last} of {total};"
        " catalog-first, catalog-next, catalog-page N]"
    )


def catalog_content(header: str, stubs: Iterable[str]) -> str:
    return header + "".join("\n" + line for line in stubs)


# --- S: deterministic summary -----------------------------------------------------------------

SUMMARY_HEADER = "[ARC summary of earlier turns; _recall §id brings back any observation]"


def summary_omitted(count: int) -> str:
    return f"({count} earlier items omitted; every observation stays in the catalog)"


def summary_content(omitted: int, items: Iterable[str]) -> str:
    head = SUMMARY_HEADER + ("\n" + summary_omitted(omitted) if omitted else "")
    return head + "".join("\n" + item for item in items)


def thought_item(turn: int, thought: str, action: str) -> str:
    return f"turn {turn}: thought: {thought} | action: {action}"


def note_item(turn: int, note: str) -> str:
    return f"turn {turn}: result: {note}"


def inline_item(obs_id: str, returncode: int, signature: str, content: str) -> str:
    return f"{obs_id} (rc={returncode}) of `{signature}`:\n{content}"


# --- U: recall buffer -------------------------------------------------------------------------

RECALL_HEADER = "[ARC recall buffer]"


def recall_open(obs_id: str, chunk: int, chunks: int) -> str:
    return f"[recall {obs_id} chunk {chunk}/{chunks}]"


def recall_close(obs_id: str, chunk: int, chunks: int) -> str:
    return f"[end {obs_id} chunk {chunk}/{chunks}]"


def recall_response(obs_id: str, chunk: int, chunks: int, payload: str) -> str:
    """A5 response: wrapper (opening and closing line) around the exact payload."""
    return recall_body(obs_id, chunk, chunks, payload) + recall_close(obs_id, chunk, chunks)


def recall_body(obs_id: str, chunk: int, chunks: int, payload: str) -> str:
    """The response up to its closing line: opening line, payload, newline."""
    return recall_open(obs_id, chunk, chunks) + "\n" + payload + "\n"


def recall_content(responses: Iterable[str]) -> str:
    return RECALL_HEADER + "".join("\n" + response for response in responses)


# --- H: recent entries ------------------------------------------------------------------------


def agent_message(thought: str, action: str) -> str:
    return f"Thought: {thought}\nAction: {action}"


def observation_message(obs_id: str, returncode: int, signature: str, content: str) -> str:
    return observation_head(obs_id, returncode, signature) + content


def observation_head(obs_id: str, returncode: int, signature: str) -> str:
    """The observation message before its verbatim content."""
    return f"Observation {obs_id} (rc={returncode}) of `{signature}`:\n"


def observation_stub_message(obs_id: str, returncode: int, n_tokens: int, stub_line: str) -> str:
    return (
        f"Observation {obs_id} (rc={returncode}) is too large for the recent window"
        f" ({n_tokens} tokens); stub:\n{stub_line}"
    )


COMMAND_RESULT_HEADER = "Result of your command:"


def command_message(notes: Iterable[str]) -> str:
    return COMMAND_RESULT_HEADER + "".join("\n" + note for note in notes)


# --- notes answering agent commands (H) -------------------------------------------------------


def note_chunk_in_buffer(word: str, obs_id: str, chunk: int, chunks: int) -> str:
    return f"{word} {obs_id}: chunk {chunk}/{chunks} is in the recall buffer"


def note_empty(word: str, obs_id: str) -> str:
    return f"{word} {obs_id}: the observation is empty (0 chunks)"


def note_exhausted(word: str, obs_id: str, chunks: int) -> str:
    return f"{word} {obs_id}: all {chunks} chunks were already returned; _recall-start {obs_id} reads it again"


def note_meta(word: str, stub_line: str) -> str:
    return f"{word}: {stub_line}"


def note_unknown_id(word: str, token: str, suggestion: str | None, first: str | None, last: str | None) -> str:
    shown = escape_line(token)
    if suggestion is not None:
        return f"{word} {shown}: no stored observation has this id; did you mean {suggestion}?"
    if first is None or last is None:
        return f"{word} {shown}: no stored observation has this id; nothing is stored yet"
    return (
        f"{word} {shown}: no stored observation has this id; ids run from {first} to {last};"
        " catalog-first lists them"
    )


def note_missing_argument(word: str, usage: str) -> str:
    return f"{word}: missing argument (usage: {usage})"


def note_recall_limit(word: str, token: str, limit: int) -> str:
    return f"{word} {escape_line(token)}: not run, at most {limit} recalls per step"


def note_catalog_page(word: str, page: int, pages: int) -> str:
    return f"{word}: catalog page {page}/{pages} is shown in the catalog section"


def note_catalog_last(word: str, pages: int) -> str:
    return f"{word}: already at the last page {pages}/{pages}"


def note_catalog_empty(word: str) -> str:
    return f"{word}: the catalog is empty"


def note_catalog_no_page(word: str, argument: str, pages: int) -> str:
    return f"{word} {escape_line(argument)}: no such page (pages 1-{pages})"


def note_ignored(line: str) -> str:
    return f"ignored (not a command): {escape_line(line)}"


def note_unknown_tool(name: str) -> str:
    return f"{escape_line(name)}: no tool has this name; not run"


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
