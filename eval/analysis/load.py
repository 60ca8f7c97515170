"""Load run directories for the analysis: `arc_eval.records.RunReader` reads each line through `arc_eval.schema`.

Everything the analysis computes comes from these three files; nothing is recomputed from a model.
Every line kept is a schema record (`eval/RECORDS.md`); any problem becomes an `AnalysisError` whose
message names the file, the line and the field, or the missing file:

- `manifest.json`, `calls.jsonl`, `tasks.jsonl` must all exist (a run that was interrupted before
  its first task finished has no `tasks.jsonl`: we say so);
- a torn *last* line of a `.jsonl` file (a crash in the middle of a write; `records.JsonlFile`) is
  dropped and reported in `RunData.notes`; an unparsable line anywhere else is an error;
- calls whose `(variant, method, seed, task_id)` has no task line belong to an interrupted task:
  they are skipped and counted ("incomplete"), as RECORDS.md prescribes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from arc_eval.analysis.errors import AnalysisError
from arc_eval.records import CALLS_FILE, MANIFEST_FILE, TASKS_FILE, RunReader, RunRecordError
from arc_eval.schema import SCHEMA, CallRecord, Manifest, RecordError, TaskKey, TaskRecord

ProgressFn = Callable[[str], None]


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


def load_run(run_dir: str | Path, progress: ProgressFn | None = None) -> RunData:
    """Validate and load one run directory; raises AnalysisError naming what is missing or malformed."""
    try:
        return _load_run(Path(run_dir), progress)
    except (RunRecordError, RecordError) as failure:
        raise AnalysisError(str(failure)) from None


def _load_run(run_dir: Path, progress: ProgressFn | None) -> RunData:
    if not run_dir.exists():
        raise AnalysisError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise AnalysisError(f"{run_dir}: not a directory (give the run directory that holds {MANIFEST_FILE})")
    manifest_path = run_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise AnalysisError(f"{manifest_path} is missing: not a run directory written by arc-eval (schema {SCHEMA})")
    reader = RunReader(run_dir, progress)
    manifest = reader.manifest
    calls_path = run_dir / CALLS_FILE
    tasks_path = run_dir / TASKS_FILE
    if not tasks_path.is_file():
        extra = (
            f" ({CALLS_FILE} exists: the run was interrupted before its first task finished)"
            if calls_path.is_file()
            else ""
        )
        raise AnalysisError(f"{tasks_path} is missing: no finished task is recorded{extra}")
    if not calls_path.is_file():
        raise AnalysisError(f"{calls_path} is missing: the per-call records (tokens, overflows) are needed")

    if progress is not None:
        progress(f"reading {tasks_path}")
    tasks: dict[TaskKey, TaskRecord] = {}
    task_lines: dict[TaskKey, int] = {}
    for lineno, task in reader.numbered_tasks():
        where = f"{tasks_path}:{lineno}"
        if task.task_kind != manifest.task_kind:
            raise AnalysisError(f"{where}: task_kind {task.task_kind!r} but the manifest says {manifest.task_kind!r}")
        if task.key in tasks:
            raise AnalysisError(
                f"{where}: duplicate task line (same variant, method, seed, task_id as line {task_lines[task.key]}); "
                "a run must record each task once"
            )
        tasks[task.key] = task
        task_lines[task.key] = lineno

    if progress is not None:
        progress(f"reading {calls_path}")
    calls: dict[TaskKey, list[tuple[int, CallRecord]]] = {}
    orphan_calls = 0
    orphan_tasks: set[TaskKey] = set()
    for lineno, call in reader.numbered_calls():
        if call.task_key not in tasks:
            orphan_calls += 1
            orphan_tasks.add(call.task_key)
            continue
        calls.setdefault(call.task_key, []).append((lineno, call))

    notes = list(reader.notes)
    ordered: dict[TaskKey, tuple[CallRecord, ...]] = {}
    for key, task in tasks.items():
        own = sorted(calls.get(key, []), key=lambda numbered: numbered[1].call_index)
        for (line_a, a), (line_b, b) in zip(own, own[1:]):
            if a.call_index == b.call_index:
                raise AnalysisError(
                    f"{calls_path}:{line_b}: call_index {b.call_index} of task {task.task_id!r} "
                    f"(method {task.method}, seed {task.seed}) already recorded at line {line_a}"
                )
        if len(own) != task.calls:
            notes.append(
                f"{tasks_path}:{task_lines[key]}: task {task.task_id!r} ({task.method}, seed {task.seed}) says "
                f"{task.calls} calls but {CALLS_FILE} holds {len(own)}"
            )
        ordered[key] = tuple(call for _lineno, call in own)

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


def configuration_differences(first: Manifest, second: Manifest) -> list[str]:
    """How two runs' meanings differ (``arc_eval.schema.run_meaning``), one ``field (a vs b)`` per field."""
    from arc_eval.schema import run_meaning

    def flat(meaning: Mapping[str, object], prefix: str = "") -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in meaning.items():
            if key == "config" and isinstance(value, Mapping):
                out.update(flat(value, "config."))
            else:
                out[prefix + key] = value
        return out

    a, b = flat(run_meaning(first.to_json())), flat(run_meaning(second.to_json()))
    return [f"{key} ({a.get(key)!r} vs {b.get(key)!r})" for key in sorted(a.keys() | b.keys()) if a.get(key) != b.get(key)]


def check_runs_can_combine(run_dirs: Sequence[str | Path]) -> None:
    """Read the manifests only, before any record (issue 19): two runs that can hold the same task (same task
    kind and model, a seed, a method and a variant in common) cannot be combined; the error says at once how
    their configurations differ, or that they are one run given twice. Runs that differ by model, seed or
    variant (one per model, per ablation...) combine."""
    manifests: list[tuple[Path, Manifest]] = []
    for run_dir in run_dirs:
        path = Path(run_dir)
        if (path / MANIFEST_FILE).is_file():  # a missing or broken manifest is load_run's error, with its words
            try:
                manifests.append((path, RunReader(path).manifest))
            except (RunRecordError, RecordError):
                continue
    for index, (path_a, a) in enumerate(manifests):
        for path_b, b in manifests[index + 1:]:
            if path_a.resolve() == path_b.resolve():
                raise AnalysisError(f"{path_a} is given twice; give each run directory once")
            seeds = sorted(set(a.seeds) & set(b.seeds))
            methods = [name for name in a.methods if name in b.methods]
            variants = [label for label in a.variants if label in b.variants]
            if a.task_kind != b.task_kind or a.model != b.model or not (seeds and methods and variants):
                continue
            differences = configuration_differences(a, b)
            what = (f"their configurations differ in {', '.join(differences)}" if differences
                    else "they are the same configuration (one run recorded twice)")
            raise AnalysisError(
                f"{path_a} and {path_b} are two {a.task_kind} runs of {a.model} with seed(s) "
                f"{', '.join(map(str, seeds))} and method(s) {', '.join(methods)} in common, so they record the same "
                f"tasks; {what}. Report them one at a time (arc-eval report {path_a}), or combine runs that differ "
                "by model, seeds or variant"
            )


def load_runs(run_dirs: Sequence[str | Path], progress: ProgressFn | None = None) -> Dataset:
    """Load and combine several run directories; runs that record the same tasks are refused before any record
    is read (``check_runs_can_combine``), and a task recorded by two runs is an error."""
    if not run_dirs:
        raise AnalysisError("no run directory given")
    check_runs_can_combine(run_dirs)
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
