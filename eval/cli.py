"""``arc-eval``: run the paper's experiments, reports, the scripted server and the benchmarks.

Subcommands::

    arc-eval nih        --methods all --seeds 42 82 122 --tasks 1000 [--backend scripted|openai ...]
    arc-eval longbench  --data PATH [--limit N] ...
    arc-eval ablation   recall-budget|force-schedule|noise-lines [--task nih|longbench] ...
                        (default methods: the paper's, ``ablations.ablation_methods``; runs/ablation-<sweep>-<hash>)
    arc-eval report     RUN_DIR...            (arc_eval.analysis.cli.report_main)
    arc-eval serve-scripted ...               (arc_eval.backends.scripted_server.serve_main)
    arc-eval bench      [--tasks 1000] ...    (throughput, harness overhead, concurrency)

A run writes ``--out RUN_DIR`` (default: ``runs/<kind>-<hash of the run's meaning>``, so the same
run always names the same directory). Restarting the same run continues a killed one; what must match
is the run's meaning (tasks, methods, seeds, budgets, backend and model: ``arc_eval.schema.run_meaning``),
not the command line: argument order, a relative or absolute ``--out``, ``--concurrency``,
``--no-progress``, another ``--base-url`` or the connection options do not matter (``--no-resume``
refuses an existing directory instead). Every way a command ends is an exit status of the one table,
``arc_eval.errors.EXIT_STATUSES`` (README.md, "Exit statuses"): bad arguments print a clear message and
exit with status 2. A server fault stops the run with status 3 and a message naming the cause and the fix: before the
first task (a wrong model name, a missing API key, tool mode off, a window smaller than
``--context-limit``, no answer; nothing is written), or during the run (unavailable after retries, a
refusal, a malformed answer; what finished is kept, the task in flight is not); rerun the same command
after the fix to continue. Ctrl-C stops with status 130 and SIGTERM with 143, likewise resumable; each
says at once what it waits for and what is recorded (``arc_eval.announce``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import attrs

from arc_ref.errors import ArcError
from arc_ref.options import add_option_flags, integer_parser, once_each, options_from_args, undecodable_argument
from arc_eval.errors import INTERRUPTED, OK, SERVER_STOPPED, TERMINATED, USAGE, EvalError, status_of

DEFAULT_RUNS_DIR = "runs"
_DISPATCHED = ("report", "serve-scripted")


class UsageError(EvalError):
    """A command line that cannot run; the message says why (status ``USAGE``)."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() returns 2 with one clear line."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


class _CommandParser(_Parser):
    """A command's parser: an argument the command does not take is its own usage error, naming the command (review
    h43: argparse hands a command's unknown arguments to the top parser, whose line said `arc-eval: unrecognized
    arguments: --tasks 1 (see arc-eval --help)` for `arc-eval longbench --tasks 1`). A task's command given
    another task's count flag is told its own (``count_flags``: its own flag, then every task's)."""

    count_flags: tuple[str, frozenset[str]] | None = None

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            hint = ""
            if self.count_flags is not None:
                own, every = self.count_flags
                if any(extra.split("=", 1)[0] in every - {own} for extra in extras):
                    hint = f"{self.prog} takes its count as {own} N; "
            raise UsageError(f"{self.prog}: unrecognized arguments: {' '.join(extras)} ({hint}see {self.prog}"
                             " --help)")
        return parsed, extras


RUN_OWNER = "run"
BENCH_OWNER = "bench"


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run's own flags (``RunSpec``'s option fields), then each method's and each backend's options."""
    from arc_eval.methods import parse_methods
    from arc_eval.registry import BACKENDS, METHODS
    from arc_eval.run_spec import MAX_SEED, MIN_SEED, PAPER_SEEDS, RunSpec

    run = parser.add_argument_group("run")
    run.add_argument("--methods", type=parse_methods, default=None, metavar="all|m1,m2",
                     help="methods to compare (default: all; an ablation: the methods the paper ablates, "
                          "arc alone for recall-budget)")
    run.add_argument("--seeds", type=integer_parser(MIN_SEED, MAX_SEED), nargs="+", default=list(PAPER_SEEDS),
                     metavar="SEED", help=f"seeds, each once (default: {' '.join(map(str, PAPER_SEEDS))}; "
                                          f"{MIN_SEED} to {MAX_SEED})")
    run.add_argument("--out", default=None, metavar="RUN_DIR",
                     help="run directory (default: runs/<kind>-<hash of the run's meaning>)")
    resume = run.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="resume", action="store_true", default=True,
                        help="continue the run in RUN_DIR if it exists (the default)")
    resume.add_argument("--no-resume", dest="resume", action="store_false",
                        help="refuse a RUN_DIR that already holds a run")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    backends = BACKENDS.entries()
    run.add_argument("--backend", choices=[entry.name for entry in backends], default=backends[0].name,
                     help="; ".join(f"{entry.name}: {entry.help}" for entry in backends)
                     + f" (default: {backends[0].name})")
    add_option_flags(run, RUN_OWNER, RunSpec)
    for method in METHODS.entries():
        if attrs.fields(method.options):
            add_option_flags(parser.add_argument_group(f"method {method.name}"), method.name, method.options)
    for backend in backends:
        if attrs.fields(backend.options):
            add_option_flags(parser.add_argument_group(f"backend {backend.name}"), backend.name, backend.options)


def _add_task_options(parser: argparse.ArgumentParser, task: Any) -> None:
    """A task's flags: its per-seed count, then its options."""
    group = parser.add_argument_group(f"task {task.name} ({task.label})")
    default = f"default {task.count_default}; " if task.count_default is not None else ""
    group.add_argument(task.count_flag, dest=f"count/{task.name}", type=integer_parser(1, task.count_maximum),
                       default=task.count_default, metavar="N",
                       help=f"{task.count_help} ({default}1 to {task.count_maximum})")
    add_option_flags(group, task.name, task.options)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``arc-eval`` (but its dispatched subcommands): a flag given twice is refused (``once_each``)
    but the repeatable ones (``--base-url``, ``bench --only``)."""
    from arc_eval.ablations import ABLATIONS
    from arc_eval.bench import BenchOptions
    from arc_eval.registry import TASKS

    parser = _Parser(prog="arc-eval", description="Evaluate ARC and five baselines (see eval/METHODS.md).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    tasks = TASKS.entries()
    count_flags = frozenset(task.count_flag for task in tasks)
    for task in tasks:
        command = commands.add_parser(task.name, help=task.help)
        command.count_flags = (task.count_flag, count_flags)
        _add_run_options(command)
        _add_task_options(command, task)
    ablation = commands.add_parser("ablation", help="the paper's sweeps")
    ablation.add_argument("sweep", choices=tuple(ABLATIONS))
    ablation.add_argument("--task", choices=[task.name for task in tasks], default=tasks[0].name)
    _add_run_options(ablation)
    for task in tasks:
        _add_task_options(ablation, task)
    commands.add_parser("report", help="tables, McNemar, roofline and plots of run directories (RUN_DIR...)",
                        add_help=False)
    commands.add_parser("serve-scripted", help="the scripted agent as an OpenAI-compatible HTTP server",
                        add_help=False)
    bench = commands.add_parser("bench", help="throughput, per-call harness overhead, concurrency")
    add_option_flags(bench, BENCH_OWNER, BenchOptions)
    return once_each(parser)


def connection_options() -> tuple[str, ...]:
    """The flags of the connection to a server, not of the run (every backend option that is not recorded):
    they name no other run directory, and a key is never recorded or hashed."""
    from arc_eval.registry import BACKENDS, option_fields, option_flag, option_info

    return tuple(option_flag(attribute) for entry in BACKENDS.entries() for attribute in option_fields(entry.options)
                 if not option_info(attribute).recorded)


def without_connection_options(argv: Sequence[str]) -> list[str]:
    """`argv` without the connection options and their values (a key is never recorded or hashed)."""
    connection = connection_options()
    kept: list[str] = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in connection:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept


def run_kind(args: argparse.Namespace) -> str:
    """What a run directory is named by (issue 19): the task (``nih``, ``longbench``), or ``ablation-<sweep>``
    (with ``-<task>`` for a sweep of another task than the first registered, ``-longbench``), so ``runs/nih-*``
    holds the main runs only."""
    from arc_eval.registry import TASKS

    if args.command != "ablation":
        return str(args.command)
    return f"ablation-{args.sweep}" + (f"-{args.task}" if args.task != TASKS.entries()[0].name else "")


def default_run_dir(spec: Any, kind: str | None = None) -> Path:
    """runs/<kind>-<hash of the run's meaning>: the same run names the same directory, however it is spelled.
    ``kind`` defaults to the task kind (``run_kind`` names ablations by their sweep). ``spec``: a ``RunSpec``, or
    the ``RunPlan`` of one (its manifest as it resolved it).

    The meaning is what a resume compares (``arc_eval.schema.run_meaning``): argument order, the run
    directory, ``--concurrency``, ``--no-progress`` and the resume flags do not change it.
    """
    from arc_eval.plan import RunPlan, run_manifest
    from arc_eval.schema import run_meaning

    manifest = spec.manifest() if isinstance(spec, RunPlan) else run_manifest(spec)
    task_kind = spec.spec.task_kind if isinstance(spec, RunPlan) else spec.task_kind
    meaning = run_meaning(manifest)
    digest = hashlib.sha256(json.dumps(meaning, sort_keys=True).encode("utf-8")).hexdigest()[:10]
    return Path(DEFAULT_RUNS_DIR) / f"{kind or task_kind}-{digest}"


def _refuse_other_components(args: argparse.Namespace, kind: str, backend: str) -> None:
    """A flag of a backend or task the run does not use is a usage error naming the one it belongs to."""
    from arc_eval.registry import BACKENDS, TASKS, given_options, option_fields, option_flag

    for entries, chosen, flag in ((BACKENDS.entries(), backend, "--backend"), (TASKS.entries(), kind, "--task")):
        for entry in entries:
            if entry.name == chosen:
                continue
            given = given_options(entry.name, args)
            if given:
                flags = {attribute.name: option_flag(attribute) for attribute in option_fields(entry.options)}
                raise UsageError(f"{', '.join(flags[name] for name in given)} is for {flag} {entry.name}")


def spec_from_args(args: argparse.Namespace, argv: Sequence[str]) -> Any:
    """The RunSpec of parsed arguments, validated, its run directory named (``plan_from_args``)."""
    return plan_from_args(args, argv).spec


def plan_from_args(args: argparse.Namespace, argv: Sequence[str]) -> Any:
    """The RunPlan of parsed arguments (the command line is recorded in the manifest as provenance): the spec
    validated once, its counting resolved once, its run directory ``--out`` or named after the run's meaning."""
    from arc_eval.ablations import ABLATIONS, ablation_methods
    from arc_eval.methods import method_names
    from arc_eval.plan import RunPlan
    from arc_eval.registry import BACKENDS, METHODS, TASKS, option_dest, options_from_args
    from arc_eval.run_spec import RunSpec

    if args.command == "ablation":
        kind = args.task
        variants: dict[str, dict[str, Any]] = {label: dict(params) for label, params in ABLATIONS[args.sweep].items()}
    else:
        kind = args.command
        variants = {"": {}}
    _refuse_other_components(args, kind, args.backend)
    if args.out is not None and not args.out.strip():
        raise UsageError("--out names no directory; give a run directory, or leave --out out for the default")
    task = TASKS.get(kind)
    given = vars(args)
    run_values: dict[str, Any] = {attribute.name: given[option_dest(RUN_OWNER, attribute.name)]
                                  for attribute in attrs.fields(RunSpec)
                  if option_dest(RUN_OWNER, attribute.name) in given}
    spec = RunSpec(
        task_kind=kind,
        methods=args.methods if args.methods is not None else (
            ablation_methods(args.sweep) if args.command == "ablation" else method_names()),
        seeds=tuple(args.seeds),
        out=Path(args.out if args.out else "."),
        tasks_per_seed=getattr(args, f"count/{kind}"),
        backend=args.backend,
        resume=args.resume,
        progress=args.progress,
        variants=variants,
        command=("arc-eval", *without_connection_options(argv)),
        task_options=options_from_args(kind, task.options, args),
        method_options={entry.name: options_from_args(entry.name, entry.options, args)
                        for entry in METHODS.entries()},
        backend_options=options_from_args(args.backend, BACKENDS.get(args.backend).options, args),
        **run_values,
    )
    plan = RunPlan(spec)
    if args.out:
        return plan
    return plan.with_out(default_run_dir(plan, run_kind(args)))  # named after the run's meaning, once checked


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from arc_eval.runner import run_plan

    plan = plan_from_args(args, argv)
    spec = plan.spec
    result = run_plan(plan)
    if result.stopped_by is not None:
        from arc_eval.announce import stopped_text

        print(stopped_text(result.stopped_by, result.skipped + result.ran, result.ran, spec.out), file=sys.stderr)
        return (TERMINATED if result.stopped_by == "SIGTERM" else INTERRUPTED).code
    if result.aborted is not None and not result.started:
        print(f"arc-eval: stopped before the first task: {result.aborted}\n"
              "Nothing was run or recorded; run the command again after the fix.", file=sys.stderr)
        return SERVER_STOPPED.code
    if result.aborted is not None:
        print(f"arc-eval: stopped: {result.aborted}\n"
              f"{result.ran} task(s) finished in this invocation are recorded in {spec.out}; the task(s) in "
              "flight are not. Rerun the same command (after the fix) to continue.", file=sys.stderr)
        return SERVER_STOPPED.code
    return OK.code


def _bench(args: argparse.Namespace) -> int:
    from arc_eval.methods import method_names
    from arc_eval.bench import BENCH_FIGURES, BenchOptions, bench_concurrency, bench_harness_overhead, bench_throughput

    options = options_from_args(BENCH_OWNER, BenchOptions, args)
    methods = options.methods if options.methods is not None else method_names()
    only = set(options.only or BENCH_FIGURES)
    if "throughput" in only:
        print(bench_throughput(methods, options.tasks, rag_retriever=options.rag_retriever), flush=True)
    if "overhead" in only:
        print(bench_harness_overhead(methods, options.overhead_tasks, rag_retriever=options.rag_retriever),
              flush=True)
    if "concurrency" in only:
        print(bench_concurrency(options.concurrency, options.concurrency_tasks, latency_ms=options.latency_ms),
              flush=True)
    return OK.code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``arc-eval`` console script; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    unreadable = undecodable_argument(arguments)
    if unreadable is not None:  # before anything prints it (a UnicodeEncodeError otherwise)
        print(f"arc-eval: {unreadable}", file=sys.stderr)
        return USAGE.code
    try:
        if arguments and arguments[0] in _DISPATCHED:
            try:
                if arguments[0] == "report":
                    from arc_eval.analysis.cli import report_main

                    return int(report_main(arguments[1:]))
                from arc_eval.backends.scripted_server import serve_main

                return int(serve_main(arguments[1:]))
            except SystemExit as done:  # --help or a usage error of the dispatched command
                return int(done.code) if isinstance(done.code, int) else USAGE.code
        parser = build_parser()
        try:
            args = parser.parse_args(arguments)
        except SystemExit as done:  # --help
            return int(done.code) if isinstance(done.code, int) else OK.code
        if args.command is None:
            parser.print_help(sys.stderr)
            return USAGE.code
        if args.command == "bench":
            return _bench(args)
        return _run(args, arguments)
    except UsageError as failure:  # argparse's own form: "arc-eval nih: ... (see --help)"
        print(str(failure), file=sys.stderr)
        return failure.exit_status.code
    except (EvalError, ArcError) as failure:  # the evaluation's errors and a configuration the core refuses
        print(f"arc-eval: {failure}", file=sys.stderr)
        return status_of(failure).code
    except KeyboardInterrupt:
        print("arc-eval: interrupted; finished tasks are recorded; rerun the same command to continue.",
              file=sys.stderr)
        return INTERRUPTED.code


if __name__ == "__main__":
    sys.exit(main())
