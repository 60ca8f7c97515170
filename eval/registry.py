"""Tasks, methods and backends by name: each component writes its name, its options and its behaviour once.

A component registers itself in its own module (``register_task``, ``register_method``,
``register_backend``); the registry finds the built-in ones by importing every module of
``arc_eval.tasks``, ``arc_eval.methods`` and ``arc_eval.backends`` (as lm-eval's registry and inspect's
``@modelapi(name=...)`` name a component where it is defined). A test module may register a toy
component the same way; nothing generic names a task or a method.

Options. A component's knobs are one frozen attrs class whose fields are made with ``option``: its
default, bounds, choices and help are written there once, and everything else is derived from it: the
``arc-eval`` flags (``add_option_flags``), the check of a value (a ``ConfigError`` naming the flag), the
manifest's ``config`` (``recorded_options``, hence the resume key) and an ablation's overrides
(``route_overrides``). An option's name is owned by one component (``check_option_owners``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

import attrs
from attrs import frozen

from arc_ref.errors import ConfigError

if TYPE_CHECKING:
    from arc_eval.counting import TokenCounter
    from arc_eval.types import Backend, Task

OPTION_KEY = "arc_eval.option"


@frozen
class OptionInfo:
    """What an option says about itself beyond its type and default (``option``)."""

    help: str
    flag: str | None = None  # the command-line flag (default: --the-field-name)
    parse: Callable[[str], Any] | None = None  # argparse ``type``
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    nargs: str | None = None
    metavar: str | None = None
    recorded: bool = True  # False: a connection setting, never in the manifest (an API key, a timeout)
    store_true: bool = False
    append: bool = False  # the flag may be repeated, each value appended (a tuple)


def option(
    default: Any,
    *,
    help: str,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    choices: Sequence[Any] | None = None,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    nargs: str | None = None,
    metavar: str | None = None,
    recorded: bool = True,
    converter: Callable[[Any], Any] | None = None,
    store_true: bool = False,
    append: bool = False,
) -> Any:
    """A field of an options class: its default, bounds and help written once (see the module docstring)."""
    info = OptionInfo(help=help, flag=flag, parse=parse, choices=tuple(choices) if choices is not None else None,
                      minimum=minimum, exclusive_minimum=exclusive_minimum, nargs=nargs, metavar=metavar,
                      recorded=recorded, store_true=store_true, append=append)
    return attrs.field(default=default, validator=_check_option, converter=converter, metadata={OPTION_KEY: info})


def option_flag(attribute: attrs.Attribute[Any]) -> str:
    info = option_info(attribute)
    return info.flag or "--" + attribute.name.replace("_", "-")


def option_info(attribute: attrs.Attribute[Any]) -> OptionInfo:
    info = attribute.metadata.get(OPTION_KEY)
    if not isinstance(info, OptionInfo):
        raise TypeError(f"field {attribute.name} is not made with arc_eval.registry.option")
    return info


def _bounded(info: OptionInfo, flag: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{flag} must be a number, got {value!r}")
    if info.minimum is not None and not value >= info.minimum:
        raise ConfigError(f"{flag} must be at least {info.minimum:g}, got {value!r}")
    if info.exclusive_minimum is not None and not value > info.exclusive_minimum:
        raise ConfigError(f"{flag} must be above {info.exclusive_minimum:g}, got {value!r}")
    if value != value or value == float("inf"):
        raise ConfigError(f"{flag} must be a finite number, got {value!r}")


def _check_option(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The bounds and choices an option declares, checked on every construction (a ConfigError naming its flag)."""
    info = option_info(attribute)
    flag = option_flag(attribute)
    if value is None:
        return
    if info.choices is not None and value not in info.choices:
        raise ConfigError(f"{flag} must be one of {', '.join(map(str, info.choices))}, got {value!r}")
    if info.minimum is None and info.exclusive_minimum is None:
        return
    for item in value if isinstance(value, tuple) else (value,):
        _bounded(info, flag, item)


def option_fields(options_class: type) -> tuple[attrs.Attribute[Any], ...]:
    """The fields of a class made with ``option`` (a spec may hold other fields too)."""
    return tuple(attribute for attribute in attrs.fields(options_class) if OPTION_KEY in attribute.metadata)


@frozen
class NoOptions:
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
        """Add ``entry``; a second entry of the same name is refused (a ConfigError), the same one is a no-op."""
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


def option_dest(owner: str, name: str) -> str:
    """argparse's destination of an option: owner-qualified, so two components never share one."""
    return f"{owner}:{name}"


def add_option_flags(group: argparse._ArgumentGroup, owner: str, options_class: type) -> None:
    """The command-line flags of ``options_class`` (help, type, choices, default from the fields).

    A flag not given leaves no value (``argparse.SUPPRESS``): ``given_options`` tells what the user set, and
    ``options_from_args`` takes the field's default for the rest."""
    for attribute in option_fields(options_class):
        info = option_info(attribute)
        default = attribute.default
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        text = f"{info.help} (default: {shown})" if default is not None and not info.store_true else info.help
        kwargs: dict[str, Any] = {"dest": option_dest(owner, attribute.name), "default": argparse.SUPPRESS,
                                  "help": text}
        if info.store_true:
            group.add_argument(option_flag(attribute), action="store_true", **kwargs)
            continue
        if info.parse is not None:
            kwargs["type"] = info.parse
        if info.choices is not None:
            kwargs["choices"] = info.choices
        if info.nargs is not None:
            kwargs["nargs"] = info.nargs
        if info.metavar is not None or info.choices is None:  # the field's name, not the owner-qualified dest
            kwargs["metavar"] = info.metavar or attribute.name.upper()
        if info.append:
            kwargs["action"] = "append"
        group.add_argument(option_flag(attribute), **kwargs)


def given_options(owner: str, args: argparse.Namespace) -> list[str]:
    """The flags of ``owner``'s options the command line gave."""
    prefix = option_dest(owner, "")
    return [name[len(prefix):] for name in vars(args) if name.startswith(prefix)]


def options_from_args(owner: str, options_class: type, args: argparse.Namespace) -> Any:
    """The options instance the command line gave (defaults for flags not given); a ConfigError if out of bounds."""
    values: dict[str, Any] = {}
    given = vars(args)
    for attribute in option_fields(options_class):
        dest = option_dest(owner, attribute.name)
        if dest in given:
            value = given[dest]
            values[attribute.name] = tuple(value) if isinstance(value, list) else value
    return options_class(**values)


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


def option_names(options_class: type) -> tuple[str, ...]:
    return tuple(attribute.name for attribute in option_fields(options_class))


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


def with_overrides(options: Any, overrides: Mapping[str, Any]) -> Any:
    """``options`` with the overrides that name its fields (checked like any construction)."""
    mine = {name: (tuple(value) if isinstance(value, list) else value)
            for name, value in overrides.items() if name in option_names(type(options))}
    return attrs.evolve(options, **mine) if mine else options


def options_resolved(options: Any) -> Any:
    """An options value as the run uses it (its ``resolved`` method, if it has one: RAG's ``auto`` retriever)."""
    resolve = getattr(options, "resolved", None)
    return resolve() if callable(resolve) else options


def options_check(options: Any) -> None:
    """An options class's own cross-field check (its ``check`` method), if it has one."""
    check = getattr(options, "check", None)
    if callable(check):
        check()


