"""``arc-eval``: run the paper's experiments, reports, the scripted server and the benchmarks.

Subcommands::

    arc-eval nih        --methods all --seeds 42 82 122 --tasks 1000 [--backend scripted|openai ...]
    arc-eval longbench  --data PATH [--limit N] ...
    arc-eval ablation   recall-budget|force-schedule|noise-lines [--task nih|longbench] ...
                        (default methods: the paper's, ``runner.ABLATION_METHODS``; runs/ablation-<sweep>-<hash>)
    arc-eval report     RUN_DIR...            (arc_eval.analysis.cli.report_main)
    arc-eval serve-scripted ...               (arc_eval.backends.scripted_server.serve_main)
    arc-eval bench      [--tasks 1000] ...    (throughput, harness overhead, concurrency)

A run writes ``--out RUN_DIR`` (default: ``runs/<kind>-<hash of the run's meaning>``, so the same
run always names the same directory). Restarting the same run continues a killed one; what must match
is the run's meaning (tasks, methods, seeds, budgets, backend and model: ``arc_eval.schema.run_meaning``),
not the command line: argument order, a relative or absolute ``--out``, ``--concurrency``,
``--no-progress``, another ``--base-url`` or the connection options do not matter (``--no-resume``
refuses an existing directory instead). Bad arguments print a clear message and exit with status 2.
A server fault stops the run with status 3 and a message naming the cause and the fix: before the
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
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from attrs import evolve

from arc_ref.errors import ConfigError
from arc_eval.arguments import (
    http_url,
    integer,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_BACKEND = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM
DEFAULT_RUNS_DIR = "runs"
PAPER_SEEDS = (42, 82, 122)
_DISPATCHED = ("report", "serve-scripted")


class UsageError(Exception):
    """A command line that cannot run; the message says why."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() returns 2 with one clear line."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def parse_methods(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of method names."""
    from arc_eval.methods import METHOD_NAMES

    if text.strip() == "all":
        return METHOD_NAMES
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in METHOD_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(unknown) or text!r}; use 'all' or a comma-separated "
            f"subset of {', '.join(METHOD_NAMES)}"
        )
    return names


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    from arc_eval.agent.scripted import AGENT_VARIANTS, DEFAULT_AGENT

    run = parser.add_argument_group("run")
    run.add_argument("--methods", type=parse_methods, default=None, metavar="all|m1,m2",
                     help="methods to compare (default: all; an ablation: the methods the paper ablates, "
                          "arc alone for recall-budget)")
    run.add_argument("--seeds", type=integer, nargs="+", default=list(PAPER_SEEDS), metavar="SEED",
                     help="seeds (default: 42 82 122)")
    run.add_argument("--out", default=None, metavar="RUN_DIR",
                     help="run directory (default: runs/<kind>-<hash of the run's meaning>)")
    resume = run.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="resume", action="store_true", default=True,
                        help="continue the run in RUN_DIR if it exists (the default)")
    resume.add_argument("--no-resume", dest="resume", action="store_false",
                        help="refuse a RUN_DIR that already holds a run")
    run.add_argument("--concurrency", type=positive_int, default=8, metavar="N",
                     help="trajectories in flight at once (default 8)")
    run.add_argument("--max-steps", type=positive_int, default=None, metavar="N",
                     help="agent steps per task (default: the goal's plan + 10)")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")

    model = parser.add_argument_group("backend and budgets")
    model.add_argument("--backend", choices=("scripted", "openai"), default="scripted",
                       help="scripted: the embedded deterministic agent (default); openai: an OpenAI-compatible server")
    model.add_argument("--base-url", dest="base_urls", action="append", default=[], metavar="URL", type=http_url,
                       help="server URL, e.g. http://localhost:8000/v1 (repeat for replicas)")
    model.add_argument("--model", default=None, help="model name as served (e.g. Qwen/Qwen3-8B)")
    model.add_argument("--context-limit", type=positive_int, default=16384, metavar="L_CTX",
                       help="the server's max model length (default 16384)")
    model.add_argument("--max-tokens", type=positive_int, default=4096, metavar="G_MAX",
                       help="completion cap per call (default 4096)")
    model.add_argument("--temperature", type=non_negative_float, default=0.0)
    model.add_argument("--tokenizer", default="o200k_base", metavar="DIR|NAME",
                       help="what every prompt is counted with: the served model's directory (DIR or hf-dir:DIR: "
                            "its tokenizer.json and chat template, rendered as vLLM renders them, so counts are the "
                            "server's), or an arc_ref tokenizer over --chat-format: bytes, o200k_base (default), "
                            "cl100k_base, hf:PATH")
    model.add_argument("--tokenizer-json", default=None, metavar="PATH",
                       help="a tokenizer.json, over --chat-format (ChatML by default); a model directory in "
                            "--tokenizer is exact")
    model.add_argument("--chat-format", choices=("auto", "chatml", "qwen3-nothink", "template"), default="auto",
                       help="auto (default): template with a model directory, else chatml")
    model.add_argument("--tool-calling", action="store_true",
                       help="every method acts through function tools (the task's commands; ARC's recall and "
                            "catalog commands too), one call per reply; needs --tokenizer DIR")
    model.add_argument("--agent", choices=AGENT_VARIANTS, default=DEFAULT_AGENT,
                       help="scripted backend: the agent's rules, fair (equally competent for every method, the "
                            "default) or floor (the first rules); see eval/METHODS.md")

    server = parser.add_argument_group("server connection (--backend openai; see eval/SERVING.md)")
    server.add_argument("--api-key", default=None, metavar="KEY",
                        help="the server's API key (vllm --api-key); default: $OPENAI_API_KEY; never recorded")
    server.add_argument("--connect-timeout", dest="connect_timeout_s", type=positive_float, default=10.0,
                        metavar="S", help="seconds to connect (default 10)")
    server.add_argument("--first-byte-timeout", dest="first_byte_timeout_s", type=positive_float, default=None,
                        metavar="S", help="seconds until the answer starts (default: the request timeout)")
    server.add_argument("--request-timeout", dest="request_timeout_s", type=positive_float, default=600.0,
                        metavar="S", help="seconds for a whole request (default 600)")
    server.add_argument("--max-retries", type=non_negative_int, default=6, metavar="N",
                        help="retries of refused or dropped connections, timeouts, 5xx and 429 (default 6); one "
                             "call never takes longer than two whole requests plus 30 s")
    server.add_argument("--count-with", choices=("auto", "server", "local"), default="auto",
                        help="count prompts with the server's endpoints (vLLM /tokenize, llama.cpp "
                             "/apply-template + /tokenize) or locally (default auto: the server's when it has them)")

    method = parser.add_argument_group("methods")
    method.add_argument("--force-at-calls", type=positive_int, nargs="*", default=[5, 10, 15], metavar="K",
                        help="agent steps before which compaction is forced (default 5 10 15; none: empty)")
    method.add_argument("--recall-budget-chars", type=positive_int, default=16000)
    method.add_argument("--recall-max-chars", type=positive_int, default=8000)
    method.add_argument("--keep-verbatim-chars", type=positive_int, default=500)
    method.add_argument("--rag-top-k", type=positive_int, default=3)
    method.add_argument("--rag-chunk-chars", type=positive_int, default=1000)
    method.add_argument("--rag-retriever", choices=("auto", "embeddings", "bm25"), default="auto",
                        help="rag_memory retriever (auto: embeddings when installed and a CUDA device is "
                             "there, else bm25, the fast one)")
    method.add_argument("--allow-reexecution", action="store_true",
                        help="scripted agent: re-run a tool call when what it needs left the prompt")


def _add_nih_options(parser: argparse.ArgumentParser) -> None:
    from arc_eval.tasks.nih import DEFAULT_NIH_LAYOUT, NIH_LAYOUTS

    nih = parser.add_argument_group("needle-in-a-haystack")
    nih.add_argument("--tasks", type=positive_int, default=1000, help="tasks per seed (default 1000)")
    nih.add_argument("--noise-lines", type=non_negative_int, default=25, help="noise lines per side (default 25)")
    nih.add_argument("--distractor-files", type=non_negative_int, default=16,
                     help="distractor files (default 16; varied layout: the centre of each task's range D/2..3D/2)")
    nih.add_argument("--nih-layout", choices=NIH_LAYOUTS, default=DEFAULT_NIH_LAYOUT,
                     help="varied: each task draws its own shape (default); paper: the paper's single structure")


def _add_longbench_options(parser: argparse.ArgumentParser, required: bool) -> None:
    from arc_eval.tasks.longbench import DIFFICULTIES

    longbench = parser.add_argument_group("LongBench-v2")
    longbench.add_argument("--data", required=required, default=None, metavar="PATH",
                           help="the official data.json (or its directory); never downloaded")
    longbench.add_argument("--limit", type=positive_int, default=None, metavar="N",
                           help="only the first N items of the chosen difficulty")
    longbench.add_argument("--difficulty", choices=DIFFICULTIES, default="hard",
                           help="hard (the paper's subset, default), easy, or all (the full data set)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="arc-eval", description="Evaluate ARC and five baselines (see eval/METHODS.md).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    nih = commands.add_parser("nih", help="needle-in-a-haystack")
    _add_run_options(nih)
    _add_nih_options(nih)
    longbench = commands.add_parser("longbench", help="LongBench-v2 hard subset from a local data.json")
    _add_run_options(longbench)
    _add_longbench_options(longbench, required=False)
    ablation = commands.add_parser("ablation", help="the paper's sweeps")
    ablation.add_argument("sweep", choices=("recall-budget", "force-schedule", "noise-lines"))
    ablation.add_argument("--task", choices=("nih", "longbench"), default="nih")
    _add_run_options(ablation)
    _add_nih_options(ablation)
    _add_longbench_options(ablation, required=False)
    commands.add_parser("report", help="tables, McNemar, roofline and plots of run directories (RUN_DIR...)",
                        add_help=False)
    commands.add_parser("serve-scripted", help="the scripted agent as an OpenAI-compatible HTTP server",
                        add_help=False)
    bench = commands.add_parser("bench", help="throughput, per-call harness overhead, concurrency")
    bench.add_argument("--tasks", type=positive_int, default=1000, help="NIH tasks for the throughput figure")
    bench.add_argument("--methods", type=parse_methods, default=None, metavar="all|m1,m2")
    bench.add_argument("--overhead-tasks", type=positive_int, default=50, help="NIH tasks for the overhead figure")
    bench.add_argument("--concurrency", type=positive_int, default=8, help="N for the serve-scripted figure")
    bench.add_argument("--concurrency-tasks", type=positive_int, default=32)
    bench.add_argument("--latency-ms", type=non_negative_float, default=20.0,
                       help="serve-scripted service time per request")
    bench.add_argument("--rag-retriever", choices=("auto", "embeddings", "bm25"), default="bm25")
    bench.add_argument("--only", choices=("throughput", "overhead", "concurrency"), action="append", default=None)
    return parser


# Options of the connection to the server, not of the run: they name no other run directory.
CONNECTION_OPTIONS = ("--api-key", "--connect-timeout", "--first-byte-timeout", "--request-timeout",
                      "--max-retries")


def without_connection_options(argv: Sequence[str]) -> list[str]:
    """`argv` without the connection options and their values (a key is never recorded or hashed)."""
    kept: list[str] = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        if name in CONNECTION_OPTIONS:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept


def run_kind(args: argparse.Namespace) -> str:
    """What a run directory is named by (issue 19): ``nih``, ``longbench``, or ``ablation-<sweep>`` (with
    ``-longbench`` for a LongBench sweep), so ``runs/nih-*`` holds the main runs only."""
    if args.command != "ablation":
        return str(args.command)
    return f"ablation-{args.sweep}" + ("-longbench" if args.task == "longbench" else "")


def default_run_dir(spec: Any, kind: str | None = None) -> Path:
    """runs/<kind>-<hash of the run's meaning>: the same run names the same directory, however it is spelled.
    ``kind`` defaults to the task kind (``run_kind`` names ablations by their sweep).

    The meaning is what a resume compares (``arc_eval.schema.run_meaning``): argument order, the run
    directory, ``--concurrency``, ``--no-progress`` and the resume flags do not change it.
    """
    from arc_eval.runner import resolved_retriever, run_manifest
    from arc_eval.schema import run_meaning

    meaning = run_meaning(run_manifest(spec, resolved_retriever(spec)))
    digest = hashlib.sha256(json.dumps(meaning, sort_keys=True).encode("utf-8")).hexdigest()[:10]
    return Path(DEFAULT_RUNS_DIR) / f"{kind or spec.task_kind}-{digest}"


def _absolute(path: str | None) -> str | None:
    """A path from the command line made absolute (so the run's meaning does not depend on the cwd)."""
    return None if path is None else os.path.abspath(path)


def spec_from_args(args: argparse.Namespace, argv: Sequence[str]) -> Any:
    """A RunSpec from parsed arguments (the command line is recorded in the manifest as provenance)."""
    from arc_eval.methods import METHOD_NAMES
    from arc_eval.runner import ABLATION_METHODS, ABLATIONS, SCRIPTED_MODEL, RunSpec
    from arc_eval.tasks.nih import DEFAULT_NIH_LAYOUT

    if args.command == "ablation":
        kind = args.task
        variants: dict[str, dict[str, Any]] = {label: dict(params) for label, params in ABLATIONS[args.sweep].items()}
        if args.sweep == "noise-lines" and kind != "nih":
            raise UsageError("the noise-lines sweep is a needle-in-a-haystack parameter: use --task nih")
    else:
        kind = args.command
        variants = {"": {}}
    if kind == "longbench" and not getattr(args, "data", None):
        raise UsageError("LongBench needs --data PATH (the official data.json or its directory); nothing is downloaded")
    if args.backend == "scripted" and args.base_urls:
        raise UsageError("--base-url is for --backend openai")
    scripted_model = f"{SCRIPTED_MODEL}-{args.agent}"  # the records name the agent's rules
    model = args.model if args.model is not None else (scripted_model if args.backend == "scripted" else None)
    if model is None:
        raise UsageError("--backend openai needs --model, the model name as served (e.g. Qwen/Qwen3-8B)")
    if args.out is not None and not args.out.strip():
        raise UsageError("--out names no directory; give a run directory, or leave --out out for the default")
    tasks_per_seed = args.tasks if kind == "nih" else getattr(args, "limit", None)
    spec = RunSpec(
        task_kind=kind,
        methods=args.methods if args.methods is not None else (
            ABLATION_METHODS[args.sweep] if args.command == "ablation" else METHOD_NAMES),
        seeds=tuple(args.seeds),
        out=Path(args.out if args.out else "."),
        tasks_per_seed=tasks_per_seed,
        backend=args.backend,
        base_urls=tuple(args.base_urls),
        model=model,
        context_limit=args.context_limit,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        force_at_calls=tuple(args.force_at_calls),
        noise_lines_per_side=getattr(args, "noise_lines", 25),
        distractor_files=getattr(args, "distractor_files", 16),
        recall_budget_chars=args.recall_budget_chars,
        recall_max_chars=args.recall_max_chars,
        keep_verbatim_chars=args.keep_verbatim_chars,
        rag_top_k=args.rag_top_k,
        rag_chunk_chars=args.rag_chunk_chars,
        rag_retriever=args.rag_retriever,
        tokenizer=args.tokenizer,
        tokenizer_json=_absolute(args.tokenizer_json),
        chat_format=args.chat_format,
        concurrency=args.concurrency,
        resume=args.resume,
        tool_calling=args.tool_calling,
        data=_absolute(getattr(args, "data", None)),
        max_steps=args.max_steps,
        allow_reexecution=args.allow_reexecution,
        agent=args.agent,
        nih_layout=getattr(args, "nih_layout", DEFAULT_NIH_LAYOUT),
        difficulty=getattr(args, "difficulty", "hard"),
        variants=variants,
        command=("arc-eval", *without_connection_options(argv)),
        progress=args.progress,
        api_key=args.api_key,
        connect_timeout_s=args.connect_timeout_s,
        first_byte_timeout_s=args.first_byte_timeout_s,
        request_timeout_s=args.request_timeout_s,
        max_retries=args.max_retries,
        count_with=args.count_with,
    )
    if args.out:
        return spec
    spec.validate()  # the default directory is named after the run's meaning: check the spec first
    return evolve(spec, out=default_run_dir(spec, run_kind(args)))


def _missing_methods_message(methods: Sequence[str]) -> str | None:
    from arc_eval.methods import method_available

    missing = [name for name in methods if not method_available(name)]
    if missing:
        return f"method(s) not available in this installation: {', '.join(missing)}"
    return None


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from arc_eval.records import RunRecordError
    from arc_eval.runner import run

    spec = spec_from_args(args, argv)
    spec.validate()
    missing = _missing_methods_message(spec.methods)
    if missing is not None:
        raise UsageError(missing + "; choose others with --methods")
    from arc_eval.tasks.longbench import LongBenchDataError

    try:
        result = run(spec)
    except (RunRecordError, LongBenchDataError) as failure:
        raise UsageError(f"arc-eval: {failure}") from None
    if result.stopped_by is not None:
        from arc_eval.announce import stopped_text

        print(stopped_text(result.stopped_by, result.skipped + result.ran, result.ran, spec.out), file=sys.stderr)
        return EXIT_TERMINATED if result.stopped_by == "SIGTERM" else EXIT_INTERRUPTED
    if result.aborted is not None and not result.started:
        print(f"arc-eval: stopped before the first task: {result.aborted}\n"
              "Nothing was run or recorded; run the command again after the fix.", file=sys.stderr)
        return EXIT_BACKEND
    if result.aborted is not None:
        print(f"arc-eval: stopped: {result.aborted}\n"
              f"{result.ran} task(s) finished in this invocation are recorded in {spec.out}; the task(s) in "
              "flight are not. Rerun the same command (after the fix) to continue.", file=sys.stderr)
        return EXIT_BACKEND
    return EXIT_OK


def _bench(args: argparse.Namespace) -> int:
    from arc_eval.methods import BASELINE_NAMES, METHOD_NAMES, method_available
    from arc_eval.bench import bench_concurrency, bench_harness_overhead, bench_throughput

    methods = args.methods if args.methods is not None else tuple(
        name for name in METHOD_NAMES if name in BASELINE_NAMES or method_available(name)
    )
    missing = _missing_methods_message(methods)
    if missing is not None:
        raise UsageError(missing)
    only = set(args.only or ("throughput", "overhead", "concurrency"))
    if "throughput" in only:
        print(bench_throughput(methods, args.tasks, rag_retriever=args.rag_retriever), flush=True)
    if "overhead" in only:
        print(bench_harness_overhead(methods, args.overhead_tasks, rag_retriever=args.rag_retriever), flush=True)
    if "concurrency" in only:
        print(bench_concurrency(args.concurrency, args.concurrency_tasks, latency_ms=args.latency_ms), flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``arc-eval`` console script; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        if arguments and arguments[0] in _DISPATCHED:
            try:
                if arguments[0] == "report":
                    from arc_eval.analysis.cli import report_main

                    return int(report_main(arguments[1:]))
                from arc_eval.backends.scripted_server import serve_main

                return int(serve_main(arguments[1:]))
            except SystemExit as done:  # --help or a usage error of the dispatched command
                return int(done.code) if isinstance(done.code, int) else EXIT_USAGE
        parser = build_parser()
        try:
            args = parser.parse_args(arguments)
        except SystemExit as done:  # --help
            return int(done.code) if isinstance(done.code, int) else EXIT_OK
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command == "bench":
            return _bench(args)
        return _run(args, arguments)
    except UsageError as failure:
        print(str(failure), file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as failure:
        print(f"arc-eval: {failure}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("arc-eval: interrupted; finished tasks are recorded; rerun the same command to continue.",
              file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
