"""Tasks, methods and backends by name: each component writes its name, its options and its behaviour once.

A component registers itself in its own module (``register_task``, ``register_method``,
``register_backend``); the registry finds the built-in ones by importing every module of
``arc_eval.tasks``, ``arc_eval.methods`` and ``arc_eval.backends`` (as lm-eval's registry and inspect's
``@modelapi(name=...)`` name a component where it is defined). A test module may register a toy
component the same way; nothing generic names a task or a method.

Options. A component's knobs are one frozen attrs class whose fields are made with ``arc_ref.options``'
``option``, ``int_option`` or ``float_option`` (re-exported here): its default, bounds, choices and help are
written there once, and everything else is derived from it: the ``arc-eval`` flags and their parsers
(``add_option_flags``), the check of a value (a ``ConfigError`` naming the flag), the manifest's ``config``
(``recorded_options``, hence the resume key) and an ablation's overrides (``with_overrides``, routed by
``arc_eval.run_spec.route_settings``). An option's name is owned by one component (``option_owners``).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, TypeVar

from attrs import frozen

from arc_ref.errors import ConfigError
from arc_ref.options import (
    add_option_flags,
    float_option,
    given_options,
    int_option,
    option,
    option_dest,
    option_fields,
    option_flag,
    option_info,
    option_names,
    options_from_args,
    with_overrides,
)

if TYPE_CHECKING:
    from arc_eval.counting import TokenCounter
    from arc_eval.types import Backend, Task

# Tasks per seed (every task's count flag, issue 31): a seed's tasks are generated and held at once; a task's own
# options may bound the count lower (``ComponentOptions.check_count``: NIH by the characters its fixtures hold).
MAX_TASKS_PER_SEED = 100_000
# Trajectories (a run's) or requests (serve-scripted's) in flight at once: each holds a method's view, transcript
# and files (about 1 MB at the paper's 16k window) and an HTTP request: 4 GB at most, and 16 times vLLM's default
# batch (256 sequences); a run's workers are never more than a batch's task runs either (arc_eval.execute).
MAX_CONCURRENCY = 4096


class ComponentOptions:
    """What every registered options class is: its fields made with ``option`` (``arc_ref.options``) and these
    hooks, each with a working default that a class overrides where it has something to say."""

    def check(self) -> None:
        """A cross-field check of the options (a ConfigError naming the flags); default: none."""

    def resolved(self) -> Any:
        """The options as the run uses and records them (RAG's ``auto`` retriever made the one available);
        default: themselves."""
        return self

    def describe(self, model: str) -> str | None:
        """A backend's words in a run's plan, given the served model; default: None (the plan names the backend)."""
        return None

    def plan_note(self, jobs: int) -> str | None:
        """A method's note in a run's plan, given its task runs (rag_memory's retriever and its cost); default:
        None."""
        return None

    def check_count(self, count: int, flag: str) -> None:
        """A task's check of its tasks per seed under these options (``flag`` names the count); default: none."""


@frozen
class NoOptions(ComponentOptions):
    """A component without knobs of its own."""


# -- entries ----------------------------------------------------------------------------------------


class TaskSource(Protocol):
    """The tasks of one task kind under one options value."""

    def tasks(self, seed: int, count: int | None) -> list[Task]: ...


@frozen
class TaskEntry:
    """A task kind: its name (``Task.kind``, the records' ``task_kind``), its options and behaviour.

    ``source(options)`` opens the task's source once per run and options value (LongBench reads its file
    there: a missing or malformed file fails before anything is written); its ``tasks(seed, count)`` gives a
    seed's tasks (``count``: at most so many; None: all); ``scorer`` is the loop's ``Scorer``; ``plan_steps(task)`` the steps of the
    goal's own plan (the default ``--max-steps`` adds a slack); ``count_flag`` names the per-seed task count
    on the command line (``count_default``: its default, None: all); ``report_table`` (``module:function``,
    imported when a report is made) the task's own table of a report, ``(dataset, kind) -> Table | None``.
    """

    name: str
    label: str  # in reports
    help: str
    options: type
    source: Callable[[Any], TaskSource]
    scorer: Callable[[Task, str, str], tuple[bool, str | None]]
    plan_steps: Callable[[Task], int]
    count_flag: str
    count_default: int | None
    count_help: str
    count_maximum: int = MAX_TASKS_PER_SEED  # the count flag's upper bound
    report_table: str | None = None  # "module:function"
    order: int = 0  # position in help and reports (smaller first); the first is an ablation's default task

    def report_table_function(self) -> Callable[[Any, str], Any] | None:
        """The task's own report table (imported now; the analysis is not loaded to run a task)."""
        if self.report_table is None:
            return None
        module, _, function = self.report_table.partition(":")
        found: Callable[[Any, str], Any] = getattr(importlib.import_module(module), function)
        return found


@frozen
class MethodEntry:
    """A method: its name (the records' ``method``), its class, its options and its place in tables."""

    name: str
    label: str  # in reports
    order: int  # position in ``all`` and in tables (smaller first)
    # (MethodSettings) -> a fresh Method for one task, which reads its options from the settings (``options_of``);
    # typed loosely here: the registry is a leaf, below arc_eval.methods
    factory: Callable[[Any], Any]
    options: type = NoOptions
    highlighted: bool = False  # the paper's method: bold in reports, method A of McNemar
    compacts: bool = True  # False: the method never compacts (full context): an ablation of compaction skips it


@frozen
class BackendEntry:
    """A backend: its name, its options and its factory (the run's counter is handed to it)."""

    name: str
    help: str
    factory: Callable[[Any, BackendRun], Backend]  # (this backend's options, the run's shared settings)
    options: type = NoOptions
    default_model: Callable[[Any], str | None] = lambda options: None  # the model name when --model is not given
    order: int = 0  # position in help (smaller first); the first is the default backend


@frozen
class BackendRun:
    """What every backend is built with: the run's budgets, its counter and whether it calls tools."""

    model: str
    context_limit: int
    max_tokens: int
    temperature: float
    counter: TokenCounter
    tool_calling: bool


E = TypeVar("E", TaskEntry, MethodEntry, BackendEntry)


class Registry(Generic[E]):
    """Entries of one kind by name; the built-in ones found by importing every module of ``packages``."""

    def __init__(self, kind: str, *packages: str) -> None:
        self.kind = kind
        self.packages = packages
        self._entries: dict[str, E] = {}
        self._discovered = False

    def register(self, entry: E) -> E:
        """Add ``entry``; a second entry of the same name is refused (a ConfigError), the same one is a no-op, and
        its options class must be a ``ComponentOptions`` (its hooks)."""
        if not issubclass(entry.options, ComponentOptions):
            raise ConfigError(f"{self.kind} {entry.name!r}: options {entry.options.__name__} must derive from "
                              "arc_eval.registry.ComponentOptions")
        known = self._entries.get(entry.name)
        if known is not None and known != entry:
            raise ConfigError(f"{self.kind} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry (a test's toy component)."""
        self._entries.pop(name, None)

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for name in self.packages:
            package = importlib.import_module(name)
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{name}.{module.name}")

    def entries(self) -> tuple[E, ...]:
        self._discover()
        return tuple(sorted(self._entries.values(), key=lambda entry: (entry.order, entry.name)))

    def names(self) -> tuple[str, ...]:
        return tuple(entry.name for entry in self.entries())

    def get(self, name: str) -> E:
        """The entry of ``name``; a ConfigError naming the known ones otherwise."""
        self._discover()
        entry = self._entries.get(name)
        if entry is None:
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        return entry


TASKS: Registry[TaskEntry] = Registry("task", "arc_eval.tasks")
METHODS: Registry[MethodEntry] = Registry("method", "arc_eval.methods")
BACKENDS: Registry[BackendEntry] = Registry("backend", "arc_eval.backends", "arc_eval.agent")  # scripted: its agent's


def register_task(entry: TaskEntry) -> TaskEntry:
    return TASKS.register(entry)


def register_method(entry: MethodEntry) -> MethodEntry:
    return METHODS.register(entry)


def register_backend(entry: BackendEntry) -> BackendEntry:
    return BACKENDS.register(entry)


def highlighted_method() -> str | None:
    """The paper's method (bold in reports, McNemar's method A), if one is registered."""
    return next((entry.name for entry in METHODS.entries() if entry.highlighted), None)


# -- options: flags, values, the manifest ----------------------------------------------------------


def recorded_options(options: Any) -> dict[str, Any]:
    """The recorded fields of an options instance, by name (the manifest's ``config``); tuples as lists."""
    recorded: dict[str, Any] = {}
    for attribute in option_fields(type(options)):
        if option_info(attribute).recorded:
            value = getattr(options, attribute.name)
            recorded[attribute.name] = list(value) if isinstance(value, tuple) else value
    return recorded


def unused_options(options_class: type) -> dict[str, Any]:
    """The recorded fields of a component the run does not use: each null."""
    return {attribute.name: None for attribute in option_fields(options_class) if option_info(attribute).recorded}


def option_owners() -> dict[str, str]:
    """Every option name of a method or backend and its one owner (a ConfigError when two claim one)."""
    owners: dict[str, str] = {}
    for kind, entries in (("method", METHODS.entries()), ("backend", BACKENDS.entries())):
        for entry in entries:
            for name in option_names(entry.options):
                if name in owners:
                    raise ConfigError(f"option {name!r} is claimed by {owners[name]} and by {kind} {entry.name}")
                owners[name] = f"{kind} {entry.name}"
    return owners


__all__ = [
    "BACKENDS", "METHODS", "TASKS", "BackendEntry", "BackendRun", "ComponentOptions", "MAX_CONCURRENCY", "MAX_TASKS_PER_SEED",
    "MethodEntry", "NoOptions", "Registry", "TaskEntry", "TaskSource", "add_option_flags", "float_option",
    "given_options", "highlighted_method", "int_option", "option", "option_dest", "option_fields", "option_flag",
    "option_info", "option_names", "option_owners", "options_from_args", "recorded_options", "register_backend",
    "register_method", "register_task", "unused_options", "with_overrides",
]
