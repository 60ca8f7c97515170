"""A run: plan (variants x seeds x tasks x methods) -> execute (N trajectories in flight) -> write (resumable).

``run(spec)`` validates the spec, builds its ``RunPlan`` (the manifest it records, its jobs, and the run's
one token counter), opens the run directory with ``arc_eval.records.RunWriter`` (``resume=True`` continues a
killed run: finished tasks are skipped, unfinished ones redone from scratch, nothing duplicated), and
``execute``s the plan: every unfinished job goes to ``concurrency`` asyncio workers sharing one backend, so
an HTTP server sees N requests at once and batches them. Each finished task is written (its call lines,
then its task line) the moment it ends. Before anything runs it says its plan (tasks x methods x seeds x
variants, backend, each method's own note such as rag_memory's retriever and its cost; ``arc_eval.announce``),
after the first tasks an estimate of the time left, and a progress bar (tqdm, on stderr) counts tasks. At
the end it prints the accuracy table of the whole run directory (``arc_eval.analysis.accuracy.summary_table``)
and the next step (the report command). SIGINT and SIGTERM say at once what they wait for (the tasks in
flight, cancelled, not recorded) and what is recorded, and the run ends with status 130 or 143, resumable.

Tasks, methods and backends are looked up by name in ``arc_eval.registry``: this module names none of
them. A spec carries the run's own knobs (budgets, counting, schedule) and each component's options
(``task_options``, ``method_options``, ``backend_options``); ``RunSpec.build`` routes knobs by name to
their one owner.

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
import os
import signal
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, TextIO

import attrs
from attrs import evolve, field, frozen
from tqdm import tqdm  # type: ignore[import-untyped]

from arc_ref.chat import CHAT_FORMATS
from arc_ref.config import PRESETS, TEMPLATE_FORMAT
from arc_ref.errors import ConfigError
from arc_ref.tokenizers import HF_DIR_PREFIX
from arc_eval.analysis.accuracy import summary_table
from arc_eval.announce import RunNotes, next_step_text, plan_text, program_name, stop_text
from arc_eval.arguments import non_negative_float, positive_int
from arc_eval.counting import DEFAULT_TOKENIZER, TokenCounter, make_counter, model_directory, resolve_counting
from arc_eval.loop import DEFAULT_FORCE_AT_CALLS, run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import system_prompt, tool_system_prompt
from arc_eval.records import RunReader, RunWriter
from arc_eval.registry import (
    BACKENDS,
    METHODS,
    TASKS,
    BackendEntry,
    BackendRun,
    TaskEntry,
    TaskSource,
    option,
    option_names,
    options_check,
    options_resolved,
    recorded_options,
    with_overrides,
)
from arc_eval.schema import SCHEMA, RecordKey
from arc_eval.types import (
    Backend,
    BackendError,
    BackendReplyError,
    BackendRequestError,
    BackendUnavailable,
    Task,
)

PAPER = PRESETS["paper"]  # the paper's setting: the defaults of the window, the completion cap, keep-verbatim
PAPER_SEEDS = (42, 82, 122)  # the paper's seeds: the default of --seeds
MAX_STEPS_SLACK = 10  # steps beyond the goal's own plan: recalls, retries, answering
CHAT_FORMAT_CHOICES = ("auto", *CHAT_FORMATS, TEMPLATE_FORMAT)

# The paper's ablation sweeps (Ablation section): each variant's overrides name options of the run or of
# its components (``RunSpec.build`` routes them).
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


def ablation_methods(sweep: str) -> tuple[str, ...]:
    """The methods a sweep compares by default (the paper's Ablation section; eval/METHODS.md): the methods that
    own an option the sweep varies (the recall budget: ARC alone; every other method would repeat one result per
    level), else every method that compacts (the forced-compaction and fixture-size tables; full context never
    does: ``MethodEntry.compacts``). --methods overrides."""
    varied = {name for params in ABLATIONS[sweep].values() for name in params}
    owners = tuple(entry.name for entry in METHODS.entries() if varied & set(option_names(entry.options)))
    return owners or tuple(entry.name for entry in METHODS.entries() if entry.compacts)


@frozen
class PromptCounting:
    """How prompts are counted: an ``arc_ref`` tokenizer name and a chat format (``template``: the model
    directory's own chat template, with the tokenizer ``hf-dir:DIR``)."""

    tokenizer: str
    chat_format: str

    def counter(self) -> TokenCounter:
        """A counter of this tokenizer and format (``arc_eval.counting.make_counter``); a run builds one."""
        return make_counter(self.tokenizer, self.chat_format)


def _tuple_of_ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(value) for value in values)


def _absolute_path(path: str | None) -> str | None:
    """A path made absolute (so the run's meaning does not depend on the working directory)."""
    return None if path is None else os.path.abspath(path)


def _default_backend() -> str:
    return BACKENDS.entries()[0].name


@frozen
class RunSpec:
    """Everything one ``arc-eval`` run needs (built by the CLI; recorded in the manifest).

    The fields made with ``option`` are the run's own knobs (their flags, defaults and bounds are derived
    from here); the components' knobs are their options instances (None / absent: the defaults).
    """

    task_kind: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...] = field(converter=_tuple_of_ints)
    out: Path
    tasks_per_seed: int | None = None  # None: the task's default (its ``count_default``)
    backend: str = field(factory=_default_backend)
    model: str | None = option(None, help="model name as served (e.g. Qwen/Qwen3-8B; default: the backend's)")
    context_limit: int = option(PAPER.context_limit, parse=positive_int, minimum=1, metavar="L_CTX",
                                help="the server's max model length")
    max_tokens: int = option(PAPER.max_completion, parse=positive_int, minimum=1, metavar="G_MAX",
                             help="completion cap per call")
    temperature: float = option(0.0, parse=non_negative_float, minimum=0, metavar="T", help="sampling temperature")
    force_at_calls: tuple[int, ...] = option(DEFAULT_FORCE_AT_CALLS, parse=positive_int, nargs="*", minimum=1,
                                             metavar="K", converter=_tuple_of_ints,
                                             help="agent steps before which compaction is forced (none: empty)")
    keep_verbatim_chars: int = option(PAPER.keep_verbatim_chars, parse=positive_int, minimum=1, metavar="CHARS",
                                      help="observations shorter than this are kept verbatim by the condensing "
                                           "methods and ARC")
    tokenizer: str = option(DEFAULT_TOKENIZER, metavar="DIR|NAME",
                            help="what every prompt is counted with: the served model's directory (DIR or "
                                 "hf-dir:DIR: its tokenizer.json and chat template, rendered as vLLM renders them, "
                                 "so counts are the server's), or an arc_ref tokenizer over --chat-format: bytes, "
                                 "o200k_base, cl100k_base, hf:PATH")
    tokenizer_json: str | None = option(None, metavar="PATH", converter=_absolute_path,
                                        help="a tokenizer.json, over --chat-format (ChatML by default); a model "
                                             "directory in --tokenizer is exact")
    chat_format: str = option("auto", choices=CHAT_FORMAT_CHOICES,
                              help="auto: template with a model directory, else chatml")
    tool_calling: bool = option(False, store_true=True,
                                help="every method acts through function tools (the task's commands; ARC's recall "
                                     "and catalog commands too), one call per reply; needs --tokenizer DIR")
    max_steps: int | None = option(None, parse=positive_int, minimum=1, metavar="N",
                                   help="agent steps per task (default: the goal's plan + 10)")
    concurrency: int = option(8, parse=positive_int, minimum=1, metavar="N", help="trajectories in flight at once")
    resume: bool = False
    variants: Mapping[str, Mapping[str, Any]] = field(factory=lambda: {"": {}})
    command: tuple[str, ...] = ()
    progress: bool = True
    task_options: Any = None  # the task's options (None: its defaults)
    method_options: Mapping[str, Any] = field(factory=dict)  # method name -> its options (absent: defaults)
    backend_options: Any = None  # the backend's options (None: its defaults)

    @classmethod
    def build(cls, task_kind: str, methods: Iterable[str], seeds: Iterable[int], out: Path,
              **knobs: Any) -> RunSpec:
        """A spec from flat knobs: each knob goes to its one owner (the run, the task, a method or the backend)."""
        run_fields = {attribute.name for attribute in attrs.fields(cls)} - {
            "task_options", "method_options", "backend_options"}
        own = {name: value for name, value in knobs.items() if name in run_fields}
        rest = {name: value for name, value in knobs.items() if name not in run_fields}
        backend = str(own.get("backend") or _default_backend())
        task_entry = TASKS.get(task_kind)
        backend_entry = BACKENDS.get(backend)
        task_options = _options_with(task_entry.options, rest)
        backend_options = _options_with(backend_entry.options, rest)
        method_options = {}
        for entry in METHODS.entries():
            if set(option_names(entry.options)) & set(rest):
                method_options[entry.name] = _options_with(entry.options, rest)
        claimed = (set(option_names(task_entry.options)) | set(option_names(backend_entry.options))
                   | {name for entry in METHODS.entries() for name in option_names(entry.options)})
        unknown = sorted(set(rest) - claimed)
        if unknown:
            raise ConfigError(f"unknown run option(s) {', '.join(unknown)} for task {task_kind} and backend {backend}")
        return cls(task_kind=task_kind, methods=tuple(methods), seeds=tuple(seeds), out=out, **own,
                   task_options=task_options, method_options=method_options, backend_options=backend_options)

    @property
    def task_entry(self) -> TaskEntry:
        return TASKS.get(self.task_kind)

    @property
    def backend_entry(self) -> BackendEntry:
        return BACKENDS.get(self.backend)

    def task_opts(self) -> Any:
        """The task's options (its defaults when the spec gives none)."""
        return self.task_options if self.task_options is not None else self.task_entry.options()

    def backend_opts(self) -> Any:
        """The backend's options (its defaults when the spec gives none)."""
        return self.backend_options if self.backend_options is not None else self.backend_entry.options()

    def method_opts(self, name: str) -> Any:
        """A method's options (its defaults when the spec gives none)."""
        given = self.method_options.get(name)
        return given if given is not None else METHODS.get(name).options()

    def served_model(self) -> str:
        """The model name the records carry: ``--model``, else the backend's default."""
        model = self.model if self.model is not None else self.backend_entry.default_model(self.backend_opts())
        if not model:
            raise ConfigError(f"--backend {self.backend} needs --model, the model name as served (e.g. Qwen/Qwen3-8B)")
        return model

    def task_count(self) -> int | None:
        """Tasks per seed: the spec's, else the task's default (None: all)."""
        return self.tasks_per_seed if self.tasks_per_seed is not None else self.task_entry.count_default

    def validate(self) -> None:
        """Raise ConfigError with a clear message for any inconsistent setting (each option's own bounds are
        checked when it is built)."""
        task = self.task_entry
        backend = self.backend_entry
        if not self.methods:
            raise ConfigError("no method selected")
        for name in self.methods:
            METHODS.get(name)  # an unknown name names the known ones
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError("a method is listed twice")
        unknown = sorted(set(self.method_options) - set(METHODS.names()))
        if unknown:
            raise ConfigError(f"options given for unknown method(s) {', '.join(unknown)}")
        for given, owner_class, owner in ((self.task_options, task.options, f"task {task.name}"),
                                          (self.backend_options, backend.options, f"backend {backend.name}")):
            if given is not None and not isinstance(given, owner_class):
                raise ConfigError(f"{owner}: options must be {owner_class.__name__}, got {type(given).__name__}")
        for name, given in self.method_options.items():
            options_class = METHODS.get(name).options
            if not isinstance(given, options_class):
                raise ConfigError(f"method {name}: options must be {options_class.__name__}, got {type(given).__name__}")
        if not self.seeds:
            raise ConfigError("no seed given")
        repeated = sorted({seed for seed in self.seeds if self.seeds.count(seed) > 1})
        if repeated:
            raise ConfigError(
                f"--seeds lists {', '.join(map(str, repeated))} more than once; give each seed once "
                "(a seed draws its own tasks)"
            )
        self.served_model()
        options_check(self.task_opts())
        options_check(self.backend_opts())
        count = self.task_count()
        if count is not None and count < 1:
            raise ConfigError(f"{task.count_flag} must be at least 1")
        if self.max_tokens >= self.context_limit:
            raise ConfigError(
                f"--max-tokens ({self.max_tokens}) must be below --context-limit ({self.context_limit})"
            )
        if self.tokenizer_json and model_directory(self.tokenizer) is not None:
            raise ConfigError("--tokenizer-json and a model directory in --tokenizer name two tokenizers; give one")
        counting = self.prompt_counting()
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
        for label in self.variants:
            self.for_variant(label)  # an unknown override, or one out of bounds, fails here

    def prompt_counting(self) -> PromptCounting:
        """The tokenizer and chat format prompts are counted with: the one place the options are resolved.

        A model directory (``--tokenizer DIR`` or ``hf-dir:DIR``) gives its own tokenizer and, with the
        chat format ``auto``, its own chat template (rendered as vLLM renders it); ``--tokenizer-json``
        gives that file's tokenizer over ``--chat-format`` (ChatML by default).
        """
        tokenizer, chat_format = resolve_counting(self.tokenizer, self.chat_format, self.tokenizer_json)
        return PromptCounting(tokenizer=tokenizer, chat_format=chat_format)

    def for_variant(self, label: str) -> RunSpec:
        """This spec with a variant's overrides applied, each to its owner (the run, the task, a method)."""
        overrides = dict(self.variants.get(label, {}))
        if not overrides:
            return self
        run_names = {attribute.name for attribute in attrs.fields(RunSpec)
                     if attribute.name not in ("task_options", "method_options", "backend_options")}
        own = {name: value for name, value in overrides.items() if name in run_names}
        task_names = set(option_names(self.task_entry.options))
        method_names_ = {name for entry in METHODS.entries() for name in option_names(entry.options)}
        other_tasks = {name: entry.name for entry in TASKS.entries() if entry.name != self.task_kind
                       for name in option_names(entry.options)}
        for name in overrides:
            if name in own or name in task_names or name in method_names_:
                continue
            if name in other_tasks:
                raise ConfigError(f"variant {label!r} sets {name}, an option of task {other_tasks[name]}: "
                                  f"use --task {other_tasks[name]}")
            raise ConfigError(f"variant {label!r}: unknown parameter(s) {name}")
        if "force_at_calls" in own:
            own["force_at_calls"] = tuple(own["force_at_calls"])
        method_options = dict(self.method_options)
        for entry in METHODS.entries():
            if set(option_names(entry.options)) & set(overrides):
                method_options[entry.name] = with_overrides(self.method_opts(entry.name), overrides)
        return evolve(self, **own, task_options=with_overrides(self.task_opts(), overrides),
                      method_options=method_options)


def _options_with(options_class: type, knobs: Mapping[str, Any]) -> Any:
    """An options instance of ``options_class`` with the knobs that name its fields."""
    names = set(option_names(options_class))
    return options_class(**{name: (tuple(value) if isinstance(value, list) else value)
                            for name, value in knobs.items() if name in names})


# -- plan -----------------------------------------------------------------------------------------


def method_settings(spec: RunSpec, counter: TokenCounter) -> MethodSettings:
    """What every method of one variant is built with: the run's budgets, its counter and each method's options
    (resolved: RAG's ``auto`` retriever is the one the run records)."""
    return MethodSettings(
        action_mode="tools" if spec.tool_calling else "text",
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        keep_verbatim_chars=spec.keep_verbatim_chars,
        counter=counter,
        method_options={name: options_resolved(spec.method_opts(name)) for name in spec.methods},
    )


def default_max_steps(task: Task) -> int:
    """The goal's own plan (``TaskEntry.plan_steps``) plus ``MAX_STEPS_SLACK``."""
    return TASKS.get(task.kind).plan_steps(task) + MAX_STEPS_SLACK


@frozen
class SeedBatch:
    """The unfinished jobs of one (variant, seed): each task with each method, in that order."""

    label: str
    variant: RunSpec  # the spec with the variant's overrides
    settings: MethodSettings
    seed: int
    jobs: tuple[tuple[Task, str], ...]


class RunPlan:
    """What a run does: the manifest it records, its jobs (variants x seeds x tasks x methods) and its counter.

    Built before anything is written: the run's one counter is built here (an unknown tokenizer or a template
    the core cannot split fails here); so are each method's resolved options (an unavailable retriever) and
    the task's source (a missing or malformed LongBench file).
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.counter = spec.prompt_counting().counter()
        self.method_options = {name: options_resolved(spec.method_opts(name)) for name in spec.methods}
        self._sources: dict[Any, TaskSource] = {}
        self.source(spec)

    def source(self, variant: RunSpec) -> TaskSource:
        """The task source of a variant's task options (opened once per options value)."""
        options = variant.task_opts()
        if options not in self._sources:
            self._sources[options] = variant.task_entry.source(options)
        return self._sources[options]

    def settings(self, variant: RunSpec) -> MethodSettings:
        return method_settings(variant, self.counter)

    def tasks(self, variant: RunSpec, seed: int) -> list[Task]:
        """The tasks of one seed."""
        return self.source(variant).tasks(seed, variant.task_count())

    def total_jobs(self) -> int:
        spec = self.spec
        per_seed = len(self.tasks(spec, spec.seeds[0]))
        return len(spec.variants) * len(spec.seeds) * per_seed * len(spec.methods)

    def batches(self, finished: set[RecordKey]) -> Iterator[SeedBatch]:
        """The unfinished jobs, variant by variant and seed by seed (tasks generated when reached)."""
        for label in self.spec.variants:
            variant = self.spec.for_variant(label)
            settings = self.settings(variant)
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
            settings = self.settings(variant)
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
        return run_manifest(self.spec, self.method_options)

    def notes(self) -> list[str]:
        """What each method of the run says of itself in the plan (its options' ``plan_note``, if any: rag_memory's
        retriever and its cost)."""
        jobs = self.total_jobs() // max(1, len(self.spec.methods))
        notes = []
        for name in self.spec.methods:
            note = getattr(self.method_options[name], "plan_note", None)
            if note is not None:
                notes.append(str(note(jobs)))
        return notes


def describe_backend(spec: RunSpec) -> str:
    """The backend as the plan names it (its options' ``describe``, given the served model; else its name)."""
    describe = getattr(spec.backend_opts(), "describe", None)
    return str(describe(spec.served_model())) if describe is not None else f"backend {spec.backend}"


def run_manifest(spec: RunSpec, method_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's fields that describe a run (the writer adds versions, commit and time).

    ``method_options``: each method's options as the run resolved them (RunPlan's); None: resolved here."""
    return {
        "schema": SCHEMA,
        "command": list(spec.command),
        "task_kind": spec.task_kind,
        "methods": list(spec.methods),
        "seeds": list(spec.seeds),
        "tasks_per_seed": spec.task_count(),
        "model": spec.served_model(),
        "backend": spec.backend,
        "context_limit": spec.context_limit,
        "max_tokens": spec.max_tokens,
        "variants": {label: dict(params) for label, params in spec.variants.items()},
        "config": run_config(spec, method_options),
    }


def run_config(spec: RunSpec, method_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's ``config``: every knob that changes what is run: the run's own, then the recorded options
    of the task, of each method of the run and of the backend (``arc_eval.registry.recorded_options``)."""
    counting = spec.prompt_counting()
    config: dict[str, Any] = {
        "force_at_calls": list(spec.force_at_calls),
        "keep_verbatim_chars": spec.keep_verbatim_chars,
        "tokenizer": counting.tokenizer,
        "chat_format": counting.chat_format,
        "temperature": spec.temperature,
        "max_steps": spec.max_steps,
        "tool_calling": spec.tool_calling,
    }
    config.update(recorded_options(spec.task_opts()))
    for name in spec.methods:
        options = method_options[name] if method_options is not None else options_resolved(spec.method_opts(name))
        config.update(recorded_options(options))
    config.update(recorded_options(spec.backend_opts()))
    return config


# -- execute ----------------------------------------------------------------------------------------


def make_backend(spec: RunSpec, counter: TokenCounter) -> Backend:
    """The run's backend (its registry entry's factory), counting with the run's counter. Every request carries
    its method's own tools (``ChatRequest.tools``); with ``--tool-calling`` the server's probe offers the
    task's tools."""
    run = BackendRun(model=spec.served_model(), context_limit=spec.context_limit, max_tokens=spec.max_tokens,
                     temperature=spec.temperature, counter=counter, tool_calling=spec.tool_calling)
    return spec.backend_entry.factory(spec.backend_opts(), run)


def make_backends(spec: RunSpec, counter: TokenCounter) -> dict[str, Backend]:
    """Each method's backend: one, shared (every request carries its method's own tools)."""
    shared = make_backend(spec, counter)
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
    """Check every backend that can be checked before the first task (its ``preflight``, e.g. an HTTP server's);
    the reason the run cannot start, or None. Each says on stderr what it found."""
    try:
        for backend in _distinct(backends):
            preflight = getattr(backend, "preflight", None)
            if preflight is not None:
                await preflight(sys.stderr)
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
                    model=spec.served_model(),
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
    print(plan_text(spec, plan.total_jobs(), describe_backend(spec), plan.notes()), file=sys.stderr, flush=True)
    backends = make_backends(spec, plan.counter)
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
