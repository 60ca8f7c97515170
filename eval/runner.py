"""A run: plan (variants x seeds x tasks x methods) -> execute (N trajectories in flight) -> write (resumable).

``run(spec)`` builds the spec's plan (``arc_eval.plan.RunPlan``: the spec validated once, prompt counting resolved
once, the run's one counter, the manifest it records, its jobs), checks every method and every backend before
anything is written, opens the run directory with ``arc_eval.records.RunWriter`` (``resume=True`` continues a
killed run: finished tasks are skipped, unfinished ones redone from scratch, nothing duplicated), and executes the
plan (``arc_eval.execute``). Before anything runs it says its plan (tasks x methods x seeds x variants, backend,
each method's own note such as rag_memory's retriever and its cost; ``arc_eval.announce``). At the end it prints
the accuracy table of the whole run directory (``arc_eval.analysis.accuracy.summary_table``) and the next step
(the report command); a stop signal ends the run with status 130 or 143, resumable.

Where the rest lives: what a run is and how its settings reach their owners, ``arc_eval.run_spec``; the paper's
ablation sweeps, ``arc_eval.ablations``; the plan, ``arc_eval.plan``; execution (workers, signals, the backends'
checks), ``arc_eval.execute``; the benchmarks (``arc-eval bench``), ``arc_eval.bench``. Tasks, methods and backends
are looked up by name in ``arc_eval.registry``: none of these modules names one.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

from attrs import frozen

from arc_eval.analysis.accuracy import summary_table
from arc_eval.analysis.presets import QWEN3_CONFIGS, preset_for_model_name
from arc_eval.announce import next_step_text, plan_text, program_name
from arc_eval.execute import check_backends, distinct_backends, execute, make_backends
from arc_eval.plan import RunPlan, describe_backend
from arc_eval.records import RunReader, RunWriter
from arc_eval.run_spec import RunSpec


def unsized_model(spec: RunSpec) -> str | None:
    """The served model's name when `arc-eval report` cannot tell its size from it (it then needs --model-preset);
    None for a name that says 8B or 32B, and for the scripted backend (reported as 8B)."""
    if spec.backend == "scripted":
        return None
    served = spec.served_model()
    return served if preset_for_model_name(served) is None else None


@frozen
class RunResult:
    run_dir: Path
    ran: int  # tasks finished by this invocation
    skipped: int  # tasks already finished (resume)
    aborted: str | None  # why the run stopped early (None when it completed)
    table: str
    started: bool = True  # False: a check before the first task stopped it, and nothing was written
    stopped_by: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM): no table then


def run(spec: RunSpec, *, out: TextIO | None = None) -> RunResult:
    """Run (or resume) the whole spec (``run_plan`` of its plan); prints and returns the accuracy table."""
    return run_plan(RunPlan(spec), out=out)


def run_plan(plan: RunPlan, *, out: TextIO | None = None) -> RunResult:
    """Run (or resume) a plan: check the methods and the servers -> execute -> write; prints and returns
    the accuracy table."""
    spec = plan.spec
    plan.prepare().check_methods()
    print(plan_text(spec, plan.total_jobs(), describe_backend(spec), plan.notes()), file=sys.stderr, flush=True)
    backends = make_backends(spec, plan.counter)
    refused = asyncio.run(check_backends(backends))
    if refused is not None:
        return RunResult(spec.out, 0, 0, refused, "", started=False)
    with RunWriter(spec.out, plan.manifest(), resume=spec.resume, planned=plan.total_jobs()) as writer:
        writer.note_servers([found for backend in distinct_backends(backends) for found in backend.servers_checked()])
        if writer.finished():
            print(f"resuming {spec.out}: {len(writer.finished())} task(s) already finished", file=sys.stderr)
        executed = asyncio.run(execute(plan, writer, backends))
    if executed.stopped_by is not None:
        return RunResult(spec.out, executed.ran, executed.skipped, None, "", stopped_by=executed.stopped_by)
    reader = RunReader(spec.out)
    table = summary_table(reader.tasks(), list(reader.manifest.variants))
    print(table, file=out if out is not None else sys.stdout)
    if executed.aborted is None:
        print(next_step_text(spec.out, program_name(sys.argv[0]), unsized_model(spec), tuple(QWEN3_CONFIGS)),
              file=out if out is not None else sys.stdout)
    return RunResult(spec.out, executed.ran, executed.skipped, executed.aborted, table)
