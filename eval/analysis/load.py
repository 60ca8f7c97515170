"""Read run directories written by the evaluation layer (schema `arc-eval-run/1`, `eval/RECORDS.md`).

Everything the analysis computes comes from these three files; nothing is recomputed from a model.
The loader validates every line it keeps and turns any problem into an `AnalysisError` whose
message names the file, the line and the field, or the missing file:

- `manifest.json`, `calls.jsonl`, `tasks.jsonl` must all exist (a run that was interrupted before
  its first task finished has no `tasks.jsonl`: we say so);
- an unparsable *last* line of a `.jsonl` file is a torn write (a crash in the middle of a write):
  it is dropped and reported in `RunData.notes`; an unparsable line anywhere else is an error;
- calls whose `(variant, method, seed, task_id)` has no task line belong to an interrupted task:
  they are skipped and counted ("incomplete"), as RECORDS.md prescribes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from arc_eval.analysis.errors import AnalysisError

SCHEMA = "arc-eval-run/1"
METHODS = ("full_context", "sliding_window", "llm_summary", "structured_state", "rag_memory", "arc")
TASK_KINDS = ("nih", "longbench")
PURPOSES = ("agent", "summary", "state")
FINISH_REASONS = ("stop", "length", "overflow", "error")
TASK_ENDS = ("submitted", "step_limit", "error", "overflow")

# (variant, model, task_kind, method, seed, task_id): one finished task of one method.
TaskKey = tuple[str, str, str, str, int, str]
# (variant, model, task_kind, seed, task_id): the same task seen by every method (McNemar pairing).
PairKey = tuple[str, str, str, int, str]

ProgressFn = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Manifest:
    """`manifest.json` of one run (RECORDS.md, table "manifest.json")."""

    path: Path
    command: tuple[str, ...]
    task_kind: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    tasks_per_seed: int | None  # None: every item of the data file (LongBench without --limit)
    model: str
    backend: str
    context_limit: int
    max_tokens: int
    variants: Mapping[str, Mapping[str, Any]]
    config: Mapping[str, Any]
    versions: Mapping[str, str]
    git_commit: str | None
    created: str


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One line of `calls.jsonl`: one model call (agent step or auxiliary summary/state call)."""

    variant: str
    method: str
    model: str
    task_kind: str
    task_id: str
    seed: int
    call_index: int
    purpose: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str
    overflow: bool
    compactions: tuple[str, ...]
    recalls: int
    action: str | None
    reexecution: bool
    line: int

    @property
    def task_key(self) -> TaskKey:
        return (self.variant, self.model, self.task_kind, self.method, self.seed, self.task_id)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One line of `tasks.jsonl`: the outcome of one finished task."""

    variant: str
    method: str
    model: str
    task_kind: str
    task_id: str
    seed: int
    submitted: bool
    no_answer: bool
    correct: bool
    submission: str | None
    end: str
    error: str | None
    calls: int
    steps: int
    reexecutions: int
    meta: Mapping[str, Any]
    line: int

    @property
    def key(self) -> TaskKey:
        return (self.variant, self.model, self.task_kind, self.method, self.seed, self.task_id)

    @property
    def pair_key(self) -> PairKey:
        return (self.variant, self.model, self.task_kind, self.seed, self.task_id)


@dataclass(frozen=True)
class RunData:
    """One run directory, validated: its manifest, finished tasks and their calls."""

    run_dir: Path
    manifest: Manifest
    tasks: tuple[TaskRecord, ...]
    # calls of every finished task, ordered by call_index (empty tuple when none were recorded)
    calls: Mapping[TaskKey, tuple[CallRecord, ...]]
    incomplete_tasks: int
    incomplete_calls: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Dataset:
    """Several run directories combined (one per model, per ablation, ...)."""

    runs: tuple[RunData, ...]
    tasks: tuple[TaskRecord, ...]
    calls: Mapping[TaskKey, tuple[CallRecord, ...]]
    notes: tuple[str, ...] = field(default=())

    def manifests_for(self, variant: str, model: str, task_kind: str) -> list[Manifest]:
        """Manifests of the runs holding tasks of this (variant, model, task_kind)."""
        found: list[Manifest] = []
        for run in self.runs:
            m = run.manifest
            if m.model == model and m.task_kind == task_kind and variant in m.variants:
                found.append(m)
        if not found:  # tasks whose variant is not declared in their manifest: match loosely
            found = [r.manifest for r in self.runs if r.manifest.model == model and r.manifest.task_kind == task_kind]
        return found


# --------------------------------------------------------------------------------------------
# field checking


class _Fields:
    """Typed access to one JSON object; every failure names file, line and field."""

    def __init__(self, obj: Mapping[str, Any], where: str) -> None:
        self.obj = obj
        self.where = where

    def _get(self, name: str) -> Any:
        if name not in self.obj:
            raise AnalysisError(f"{self.where}: required field '{name}' is missing")
        return self.obj[name]

    def _bad(self, name: str, wanted: str, value: Any) -> AnalysisError:
        shown = json.dumps(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return AnalysisError(f"{self.where}: field '{name}' should be {wanted}, got {shown}")

    def string(self, name: str, choices: Sequence[str] | None = None) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string", value)
        if choices is not None and value not in choices:
            raise self._bad(name, "one of " + ", ".join(repr(c) for c in choices), value)
        return value

    def opt_string(self, name: str) -> str | None:
        value = self._get(name)
        if value is not None and not isinstance(value, str):
            raise self._bad(name, "a string or null", value)
        return value

    def integer(self, name: str, minimum: int | None = None) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, "an integer", value)
        if minimum is not None and value < minimum:
            raise self._bad(name, f"an integer >= {minimum}", value)
        return value

    def opt_integer(self, name: str, minimum: int | None = None) -> int | None:
        if self._get(name) is None:
            return None
        return self.integer(name, minimum)

    def number(self, name: str) -> float:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._bad(name, "a number", value)
        return float(value)

    def boolean(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._bad(name, "true or false", value)
        return value

    def obj_list(self, name: str) -> list[Mapping[str, Any]]:
        value = self._get(name)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self._bad(name, "a list of objects", value)
        return value

    def str_list(self, name: str) -> list[str]:
        value = self._get(name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "a list of strings", value)
        return value

    def int_list(self, name: str) -> list[int]:
        value = self._get(name)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._bad(name, "a list of integers", value)
        return value

    def mapping(self, name: str) -> Mapping[str, Any]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._bad(name, "an object", value)
        return value


# --------------------------------------------------------------------------------------------
# files


def _read_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise AnalysisError(f"{path} is missing: not a run directory written by arc-eval (schema {SCHEMA})")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise AnalysisError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(raw, dict):
        raise AnalysisError(f"{path}: should hold a JSON object")
    f = _Fields(raw, str(path))
    schema = f.string("schema")
    if schema != SCHEMA:
        raise AnalysisError(f"{path}: schema is {schema!r}; this analysis reads {SCHEMA!r}")
    variants = f.mapping("variants")
    for label, params in variants.items():
        if not isinstance(params, dict):
            raise AnalysisError(f"{path}: variants[{label!r}] should be an object of parameters")
    versions = f.mapping("versions")
    return Manifest(
        path=path,
        command=tuple(f.str_list("command")),
        task_kind=f.string("task_kind", TASK_KINDS),
        methods=tuple(f.str_list("methods")),
        seeds=tuple(f.int_list("seeds")),
        tasks_per_seed=f.opt_integer("tasks_per_seed", 0),
        model=f.string("model"),
        backend=f.string("backend"),
        context_limit=f.integer("context_limit", 1),
        max_tokens=f.integer("max_tokens", 1),
        variants=variants,
        config=f.mapping("config"),
        versions={str(k): str(v) for k, v in versions.items()},
        git_commit=f.opt_string("git_commit"),
        created=f.string("created"),
    )


def _jsonl_objects(
    path: Path, notes: list[str], progress: ProgressFn | None
) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(line number, object) for each line; a torn last line is dropped with a note."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise AnalysisError(f"{path}: cannot be read ({exc})") from None
    lines = text.split("\n")
    # index of the last non-blank line: only that one may be torn
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    step = max(1, len(lines) // 10)
    for i, line in enumerate(lines):
        if progress is not None and len(lines) > 50_000 and i % step == 0 and i:
            progress(f"  {path.name}: {i:,}/{len(lines):,} lines")
        if not line.strip():
            continue
        lineno = i + 1
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == last:
                notes.append(
                    f"{path}:{lineno}: torn last line dropped (a write was interrupted: {exc.msg}, column {exc.colno})"
                )
                return
            raise AnalysisError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            if i == last:
                notes.append(f"{path}:{lineno}: last line is not a JSON object; dropped as torn")
                return
            raise AnalysisError(f"{path}:{lineno}: should be a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def _parse_task(obj: Mapping[str, Any], where: str, lineno: int) -> TaskRecord:
    f = _Fields(obj, where)
    submitted = f.boolean("submitted")
    no_answer = f.boolean("no_answer")
    correct = f.boolean("correct")
    if no_answer == submitted:
        raise AnalysisError(f"{where}: 'no_answer' must be the negation of 'submitted' (both are {submitted})")
    if correct and not submitted:
        raise AnalysisError(f"{where}: 'correct' is true but 'submitted' is false")
    return TaskRecord(
        variant=f.string("variant"),
        method=f.string("method"),
        model=f.string("model"),
        task_kind=f.string("task_kind", TASK_KINDS),
        task_id=f.string("task_id"),
        seed=f.integer("seed"),
        submitted=submitted,
        no_answer=no_answer,
        correct=correct,
        submission=f.opt_string("submission"),
        end=f.string("end", TASK_ENDS),
        error=f.opt_string("error"),
        calls=f.integer("calls", 0),
        steps=f.integer("steps", 0),
        reexecutions=f.integer("reexecutions", 0),
        meta=f.mapping("meta"),
        line=lineno,
    )


_CALL_TEXT_FIELDS = ("variant", "method", "model", "task_kind", "task_id", "purpose", "finish_reason")
_TASK_KIND_SET, _PURPOSE_SET, _FINISH_SET = frozenset(TASK_KINDS), frozenset(PURPOSES), frozenset(FINISH_REASONS)


def _parse_call_fast(obj: Mapping[str, Any], lineno: int) -> CallRecord | None:
    """The common case in one pass; None when anything is off (the slow path then names the problem)."""
    try:
        variant, method, model, kind, task_id, purpose, finish = (obj[k] for k in _CALL_TEXT_FIELDS)
        seed, index, prompt, completion = obj["seed"], obj["call_index"], obj["prompt_tokens"], obj["completion_tokens"]
        latency, overflow, reexecution = obj["latency_s"], obj["overflow"], obj["reexecution"]
        action, submission, compactions, recalls = obj["action"], obj["submission"], obj["compactions"], obj["recalls"]
    except KeyError:
        return None
    if not (
        type(variant) is str and type(method) is str and type(model) is str and type(task_id) is str
        and type(kind) is str and kind in _TASK_KIND_SET and type(purpose) is str and purpose in _PURPOSE_SET
        and type(finish) is str and finish in _FINISH_SET
        and type(seed) is int and type(index) is int and index >= 1
        and type(prompt) is int and prompt >= 0 and type(completion) is int and completion >= 0
        and type(latency) in (int, float) and type(overflow) is bool and type(reexecution) is bool
        and (action is None or type(action) is str) and (submission is None or type(submission) is str)
        and type(compactions) is list and type(recalls) is list
        and all(type(c) is dict and type(c.get("reason")) is str for c in compactions)
        and all(type(r) is dict for r in recalls)
    ):  # fmt: skip
        return None
    return CallRecord(
        variant, method, model, kind, task_id, seed, index, purpose, prompt, completion, float(latency), finish,
        overflow, tuple(c["reason"] for c in compactions), len(recalls), action, reexecution, lineno,
    )  # fmt: skip


def _parse_call(obj: Mapping[str, Any], where: str, lineno: int) -> CallRecord:
    fast = _parse_call_fast(obj, lineno)
    return fast if fast is not None else _parse_call_checked(obj, where, lineno)


def _parse_call_checked(obj: Mapping[str, Any], where: str, lineno: int) -> CallRecord:
    """Field by field, so that the first problem is reported by name."""
    f = _Fields(obj, where)
    compactions = []
    for item in f.obj_list("compactions"):
        reason = item.get("reason")
        if not isinstance(reason, str):
            raise AnalysisError(f"{where}: every entry of 'compactions' needs a string 'reason'")
        compactions.append(reason)
    recalls = f.obj_list("recalls")
    f.opt_string("submission")
    return CallRecord(
        variant=f.string("variant"),
        method=f.string("method"),
        model=f.string("model"),
        task_kind=f.string("task_kind", TASK_KINDS),
        task_id=f.string("task_id"),
        seed=f.integer("seed"),
        call_index=f.integer("call_index", 1),
        purpose=f.string("purpose", PURPOSES),
        prompt_tokens=f.integer("prompt_tokens", 0),
        completion_tokens=f.integer("completion_tokens", 0),
        latency_s=f.number("latency_s"),
        finish_reason=f.string("finish_reason", FINISH_REASONS),
        overflow=f.boolean("overflow"),
        compactions=tuple(compactions),
        recalls=len(recalls),
        action=f.opt_string("action"),
        reexecution=f.boolean("reexecution"),
        line=lineno,
    )


def load_run(run_dir: str | Path, progress: ProgressFn | None = None) -> RunData:
    """Validate and load one run directory; raises AnalysisError naming what is missing or malformed."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise AnalysisError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise AnalysisError(f"{run_dir}: not a directory (give the run directory that holds manifest.json)")
    manifest = _read_manifest(run_dir / "manifest.json")
    calls_path = run_dir / "calls.jsonl"
    tasks_path = run_dir / "tasks.jsonl"
    if not tasks_path.is_file():
        extra = (
            " (calls.jsonl exists: the run was interrupted before its first task finished)"
            if calls_path.is_file()
            else ""
        )
        raise AnalysisError(f"{tasks_path} is missing: no finished task is recorded{extra}")
    if not calls_path.is_file():
        raise AnalysisError(f"{calls_path} is missing: the per-call records (tokens, overflows) are needed")
    notes: list[str] = []

    if progress is not None:
        progress(f"reading {tasks_path}")
    tasks: dict[TaskKey, TaskRecord] = {}
    for lineno, obj in _jsonl_objects(tasks_path, notes, progress):
        where = f"{tasks_path}:{lineno}"
        task = _parse_task(obj, where, lineno)
        if task.task_kind != manifest.task_kind:
            raise AnalysisError(f"{where}: task_kind {task.task_kind!r} but the manifest says {manifest.task_kind!r}")
        if task.key in tasks:
            first = tasks[task.key].line
            raise AnalysisError(
                f"{where}: duplicate task line (same variant, method, seed, task_id as line {first}); "
                "a run must record each task once"
            )
        tasks[task.key] = task

    if progress is not None:
        progress(f"reading {calls_path}")
    calls: dict[TaskKey, list[CallRecord]] = {}
    orphan_calls = 0
    orphan_tasks: set[TaskKey] = set()
    for lineno, obj in _jsonl_objects(calls_path, notes, progress):
        where = f"{calls_path}:{lineno}"
        call = _parse_call(obj, where, lineno)
        if call.task_key not in tasks:
            orphan_calls += 1
            orphan_tasks.add(call.task_key)
            continue
        calls.setdefault(call.task_key, []).append(call)

    ordered: dict[TaskKey, tuple[CallRecord, ...]] = {}
    for key, task in tasks.items():
        own = sorted(calls.get(key, []), key=lambda c: c.call_index)
        for a, b in zip(own, own[1:]):
            if a.call_index == b.call_index:
                raise AnalysisError(
                    f"{calls_path}:{b.line}: call_index {b.call_index} of task {task.task_id!r} "
                    f"(method {task.method}, seed {task.seed}) already recorded at line {a.line}"
                )
        if len(own) != task.calls:
            notes.append(
                f"{tasks_path}:{task.line}: task {task.task_id!r} ({task.method}, seed {task.seed}) says "
                f"{task.calls} calls but calls.jsonl holds {len(own)}"
            )
        ordered[key] = tuple(own)

    if orphan_calls:
        notes.append(
            f"{run_dir}: {len(orphan_tasks)} incomplete task(s) skipped ({orphan_calls} call line(s) without a "
            "task line: the run was interrupted while they ran)"
        )
    unknown_methods = sorted({t.method for t in tasks.values()} - set(manifest.methods))
    if unknown_methods:
        notes.append(f"{tasks_path}: methods not listed in the manifest: {', '.join(unknown_methods)}")
    other_models = sorted({t.model for t in tasks.values()} - {manifest.model})
    if other_models:
        notes.append(f"{tasks_path}: model(s) {', '.join(other_models)} differ from the manifest's {manifest.model!r}")
    unknown_variants = sorted({t.variant for t in tasks.values()} - set(manifest.variants))
    if unknown_variants:
        notes.append(f"{tasks_path}: variants not listed in the manifest: {', '.join(map(repr, unknown_variants))}")
    if not tasks:
        notes.append(f"{tasks_path}: no finished task recorded")
    return RunData(
        run_dir=run_dir,
        manifest=manifest,
        tasks=tuple(tasks.values()),
        calls=ordered,
        incomplete_tasks=len(orphan_tasks),
        incomplete_calls=orphan_calls,
        notes=tuple(notes),
    )


def load_runs(run_dirs: Sequence[str | Path], progress: ProgressFn | None = None) -> Dataset:
    """Load and combine several run directories; a task recorded by two runs is an error."""
    if not run_dirs:
        raise AnalysisError("no run directory given")
    runs = [load_run(d, progress) for d in run_dirs]
    seen: dict[TaskKey, Path] = {}
    tasks: list[TaskRecord] = []
    calls: dict[TaskKey, tuple[CallRecord, ...]] = {}
    notes: list[str] = []
    for run in runs:
        notes.extend(run.notes)
        for task in run.tasks:
            if task.key in seen:
                raise AnalysisError(
                    f"task {task.task_id!r} (method {task.method}, seed {task.seed}, variant {task.variant!r}, "
                    f"model {task.model}) is recorded both in {seen[task.key]} and in {run.run_dir}; "
                    "give each run directory once"
                )
            seen[task.key] = run.run_dir
            tasks.append(task)
        calls.update(run.calls)
    by_group: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for run in runs:
        m = run.manifest
        by_group.setdefault((m.model, m.task_kind), set()).add((m.context_limit, m.max_tokens))
    for (model, kind), limits in sorted(by_group.items()):
        if len(limits) > 1:
            notes.append(f"{model} / {kind}: runs differ in context_limit/max_tokens {sorted(limits)}")
    return Dataset(runs=tuple(runs), tasks=tuple(tasks), calls=calls, notes=tuple(notes))
