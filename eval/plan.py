"""A run's plan: what it records (the manifest), its jobs (variants x seeds x tasks x methods) and its one counter.

``RunPlan(spec)`` is built once per run, before anything is written: it resolves how prompts are counted
(``RunSpec.prompt_counting``, once), validates the spec with it (``RunSpec.validate``, once), builds the run's one
token counter (an unknown tokenizer or a template the core cannot split fails here), resolves each method's options
(an unavailable retriever) and opens the task's source (a missing or malformed LongBench file). Jobs go variant by
variant and seed by seed (tasks of one seed are generated when reached), and within a seed task by task with every
method, so an interrupted run leaves paired outcomes.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any, Iterator, Mapping

from attrs import evolve, frozen

from arc_ref.errors import ConfigError
from arc_eval.counting import TokenCounter
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import system_prompt, tool_system_prompt
from arc_eval.registry import TASKS, TaskSource, recorded_options
from arc_eval.run_spec import PromptCounting, RunSpec
from arc_eval.schema import SCHEMA, RecordKey
from arc_eval.types import Task

MAX_STEPS_SLACK = 10  # steps beyond the goal's own plan: recalls, retries, answering


def method_settings(spec: RunSpec, counter: TokenCounter) -> MethodSettings:
    """What every method of one variant is built with: the run's budgets, its counter and each method's options
    (resolved: RAG's ``auto`` retriever is the one the run records)."""
    return MethodSettings(
        action_mode="tools" if spec.tool_calling else "text",
        context_limit=spec.context_limit,
        max_tokens=spec.max_tokens,
        keep_verbatim_chars=spec.keep_verbatim_chars,
        counter=counter,
        method_options={name: spec.method_opts(name).resolved() for name in spec.methods},
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

    Built from a spec, it resolves how prompts are counted and validates the spec with it (once each: a plan is
    all a command line needs to name its default run directory); ``prepare`` then builds the run's one counter
    (an unknown tokenizer or a template the core cannot split fails here), resolves each method's options (an
    unavailable retriever) and opens the task's source (a missing or malformed LongBench file), before anything
    is written.
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.counting = spec.prompt_counting()
        spec.validate(self.counting)
        self._sources: dict[Any, TaskSource] = {}

    def prepare(self) -> RunPlan:
        """Build what the run needs before anything runs (the counter, the methods' options, the task source)."""
        self.counter  # noqa: B018 - built now, so that its failure comes before anything is written
        self.method_options  # noqa: B018
        self.source(self.spec)
        return self

    @functools.cached_property
    def counter(self) -> TokenCounter:
        """The run's one token counter (``PromptCounting.counter``), handed to every method and the backend."""
        return self.counting.counter()

    @functools.cached_property
    def method_options(self) -> dict[str, Any]:
        """Each method's options as the run uses and records them (``ComponentOptions.resolved``)."""
        return {name: self.spec.method_opts(name).resolved() for name in self.spec.methods}

    def with_out(self, out: Path) -> RunPlan:
        """The same plan writing to ``out`` (the run directory does not change what is run)."""
        moved = copy.copy(self)
        moved.spec = evolve(self.spec, out=out)
        return moved

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
        return run_manifest(self.spec, self.method_options, self.counting)

    def notes(self) -> list[str]:
        """What each method of the run says of itself in the plan (its options' ``plan_note``: rag_memory's
        retriever and its cost)."""
        jobs = self.total_jobs() // max(1, len(self.spec.methods))
        notes = (self.method_options[name].plan_note(jobs) for name in self.spec.methods)
        return [note for note in notes if note is not None]


def describe_backend(spec: RunSpec) -> str:
    """The backend as the plan names it (its options' ``describe``, given the served model; else its name)."""
    described = spec.backend_opts().describe(spec.served_model())
    return described if described is not None else f"backend {spec.backend}"


def run_manifest(spec: RunSpec, method_options: Mapping[str, Any] | None = None,
                 counting: PromptCounting | None = None) -> dict[str, Any]:
    """The manifest's fields that describe a run (the writer adds versions, commit and time).

    ``method_options``: each method's options as the run resolved them (RunPlan's); ``counting``: the run's
    resolved counting (RunPlan's); None: resolved here."""
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
        "config": run_config(spec, method_options, counting),
    }


def run_config(spec: RunSpec, method_options: Mapping[str, Any] | None = None,
               counting: PromptCounting | None = None) -> dict[str, Any]:
    """The manifest's ``config``: every knob that changes what is run: the run's own, then the recorded options
    of the task, of each method of the run and of the backend (``arc_eval.registry.recorded_options``)."""
    if counting is None:
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
        options = method_options[name] if method_options is not None else spec.method_opts(name).resolved()
        config.update(recorded_options(options))
    config.update(recorded_options(spec.backend_opts()))
    return config
