"""Synthetic run directories in the `arc-eval-run/1` format (eval/RECORDS.md), for the analysis tests.

Deterministic (seeded `random.Random`): several methods, seeds, tasks, calls, variants, LongBench
meta; plus helpers that damage a run the ways real runs get damaged (torn last line, interrupted
task, missing file). `write_run` returns the task lines it wrote, so tests can recount by hand.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALL_METHODS = ("full_context", "sliding_window", "llm_summary", "structured_state", "rag_memory", "arc")

LONGBENCH_META = [
    {"domain": "Single-Document QA", "sub_domain": "Literary", "length": "short", "difficulty": "hard"},
    {"domain": "Multi-Document QA", "sub_domain": "Legal", "length": "medium", "difficulty": "hard"},
    {"domain": "Code Repository Understanding", "sub_domain": "Code repo QA", "length": "long", "difficulty": "hard"},
    {"domain": "Long In-context Learning", "sub_domain": "User guide QA", "length": "short", "difficulty": "hard"},
]

# per method: (probability of no answer, probability of a correct answer when submitted, prompt growth per call)
DEFAULT_BEHAVIOUR: dict[str, tuple[float, float, int]] = {
    "full_context": (0.5, 0.6, 2400),
    "sliding_window": (0.2, 0.6, 900),
    "llm_summary": (0.15, 0.65, 700),
    "structured_state": (0.15, 0.6, 700),
    "rag_memory": (0.1, 0.7, 600),
    "arc": (0.02, 0.9, 300),
}


@dataclass
class RunSpec:
    task_kind: str = "nih"
    model: str = "Qwen/Qwen3-8B"
    backend: str = "openai"
    methods: tuple[str, ...] = ALL_METHODS
    seeds: tuple[int, ...] = (42, 82, 122)
    tasks_per_seed: int = 6
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})
    context_limit: int = 16384
    max_tokens: int = 4096
    calls_per_task: tuple[int, int] = (2, 7)
    rng_seed: int = 0
    behaviour: dict[str, tuple[float, float, int]] = field(default_factory=lambda: dict(DEFAULT_BEHAVIOUR))
    meta: list[dict[str, Any]] | None = None  # cycled over tasks; default by task kind
    task_ids: list[str] | None = None  # explicit ids (cycled with meta); default generated


def _manifest(spec: RunSpec) -> dict[str, Any]:
    return {
        "schema": "arc-eval-run/1",
        "command": ["arc-eval", spec.task_kind, "--synthetic"],
        "task_kind": spec.task_kind,
        "methods": list(spec.methods),
        "seeds": list(spec.seeds),
        "tasks_per_seed": spec.tasks_per_seed,
        "model": spec.model,
        "backend": spec.backend,
        "context_limit": spec.context_limit,
        "max_tokens": spec.max_tokens,
        "variants": spec.variants,
        "config": {"keep_verbatim_chars": 500},
        "versions": {"python": "3.11"},
        "git_commit": None,
        "created": "2025-01-01T00:00:00Z",
    }


def _call_line(
    spec: RunSpec, variant: str, method: str, seed: int, task_id: str, index: int, **fields: Any
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "variant": variant,
        "method": method,
        "model": spec.model,
        "task_kind": spec.task_kind,
        "task_id": task_id,
        "seed": seed,
        "call_index": index,
        "purpose": "agent",
        "prompt_tokens": 1000,
        "completion_tokens": 100,
        "latency_s": 0.5,
        "finish_reason": "stop",
        "overflow": False,
        "compactions": [],
        "recalls": [],
        "action": "cat secrets.txt",
        "submission": None,
        "reexecution": False,
        "counted_prompt_tokens": 1000,
    }
    line.update(fields)
    return line


def write_run(run_dir: Path, spec: RunSpec | None = None) -> list[dict[str, Any]]:
    """Write manifest.json, calls.jsonl and tasks.jsonl; return the task lines written."""
    spec = spec or RunSpec()
    rng = random.Random(spec.rng_seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps(_manifest(spec), indent=1), encoding="utf-8")
    meta_cycle = spec.meta or (
        [dict(m) for m in LONGBENCH_META] if spec.task_kind == "longbench" else [{"noise_lines_per_side": 25}]
    )
    tasks_written: list[dict[str, Any]] = []
    with (
        (run_dir / "calls.jsonl").open("w", encoding="utf-8") as calls,
        (run_dir / "tasks.jsonl").open("w", encoding="utf-8") as tasks,
    ):
        for variant in spec.variants:
            for seed in spec.seeds:
                for i in range(spec.tasks_per_seed):
                    task_id = (
                        spec.task_ids[i % len(spec.task_ids)] if spec.task_ids else f"{spec.task_kind}-{seed}-{i:03d}"
                    )
                    meta = dict(meta_cycle[i % len(meta_cycle)])
                    for method in spec.methods:
                        p_no, p_ok, growth = spec.behaviour[method]
                        submitted = rng.random() >= p_no
                        correct = submitted and rng.random() < p_ok
                        n_calls = rng.randint(*spec.calls_per_task)
                        lines = []
                        for k in range(1, n_calls + 1):
                            last = k == n_calls
                            prompt = 800 + growth * (k - 1) + rng.randint(0, 200)
                            purpose = "summary" if method == "llm_summary" and k % 3 == 0 and not last else "agent"
                            fields: dict[str, Any] = {
                                "purpose": purpose,
                                "prompt_tokens": prompt,
                                "completion_tokens": rng.randint(20, 900),
                                "latency_s": round(rng.uniform(0.1, 3.0), 3),
                            }
                            if method != "full_context" and k % 4 == 0:
                                fields["compactions"] = [{"reason": "proactive"}]
                            if method == "arc" and k % 3 == 2:
                                fields["recalls"] = [{"id": "§00000001-ab12", "chunk": 1, "chunks": 2}]
                            if last and not submitted and method == "full_context":
                                fields.update(
                                    prompt_tokens=spec.context_limit + 10,
                                    completion_tokens=0,
                                    finish_reason="overflow",
                                    overflow=True,
                                    action=None,
                                )
                            if last and submitted:
                                answer = "NEEDLE=ABC" if spec.task_kind == "nih" else "B"
                                fields.update(action=f"submit {answer}", submission=answer)
                            lines.append(_call_line(spec, variant, method, seed, task_id, k, **fields))
                        for line in lines:
                            calls.write(json.dumps(line) + "\n")
                        end = "submitted" if submitted else ("overflow" if method == "full_context" else "step_limit")
                        task = {
                            "variant": variant,
                            "method": method,
                            "model": spec.model,
                            "task_kind": spec.task_kind,
                            "task_id": task_id,
                            "seed": seed,
                            "submitted": submitted,
                            "no_answer": not submitted,
                            "correct": correct,
                            "submission": ("NEEDLE=ABC" if spec.task_kind == "nih" else "B") if submitted else None,
                            "end": end,
                            "error": None,
                            "calls": n_calls,
                            "steps": sum(1 for line in lines if line["purpose"] == "agent"),
                            "reexecutions": 0,
                            "meta": meta,
                        }
                        tasks.write(json.dumps(task) + "\n")
                        tasks_written.append(task)
    return tasks_written


def append_interrupted_task(
    run_dir: Path, method: str = "arc", n_calls: int = 3, task_id: str = "interrupted-1"
) -> None:
    """Calls of a task that never got its task line (the run was killed while it ran)."""
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    spec = RunSpec(task_kind=manifest["task_kind"], model=manifest["model"])
    variant = next(iter(manifest["variants"]))
    with (run_dir / "calls.jsonl").open("a", encoding="utf-8") as fh:
        for k in range(1, n_calls + 1):
            fh.write(json.dumps(_call_line(spec, variant, method, manifest["seeds"][0], task_id, k)) + "\n")


def tear_last_line(path: Path, fragment: str = '{"variant": "", "method": "ar') -> None:
    """Append a partial JSON line with no newline: a write cut short by a crash."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(fragment)


def rewrite_line(path: Path, lineno: int, new_text: str) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[lineno - 1] = new_text
    path.write_text("\n".join(lines), encoding="utf-8")


def edit_task_line(path: Path, lineno: int, **changes: Any) -> None:
    """Change (or with value ... delete) fields of one JSON line."""
    lines = path.read_text(encoding="utf-8").split("\n")
    obj = json.loads(lines[lineno - 1])
    for key, value in changes.items():
        if value is ...:
            obj.pop(key, None)
        else:
            obj[key] = value
    lines[lineno - 1] = json.dumps(obj)
    path.write_text("\n".join(lines), encoding="utf-8")
