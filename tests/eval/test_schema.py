"""The record schema: eval/RECORDS.md matches arc_eval.schema, and from_json / to_json agree on every field."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from arc_eval.schema import (
    RECORD_CLASSES,
    CallRecord,
    Clip,
    Compaction,
    Manifest,
    Recall,
    RecordError,
    TaskRecord,
    _no_fast_path,
    field_specs,
    from_json,
    json_type,
)

RECORDS_MD = Path(__file__).resolve().parents[2] / "eval" / "RECORDS.md"
# The heading of each table in RECORDS.md -> the class it documents.
SECTIONS = {
    "## `manifest.json`": Manifest,
    "## `calls.jsonl`": CallRecord,
    "### An entry of `compactions`": Compaction,
    "### An entry of `clips`": Clip,
    "### An entry of `recalls`": Recall,
    "## `tasks.jsonl`": TaskRecord,
}


def documented_tables() -> dict[type, list[dict[str, str]]]:
    """Each documented class -> its table rows (key, type, required, meaning), in order."""
    tables: dict[type, list[dict[str, str]]] = {}
    current: type | None = None
    for line in RECORDS_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            current = next((cls for heading, cls in SECTIONS.items() if line.startswith(heading)), None)
            continue
        if current is None or not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"RECORDS.md row with {len(cells)} cells: {line}"
        key = re.fullmatch(r"`([a-z_]+)`", cells[0])
        assert key is not None, f"RECORDS.md: a key cell must be one `name`: {line}"
        tables.setdefault(current, []).append(
            {"key": key.group(1), "type": cells[1], "required": cells[2], "meaning": cells[3]}
        )
    return tables


def test_records_md_documents_every_record_class() -> None:
    assert set(documented_tables()) == set(RECORD_CLASSES)


@pytest.mark.parametrize("cls", RECORD_CLASSES, ids=lambda cls: cls.__name__)
def test_records_md_table_matches_the_schema(cls: type) -> None:
    rows = documented_tables()[cls]
    specs = field_specs(cls)
    assert [row["key"] for row in rows] == [spec.name for spec in specs], "field names or order differ"
    for row, spec in zip(rows, specs, strict=True):
        assert row["type"] == json_type(spec.annotation), f"{cls.__name__}.{spec.name}: type"
        assert row["required"] == ("yes" if spec.required else "no"), f"{cls.__name__}.{spec.name}: required"
        for choice in spec.choices or ():
            assert f"`{choice}`" in row["meaning"], f"{cls.__name__}.{spec.name}: value {choice!r} undocumented"


def call_json(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "variant": "", "method": "arc", "model": "m", "task_kind": "nih", "task_id": "t", "seed": 1,
        "call_index": 1, "purpose": "agent", "prompt_tokens": 10, "completion_tokens": 2, "latency_s": 0.5,
        "finish_reason": "stop", "overflow": False, "compactions": [{"reason": "forced"}],
        "recalls": [{"id": "§1", "chunk": 1, "chunks": 2}], "action": "ls", "submission": None,
        "reexecution": False, "counted_prompt_tokens": 10,
    }  # fmt: skip
    return {**line, **changes}


def task_json(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "variant": "", "method": "arc", "model": "m", "task_kind": "nih", "task_id": "t", "seed": 1,
        "submitted": True, "no_answer": False, "correct": True, "submission": "NEEDLE=A", "end": "submitted",
        "error": None, "calls": 1, "steps": 1, "reexecutions": 0, "meta": {"noise_lines_per_side": 25},
    }  # fmt: skip
    return {**line, **changes}


def manifest_json(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "schema": "arc-eval-run/1", "command": ["arc-eval", "nih"], "task_kind": "nih", "methods": ["arc"],
        "seeds": [42], "tasks_per_seed": None, "model": "scripted", "backend": "scripted", "context_limit": 16384,
        "max_tokens": 4096, "variants": {"": {}}, "config": {"force_at_calls": [5]}, "versions": {"python": "3"},
        "git_commit": None, "created": "2025-01-01T00:00:00+00:00", "git_tree": None,
    }  # fmt: skip
    return {**line, **changes}


def slow_path(cls: type, obj: dict[str, Any]) -> Any:
    """from_json with the generated fast parser switched off: the field-by-field path alone."""
    from arc_eval import schema

    saved = schema._FAST.get(cls)
    schema._FAST[cls] = _no_fast_path
    try:
        return from_json(cls, obj, "x")
    finally:
        if saved is None:
            del schema._FAST[cls]
        else:
            schema._FAST[cls] = saved


@pytest.mark.parametrize(
    ("cls", "obj"),
    [(CallRecord, call_json()), (TaskRecord, task_json()), (Manifest, manifest_json()),
     (CallRecord, call_json(latency_s=2, compactions=[], recalls=[], action=None)),
     (CallRecord, call_json(clips=[{"turns": 1, "newest": True, "before": 13000, "after": 7000}]))],
)  # fmt: skip
def test_round_trip_and_both_parsing_paths_agree(cls: type, obj: dict[str, Any]) -> None:
    record = from_json(cls, obj, "x")
    assert record == slow_path(cls, obj)
    assert json.loads(json.dumps(record.to_json())) == {
        **obj, **({"latency_s": float(obj["latency_s"])} if "latency_s" in obj else {})
    }
    assert list(record.to_json()) == [spec.name for spec in field_specs(cls) if spec.name in obj]  # the order on disk


def test_an_empty_clips_list_is_not_written() -> None:
    """``clips`` is written only when a clip happened: a run with none writes the lines it wrote before the field."""
    record = from_json(CallRecord, call_json(), "x")
    assert record.clips == () and "clips" not in record.to_json() and record.to_json() == call_json()
    assert from_json(CallRecord, call_json(clips=[]), "x") == record
    clipped = from_json(CallRecord, call_json(clips=[{"turns": 2, "newest": False, "before": 9, "after": 8}]), "x")
    assert clipped.clips == (Clip(2, False, 9, 8),) and clipped.to_json()["clips"][0]["turns"] == 2


def test_a_call_record_written_before_counted_prompt_tokens_reads_with_null() -> None:
    older = call_json()
    del older["counted_prompt_tokens"]
    record = from_json(CallRecord, older, "x")
    assert record.counted_prompt_tokens is None and record == slow_path(CallRecord, older)
    assert record.to_json()["counted_prompt_tokens"] is None


BROKEN = [
    (CallRecord, call_json(seed=True), "'seed' should be an integer"),
    (CallRecord, call_json(call_index=0), "'call_index' should be an integer >= 1"),
    (CallRecord, call_json(purpose=["agent"]), "'purpose' should be one of 'agent', 'summary', 'state'"),
    (CallRecord, call_json(finish_reason="tool_calls"), "'finish_reason' should be one of"),
    (CallRecord, call_json(latency_s="1s"), "'latency_s' should be a number"),
    (CallRecord, call_json(recalls=[1]), "'recalls' should be a list of objects"),
    (CallRecord, call_json(recalls=[{"id": "§1", "chunk": 0, "chunks": 1}]), "'chunk' should be an integer >= 1"),
    (CallRecord, call_json(compactions=[{"reason": "bored"}]), "'reason' should be one of"),
    (CallRecord, call_json(action=3), "'action' should be a string"),
    (CallRecord, call_json(counted_prompt_tokens=-1), "'counted_prompt_tokens' should be an integer >= 0"),
    (CallRecord, call_json(counted_prompt_tokens="10"), "'counted_prompt_tokens' should be an integer"),
    (CallRecord, call_json(clips=[{"turns": 0, "newest": True, "before": 9, "after": 8}]),
     "'turns' should be an integer >= 1"),
    (CallRecord, {k: v for k, v in call_json().items() if k != "overflow"}, "required field 'overflow' is missing"),
    (TaskRecord, task_json(no_answer=True), "negation of 'submitted'"),
    (TaskRecord, task_json(submitted=False, no_answer=True), "'correct' is true but 'submitted' is false"),
    (TaskRecord, task_json(end="done"), "'end' should be one of"),
    (TaskRecord, task_json(meta=[]), "'meta' should be an object"),
    (Manifest, manifest_json(schema="arc-eval-run/9"), "schema is 'arc-eval-run/9'"),
    (Manifest, manifest_json(seeds=["42"]), "'seeds' should be a list of integers"),
    (Manifest, manifest_json(versions={"python": 3}), "'versions' should be an object of strings"),
    (Manifest, manifest_json(tasks_per_seed=-1), "'tasks_per_seed' should be an integer >= 0"),
    (CallRecord, [1, 2], "should be a JSON object, got list"),
]


@pytest.mark.parametrize(("cls", "obj", "message"), BROKEN)
def test_a_broken_record_is_refused_naming_the_field(cls: type, obj: Any, message: str) -> None:
    with pytest.raises(RecordError, match=re.escape(message)):
        from_json(cls, obj, "file:7")
    if isinstance(obj, dict):
        with pytest.raises(RecordError, match=re.escape(message)):
            slow_path(cls, obj)


def test_unknown_keys_are_ignored_and_optional_fields_default() -> None:
    assert CallRecord.from_json(call_json(server_prompt_tokens=12)) == CallRecord.from_json(call_json())

    @attrs.frozen
    class WithOptional:
        name: str
        extra: int = attrs.field(default=7, metadata={"minimum": 0})

    assert from_json(WithOptional, {"name": "a"}, "x") == WithOptional("a", 7)
    assert [spec.required for spec in field_specs(WithOptional)] == [True, False]
    with pytest.raises(RecordError, match="'extra' should be an integer >= 0"):
        from_json(WithOptional, {"name": "a", "extra": -1}, "x")
