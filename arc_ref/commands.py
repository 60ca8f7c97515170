"""Recognising recall and catalog commands in the agent's own action (never in an observation).

An action is a *command action* when its first non-empty line starts with a command word; each of its
lines is then one command (or is reported as ignored). Any other action is a normal action for the
environment. Observations, thoughts and stored text are never parsed: a command or an id inside them
is inert.
"""

from __future__ import annotations

from attrs import frozen

from arc_ref.text import ASCII_WHITESPACE, ascii_words

RECALL_WORDS = ("_recall", "_recall-start", "_recall-next", "_recall_meta")
CATALOG_WORDS = ("catalog-first", "catalog-next", "catalog-page")
COMMAND_WORDS = RECALL_WORDS + CATALOG_WORDS

@frozen
class Command:
    """One parsed command line: the command word and its first argument (None when absent)."""

    word: str
    argument: str | None


@frozen
class IgnoredLine:
    """A non-empty line of a command action that is not a command."""

    text: str


def is_command_line(line: str) -> bool:
    words = ascii_words(line)
    return bool(words) and words[0] in COMMAND_WORDS


def parse_action(action: str) -> tuple[Command | IgnoredLine, ...] | None:
    """The commands of a command action, in order; None for a normal action.

    Lines are separated by "\n"; a line is stripped of ASCII whitespace and split into words on runs of it.
    """
    lines = [line.strip(ASCII_WHITESPACE) for line in action.split("\n")]
    lines = [line for line in lines if line]
    if not lines or not is_command_line(lines[0]):
        return None
    parsed: list[Command | IgnoredLine] = []
    for line in lines:
        parts = ascii_words(line)
        if parts[0] in COMMAND_WORDS:
            parsed.append(Command(parts[0], parts[1] if len(parts) > 1 else None))
        else:
            parsed.append(IgnoredLine(line))
    return tuple(parsed)
