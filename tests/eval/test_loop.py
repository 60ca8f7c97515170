"""The agent loop: ends, records, compaction triggers, interception, re-execution (fakes only)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

import attrs
import pytest

from arc_ref import render
from arc_eval.counting import make_counter
from arc_eval.methods.rag_memory import RagOptions
from arc_eval.loop import DECLINED_MESSAGE, PREMATURE_MESSAGE, run_task
from arc_eval.tasks.longbench import make_longbench_task
from arc_eval.methods import make_method
from arc_eval.methods.base import AuxCaller, Intercepted, MethodEvents, MethodSettings
from arc_eval.records import RunWriter
from arc_eval.types import (
    BackendError,
    BackendReplyError,
    BackendRequestError,
    BackendUnavailable,
    ChatReply,
    ChatRequest,
    Message,
    Observation,
    Task,
)

from .helpers import FakeBackend, FakeSandbox, ScriptedReplies, exact_scorer, overflow, tiny_task

SETTINGS = MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter("bytes"), method_options={"rag_memory": RagOptions(rag_retriever="bm25")})
CALL_KEYS = {
    "variant", "method", "model", "task_kind", "task_id", "seed", "call_index", "purpose", "prompt_tokens",
    "completion_tokens", "latency_s", "finish_reason", "overflow", "compactions", "recalls", "action",
    "submission", "reexecution", "counted_prompt_tokens", "estimated_prompt_tokens", "prompt_limit",
}
WRITER_MANIFEST: dict[str, Any] = {
    "command": ["test"], "task_kind": "nih", "methods": ["sliding_window"], "seeds": [42], "tasks_per_seed": 1,
    "model": "fake", "backend": "scripted", "context_limit": 4096, "max_tokens": 1024, "variants": {"": {}},
    "config": {},
}  # fmt: skip
TASK_KEYS = {
    "variant", "method", "model", "task_kind", "task_id", "seed", "submitted", "no_answer", "correct",
    "submission", "end", "error", "calls", "steps", "reexecutions", "meta",
}


def go(
    replies: Sequence[str | Exception],
    *,
    method: Any = "sliding_window",
    max_steps: int = 10,
    force_at_calls: Sequence[int] = (),
    files: dict[str, str] | None = None,
    task: Task | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any], FakeBackend, FakeSandbox]:
    backend = FakeBackend(ScriptedReplies(replies))
    sandbox = FakeSandbox(files or {"a.txt": "alpha"})
    chosen = make_method(method, SETTINGS) if isinstance(method, str) else method
    calls, outcome = asyncio.run(
        run_task(task or tiny_task(files=files), chosen, backend, settings=SETTINGS, max_steps=max_steps,
                 force_at_calls=force_at_calls, seed=42, variant="v", sandbox=sandbox, scorer=exact_scorer)
    )
    return [call.to_json() for call in calls], outcome.to_json(), backend, sandbox


def test_submission_ends_the_task_and_records_have_the_schema() -> None:
    replies = ["Thought: read\nAction: cat a.txt", "Thought: done\nAction: submit NEEDLE=OK"]
    calls, outcome, backend, sandbox = go(replies)
    assert [set(call) for call in calls] == [CALL_KEYS, CALL_KEYS] and set(outcome) == TASK_KEYS
    assert [call["call_index"] for call in calls] == [1, 2]
    assert calls[0]["action"] == "cat a.txt" and calls[1]["submission"] == "NEEDLE=OK"
    assert outcome["end"] == "submitted" and outcome["correct"] and not outcome["no_answer"]
    assert (outcome["variant"], outcome["seed"], outcome["model"], outcome["meta"]) == ("v", 42, "fake", {"size": 1})
    assert sandbox.actions == ["cat a.txt", "submit NEEDLE=OK"]
    assert backend.requests[1].messages[-1].content.startswith("Observation (rc=0) of `cat a.txt`:\nalpha")
    assert backend.requests[0].max_tokens == 1024 and backend.requests[0].tags["purpose"] == "agent"


def test_wrong_answer_step_limit_and_declined_answer() -> None:
    _, wrong, _, _ = go(["Action: submit NEEDLE=NO"])
    assert wrong["submitted"] and not wrong["correct"] and wrong["submission"] == "NEEDLE=NO"
    calls, limited, _, _ = go(["Action: ls"], max_steps=3)
    assert limited["end"] == "step_limit" and limited["no_answer"] and limited["steps"] == 3 and len(calls) == 3
    _, declined, _, sandbox = go(["Thought: I give up\nAction: submit"])
    assert declined["end"] == "error" and declined["error"] == DECLINED_MESSAGE and declined["no_answer"]
    assert sandbox.actions == []


def test_reexecution_is_counted_per_signature() -> None:
    calls, outcome, _, _ = go(["Action: cat a.txt", "Action: cat  ./a.txt", "Action: ls", "Action: submit NEEDLE=OK"])
    assert [call["reexecution"] for call in calls] == [False, True, False, False]
    assert outcome["reexecutions"] == 1


def test_missing_action_gets_a_protocol_message() -> None:
    _, outcome, backend, sandbox = go(["I am thinking.", "Action: submit NEEDLE=OK"])
    assert outcome["correct"] and sandbox.actions == ["submit NEEDLE=OK"]
    assert "No action found" in backend.requests[1].messages[-1].content


def test_forced_compaction_is_recorded_on_the_next_agent_call() -> None:
    replies = [f"Action: cat f{index}.txt" for index in range(6)] + ["Action: submit NEEDLE=OK"]
    files = {f"f{index}.txt": "x" * 300 for index in range(6)}
    calls, outcome, _, _ = go(replies, force_at_calls=(3, 5), files=files)
    forced = [call["call_index"] for call in calls if call["compactions"]]
    assert forced == [3, 5] and calls[2]["compactions"] == [{"reason": "forced"}]
    assert outcome["correct"]


def test_aux_calls_are_recorded_with_their_purpose() -> None:
    replies = [f"Action: cat f{index}.txt" for index in range(4)] + ["Action: submit NEEDLE=OK"]
    files = {f"f{index}.txt": "y" * 800 for index in range(4)}
    calls, outcome, _, _ = go(replies, method="llm_summary", force_at_calls=(4,), files=files)
    purposes = [call["purpose"] for call in calls]
    assert "summary" in purposes
    summary_at = purposes.index("summary")
    assert calls[summary_at + 1]["compactions"] == [{"reason": "forced"}]  # the agent call after the fold
    assert [call["call_index"] for call in calls] == list(range(1, len(calls) + 1))
    assert outcome["calls"] == len(calls) and outcome["steps"] == 5


def test_reactive_compaction_then_retry() -> None:
    state = {"overflowed": False}

    def answer(request: ChatRequest) -> str | Exception:
        agent_turns = sum(1 for message in request.messages if message.role == "assistant")
        if agent_turns == 3 and not state["overflowed"]:
            state["overflowed"] = True
            return overflow()
        return "Action: submit NEEDLE=OK" if agent_turns >= 3 else f"Action: cat f{agent_turns}.txt"

    backend = FakeBackend(answer)
    files = {f"f{index}.txt": "z" * 400 for index in range(3)}
    records, result = asyncio.run(
        run_task(tiny_task(files=files), make_method("sliding_window", SETTINGS), backend, settings=SETTINGS,
                 max_steps=10, force_at_calls=(), seed=1, sandbox=FakeSandbox(files), scorer=exact_scorer)
    )
    calls, outcome = [record.to_json() for record in records], result.to_json()
    overflowed = [call for call in calls if call["overflow"]]
    assert len(overflowed) == 1 and overflowed[0]["finish_reason"] == "overflow"
    assert overflowed[0]["prompt_tokens"] == 120 and overflowed[0]["completion_tokens"] == 0
    retry = calls[calls.index(overflowed[0]) + 1]
    assert retry["compactions"] == [{"reason": "reactive"}]
    assert outcome["correct"] and outcome["end"] == "submitted"


def test_overflow_with_nothing_to_compact_is_no_answer() -> None:
    calls, outcome, _, _ = go(["Action: cat a.txt", overflow()], method="full_context")
    assert outcome["end"] == "overflow" and outcome["no_answer"] and not outcome["correct"]
    assert calls[-1]["overflow"] and outcome["steps"] == 1


def test_backend_errors_propagate_and_crashes_are_recorded() -> None:
    for fault in (BackendUnavailable("server down after 6 retries"), BackendRequestError("HTTP 401"),
                  BackendReplyError("`usage` must be an object")):
        with pytest.raises(type(fault)):
            go([fault])
    calls, outcome, _, _ = go(["Action: ls", RuntimeError("policy exploded")])
    assert outcome["end"] == "error" and "RuntimeError: policy exploded" in outcome["error"]
    assert outcome["no_answer"]
    # the call that raised is recorded as an error call: the task's count agrees with its records
    assert outcome["calls"] == len(calls) == 2 and calls[1]["finish_reason"] == "error"


class InterceptingMethod:
    """A minimal Method that answers `_recall X` itself (as ARC does) and keeps a plain transcript."""

    name = "intercepting"

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.observed: list[str] = []

    def begin(self, system: str, goal: str) -> None:
        self.messages = [Message("system", system), Message("user", goal)]

    async def prompt(self, aux: AuxCaller) -> tuple[Message, ...]:
        return tuple(self.messages)

    def record_agent(self, thought: str, action: str) -> Intercepted | None:
        self.messages.append(Message("assistant", f"Action: {action}"))
        if action.startswith("_recall"):
            response = render.recall_response("§1", 1, 1, "NEEDLE=OK")
            self.messages.append(Message("user", response))
            return Intercepted(response, ({"id": "§1", "chunk": 1, "chunks": 1},))
        return None

    def record_observation(self, action: str, observation: Observation) -> None:
        self.observed.append(action)
        self.messages.append(Message("user", observation.text))

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        return False

    def drain_events(self) -> MethodEvents:
        return MethodEvents()


def test_intercepted_commands_never_reach_the_sandbox() -> None:
    method = InterceptingMethod()
    replies = ["Action: cat a.txt", "Action: _recall §1", "Action: submit NEEDLE=OK"]
    calls, outcome, _, sandbox = go(replies, method=method)
    assert sandbox.actions == ["cat a.txt", "submit NEEDLE=OK"] and method.observed == ["cat a.txt"]
    assert calls[1]["recalls"] == [{"id": "§1", "chunk": 1, "chunks": 1}] and not calls[1]["reexecution"]
    assert outcome["correct"] and outcome["reexecutions"] == 0


def test_max_steps_must_be_positive() -> None:
    with pytest.raises(ValueError):
        go(["Action: ls"], max_steps=0)



def test_a_submission_before_the_protocol_is_complete_is_premature_and_a_failure() -> None:
    task = Task(task_id="t-p", kind="nih", goal="Read a.txt and b.txt, then submit.",
                files={"a.txt": "alpha", "b.txt": "beta"}, answer="OK", required_actions=("cat a.txt", "cat  b.txt"))
    early = ["Action: cat a.txt", "Action: submit NEEDLE=OK"]
    calls, outcome, _, _ = go(early, task=task, files=dict(task.files))
    assert outcome["end"] == "premature" and outcome["no_answer"] and not outcome["submitted"]
    assert not outcome["correct"] and outcome["submission"] is None
    assert outcome["error"] == f"{PREMATURE_MESSAGE} (not yet run: cat  b.txt)"
    assert calls[-1]["submission"] == "NEEDLE=OK"  # what was submitted is kept on the call
    calls, outcome, _, _ = go(["Action: cat b.txt", *early], task=task, files=dict(task.files))
    assert outcome["end"] == "submitted" and outcome["correct"]  # every required action ran (by signature)


def test_longbench_reads_the_answer_from_the_whole_final_reply_with_the_official_regexes() -> None:
    record = {"_id": "x", "domain": "d", "sub_domain": "s", "difficulty": "hard", "length": "short", "question": "Q?",
              "choice_A": "a", "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "C", "context": "text"}
    task = make_longbench_task(record)
    settings = SETTINGS

    def outcome_of(final: str) -> dict[str, Any]:
        backend = FakeBackend(ScriptedReplies([final]))
        _, outcome = asyncio.run(run_task(task, make_method("sliding_window", settings), backend, settings=settings,
                                          max_steps=3, force_at_calls=(), seed=1))
        return outcome.to_json()

    starred = outcome_of("Thought: **The correct answer is (C)**, I am sure.\nAction: submit C")
    assert starred["correct"] and starred["submission"] == "C"  # the action alone holds no answer pattern
    first = outcome_of("Thought: <think>The correct answer is (C)</think>The correct answer is (A).\n"
                       "Action: submit The correct answer is (C)")
    assert first["submission"] == "A" and not first["correct"]  # first match wins; reasoning removed
    bare = outcome_of("Action: submit The correct answer is D")
    assert bare["submission"] == "D" and bare["end"] == "submitted"


class ServerRefused(BackendError):
    """A backend failure other than BackendUnavailable (e.g. a 4xx that is not an overflow)."""


def test_a_failed_call_is_recorded_so_calls_match_the_call_records(tmp_path: Path) -> None:
    """A call that raises (not a backend error) ends the task as an error, and its records stay writable."""
    records, result = asyncio.run(
        run_task(tiny_task(), make_method("sliding_window", SETTINGS),
                 FakeBackend(ScriptedReplies(["Action: cat a.txt", KeyError("choices")])),
                 settings=SETTINGS, max_steps=5, force_at_calls=(), seed=42, sandbox=FakeSandbox({"a.txt": "a"}),
                 scorer=exact_scorer)
    )  # fmt: skip
    assert result.end == "error" and "KeyError" in (result.error or "")
    assert result.calls == len(records) == 2 and [call.call_index for call in records] == [1, 2]
    assert (records[1].finish_reason, records[1].prompt_tokens, records[1].completion_tokens) == ("error", 0, 0)
    with RunWriter(tmp_path / "run", WRITER_MANIFEST, resume=False) as writer:
        writer.write_task(records, result)  # before: "says calls=2 and has 1 call records"
    assert writer.finished() == {("", "sliding_window", 42, "t-1")}


def test_every_backend_error_propagates_and_is_never_an_outcome() -> None:
    with pytest.raises(ServerRefused):
        go(["Action: cat a.txt", ServerRefused("404 The model `x` does not exist")])


@pytest.mark.parametrize(
    ("bad", "message"),
    [({"finish_reason": "content_filter"}, "finish_reason 'content_filter'"),
     ({"prompt_tokens": -1}, "prompt_tokens -1"), ({"completion_tokens": "3"}, "completion_tokens '3'")],
)  # fmt: skip
def test_a_reply_that_breaks_the_record_schema_is_a_backend_error(bad: dict[str, Any], message: str) -> None:
    class OddBackend(FakeBackend):
        async def complete(self, request: ChatRequest) -> ChatReply:
            return attrs.evolve(await super().complete(request), **bad)

    with pytest.raises(BackendReplyError, match=message):
        asyncio.run(
            run_task(tiny_task(), make_method("sliding_window", SETTINGS), OddBackend(ScriptedReplies(["Action: ls"])),
                     settings=SETTINGS, max_steps=3, seed=1, sandbox=FakeSandbox({}), scorer=exact_scorer)
        )  # fmt: skip
