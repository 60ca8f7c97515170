"""The agent loop for one (task, method): the paper's text-action protocol against one backend.

Each step: a forced compaction when the step's index is in ``force_at_calls``; the method builds
the prompt (compacting proactively when its estimate exceeds L = L_ctx - G_max); the backend
answers; a ``ContextOverflow`` triggers a reactive compaction and a retry (at most
``max_reactive_retries`` per step; when the method has nothing left to shrink the task ends with
``end="overflow"``). The reply is parsed into a thought and one action (``arc_eval.protocol``). The
method sees the turn first and may intercept it (ARC's recall and catalog commands never reach the
sandbox); every other action runs in the sandbox and its observation goes back to the method.

The task ends on:

* an accepted ``submit ANSWER`` (``end="submitted"``), scored by the task kind's scorer: NIH scores the
  submitted ``NEEDLE=<value>`` token, LongBench the letter the official regexes find in the whole final
  reply (reasoning blocks removed);
* a premature ``submit``: one made before every action of the task's protocol (``Task.required_actions``,
  compared by signature) has run (``end="premature"``, no answer: the paper counts it as a failure);
* an empty ``submit``: the agent declines to answer (``end="error"``, no answer);
* the step limit (``end="step_limit"``, no answer);
* a context overflow with nothing left to compact (``end="overflow"``, no answer);
* an unexpected exception (``end="error"`` with its message, no answer); when a model call raised it,
  that call is recorded with ``finish_reason="error"`` (0 tokens), so ``calls`` always equals the
  task's call records.

A ``BackendError`` (the server unavailable after retries, a refusal naming a configuration fault, a
reply that breaks the API, e.g. a ``finish_reason`` or token count the records cannot hold) is not a
task outcome: it propagates, and the runner stops the run without recording the task, so it is never
scored as a wrong answer and a resume redoes the task.

``force_at_calls`` counts agent steps (1-based), not auxiliary calls, so the schedule is the same
for every method. ``call_index`` in the records counts every call, auxiliary ones included.

A normal action is a re-execution when its ``action_signature`` equals that of an earlier tool call
of the same task (the cost ARC exists to remove); submissions and intercepted commands never are.

Tool-calling mode (``settings.action_mode == "tools"``; ``arc_eval.protocol``): every agent call
offers the method's tools (``Method.tools``) and the system prompt is the tool-mode one. A reply's
text (reasoning removed) is the thought and its first tool call the action: one call per reply,
as one action per reply in text mode (the backends ask for ``parallel_tool_calls: false``; a
further call a server returns anyway is dropped, for every method alike). The method sees the turn
first (``record_tool_turn``: ARC's core answers calls to its own tools, any method answers a call
to a tool it does not offer); a call it returns runs in the sandbox as its text action
(``call_action``: ``cat notes.txt``) and the result goes back with ``record_tool_result``. A
reply without a call stays in the transcript as the assistant's message alone. The records show
the text action (``""`` without a call).
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Mapping, Sequence

from attrs import define, evolve, field

from arc_eval.errors import InvalidInput
from arc_ref.message import ToolSpec
from arc_eval.methods.base import Method, MethodSettings, PromptEstimate
from arc_eval.protocol import (
    NO_ACTION_MESSAGE,
    call_action,
    is_submission,
    parse_reply,
    strip_reasoning,
    submitted_text,
    system_prompt,
    tool_system_prompt,
)
from arc_eval.schema import FINISH_REASONS, CallRecord, Clip, Compaction, Recall, TaskRecord
from arc_eval.types import (
    Backend,
    BackendError,
    BackendReplyError,
    ChatReply,
    ChatRequest,
    ContextOverflow,
    Message,
    Observation,
    Sandbox,
    Task,
)

Scorer = Callable[[Task, str, str], tuple[bool, str | None]]
"""(task, submission, final reply) -> (correct, the scored value recorded as ``submission``).

``submission`` is the text after ``submit``; ``final reply`` is the whole reply that submitted, reasoning
blocks removed (LongBench's official harness extracts the answer from the whole response)."""

DEFAULT_FORCE_AT_CALLS = (5, 10, 15)
MAX_REACTIVE_RETRIES = 3
DECLINED_MESSAGE = "the agent declined to answer (empty submit)"
PREMATURE_MESSAGE = "premature submission: the task's protocol was not complete"


def default_scorer(kind: str) -> Scorer:
    """The scorer a task kind registers (``arc_eval.registry.TaskEntry.scorer``)."""
    from arc_eval.registry import TASKS

    return TASKS.get(kind).scorer


def default_sandbox(task: Task) -> Sandbox:
    from arc_eval.sandbox import VirtualSandbox

    return VirtualSandbox(task.files)


@functools.lru_cache(maxsize=8192)
def _signature(action: str) -> str:
    """``arc_eval.sandbox.action_signature``, cached: the same actions recur in every task."""
    from arc_eval.sandbox import action_signature

    return action_signature(action)


class _TaskRun:
    """State of one running task: its records and counters."""

    def __init__(
        self,
        task: Task,
        method: Method,
        backend: Backend,
        settings: MethodSettings,
        *,
        seed: int,
        variant: str,
        model: str,
        temperature: float,
    ) -> None:
        self.task = task
        self.method = method
        self.backend = backend
        self.settings = settings
        self.seed = seed
        self.variant = variant
        self.model = model
        self.temperature = temperature
        self.calls: list[CallRecord] = []
        self.call_index = 0
        self.pending_compactions: list[str] = []
        self.pending_clips: list[Mapping[str, Any]] = []

    def record(
        self,
        purpose: str,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        latency_s: float,
        finish_reason: str,
        overflow: bool,
        compactions: Sequence[str] = (),
        counted_prompt_tokens: int | None = None,
        clips: Sequence[Mapping[str, Any]] = (),
        cached_prompt_tokens: int | None = None,
        estimate: PromptEstimate | None = None,
    ) -> int:
        """Record a call; returns its position in ``calls`` (``amend`` fills in what the step learns later)."""
        self.calls.append(
            CallRecord(
                variant=self.variant,
                method=self.method.name,
                model=self.model,
                task_kind=self.task.kind,
                task_id=self.task.task_id,
                seed=self.seed,
                call_index=self.call_index,
                purpose=purpose,
                prompt_tokens=int(prompt_tokens),
                completion_tokens=int(completion_tokens),
                latency_s=round(float(latency_s), 6),
                finish_reason=finish_reason,
                overflow=overflow,
                compactions=tuple(Compaction(reason) for reason in compactions),
                recalls=(),
                action=None,
                submission=None,
                reexecution=False,
                counted_prompt_tokens=counted_prompt_tokens,
                clips=tuple(Clip(clip["turns"], clip["newest"], clip["before"], clip["after"]) for clip in clips),
                cached_prompt_tokens=cached_prompt_tokens,
                estimated_prompt_tokens=estimate.tokens if estimate is not None else None,
                view_budget=estimate.budget if estimate is not None else None,
                prompt_limit=self.settings.usable_tokens,
            )
        )
        return len(self.calls) - 1

    def amend(self, position: int, **changes: Any) -> None:
        """What the agent step learned after its call: the action, recalls, submission, re-execution."""
        self.calls[position] = evolve(self.calls[position], **changes)

    def request(self, messages: Sequence[Message], purpose: str, tools: tuple[ToolSpec, ...] = ()) -> ChatRequest:
        return ChatRequest(
            messages=tuple(messages),
            tools=tools,
            max_tokens=self.settings.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
            tags={
                "variant": self.variant,
                "method": self.method.name,
                "task_id": self.task.task_id,
                "seed": self.seed,
                "call_index": self.call_index,
                "purpose": purpose,
            },
        )

    async def call(
        self, messages: Sequence[Message], purpose: str, compactions: Sequence[str] = (),
        tools: tuple[ToolSpec, ...] = (), clips: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[ChatReply, int]:
        """One recorded model call (its reply and its position in ``calls``).

        An overflow is recorded, then re-raised; a BackendError propagates unrecorded (the task will not
        be recorded at all); any other failure is recorded as a call with ``finish_reason="error"``,
        then re-raised, so every call index has exactly one record.
        """
        self.call_index = len(self.calls) + 1
        request = self.request(messages, purpose, tools)
        estimate = self.estimate(messages, tools)
        started = time.perf_counter()
        try:
            try:
                reply = await self.backend.complete(request)
            except ContextOverflow as overflow:
                tokens = overflow.prompt_tokens
                if tokens is None:
                    tokens = await (self.backend.count_prompt_tokens(request.messages, request.tools)
                                    if request.tools else self.backend.count_prompt_tokens(request.messages))
                self.record(
                    purpose,
                    prompt_tokens=tokens,
                    completion_tokens=0,
                    latency_s=time.perf_counter() - started,
                    finish_reason="overflow",
                    overflow=True,
                    compactions=compactions,
                    clips=clips,
                    estimate=estimate,
                )
                raise
            _check_reply(reply)
        except (ContextOverflow, BackendError):
            raise
        except Exception:
            self.record(purpose, prompt_tokens=0, completion_tokens=0, latency_s=time.perf_counter() - started,
                        finish_reason="error", overflow=False, compactions=compactions, clips=clips,
                        estimate=estimate)
            raise
        position = self.record(
            purpose,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            latency_s=reply.latency_s,
            finish_reason=reply.finish_reason,
            overflow=False,
            compactions=compactions,
            counted_prompt_tokens=reply.counted_prompt_tokens,
            clips=clips,
            cached_prompt_tokens=reply.cached_prompt_tokens,
            estimate=estimate,
        )
        return reply, position

    def estimate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> PromptEstimate | None:
        """The method's own count of the prompt it is about to send, and its bound (``Method.prompt_estimate``);
        None for a method that does not define it."""
        estimator = getattr(self.method, "prompt_estimate", None)
        if estimator is None:
            return None
        estimate = estimator(messages, tools)
        if estimate is not None and not isinstance(estimate, PromptEstimate):
            raise TypeError(f"{self.method.name}: prompt_estimate returned {estimate!r}, not a PromptEstimate or None")
        return estimate

    async def aux(self, messages: Sequence[Message], purpose: str) -> ChatReply:
        """The AuxCaller handed to methods: summary / state requests, recorded like any call."""
        reply, _ = await self.call(messages, purpose)
        return reply

    def take_compactions(self) -> list[str]:
        drained = self.method.drain_events()
        self.pending_compactions.extend(drained.compactions)
        self.pending_clips.extend(drained.clips)
        taken, self.pending_compactions = self.pending_compactions, []
        return taken

    def take_clips(self) -> list[Mapping[str, Any]]:
        """The clips of the agent's text since the last call (drained with the compactions)."""
        taken, self.pending_clips = self.pending_clips, []
        return taken


@define
class _Trajectory:
    """How one task is going: its steps, re-executions, actions run, and how it ended."""

    steps: int = 0
    reexecutions: int = 0
    seen: set[str] = field(factory=set)  # the signatures of the actions run (re-executions)
    submission: str | None = None
    final_reply: str = ""
    end: str = "step_limit"
    error: str | None = None


async def run_task(
    task: Task,
    method: Method,
    backend: Backend,
    *,
    settings: MethodSettings,
    max_steps: int,
    force_at_calls: Sequence[int] = DEFAULT_FORCE_AT_CALLS,
    seed: int,
    variant: str = "",
    model: str | None = None,
    temperature: float = 0.0,
    sandbox: Sandbox | None = None,
    scorer: Scorer | None = None,
    max_reactive_retries: int = MAX_REACTIVE_RETRIES,
) -> tuple[list[CallRecord], TaskRecord]:
    """Run one task to its end; returns its call records and its task record (``arc_eval.schema``)."""
    if max_steps < 1:
        raise InvalidInput(f"max_steps must be at least 1, got {max_steps}")
    run = _TaskRun(
        task, method, backend, settings, seed=seed, variant=variant,
        model=model if model is not None else backend.name, temperature=temperature,
    )
    state = _Trajectory()
    score: Scorer | None = scorer
    try:
        environment = sandbox if sandbox is not None else default_sandbox(task)
        if score is None:
            score = default_scorer(task.kind)
        await _drive(run, environment, state, max_steps, frozenset(force_at_calls), max_reactive_retries)
    except BackendError:
        raise
    except Exception as failure:  # noqa: BLE001 - a task's crash is recorded, never a wrong answer
        state.end, state.error = "error", f"{type(failure).__name__}: {failure}"
        state.submission = None
    return run.calls, _task_record(run, state, score)


async def _drive(run: _TaskRun, environment: Sandbox, state: _Trajectory, max_steps: int, forced: frozenset[int],
                 max_reactive_retries: int) -> None:
    """The steps of one task until it ends (``state.end``): a forced compaction where the schedule says, the agent's
    call, its turn handed to the method, its action run."""
    method = run.method
    tool_mode = run.settings.action_mode == "tools"
    method.begin(tool_system_prompt() if tool_mode else system_prompt(), run.task.goal)
    while state.steps < max_steps:
        if state.steps + 1 in forced:
            await method.compact("forced", run.aux)
        answered = await _agent_call(run, tool_mode, max_reactive_retries)
        if answered is None:
            state.end = "overflow"
            return
        reply, call, tools = answered
        state.steps += 1
        action, record = _tool_turn(run, reply, call, tools) if tool_mode else _text_turn(run, reply, call)
        if record is None:
            continue
        if is_submission(action):
            if _submit(run, environment, state, reply, call, action, record):
                return
            continue
        signature = _signature(action)
        if signature in state.seen:
            run.amend(call, reexecution=True)
            state.reexecutions += 1
        state.seen.add(signature)
        record(environment.run(action))


async def _agent_call(run: _TaskRun, tool_mode: bool,
                      max_reactive_retries: int) -> tuple[ChatReply, int, tuple[ToolSpec, ...]] | None:
    """The step's agent call (its reply, its position in the records, the tools it offered); a ContextOverflow
    compacts reactively and retries, at most ``max_reactive_retries`` times; None when nothing is left to shrink."""
    method = run.method
    messages = await method.prompt(run.aux)
    tools = method.tools() if tool_mode else ()
    retries = 0
    while True:
        try:
            compactions = run.take_compactions()
            reply, call = await run.call(messages, "agent", compactions, tools, run.take_clips())
        except ContextOverflow:
            if retries >= max_reactive_retries or not await method.compact("reactive", run.aux):
                return None
            retries += 1
            messages = await method.prompt(run.aux)
            continue
        return reply, call, tools


Recorder = Callable[[Observation], None]


def _text_turn(run: _TaskRun, reply: ChatReply, call: int) -> tuple[str, Recorder | None]:
    """Text mode: the reply parsed into a thought and an action and handed to the method; (the action, where its
    observation goes), None when nothing runs (the method intercepted the action, or the reply held none)."""
    method = run.method
    thought, action = parse_reply(reply.content)
    run.amend(call, action=action)
    intercepted = method.record_agent(thought, action)
    events = method.drain_events()
    run.pending_compactions.extend(events.compactions)
    run.pending_clips.extend(events.clips)
    recalls = events.recalls or (intercepted.recalls if intercepted is not None else ())
    run.amend(call, recalls=_recalls(recalls))
    if intercepted is not None:
        return action, None
    if not action:
        method.record_observation(action, Observation(NO_ACTION_MESSAGE, 2))
        return action, None
    return action, functools.partial(method.record_observation, action)


def _submit(run: _TaskRun, environment: Sandbox, state: _Trajectory, reply: ChatReply, call: int, action: str,
            record: Recorder) -> bool:
    """A ``submit`` action: True when it ends the task (accepted, declined or premature); else its observation
    (the sandbox refused it) goes back to the method."""
    if not submitted_text(action):
        state.end, state.error = "error", DECLINED_MESSAGE
        return True
    observation = environment.run(action)
    if observation.submitted is None:
        record(observation)
        return False
    run.amend(call, submission=observation.submitted)
    missing = [required for required in run.task.required_actions if _signature(required) not in state.seen]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        state.end, state.error = "premature", f"{PREMATURE_MESSAGE} (not yet run: {shown})"
        return True
    state.submission = observation.submitted
    state.final_reply = strip_reasoning(reply.content).strip()
    state.end = "submitted"
    return True


def _task_record(run: _TaskRun, state: _Trajectory, score: Scorer | None) -> TaskRecord:
    """The task's record: how it ended and, for a submission, its score."""
    task = run.task
    correct, scored = False, None
    if state.submission is not None and score is not None:
        correct, scored = score(task, state.submission, state.final_reply)
    return TaskRecord(
        variant=run.variant,
        method=run.method.name,
        model=run.model,
        task_kind=task.kind,
        task_id=task.task_id,
        seed=run.seed,
        submitted=state.submission is not None,
        no_answer=state.submission is None,
        correct=bool(correct),
        submission=scored,
        end=state.end,
        error=state.error,
        calls=len(run.calls),  # every call made, one record each (a call that raised is recorded as an error)
        steps=state.steps,
        reexecutions=state.reexecutions,
        meta=_json_meta(task.meta),
    )


def _recalls(recalls: Sequence[Mapping[str, Any]]) -> tuple[Recall, ...]:
    return tuple(Recall(recall["id"], recall["chunk"], recall["chunks"]) for recall in recalls)


def _tool_turn(run: _TaskRun, reply: ChatReply, call: int, tools: tuple[ToolSpec, ...]) -> tuple[str, Recorder | None]:
    """Tool-calling mode: hand the reply's turn to the method; (the text action, where the environment's result of
    its call goes), None when the environment runs nothing."""
    method = run.method
    thought = strip_reasoning(reply.content).strip()
    calls = reply.tool_calls[:1]  # one call per reply
    if calls and not calls[0].call_id:
        calls = (evolve(calls[0], call_id=f"call_{run.call_index}"),)
    action = call_action(calls[0], tools) if calls else ""
    run.amend(call, action=action)
    outcome = method.record_tool_turn(thought, calls)
    events = method.drain_events()
    run.pending_compactions.extend(events.compactions)
    run.pending_clips.extend(events.clips)
    run.amend(call, recalls=_recalls(events.recalls or outcome.recalls))
    if not (calls and calls[0] in outcome.environment_calls):
        return action, None
    return action, functools.partial(method.record_tool_result, calls[0])


def _check_reply(reply: ChatReply) -> None:
    """A reply the records can hold (token counts integers >= 0, a known finish reason), else a BackendReplyError."""
    for name in ("prompt_tokens", "completion_tokens", "counted_prompt_tokens", "cached_prompt_tokens"):
        value = getattr(reply, name)
        if (value is not None or name not in ("counted_prompt_tokens", "cached_prompt_tokens")) and (type(value) is not int or value < 0):
            raise BackendReplyError(f"the backend's reply has {name} {value!r}; the API promises an integer >= 0")
    if reply.finish_reason not in FINISH_REASONS:
        raise BackendReplyError(
            f"the backend's reply has finish_reason {reply.finish_reason!r}; the records hold only "
            f"{', '.join(FINISH_REASONS)} (eval/RECORDS.md): the backend must map it to one of those"
        )


def _json_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Task metadata as plain JSON values (strings for anything exotic)."""
    plain: dict[str, Any] = {}
    for key, value in meta.items():
        plain[str(key)] = value if isinstance(value, (str, int, float, bool, type(None), list, dict)) else str(value)
    return plain
