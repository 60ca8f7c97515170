"""What one ``arc-eval`` run is: ``RunSpec`` (the run's own knobs and each component's options) and how its
settings reach their owners.

Every setting has one owner: the run itself (a ``RunSpec`` field), the task, a method or the backend (an option of
its registered options class, ``arc_eval.registry``). ``route_settings`` is the one routing of flat settings to
those owners: ``RunSpec.build`` uses it for a run's knobs, ``RunSpec.for_variant`` for an ablation variant's
overrides (``arc_eval.ablations``). ``RunSpec.validate`` checks the whole spec (the run builds it once, in its plan:
``arc_eval.plan.RunPlan``); ``RunSpec.prompt_counting`` resolves the tokenizer and chat format prompts are counted
with (the plan resolves it once per run).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs
from attrs import evolve, field, frozen

from arc_ref.chat import CHAT_FORMATS
from arc_ref.config import MAX_CONFIG_INTEGER, PRESETS, TEMPLATE_FORMAT
from arc_ref.errors import ConfigError
from arc_ref.tokenizers import HF_DIR_PREFIX
from arc_eval.counting import DEFAULT_TOKENIZER, TokenCounter, make_counter, model_directory, resolve_counting
from arc_eval.loop import DEFAULT_FORCE_AT_CALLS
from arc_eval.registry import (
    BACKENDS,
    METHODS,
    TASKS,
    MAX_CONCURRENCY,
    BackendEntry,
    TaskEntry,
    float_option,
    int_option,
    option,
    option_names,
    with_overrides,
)

PAPER = PRESETS["paper"]  # the paper's setting: the defaults of the window, the completion cap, keep-verbatim
PAPER_SEEDS = (42, 82, 122)  # the paper's seeds: the default of --seeds
CHAT_FORMAT_CHOICES = ("auto", *CHAT_FORMATS, TEMPLATE_FORMAT)
COMPONENT_OPTIONS = ("task_options", "method_options", "backend_options")  # RunSpec's fields of its components

# The bounds of the run's own numbers, and why (every number of arc-eval has an upper bound: issue 31):
# - the window, the completion cap and keep-verbatim reach the core's Config: at most its bound on every integer,
#   MAX_CONFIG_INTEGER = 2^31 - 1 (spec/parameters.md, check 1);
# - a task's steps: each is a model call whose record the task holds until it ends, and full context's transcript
#   grows by an observation per step: MAX_STEPS, 250 times the longest plan of the paper's tasks (~40 steps);
# - trajectories in flight: arc_eval.registry.MAX_CONCURRENCY (4096: its reason there);
# - the temperature: the OpenAI API's range, 0 to 2.
# - a seed: recorded in every line and read back by any JSON reader (a port's too): a signed 64-bit integer.
MAX_STEPS = 10_000
MIN_SEED = -(2**63)
MAX_SEED = 2**63 - 1
MAX_TEMPERATURE = 2.0


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
class Routing:
    """Flat settings by owner (``route_settings``): the run's own, the task's, each method's (only the methods
    that own one), the backend's, and the names no owner claims (in the order given)."""

    run: dict[str, Any]
    task: dict[str, Any]
    methods: dict[str, dict[str, Any]]
    backend: dict[str, Any]
    unclaimed: tuple[str, ...]


def run_setting_names() -> frozenset[str]:
    """The names of the run's own settings: ``RunSpec``'s fields but its components' options."""
    return frozenset(attribute.name for attribute in attrs.fields(RunSpec)) - set(COMPONENT_OPTIONS)


def route_settings(settings: Mapping[str, Any], task: TaskEntry, backend: BackendEntry | None) -> Routing:
    """Each setting to its one owner: the run (a ``RunSpec`` field), the task, a method, or (``backend`` given) the
    backend; a name no owner claims is listed in ``unclaimed`` for the caller to refuse in its own words."""
    run_names = run_setting_names()
    task_names = set(option_names(task.options))
    backend_names = set(option_names(backend.options)) if backend is not None else set()
    method_names = {entry.name: set(option_names(entry.options)) for entry in METHODS.entries()}
    routed = Routing(run={}, task={}, methods={}, backend={}, unclaimed=())
    unclaimed: list[str] = []
    for name, value in settings.items():
        if name in run_names:
            routed.run[name] = value
            continue
        owners = [method for method, names in method_names.items() if name in names]
        claimed = bool(owners) or name in task_names or name in backend_names
        if name in task_names:
            routed.task[name] = value
        if name in backend_names:
            routed.backend[name] = value
        for method in owners:
            routed.methods.setdefault(method, {})[name] = value
        if not claimed:
            unclaimed.append(name)
    ordered = {method: routed.methods[method] for method in method_names if method in routed.methods}
    return evolve(routed, methods=ordered, unclaimed=tuple(unclaimed))


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
    context_limit: int = int_option(PAPER.context_limit, minimum=1, maximum=MAX_CONFIG_INTEGER, metavar="L_CTX",
                                    help="the server's max model length")
    max_tokens: int = int_option(PAPER.max_completion, minimum=1, maximum=MAX_CONFIG_INTEGER, metavar="G_MAX",
                                 help="completion cap per call")
    temperature: float = float_option(0.0, minimum=0, maximum=MAX_TEMPERATURE, metavar="T",
                                      help="sampling temperature")
    force_at_calls: tuple[int, ...] = int_option(DEFAULT_FORCE_AT_CALLS, nargs="*", minimum=1, maximum=MAX_STEPS,
                                                 metavar="K", converter=_tuple_of_ints,
                                                 help="agent steps before which compaction is forced (none: empty)")
    keep_verbatim_chars: int = int_option(PAPER.keep_verbatim_chars, minimum=1, maximum=MAX_CONFIG_INTEGER,
                                          metavar="CHARS",
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
    max_steps: int | None = int_option(None, minimum=1, maximum=MAX_STEPS, metavar="N",
                                       help="agent steps per task (default: the goal's plan + 10)")
    concurrency: int = int_option(8, minimum=1, maximum=MAX_CONCURRENCY, metavar="N",
                                  help="trajectories in flight at once")
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
        """A spec from flat knobs: each knob goes to its one owner (the run, the task, a method or the backend:
        ``route_settings``)."""
        backend = str(knobs.get("backend") or _default_backend())
        routed = route_settings(knobs, TASKS.get(task_kind), BACKENDS.get(backend))
        if routed.unclaimed:
            raise ConfigError(f"unknown run option(s) {', '.join(sorted(routed.unclaimed))} for task {task_kind} "
                              f"and backend {backend}")
        task_options = with_overrides(TASKS.get(task_kind).options(), routed.task)
        backend_options = with_overrides(BACKENDS.get(backend).options(), routed.backend)
        method_options = {name: with_overrides(METHODS.get(name).options(), values)
                          for name, values in routed.methods.items()}
        return cls(task_kind=task_kind, methods=tuple(methods), seeds=tuple(seeds), out=out, **routed.run,
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

    def validate(self, counting: PromptCounting | None = None) -> None:
        """Raise ConfigError with a clear message for any inconsistent setting (each option's own bounds are
        checked when it is built). ``counting``: the spec's ``prompt_counting`` if the caller resolved it (a run's
        plan does, once); else resolved here."""
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
        self.task_opts().check()
        self.backend_opts().check()
        count = self.task_count()
        if count is not None and count < 1:
            raise ConfigError(f"{task.count_flag} must be at least 1")
        if count is not None and count > task.count_maximum:
            raise ConfigError(f"{task.count_flag} must be at most {task.count_maximum}, got {count}")
        if count is not None:
            self.task_opts().check_count(count, task.count_flag)
        if self.max_tokens >= self.context_limit:
            raise ConfigError(
                f"--max-tokens ({self.max_tokens}) must be below --context-limit ({self.context_limit})"
            )
        if self.tokenizer_json and model_directory(self.tokenizer) is not None:
            raise ConfigError("--tokenizer-json and a model directory in --tokenizer name two tokenizers; give one")
        if counting is None:
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
            variant = self.for_variant(label)  # an unknown override, or one out of bounds, fails here
            if count is not None:
                variant.task_opts().check_count(count, task.count_flag)

    def prompt_counting(self) -> PromptCounting:
        """The tokenizer and chat format prompts are counted with: the one place the options are resolved.

        A model directory (``--tokenizer DIR`` or ``hf-dir:DIR``) gives its own tokenizer and, with the
        chat format ``auto``, its own chat template (rendered as vLLM renders it); ``--tokenizer-json``
        gives that file's tokenizer over ``--chat-format`` (ChatML by default).
        """
        tokenizer, chat_format = resolve_counting(self.tokenizer, self.chat_format, self.tokenizer_json)
        return PromptCounting(tokenizer=tokenizer, chat_format=chat_format)

    def for_variant(self, label: str) -> RunSpec:
        """This spec with a variant's overrides applied, each to its owner (the run, the task, a method:
        ``route_settings``; a variant never changes the backend)."""
        overrides = dict(self.variants.get(label, {}))
        if not overrides:
            return self
        routed = route_settings(overrides, self.task_entry, None)
        other_tasks = {name: entry.name for entry in TASKS.entries() if entry.name != self.task_kind
                       for name in option_names(entry.options)}
        for name in routed.unclaimed:
            if name in other_tasks:
                raise ConfigError(f"variant {label!r} sets {name}, an option of task {other_tasks[name]}: "
                                  f"use --task {other_tasks[name]}")
            raise ConfigError(f"variant {label!r}: unknown parameter(s) {name}")
        method_options = dict(self.method_options)
        for name, values in routed.methods.items():
            method_options[name] = with_overrides(self.method_opts(name), values)
        return evolve(self, **routed.run, task_options=with_overrides(self.task_opts(), routed.task),
                      method_options=method_options)
