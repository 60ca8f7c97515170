"""LongBench-v2 loading (official data.json), hard filter, and the official answer extraction."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from arc_eval.sandbox import VirtualSandbox, paginate
from proofs_check.shared_data import shared_data_dir
from arc_eval.tasks.longbench import (
    LongBenchDataError,
    extract_longbench_answer,
    longbench_columns,
    load_longbench,
    score_longbench,
)

SAMPLE = shared_data_dir() / "longbench_v2_hard_sample"


def record(index: int, difficulty: str = "hard", answer: str = "B") -> dict[str, Any]:
    return {
        "_id": f"id{index:03d}",
        "domain": "Single-Document QA",
        "sub_domain": "Literary",
        "difficulty": difficulty,
        "length": "short",
        "question": f"Which statement about document {index} is right?",
        "choice_A": "first",
        "choice_B": "second",
        "choice_C": "third",
        "choice_D": "fourth",
        "answer": answer,
        "context": "".join(f"paragraph {n} of document {index}\n" for n in range(400)),
    }


def write(tmp_path: Path, records: Any) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    return path


def test_synthetic_file_keeps_only_hard_items_in_order(tmp_path: Path) -> None:
    records = [record(0), record(1, "easy"), record(2, answer="D"), record(3, "easy")]
    path = write(tmp_path, records)
    tasks = load_longbench(str(path))
    assert [t.task_id for t in tasks] == ["lbv2-id000", "lbv2-id002"]
    assert [t.answer for t in tasks] == ["B", "D"]
    assert load_longbench(str(tmp_path)) == tasks  # a directory holding data.json works too
    assert len(load_longbench(str(path), difficulty="easy")) == 2
    assert len(load_longbench(str(path), difficulty="all")) == 4


def test_task_shape_goal_files_and_meta(tmp_path: Path) -> None:
    task = load_longbench(str(write(tmp_path, [record(7)])), page_chars=1000)[0]
    context = record(7)["context"]
    assert dict(task.files) == {"context.txt": context}
    assert task.kind == "longbench"
    pages = len(paginate(context, 1000))
    assert "read context.txt PAGE" in task.goal and f"PAGE from 1 to {pages}" in task.goal
    for line in ["(A) first", "(B) second", "(C) third", "(D) fourth", "Which statement"]:
        assert line in task.goal
    assert "submit The correct answer is (X)" in task.goal
    assert task.meta["domain"] == "Single-Document QA" and task.meta["sub_domain"] == "Literary"
    assert task.meta["length"] == "short" and task.meta["difficulty"] == "hard"
    assert task.meta["pages"] == pages
    # the goal's page count is the sandbox's
    sandbox = VirtualSandbox(task.files, page_chars=1000)
    assert f"page {pages}/{pages}" in sandbox.run(f"read context.txt {pages}").text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The correct answer is (A)", "A"),
        ("**The correct answer is (B)**", "B"),
        ("The correct answer is C because ...", "C"),
        ("The correct answer is *(D)*", "D"),
        ("I think The correct answer is (B). No wait, The correct answer is (C)", "B"),
        ("The correct answer is D, or rather The correct answer is (A)", "A"),  # parens first
        ("the correct answer is (A)", None),  # case-sensitive like the official harness
        ("The correct answer is (E)", None),
        ("Answer: B", None),
        ("", None),
    ],
)
def test_extraction_matches_the_official_harness(text: str, expected: str | None) -> None:
    assert extract_longbench_answer(text) == expected


def test_score(tmp_path: Path) -> None:
    task = load_longbench(str(write(tmp_path, [record(1, answer="C")])))[0]
    assert score_longbench(task, "The correct answer is (C)")
    assert not score_longbench(task, "The correct answer is (A)")
    assert not score_longbench(task, None)
    assert not score_longbench(task, "C")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"not": "a list"}, "JSON list"),
        ([{"_id": "x"}], "lacks"),
        ([dict(record(0), answer="E")], "not one of A, B, C, D"),
        ([record(0), record(0)], "duplicate _id"),
        ([dict(record(0), context=5)], "must be strings"),
        ([record(0, "easy")], "no record with difficulty 'hard'"),
    ],
)
def test_malformed_files_get_clear_errors(tmp_path: Path, content: Any, message: str) -> None:
    with pytest.raises(LongBenchDataError, match=message):
        load_longbench(str(write(tmp_path, content)))


def test_missing_paths_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(LongBenchDataError, match="does not exist"):
        load_longbench(str(tmp_path / "nothing.json"))
    with pytest.raises(LongBenchDataError, match="without data.json"):
        load_longbench(str(tmp_path))
    (tmp_path / "data.json").write_text("[{", encoding="utf-8")
    with pytest.raises(LongBenchDataError, match="not valid UTF-8 JSON"):
        load_longbench(str(tmp_path))
    with pytest.raises(LongBenchDataError, match="difficulty must be one of"):
        load_longbench(str(tmp_path), difficulty="medium")


def test_no_path_uses_the_hub_cache_and_never_downloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(LongBenchDataError, match="never downloads: pass --data PATH"):
        load_longbench()
    snapshot = tmp_path / "hf" / "hub" / "datasets--THUDM--LongBench-v2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    write(snapshot, [record(0), record(1, "easy")])
    assert [t.task_id for t in load_longbench()] == ["lbv2-id000"]


@pytest.mark.skipif(
    importlib.util.find_spec("datasets") is not None,
    reason="checks the message shown when the `datasets` package is missing",
)
def test_a_datasets_cache_without_the_datasets_package_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    arrow = tmp_path / "hf" / "datasets" / "THUDM___long_bench-v2" / "default" / "0.0.0" / "ab12"
    arrow.mkdir(parents=True)
    (arrow / "long_bench-v2-train.arrow").write_bytes(b"")
    with pytest.raises(LongBenchDataError, match="`datasets` package is not installed"):
        load_longbench()


@pytest.mark.skipif(not (SAMPLE / "data.json").is_file(), reason=f"real sample absent: {SAMPLE}")
def test_real_twelve_question_sample() -> None:
    tasks = load_longbench(str(SAMPLE))
    assert len(tasks) == 12
    assert len({t.task_id for t in tasks}) == 12
    assert {t.meta["difficulty"] for t in tasks} == {"hard"}
    assert all(t.answer in "ABCD" for t in tasks)
    domains = {t.meta["domain"] for t in tasks}
    assert len(domains) == 6
    by_id = {t.meta["_id"]: t for t in tasks}
    # figures from the sample's SOURCES.md
    assert by_id["66f3ad93821e116aacb2e29f"].answer == "C"
    assert by_id["66f3ad93821e116aacb2e29f"].meta["context_chars"] == 101348
    assert by_id["6703a0ecbb02136c067cd11b"].files["context.txt"].startswith("\ufeff")
    assert sum(t.meta["context_chars"] for t in tasks) == 1215034
    for task in tasks:
        sandbox = VirtualSandbox(task.files)
        pages = task.meta["pages"]
        last = sandbox.run(f"read context.txt {pages}")
        assert last.returncode == 0 and f"page {pages}/{pages}" in last.text
        assert score_longbench(task, f"The correct answer is ({task.answer})")


def test_official_columns_as_result_py_computes_them() -> None:
    def record(correct: bool, difficulty: str, length: str) -> dict[str, object]:
        return {"correct": correct, "meta": {"difficulty": difficulty, "length": length}}

    records = [record(True, "easy", "short"), record(False, "easy", "medium"), record(True, "hard", "long"),
               record(True, "hard", "medium"), record(False, "hard", "long"), record(False, "hard", "short")]
    assert longbench_columns(records) == {"Overall": 50.0, "Easy": 50.0, "Hard": 50.0, "Short": 50.0,
                                          "Medium": 50.0, "Long": 50.0}
    assert longbench_columns([record(True, "hard", "long"), record(False, "hard", "long"),
                              record(False, "hard", "long")]) == {
        "Overall": 33.3, "Easy": None, "Hard": 33.3, "Short": None, "Medium": None, "Long": 33.3}
