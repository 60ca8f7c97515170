"""The shown form S(O) of a stored observation: control strings made inert, reversibly (spec/rendering.md 7.1).

A server renders the chat template to one string and tokenizes it whole, so the text of an added token
(``<|im_start|>``, ``</tool_response>``, ...) inside a tool's output would become that control token and let the
output leave its message. The view therefore shows S(O), never O: every WORD JOINER (U+2060) of O is written
twice, and one U+2060 is written after the first character of every occurrence of a control string. S(O) holds
no control string, S(O) = O when O holds neither, and S^-1 (a doubled U+2060 is one, a lone one is dropped)
gives O back byte for byte: the decoder D of Theorem claim 5 applies it to the concatenated chunks. The store
(A2) keeps O itself.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Iterable

from arc_ref.render import RECALL_FRAME_OPENINGS

if TYPE_CHECKING:
    from arc_ref.tokenizers import Tokenizer

WORD_JOINER = "\u2060"

_DOUBLED_OR_LONE = re.compile(WORD_JOINER + WORD_JOINER + "?")


def _undo(match: re.Match[str]) -> str:
    return WORD_JOINER if len(match.group()) == 2 else ""


def unshow(shown: str) -> str:
    """S^-1: a doubled U+2060 is one U+2060, a lone one (inserted by S) is dropped. O(len(shown))."""
    if WORD_JOINER not in shown:
        return shown
    return _DOUBLED_OR_LONE.sub(_undo, shown)


def _starts_pattern(texts: Iterable[str]) -> str:
    """A regular expression matching where any of ``texts`` starts, factored by common prefix (a trie), so that
    each position costs the depth of the trie, not the number of texts. A text that another extends is
    enough on its own: the match only says that some control string starts here."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for character in text:
            node = node.setdefault(character, {})
        node[""] = {}

    def alternatives(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        branches = [re.escape(character) + alternatives(child) for character, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return alternatives(trie)


def _mark(match: re.Match[str]) -> str:
    character = match.group()
    return WORD_JOINER + WORD_JOINER if character == WORD_JOINER else character + WORD_JOINER


class ShownForm:
    """S for one set of control strings: those of at least two characters and without U+2060.

    A control string of one character cannot be broken by an inserted character, and one holding U+2060 would
    make S^-1 ambiguous; neither occurs in the shipped tokenizers and chat formats (both are left out here).
    """

    def __init__(self, control_strings: Iterable[str]) -> None:
        kept = sorted({text for text in control_strings if len(text) >= 2 and WORD_JOINER not in text})
        self.control_strings: tuple[str, ...] = tuple(kept)
        # what every text to be marked holds, found by short searches before the full ones (`_may_match`): a U+2060,
        # or for each control string a rare character of it (its first non-ASCII one, as the § of ARC's frame
        # openings, else its first) and then, where that occurs, a piece of it (itself, else its first two
        # characters): a bracket, common in JSON and code, sends no text to the full searches by itself
        gates: dict[str, set[str]] = {WORD_JOINER: {WORD_JOINER}}
        for text in kept:
            rare = next((character for character in text if not character.isascii()), None)
            gates.setdefault(rare or text[0], set()).add(text if rare else text[:2])
        self._openings: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
            (gate, tuple(sorted(pieces))) for gate, pieces in sorted(gates.items()))
        if kept:
            starts = _starts_pattern(kept)
            # a U+2060, or the first character of every occurrence (overlapping ones too: the lookahead
            # consumes nothing, the match one character)
            self._marks: re.Pattern[str] = re.compile(f"{WORD_JOINER}|(?={starts}).", re.DOTALL)
        else:
            self._marks = re.compile(WORD_JOINER)

    def show(self, text: str) -> str:
        """S(text): short searches to find whether anything is to be written, one more pass only when it is.

        The scan first looks for a few short texts every control string holds (searches for one or two characters,
        about twenty times faster than a pattern on a long observation); only a text holding one is searched for
        the control strings themselves, and only one holding one is written again."""
        if not self._may_match(text) or not self._holds(text):
            return text  # the same object: nothing is copied for an ordinary observation
        return self._marks.sub(_mark, text)

    def _holds(self, text: str) -> bool:
        """Whether ``text`` holds a U+2060 or a control string: each looked for whole (a string search, several times
        faster than one pattern of them all on code, whose brackets and angles open many of its branches)."""
        return WORD_JOINER in text or any(control in text for control in self.control_strings)

    def _may_match(self, text: str) -> bool:
        """False when ``text`` holds neither a U+2060 nor, for any control string, its rare character and the piece
        of it looked for there (then it holds none: `_holds`)."""
        for gate, pieces in self._openings:
            if gate in text:
                for piece in pieces:
                    if piece in text:
                        return True
        return False

    def show_arguments(self, arguments: str) -> str:
        """A tool call's arguments as an assistant message shows them (spec/rendering.md 7.1): S on every string,
        key or value, of the JSON value the server reads from them and its template prints again (``tojson``),
        the value then written as that filter writes it. The text itself when no string changes, or when the
        server cannot read it as JSON (it prints ``{}``). A JSON escape (``\\u003c``) is read as the server reads
        it, so a control string spelled with escapes is found too."""
        if "\\" not in arguments and (not self._may_match(arguments) or not self._holds(arguments)):
            return arguments  # no escape: every decoded string is a piece of this text, which holds nothing to mark
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
        changed = [False]

        def shown(item: Any) -> Any:
            if isinstance(item, str):
                text = self.show(item)
                changed[0] = changed[0] or text is not item
                return text
            if isinstance(item, list):
                return [shown(element) for element in item]
            if isinstance(item, dict):
                return {shown(key): shown(element) for key, element in item.items()}
            return item

        result = shown(value)
        return json.dumps(result, ensure_ascii=False) if changed[0] else arguments

    def holds_control_string(self, text: str) -> bool:
        return any(control in text for control in self.control_strings)


def control_strings(chat: Any, tokenizer: Tokenizer) -> tuple[str, ...]:
    """The control strings of a setup: the chat format's own markers (ChatML's ``<|im_start|>``, ``<|im_end|>``),
    every added token of the tokenizer (``tokenizer.json``'s ``added_tokens``, special or not; a tiktoken
    encoding's special tokens; the byte tokenizer has none), and the openings of ARC's own recall frames
    (``[recall §``, ``[end §``: a tool output cannot forge a recall response in U)."""
    found: set[str] = set(RECALL_FRAME_OPENINGS)
    for marker in (getattr(chat, "message_start", None), getattr(chat, "message_end", None)):
        if isinstance(marker, str) and marker.strip():
            found.add(marker.strip())
    found.update(tokenizer.control_tokens())
    return tuple(sorted(found))
