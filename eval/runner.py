"""A run: plan (variants x seeds x tasks x methods) -> execute (N trajectories in flight) -> write (resumable).

``run(spec)`` validates the spec, builds its ``RunPlan`` (the manifest it records and its jobs),
opens the run directory with ``arc_eval.records.RunWriter`` (``resume=True`` continues a killed run:
finished tasks are skipped, unfinished ones redone from scratch, nothing duplicated), and ``execute``s
the plan: every unfinished job goes to ``concurrency`` asyncio workers sharing one backend, so an HTTP
server sees N requests at once and batches them. Each finished task is written (its call lines, then its
task line) the moment it ends. Before anything runs it says its plan (tasks x methods x seeds x variants,
backend, retriever and its cost; ``arc_eval.announce``), after the first tasks an estimate of the time left,
and a progress bar (tqdm, on stderr) counts tasks. At the end it prints the accuracy table of the whole run
directory (``arc_eval.analysis.accuracy.summary_table``) and the next step (the report command). SIGINT
and SIGTERM say at once what they wait for (the tasks in flight, cancelled, not recorded) and what is
recorded, and the run ends with status 130 or 143, resumable.

Jobs go variant by variant and seed by seed (tasks of one seed are generated when reached), and
within a seed task by task with every method, so an interrupted run leaves paired outcomes.

Before anything is written, every HTTP backend is checked (``check_server``: the model is served, its
window holds ``--context-limit``, it answers a 1-token completion with the key and, in tool mode, with
tools): a misconfigured server stops the run with the fix and no run directory. During the run, a
``BackendError`` (the server unavailable after retries, a refusal naming a configuration fault, a
reply that breaks the API) stops the run: the task in flight is not recorded and the message says
how to resume; it is never scored as a wrong answer.

The benchmarks (``arc-eval bench``) live in ``arc_eval.bench``.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, TextIO

from attrs import evolve, field, frozen
from tqdm import tqdm  # type: ignore[import-untyped]

from arc_ref.chat import CHAT_FORMATS
from arc_ref.config import TEMPLATE_FORMAT
from arc_ref.errors import ConfigError
from arc_ref.tokenizers import HF_DIR_PREFIX
from arc_eval.analysis.accuracy import summary_table
from arc_eval.announce import RunNotes, next_step_text, plan_text, program_name, stop_text
from arc_eval.backends.openai_backend import COUNT_MODES, OpenAIBackend
from arc_eval.loop import run_task
from arc_eval.methods import METHOD_NAMES, make_method
from arc_eval.counting import TokenCounter, shared_counter
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import TASK_TOOL_SPECS, system_prompt, tool_system_prompt
from arc_eval.methods.rag_memory import cuda_available, resolve_retriever
from arc_eval.records import RunReader, RunWriter
from arc_eval.schema import SCHEMA, TASK_KINDS, RecordKey
from arc_eval.agent.scripted import AGENT_VARIANTS, DEFAULT_AGENT
from arc_eval.tasks.longbench import DIFFICULTIES, load_longbench
from arc_eval.tasks.nih import DEFAULT_NIH_LAYOUT, NIH_LAYOUTS, make_nih_tasks
from arc_eval.types import (
    Backend,
    BackendError,
    BackendReplyError,
    BackendRequestError,
    BackendUnavailable,
    Task,
)

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
# The methods each sweep compares by default (the paper's Ablation section; eval/METHODS.md): only ARC reads
# the recall budget (every baseline would repeat one result per level), and the forced-compaction and
# fixture-size tables compare the five methods that compact (full_context never does). --methods overrides.
ABLATION_METHODS: dict[str, tuple[str, ...]] = {
    "recall-budget": ("arc",),
    "force-schedule": ("sliding_window", "llm_summary", "structured_state", "rag_memory", "arc"),
    "noise-lines": ("sliding_window", "llm_summary", "structured_state", "rag_memory", "arc"),
}
VARIANT_KEYS = ("recall_budget_chars", "recall_max_chars", "force_at_calls", "noise_lines_per_side")


@frozen
class PromptCounting:
    """How prompts are counted: an ``arc_ref`` tokenizer name and a chat format (``template``: the model
    directory's own chat template, with the tokenizer ``hf-dir:DIR``)."""

    tokenizer: str
    chat_format: str

    def counter(self) -> TokenCounter:
        """The run's counter (``arc_eval.counting``), shared by the methods and the backends."""
        return shared_counter(self.tokenizer, self.chat_format)


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
    tokenizer: str = "o200k_base"  # an arc_ref tokenizer name, or a model directory (DIR or hf-dir:DIR)
    tokenizer_json: str | None = None
    chat_format: str = "auto"  # auto: "template" with a model directory, else "chatml"
    concurrency: int = 8
    resume: bool = False
    tool_calling: bool = False
    data: str | None = None
    max_steps: int | None = None
    allow_reexecution: bool = False
    agent: str = DEFAULT_AGENT  # the scripted agent's rules (fair | floor); unused by --backend openai
    nih_layout: str = DEFAULT_NIH_LAYOUT  # varied | paper
    difficulty: str = "hard"  # LongBench-v2 items: hard (the paper's subset) | easy | all
    variants: Mapping[str, Mapping[str, Any]] = field(factory=lambda: {"": {}})
    command: tuple[str, ...] = ()
    progress: bool = True
    # The HTTP backend's connection (not the run's meaning: never recorded in the manifest)
    api_key: str | None = field(default=None, repr=False)  # None: OPENAI_API_KEY
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float | None = None  # None: the request timeout
    request_timeout_s: float = 600.0
    max_retries: int = 6
    count_with: str = "auto"

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
        repeated = sorted({seed for seed in self.seeds if self.seeds.count(seed) > 1})
        if repeated:
            raise ConfigError(
                f"--seeds lists {', '.join(map(str, repeated))} more than once; give each seed once "
                "(a seed draws its own tasks)"
            )
        if self.backend == "openai" and not self.base_urls:
            raise ConfigError("--backend openai needs at least one --base-url (e.g. http://localhost:8000/v1)")
        if not self.model:
            raise ConfigError("--model must name the model as served (e.g. Qwen/Qwen3-8B)")
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
        if self.agent not in AGENT_VARIANTS:
            raise ConfigError(f"unknown scripted agent {self.agent!r}; use one of {', '.join(AGENT_VARIANTS)}")
        if self.nih_layout not in NIH_LAYOUTS:
            raise ConfigError(f"unknown NIH layout {self.nih_layout!r}; use one of {', '.join(NIH_LAYOUTS)}")
        if self.difficulty not in DIFFICULTIES:
            raise ConfigError(f"unknown difficulty {self.difficulty!r}; use one of {', '.join(DIFFICULTIES)}")
        for flag, seconds in (("--connect-timeout", self.connect_timeout_s),
                              ("--first-byte-timeout", self.first_byte_timeout_s),
                              ("--request-timeout", self.request_timeout_s)):
            if seconds is not None and not 0 < seconds < math.inf:
                raise ConfigError(f"{flag} must be a number of seconds > 0, got {seconds}")
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries must be >= 0, got {self.max_retries}")
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable()):
            raise ConfigError("--api-key must be printable ASCII (it travels in an HTTP header)")
        if self.count_with not in COUNT_MODES:
            raise ConfigError(f"--count-with must be one of {', '.join(COUNT_MODES)}, got {self.count_with!r}")
        if self.tokenizer_json and _model_directory(self.tokenizer) is not None:
            raise ConfigError("--tokenizer-json and a model directory in --tokenizer name two tokenizers; give one")
        counting = self.prompt_counting()
        if counting.chat_format not in (*CHAT_FORMATS, TEMPLATE_FORMAT):
            known = ", ".join(("auto", *CHAT_FORMATS, TEMPLATE_FORMAT))
            raise ConfigError(f"unknown chat format {counting.chat_format!r}; use one of {known}")
        if counting.chat_format == TEMPLATE_FORMAT and not counting.tokenizer.startswith(HF_DIR_PREFIX):
            raise ConfigError(
                "--chat-format template renders the served model's own chat template: give its directory with"
                " --tokenizer DIR (tokenizer.json, and chat_template.jinja or tokenizer_config.json)"
            )
        if self.tool_calling and counting.chat_format != TEMPLATE_FORMAT:
            raise ConfigError(
                "--tool-calling counts the tool listing, tool calls and their results with the served model's own"
                " chat template: give the model directory with --tokenizer DIR (its tokenizer.json and chat template)"
            )
        counting.counter()  # an unknown tokenizer or format, or a template the core cannot split, fails here, clearly
        for label, overrides in self.variants.items():
            extra = [key for key in overrides if key not in VARIANT_KEYS]
            if extra:
                raise ConfigError(f"variant {label!r}: unknown parameter(s) {', '.join(extra)}")

    def prompt_counting(self) -> PromptCounting:
        """The tokenizer and chat format prompts are counted with: the one place the options are resolved.

        A model directory (``--tokenizer DIR`` or ``hf-dir:DIR``) gives its own tokenizer and, with the
        chat format ``auto``, its own chat template (rendered as vLLM renders it); ``--tokenizer-json``
        gives that file's tokenizer over ``--chat-format`` (ChatML by default).
        """
        directory = _model_directory(self.tokenizer)
        if self.tokenizer_json:
            tokenizer = f"hf:{self.tokenizer_json}"
        elif directory is not None:
            tokenizer = f"{HF_DIR_PREFIX}{directory}"
        else:
            tokenizer = self.tokenizer
        chat_format = self.chat_format
        if chat_format == "auto":
            chat_format = TEMPLATE_FORMAT if tokenizer.startswith(HF_DIR_PREFIX) else "chatml"
        return PromptCounting(tokenizer=tokenizer, chat_format=chat_format)

    def for_variant(self, label: str) -> RunSpec:
        """This spec with a variant's overrides applied."""
        overrides = dict(self.variants.get(label, {}))
        if "force_at_calls" in overrides:
            overrides["force_at_calls"] = tuple(overrides["force_at_calls"])
        return evolve(self, **overrides) if overrides else self


def _model_directory(tokenizer: str) -> str | None:
    """The model directory a --tokenizer value names (``hf-dir:DIR``, or a path to a directory), else None."""
    if tokenizer.startswith(HF_DIR_PREFIX):
        return tokenizer[len(HF_DIR_PREFIX):]
    return tokenizer if os.path.isdir(tokenizer) else None


# -- plan -----------------------------------------------------------------------------------------


def method_settings(spec: RunSpec, rag_retriever: str) -> MethodSettings:
    counting = spec.prompt_counting()
    return MethodSettings(
        action_mode="tools" if spec.tool_calling else "text",
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        keep_verbatim_chars=spec.keep_verbatim_chars,
        recall_budget_chars=spec.recall_budget_chars,
        recall_max_chars=spec.recall_max_chars,
        tokenizer=counting.tokenizer,
        chat_format=counting.chat_format,
        rag_top_k=spec.rag_top_k,
        rag_chunk_chars=spec.rag_chunk_chars,
        extra={"rag_retriever": rag_retriever},
    )


def resolved_retriever(spec: RunSpec) -> str:
    """The RAG retriever the run uses (recorded): only resolved when rag_memory runs."""
    return resolve_retriever(spec.rag_retriever) if "rag_memory" in spec.methods else "unused"


def default_max_steps(task: Task) -> int:
    """The goal's own plan plus ``MAX_STEPS_SLACK``: NIH one step per file + submit; LongBench one per page + answer."""
    if task.kind == "longbench":
        pages = task.meta.get("pages")
        if isinstance(pages, int) and pages > 0:
            return pages + 1 + MAX_STEPS_SLACK
        context = "".join(task.files.values())
        return math.ceil(len(context) / 4000) + 1 + MAX_STEPS_SLACK
    return len(task.files) + 1 + MAX_STEPS_SLACK


@frozen
class SeedBatch:
    """The unfinished jobs of one (variant, seed): each task with each method, in that order."""

    label: str
    variant: RunSpec  # the spec with the variant's overrides
    settings: MethodSettings
    seed: int
    jobs: tuple[tuple[Task, str], ...]


class RunPlan:
    """What a run does: the manifest it records and its jobs (variants x seeds x tasks x methods).

    Built before anything is written: an unavailable retriever or a missing or malformed LongBench
    file fails here, before any record.
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.rag_retriever = resolved_retriever(spec)
        self._longbench: list[Task] | None = (
            load_longbench(spec.data, difficulty=spec.difficulty) if spec.task_kind == "longbench" else None
        )

    def tasks(self, variant: RunSpec, seed: int) -> list[Task]:
        """The tasks of one seed (NIH: drawn from the seed; LongBench: the same items for every seed)."""
        if self._longbench is None:
            assert variant.tasks_per_seed is not None
            return make_nih_tasks(
                seed,
                variant.tasks_per_seed,
                noise_lines_per_side=variant.noise_lines_per_side,
                distractor_files=variant.distractor_files,
                layout=variant.nih_layout,
            )
        return self._longbench[: variant.tasks_per_seed] if variant.tasks_per_seed is not None else self._longbench

    def total_jobs(self) -> int:
        spec = self.spec
        per_seed = len(self.tasks(spec, spec.seeds[0])) if self._longbench is not None else spec.tasks_per_seed or 0
        return len(spec.variants) * len(spec.seeds) * per_seed * len(spec.methods)

    def batches(self, finished: set[RecordKey]) -> Iterator[SeedBatch]:
        """The unfinished jobs, variant by variant and seed by seed (tasks generated when reached)."""
        for label in self.spec.variants:
            variant = self.spec.for_variant(label)
            settings = method_settings(variant, self.rag_retriever)
            for seed in self.spec.seeds:
                jobs = tuple(
                    (task, name)
                    for task in self.tasks(variant, seed)
                    for name in self.spec.methods
                    if (label, name, seed, task.task_id) not in finished
                )
                yield SeedBatch(label, variant, settings, seed, jobs)

    def check_methods(self) -> None:
        """Build every method of every variant once, on the first seed's task with the longest goal, before
        anything runs: a configuration a method refuses (ARC's budgets at a small --context-limit, a budget
        fraction out of range...) is a ConfigError naming the method and the fix, never a task error."""
        spec = self.spec
        for label in spec.variants:
            variant = spec.for_variant(label)
            settings = method_settings(variant, self.rag_retriever)
            tasks = self.tasks(variant, spec.seeds[0])
            if not tasks:
                continue
            goal = max((task.goal for task in tasks), key=len)
            system = tool_system_prompt() if settings.action_mode == "tools" else system_prompt()
            for name in spec.methods:
                try:
                    make_method(name, settings).begin(system, goal)
                except ConfigError as refused:
                    where = f" (variant {label})" if label else ""
                    reason = str(refused).removeprefix(f"{name}: ")
                    raise ConfigError(f"method {name}{where} cannot run with these settings: {reason}") from None

    def manifest(self) -> dict[str, Any]:
        """The manifest's fields that describe the run (the writer adds versions, commit and time)."""
        return run_manifest(self.spec, self.rag_retriever)


def run_manifest(spec: RunSpec, rag_retriever: str) -> dict[str, Any]:
    """The manifest's fields that describe a run (the writer adds versions, commit and time)."""
    return {
        "schema": SCHEMA,
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


def run_config(spec: RunSpec, rag_retriever: str) -> dict[str, Any]:
    """The manifest's ``config``: every knob that changes what is run (and ``base_urls``, where the server is)."""
    counting = spec.prompt_counting()
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
        "tokenizer": counting.tokenizer,
        "chat_format": counting.chat_format,
        "temperature": spec.temperature,
        "max_steps": spec.max_steps,
        "tool_calling": spec.tool_calling,
        "allow_reexecution": spec.allow_reexecution,
        "agent": spec.agent if spec.backend == "scripted" else None,
        "nih_layout": spec.nih_layout if spec.task_kind == "nih" else None,
        "difficulty": spec.difficulty if spec.task_kind == "longbench" else None,
        "data": spec.data,
        "base_urls": list(spec.base_urls),
    }


# -- execute ----------------------------------------------------------------------------------------


def make_backend(spec: RunSpec) -> Backend:
    """The run's backend, counting with the run's counter (``spec.prompt_counting``). Every request carries
    its method's own tools (``ChatRequest.tools``); with ``--tool-calling`` the server's probe offers the
    task's tools."""
    counting = spec.prompt_counting()
    if spec.backend == "scripted":
        from arc_eval.agent.scripted import ScriptedBackend, ScriptedPolicy

        return ScriptedBackend(
            ScriptedPolicy(variant=spec.agent, allow_reexecution=spec.allow_reexecution),
            context_limit=spec.context_limit,
            tokenizer=counting.tokenizer,
            chat_format=counting.chat_format,
        )
    return OpenAIBackend(
        list(spec.base_urls),
        spec.model,
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        counter=counting.counter(),
        tools=TASK_TOOL_SPECS if spec.tool_calling else None,
        api_key=spec.api_key,
        connect_timeout_s=spec.connect_timeout_s,
        first_byte_timeout_s=spec.first_byte_timeout_s,
        request_timeout_s=spec.request_timeout_s,
        probe_timeout_s=min(60.0, spec.request_timeout_s),
        max_retries=spec.max_retries,
        count_with=spec.count_with,
    )


def make_backends(spec: RunSpec) -> dict[str, Backend]:
    """Each method's backend: one, shared (every request carries its method's own tools)."""
    shared = make_backend(spec)
    return {name: shared for name in spec.methods}


def _distinct(backends: Mapping[str, Backend]) -> list[Backend]:
    return list({id(backend): backend for backend in backends.values()}.values())


def describe_backend_error(failure: BackendError) -> str:
    """What stopped the run, in words (the error's own message names the server and the fix)."""
    if isinstance(failure, BackendUnavailable):
        return f"the server is unavailable: {failure}"
    if isinstance(failure, BackendReplyError):
        return f"the server's answer breaks the API: {failure}"
    if isinstance(failure, BackendRequestError):
        return f"the server cannot serve this run: {failure}"
    return str(failure)


async def check_backends(backends: Mapping[str, Backend]) -> str | None:
    """Check every HTTP backend before the first task (``OpenAIBackend.check_server``); the reason
    the run cannot start, or None. Says on stderr what was found and the retry budget."""
    try:
        for backend in _distinct(backends):
            if isinstance(backend, OpenAIBackend):
                print(f"checking {', '.join(backend.base_urls)}: GET /v1/models, then a 1-token completion "
                      f"(at most {backend.probe_timeout_s:g} s per attempt)", file=sys.stderr, flush=True)
                for info in await backend.check_server():
                    window = f"window {info.window} ({info.window_field})" if info.window else "window not said"
                    tools = "; tool mode checked" if backend.tools else ""
                    print(f"server {info.url.removesuffix('/models')}: {info.kind}, serves {backend.model}, "
                          f"{window}; counts with {backend.count_source}{tools}", file=sys.stderr)
                print(backend.retry_policy(), file=sys.stderr)
    except BackendError as failure:
        return describe_backend_error(failure)
    finally:
        for backend in _distinct(backends):
            closer = getattr(backend, "aclose", None)
            if closer is not None:
                await closer()
    return None


@frozen
class Executed:
    ran: int  # tasks finished by this invocation
    skipped: int  # tasks already finished (resume)
    aborted: str | None  # why the run stopped early (None when it completed)
    stopped_by: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM), if one did


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_handlers(on_stop: Any) -> list[signal.Signals]:
    """Call ``on_stop(name)`` on SIGINT or SIGTERM instead of dying silently (issue 19); the signals installed
    (none off the main thread or where the loop cannot)."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_stop, signum.name)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(signum)
    return installed


async def execute(plan: RunPlan, writer: RunWriter, backends: Mapping[str, Backend]) -> Executed:
    """Run every unfinished job of the plan, writing each task the moment it ends."""
    spec = plan.spec
    finished = writer.finished()
    total = plan.total_jobs()
    done_before = sum(1 for key in finished if key[0] in spec.variants and key[1] in spec.methods)
    bar = tqdm(
        total=total, initial=min(done_before, total), unit="task", desc=f"{spec.task_kind} {spec.backend}",
        disable=not spec.progress, file=sys.stderr, dynamic_ncols=True, smoothing=0.05,
    )  # fmt: skip
    ran = 0
    aborted: str | None = None
    stop = asyncio.Event()
    notes = RunNotes(total, min(done_before, total), lambda text: tqdm.write(text, file=sys.stderr))
    received: list[str] = []
    main_task = asyncio.current_task()

    def on_stop(name: str) -> None:
        """A stop signal: say what the run waits for and what is recorded, then cancel the tasks in flight."""
        if not received and main_task is not None:
            received.append(name)
            notes.say(stop_text(name, notes.in_flight, done_before + ran, spec.out))
            main_task.cancel()

    installed = install_stop_handlers(on_stop)

    async def worker(batch: SeedBatch, jobs: Iterator[tuple[Task, str]]) -> None:
        nonlocal ran, aborted
        for task, name in jobs:
            if stop.is_set():
                return
            notes.in_flight += 1
            try:
                calls, outcome = await run_task(
                    task,
                    make_method(name, batch.settings),
                    backends[name],
                    settings=batch.settings,
                    max_steps=batch.variant.max_steps or default_max_steps(task),
                    force_at_calls=batch.variant.force_at_calls,
                    seed=batch.seed,
                    variant=batch.label,
                    model=spec.model,
                    temperature=spec.temperature,
                )
            except BackendError as failure:
                if aborted is None:  # the first failure is the cause; the workers still in flight see the same
                    aborted = describe_backend_error(failure)
                stop.set()
                return
            finally:
                notes.in_flight -= 1
            writer.write_task(calls, outcome)
            ran += 1
            bar.update(1)
            notes.task_finished(len(batch.jobs))
            # Yield to the event loop: an in-process backend never suspends, and Ctrl-C (asyncio
            # cancels the run) must be seen between two tasks.
            await asyncio.sleep(0)

    try:
        for batch in plan.batches(finished):
            jobs = iter(batch.jobs)  # shared by the workers: each job is taken once
            workers = [asyncio.create_task(worker(batch, jobs)) for _ in range(spec.concurrency)]
            try:
                await asyncio.gather(*workers)
            except BaseException:
                for pending in workers:
                    pending.cancel()
                raise
            if stop.is_set():
                break
    except asyncio.CancelledError:
        if not received or main_task is None:
            raise
        main_task.uncancel()  # the stop signal's cancel, handled: the run ends with what is recorded
    finally:
        loop = asyncio.get_running_loop()
        for signum in installed:
            loop.remove_signal_handler(signum)
        bar.close()
        for backend in _distinct(backends):
            closer = getattr(backend, "aclose", None)
            if closer is not None:
                await closer()
    return Executed(ran, done_before, aborted, received[0] if received else None)


# -- run --------------------------------------------------------------------------------------------


@frozen
class RunResult:
    run_dir: Path
    ran: int  # tasks finished by this invocation
    skipped: int  # tasks already finished (resume)
    aborted: str | None  # why the run stopped early (None when it completed)
    table: str
    started: bool = True  # False: a check before the first task stopped it, and nothing was written
    stopped_by: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM): no table then


def run(spec: RunSpec, *, out: TextIO | None = None) -> RunResult:
    """Run (or resume) the whole spec: plan -> check the servers -> execute -> write; prints and returns
    the accuracy table."""
    spec.validate()
    plan = RunPlan(spec)
    plan.check_methods()
    on_gpu = plan.rag_retriever == "embeddings" and cuda_available()  # torch is imported only for embeddings
    print(plan_text(spec, plan.rag_retriever, plan.total_jobs(), on_gpu), file=sys.stderr, flush=True)
    backends = make_backends(spec)
    refused = asyncio.run(check_backends(backends))
    if refused is not None:
        return RunResult(spec.out, 0, 0, refused, "", started=False)
    with RunWriter(spec.out, plan.manifest(), resume=spec.resume) as writer:
        if writer.finished():
            print(f"resuming {spec.out}: {len(writer.finished())} task(s) already finished", file=sys.stderr)
        executed = asyncio.run(execute(plan, writer, backends))
    if executed.stopped_by is not None:
        return RunResult(spec.out, executed.ran, executed.skipped, None, "", stopped_by=executed.stopped_by)
    table = summary_table(RunReader(spec.out).tasks())
    print(table, file=out if out is not None else sys.stdout)
    if executed.aborted is None:
        print(next_step_text(spec.out, program_name(sys.argv[0])), file=out if out is not None else sys.stdout)
    return RunResult(spec.out, executed.ran, executed.skipped, executed.aborted, table)
