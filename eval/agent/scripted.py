"""The scripted agent: a deterministic policy that follows the protocol as a careful model would.

It makes the whole pipeline run on a laptop and in CI, and it measures the mechanism itself: what
each method keeps recoverable. It never sees ``Task.answer``: it reads only the messages it is
given, like a model, and it reacts to their text, never to a method's name.

Rules of ``ScriptedPolicy`` (documented in ``eval/METHODS.md`` too):

*Which request.* A request whose messages contain the ``TRANSCRIPT SUMMARY REQUEST`` header is
answered with a summary, one with the ``TASK STATE UPDATE REQUEST`` header with a JSON state; any
other request is an agent step.

*Plan.* The plan is read from the goal (the first user message), in order:
1. numbered step lines (``  3. cat notes_02.txt  -- ...``) whose text starts with a command: the
   text before `` -- `` is one action; a ``submit ...`` step gives the answer format;
2. otherwise backticked commands (`` `read context.txt PAGE` ``); a ``read FILE PAGE`` template
   expands to ``read FILE 1`` .. ``read FILE N`` with N from "PAGE from 1 to N" or "N pages" in
   the goal (when N is unknown it follows the ``next: read FILE k`` hint of the last page read);
   templates with other placeholders are skipped.

*Progress.* An action counts as done when the prompt (after the goal) shows it was executed: an
``Action:``/``action:`` line, an observation header ``of `ACTION```, a citation stub ``$ ACTION |``,
or a backticked action in a summary, state or retrieved chunk. The next action is the plan step
after the furthest one done. Every method keeps the goal and the most recent turn, so the policy
never re-runs a tool call it already made (unless ``allow_reexecution``, below).

*Answer (needle tasks: the goal's answer format is ``KEY=<value>``).* When the plan is done:
1. the value is *visible* when a ``KEY=value`` line follows a line holding the banner label named
   in the goal (``... labelled LABEL;``), or sits on that line; recall wrapper lines are skipped.
   Visible -> ``submit KEY=value``;
2. else, when citations (``§id``) are visible, it recalls the one that may hold the value: stubs
   are ranked by how many words of the goal's answer instruction (the submit step's line) they
   share, ties to the earliest; a partly read recall (``[recall §id chunk k/m]`` with k < m)
   continues with ``_recall-next §id``; at most ``max_recall_targets`` ids per task; when no
   untried stub is visible and the catalog has a next page, ``catalog-next``;
3. else, with ``allow_reexecution`` (off by default), it re-runs the plan step that shares most
   words with the answer instruction (e.g. ``cat secrets.txt``), once;
4. else, when some ``KEY=value`` token is visible on a line not marked as noise, it submits that
   best candidate (a wrong answer unless it is the needle);
5. else it gives up with an empty ``submit``: the loop records no answer.

*Answer (multiple-choice tasks: the goal lists ``(A) ...`` .. ``(D) ...``).* When the plan is done
it may first recall up to ``max_recall_targets`` cited observations, ranked by the words they
share with the question and choices (reading every chunk of each), then submits ``submit The
correct answer is (X)`` for the choice whose content words (3+ letters, not stop words) appear most
often, as a fraction of its words, in the prompt after the goal; ties go to the earlier letter.

*Summary requests* (``llm_summary``): the new summary is the current one followed by one line per
folded turn: ``- `ACTION` (rc=N, L lines) first: <first non-empty line> | last: <last non-empty
line>`` (each excerpt cut to 160 characters). Generic: it keeps the first and last line of each
observation, whatever the task; it never looks at any answer.

*State requests* (``structured_state``): the current JSON state with, per folded turn, ``done``
+= ``"`ACTION` -> rc=N, L lines"`` and ``sources[ACTION]`` = ``"first: ... | last: ..."`` (same
excerpts); ``facts`` and ``open_questions`` unchanged, ``next_step`` = ``"continue the plan of
the task"``.

``ScriptedBackend`` implements ``arc_eval.types.Backend`` in-process around a policy: it counts the
prompt with the chat format and an ``arc_ref`` tokenizer (one cached count per message), raises
``ContextOverflow`` when prompt > context_limit - max_tokens (the harness' own L_ctx - G_max
check), and reports usage with a near-zero latency.
"""

from __future__ import annotations

import functools
import json
import re
import time
from typing import Any, Sequence

from attrs import frozen

from arc_ref.errors import ConfigError
from arc_ref.parse import (
    InlineItem,
    Note,
    ObservationMessage,
    Stub,
    Summary,
    ThoughtItem,
    find_stubs,
    parse_catalog_header,
    parse_recall_marker,
    parse_view_message,
)
from arc_ref.text import ID_PATTERN
from arc_eval.methods.base import shared_counter
from arc_eval.methods.llm_summary import NO_SUMMARY_YET, SUMMARY_REQUEST, parse_turns
from arc_eval.methods.structured_state import STATE_REQUEST
from arc_eval.protocol import (
    STATE_REQUEST_HEADER,
    SUMMARY_REQUEST_HEADER,
    TASK_VERBS,
    clean_action,
    command_word,
    parse_reply,
)
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Message

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
EXCERPT_CHARS = 160


def words(text: str) -> set[str]:
    """Content words: lowercase runs of letters/digits (dots and underscores inside), 3+ chars, no stop words."""
    return {word for word in WORD_RE.findall(text.lower()) if len(word) >= 3 and word not in STOP_WORDS}


def _normal(action: str) -> str:
    return " ".join(action.split())


def _excerpt(line: str) -> str:
    line = line.strip()
    return line if len(line) <= EXCERPT_CHARS else line[: EXCERPT_CHARS - 3] + "..."


def first_last_lines(text: str) -> tuple[str, str, int]:
    """First and last non-empty lines of an observation, and its number of lines."""
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "", "", 0
    return _excerpt(lines[0]), _excerpt(lines[-1]), len(lines)


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
    stubs: tuple[tuple[str, str], ...]
    recall_opens: tuple[tuple[str, int, int], ...]
    exhausted: frozenset[str]
    catalog: tuple[tuple[int, int], ...]
    next_hints: tuple[str, ...]
    last_action: str


def _arc_component_facts(role: str, content: str) -> tuple[set[str], list[Stub], list[tuple[str, int, int]], set[str],
                                                       list[tuple[int, int]]]:
    """What an ARC view message shows, read with the core's own parsers (``arc_ref.parse``): actions shown
    as executed, stubs, recall openings, exhausted ids and catalog pages."""
    executed: set[str] = set()
    stubs: list[Stub] = list(find_stubs(content))
    opens: list[tuple[str, int, int]] = []
    exhausted: set[str] = set()
    catalog: list[tuple[int, int]] = []
    component = parse_view_message(role, content)
    if isinstance(component, Summary):
        for item in component.items:
            if isinstance(item, ThoughtItem):
                executed.add(_normal(clean_action(item.action)))
            elif isinstance(item, InlineItem):
                executed.add(_normal(item.signature))
    elif isinstance(component, ObservationMessage):
        executed.add(_normal(component.signature))
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
    return executed, stubs, opens, exhausted, catalog


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
    arc_executed, stubs, opens, exhausted, catalog = _arc_component_facts(role, content)
    executed.update(arc_executed)
    executed.update(_normal(stub.signature) for stub in stubs)
    return MessageFacts(
        executed=frozenset(executed),
        stubs=tuple((stub.obs_id, stub.line) for stub in stubs),
        recall_opens=tuple(opens),
        exhausted=frozenset(exhausted),
        catalog=tuple(catalog),
        next_hints=tuple(_normal(hint) for hint in NEXT_HINT_RE.findall(content)),
        last_action=last_action,
    )


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

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "\n".join(message.content for message in self.messages)
        return self._text

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

    def catalog_pages(self) -> list[tuple[int, int]]:
        return [page for facts in self.facts for page in facts.catalog]

    def next_hints(self) -> list[str]:
        return [hint for facts in self.facts for hint in facts.next_hints]


def _reply(thought: str, action: str) -> str:
    return f"Thought: {thought}\nAction: {action}"


class ScriptedPolicy:
    """Deterministic agent: ``__call__(messages) -> reply text`` (rules in the module docstring)."""

    def __init__(self, *, allow_reexecution: bool = False, max_recall_targets: int = 3) -> None:
        self.allow_reexecution = allow_reexecution
        self.max_recall_targets = max_recall_targets

    def __call__(self, messages: Sequence[Message]) -> str:
        if any(message.content.startswith(SUMMARY_REQUEST_HEADER) for message in messages):
            return self.summarize(messages)
        if any(message.content.startswith(STATE_REQUEST_HEADER) for message in messages):
            return self.update_state(messages)
        return self.act(messages)

    # -- agent steps -----------------------------------------------------------------------
    def act(self, messages: Sequence[Message]) -> str:
        goal_index = next((index for index, message in enumerate(messages) if message.role == "user"), None)
        if goal_index is None:
            return _reply("There is no task in my prompt, so there is nothing to do.", "submit")
        plan = plan_of(messages[goal_index].content)
        view = View(messages[goal_index + 1 :])
        done = [index for index, action in enumerate(plan.actions) if action in view.executed]
        position = max(done) + 1 if done else 0
        if position < len(plan.actions):
            action = plan.actions[position]
            return _reply(f"Following the task's steps in order, step {position + 1}: {action}.", action)
        if plan.follow_hints_for is not None:
            following = [hint for hint in view.next_hints() if hint not in view.executed]
            if following:
                return _reply("The last page I read points to the next one.", following[-1])
        if plan.choices:
            return self._answer_choice(plan, view)
        return self._answer_value(plan, view)

    def _answer_value(self, plan: Plan, view: View) -> str:
        key = plan.key or "ANSWER"
        value = self._banner_value(view.text, key, plan.banner_label)
        if value is not None:
            return _reply(f"The value is in my context, inside the banner: {key}={value}.", f"submit {key}={value}")
        recall = self._recall_step(view, words(plan.answer_instruction))
        if recall is not None:
            return recall
        if self.allow_reexecution:
            rerun = self._rerun_step(plan, view)
            if rerun is not None:
                return _reply(f"The value is no longer in my context; I run `{rerun}` again to see it.", rerun)
        candidate = self._best_candidate(view.text, key)
        if candidate is not None:
            return _reply(
                f"I cannot see the banner any more; my best candidate is {key}={candidate}.",
                f"submit {key}={candidate}",
            )
        return _reply("The value is not in my context and nothing I can see would bring it back; I give up.", "submit")

    @staticmethod
    def _banner_value(text: str, key: str, label: str | None) -> str | None:
        if label is None or label not in text or f"{key}=" not in text:
            return None
        token = re.compile(rf"(?:^|\s){re.escape(key)}=([A-Za-z0-9]+)")
        previous = ""
        for line in text.split("\n"):
            if parse_recall_marker(line.strip()) is not None:
                continue
            match = token.search(line)
            if match and (label in line or label in previous):
                return match.group(1)
            if line.strip():
                previous = line
        return None

    @staticmethod
    def _best_candidate(text: str, key: str) -> str | None:
        if f"{key}=" not in text:
            return None
        token = re.compile(rf"(?:^|\s){re.escape(key)}=([A-Za-z0-9]+)")
        for line in text.split("\n"):
            if "noise" in line.lower() or "<value>" in line:
                continue
            match = token.search(line)
            if match:
                return match.group(1)
        return None

    def _recall_step(self, view: View, query: set[str]) -> str | None:
        """The next recall action (continue a partly read one, or start the best untried stub)."""
        last = view.last_recalled()
        if last is not None:
            obs_id, chunk, chunks = last
            visible, _ = view.recall_chunks()[obs_id]
            if chunk < chunks and chunk + 1 not in visible:
                thought = f"Chunk {chunk}/{chunks} of {obs_id} did not hold it; I read the next chunk."
                return _reply(thought, f"_recall-next {obs_id}")
        attempted = view.attempted_ids()
        if len(attempted) >= self.max_recall_targets:
            return None
        candidates = [(obs_id, stub) for obs_id, stub in view.stubs() if obs_id not in attempted]
        if candidates:
            ranked = sorted(enumerate(candidates), key=lambda item: (-len(words(item[1][1]) & query), item[0]))
            obs_id = ranked[0][1][0]
            return _reply(f"The citation {obs_id} may hold what I need; I recall it exactly.", f"_recall {obs_id}")
        catalog = view.catalog_pages()
        if catalog:
            page, pages = catalog[-1]
            if page < pages and "catalog-next" not in view.executed:
                return _reply("No citation on this catalog page may hold it; I look at the next page.", "catalog-next")
        return None

    def _rerun_step(self, plan: Plan, view: View) -> str | None:
        query = words(plan.answer_instruction)
        if not plan.actions:
            return None
        ranked = sorted(enumerate(plan.actions), key=lambda item: (-len(words(item[1]) & query), item[0]))
        action = ranked[0][1]
        return None if view.last_action == action else action

    def _answer_choice(self, plan: Plan, view: View) -> str:
        query = words(plan.question + " " + " ".join(plan.choices.values()))
        recall = self._recall_step(view, query)
        if recall is not None:
            return recall
        visible = words(view.text)
        best_letter, best_score = "A", -1.0
        for letter in sorted(plan.choices):
            choice_words = words(plan.choices[letter])
            score = len(choice_words & visible) / len(choice_words) if choice_words else 0.0
            if score > best_score:
                best_letter, best_score = letter, score
        return _reply(
            f"Choice ({best_letter}) is the one whose words appear most in what I read ({best_score:.2f}).",
            f"submit The correct answer is ({best_letter})",
        )

    # -- auxiliary requests (llm_summary, structured_state) --------------------------------------
    @staticmethod
    def _turns(body: str) -> list[tuple[str, int, str]]:
        """(action, return code, observation text) of each turn in a condensing request's body."""
        turns: list[tuple[str, int, str]] = []
        for folded in parse_turns(body):
            if folded.action is not None:
                turns.append((folded.action, folded.returncode, folded.text))
            else:
                _thought, action = parse_reply(folded.assistant)
                turns.append((action, 0, ""))
        return turns

    def summarize(self, messages: Sequence[Message]) -> str:
        fields = SUMMARY_REQUEST.parse(messages[-1].content)
        if fields is None:
            return ""
        current = str(fields["current"]).strip()
        lines = [current] if current and current != NO_SUMMARY_YET else []
        for action, returncode, text in self._turns(str(fields["body"])):
            first, last, count = first_last_lines(text)
            lines.append(f"- `{action}` (rc={returncode}, {count} lines) first: {first} | last: {last}")
        return "\n".join(lines)

    def update_state(self, messages: Sequence[Message]) -> str:
        fields = STATE_REQUEST.parse(messages[-1].content)
        state: dict[str, Any] = {}
        if fields is not None:
            try:
                loaded = json.loads(str(fields["current"]))
                state = loaded if isinstance(loaded, dict) else {}
            except json.JSONDecodeError:
                state = {}
        done = list(state.get("done", [])) if isinstance(state.get("done"), list) else []
        sources = dict(state.get("sources", {})) if isinstance(state.get("sources"), dict) else {}
        for action, returncode, text in self._turns(str(fields["body"]) if fields is not None else ""):
            first, last, count = first_last_lines(text)
            done.append(f"`{action}` -> rc={returncode}, {count} lines")
            sources[action] = f"first: {first} | last: {last}"
        state["done"] = done
        state["sources"] = sources
        state["next_step"] = "continue the plan of the task"
        return json.dumps(state, ensure_ascii=False)


class ScriptedBackend:
    """``Backend`` in-process around a policy, with the harness' L_ctx - G_max check."""

    name = "scripted"

    def __init__(
        self,
        policy: ScriptedPolicy | None = None,
        *,
        context_limit: int = 16384,
        tokenizer: str = "o200k_base",
        chat_format: str = "chatml",
    ) -> None:
        if context_limit < 2:
            raise ConfigError(f"context_limit must be at least 2, got {context_limit}")
        self.policy = policy if policy is not None else ScriptedPolicy()
        self.context_limit = context_limit
        self.counter = shared_counter(tokenizer, chat_format)
        self.calls = 0

    async def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return self.counter.count(messages)

    async def complete(self, request: ChatRequest) -> ChatReply:
        started = time.perf_counter()
        self.calls += 1
        prompt_tokens = self.counter.count(request.messages)
        limit = self.context_limit - request.max_tokens
        if prompt_tokens > limit:
            raise ContextOverflow(
                f"This model's maximum context length is {self.context_limit} tokens. However, you requested "
                f"{request.max_tokens} output tokens and your prompt contains {prompt_tokens} input tokens "
                f"(limit for the prompt: {limit}).",
                prompt_tokens=prompt_tokens,
                limit=limit,
            )
        content = self.policy(request.messages)
        completion_tokens = self.counter.text_tokens(content)
        finish_reason = "stop"
        if completion_tokens > request.max_tokens:
            content = self.counter.tokenizer.decode(self.counter.tokenizer.encode(content)[: request.max_tokens])
            completion_tokens, finish_reason = request.max_tokens, "length"
        return ChatReply(
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
            latency_s=time.perf_counter() - started,
        )
