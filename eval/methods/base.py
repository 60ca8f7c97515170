"""Shared definitions of the six context-management methods (see ``eval/DESIGN.md``, "Method").

A method owns what the model sees: it is told the system prompt and goal once (``begin``), every
agent turn (``record_agent``) and every observation (``record_observation``), and it builds the
messages of the next model call (``prompt``). When the prompt does not fit, or at a forced call
index, the loop asks it to ``compact``. Everything it did since the last call is reported by
``drain_events`` and ends up in the call records (``eval/RECORDS.md``).

This module also holds:

* ``TranscriptMethod``: the machinery the five baselines share (prefix, turns, recent suffix,
  proactive trigger, the clip of the agent's own text when the kept turns alone are over L, events).
  ``ArcMethod`` implements ``Method`` on its own.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence, TypeVar

from attrs import evolve, field, frozen

from arc_eval.errors import InvalidInput
from arc_ref import render
from arc_ref.config import ACTION_MODES, PRESETS, TEMPLATE_FORMAT
from arc_ref.errors import ConfigError
from arc_ref.machine import COMPACT_REASONS, SHOWN_TOKEN_CHARS
from arc_ref.render import LINE, RC, TEXT, Template
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.text import clipped, halving_lengths
from arc_ref.tools import clipped_arguments
from arc_eval.counting import TokenCounter, default_counter
from arc_eval.protocol import TASK_TOOL_SPECS, call_action
from arc_eval.types import ChatReply, Message, Observation

O = TypeVar("O")
PAPER = PRESETS["paper"]  # the paper's setting: the budgets' defaults
COMPACTION_REASONS = COMPACT_REASONS  # the core's (arc_ref.machine), for every method
UNKNOWN_TOOL_RETURNCODE = 2  # a call to a tool that is not offered, as its turn is shown to a condensing request

# Fraction of the usable budget L = L_ctx - G_max that a baseline keeps as its verbatim recent
# suffix after a compaction (override with ``MethodSettings.extra["recent_fraction"]``).
DEFAULT_RECENT_FRACTION = 0.25
# What a baseline keeps of the agent's own text in a kept turn older than the newest when its prompt is over L after
# its compaction: ARC's limits for a turn it no longer shows whole (spec/rendering.md section 11.2, a folded turn's
# thought and action: ``thought_chars`` and ``action_chars`` of the paper's configuration, the one ARC runs with here)
CLIP_THOUGHT_CHARS = PAPER.thought_chars
CLIP_ACTION_CHARS = PAPER.action_chars
# Fraction of L that a baseline's condensed memory (summary, JSON state, retrieved chunks) may use
# (override with ``MethodSettings.extra["memory_fraction"]``).
DEFAULT_MEMORY_FRACTION = 0.25


def _positive(instance: Any, attribute: Any, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{attribute.name} must be a positive integer, got {value!r}")


def _action_mode(instance: Any, attribute: Any, value: str) -> None:
    if value not in ACTION_MODES:
        raise ConfigError(f"action_mode must be one of {', '.join(ACTION_MODES)}, got {value!r}")


@frozen
class MethodSettings:
    """Budgets every method shares (paper, "Experimental Setup" and "Ablation")."""

    context_limit: int = field(validator=_positive)  # L_ctx
    max_tokens: int = field(default=PAPER.max_completion, validator=_positive)  # G_max
    keep_verbatim_chars: int = field(default=PAPER.keep_verbatim_chars, validator=_positive)
    # the run's counter (``arc_eval.counting``): its tokenizer and chat format ("template": the model
    # directory's own chat template) are what every prompt is counted with
    counter: TokenCounter = field(factory=default_counter)
    action_mode: str = field(default="text", validator=_action_mode)  # "tools": tool-calling mode
    # each method's own options by its name (``arc_eval.registry.MethodEntry.options``); absent: the defaults
    method_options: Mapping[str, Any] = field(factory=dict)
    extra: Mapping[str, Any] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.action_mode == "tools" and self.counter.chat_format_name != TEMPLATE_FORMAT:
            raise ConfigError(
                "tool-calling mode counts tool calls and results with the served model's own chat template: it"
                f" needs chat_format {TEMPLATE_FORMAT!r} (--tokenizer DIR, the model directory), got {self.counter.chat_format_name!r}"
            )
        if self.max_tokens >= self.context_limit:
            raise ConfigError(
                f"max_tokens ({self.max_tokens}) must be below context_limit ({self.context_limit}): "
                "the usable prompt budget L = L_ctx - G_max would be empty"
            )

    def options_of(self, method: str, options_class: type[O]) -> O:
        """``method``'s own options: those the run gave, else the class's defaults."""
        given = self.method_options.get(method)
        if given is None:
            return options_class()
        if not isinstance(given, options_class):
            raise ConfigError(f"method {method}: options must be {options_class.__name__}, got {type(given).__name__}")
        return given

    @property
    def usable_tokens(self) -> int:
        """L = L_ctx - G_max: the most prompt tokens a call may carry (paper, "System-Level Guarantee")."""
        return self.context_limit - self.max_tokens

    def fraction(self, key: str, default: float) -> float:
        """A budget fraction from ``extra`` (checked to lie in (0, 1])."""
        value = self.extra.get(key, default)
        if not isinstance(value, (int, float)) or not 0.0 < float(value) <= 1.0:
            raise ConfigError(f"extra[{key!r}] must be a number in (0, 1], got {value!r}")
        return float(value)


@frozen
class Intercepted:
    """A command answered by the method itself, before any environment."""

    response: str  # what the model will see as the result of its action
    recalls: tuple[Mapping[str, Any], ...] = ()  # {"id", "chunk", "chunks"} per recall answered


@frozen
class ToolTurnOutcome:
    """Tool-calling mode: what a method made of the model's tool turn."""

    environment_calls: tuple[ToolCall, ...]  # the calls the environment runs (each answered by record_tool_result)
    recalls: tuple[Mapping[str, Any], ...] = ()  # {"id", "chunk", "chunks"} per recall answered by the method


@frozen
class MethodEvents:
    """What a method did since the last ``drain_events``."""

    compactions: tuple[str, ...] = ()  # reasons, in order, since the last drain
    recalls: tuple[Mapping[str, Any], ...] = ()
    # {"turns", "newest", "before", "after"} per clip of the agent's own text in the kept turns (``TranscriptMethod``)
    clips: tuple[Mapping[str, Any], ...] = ()


@frozen
class PromptEstimate:
    """A method's own count of a prompt it built, made before the prompt is sent (``calls.jsonl``:
    ``estimated_prompt_tokens``, ``view_budget``)."""

    tokens: int  # the count, with the method's own counting (ARC: its core's; a baseline: the run's counter)
    budget: int | None = None  # K, the bound the method keeps that count within (ARC's view budget); None: none


AuxCaller = Callable[[Sequence[Message], str], Awaitable[ChatReply]]  # (messages, purpose) -> reply


class Method(Protocol):
    """One context-management method for one task (a fresh object per task)."""

    name: str

    def begin(self, system: str, goal: str) -> None:
        """Start the task: the system prompt (a method may append its own instructions) and goal."""
        ...

    async def prompt(self, aux: AuxCaller) -> tuple[Message, ...]:
        """Messages of the next agent call; may compact proactively first (and record it)."""
        ...

    def record_agent(self, thought: str, action: str) -> Intercepted | None:
        """The agent's turn. ARC intercepts its recall/catalog commands here; others return None."""
        ...

    def record_observation(self, action: str, observation: Observation) -> None:
        """The environment's answer to the agent's last (non-intercepted) action."""
        ...

    def tools(self) -> tuple[ToolSpec, ...]:
        """The tools offered with every agent call (tool-calling mode); () in text mode."""
        ...

    def record_tool_turn(self, thought: str, calls: tuple[ToolCall, ...]) -> ToolTurnOutcome:
        """Tool-calling mode: the model's turn (its text and its tool calls, at most one). The method answers
        the calls it owns (ARC's recall and catalog tools, or a tool not offered) and returns the others."""
        ...

    def record_tool_result(self, call: ToolCall, observation: Observation) -> None:
        """Tool-calling mode: the environment's result of one call that ``record_tool_turn`` returned."""
        ...

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        """Shrink the view ("proactive" | "reactive" | "forced"); False when nothing is left to shrink."""
        ...

    def drain_events(self) -> MethodEvents:
        """Compactions and recalls since the last call, then forget them."""
        ...

    def prompt_estimate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> PromptEstimate | None:
        """The method's own count of ``messages`` offered ``tools``, a prompt it built (the agent's, from ``prompt``,
        or a condensing request it hands to ``aux``), and the bound it kept that count within; None when it made
        none. Optional: the loop records None for a method that does not define it."""
        ...


def assistant_text(thought: str, action: str) -> str:
    """The assistant message a baseline keeps for one agent turn (the protocol's reply format)."""
    return f"Thought: {thought}\nAction: {action}" if thought else f"Action: {action}"


SHORT_OBSERVATIONS_HEADER = "Short observations of earlier turns (kept verbatim):"
# How a baseline shows an observation (its transcript, its kept short observations, its condensing
# requests); ``OBSERVATION.parse`` reads it back (the scripted agent does).
OBSERVATION = Template(
    "Observation (rc={returncode}) of `{action}`:\n{text}", returncode=RC, action=LINE, text=TEXT
)


def short_observations_message(turns: Sequence[Turn]) -> Message:
    """The user message with the short observations a condensing baseline keeps verbatim (< 500 chars)."""
    block = "\n".join(
        OBSERVATION.render(returncode=turn.returncode, action=turn.action, text=turn.observation_text)
        for turn in turns
    )
    return Message("user", f"{SHORT_OBSERVATIONS_HEADER}\n{block}")


def observation_text(action: str, observation: Observation) -> str:
    """The user message that carries an observation in a baseline's transcript."""
    return OBSERVATION.render(returncode=observation.returncode, action=action, text=observation.text)


@frozen
class Turn:
    """One agent turn and the observation it produced: a unit that compaction never splits.

    ``assistant``, ``observation`` and ``action`` are what the turn was (a condensing request, a retrieval query
    read them); ``shown``, when set, is what the prompt shows instead: the same messages with the agent's own text
    clipped (``TranscriptMethod._clip_agent_text``)."""

    assistant: Message
    observation: Message | None
    action: str
    observation_text: str = ""
    returncode: int = 0
    shown: tuple[Message, ...] | None = None

    def messages(self) -> tuple[Message, ...]:
        if self.shown is not None:
            return self.shown
        return (self.assistant,) if self.observation is None else (self.assistant, self.observation)

    def clipped(self, thought_keep: int, action_keep: int | None, tool_mode: bool) -> Turn:
        """The turn with its shown messages clipped: the thought to ``thought_keep`` characters, the action (in
        tool mode the call's string arguments) and the action that the observation's header repeats to
        ``action_keep`` (None: as they are), each by the core's ``clipped`` (cut id-safely, ``…`` marking a cut).
        Always clipped from what the turn was, never from an earlier clip; ``shown`` is None when nothing is cut (or
        when a text-mode message is not in ``assistant_text``'s form, which this cannot split)."""
        thought = self.assistant.content if tool_mode else self._thought()
        if thought is None:
            return evolve(self, shown=None)
        shown_thought = clipped(thought, thought_keep)
        shown_action = self.action if action_keep is None else clipped(self.action, action_keep)
        if tool_mode:
            calls = self.assistant.tool_calls if action_keep is None else tuple(
                ToolCall(call.call_id, call.name, clipped_arguments(call.arguments, action_keep))
                for call in self.assistant.tool_calls)
            assistant = Message("assistant", shown_thought, calls)
        else:
            assistant = Message("assistant", assistant_text(shown_thought, shown_action))
        observation = self.observation
        if observation is not None and shown_action != self.action and self._header_repeats_action():
            content = OBSERVATION.render(returncode=self.returncode, action=shown_action, text=self.observation_text)
            observation = Message(observation.role, content, tool_call_id=observation.tool_call_id)
        if assistant == self.assistant and observation == self.observation:
            return evolve(self, shown=None)
        return evolve(self, shown=(assistant,) if observation is None else (assistant, observation))

    def _thought(self) -> str | None:
        """Text mode: the thought of ``assistant_text(thought, action)``; None for a message of another form."""
        content = self.assistant.content
        if content == assistant_text("", self.action):
            return ""
        head, tail = "Thought: ", f"\nAction: {self.action}"
        if content.startswith(head) and content.endswith(tail) and len(content) >= len(head) + len(tail):
            return content[len(head):len(content) - len(tail)]
        return None

    def _header_repeats_action(self) -> bool:
        """The observation's message is ``OBSERVATION``'s (not a note), so its header repeats the action."""
        assert self.observation is not None
        return self.observation.content == OBSERVATION.render(returncode=self.returncode, action=self.action,
                                                              text=self.observation_text)


class TranscriptMethod:
    """Prefix + condensed memory + verbatim turns: what the five baselines have in common.

    * the prefix (system prompt, goal) is always kept;
    * each turn (assistant reply + its observation) is kept or removed whole, so an assistant
      action and its result are never separated (this also covers native tool calls);
    * ``prompt`` compacts proactively when its own token estimate exceeds L = L_ctx - G_max;
    * ``compact`` keeps the longest suffix of turns within ``recent_fraction * L`` tokens (at least
      the last turn) and hands the older turns to ``_condense``, which each baseline defines;
    * when the prompt is still over L after that (the kept turns alone are too long: replies of thousands of
      tokens), ``prompt`` clips the agent's own text in the kept turns as ARC's view clips it
      (``_clip_agent_text``), provided that gets it under L; the turns are still kept whole, observations as
      they were. A method that never shrinks its view (``full_context``) sets ``clips_agent_text`` False.
    """

    name = "transcript"
    clips_agent_text = True

    def __init__(self, settings: MethodSettings):
        self.settings = settings
        self.counter = settings.counter
        self.prefix: tuple[Message, ...] = ()
        self.turns: list[Turn] = []
        self._pending: Turn | None = None
        self._compactions: list[str] = []
        self._recalls: list[Mapping[str, Any]] = []
        self._clips: list[Mapping[str, Any]] = []
        self._short: tuple[tuple[Turn, ...], Message] | None = None  # kept short observations and their message
        self._estimated: tuple[tuple[Message, ...], int] | None = None  # the last prompt built and its count
        self.recent_budget = int(settings.usable_tokens * settings.fraction("recent_fraction", DEFAULT_RECENT_FRACTION))
        self.memory_budget = int(settings.usable_tokens * settings.fraction("memory_fraction", DEFAULT_MEMORY_FRACTION))

    # -- Method protocol -------------------------------------------------------------------
    def begin(self, system: str, goal: str) -> None:
        self.prefix = (Message("system", system), Message("user", goal))
        self.turns = []
        self._pending = None

    async def prompt(self, aux: AuxCaller) -> tuple[Message, ...]:
        self._flush_pending()
        messages = await self._assemble(aux)
        tokens = self._prompt_tokens(messages)
        if tokens > self.settings.usable_tokens and await self.compact("proactive", aux):
            messages = await self._assemble(aux)
            tokens = self._prompt_tokens(messages)
        if self.clips_agent_text and tokens > self.settings.usable_tokens:
            clipped_messages = self._clip_agent_text(messages)
            if clipped_messages is not messages:
                messages, tokens = clipped_messages, self._prompt_tokens(clipped_messages)
        self._estimated = (messages, tokens)
        return messages

    def prompt_estimate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> PromptEstimate:
        """The run's counter's count of ``messages`` offered ``tools``: the figure the method decides on (the last
        prompt ``prompt`` built is counted once); no bound of its own but L."""
        if self._estimated is not None and self._estimated[0] is messages and tuple(tools) == self.tools():
            return PromptEstimate(self._estimated[1])
        return PromptEstimate(self.counter.count(messages, tuple(tools)) if tools else self.counter.count(messages))

    def _clip_agent_text(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """``messages`` (the prompt, over L after any compaction) with the agent's own text clipped in the kept
        turns, as ARC's view clips it, when that brings the prompt within L; else ``messages`` unchanged.

        First every kept turn older than the newest: its thought to ``CLIP_THOUGHT_CHARS`` and its action to
        ``CLIP_ACTION_CHARS`` characters (ARC's limits for a turn it no longer shows whole: spec/rendering.md
        section 11.2). When that is not enough, the newest turn too, by ARC's rule for an agent entry of its
        recent window (section 9.1: its thought clipped, through ``halving_lengths``, to the first length that
        fits; when none does, the thought clipped whole and the action likewise), the fit being the prompt within
        L. A turn is never shown longer than it already was. Each clip is recorded (``drain_events``)."""
        limit = self.settings.usable_tokens
        if not self.turns:
            return messages
        head = messages[: len(messages) - len(self._turn_messages())]  # the prefix and the method's memory
        tool_mode = self.settings.action_mode == "tools"

        def cost(turns: Sequence[Turn]) -> int:
            return self._prompt_tokens([*head, *(message for turn in turns for message in turn.messages())])

        def shorter(turn: Turn, clip: Turn) -> Turn:  # a turn is never shown longer than it already was
            return clip if self._turn_tokens(clip) < self._turn_tokens(turn) else turn

        older = [shorter(turn, turn.clipped(CLIP_THOUGHT_CHARS, CLIP_ACTION_CHARS, tool_mode))
                 for turn in self.turns[:-1]]
        newest = self.turns[-1]
        if cost([*older, newest]) > limit:
            fitted = self._fit_newest(newest, lambda turn: cost([*older, turn]) <= limit, tool_mode)
            if fitted is None:
                return messages  # no clip of the agent's text brings it within L: the prompt stays as it was
            newest = fitted
        kept = [*older, newest]
        changed = sum(1 for before, after in zip(self.turns, kept, strict=True) if before is not after)
        if changed == 0:
            return messages
        clip = {"turns": changed, "newest": newest is not self.turns[-1], "before": self._prompt_tokens(messages)}
        self.turns = kept
        clipped_messages = (*head, *self._turn_messages())
        self._clips.append({**clip, "after": self._prompt_tokens(clipped_messages)})
        return clipped_messages

    @staticmethod
    def _fit_newest(turn: Turn, fits: Callable[[Turn], bool], tool_mode: bool) -> Turn | None:
        """ARC's agent-entry rule (spec/rendering.md section 9.1) with ``fits`` as its test: the thought clipped to
        the first of ``halving_lengths`` that fits, else the thought clipped whole and the action (a call's
        string arguments) to the first length that fits; None when nothing fits."""
        thought = turn.assistant.content if tool_mode else turn._thought()
        if thought is None:
            return None
        for keep in halving_lengths(len(thought))[1:]:  # the whole thought did not fit
            candidate = turn.clipped(keep, None, tool_mode)
            if fits(candidate):
                return candidate
        for keep in halving_lengths(len(turn.action))[1:]:
            candidate = turn.clipped(0, keep, tool_mode)
            if fits(candidate):
                return candidate
        return None

    def _prompt_tokens(self, messages: Sequence[Message]) -> int:
        tools = self.tools()
        return self.counter.count(messages, tools) if tools else self.counter.count(messages)

    def record_agent(self, thought: str, action: str) -> Intercepted | None:
        self._flush_pending()
        self._pending = Turn(Message("assistant", assistant_text(thought, action)), None, action)
        return None

    def record_observation(self, action: str, observation: Observation) -> None:
        pending = self._pending
        assistant = pending.assistant if pending is not None else Message("assistant", assistant_text("", action))
        self._pending = None
        self.turns.append(
            Turn(
                assistant,
                Message("user", observation_text(action, observation)),
                action,
                observation.text,
                observation.returncode,
            )
        )

    def tools(self) -> tuple[ToolSpec, ...]:
        """Tool-calling mode: the task's commands as tools (``TASK_TOOL_SPECS``), the same for every baseline."""
        return TASK_TOOL_SPECS if self.settings.action_mode == "tools" else ()

    def record_tool_turn(self, thought: str, calls: tuple[ToolCall, ...]) -> ToolTurnOutcome:
        """The assistant message carries the call as the model made it; its result comes back as a ``tool``
        message (``record_tool_result``). A call to a tool that is not offered is answered here with the core's
        note (``NAME: no tool has this name; not run``), never run, as ARC's core does."""
        self._flush_pending()
        if len(calls) > 1:
            raise InvalidInput(f"one tool call per reply, got {len(calls)}")
        assistant = Message("assistant", thought, tuple(calls))
        if not calls:
            self.turns.append(Turn(assistant, None, ""))
            return ToolTurnOutcome(())
        call = calls[0]
        action = call_action(call, self.tools())
        if call.name in {tool.name for tool in self.tools()}:
            self._pending = Turn(assistant, None, action)
            return ToolTurnOutcome((call,))
        note = render.note_unknown_tool(clipped(call.name, SHOWN_TOKEN_CHARS))
        self.turns.append(Turn(assistant, Message("tool", note, tool_call_id=call.call_id), action, note,
                               UNKNOWN_TOOL_RETURNCODE))
        return ToolTurnOutcome(())

    def record_tool_result(self, call: ToolCall, observation: Observation) -> None:
        pending = self._pending
        self._pending = None
        action = pending.action if pending is not None else call_action(call, self.tools())
        assistant = pending.assistant if pending is not None else Message("assistant", "", (call,))
        result = Message("tool", observation_text(action, observation), tool_call_id=call.call_id)
        self.turns.append(Turn(assistant, result, action, observation.text, observation.returncode))

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        if reason not in COMPACTION_REASONS:
            raise InvalidInput(f"unknown compaction reason {reason!r}; expected one of {COMPACTION_REASONS}")
        self._flush_pending()
        split = self._recent_start()
        if split == 0:
            return False
        older, self.turns = self.turns[:split], self.turns[split:]
        await self._condense(older, aux)
        self._compactions.append(reason)
        return True

    def drain_events(self) -> MethodEvents:
        events = MethodEvents(tuple(self._compactions), tuple(self._recalls), tuple(self._clips))
        self._compactions.clear()
        self._recalls.clear()
        self._clips.clear()
        return events

    # -- shared helpers --------------------------------------------------------------------
    def _flush_pending(self) -> None:
        """An agent turn with no observation (it got none) still belongs to the transcript."""
        if self._pending is not None:
            self.turns.append(self._pending)
            self._pending = None

    def _turn_tokens(self, turn: Turn) -> int:
        tools = self.tools()
        if tools:
            return sum(self.counter.message_tokens(message, tools) for message in turn.messages())
        return sum(self.counter.message_tokens(message) for message in turn.messages())

    def _recent_start(self) -> int:
        """Index of the first turn of the recent suffix kept verbatim by a compaction."""
        if not self.turns:
            return 0
        start = len(self.turns) - 1  # the last turn is always kept
        used = self._turn_tokens(self.turns[start])
        while start > 0:
            cost = self._turn_tokens(self.turns[start - 1])
            if used + cost > self.recent_budget:
                break
            used += cost
            start -= 1
        return start

    def _short_observations(self, turns: Sequence[Turn]) -> Message:
        """``short_observations_message(turns)``, built again only when the kept turns change (at a compaction)."""
        key = tuple(turns)
        if self._short is None or self._short[0] != key:
            self._short = (key, short_observations_message(key))
        return self._short[1]

    def _turn_messages(self) -> list[Message]:
        messages: list[Message] = []
        for turn in self.turns:
            messages.extend(turn.messages())
        return messages

    async def _assemble(self, aux: AuxCaller) -> tuple[Message, ...]:
        """Prefix, then the method's memory messages, then the verbatim turns."""
        return (*self.prefix, *await self._memory_messages(aux), *self._turn_messages())

    def clip_to_tokens(self, text: str, budget: int) -> str:
        """The longest line-prefix of ``text`` within ``budget`` tokens (then a hard cut), marked when cut."""
        if self.counter.text_tokens(text) <= budget:
            return text
        marker = "\n[... cut to fit the memory budget]"
        lines = text.split("\n")
        low, high = 0, len(lines)
        while low < high:  # binary search on the number of whole lines kept
            middle = (low + high + 1) // 2
            if self.counter.text_tokens("\n".join(lines[:middle]) + marker) <= budget:
                low = middle
            else:
                high = middle - 1
        if low > 0:
            return "\n".join(lines[:low]) + marker
        characters = max(0, budget * 4)
        while characters > 0 and self.counter.text_tokens(text[:characters] + marker) > budget:
            characters //= 2
        return text[:characters] + marker

    # -- what each baseline defines ----------------------------------------------------------
    async def _memory_messages(self, aux: AuxCaller) -> tuple[Message, ...]:
        """Messages between the prefix and the verbatim turns (summary, state, retrieved chunks)."""
        return ()

    async def _condense(self, older: list[Turn], aux: AuxCaller) -> None:
        """Absorb the turns removed from the verbatim transcript (drop, summarize, index...)."""
