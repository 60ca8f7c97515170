"""A run's execution: its backends built, checked and closed, and every unfinished job of its plan run.

Every unfinished job goes to ``concurrency`` asyncio workers sharing one backend, so an HTTP server sees N
requests at once and batches them. Each finished task is written (its call lines, then its task line) the moment
it ends; after the first tasks the run says an estimate of the time left, and a progress bar (tqdm, on stderr)
counts tasks. SIGINT and SIGTERM say at once what they wait for (the tasks in flight, cancelled, not recorded) and
what is recorded (``arc_eval.announce``).

Before anything is written, every backend that can be checked is (its ``preflight``: an HTTP server's model,
window, key and tool mode): a misconfigured server stops the run with the fix and no run directory. During the
run, a ``BackendError`` (the server unavailable after retries, a refusal naming a configuration fault, a reply
that breaks the API) stops the run: the task in flight is not recorded; it is never scored as a wrong answer.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any, Iterator, Mapping

from attrs import frozen
from tqdm import tqdm  # type: ignore[import-untyped]

from arc_eval.announce import RunNotes, stop_text
from arc_eval.counting import TokenCounter
from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.plan import RunPlan, SeedBatch, default_max_steps
from arc_eval.records import RunWriter
from arc_eval.registry import BackendRun
from arc_eval.run_spec import RunSpec
from arc_eval.types import (
    Backend,
    BackendError,
    BackendReplyError,
    BackendRequestError,
    BackendUnavailable,
    Task,
)


def make_backend(spec: RunSpec, counter: TokenCounter) -> Backend:
    """The run's backend (its registry entry's factory), counting with the run's counter. Every request carries
    its method's own tools (``ChatRequest.tools``); with ``--tool-calling`` the server's probe offers the
    task's tools."""
    run = BackendRun(model=spec.served_model(), context_limit=spec.context_limit, max_tokens=spec.max_tokens,
                     temperature=spec.temperature, counter=counter, tool_calling=spec.tool_calling)
    return spec.backend_entry.factory(spec.backend_opts(), run)


def make_backends(spec: RunSpec, counter: TokenCounter) -> dict[str, Backend]:
    """Each method's backend: one, shared (every request carries its method's own tools)."""
    shared = make_backend(spec, counter)
    return {name: shared for name in spec.methods}


def distinct_backends(backends: Mapping[str, Backend]) -> list[Backend]:
    """Each backend object once (methods may share one)."""
    return list({id(backend): backend for backend in backends.values()}.values())


async def close_backends(backends: Mapping[str, Backend]) -> None:
    """Close every distinct backend (its ``aclose``: what it holds, such as HTTP clients)."""
    for backend in distinct_backends(backends):
        await backend.aclose()


def describe_backend_error(failure: BackendError) -> str:
    """What stopped the run, in words (the error's own message names the server and the fix)."""
    if isinstance(failure, BackendUnavailable):
        return f"the server is unavailable: {failure}"
    if isinstance(failure, BackendReplyError):
        return f"the server's answer breaks the API: {failure}"
    if isinstance(failure, BackendRequestError):
        return f"the server cannot serve this run: {failure}"
    return str(failure)


async def check_backends(backends: Mapping[str, Backend]) -> str | None:
    """Check every backend before the first task (its ``preflight``: an HTTP server's model, window and key; an
    in-process backend has nothing to check); the reason the run cannot start, or None. Each says on stderr what
    it found."""
    try:
        for backend in distinct_backends(backends):
            await backend.preflight(sys.stderr)
    except BackendError as failure:
        return describe_backend_error(failure)
    finally:
        await close_backends(backends)
    return None


@frozen
class Executed:
    ran: int  # tasks finished by this invocation
    skipped: int  # tasks already finished (resume)
    aborted: str | None  # why the run stopped early (None when it completed)
    stopped_by: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM), if one did


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_handlers(on_stop: Any) -> list[signal.Signals]:
    """Call ``on_stop(name)`` on SIGINT or SIGTERM instead of dying silently (issue 19); the signals installed
    (none off the main thread or where the loop cannot)."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_stop, signum.name)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(signum)
    return installed


async def execute(plan: RunPlan, writer: RunWriter, backends: Mapping[str, Backend]) -> Executed:
    """Run every unfinished job of the plan, writing each task the moment it ends."""
    spec = plan.spec
    finished = writer.finished()
    total = plan.total_jobs()
    done_before = sum(1 for key in finished if key[0] in spec.variants and key[1] in spec.methods)
    bar = tqdm(
        total=total, initial=min(done_before, total), unit="task", desc=f"{spec.task_kind} {spec.backend}",
        disable=not spec.progress, file=sys.stderr, dynamic_ncols=True, smoothing=0.05,
    )  # fmt: skip
    ran = 0
    aborted: str | None = None
    stop = asyncio.Event()
    notes = RunNotes(total, min(done_before, total), lambda text: tqdm.write(text, file=sys.stderr))
    received: list[str] = []
    main_task = asyncio.current_task()

    def on_stop(name: str) -> None:
        """A stop signal: say what the run waits for and what is recorded, then cancel the tasks in flight."""
        if not received and main_task is not None:
            received.append(name)
            notes.say(stop_text(name, notes.in_flight, done_before + ran, spec.out))
            main_task.cancel()

    installed = install_stop_handlers(on_stop)

    async def worker(batch: SeedBatch, jobs: Iterator[tuple[Task, str]]) -> None:
        nonlocal ran, aborted
        for task, name in jobs:
            if stop.is_set():
                return
            notes.in_flight += 1
            try:
                calls, outcome = await run_task(
                    task,
                    make_method(name, batch.settings),
                    backends[name],
                    settings=batch.settings,
                    max_steps=batch.variant.max_steps or default_max_steps(task),
                    force_at_calls=batch.variant.force_at_calls,
                    seed=batch.seed,
                    variant=batch.label,
                    model=spec.served_model(),
                    temperature=spec.temperature,
                )
            except BackendError as failure:
                if aborted is None:  # the first failure is the cause; the workers still in flight see the same
                    aborted = describe_backend_error(failure)
                stop.set()
                return
            finally:
                notes.in_flight -= 1
            writer.write_task(calls, outcome)
            ran += 1
            bar.update(1)
            notes.task_finished(len(batch.jobs))
            # Yield to the event loop: an in-process backend never suspends, and Ctrl-C (asyncio
            # cancels the run) must be seen between two tasks.
            await asyncio.sleep(0)

    try:
        for batch in plan.batches(finished):
            jobs = iter(batch.jobs)  # shared by the workers: each job is taken once
            # N workers, never more than the batch's task runs (a worker without a job would only wait)
            workers = [asyncio.create_task(worker(batch, jobs))
                       for _ in range(min(spec.concurrency, len(batch.jobs)))]
            try:
                await asyncio.gather(*workers)
            except BaseException:
                for pending in workers:
                    pending.cancel()
                raise
            if stop.is_set():
                break
    except asyncio.CancelledError:
        if not received or main_task is None:
            raise
        main_task.uncancel()  # the stop signal's cancel, handled: the run ends with what is recorded
    finally:
        loop = asyncio.get_running_loop()
        for signum in installed:
            loop.remove_signal_handler(signum)
        bar.close()
        await close_backends(backends)
    return Executed(ran, done_before, aborted, received[0] if received else None)
