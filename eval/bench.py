"""The figures of ``arc-eval bench``: throughput, per-call harness overhead, concurrency over HTTP.

Figures printed from one run (never timed tests): each function returns its lines of text.
"""

from __future__ import annotations

import asyncio
import io
import tempfile
import time
from pathlib import Path
from typing import Sequence, TextIO

from attrs import frozen

from arc_ref.message import ToolSpec
from arc_ref.options import float_option, int_option, option
from arc_eval.agent.scripted import ScriptedBackend, ScriptedPolicy, message_facts
from arc_eval.backends.scripted_server import MAX_LATENCY_MS, build_app, serve_in_thread
from arc_eval.loop import run_task
from arc_eval.methods import make_method, parse_methods
from arc_eval.methods.rag_memory import RETRIEVER_CHOICES
from arc_eval.records import RunReader
from arc_eval.plan import RunPlan, default_max_steps
from arc_eval.registry import MAX_CONCURRENCY, MAX_TASKS_PER_SEED
from arc_eval.run_spec import PAPER, RunSpec
from arc_eval.runner import run
from arc_eval.tasks.nih import make_nih_tasks
from arc_eval.types import Backend, ChatReply, ChatRequest, Message, Task


BENCH_FIGURES = ("throughput", "overhead", "concurrency")


@frozen
class BenchOptions:
    """The knobs of ``arc-eval bench`` (its flags derive from them, ``arc_ref.options``)."""

    tasks: int = int_option(1000, minimum=1, maximum=MAX_TASKS_PER_SEED, metavar="N",
                            help="NIH tasks for the throughput figure")
    methods: tuple[str, ...] | None = option(None, parse=parse_methods, metavar="all|m1,m2",
                                             help="methods measured (default: all)")
    overhead_tasks: int = int_option(50, minimum=1, maximum=MAX_TASKS_PER_SEED, metavar="N",
                                     help="NIH tasks for the overhead figure")
    concurrency: int = int_option(8, minimum=1, maximum=MAX_CONCURRENCY, metavar="N",
                                  help="N for the serve-scripted figure")
    concurrency_tasks: int = int_option(32, minimum=1, maximum=MAX_TASKS_PER_SEED, metavar="N",
                                        help="NIH tasks for the concurrency figure")
    latency_ms: float = float_option(20.0, minimum=0, maximum=MAX_LATENCY_MS, metavar="MS",
                                     help="serve-scripted service time per request")
    rag_retriever: str = option("bm25", choices=RETRIEVER_CHOICES, help="rag_memory's retriever")
    only: tuple[str, ...] = option((), choices=BENCH_FIGURES, append=True, converter=tuple,
                                   help="a figure to print (default: every one)")


class _TimedBackend(Backend):
    """Wraps a backend and adds up the wall time spent inside it ("the model")."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: ChatRequest) -> ChatReply:
        started = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    async def count_prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return await self.inner.count_prompt_tokens(messages, tools)

    async def preflight(self, out: TextIO) -> None:
        await self.inner.preflight(out)

    async def aclose(self) -> None:
        await self.inner.aclose()


def bench_throughput(methods: Sequence[str], tasks: int, *, rag_retriever: str = "bm25", seed: int = 42) -> str:
    """Wall time of a scripted NIH run (tasks x methods x 1 seed, records written) at the 16k preset."""
    with tempfile.TemporaryDirectory(prefix="arc-eval-bench-") as directory:
        spec = RunSpec.build(
            task_kind="nih", methods=tuple(methods), seeds=(seed,), out=Path(directory) / "run",
            tasks_per_seed=tasks, rag_retriever=rag_retriever, progress=False, concurrency=1,
            command=("arc-eval", "bench"),
        )
        started = time.perf_counter()
        result = run(spec, out=io.StringIO())
        elapsed = time.perf_counter() - started
        calls = len(RunReader(spec.out).calls())
    finished = result.ran
    return (
        f"throughput: scripted NIH, {tasks} tasks x {len(methods)} methods x 1 seed "
        f"({', '.join(methods)}; rag retriever {_recorded_retriever(spec)}): {elapsed:.1f} s wall, "
        f"{finished} tasks, {calls} model calls, {finished / elapsed:.1f} tasks/s, "
        f"{1000 * elapsed / max(1, calls):.3f} ms per call all included\n{result.table}"
    )


def _recorded_retriever(spec: RunSpec) -> str:
    """The RAG retriever the run recorded (its resolved option), or "unused"."""
    return str(RunPlan(spec).manifest()["config"].get("rag_retriever", "unused"))


def bench_harness_overhead(methods: Sequence[str], tasks: int, *, rag_retriever: str = "bm25", seed: int = 42) -> str:
    """Per-call harness time (everything but the backend's own work) per method, 16k/4096 preset."""
    spec = RunSpec.build(task_kind="nih", methods=tuple(methods), seeds=(seed,), out=Path("unused"),
                         tasks_per_seed=tasks, rag_retriever=rag_retriever)
    plan = RunPlan(spec)
    settings = plan.settings(spec)
    task_list = make_nih_tasks(seed, tasks)
    warm_up = make_nih_tasks(seed + 1, 3)  # other tasks: loads tokenizer and retriever, leaves per-task caches cold
    lines = [f"harness overhead per call (16k context, 4096 max tokens, {tasks} NIH tasks; "
             "backend time = scripted policy + its prompt count, excluded):"]

    async def measure(name: str, batch: list[Task]) -> tuple[float, float, int]:
        backend = _TimedBackend(ScriptedBackend(context_limit=spec.context_limit, counter=settings.counter))
        started = time.perf_counter()
        for task in batch:
            await run_task(task, make_method(name, settings), backend, settings=settings,
                           max_steps=default_max_steps(task), seed=seed)
        return time.perf_counter() - started, backend.seconds, backend.calls

    for name in methods:
        asyncio.run(measure(name, warm_up))
        settings.counter.clear()  # every method pays for counting its own new messages
        message_facts.cache_clear()
        total, inside, calls = asyncio.run(measure(name, task_list))
        overhead_ms = 1000 * (total - inside) / max(1, calls)
        lines.append(f"  {name:<17} {overhead_ms:7.3f} ms/call harness, {1000 * inside / max(1, calls):7.3f} ms/call "
                     f"backend, {calls} calls")
    return "\n".join(lines)


def bench_concurrency(concurrency: int, tasks: int, *, latency_ms: float = 20.0, seed: int = 42) -> str:
    """NIH over real HTTP against serve-scripted: requests in flight at once, and the speed-up over 1."""
    figures = []
    for level in sorted({1, concurrency}):
        app = build_app(ScriptedPolicy(), max_model_len=PAPER.context_limit, concurrency=concurrency, latency_ms=latency_ms)
        with serve_in_thread(app) as base_url, tempfile.TemporaryDirectory(prefix="arc-eval-bench-") as directory:
            spec = RunSpec.build(
                task_kind="nih", methods=("sliding_window",), seeds=(seed,), out=Path(directory) / "run",
                tasks_per_seed=tasks, backend="openai", base_urls=(base_url,), model="scripted",
                concurrency=level, progress=False, command=("arc-eval", "bench", "concurrency"),
            )
            started = time.perf_counter()
            run(spec, out=io.StringIO())
            elapsed = time.perf_counter() - started
        figures.append((level, elapsed, app.stats.max_in_flight, app.stats.chat_requests))
    lines = [f"concurrency: NIH sliding_window over HTTP against serve-scripted ({tasks} tasks, "
             f"{latency_ms:g} ms service time per request, server concurrency {concurrency}):"]
    base = figures[0][1]
    for level, elapsed, in_flight, requests in figures:
        lines.append(f"  --concurrency {level:<3} {elapsed:6.2f} s wall, {requests} chat requests, "
                     f"max in flight at the server {in_flight}, speed-up {base / elapsed:4.1f}x")
    return "\n".join(lines)
