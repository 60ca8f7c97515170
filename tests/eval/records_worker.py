"""A stand-in run for the crash test: writes many tasks through RunWriter, resuming what exists.

Usage: python records_worker.py RUN_DIR TASKS_PER_METHOD SLEEP_S [fsync|flush]
Each task gets 1-6 call records whose content depends only on the task, plus this process' id in
the task record, so the test can tell which process finished which task.
"""

from __future__ import annotations

import os
import sys
import time

from arc_eval.records import RunWriter
from arc_eval.schema import CallRecord, TaskRecord

METHODS = ("arc", "full_context")


def manifest(tasks: int) -> dict[str, object]:
    return {
        "command": ["records_worker", str(tasks)],
        "task_kind": "nih",
        "methods": list(METHODS),
        "seeds": [42],
        "tasks_per_seed": tasks,
        "model": "scripted",
        "backend": "scripted",
        "context_limit": 16384,
        "max_tokens": 4096,
        "variants": {"": {}},
        "config": {"noise_lines_per_side": 25},
    }


def records(method: str, index: int) -> tuple[list[CallRecord], TaskRecord]:
    task_id = f"nih-s42-{index:04d}"
    base = {
        "variant": "",
        "method": method,
        "model": "scripted",
        "task_kind": "nih",
        "task_id": task_id,
        "seed": 42,
    }
    n_calls = 1 + (index * 7 + len(method)) % 6
    calls = [
        CallRecord.from_json(dict(
            base,
            call_index=k,
            purpose="agent",
            prompt_tokens=100 * k,
            completion_tokens=20,
            latency_s=0.001,
            finish_reason="stop",
            overflow=False,
            compactions=[],
            recalls=[],
            action="x" * 2000,
            submission=None,
            reexecution=False,
        ))
        for k in range(1, n_calls + 1)
    ]
    task = TaskRecord.from_json(dict(
        base,
        submitted=True,
        no_answer=False,
        correct=index % 3 != 0,
        submission="NEEDLE=X",
        end="submitted",
        error=None,
        calls=n_calls,
        steps=n_calls,
        reexecutions=0,
        meta={"pid": os.getpid()},
    ))
    return calls, task


def main() -> None:
    run_dir, tasks, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    durable = len(sys.argv) < 5 or sys.argv[4] == "fsync"
    with RunWriter(run_dir, manifest(tasks), resume=True, fsync=durable) as writer:
        done = writer.finished()
        print(
            f"resumed {len(done)} removed {writer.removed_call_lines} "
            f"torn {writer.dropped_torn_lines}",
            flush=True,
        )
        for index in range(tasks):
            for method in METHODS:
                if ("", method, 42, f"nih-s42-{index:04d}") in done:
                    continue
                calls, task = records(method, index)
                time.sleep(sleep_s)
                writer.write_task(calls, task)


if __name__ == "__main__":
    main()
