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

import json
import re
import time
from typing import Any, Sequence

from arc_ref.errors import ConfigError
from arc_ref.parse import parse_recall_marker
from arc_ref.text import ID_PATTERN
from arc_eval.agent.condense import first_last_lines
from arc_eval.agent.reading import Plan, View, message_facts, plan_of, words  # message_facts: the runner clears its cache
from arc_eval.methods.base import shared_counter
from arc_eval.methods.llm_summary import NO_SUMMARY_YET, SUMMARY_REQUEST, parse_turns
from arc_eval.methods.structured_state import STATE_REQUEST
from arc_eval.protocol import STATE_REQUEST_HEADER, SUMMARY_REQUEST_HEADER, parse_reply
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Message


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
