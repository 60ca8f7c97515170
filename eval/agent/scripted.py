"""The scripted agent: a deterministic policy that follows the protocol as a careful model would.

It makes the whole pipeline run on a laptop and in CI, and it measures the mechanism itself: what each
method keeps recoverable. What it scores is a mechanism check, not a model's accuracy. It never sees
``Task.answer``: it reads only the messages it is given, like a model, and it reacts to their text,
never to a method's name.

Two variants (``--agent``), both documented rule by rule in ``eval/METHODS.md``:

* ``fair`` (the default) is equally competent for every method: it follows each condensing request's own
  instructions (exact-value lines copied verbatim, ``facts`` filled), ranks what it may recall with one
  relevance ranking (``arc_eval.agent.ranking``: BM25 against what the task asks), states that same need in
  one recovery step when nothing it can see holds the answer (the step RAG's retriever then ranks its
  chunks against), reads bare ids in ARC's summary, browses ARC's catalog when no citation fits, and reads
  recalled chunks joined back into whole lines;
* ``floor`` keeps the first rules: first and last line of each folded observation, word-overlap ranking
  of visible stubs only, no recovery step. Its numbers are a floor for the condensing baselines.

``ScriptedBackend`` implements ``arc_eval.types.Backend`` in-process around a policy: it counts the
prompt with the run's counter (``arc_eval.counting``; in tool-calling mode the offered tools too, and
the policy's action comes back as a tool call when it names an offered tool), raises
``ContextOverflow`` when prompt > context_limit - max_tokens (the harness' own L_ctx - G_max
check), and reports usage with a near-zero latency.
"""

from __future__ import annotations

import re
import time
from typing import Any, Sequence

from attrs import frozen

from arc_ref.config import PRESETS
from arc_ref.errors import ConfigError
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.parse import parse_recall_marker
from arc_eval.agent.condense import first_last_lines, marks_itself_as_noise, write_state, write_summary
from arc_eval.agent.ranking import bm25_scores, named_sources, ranked, tokens
# message_facts: the benches clear its cache through this module
from arc_eval.agent.reading import Plan, View, message_facts, plan_of, words
from arc_eval.counting import TokenCounter, default_counter
from arc_eval.registry import BackendEntry, BackendRun, ComponentOptions, option, register_backend
from arc_eval.protocol import STATE_REQUEST_HEADER, SUMMARY_REQUEST_HEADER, reply_tool_call, text_view
from arc_eval.types import Backend, ChatReply, ChatRequest, ContextOverflow, Message

AGENT_VARIANTS = ("fair", "floor")
DEFAULT_AGENT = "fair"
# The fair agent's recovery step runs this action: the one task tool that reads no file, so it re-runs
# nothing that produced a value; its turn states what the agent needs (see METHODS.md).
RECOVERY_ACTION = "ls"

__all__ = ["AGENT_VARIANTS", "DEFAULT_AGENT", "FloorPolicy", "Plan", "ScriptedBackend", "ScriptedPolicy",
           "first_last_lines", "message_facts"]


def _reply(thought: str, action: str) -> str:
    return f"Thought: {thought}\nAction: {action}"


def _token_pattern(key: str, fair: bool) -> re.Pattern[str]:
    """A ``KEY=value`` token: after whitespace or the line start (floor), after any non-word character (fair,
    so that a value quoted in JSON or prose is read too)."""
    boundary = r"(?<![A-Za-z0-9_])" if fair else r"(?:^|\s)"
    return re.compile(rf"{boundary}{re.escape(key)}=([A-Za-z0-9]+)")


class ScriptedPolicy:
    """Deterministic agent: ``__call__(messages) -> reply text`` (rules in ``eval/METHODS.md``)."""

    def __init__(self, *, variant: str = DEFAULT_AGENT, allow_reexecution: bool = False,
                 max_recall_targets: int = 3) -> None:
        if variant not in AGENT_VARIANTS:
            raise ConfigError(f"unknown scripted agent {variant!r}; choose one of {', '.join(AGENT_VARIANTS)}")
        self.variant = variant
        self.fair = variant == "fair"
        self.allow_reexecution = allow_reexecution
        self.max_recall_targets = max_recall_targets

    def __call__(self, messages: Sequence[Message]) -> str:
        if any(message.content.startswith(SUMMARY_REQUEST_HEADER) for message in messages):
            return write_summary(messages[-1].content, copy_values=self.fair)
        if any(message.content.startswith(STATE_REQUEST_HEADER) for message in messages):
            return write_state(messages[-1].content, fill_facts=self.fair)
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
        text = view.evidence if self.fair else view.text
        value = self._banner_value(text, key, plan.banner_label)
        if value is not None:
            return _reply(f"The value is in my context, inside the banner: {key}={value}.", f"submit {key}={value}")
        recall = self._recover(plan, view)
        if recall is not None:
            return recall
        if self.allow_reexecution:
            rerun = self._rerun_step(plan, view)
            if rerun is not None:
                return _reply(f"The value is no longer in my context; I run `{rerun}` again to see it.", rerun)
        candidate = self._best_candidate(text, key)
        if candidate is not None:
            return _reply(
                f"I cannot see the banner any more; my best candidate is {key}={candidate}.",
                f"submit {key}={candidate}",
            )
        return _reply("The value is not in my context and nothing I can see would bring it back; I give up.", "submit")

    def _recover(self, plan: Plan, view: View) -> str | None:
        """The next step towards what the task asks when the prompt does not show it (None: nothing left)."""
        if not self.fair:
            return self._recall_step_floor(view, words(plan.answer_instruction if not plan.choices else
                                                       plan.question + " " + " ".join(plan.choices.values())))
        return self._recall_step_fair(plan, view) or self._recovery_step(plan, view)

    def _banner_value(self, text: str, key: str, label: str | None) -> str | None:
        if label is None or label not in text or f"{key}=" not in text:
            return None
        token = _token_pattern(key, self.fair)
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

    def _best_candidate(self, text: str, key: str) -> str | None:
        if f"{key}=" not in text:
            return None
        token = _token_pattern(key, self.fair)
        for line in text.split("\n"):
            noise = marks_itself_as_noise(line) if self.fair else "noise" in line.lower()
            if noise or "<value>" in line:
                continue
            match = token.search(line)
            if match:
                return match.group(1)
        return None

    @staticmethod
    def _continue_recall(view: View) -> str | None:
        """``_recall-next`` when the last recall response shown is not the observation's last chunk."""
        last = view.last_recalled()
        if last is not None:
            obs_id, chunk, chunks = last
            visible, _ = view.recall_chunks()[obs_id]
            if chunk < chunks and chunk + 1 not in visible:
                thought = f"Chunk {chunk}/{chunks} of {obs_id} did not hold it; I read the next chunk."
                return _reply(thought, f"_recall-next {obs_id}")
        return None

    def _recall_step_floor(self, view: View, query: set[str]) -> str | None:
        """floor: continue a partly read recall, or recall the visible stub sharing most words with the query."""
        following = self._continue_recall(view)
        if following is not None:
            return following
        attempted = view.attempted_ids()
        if len(attempted) >= self.max_recall_targets:
            return None
        candidates = [(obs_id, stub) for obs_id, stub in view.stubs() if obs_id not in attempted]
        if candidates:
            ranked_ = sorted(enumerate(candidates), key=lambda item: (-len(words(item[1][1]) & query), item[0]))
            obs_id = ranked_[0][1][0]
            return _reply(f"The citation {obs_id} may hold what I need; I recall it exactly.", f"_recall {obs_id}")
        catalog = view.catalog_pages()
        if catalog:
            page, pages = catalog[-1]
            if page < pages and "catalog-next" not in view.executed:
                return _reply("No citation on this catalog page may hold it; I look at the next page.", "catalog-next")
        return None

    def _recall_step_fair(self, plan: Plan, view: View) -> str | None:
        """fair: continue a partly read recall; else recall the best-ranked citation that fits the need; else
        browse the catalog (first page, then the next ones) for one."""
        following = self._continue_recall(view)
        if following is not None:
            return following
        attempted = view.attempted_ids()
        if len(attempted) >= self.max_recall_targets:
            return None
        shown = view.shown_in_full()
        candidates = [(obs_id, text) for obs_id, text in view.citations() if obs_id not in attempted | shown]
        if candidates:
            need = plan.need
            scores = bm25_scores(need, [text for _, text in candidates])
            sources = named_sources(plan.need) if not plan.choices else ()
            need_terms = set(tokens(need))

            def fits(text: str) -> bool:
                if sources:
                    return any(source in text.lower() for source in sources)
                return bool(need_terms & set(tokens(text)))

            fitting = [index for index in ranked(need, [text for _, text in candidates]) if fits(candidates[index][1])]
            if fitting:
                obs_id = candidates[fitting[0]][0]
                return _reply(f"The citation {obs_id} may hold what I need (relevance {scores[fitting[0]]:.2f});"
                              " I recall it exactly.", f"_recall {obs_id}")
        catalog = view.catalog_pages()
        if catalog:
            page, pages = catalog[-1]
            if page != 1 and "catalog-first" not in view.executed:
                return _reply("No citation I can see fits what I need; I browse the catalog from its first page.",
                              "catalog-first")
            if page < pages:
                return _reply("No citation on this catalog page fits what I need; I look at the next page.",
                              "catalog-next")
        return None

    @staticmethod
    def _recovery_step(plan: Plan, view: View) -> str | None:
        """fair: once per task, a turn that states what the agent needs (a memory that retrieves by similarity
        to the current step then retrieves for it); its action reads no file."""
        if RECOVERY_ACTION in view.executed or RECOVERY_ACTION in plan.actions:
            return None
        return _reply(f"What I need is not in my context any more. I need: {plan.need}", RECOVERY_ACTION)

    def _rerun_step(self, plan: Plan, view: View) -> str | None:
        if not plan.actions:
            return None
        if self.fair:
            action = plan.actions[ranked(plan.need, plan.actions)[0]]
        else:
            query = words(plan.answer_instruction)
            action = sorted(enumerate(plan.actions), key=lambda item: (-len(words(item[1]) & query), item[0]))[0][1]
        return None if view.last_action == action else action

    def _answer_choice(self, plan: Plan, view: View) -> str:
        recall = self._recover(plan, view)
        if recall is not None:
            return recall
        visible = words(view.evidence if self.fair else view.text)
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


class FloorPolicy(ScriptedPolicy):
    """The floor rules by default: ``arc-eval serve-scripted --policy arc_eval.agent.scripted:FloorPolicy``."""

    def __init__(self, *, variant: str = "floor", allow_reexecution: bool = False, max_recall_targets: int = 3) -> None:
        super().__init__(variant=variant, allow_reexecution=allow_reexecution, max_recall_targets=max_recall_targets)


class ScriptedBackend(Backend):
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
        context_limit: int = PRESETS["paper"].context_limit,
        counter: TokenCounter | None = None,
    ) -> None:
        """``counter``: the run's counter (``arc_eval.counting``); None: the default counting."""
        if context_limit < 2:
            raise ConfigError(f"context_limit must be at least 2, got {context_limit}")
        self.policy = policy if policy is not None else ScriptedPolicy()
        self.context_limit = context_limit
        self.counter = counter if counter is not None else default_counter()
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


# -- the ``scripted`` backend: its name, options and factory ------------------------------------------

SCRIPTED_MODEL = "scripted"  # the records' model: scripted-<agent>, naming the agent's rules


@frozen
class ScriptedOptions(ComponentOptions):
    """The scripted agent's rules (eval/METHODS.md)."""

    agent: str = option(DEFAULT_AGENT, choices=AGENT_VARIANTS,
                        help="the scripted agent's rules: fair (equally competent for every method) or floor "
                             "(the first rules); see eval/METHODS.md")
    allow_reexecution: bool = option(False, store_true=True,
                                     help="scripted agent: re-run a tool call when what it needs left the prompt")

    def describe(self, model: str) -> str:
        """The backend as a run's plan names it."""
        return f"backend scripted (the embedded agent, rules {self.agent})"


def _scripted_backend(options: Any, run: BackendRun) -> Backend:
    assert isinstance(options, ScriptedOptions)
    return ScriptedBackend(ScriptedPolicy(variant=options.agent, allow_reexecution=options.allow_reexecution),
                           context_limit=run.context_limit, counter=run.counter)


def _scripted_model(options: Any) -> str:
    assert isinstance(options, ScriptedOptions)
    return f"{SCRIPTED_MODEL}-{options.agent}"


register_backend(BackendEntry(
    name=ScriptedBackend.name,
    help="the embedded deterministic agent",
    factory=_scripted_backend,
    options=ScriptedOptions,
    default_model=_scripted_model,
    order=1,
))
