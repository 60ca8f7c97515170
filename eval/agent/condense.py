"""How the scripted agent answers a condensing request (``llm_summary``'s summary, ``structured_state``'s state).

Rules: ``eval/METHODS.md`` ("The scripted agent").
"""

from __future__ import annotations

EXCERPT_CHARS = 160


def _excerpt(line: str) -> str:
    line = line.strip()
    return line if len(line) <= EXCERPT_CHARS else line[: EXCERPT_CHARS - 3] + "..."


def first_last_lines(text: str) -> tuple[str, str, int]:
    """First and last non-empty lines of an observation, and its number of lines."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "", "", 0
    return _excerpt(lines[0]), _excerpt(lines[-1]), len(lines)
