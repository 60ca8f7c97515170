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
prompt with the run's counter (``arc_eval.counting``; in tool-calling mode the offered tools too, and
the policy's action comes back as a tool call when it names an offered tool), raises
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
from arc_ref.message import ToolCall, ToolSpec
from arc_eval.counting import shared_counter
from arc_eval.protocol import (
    STATE_REQUEST_HEADER,
    SUMMARY_REQUEST_HEADER,
    TASK_VERBS,
    clean_action,
    command_word,
    parse_reply,
    reply_tool_call,
    text_view,
)
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Message

ID_RE = re.compile(r"§[0-9A-Za-z._-]+")
STUB_RE = re.compile(r"(§[0-9A-Za-z._-]+) rc=-?\d+ \d+ch \d+tok \$ (.*?) \| head: (.*) \| tail: (.*) \| _recall §")
RECALL_OPEN_RE = re.compile(r"^\[recall (§[0-9A-Za-z._-]+) chunk (\d+)/(\d+)\]$", re.MULTILINE)
RECALL_MARKER_RE = re.compile(r"^\[(?:recall|end) §[0-9A-Za-z._-]+ chunk \d+/\d+\]$")
EXHAUSTED_RE = re.compile(r"(§[0-9A-Za-z._-]+): all \d+ chunks were already returned")
CATALOG_RE = re.compile(r"\[ARC catalog page (\d+)/(\d+)")
ACTION_LINE_RE = re.compile(r"(?:^|\|\s*)\**action\**\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
HEADER_ACTION_RE = re.compile(r"\bof `([^`\n]+)`")
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
TURN_HEADER = "### Turn"


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


@functools.lru_cache(maxsize=16384)
def message_facts(role: str, content: str) -> MessageFacts:
    executed: set[str] = set()
    last_action = ""
    if role == "assistant":
        _thought, action = parse_reply(content)
        last_action = _normal(action)
        if action:
            executed.add(last_action)
    for match in ACTION_LINE_RE.finditer(content):
        executed.add(_normal(clean_action(match.group(1))))
    for pattern in (HEADER_ACTION_RE, BACKTICK_RE):
        for found in pattern.findall(content):
            executed.add(_normal(found))
    stubs = tuple((match.group(1), match.group(0)) for match in STUB_RE.finditer(content))
    executed.update(_normal(match.group(2)) for match in STUB_RE.finditer(content))
    return MessageFacts(
        executed=frozenset(executed),
        stubs=stubs,
        recall_opens=tuple(
            (match.group(1), int(match.group(2)), int(match.group(3))) for match in RECALL_OPEN_RE.finditer(content)
        ),
        exhausted=frozenset(EXHAUSTED_RE.findall(content)),
        catalog=tuple((int(page), int(pages)) for page, pages in CATALOG_RE.findall(content)),
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
                attempted.update(ID_RE.findall(action))
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
            if RECALL_MARKER_RE.match(line.strip()):
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
    def _turns(messages: Sequence[Message]) -> list[tuple[str, int, str]]:
        """(action, return code, observation text) of each turn in a condensing request."""
        body = messages[-1].content
        turns: list[tuple[str, int, str]] = []
        for block in body.split(f"{TURN_HEADER}\n")[1:]:
            header = re.search(r"^Observation \(rc=(-?\d+)\) of `([^`\n]*)`:\n", block, re.MULTILINE)
            if header is None:
                _thought, action = parse_reply(block)
                turns.append((action, 0, ""))
                continue
            text = block[header.end() :]
            for tail in ("\n\nWrite the updated summary.", "\n\nReply with the updated JSON state."):
                if text.endswith(tail):
                    text = text[: -len(tail)]
            turns.append((header.group(2), int(header.group(1)), text))
        return turns

    def summarize(self, messages: Sequence[Message]) -> str:
        body = messages[-1].content
        current = ""
        match = re.search(r"Current summary:\n(.*?)\n\nTurns to fold in", body, re.DOTALL)
        if match and match.group(1).strip() != "(none yet)":
            current = match.group(1).strip()
        lines = [current] if current else []
        for action, returncode, text in self._turns(messages):
            first, last, count = first_last_lines(text)
            lines.append(f"- `{action}` (rc={returncode}, {count} lines) first: {first} | last: {last}")
        return "\n".join(lines)

    def update_state(self, messages: Sequence[Message]) -> str:
        body = messages[-1].content
        state: dict[str, Any] = {}
        match = re.search(r"Current state:\n(.*?)\n\nTurns to fold in", body, re.DOTALL)
        if match:
            try:
                loaded = json.loads(match.group(1))
                state = loaded if isinstance(loaded, dict) else {}
            except json.JSONDecodeError:
                state = {}
        done = list(state.get("done", [])) if isinstance(state.get("done"), list) else []
        sources = dict(state.get("sources", {})) if isinstance(state.get("sources"), dict) else {}
        for action, returncode, text in self._turns(messages):
            first, last, count = first_last_lines(text)
            done.append(f"`{action}` -> rc={returncode}, {count} lines")
            sources[action] = f"first: {first} | last: {last}"
        state["done"] = done
        state["sources"] = sources
        state["next_step"] = "continue the plan of the task"
        return json.dumps(state, ensure_ascii=False)


class ScriptedBackend:
    """``Backend`` in-process around a policy, with the harness' L_ctx - G_max check.

    The prompt is counted with the run's counter (``arc_eval.counting``: the same function the methods
    use), offered tools included. In tool-calling mode (a request with ``tools``) it answers as a
    tool-calling model would: the policy reads the messages in text form (``protocol.text_view``) and
    a reply whose action is a call of an offered tool comes back as that call (``reply_tool_call``),
    its thought as the content.
    """

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

    async def count_prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return self.counter.count(messages, tools) if tools else self.counter.count(messages)

    async def complete(self, request: ChatRequest) -> ChatReply:
        started = time.perf_counter()
        self.calls += 1
        tools = request.tools
        prompt_tokens = self.counter.count(request.messages, tools) if tools else self.counter.count(request.messages)
        limit = self.context_limit - request.max_tokens
        if prompt_tokens > limit:
            raise ContextOverflow(
                f"This model's maximum context length is {self.context_limit} tokens. However, you requested "
                f"{request.max_tokens} output tokens and your prompt contains {prompt_tokens} input tokens "
                f"(limit for the prompt: {limit}).",
                prompt_tokens=prompt_tokens,
                limit=limit,
            )
        content = self.policy(text_view(request.messages, request.tools) if request.tools else request.messages)
        completion_tokens = self.counter.text_tokens(content)
        finish_reason = "stop"
        if completion_tokens > request.max_tokens:
            content = self.counter.tokenizer.decode(self.counter.tokenizer.encode(content)[: request.max_tokens])
            completion_tokens, finish_reason = request.max_tokens, "length"
        calls: tuple[ToolCall, ...] = ()
        if request.tools and finish_reason == "stop":
            content, calls = reply_tool_call(content, request.tools, f"call_{self.calls}")
        return ChatReply(
            content=content,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason=finish_reason,
            latency_s=time.perf_counter() - started,
            tool_calls=calls,
        )
