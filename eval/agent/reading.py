"""What the scripted agent reads: the plan in the goal and what the rest of the prompt shows.

``Plan`` reads the goal (its numbered steps or backticked commands, the answer format, the banner label,
the question and choices of a multiple-choice task). ``View`` reads every message after the goal with the
owners' parsers (``arc_ref.parse`` for ARC's components, the protocol's reply parser for agent turns) and
a generic rule for backticked actions; it records which plan actions the prompt shows as executed, the
citation stubs, the recall responses and notes, and the catalog pages. Rules: ``eval/METHODS.md``.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from attrs import frozen

from arc_ref.parse import (
    BareItem,
    InlineItem,
    Note,
    ObservationMessage,
    Stub,
    Summary,
    ThoughtItem,
    find_stubs,
    RecallResponse,
    parse_catalog_header,
    parse_recall_buffer,
    parse_recall_marker,
    parse_summary,
    parse_thought_item,
    parse_view_message,
)
from arc_ref.text import ID_PATTERN
from arc_eval.protocol import TASK_VERBS, clean_action, command_word, parse_reply
from arc_eval.types import Message

BACKTICK_RE = re.compile(r"`([^`\n]+)`")
NUMBERED_STEP_RE = re.compile(r"^\s*\d+[.)]\s+(.+)$", re.MULTILINE)
PAGE_RANGE_RE = re.compile(r"PAGE from 1 to (\d+)|(\d+) pages?\b", re.IGNORECASE)
NEXT_HINT_RE = re.compile(r"next: (read \S+ \d+)\]")
KEY_TEMPLATE_RE = re.compile(r"submit\s+([A-Z][A-Z0-9_]*)=<value>")
BANNER_LABEL_RE = re.compile(r"label(?:l)?ed\s+([A-Z][A-Z0-9 ]*[A-Z0-9])")
CHOICE_RE = re.compile(r"^\(([A-D])\)\s*(.+)$", re.MULTILINE)
QUESTION_RE = re.compile(r"^Question:\s*(.+)$", re.MULTILINE)
WORD_RE = re.compile(r"[a-z0-9][a-z0-9_.]*[a-z0-9]|[a-z0-9]")
PLACEHOLDER_RE = re.compile(r"^[A-Z][A-Z_]+$")

STOP_WORDS = frozenset(
    "the and for are but not you all any can had her was one our out has have his how its may new now "
    "old see two who did get him let put say she too use that with this from they will would there their "
    "what which when where been were into than then them these those such only also very just some more "
    "most other each both same about after before while because does done should could being over under "
    "between through during without within upon whose your yours".split()
)
def words(text: str) -> set[str]:
    """Content words: lowercase runs of letters/digits (dots and underscores inside), 3+ chars, no stop words."""
    return {word for word in WORD_RE.findall(text.lower()) if len(word) >= 3 and word not in STOP_WORDS}


def _normal(action: str) -> str:
    return " ".join(action.split())


class Plan:
    """What the goal asks for, in order, and the answer format."""

    def __init__(self, goal: str) -> None:
        self.goal = goal
        self.actions: list[str] = []
        self.answer_instruction = ""
        self.follow_hints_for: str | None = None  # FILE of a read template with an unknown page count
        self._read_numbered(goal)
        if not self.actions:
            self._read_backticks(goal)
        key = KEY_TEMPLATE_RE.search(goal)
        self.key = key.group(1) if key else None
        label = BANNER_LABEL_RE.search(goal)
        self.banner_label = label.group(1).strip() if label else None
        self.choices = {letter: text.strip() for letter, text in CHOICE_RE.findall(goal)}
        question = QUESTION_RE.search(goal)
        self.question = question.group(1).strip() if question else ""

    @property
    def need(self) -> str:
        """What the task asks the agent to produce, in the task's words: the question and its choices for a
        multiple-choice task, else the answer instruction (its step number dropped). The fair agent's one
        query: it ranks citations with it and states it in its recovery step."""
        if self.choices:
            return " ".join([self.question, *(f"({letter}) {text}" for letter, text in sorted(self.choices.items()))])
        numbered = NUMBERED_STEP_RE.match(self.answer_instruction)
        return " ".join((numbered.group(1) if numbered else self.answer_instruction).split())

    def _read_numbered(self, goal: str) -> None:
        for match in NUMBERED_STEP_RE.finditer(goal):
            text = match.group(1).split(" -- ")[0]
            action = clean_action(text)
            word = command_word(action)
            if word == "submit":
                self.answer_instruction = match.group(0)
                break
            if word in TASK_VERBS and not any(PLACEHOLDER_RE.match(part) for part in action.split()[1:]):
                self.actions.append(_normal(action))

    def _read_backticks(self, goal: str) -> None:
        for span in BACKTICK_RE.findall(goal):
            action = clean_action(span)
            parts = action.split()
            word = command_word(action)
            if word == "submit":
                continue
            if word not in TASK_VERBS:
                continue
            placeholders = [part for part in parts[1:] if PLACEHOLDER_RE.match(part)]
            if word == "read" and len(parts) == 3 and placeholders == [parts[2]]:
                pages = PAGE_RANGE_RE.search(goal)
                count = next((int(group) for group in pages.groups() if group), 0) if pages else 0
                if count:
                    self.actions.extend(f"read {parts[1]} {page}" for page in range(1, count + 1))
                else:
                    self.actions.append(f"read {parts[1]} 1")
                    self.follow_hints_for = parts[1]
            elif not placeholders:
                self.actions.append(_normal(action))
        for line in goal.split("\n"):
            if "submit" in line.lower():
                self.answer_instruction = line
                break


@frozen
class MessageFacts:
    """What one message shows the policy (computed once per distinct message: prompts repeat)."""

    executed: frozenset[str]
    stubs: tuple[tuple[str, str], ...]  # (id, stub line)
    recall_opens: tuple[tuple[str, int, int], ...]
    exhausted: frozenset[str]
    catalog: tuple[tuple[int, int], ...]
    next_hints: tuple[str, ...]
    last_action: str
    # (id, description) of every cited observation the message names: a stub's signature and previews,
    # or, for a bare id in S, the action of the summarized turn just before it (S lists a turn, then its result)
    citations: tuple[tuple[str, str], ...] = ()
    shown_in_full: frozenset[str] = frozenset()  # ids whose whole content the message shows


@frozen
class _ArcFacts:
    executed: frozenset[str]
    stubs: tuple[Stub, ...]
    opens: tuple[tuple[str, int, int], ...]
    exhausted: frozenset[str]
    catalog: tuple[tuple[int, int], ...]
    citations: tuple[tuple[str, str], ...]
    shown_in_full: frozenset[str]


def stub_description(stub: Stub) -> str:
    """What a stub says about its observation: the action that produced it and the previews."""
    return f"{stub.signature} {stub.head} {stub.tail}"


def _arc_component_facts(role: str, content: str) -> _ArcFacts:
    """What an ARC view message shows, read with the core's own parsers (``arc_ref.parse``): actions shown
    as executed, stubs, recall openings, exhausted ids, catalog pages, citations and their descriptions."""
    executed: set[str] = set()
    stubs = find_stubs(content)
    citations = [(stub.obs_id, stub_description(stub)) for stub in stubs]
    shown: set[str] = set()
    opens: list[tuple[str, int, int]] = []
    exhausted: set[str] = set()
    catalog: list[tuple[int, int]] = []
    component = parse_view_message(role, content)
    if isinstance(component, Summary):
        previous_action = ""
        for item in component.items:
            if isinstance(item, ThoughtItem):
                executed.add(_normal(clean_action(item.action)))
                previous_action = item.action
                continue
            if isinstance(item, InlineItem):
                executed.add(_normal(item.signature))
                shown.add(item.obs_id)
            elif isinstance(item, BareItem):
                citations.append((item.obs_id, previous_action))
            previous_action = ""
    elif isinstance(component, ObservationMessage):
        executed.add(_normal(component.signature))
        shown.add(component.obs_id)
    elif isinstance(component, tuple):
        for part in component:
            if isinstance(part, Note) and part.kind == "exhausted":
                exhausted.add(part.text("obs_id"))
    for line in content.split("\n"):
        marker = parse_recall_marker(line)
        if marker is not None and marker.opening:
            opens.append((marker.obs_id, marker.chunk, marker.chunks))
        header = parse_catalog_header(line)
        if header is not None:
            catalog.append((header.page, header.pages))
    return _ArcFacts(frozenset(executed), stubs, tuple(opens), frozenset(exhausted), tuple(catalog),
                     tuple(citations), frozenset(shown))


@functools.lru_cache(maxsize=16384)
def message_facts(role: str, content: str) -> MessageFacts:
    executed: set[str] = set()
    last_action = ""
    if role == "assistant":
        _thought, action = parse_reply(content)
        last_action = _normal(action)
        if action:
            executed.add(last_action)
    for found in BACKTICK_RE.findall(content):
        executed.add(_normal(found))
    arc = _arc_component_facts(role, content)
    executed.update(arc.executed)
    executed.update(_normal(stub.signature) for stub in arc.stubs)
    return MessageFacts(
        executed=frozenset(executed),
        stubs=tuple((stub.obs_id, stub.line) for stub in arc.stubs),
        recall_opens=arc.opens,
        exhausted=arc.exhausted,
        catalog=arc.catalog,
        next_hints=tuple(_normal(hint) for hint in NEXT_HINT_RE.findall(content)),
        last_action=last_action,
        citations=arc.citations,
        shown_in_full=arc.shown_in_full,
    )


def _whole_lines(responses: Sequence[RecallResponse]) -> str:
    """Each observation of a recall buffer rebuilt from its runs of consecutive chunks, whole lines only."""
    chunks: dict[str, dict[int, RecallResponse]] = {}
    for response in responses:
        chunks.setdefault(response.obs_id, {})[response.chunk] = response
    texts: list[str] = []
    for by_number in chunks.values():
        numbers = sorted(by_number)
        start = 0
        while start < len(numbers):
            end = start
            while end + 1 < len(numbers) and numbers[end + 1] == numbers[end] + 1:
                end += 1
            first, last = by_number[numbers[start]], by_number[numbers[end]]
            lines = "".join(by_number[number].payload for number in numbers[start : end + 1]).split("\n")
            if first.chunk > 1:
                lines = lines[1:]  # may start inside a line
            if last.chunk < last.chunks:
                lines = lines[:-1]  # may end inside a line
            texts.append("\n".join(lines))
            start = end + 1
    return "\n".join(texts)


@functools.lru_cache(maxsize=256)
def plan_of(goal: str) -> Plan:
    return Plan(goal)


class View:
    """What the prompt shows after the goal (facts cached per message)."""

    def __init__(self, history: Sequence[Message]) -> None:
        self.messages = list(history)
        self.facts = [message_facts(message.role, message.content) for message in history]
        self.executed: set[str] = set()
        for facts in self.facts:
            self.executed.update(facts.executed)
        self.last_action = next(
            (facts.last_action for message, facts in zip(reversed(self.messages), reversed(self.facts), strict=True)
             if message.role == "assistant"),
            "",
        )
        self._text: str | None = None
        self._evidence: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "\n".join(message.content for message in self.messages)
        return self._text

    @property
    def evidence(self) -> str:
        """What the prompt shows that the agent did not write itself: every message but its own turns, ARC's
        summary without its summarized thoughts, and each recall buffer read as its observations (consecutive
        chunks joined back, exact non-overlapping slices: Lemma 4; whole lines only, so a line cut at a chunk
        boundary is read once its next chunk is shown, and not before)."""
        if self._evidence is None:
            parts: list[str] = []
            for message in self.messages:
                if message.role == "assistant":
                    continue
                responses = parse_recall_buffer(message.content)
                if responses is not None:
                    parts.append(_whole_lines(responses))
                elif parse_summary(message.content) is not None:
                    parts.append("\n".join(line for line in message.content.split("\n")
                                           if parse_thought_item(line) is None))
                else:
                    parts.append(message.content)
            self._evidence = "\n".join(parts)
        return self._evidence

    def recall_opens(self) -> list[tuple[str, int, int]]:
        return [opened for facts in self.facts for opened in facts.recall_opens]

    def recall_chunks(self) -> dict[str, tuple[set[int], int]]:
        """Per id: the chunk numbers visible in the prompt and the chunk count."""
        seen: dict[str, tuple[set[int], int]] = {}
        for obs_id, chunk, chunks in self.recall_opens():
            numbers, _ = seen.get(obs_id, (set(), chunks))
            numbers.add(chunk)
            seen[obs_id] = (numbers, chunks)
        return seen

    def last_recalled(self) -> tuple[str, int, int] | None:
        """(id, chunk, chunks) of the last recall response in the prompt."""
        opens = self.recall_opens()
        return opens[-1] if opens else None

    def attempted_ids(self) -> set[str]:
        """Ids the agent already asked for (visible recall actions, responses or notes)."""
        attempted = set(self.recall_chunks())
        for action in self.executed:
            if action.startswith("_recall"):
                attempted.update(ID_PATTERN.findall(action))
        for facts in self.facts:
            attempted.update(facts.exhausted)
        return attempted

    def stubs(self) -> list[tuple[str, str]]:
        """(id, stub text) of the citation stubs visible, in order of first appearance."""
        found: dict[str, str] = {}
        for facts in self.facts:
            for obs_id, stub in facts.stubs:
                found.setdefault(obs_id, stub)
        return list(found.items())

    def citations(self) -> list[tuple[str, str]]:
        """(id, description) of every cited observation the prompt names, in order of first appearance;
        the descriptions of an id named several times (stub, bare id) are joined."""
        found: dict[str, list[str]] = {}
        for facts in self.facts:
            for obs_id, description in facts.citations:
                known = found.setdefault(obs_id, [])
                if description and description not in known:
                    known.append(description)
        return [(obs_id, " ".join(descriptions)) for obs_id, descriptions in found.items()]

    def shown_in_full(self) -> set[str]:
        """Ids whose whole content the prompt shows (an observation in H, an inline item in S)."""
        return {obs_id for facts in self.facts for obs_id in facts.shown_in_full}

    def catalog_pages(self) -> list[tuple[int, int]]:
        return [page for facts in self.facts for page in facts.catalog]

    def next_hints(self) -> list[str]:
        return [hint for facts in self.facts for hint in facts.next_hints]
