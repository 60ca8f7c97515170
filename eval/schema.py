"""The run-record schema (`arc-eval-run/1`): the one definition of every record an `arc-eval` run writes.

`eval/RECORDS.md` documents these classes field by field (a test holds the two together). The writer
(`arc_eval.records.RunWriter`) writes only what `from_json` reads back; the reader and the analysis
(`arc_eval.analysis.load`) read every line through `from_json`; the agent loop builds `CallRecord` and
`TaskRecord` directly.

A field's JSON type is its annotation: `str`, `int`, `float` (an integer is accepted), `bool`,
`X | None` (X or null), `tuple[X, ...]` (a list), `Mapping[str, X]` (an object), a record class (an
object). A field with a default is optional on read (older records may lack it); every other field is
required. `metadata` narrows a field: `choices` (the allowed strings) and `minimum` (for integers).
Keys a reader does not know are ignored, so a newer writer's additions do not break an older reader.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Callable, ClassVar, TypeVar

import attrs
from attrs import field, frozen

from arc_ref.machine import COMPACT_REASONS

from arc_eval.errors import EvalError

SCHEMA = "arc-eval-run/1"

PURPOSES = ("agent", "summary", "state")
FINISH_REASONS = ("stop", "length", "overflow", "error")
TASK_ENDS = ("submitted", "premature", "step_limit", "error", "overflow")
COMPACTION_REASONS = COMPACT_REASONS  # the core's (arc_ref.machine): a record's reasons are the core's

KEY_FIELDS = ("variant", "method", "seed", "task_id")
# (variant, method, seed, task_id): one task of one method within one run directory.
RecordKey = tuple[str, str, int, str]
# (variant, model, task_kind, method, seed, task_id): one finished task of one method, across runs.
TaskKey = tuple[str, str, str, str, int, str]
# (variant, model, task_kind, seed, task_id): the same task seen by every method (McNemar pairing).
PairKey = tuple[str, str, str, int, str]


class RecordError(EvalError, ValueError):
    """A record that breaks the schema; the message names where (file:line) and the field."""


def _choices(*values: str) -> dict[str, Any]:
    return {"choices": values}


def _at_least(minimum: int) -> dict[str, Any]:
    return {"minimum": minimum}


# An optional field that `to_json` leaves out while it is its default (empty, or None): a field added for a rare
# event or one that only some servers report
_OMITTED_WHEN_EMPTY: dict[str, Any] = {"omitted_when_empty": True}


@frozen
class Compaction:
    """One entry of a call's `compactions`: a compaction done right before the call."""

    reason: str = field(metadata=_choices(*COMPACTION_REASONS))


@frozen
class Recall:
    """One entry of a call's `recalls`: one chunk of a stored observation answered after the call."""

    id: str
    chunk: int = field(metadata=_at_least(1))
    chunks: int = field(metadata=_at_least(1))


@frozen
class Clip:
    """One entry of a call's `clips`: the agent's own text clipped in a baseline's kept turns right before the call,
    because its compaction left the prompt over L (eval/METHODS.md, "The six methods")."""

    turns: int = field(metadata=_at_least(1))  # kept turns whose agent text this clip cut
    newest: bool  # the newest turn among them
    before: int = field(metadata=_at_least(0))  # the method's count of the prompt before the clip
    after: int = field(metadata=_at_least(0))  # and after it


@frozen
class CallRecord:
    """One line of `calls.jsonl`: one model call (an agent step or an auxiliary summary / state call)."""

    variant: str
    method: str
    model: str
    task_kind: str  # a registered task's name (arc_eval.registry); a reader needs no task installed
    task_id: str
    seed: int
    call_index: int = field(metadata=_at_least(1))
    purpose: str = field(metadata=_choices(*PURPOSES))
    prompt_tokens: int = field(metadata=_at_least(0))
    completion_tokens: int = field(metadata=_at_least(0))
    latency_s: float
    finish_reason: str = field(metadata=_choices(*FINISH_REASONS))
    overflow: bool
    compactions: tuple[Compaction, ...]
    recalls: tuple[Recall, ...]
    action: str | None
    submission: str | None
    reexecution: bool
    # The harness's own count of the prompt, made before it was sent (null when the backend makes
    # none apart from its answer's usage); `prompt_tokens` is the server's.
    counted_prompt_tokens: int | None = field(default=None, metadata=_at_least(0))
    # Clips of the agent's text right before this call; written only when there is one (`to_json`), so records of
    # runs where no clip happened are those written before the field
    clips: tuple[Clip, ...] = field(default=(), metadata=_OMITTED_WHEN_EMPTY)
    # The prompt tokens the server served from its prefix cache (its usage.prompt_tokens_details.cached_tokens);
    # written only when the server said, so records of other servers and backends are those written before the field
    cached_prompt_tokens: int | None = field(default=None, metadata={**_at_least(0), **_OMITTED_WHEN_EMPTY})
    # The method's own count of the prompt it sent, made before it was sent (ARC: its core's count of its view, which
    # it keeps within K; a baseline: the run's counter's count of the messages and tools, the figure it decides to
    # compact on); written only when the method gives one, so records of a method that does not are those written
    # before the field
    estimated_prompt_tokens: int | None = field(default=None, metadata={**_at_least(0), **_OMITTED_WHEN_EMPTY})
    # K, the bound the method keeps its own count within (ARC's view budget); written only for a method that has one
    view_budget: int | None = field(default=None, metadata={**_at_least(0), **_OMITTED_WHEN_EMPTY})
    # L = L_ctx - G_max, the bound every sent prompt must keep; written by the loop on every call
    prompt_limit: int | None = field(default=None, metadata={**_at_least(0), **_OMITTED_WHEN_EMPTY})

    @property
    def record_key(self) -> RecordKey:
        return (self.variant, self.method, self.seed, self.task_id)

    @property
    def task_key(self) -> TaskKey:
        return (self.variant, self.model, self.task_kind, self.method, self.seed, self.task_id)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, obj: Any, where: str = "call record") -> CallRecord:
        return from_json(cls, obj, where)


@frozen
class TaskRecord:
    """One line of `tasks.jsonl`: the outcome of one finished task."""

    variant: str
    method: str
    model: str
    task_kind: str  # a registered task's name (arc_eval.registry); a reader needs no task installed
    task_id: str
    seed: int
    submitted: bool
    no_answer: bool
    correct: bool
    submission: str | None
    end: str = field(metadata=_choices(*TASK_ENDS))
    error: str | None
    calls: int = field(metadata=_at_least(0))
    steps: int = field(metadata=_at_least(0))
    reexecutions: int = field(metadata=_at_least(0))
    meta: Mapping[str, Any]

    @property
    def record_key(self) -> RecordKey:
        return (self.variant, self.method, self.seed, self.task_id)

    @property
    def key(self) -> TaskKey:
        return (self.variant, self.model, self.task_kind, self.method, self.seed, self.task_id)

    @property
    def pair_key(self) -> PairKey:
        return (self.variant, self.model, self.task_kind, self.seed, self.task_id)

    def check(self, where: str) -> None:
        """The rules between fields: `no_answer` is `not submitted`; only a submission can be correct."""
        if self.no_answer == self.submitted:
            raise RecordError(
                f"{where}: 'no_answer' must be the negation of 'submitted' (both are {self.submitted})"
            )
        if self.correct and not self.submitted:
            raise RecordError(f"{where}: 'correct' is true but 'submitted' is false")

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, obj: Any, where: str = "task record") -> TaskRecord:
        return from_json(cls, obj, where)


@frozen
class Manifest:
    """`manifest.json`: what was run. Fields marked `identity` are the run's meaning, which a resume must match."""

    IDENTITY: ClassVar[tuple[str, ...]] = (
        "task_kind", "methods", "seeds", "tasks_per_seed", "model", "backend", "context_limit", "max_tokens",
        "variants", "config",
    )  # fmt: skip
    # Keys of `config` that say where the backend is, not what is run: a resume may change them.
    CONFIG_NOT_IDENTITY: ClassVar[tuple[str, ...]] = ("base_urls",)

    schema: str
    command: tuple[str, ...]
    task_kind: str  # a registered task's name (arc_eval.registry); a reader needs no task installed
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    tasks_per_seed: int | None = field(metadata=_at_least(0))
    model: str
    backend: str
    context_limit: int = field(metadata=_at_least(1))
    max_tokens: int = field(metadata=_at_least(1))
    variants: Mapping[str, Mapping[str, Any]]
    config: Mapping[str, Any]
    versions: Mapping[str, str]
    git_commit: str | None
    created: str
    # the tracked files against git_commit: "clean", or "modified sha256:..." (a digest of git status and git diff
    # HEAD); null without git or in records older than the field
    git_tree: str | None = None

    def check(self, where: str) -> None:
        """The schema version is this one's."""
        if self.schema != SCHEMA:
            raise RecordError(f"{where}: schema is {self.schema!r}; this version reads and writes {SCHEMA!r}")

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, obj: Any, where: str = "manifest") -> Manifest:
        return from_json(cls, obj, where)


def run_meaning(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What a run is (a manifest's `Manifest.IDENTITY` fields, `config` without where the server is), as plain JSON.

    Two manifests with the same meaning are the same run: a resume compares exactly this, and the
    default run directory is named after it. The command line, the run directory, the concurrency and
    the progress bar are not part of it.
    """
    meaning = {name: manifest.get(name) for name in Manifest.IDENTITY}
    config = meaning.get("config")
    if isinstance(config, Mapping):
        meaning["config"] = {key: value for key, value in config.items() if key not in Manifest.CONFIG_NOT_IDENTITY}
    plain: dict[str, Any] = json.loads(json.dumps(_plain(meaning), sort_keys=True))
    return plain


RECORD_CLASSES: tuple[type, ...] = (Manifest, CallRecord, TaskRecord, Compaction, Recall, Clip)


def record_key(obj: Mapping[str, Any]) -> RecordKey:
    """`(variant, method, seed, task_id)` of a call or task line read as plain JSON (KeyError or RecordError)."""
    variant, method, seed, task_id = (obj[name] for name in KEY_FIELDS)
    if not (
        type(variant) is str and type(method) is str and type(seed) is int and type(task_id) is str
    ):
        raise RecordError(
            "record key must be (variant: str, method: str, seed: int, task_id: str), got "
            f"{(variant, method, seed, task_id)!r}"
        )
    return (variant, method, seed, task_id)


# -- JSON <-> records ------------------------------------------------------------------------------

R = TypeVar("R")
# (value, where, field name) -> the field's value; raises RecordError naming the field.
Checker = Callable[[Any, str, str], Any]


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(where: str, name: str, wanted: str, value: Any) -> RecordError:
    return RecordError(f"{where}: field '{name}' should be {wanted}, got {_shown(value)}")


def _scalar(kind: type, choices: tuple[str, ...] | None, minimum: int | None) -> tuple[Checker, str]:
    if kind is str:
        if choices:
            allowed = frozenset(choices)
            wanted = "one of " + ", ".join(repr(choice) for choice in choices)

            def check_choice(value: Any, where: str, name: str) -> Any:
                if type(value) is str and value in allowed:
                    return value
                raise _bad(where, name, wanted, value)

            return check_choice, "a string"

        def check_str(value: Any, where: str, name: str) -> Any:
            if type(value) is str:
                return value
            raise _bad(where, name, "a string", value)

        return check_str, "a string"
    if kind is int:
        if minimum is not None:
            floor = minimum
            wanted = f"an integer >= {floor}"

            def check_bounded(value: Any, where: str, name: str) -> Any:
                if type(value) is int and value >= floor:
                    return value
                raise _bad(where, name, wanted, value)

            return check_bounded, "an integer"

        def check_int(value: Any, where: str, name: str) -> Any:
            if type(value) is int:
                return value
            raise _bad(where, name, "an integer", value)

        return check_int, "an integer"
    if kind is float:

        def check_number(value: Any, where: str, name: str) -> Any:
            if type(value) is float or type(value) is int:
                return float(value)
            raise _bad(where, name, "a number", value)

        return check_number, "a number"
    if kind is bool:

        def check_bool(value: Any, where: str, name: str) -> Any:
            if type(value) is bool:
                return value
            raise _bad(where, name, "true or false", value)

        return check_bool, "true or false"
    raise TypeError(f"no JSON checker for {kind!r}")


def _checker(annotation: Any, metadata: Mapping[str, Any]) -> tuple[Checker, str]:
    """The checker of one annotation and a phrase for its JSON type (used in messages)."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        check_inner, phrase = _checker(inner, metadata)

        def check_optional(value: Any, where: str, name: str) -> Any:
            return None if value is None else check_inner(value, where, name)

        return check_optional, f"{phrase} or null"
    if origin is tuple:
        item = arguments[0]
        if attrs.has(item):
            record = item

            def check_objects(value: Any, where: str, name: str) -> Any:
                if type(value) is list and not value:
                    return ()
                if type(value) is not list or not all(type(entry) is dict for entry in value):
                    raise _bad(where, name, "a list of objects", value)
                return tuple(from_json(record, entry, f"{where}: an entry of '{name}'") for entry in value)

            return check_objects, "a list of objects"
        check_item, item_phrase = _checker(item, {})
        wanted = "a list of " + item_phrase.removeprefix("a ").removeprefix("an ") + "s"

        def check_list(value: Any, where: str, name: str) -> Any:
            if type(value) is not list:
                raise _bad(where, name, wanted, value)
            try:
                return tuple(check_item(entry, where, name) for entry in value)
            except RecordError:
                raise _bad(where, name, wanted, value) from None

        return check_list, wanted
    if origin is Mapping:
        value_type = arguments[1]
        if value_type is Any:

            def check_object(value: Any, where: str, name: str) -> Any:
                if type(value) is dict:
                    return value
                raise _bad(where, name, "an object", value)

            return check_object, "an object"
        check_value, value_phrase = _checker(value_type, {})
        wanted = "an object of " + value_phrase.removeprefix("a ").removeprefix("an ") + "s"

        def check_mapping(value: Any, where: str, name: str) -> Any:
            if type(value) is not dict:
                raise _bad(where, name, wanted, value)
            try:
                for entry in value.values():
                    check_value(entry, where, name)
            except RecordError:
                raise _bad(where, name, wanted, value) from None
            return value

        return check_mapping, wanted
    if annotation is Any:
        return (lambda value, where, name: value), "any value"
    return _scalar(annotation, metadata.get("choices"), metadata.get("minimum"))


@frozen
class FieldSpec:
    """One field of a record class as the JSON schema sees it."""

    name: str
    annotation: Any
    required: bool
    choices: tuple[str, ...] | None
    minimum: int | None


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The fields of a record class in their order on disk."""
    hints = typing.get_type_hints(cls)
    specs = []
    for attribute in attrs.fields(cls):
        specs.append(
            FieldSpec(
                name=attribute.name,
                annotation=hints[attribute.name],
                required=attribute.default is attrs.NOTHING,
                choices=attribute.metadata.get("choices"),
                minimum=attribute.metadata.get("minimum"),
            )
        )
    return tuple(specs)


_PARSERS: dict[type, tuple[tuple[str, Checker, bool, Any], ...]] = {}
_FAST: dict[type, Callable[[Mapping[str, Any], str], Any]] = {}


def _parser(cls: type) -> tuple[tuple[str, Checker, bool, Any], ...]:
    """(name, checker, required, default) per field: the field-by-field path that names the first problem."""
    parser = _PARSERS.get(cls)
    if parser is None:
        entries = []
        for attribute, spec in zip(attrs.fields(cls), field_specs(cls), strict=True):
            check, _phrase = _checker(spec.annotation, attribute.metadata)
            entries.append((spec.name, check, spec.required, attribute.default))
        parser = tuple(entries)
        _PARSERS[cls] = parser
    return parser


def _fast_test(annotation: Any, spec: FieldSpec, variable: str, constants: dict[str, Any]) -> str | None:
    """A Python condition that holds exactly when `variable` passes `spec`'s checks, or None (use the checker)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
        test = _fast_test(inner, spec, variable, constants)
        return None if test is None else f"({variable} is None or {test})"
    if annotation is str:
        if spec.choices:
            constants[f"choices_{spec.name}"] = frozenset(spec.choices)
            return f"(type({variable}) is str and {variable} in choices_{spec.name})"
        return f"type({variable}) is str"
    if annotation is int:
        floor = "" if spec.minimum is None else f" and {variable} >= {spec.minimum}"
        return f"(type({variable}) is int{floor})"
    if annotation is bool:
        return f"type({variable}) is bool"
    if origin is Mapping and typing.get_args(annotation)[1] is Any:
        return f"type({variable}) is dict"
    return None


def _fast_parser(cls: type) -> Callable[[Mapping[str, Any], str], Any]:
    """A parser generated from the field specs for the common case: every field present and well typed.

    It returns None when anything is off, and `from_json` then runs the field-by-field path, which
    names the problem; both are built from `field_specs`, so they cannot disagree on what is valid.
    (Generated for speed: the analysis reads hundreds of thousands of call lines.)
    """
    fast = _FAST.get(cls)
    if fast is not None:
        return fast
    constants: dict[str, Any] = {"cls": cls}
    loads, tests, values = [], [], []
    for index, ((name, check, required, _default), spec) in enumerate(zip(_parser(cls), field_specs(cls), strict=True)):
        variable = f"v{index}"
        if not required:
            return _no_fast_path  # optional fields: the field-by-field path handles the defaults
        loads.append(f"{variable} = obj[{name!r}]")
        test = _fast_test(spec.annotation, spec, variable, constants)
        if test is not None:
            tests.append(test)
            values.append(variable)
        elif spec.annotation is float:
            tests.append(f"(type({variable}) is float or type({variable}) is int)")
            values.append(f"float({variable})")
        else:
            constants[f"check_{name}"] = check
            values.append(f"check_{name}({variable}, where, {name!r})")
    source = (
        "def fast(obj, where):\n"
        "    try:\n"
        + "".join(f"        {load}\n" for load in loads)
        + "    except KeyError:\n        return None\n"
        + f"    if not ({' and '.join(tests) or 'True'}):\n        return None\n"
        + f"    return cls({', '.join(values)})\n"
    )
    namespace = dict(constants)
    exec(compile(source, f"<fast parser of {cls.__name__}>", "exec"), namespace)  # noqa: S102 - generated from field_specs
    fast = typing.cast(Callable[[Mapping[str, Any], str], Any], namespace["fast"])
    _FAST[cls] = fast
    return fast


def _no_fast_path(obj: Mapping[str, Any], where: str) -> None:
    return None


def from_json(cls: type[R], obj: Any, where: str) -> R:
    """A record of `cls` from one parsed JSON object; RecordError names `where` and the first bad field."""
    if type(obj) is not dict:
        if not isinstance(obj, Mapping):
            raise RecordError(f"{where}: should be a JSON object, got {type(obj).__name__}")
        obj = dict(obj)
    record = _fast_parser(cls)(obj, where)
    if record is None:
        values: dict[str, Any] = {}
        for name, check, required, default in _parser(cls):
            if name in obj:
                values[name] = check(obj[name], where, name)
            elif required:
                raise RecordError(f"{where}: required field '{name}' is missing")
            else:
                values[name] = default
        record = cls(**values)
    checker = getattr(record, "check", None)
    if checker is not None:
        checker(where)
    return typing.cast(R, record)


def to_json(record: Any) -> dict[str, Any]:
    """A record as plain JSON values, keys in field order (tuples become lists, records objects); a field marked
    omitted-when-empty is left out while it is its default (empty, or None)."""
    return {
        attribute.name: _plain(getattr(record, attribute.name))
        for attribute in attrs.fields(type(record))
        if not attribute.metadata.get("omitted_when_empty") or getattr(record, attribute.name) != attribute.default
    }


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return to_json(value)
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def json_type(annotation: Any) -> str:
    """How `eval/RECORDS.md` writes a field's type: `str`, `int or null`, `list[str]`, `list[obj]`, `dict`..."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return f"{json_type(inner)} or null"
    if origin is tuple:
        return f"list[{json_type(arguments[0])}]"
    if origin is Mapping:
        return "dict" if arguments[1] is Any else f"dict[str, {json_type(arguments[1])}]"
    if attrs.has(annotation):
        return "obj"
    if origin is None and annotation in (str, int, float, bool):
        return str(annotation.__name__)
    raise TypeError(f"no JSON type for {annotation!r}")
