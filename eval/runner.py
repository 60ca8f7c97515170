"""Runs tasks x methods x seeds (x variants for ablations), N trajectories in flight, resumable.

``run(spec)`` opens the run directory with ``arc_eval.records.RunWriter`` (``resume=True`` continues a
killed run: finished tasks are skipped, unfinished ones redone from scratch, nothing duplicated),
then feeds every unfinished (variant, seed, task, method) job to ``concurrency`` asyncio workers
sharing one backend, so an HTTP server sees N requests at once and batches them. Each finished
task is written (its call lines, then its task line) the moment it ends. A progress bar (tqdm, on
stderr) counts tasks. At the end it prints the accuracy table of the whole run directory
(``arc_eval.analysis.accuracy.summary_table``).

Jobs go variant by variant and seed by seed (tasks of one seed are generated when reached), and
within a seed task by task with every method, so an interrupted run leaves paired outcomes.

A ``BackendUnavailable`` (server down after retries) stops the run: the task in flight is not
recorded and the message says how to resume; it is never scored as a wrong answer.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

from attrs import evolve, field, frozen

from arc_ref.errors import ConfigError
from arc_eval.methods import METHOD_NAMES, make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.types import Backend, BackendUnavailable, Task

TASK_KINDS = ("nih", "longbench")
BACKENDS = ("scripted", "openai")
SCRIPTED_MODEL = "scripted"
MAX_STEPS_SLACK = 10  # steps beyond the goal's own plan: recalls, retries, answering

# The paper's ablation sweeps (Ablation section).
RECALL_BUDGET_SWEEP: dict[str, dict[str, Any]] = {
    "recall=4k/2k": {"recall_budget_chars": 4000, "recall_max_chars": 2000},
    "recall=8k/4k": {"recall_budget_chars": 8000, "recall_max_chars": 4000},
    "recall=16k/8k": {"recall_budget_chars": 16000, "recall_max_chars": 8000},
    "recall=32k/16k": {"recall_budget_chars": 32000, "recall_max_chars": 16000},
}
FORCE_SCHEDULE_SWEEP: dict[str, dict[str, Any]] = {
    "force=5,10,15": {"force_at_calls": [5, 10, 15]},
    "force=5": {"force_at_calls": [5]},
    "force=15": {"force_at_calls": [15]},
    "force=3,6,9,12,15": {"force_at_calls": [3, 6, 9, 12, 15]},
}
NOISE_LINES_SWEEP: dict[str, dict[str, Any]] = {
    f"noise={lines}": {"noise_lines_per_side": lines} for lines in (5, 10, 25, 30)
}
ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "recall-budget": RECALL_BUDGET_SWEEP,
    "force-schedule": FORCE_SCHEDULE_SWEEP,
    "noise-lines": NOISE_LINES_SWEEP,
}
VARIANT_KEYS = ("recall_budget_chars", "recall_max_chars", "force_at_calls", "noise_lines_per_side")


def _tuple_of_ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(value) for value in values)


@frozen
class RunSpec:
    """Everything one ``arc-eval`` run needs (built by the CLI; recorded in the manifest)."""

    task_kind: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...] = field(converter=_tuple_of_ints)
    out: Path
    tasks_per_seed: int | None = None  # NIH: tasks drawn per seed; LongBench: first N (None = all)
    backend: str = "scripted"
    base_urls: tuple[str, ...] = ()
    model: str = SCRIPTED_MODEL
    context_limit: int = 16384
    max_tokens: int = 4096
    temperature: float = 0.0
    force_at_calls: tuple[int, ...] = field(default=(5, 10, 15), converter=_tuple_of_ints)
    noise_lines_per_side: int = 25
    distractor_files: int = 16
    recall_budget_chars: int = 16000
    recall_max_chars: int = 8000
    keep_verbatim_chars: int = 500
    rag_top_k: int = 3
    rag_chunk_chars: int = 1000
    rag_retriever: str = "auto"
    tokenizer: str = "o200k_base"
    tokenizer_json: str | None = None
    chat_format: str = "chatml"
    concurrency: int = 8
    resume: bool = False
    tool_calling: bool = False
    data: str | None = None
    max_steps: int | None = None
    allow_reexecution: bool = False
    variants: Mapping[str, Mapping[str, Any]] = field(factory=lambda: {"": {}})
    command: tuple[str, ...] = ()
    progress: bool = True

    def validate(self) -> None:
        """Raise ConfigError with a clear message for any inconsistent setting."""
        if self.task_kind not in TASK_KINDS:
            raise ConfigError(f"unknown task kind {self.task_kind!r}; use one of {', '.join(TASK_KINDS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r}; use one of {', '.join(BACKENDS)}")
        if not self.methods:
            raise ConfigError("no method selected")
        unknown = [name for name in self.methods if name not in METHOD_NAMES]
        if unknown:
            raise ConfigError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHOD_NAMES)}, or 'all'")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError("a method is listed twice")
        if not self.seeds:
            raise ConfigError("no seed given")
        if self.backend == "openai" and not self.base_urls:
            raise ConfigError("--backend openai needs at least one --base-url (e.g. http://localhost:8000/v1)")
        if not self.model:
            raise ConfigError("--model must name the model as served (e.g. Qwen/Qwen3-8B)")
        if self.tool_calling and self.backend != "openai":
            raise ConfigError("--tool-calling needs --backend openai (the scripted backend speaks text actions)")
        if self.task_kind == "nih" and (self.tasks_per_seed is None or self.tasks_per_seed < 1):
            raise ConfigError("--tasks must be at least 1")
        for name in ("context_limit", "max_tokens", "concurrency", "recall_budget_chars", "recall_max_chars",
                     "keep_verbatim_chars", "rag_top_k", "rag_chunk_chars"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_tokens >= self.context_limit:
            raise ConfigError(
                f"--max-tokens ({self.max_tokens}) must be below --context-limit ({self.context_limit})"
            )
        if self.noise_lines_per_side < 0 or self.distractor_files < 0:
            raise ConfigError("--noise-lines and --distractor-files must be >= 0")
        if any(call < 1 for call in self.force_at_calls):
            raise ConfigError("--force-at-calls takes 1-based call indices (>= 1)")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("--max-steps must be at least 1")
        if self.temperature < 0:
            raise ConfigError("--temperature must be >= 0")
        from arc_eval.methods.base import shared_counter

        tokenizer = f"hf:{self.tokenizer_json}" if self.tokenizer_json else self.tokenizer
        shared_counter(tokenizer, self.chat_format)  # an unknown tokenizer or format fails here, clearly
        for label, overrides in self.variants.items():
            extra = [key for key in overrides if key not in VARIANT_KEYS]
            if extra:
                raise ConfigError(f"variant {label!r}: unknown parameter(s) {', '.join(extra)}")

    def for_variant(self, label: str) -> RunSpec:
        """This spec with a variant's overrides applied."""
        overrides = dict(self.variants.get(label, {}))
        if "force_at_calls" in overrides:
            overrides["force_at_calls"] = tuple(overrides["force_at_calls"])
        return evolve(self, **overrides) if overrides else self


def method_settings(spec: RunSpec, rag_retriever: str) -> MethodSettings:
    tokenizer = f"hf:{spec.tokenizer_json}" if spec.tokenizer_json else spec.tokenizer
    return MethodSettings(
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        keep_verbatim_chars=spec.keep_verbatim_chars,
        recall_budget_chars=spec.recall_budget_chars,
        recall_max_chars=spec.recall_max_chars,
        tokenizer=tokenizer,
        chat_format=spec.chat_format,
        rag_top_k=spec.rag_top_k,
        rag_chunk_chars=spec.rag_chunk_chars,
        extra={"rag_retriever": rag_retriever, "tool_calling": spec.tool_calling},
    )


def resolved_retriever(spec: RunSpec) -> str:
    """The RAG retriever the run uses (recorded): only resolved when rag_memory runs."""
    if "rag_memory" not in spec.methods:
        return "unused"
    from arc_eval.methods.rag_memory import resolve_retriever

    return resolve_retriever(spec.rag_retriever)


def run_config(spec: RunSpec, rag_retriever: str) -> dict[str, Any]:
    """The manifest's ``config``: every knob that changes what is run."""
    return {
        "force_at_calls": list(spec.force_at_calls),
        "noise_lines_per_side": spec.noise_lines_per_side,
        "distractor_files": spec.distractor_files,
        "recall_budget_chars": spec.recall_budget_chars,
        "recall_max_chars": spec.recall_max_chars,
        "keep_verbatim_chars": spec.keep_verbatim_chars,
        "rag_top_k": spec.rag_top_k,
        "rag_chunk_chars": spec.rag_chunk_chars,
        "rag_retriever": rag_retriever,
        "tokenizer": f"hf:{spec.tokenizer_json}" if spec.tokenizer_json else spec.tokenizer,
        "chat_format": spec.chat_format,
        "temperature": spec.temperature,
        "max_steps": spec.max_steps,
        "tool_calling": spec.tool_calling,
        "allow_reexecution": spec.allow_reexecution,
        "data": spec.data,
        "base_urls": list(spec.base_urls),
    }


def manifest(spec: RunSpec, rag_retriever: str) -> dict[str, Any]:
    return {
        "schema": "arc-eval-run/1",
        "command": list(spec.command),
        "task_kind": spec.task_kind,
        "methods": list(spec.methods),
        "seeds": list(spec.seeds),
        "tasks_per_seed": spec.tasks_per_seed,
        "model": spec.model,
        "backend": spec.backend,
        "context_limit": spec.context_limit,
        "max_tokens": spec.max_tokens,
        "variants": {label: dict(params) for label, params in spec.variants.items()},
        "config": run_config(spec, rag_retriever),
    }


def default_max_steps(task: Task) -> int:
    """The goal's own plan plus ``MAX_STEPS_SLACK``: NIH one step per file + submit; LongBench one per page + answer."""
    if task.kind == "longbench":
        pages = task.meta.get("pages")
        if isinstance(pages, int) and pages > 0:
            return pages + 1 + MAX_STEPS_SLACK
        context = "".join(task.files.values())
        return math.ceil(len(context) / 4000) + 1 + MAX_STEPS_SLACK
    return len(task.files) + 1 + MAX_STEPS_SLACK


def make_tasks(spec: RunSpec, seed: int, longbench_cache: dict[str, list[Task]]) -> list[Task]:
    """The tasks of one seed (NIH: drawn from the seed; LongBench: the same items for every seed)."""
    if spec.task_kind == "nih":
        from arc_eval.tasks.nih import make_nih_tasks

        assert spec.tasks_per_seed is not None
        return make_nih_tasks(
            seed,
            spec.tasks_per_seed,
            noise_lines_per_side=spec.noise_lines_per_side,
            distractor_files=spec.distractor_files,
        )
    if "tasks" not in longbench_cache:
        from arc_eval.tasks.longbench import load_longbench

        longbench_cache["tasks"] = load_longbench(spec.data)
    tasks = longbench_cache["tasks"]
    return tasks[: spec.tasks_per_seed] if spec.tasks_per_seed is not None else tasks


def make_backend(spec: RunSpec, method: str | None = None) -> Backend:
    """The run's backend. With ``--tool-calling`` the recall/catalog tools go only to ``arc``'s backend."""
    if spec.backend == "scripted":
        from arc_eval.agent.scripted import ScriptedBackend, ScriptedPolicy

        return ScriptedBackend(
            ScriptedPolicy(allow_reexecution=spec.allow_reexecution),
            context_limit=spec.context_limit,
            tokenizer=f"hf:{spec.tokenizer_json}" if spec.tokenizer_json else spec.tokenizer,
            chat_format=spec.chat_format,
        )
    from arc_eval.backends.openai_backend import OpenAIBackend
    from arc_eval.protocol import recall_tool_specs

    return OpenAIBackend(
        list(spec.base_urls),
        spec.model,
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        tokenizer_json=spec.tokenizer_json,
        tools=recall_tool_specs() if spec.tool_calling and method == "arc" else None,
    )


@frozen
class RunResult:
    run_dir: Path
    ran: int  # tasks finished by this invocation
    skipped: int  # tasks already finished (resume)
    aborted: str | None  # why the run stopped early (None when it completed)
    table: str


def _progress(total: int, initial: int, enabled: bool, description: str) -> Any:
    import importlib

    tqdm: Any = importlib.import_module("tqdm").tqdm
    return tqdm(
        total=total, initial=initial, unit="task", desc=description, disable=not enabled,
        file=sys.stderr, dynamic_ncols=True, smoothing=0.05,
    )


async def _run_async(
    spec: RunSpec, writer: Any, rag_retriever: str, longbench_cache: dict[str, list[Task]]
) -> tuple[int, int, str | None]:
    from arc_eval.loop import run_task

    finished = writer.finished()
    shared = make_backend(spec)
    backends: dict[str, Backend] = {name: shared for name in spec.methods}
    if spec.tool_calling and "arc" in spec.methods:
        backends["arc"] = make_backend(spec, "arc")
    if spec.task_kind == "nih":
        assert spec.tasks_per_seed is not None
        per_seed = spec.tasks_per_seed
    else:
        per_seed = len(make_tasks(spec, spec.seeds[0], longbench_cache))
    total = len(spec.variants) * len(spec.seeds) * per_seed * len(spec.methods)
    done_before = sum(1 for key in finished if key[0] in spec.variants and key[1] in spec.methods)
    bar = _progress(total, min(done_before, total), spec.progress, f"{spec.task_kind} {spec.backend}")
    ran = 0
    aborted: str | None = None
    stop = asyncio.Event()

    async def worker(jobs: asyncio.Queue[tuple[Task, str]], variant: RunSpec, label: str, seed: int,
                     settings: MethodSettings) -> None:
        nonlocal ran, aborted
        while not stop.is_set():
            try:
                task, name = jobs.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                calls, outcome = await run_task(
                    task,
                    make_method(name, settings),
                    backends[name],
                    settings=settings,
                    max_steps=variant.max_steps or default_max_steps(task),
                    force_at_calls=variant.force_at_calls,
                    seed=seed,
                    variant=label,
                    model=spec.model,
                    temperature=spec.temperature,
                )
            except BackendUnavailable as failure:
                aborted = f"the backend is unavailable: {failure}"
                stop.set()
                return
            writer.write_task(calls, outcome)
            ran += 1
            bar.update(1)
            # Yield to the event loop: an in-process backend never suspends, and Ctrl-C (asyncio
            # cancels the run) must be seen between two tasks.
            await asyncio.sleep(0)

    try:
        for label in spec.variants:
            variant = spec.for_variant(label)
            settings = method_settings(variant, rag_retriever)
            for seed in spec.seeds:
                jobs: asyncio.Queue[tuple[Task, str]] = asyncio.Queue()
                for task in make_tasks(variant, seed, longbench_cache):
                    for name in spec.methods:
                        if (label, name, seed, task.task_id) not in finished:
                            jobs.put_nowait((task, name))
                workers = [
                    asyncio.create_task(worker(jobs, variant, label, seed, settings)) for _ in range(spec.concurrency)
                ]
                try:
                    await asyncio.gather(*workers)
                except BaseException:
                    for pending in workers:
                        pending.cancel()
                    raise
                if stop.is_set():
                    return ran, done_before, aborted
    finally:
        bar.close()
        for backend in {id(backend): backend for backend in backends.values()}.values():
            closer = getattr(backend, "aclose", None)
            if closer is not None:
                await closer()
    return ran, done_before, aborted


def run(spec: RunSpec, *, out: TextIO | None = None) -> RunResult:
    """Run (or resume) the whole spec; prints and returns the accuracy table."""
    spec.validate()
    rag_retriever = resolved_retriever(spec)
    longbench_cache: dict[str, list[Task]] = {}
    if spec.task_kind == "longbench":
        make_tasks(spec, spec.seeds[0], longbench_cache)  # a missing or malformed file fails here, before any record
    from arc_eval.records import RunReader, RunWriter

    writer = RunWriter(spec.out, manifest(spec, rag_retriever), resume=spec.resume)
    try:
        if writer.finished():
            print(f"resuming {spec.out}: {len(writer.finished())} task(s) already finished", file=sys.stderr)
        ran, skipped, aborted = asyncio.run(_run_async(spec, writer, rag_retriever, longbench_cache))
    finally:
        writer.close()
    from arc_eval.analysis.accuracy import summary_table

    table = summary_table(RunReader(spec.out).tasks())
    print(table, file=out if out is not None else sys.stdout)
    return RunResult(spec.out, ran, skipped, aborted, table)


# -- benchmarks (``arc-eval bench``; figures, never timed tests) --------------------------------


class _TimedBackend:
    """Wraps a backend and adds up the wall time spent inside it ("the model")."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: Any) -> Any:
        import time

        started = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    async def count_prompt_tokens(self, messages: Any) -> int:
        return await self.inner.count_prompt_tokens(messages)


def bench_throughput(methods: Sequence[str], tasks: int, *, rag_retriever: str = "bm25", seed: int = 42) -> str:
    """Wall time of a scripted NIH run (tasks x methods x 1 seed, records written) at the 16k preset."""
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="arc-eval-bench-") as directory:
        spec = RunSpec(
            task_kind="nih", methods=tuple(methods), seeds=(seed,), out=Path(directory) / "run",
            tasks_per_seed=tasks, rag_retriever=rag_retriever, progress=False, concurrency=1,
            command=("arc-eval", "bench"),
        )
        started = time.perf_counter()
        import io

        result = run(spec, out=io.StringIO())
        elapsed = time.perf_counter() - started
        from arc_eval.records import RunReader

        calls = len(RunReader(spec.out).calls())
    finished = result.ran
    return (
        f"throughput: scripted NIH, {tasks} tasks x {len(methods)} methods x 1 seed "
        f"({', '.join(methods)}; rag retriever {resolved_retriever(spec)}): {elapsed:.1f} s wall, "
        f"{finished} tasks, {calls} model calls, {finished / elapsed:.1f} tasks/s, "
        f"{1000 * elapsed / max(1, calls):.3f} ms per call all included\n{result.table}"
    )


def bench_harness_overhead(methods: Sequence[str], tasks: int, *, rag_retriever: str = "bm25", seed: int = 42) -> str:
    """Per-call harness time (everything but the backend's own work) per method, 16k/4096 preset."""
    import time

    from arc_eval.agent.scripted import ScriptedBackend
    from arc_eval.loop import run_task
    from arc_eval.tasks.nih import make_nih_tasks

    spec = RunSpec(task_kind="nih", methods=tuple(methods), seeds=(seed,), out=Path("unused"),
                   tasks_per_seed=tasks, rag_retriever=rag_retriever)
    settings = method_settings(spec, resolved_retriever(spec))
    task_list = make_nih_tasks(seed, tasks)
    warm_up = make_nih_tasks(seed + 1, 3)  # other tasks: loads tokenizer and retriever, leaves per-task caches cold
    lines = [f"harness overhead per call (16k context, 4096 max tokens, {tasks} NIH tasks; "
             "backend time = scripted policy + its prompt count, excluded):"]

    async def measure(name: str, batch: list[Task]) -> tuple[float, float, int]:
        backend = _TimedBackend(ScriptedBackend(context_limit=spec.context_limit))
        started = time.perf_counter()
        for task in batch:
            await run_task(task, make_method(name, settings), backend, settings=settings,
                           max_steps=default_max_steps(task), seed=seed)
        return time.perf_counter() - started, backend.seconds, backend.calls

    from arc_eval.agent.scripted import message_facts
    from arc_eval.methods.base import clear_counter_caches

    for name in methods:
        asyncio.run(measure(name, warm_up))
        clear_counter_caches()  # every method pays for counting its own new messages
        message_facts.cache_clear()
        total, inside, calls = asyncio.run(measure(name, task_list))
        overhead_ms = 1000 * (total - inside) / max(1, calls)
        lines.append(f"  {name:<17} {overhead_ms:7.3f} ms/call harness, {1000 * inside / max(1, calls):7.3f} ms/call "
                     f"backend, {calls} calls")
    return "\n".join(lines)


def bench_concurrency(concurrency: int, tasks: int, *, latency_ms: float = 20.0, seed: int = 42) -> str:
    """NIH over real HTTP against serve-scripted: requests in flight at once, and the speed-up over 1."""
    import tempfile
    import time

    from arc_eval.agent.scripted import ScriptedPolicy
    from arc_eval.backends.scripted_server import build_app, serve_in_thread

    figures = []
    for level in sorted({1, concurrency}):
        app = build_app(ScriptedPolicy(), max_model_len=16384, concurrency=concurrency, latency_ms=latency_ms)
        with serve_in_thread(app) as base_url, tempfile.TemporaryDirectory(prefix="arc-eval-bench-") as directory:
            spec = RunSpec(
                task_kind="nih", methods=("sliding_window",), seeds=(seed,), out=Path(directory) / "run",
                tasks_per_seed=tasks, backend="openai", base_urls=(base_url,), model="scripted",
                concurrency=level, progress=False, command=("arc-eval", "bench", "concurrency"),
            )
            import io

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
