"""What a run says about itself (issue 19): its plan and cost before the first task, an estimate of the time
left after the first tasks, the next step once it ends, and what a stop signal waits for and keeps.

Each is one small function of plain values (no I/O but the ``print`` of ``RunNotes``), so a registry of
runs can call them as they are.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

# The estimate is printed once this many tasks have finished (or the first seed's batch, if smaller).
ETA_AFTER_TASKS = 10
# A first task slower than this gets a first estimate at once (a slow server: 10 tasks may take minutes).
EARLY_ESTIMATE_AFTER_S = 30.0


def duration(seconds: float) -> str:
    """A duration in words a person reads at a glance: 42 s, 3 min 5 s, 2 h 10 min."""
    if not math.isfinite(seconds) or seconds < 0:
        return "unknown"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def plan_text(spec: Any, total_jobs: int, backend: str, notes: Sequence[str]) -> str:
    """The run's plan, printed before anything runs: what (tasks x methods x seeds x variants), with what
    (``backend``, as the backend describes itself, and each method's own ``notes``, e.g. rag_memory's
    retriever and its cost) and where it is recorded."""
    methods = list(spec.methods)
    variants = [label for label in spec.variants if label]
    per_seed = total_jobs // max(1, len(methods) * len(spec.seeds) * len(spec.variants))  # LongBench: its items
    shape = f"{per_seed} task(s) x {len(methods)} method(s) x {len(spec.seeds)} seed(s)"
    if variants:
        shape += f" x {len(variants)} variant(s) ({', '.join(variants)})"
    return (f"plan: {spec.task_kind}, {shape} = {total_jobs} task runs; methods {', '.join(methods)}; "
            f"seeds {' '.join(map(str, spec.seeds))}\n"
            f"      {'; '.join((backend, *notes))}; recorded in {spec.out}")


def eta_text(finished: int, elapsed_s: float, remaining: int) -> str:
    """The estimate after the first tasks: the measured rate and the time left at that rate."""
    rate = elapsed_s / finished if finished else math.inf
    return (f"estimate: {finished} task(s) in {duration(elapsed_s)} ({rate:.2g} s per task); "
            f"{remaining} left, about {duration(rate * remaining)} at this rate")


def next_step_text(run_dir: Path, program: str, unsized_model: str | None = None, presets: Sequence[str] = ()) -> str:
    """The last line of a run: the command that reports it. ``unsized_model``: the served name when the report cannot
    tell the model's size from it (an alias such as vLLM's --served-model-name may not say 8B / 32B): the report then
    needs --model-preset, one of ``presets`` or a file, and the command names it (review h60 F4)."""
    if unsized_model is None:
        return f"next: {program} report {run_dir}   (tables, McNemar tests, roofline, plots; eval/ANALYSIS.md)"
    return (f"next: {program} report {run_dir} --model-preset {'|'.join(presets)}|FILE   (tables, McNemar tests,"
            f" roofline, plots; eval/ANALYSIS.md; {unsized_model!r} does not say its size: choose its preset)")


def program_name(argv0: str) -> str:
    """How the user can call arc-eval again: ``arc-eval`` when that is on PATH and is this program, else the
    path they used (``.venv/bin/arc-eval``)."""
    path = Path(argv0)
    if path.name != "arc-eval":
        return "arc-eval"
    found = shutil.which("arc-eval")
    if found is not None and Path(found).resolve() == path.resolve():
        return "arc-eval"
    return str(argv0)


def stop_text(signal_name: str, in_flight: int, recorded: int, run_dir: Path) -> str:
    """Said the moment a stop signal arrives: what the run waits for, and what is already recorded."""
    return (f"arc-eval: {signal_name}: stopping: cancelling the {in_flight} task(s) in flight (not recorded; "
            f"redone on resume) and closing the server connections; {recorded} finished task(s) are recorded "
            f"in {run_dir}")


def stopped_text(signal_name: str, recorded: int, ran: int, run_dir: Path) -> str:
    """Said when the run has stopped after a signal."""
    return (f"arc-eval: stopped by {signal_name}: {recorded} finished task(s) are recorded in {run_dir} ({ran} in "
            "this invocation); rerun the same command to continue.")


class RunNotes:
    """What a running run says on stderr: the plan once, the estimate once after the first tasks, the stop."""

    def __init__(self, total: int, done_before: int, write: Callable[[str], None] | None = None) -> None:
        self.total = total
        self.done_before = done_before
        self.write = write  # None: a line on stderr (a progress bar passes its own, which keeps the bar whole)
        self.started = time.monotonic()
        self.ran = 0
        self.in_flight = 0
        self.estimated = False

    def say(self, text: str) -> None:
        if self.write is not None:
            self.write(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def task_finished(self, batch_size: int) -> None:
        """One task recorded; after ``ETA_AFTER_TASKS`` (or a whole first batch, if smaller) say the estimate, and
        after the first task already when it took ``EARLY_ESTIMATE_AFTER_S`` or more (review h27 F9)."""
        self.ran += 1
        remaining = self.total - self.done_before - self.ran
        after = min(ETA_AFTER_TASKS, max(1, batch_size))
        if self.ran == 1 and after > 1 and remaining > 0:
            elapsed = time.monotonic() - self.started
            if elapsed >= EARLY_ESTIMATE_AFTER_S:
                self.say(f"{eta_text(1, elapsed, remaining)} (from the first task; again after {after})")
        if not self.estimated and remaining > 0 and self.ran >= after:
            self.estimated = True
            self.say(eta_text(self.ran, time.monotonic() - self.started, remaining))
