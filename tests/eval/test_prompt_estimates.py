"""Each call records the method's own estimate of the prompt it sent and the bounds it had to keep (review h60 F5):
``estimated_prompt_tokens`` (ARC: its core's count of its view; a baseline: the run's counter's count of the
messages and tools, the figure it decides on, for its condensing requests too), ``view_budget`` (ARC's K) and
``prompt_limit`` (L = L_ctx - G_max, every call). Before, only the server's p_k and the harness's count were
recorded, so "K <= L" and "the method's count is the server's" could not be checked from the records."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.schema import CallRecord, from_json
from arc_eval.types import Task

from .helpers import FakeBackend, FakeSandbox, ScriptedReplies, exact_scorer
from .test_loop import InterceptingMethod

SETTINGS = MethodSettings(context_limit=16384, max_tokens=1024)
FILES = {f"f{i}.txt": f"file {i}: " + "some distractor words. " * 400 for i in range(8)}
STEPS = [f"Thought: read {i}\nAction: cat f{i}.txt" for i in range(8)] + ["Thought: done\nAction: submit NEEDLE=OK"]


def task() -> Task:
    return Task(task_id="t-1", kind="nih", goal="Read f0.txt to f7.txt then submit.", files=FILES,
                answer="never-read", meta={})


def run(method: Any, force_at_calls: Sequence[int] = ()) -> tuple[list[CallRecord], FakeBackend]:
    backend = FakeBackend(ScriptedReplies(STEPS))
    chosen = make_method(method, SETTINGS) if isinstance(method, str) else method
    calls, _ = asyncio.run(run_task(task(), chosen, backend, settings=SETTINGS, max_steps=12, seed=1,
                                    force_at_calls=force_at_calls, sandbox=FakeSandbox(FILES), scorer=exact_scorer))
    return calls, backend


def test_arc_records_its_cores_count_of_its_view_and_its_budget_k() -> None:
    method = make_method("arc", SETTINGS)
    calls, backend = run(method)
    setup = method.arc.setup  # type: ignore[attr-defined]
    assert len(calls) == len(backend.requests) == 9
    for call, request in zip(calls, backend.requests, strict=True):
        # the core's count, exact for the run's counter (the backend's own p_k here is its message count)
        assert call.estimated_prompt_tokens == SETTINGS.counter.count(request.messages) != call.prompt_tokens
        assert call.view_budget == setup.budget <= call.prompt_limit == SETTINGS.usable_tokens == 15360
        assert call.estimated_prompt_tokens <= call.view_budget
    assert any(call.compactions for call in calls)  # its view folded on the way: the counts are of folded views
    written = [call.to_json() for call in calls]
    assert all({"estimated_prompt_tokens", "view_budget", "prompt_limit"} <= set(line) for line in written)
    assert [from_json(CallRecord, line, "x") for line in written] == calls


def test_a_baseline_records_its_counters_count_for_agent_and_condensing_calls_and_no_k() -> None:
    calls, backend = run("llm_summary", force_at_calls=(4, 7))
    assert {call.purpose for call in calls} == {"agent", "summary"}
    for call, request in zip(calls, backend.requests, strict=True):
        assert call.estimated_prompt_tokens == SETTINGS.counter.count(request.messages)
        assert call.view_budget is None and call.prompt_limit == SETTINGS.usable_tokens
    assert all("view_budget" not in call.to_json() for call in calls)


def test_an_overflow_record_keeps_the_estimate_of_the_prompt_it_meant_to_send() -> None:
    from arc_eval.types import ContextOverflow

    refused: list[int] = []

    def answer(request: Any) -> Any:
        if request.tags.get("purpose") == "agent" and not refused:
            refused.append(1)
            return ContextOverflow("too long", 99999, SETTINGS.usable_tokens)
        return STEPS[-1]

    backend = FakeBackend(answer)
    calls, _ = asyncio.run(run_task(task(), make_method("full_context", SETTINGS), backend, settings=SETTINGS,
                                    max_steps=3, seed=1, force_at_calls=(), sandbox=FakeSandbox(FILES),
                                    scorer=exact_scorer))
    assert calls[0].overflow and calls[0].prompt_tokens == 99999
    assert calls[0].estimated_prompt_tokens == SETTINGS.counter.count(backend.requests[0].messages)


def test_a_method_without_the_hook_records_no_estimate() -> None:
    calls, _ = run(InterceptingMethod())  # (a minimal Method without the hook)
    assert calls and all(call.estimated_prompt_tokens is None and call.view_budget is None for call in calls)
    assert all(call.prompt_limit == SETTINGS.usable_tokens for call in calls)
    assert all("estimated_prompt_tokens" not in call.to_json() for call in calls)


def test_a_record_written_before_the_fields_reads_with_none() -> None:
    calls, _ = run("sliding_window")
    old = {k: v for k, v in calls[0].to_json().items()
           if k not in ("estimated_prompt_tokens", "view_budget", "prompt_limit")}
    read = from_json(CallRecord, old, "x")
    assert (read.estimated_prompt_tokens, read.view_budget, read.prompt_limit) == (None, None, None)
