"""LongBench-v2 tasks from the official `data.json`: the hard subset, scored as the official code.

Format. The official file (THUDM/LongBench-v2 on the Hugging Face hub) is one JSON list of records
with the fields ``_id, domain, sub_domain, difficulty, length, question, choice_A, choice_B,
choice_C, choice_D, answer, context``; ``answer`` is one letter A-D. The full set has 503 records,
311 of them ``difficulty == "hard"`` (the paper's subset).

Loading never downloads. `load_longbench(path)` takes the file or a directory holding
`data.json`; with no path it looks for a copy the user already has in the Hugging Face caches
(`hf_hub_download` snapshots under ``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
``~/.cache/huggingface/hub``; and, when the `datasets` package is installed, the Arrow files
`datasets.load_dataset` left under ``$HF_DATASETS_CACHE`` or ``$HF_HOME/datasets``).

Scoring. `extract_longbench_answer` mirrors `extract_answer` of the official `pred.py`
(THUDM/LongBench, LongBench v2): remove every ``*``, then search
``The correct answer is \\(([A-D])\\)``, then ``The correct answer is ([A-D])``; the first match
wins, case-sensitive; no match is no answer. As the official harness applies it to the whole response,
the agent loop applies it to the whole final reply (the one whose action is ``submit``; reasoning blocks
removed, as a server with a reasoning parser does), not to the action alone. A prediction is correct when
the letter equals ``answer``. The official table (`result.py`) reports Overall, Easy, Hard, Short, Medium
and Long accuracy: `longbench_columns` computes them from task records.

The agent sees the context only through the sandbox: ``files={"context.txt": context}``, read with
``read context.txt PAGE``; the goal gives the question, the four choices and the answer format.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from attrs import frozen

from arc_ref.errors import ConfigError
from arc_eval.errors import EvalError
from arc_eval.registry import ComponentOptions, TaskEntry, option, register_task
from arc_eval.sandbox import DEFAULT_PAGE_CHARS, paginate
from arc_eval.types import Task

LONGBENCH_KIND = "longbench"  # the task's name: Task.kind, the records' task_kind, the command
CONTEXT_FILE = "context.txt"
REQUIRED_FIELDS = (
    "_id",
    "domain",
    "sub_domain",
    "difficulty",
    "length",
    "question",
    "choice_A",
    "choice_B",
    "choice_C",
    "choice_D",
    "answer",
    "context",
)
DIFFICULTIES = ("hard", "easy", "all")
HUB_REPOS = ("THUDM/LongBench-v2", "zai-org/LongBench-v2")

_ANSWER_WITH_PARENS = re.compile(r"The correct answer is \(([A-D])\)")
_ANSWER_BARE = re.compile(r"The correct answer is ([A-D])")


class LongBenchDataError(EvalError, ValueError):
    """The LongBench-v2 file is missing, unreadable or not in the official format."""


def extract_longbench_answer(text: str) -> str | None:
    """The answer letter as the official LongBench-v2 harness extracts it, or None."""
    cleaned = text.replace("*", "")
    match = _ANSWER_WITH_PARENS.search(cleaned) or _ANSWER_BARE.search(cleaned)
    return match.group(1) if match else None


def score_longbench(task: Task, submission: str | None) -> bool:
    """True when the letter extracted from `submission` is the task's answer."""
    if submission is None:
        return False
    return extract_longbench_answer(submission) == task.answer


def longbench_task_id(record_id: str) -> str:
    return f"lbv2-{record_id}"


def _goal(record: dict[str, Any], pages: int, page_chars: int) -> str:
    context_chars = len(record["context"])
    return (
        "Answer a multiple-choice question about a long document.\n"
        f"The document is the file {CONTEXT_FILE} ({context_chars} characters, {pages} "
        f"page{'s' if pages != 1 else ''} of at most {page_chars} characters). Read it page by "
        f"page with `read {CONTEXT_FILE} PAGE` (PAGE from 1 to {pages}); "
        f"`grep PATTERN {CONTEXT_FILE}` finds lines.\n\n"
        f"Question: {record['question'].strip()}\n"
        f"(A) {record['choice_A'].strip()}\n"
        f"(B) {record['choice_B'].strip()}\n"
        f"(C) {record['choice_C'].strip()}\n"
        f"(D) {record['choice_D'].strip()}\n\n"
        "When you know the answer, submit exactly one letter in this format:\n"
        "submit The correct answer is (X)\n"
        "where X is A, B, C or D."
    )


def _validate(records: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(records, list):
        raise LongBenchDataError(
            f"{source}: expected a JSON list of records (the official data.json), "
            f"found {type(records).__name__}"
        )
    seen: set[str] = set()
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise LongBenchDataError(f"{source}: record {index} is not a JSON object")
        missing = [name for name in REQUIRED_FIELDS if name not in record]
        if missing:
            raise LongBenchDataError(
                f"{source}: record {index} ({record.get('_id', 'no _id')}) lacks "
                f"{', '.join(missing)}"
            )
        not_text = [name for name in REQUIRED_FIELDS if not isinstance(record[name], str)]
        if not_text:
            raise LongBenchDataError(
                f"{source}: record {index} ({record['_id']}): {', '.join(not_text)} must be strings"
            )
        if record["answer"] not in ("A", "B", "C", "D"):
            raise LongBenchDataError(
                f"{source}: record {index} ({record['_id']}): answer {record['answer']!r} "
                "is not one of A, B, C, D"
            )
        if record["_id"] in seen:
            raise LongBenchDataError(f"{source}: duplicate _id {record['_id']!r}")
        seen.add(record["_id"])
    return records


def _read_json_file(path: Path) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8") as handle:
            records = json.load(handle)
    except OSError as failure:
        raise LongBenchDataError(f"cannot read {path}: {failure.strerror or failure}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as failure:
        raise LongBenchDataError(f"{path} is not valid UTF-8 JSON: {failure}") from None
    return _validate(records, str(path))


def _hub_cache_dirs() -> list[Path]:
    dirs: list[Path] = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def _datasets_cache_dirs() -> list[Path]:
    dirs: list[Path] = []
    if os.environ.get("HF_DATASETS_CACHE"):
        dirs.append(Path(os.environ["HF_DATASETS_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "datasets")
    dirs.append(Path.home() / ".cache" / "huggingface" / "datasets")
    return dirs


def find_cached_data_json() -> Path | None:
    """A `data.json` of LongBench-v2 already in the Hugging Face hub cache, or None."""
    for cache in _hub_cache_dirs():
        for repo in HUB_REPOS:
            snapshots = cache / ("datasets--" + repo.replace("/", "--")) / "snapshots"
            if snapshots.is_dir():
                candidates = sorted(snapshots.glob("*/data.json"), key=lambda p: p.stat().st_mtime)
                if candidates:
                    return candidates[-1]
    return None


def _find_cached_arrow() -> list[Path]:
    for cache in _datasets_cache_dirs():
        if not cache.is_dir():
            continue
        for folder in sorted(cache.glob("*ong_bench-v2*")) + sorted(cache.glob("*LongBench-v2*")):
            files = sorted(folder.rglob("*.arrow"))
            if files:
                return files
    return []


def _read_arrow(files: Iterable[Path]) -> list[dict[str, Any]]:
    try:
        from datasets import (  # type: ignore[import-not-found, unused-ignore]
            Dataset,
            concatenate_datasets,
        )
    except ImportError:
        raise LongBenchDataError(
            "found a Hugging Face datasets cache of LongBench-v2 but the `datasets` package is "
            "not installed; install it or pass --data PATH/TO/data.json"
        ) from None
    parts = [Dataset.from_file(str(path)) for path in files]
    table = concatenate_datasets(parts) if len(parts) > 1 else parts[0]
    return _validate([dict(row) for row in table], "Hugging Face datasets cache")


def read_longbench_records(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """All records of the official file at `path` (file or directory), or of a cached copy."""
    if path is not None:
        location = Path(path).expanduser()
        if location.is_dir():
            candidate = location / "data.json"
            if not candidate.is_file():
                raise LongBenchDataError(
                    f"{location} is a directory without data.json; pass the LongBench-v2 "
                    "data.json file or the directory that holds it"
                )
            location = candidate
        elif not location.exists():
            raise LongBenchDataError(
                f"{location} does not exist; pass the LongBench-v2 data.json file or the "
                "directory that holds it"
            )
        return _read_json_file(location)
    cached = find_cached_data_json()
    if cached is not None:
        return _read_json_file(cached)
    arrow = _find_cached_arrow()
    if arrow:
        return _read_arrow(arrow)
    raise LongBenchDataError(
        "no LongBench-v2 data given and none found in the Hugging Face caches "
        f"({', '.join(str(p) for p in _hub_cache_dirs())}); this tool never downloads: pass "
        "--data PATH where PATH is the official data.json of THUDM/LongBench-v2 "
        "(or a directory holding it)"
    )


def make_longbench_task(record: dict[str, Any], *, page_chars: int = DEFAULT_PAGE_CHARS) -> Task:
    """One task from one official record; `page_chars` must match the sandbox's."""
    pages = len(paginate(record["context"], page_chars))
    return Task(
        task_id=longbench_task_id(record["_id"]),
        kind=LONGBENCH_KIND,
        goal=_goal(record, pages, page_chars),
        files={CONTEXT_FILE: record["context"]},
        answer=record["answer"],
        meta={
            "_id": record["_id"],
            "domain": record["domain"],
            "sub_domain": record["sub_domain"],
            "length": record["length"],
            "difficulty": record["difficulty"],
            "context_chars": len(record["context"]),
            "pages": pages,
        },
    )


def load_longbench(
    path: str | None = None,
    *,
    difficulty: str = "hard",
    page_chars: int = DEFAULT_PAGE_CHARS,
) -> list[Task]:
    """Tasks of the records whose `difficulty` matches ("hard" by default; "all" keeps every one).

    Order is the file's order. Raises `LongBenchDataError` with a message saying what to pass
    when the data is missing or malformed, or when no record has the requested difficulty.
    """
    if difficulty not in DIFFICULTIES:
        raise LongBenchDataError(
            f"difficulty must be one of {', '.join(DIFFICULTIES)}, got {difficulty!r}"
        )
    records = read_longbench_records(path)
    kept = [r for r in records if difficulty == "all" or r["difficulty"] == difficulty]
    if not kept:
        found = sorted({r["difficulty"] for r in records})
        raise LongBenchDataError(
            f"no record with difficulty {difficulty!r} among {len(records)} "
            f"(difficulties present: {', '.join(found) or 'none'})"
        )
    return [make_longbench_task(record, page_chars=page_chars) for record in kept]


OFFICIAL_COLUMNS = ("Overall", "Easy", "Hard", "Short", "Medium", "Long")


def longbench_columns(records: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """The official LongBench-v2 table (`result.py`): accuracy in percent, rounded to one decimal, overall and
    by difficulty and length, from task records (``correct`` and ``meta.difficulty`` / ``meta.length``).

    As in `result.py`, a record that is not ``easy`` counts as hard and one that is neither ``short`` nor
    ``medium`` as long; a column with no record is None (the official script would divide by zero).
    """
    totals = {column: [0, 0] for column in OFFICIAL_COLUMNS}
    for record in records:
        meta = record.get("meta") or {}
        correct = 1 if record.get("correct") else 0
        length = meta.get("length")
        columns = ["Overall", "Easy" if meta.get("difficulty") == "easy" else "Hard",
                   "Short" if length == "short" else "Medium" if length == "medium" else "Long"]
        for column in columns:
            totals[column][0] += correct
            totals[column][1] += 1
    return {column: (round(100 * hits / count, 1) if count else None) for column, (hits, count) in totals.items()}


def _absolute_path(path: str | None) -> str | None:
    """A path made absolute (so the run's meaning does not depend on the working directory)."""
    return None if path is None else os.path.abspath(path)


@frozen
class LongBenchOptions(ComponentOptions):
    """The LongBench-v2 task's knobs: the local data and the subset (paper: the hard subset)."""

    data: str | None = option(None, metavar="PATH", converter=_absolute_path,
                              help="the official data.json (or its directory); never downloaded")
    difficulty: str = option("hard", choices=DIFFICULTIES,
                             help="hard (the paper's subset), easy, or all (the full data set)")

    def check(self) -> None:
        if not self.data:
            raise ConfigError("LongBench needs --data PATH (the official data.json or its directory); nothing is "
                              "downloaded")


class LongBenchItems:
    """The items of one data file and difficulty, read once (the same items for every seed)."""

    def __init__(self, options: LongBenchOptions) -> None:
        self.items = load_longbench(options.data, difficulty=options.difficulty)

    def tasks(self, seed: int, count: int | None) -> list[Task]:
        return self.items[:count] if count is not None else self.items


def _score_letter(task: Task, submission: str, reply: str) -> tuple[bool, str | None]:
    """The letter of the whole final reply, as the official harness extracts it."""
    return score_longbench(task, reply), extract_longbench_answer(reply)


def _plan_steps(task: Task) -> int:
    """One step per page of the context, then the answer."""
    pages = task.meta.get("pages")
    if isinstance(pages, int) and pages > 0:
        return pages + 1
    return math.ceil(len("".join(task.files.values())) / DEFAULT_PAGE_CHARS) + 1


register_task(TaskEntry(
    name=LONGBENCH_KIND,
    label="LongBench-v2",
    help="LongBench-v2 hard subset from a local data.json",
    options=LongBenchOptions,
    source=LongBenchItems,
    scorer=_score_letter,
    plan_steps=_plan_steps,
    count_flag="--limit",
    count_default=None,
    count_help="only the first N items of the chosen difficulty (default: all)",
    report_table="arc_eval.analysis.report:longbench_official_table",
    order=2,
))
