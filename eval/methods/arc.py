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

Budgets come from the run's settings: L = context_limit - max_tokens; the paper's recall knobs map to
tokens at 4 characters per token (Q = recall_budget_chars / 4, q = recall_max_chars / 4 - 80, the 80
leaving room for the response wrapper); what remains of L after the prefix B, Q and eta is split
between S, H and G in the paper preset's proportions M : R : P = 2 : 4 : 1. The stub cap c is the paper
preset's (112) or, when the tokenizer needs more for the smallest stub, that floor.
"""

from __future__ import annotations

from typing import Any, Mapping

from arc_eval.errors import InvalidInput
from arc_ref import render
from arc_ref.config import PRESETS, Config, make_setup, minimum_budgets
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
from arc_eval.methods.base import AuxCaller, Intercepted, MethodEvents, MethodSettings, ToolTurnOutcome
from arc_eval.protocol import TASK_TOOL_SPECS
from arc_eval.types import Message, Observation

ARC_NAME = "arc"
CHARS_PER_TOKEN = 4
WRAPPER_ALLOWANCE = 80  # tokens of q's character budget left for the response wrapper
SHARES = {"summary_budget": 2, "recent_budget": 4, "page_budget": 1}
OVERHEAD = 64
CAPACITY = 65535


@frozen
class ArcOptions(ComponentOptions):
    """ARC's own knobs: the paper's recall budgets in characters (``RECALL_BUDGET_CHARS``, ``RECALL_MAX_CHARS``;
    the recall-budget sweep of "Ablation")."""

    recall_budget_chars: int = int_option(16000, minimum=1, metavar="CHARS",
                                      help="ARC's recall budget Q, in characters (4 per token)")
    recall_max_chars: int = int_option(8000, minimum=1, metavar="CHARS",
                                   help="ARC's largest recalled chunk q, in characters (4 per token, less 80)")


def arc_config(settings: MethodSettings, system: str, goal: str, *, check: bool = True) -> Config:
    """The core's Config for one task under the run's shared budgets and ARC's options (module docstring).

    ``check``: build its Setup here to validate it (K <= L, every component floor); ``begin`` leaves that
    to ``init``, which builds the same Setup and raises the same error."""
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
        overhead=OVERHEAD,
    )
    options = settings.options_of(ARC_NAME, ArcOptions)
    chunk_tokens = max(1, options.recall_max_chars // CHARS_PER_TOKEN - WRAPPER_ALLOWANCE)
    floors = minimum_budgets(base.replace(chunk_tokens=chunk_tokens, page_size=1))
    if floors["stub_cap"] > base.stub_cap:  # a tokenizer that spends more on the smallest stub (ids, numbers)
        base = base.replace(stub_cap=floors["stub_cap"])
        floors = minimum_budgets(base.replace(chunk_tokens=chunk_tokens, page_size=1))
    recall_budget = max(options.recall_budget_chars // CHARS_PER_TOKEN, floors["recall_budget"])
    limit = settings.context_limit - settings.max_tokens
    available = limit - floors["prefix_tokens"] - recall_budget - OVERHEAD
    total_shares = sum(SHARES.values())
    budgets = {name: available * share // total_shares for name, share in SHARES.items()}
    for name in budgets:
        if budgets[name] < floors[name]:
            raise ConfigError(
                f"arc: {name} would be {budgets[name]} tokens, below its minimum {floors[name]}: L = {limit} minus"
                f" the prefix ({floors['prefix_tokens']}), the recall budget ({recall_budget}) and overhead leaves"
                f" {available}; raise --context-limit, lower --recall-budget-chars, or shorten the goal"
            )
    page_frame = floors["page_budget"] - base.stub_cap  # the floor was taken with one stub per page
    page_size = max(1, (budgets["page_budget"] - page_frame) // base.stub_cap)
    config = base.replace(chunk_tokens=chunk_tokens, recall_budget=recall_budget, page_size=page_size, **budgets)
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
        return tuple(Message(message.role, message.content, message.tool_calls, message.tool_call_id)
                     for message in view(self.arc).messages)

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
