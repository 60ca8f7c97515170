"""ARC behind the evaluation layer's `Method` interface: the `arc_ref` core, unchanged, driven by the loop.

Every prompt is `arc_ref.machine.view(state)`, so it is within K <= L = L_ctx - G_max by construction
(Theorem claim 1); recall and catalog commands in the agent's action are answered by the core here,
before any environment (claim 4); every observation is stored verbatim first (A2).

Under the served model's chat template (``--tokenizer DIR``: chat format ``template``) the core counts
its view exactly as the server will (spec/rendering.md section 3.1). In tool-calling mode the method
drives the core's tool mode (spec/rendering.md section 13): the agent's turn is a `ToolTurn` (its
calls to ARC's own tools answered by the core, the others returned to the loop), each result a
`ToolResult`; the tools offered are the core's listing, ARC's seven tools then the task's
(``TASK_TOOL_SPECS``), and the messages sent are the view's own, tool calls and ``tool_call_id``
included, so what is counted (K <= L) is exactly what is sent.

Budgets come from the run's window and the task's prefix through the core's one derivation
(`arc_ref.budgets.fit_to_window`, spec/parameters.md "Budgets from a window and a prefix"): L = context_limit
- max_tokens; the paper's recall knobs map to the preferred Q* = recall_budget_chars / 4 and q* =
recall_max_chars / 4 - 80 tokens (the 80 leaving room for the response wrapper); what remains of L after the
prefix B, Q and eta is split between S, H and G as M : R : P = 2 : 4 : 1 (the derivation's regime "shares"). The
recall knobs are the experiment's variable (the recall-budget ablation): a setting where they cannot be honoured
whole (regime "floors", which the Session and the proxy accept) is refused, naming the budget that falls short.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from arc_eval.errors import InvalidInput
from arc_ref import render
from arc_ref.budgets import window_budgets
from arc_ref.config import (
    DEFAULT_EXPECTED_COMPLETION,
    DEFAULT_LOW_WATER,
    DEFAULT_PREFILL_COST,
    DEFAULT_SUMMARY_LOW_WATER,
    MAX_CONFIG_INTEGER,
    MAX_COST_FIELD,
    PRESETS,
    Config,
    make_setup,
)
from arc_ref.errors import ArcError, ConfigError
from arc_ref.machine import (
    AgentTurn,
    ArcState,
    Compact,
    Observe,
    ToolResult,
    ToolTurn,
    agent_turn,
    compact,
    init,
    observe,
    tool_result,
    tool_turn,
    view,
)
from arc_ref.message import ToolCall, ToolSpec
from attrs import frozen

from arc_eval.registry import ComponentOptions, MethodEntry, int_option, register_method
from arc_eval.methods.base import (
    AuxCaller,
    Intercepted,
    MethodEvents,
    MethodSettings,
    PromptEstimate,
    ToolTurnOutcome,
)
from arc_eval.protocol import TASK_TOOL_SPECS
from arc_eval.types import Message, Observation

ARC_NAME = "arc"
CHARS_PER_TOKEN = 4
WRAPPER_ALLOWANCE = 80  # tokens of q's character budget left for the response wrapper
CAPACITY = 65535


@frozen
class ArcOptions(ComponentOptions):
    """ARC's own knobs: the paper's recall budgets in characters (``RECALL_BUDGET_CHARS``, ``RECALL_MAX_CHARS``;
    the recall-budget sweep of "Ablation")."""

    recall_budget_chars: int = int_option(16000, minimum=1, maximum=MAX_CONFIG_INTEGER, metavar="CHARS",
                                      help="ARC's recall budget Q, in characters (4 per token)")
    recall_max_chars: int = int_option(8000, minimum=1, maximum=MAX_CONFIG_INTEGER, metavar="CHARS",
                                   help="ARC's largest recalled chunk q, in characters (4 per token, less 80)")
    low_water: int = int_option(DEFAULT_LOW_WATER, minimum=1, maximum=100, metavar="PERCENT",
                                help="ARC folds H down to this percent of its recent budget R")
    prefill_cost: int = int_option(DEFAULT_PREFILL_COST, minimum=0, maximum=MAX_COST_FIELD, metavar="READS",
                                   help="ARC's cost model: one token's prefill in KV reads of one context token by"
                                        " one generated token (398: Qwen3-8B on an H200; 857: Qwen3-32B on two);"
                                        " 0 folds only when the view would exceed K")
    expected_completion: int = int_option(DEFAULT_EXPECTED_COMPLETION, minimum=0, maximum=MAX_COST_FIELD,
                                          metavar="TOKENS",
                                          help="ARC's cost model: the tokens a call is expected to generate (0:"
                                               " the agent's own tokens per turn, measured on the turns in H)")
    summary_low_water: int = int_option(DEFAULT_SUMMARY_LOW_WATER, minimum=1, maximum=100, metavar="PERCENT",
                                        help="ARC appends to its summary S while a fold's items fit M, then shrinks S"
                                             " to this percent of M")


def arc_config(settings: MethodSettings, system: str, goal: str, *, check: bool = True) -> Config:
    """The core's Config for one task under the run's shared budgets and ARC's options (module docstring).

    ``check``: build its Setup here to validate it (K <= L, every component floor); ``begin`` leaves that
    to ``init``, which builds the same Setup and raises the same error. A prefix that cannot fit the window is a
    ConfigError naming the numbers."""
    base = PRESETS["paper"].replace(
        context_limit=settings.context_limit,
        max_completion=settings.max_tokens,
        keep_verbatim_chars=settings.keep_verbatim_chars,
        tokenizer=settings.counter.tokenizer_name,
        chat_format=settings.counter.chat_format_name,
        action_mode=settings.action_mode,
        tools=TASK_TOOL_SPECS if settings.action_mode == "tools" else (),
        system=system,
        goal=goal,
        capacity=int(settings.extra.get("arc_capacity", CAPACITY)),
    )
    options = settings.options_of(ARC_NAME, ArcOptions)
    base = base.replace(low_water=options.low_water, prefill_cost=options.prefill_cost,
                        expected_completion=options.expected_completion, summary_low_water=options.summary_low_water)
    chunk_tokens = max(1, options.recall_max_chars // CHARS_PER_TOKEN - WRAPPER_ALLOWANCE)
    recall_budget = max(1, options.recall_budget_chars // CHARS_PER_TOKEN)
    derived = window_budgets(base, recall_budget=recall_budget, chunk_tokens=chunk_tokens)
    if derived.shortfall is not None:  # the recall knobs are the experiment's variable: honoured whole or refused
        name, share, floor = derived.shortfall
        raise ConfigError(
            f"arc: {name} would be {share} tokens, below its minimum {floor}: L = {derived.limit} minus the prefix"
            f" ({derived.prefix_tokens}), the recall budget ({max(recall_budget, derived.recall_budget)}) and"
            f" overhead leaves {derived.shares_available}; raise --context-limit, lower --recall-budget-chars, or"
            " shorten the goal"
        )
    config = base.replace(**derived.fields())
    if check:
        make_setup(config)  # validated here: K <= L and every component floor
    return config


class ArcMethod:
    """Method "arc": the reference core's state machine, one state per task."""

    name = ARC_NAME

    def __init__(self, settings: MethodSettings):
        self.settings = settings
        self.state: ArcState | None = None
        self._compactions: list[str] = []
        self._recalls: list[Mapping[str, Any]] = []
        self._shown: tuple[tuple[Message, ...], PromptEstimate] | None = None  # the last view sent and its count

    @property
    def arc(self) -> ArcState:
        if self.state is None:
            raise RuntimeError("ArcMethod.begin() must be called before anything else")
        return self.state

    def begin(self, system: str, goal: str) -> None:
        instructions = system + ("\n" if system else "") + render.ARC_INSTRUCTIONS
        self.state = init(arc_config(self.settings, instructions, goal, check=False))  # init validates it

    async def prompt(self, aux: AuxCaller) -> tuple[Message, ...]:
        """The core's view, message for message (tool calls and the ids results answer included)."""
        shown = view(self.arc)
        messages = tuple(Message(message.role, message.content, message.tool_calls, message.tool_call_id)
                         for message in shown.messages)
        self._shown = (messages, PromptEstimate(shown.tokens, shown.budget))
        return messages

    def prompt_estimate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> PromptEstimate | None:
        """The core's count of the view ``prompt`` returned (exact for the configured tokenizer and chat format) and
        its budget K; None for any other prompt (ARC makes no call but its view's)."""
        if self._shown is not None and self._shown[0] is messages:
            return self._shown[1]
        return None

    def tools(self) -> tuple[ToolSpec, ...]:
        """The core's listing in tool-calling mode (ARC's tools, then the task's); () in text mode."""
        chat = self.arc.setup.chat
        return tuple(getattr(chat, "tools", ())) if self.arc.config.action_mode == "tools" else ()

    def prompt_tokens(self) -> int:
        """ARC's own count of the next prompt (exact for the configured tokenizer and chat format)."""
        return view(self.arc).tokens

    def record_agent(self, thought: str, action: str) -> Intercepted | None:
        self.state, result = agent_turn(self.arc, AgentTurn(thought, action))
        if result.folded:
            self._compactions.append("proactive")
        if not result.command:
            return None
        recalls = tuple({"id": r.obs_id, "chunk": r.chunk, "chunks": r.chunks} for r in result.recalls)
        self._recalls.extend(recalls)
        return Intercepted(result.response or "", recalls)

    def record_observation(self, action: str, observation: Observation) -> None:
        self.state, result = observe(self.arc, Observe(action, observation.text, observation.returncode))
        if result.folded:
            self._compactions.append("proactive")

    def record_tool_turn(self, thought: str, calls: tuple[ToolCall, ...]) -> ToolTurnOutcome:
        """The core's ``ToolTurn``: calls to ARC's tools (and to tools not offered) are answered by the core."""
        self.state, result = tool_turn(self.arc, ToolTurn(thought, tuple(calls)))
        if result.folded:
            self._compactions.append("proactive")
        recalls = tuple({"id": r.obs_id, "chunk": r.chunk, "chunks": r.chunks} for r in result.recalls)
        self._recalls.extend(recalls)
        return ToolTurnOutcome(result.environment_calls, recalls)

    def record_tool_result(self, call: ToolCall, observation: Observation) -> None:
        """The core's ``ToolResult``: the result is stored (A2) before anything can compact it."""
        self.state, result = tool_result(self.arc, ToolResult(call.call_id, observation.text, observation.returncode))
        if result.folded:
            self._compactions.append("proactive")

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        try:
            self.state, result = compact(self.arc, Compact(reason))
        except ArcError as problem:
            raise InvalidInput(str(problem)) from problem
        if result.folded:
            self._compactions.append(reason)
        return result.folded > 0

    def drain_events(self) -> MethodEvents:
        events = MethodEvents(tuple(self._compactions), tuple(self._recalls))
        self._compactions.clear()
        self._recalls.clear()
        return events


register_method(MethodEntry(name=ArcMethod.name, label="ARC", order=6, factory=ArcMethod, options=ArcOptions,
                            highlighted=True))
