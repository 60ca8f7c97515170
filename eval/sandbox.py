"""The task environment: a deterministic virtual file system with a handful of read-only commands.

There is no real shell. An action is one line of text; the first word picks the command:

    ls                      list the files with their sizes and page counts
    cat FILE                the whole file
    head FILE [N]           the first N lines (default 10); `head -n N FILE` works too
    grep [-i] [-E] PATTERN FILE
                            matching lines as `LINE:TEXT`. PATTERN is a fixed string (like
                            `grep -F`) unless `-E` is given; then it is a regular expression run
                            by the `regex` package with a time limit, so a pathological pattern
                            is refused instead of hanging the run (return code 2).
    read FILE [PAGE]        page PAGE (1-based, default 1) of `page_chars` characters, cut at a
                            line boundary when one exists in the page; the header says "page k/n"
    submit ANSWER...        ends the task with ANSWER (everything after `submit `, verbatim)

Command words are case-insensitive (`CAT a.txt` works); file names are not.
Return codes follow the shell's habits: 0 success, 1 missing file / page out of range / no grep
match, 2 usage error, 127 unknown command. The same action on the same files always returns the
same observation, and nothing ever writes to the files.
"""

from __future__ import annotations

import posixpath
import shlex
from types import MappingProxyType
from typing import Mapping

from arc_eval.errors import InvalidInput
from arc_eval.types import Observation

DEFAULT_PAGE_CHARS = 4000
DEFAULT_HEAD_LINES = 10
GREP_MAX_MATCHES = 200
GREP_REGEX_TIMEOUT_S = 1.0

COMMAND_HELP = "ls | cat FILE | head FILE N | grep PATTERN FILE | read FILE PAGE | submit ANSWER"


def paginate(text: str, page_chars: int) -> list[tuple[int, int]]:
    """Split `text` into pages of at most `page_chars` characters: a list of (start, end) spans.

    A page ends right after the last newline inside its window when there is one (so lines are
    not cut); a single line longer than a page is cut hard. An empty text has one empty page.
    """
    if page_chars < 1:
        raise InvalidInput(f"page_chars must be at least 1, got {page_chars}")
    spans: list[tuple[int, int]] = []
    start = 0
    length = len(text)
    while start < length:
        end = min(start + page_chars, length)
        if end < length:
            newline = text.rfind("\n", start, end)
            if newline >= start:
                end = newline + 1
        spans.append((start, end))
        start = end
    return spans or [(0, 0)]


def _normalize_path(name: str) -> str:
    """`./a.txt`, `/a.txt` and `a.txt` name the same file of the flat virtual file system."""
    normalized = posixpath.normpath(name)
    return normalized.lstrip("/")


def _split_action(action: str) -> list[str] | None:
    """Shell-like word splitting (quotes allowed); None when the quoting is unbalanced."""
    try:
        return shlex.split(action, posix=True)
    except ValueError:
        return None


def _first_word(action: str) -> tuple[str, str]:
    """The command word (lowercased: commands are case-insensitive) and the rest of the action."""
    parts = action.split(None, 1)
    if not parts:
        return "", ""
    return parts[0].lower(), parts[1] if len(parts) == 2 else ""


def action_signature(action: str) -> str:
    """The normalized form of an action, used to detect a tool call that is run again.

    Same command and same arguments give the same signature, however they were spaced or
    quoted (`cat  ./a.txt` and `cat a.txt` match); file arguments are normalized like the
    sandbox resolves them. `submit` keeps its answer text, whitespace-collapsed.
    """
    stripped = action.strip()
    if not stripped:
        return ""
    first, rest = _first_word(stripped)
    if first == "submit":
        return "submit " + " ".join(rest.split())
    words = _split_action(stripped)
    if words is None:
        return " ".join(stripped.split())
    words[0] = command = words[0].lower()
    if command in ("cat", "read") and len(words) >= 2:
        words[1] = _normalize_path(words[1])
    elif command == "head" and len(words) >= 2:
        if words[1] == "-n" and len(words) >= 4:
            words = [command, _normalize_path(words[3]), words[2]]
        else:
            words[1] = _normalize_path(words[1])
    elif command == "grep" and len(words) >= 3:
        words[-1] = _normalize_path(words[-1])
    return shlex.join(words)


class VirtualSandbox:
    """A read-only virtual file system answering `ls`, `cat`, `head`, `grep`, `read`, `submit`.

    Implements `arc_eval.types.Sandbox`. Files are copied into an immutable mapping at construction,
    so the caller's dict can change afterwards without affecting the task.
    """

    def __init__(self, files: Mapping[str, str], *, page_chars: int = DEFAULT_PAGE_CHARS) -> None:
        if page_chars < 1:
            raise InvalidInput(f"page_chars must be at least 1, got {page_chars}")
        self._files: Mapping[str, str] = MappingProxyType(
            {_normalize_path(name): text for name, text in files.items()}
        )
        self.page_chars = page_chars
        self._pages: dict[str, list[tuple[int, int]]] = {}

    @property
    def files(self) -> Mapping[str, str]:
        return self._files

    def pages(self, name: str) -> list[tuple[int, int]]:
        """Page spans of file `name` (cached; the files never change)."""
        spans = self._pages.get(name)
        if spans is None:
            spans = paginate(self._files[name], self.page_chars)
            self._pages[name] = spans
        return spans

    def run(self, action: str) -> Observation:
        stripped = action.strip()
        if not stripped:
            return Observation(f"empty action. Commands: {COMMAND_HELP}", 2)
        first, rest = _first_word(stripped)
        if first == "submit":
            return self._submit(rest)
        words = _split_action(stripped)
        if words is None:
            return Observation(f"{first}: unbalanced quotes in {stripped!r}", 2)
        command, args = words[0].lower(), words[1:]
        handler = {
            "ls": self._ls,
            "cat": self._cat,
            "head": self._head,
            "grep": self._grep,
            "read": self._read,
        }.get(command)
        if handler is None:
            return Observation(
                f"{command}: command not found. This environment has no shell; "
                f"the commands are: {COMMAND_HELP}",
                127,
            )
        return handler(args)

    # -- commands -------------------------------------------------------------------------

    def _lookup(self, command: str, name: str) -> tuple[str, str] | Observation:
        path = _normalize_path(name)
        text = self._files.get(path)
        if text is None:
            known = ", ".join(sorted(self._files)) or "(none)"
            return Observation(f"{command}: {name}: No such file. Files: {known}", 1)
        return path, text

    def _ls(self, args: list[str]) -> Observation:
        if args:
            return Observation("usage: ls (no arguments; there are no directories)", 2)
        lines = []
        for name in sorted(self._files):
            text = self._files[name]
            pages = len(self.pages(name))
            lines.append(f"{name}\t{len(text)} chars\t{pages} page{'s' if pages != 1 else ''}")
        return Observation("\n".join(lines), 0)

    def _cat(self, args: list[str]) -> Observation:
        if len(args) != 1:
            return Observation("usage: cat FILE", 2)
        found = self._lookup("cat", args[0])
        if isinstance(found, Observation):
            return found
        return Observation(found[1], 0)

    def _head(self, args: list[str]) -> Observation:
        if len(args) >= 2 and args[0] == "-n":
            if len(args) != 3:
                return Observation("usage: head FILE N  (or head -n N FILE)", 2)
            count_text, name = args[1], args[2]
        elif len(args) in (1, 2):
            name = args[0]
            count_text = args[1] if len(args) == 2 else str(DEFAULT_HEAD_LINES)
        else:
            return Observation("usage: head FILE N  (or head -n N FILE)", 2)
        if not count_text.isdigit():
            return Observation(f"head: invalid number of lines: {count_text!r}", 2)
        found = self._lookup("head", name)
        if isinstance(found, Observation):
            return found
        lines = found[1].splitlines(keepends=True)[: int(count_text)]
        return Observation("".join(lines), 0)

    def _grep(self, args: list[str]) -> Observation:
        ignore_case = False
        use_regex = False
        args = list(args)
        # Options come before PATTERN FILE; `-n` is accepted and ignored (numbers are always on).
        while len(args) > 2 and args[0].startswith("-") and len(args[0]) > 1:
            letters = args.pop(0)[1:]
            if any(letter not in "iEFn" for letter in letters):
                return Observation(f"grep: unknown option -{letters} (known: -i, -E, -F, -n)", 2)
            ignore_case = ignore_case or "i" in letters
            if "E" in letters:
                use_regex = True
            if "F" in letters:
                use_regex = False
        if len(args) != 2:
            return Observation("usage: grep [-i] [-E] PATTERN FILE", 2)
        pattern, name = args
        found = self._lookup("grep", name)
        if isinstance(found, Observation):
            return found
        lines = found[1].splitlines()
        if use_regex:
            matched = self._grep_regex(pattern, lines, ignore_case)
            if isinstance(matched, Observation):
                return matched
        else:
            needle = pattern.lower() if ignore_case else pattern
            matched = [
                index
                for index, line in enumerate(lines)
                if needle in (line.lower() if ignore_case else line)
            ]
        if not matched:
            return Observation("", 1)
        shown = [f"{index + 1}:{lines[index]}" for index in matched[:GREP_MAX_MATCHES]]
        if len(matched) > GREP_MAX_MATCHES:
            shown.append(f"... {len(matched) - GREP_MAX_MATCHES} more matching lines not shown")
        return Observation("\n".join(shown), 0)

    @staticmethod
    def _grep_regex(pattern: str, lines: list[str], ignore_case: bool) -> list[int] | Observation:
        # installed with tiktoken; its matcher accepts a timeout
        import regex  # type: ignore[import-untyped, unused-ignore]

        try:
            compiled = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
        except regex.error as bad:
            return Observation(f"grep: invalid regular expression {pattern!r}: {bad}", 2)
        matched: list[int] = []
        try:
            for index, line in enumerate(lines):
                if compiled.search(line, timeout=GREP_REGEX_TIMEOUT_S) is not None:
                    matched.append(index)
        except TimeoutError:
            return Observation(
                f"grep: the regular expression {pattern!r} is too expensive; "
                "use a fixed string (grep PATTERN FILE) instead",
                2,
            )
        return matched

    def _read(self, args: list[str]) -> Observation:
        if len(args) not in (1, 2):
            return Observation("usage: read FILE PAGE  (pages start at 1)", 2)
        found = self._lookup("read", args[0])
        if isinstance(found, Observation):
            return found
        path, text = found
        page_text = args[1] if len(args) == 2 else "1"
        if not page_text.isdigit():
            return Observation(f"read: invalid page number {page_text!r} (pages start at 1)", 2)
        spans = self.pages(path)
        page = int(page_text)
        if not 1 <= page <= len(spans):
            return Observation(
                f"read: {path} has pages 1 to {len(spans)}; page {page} does not exist", 1
            )
        start, end = spans[page - 1]
        header = f"[{path} page {page}/{len(spans)}, characters {start + 1}-{end} of {len(text)}]\n"
        if page < len(spans):
            footer = f"\n[end of page {page}/{len(spans)}; next: read {path} {page + 1}]"
        else:
            footer = f"\n[end of page {page}/{len(spans)}; this is the last page of {path}]"
        return Observation(header + text[start:end] + footer, 0)

    @staticmethod
    def _submit(answer: str) -> Observation:
        answer = answer.strip()
        if not answer:
            return Observation("usage: submit ANSWER (the answer may not be empty)", 2)
        return Observation(f"submitted: {answer}", 0, submitted=answer)
