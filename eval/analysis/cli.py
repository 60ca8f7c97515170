"""`arc-eval report RUN_DIR...`: the paper's tables and plots from recorded runs.

    arc-eval report RUN_DIR... [--out DIR] [--baseline METHOD] [--hardware h200|h100-sxm|mi300x|FILE]
                    [--model-preset qwen3-8b|qwen3-32b|FILE] [--format md,tex,png,json]
                    [--scratch-gb GB] [--normalise success|successful|task] [--arc METHOD]

Writes report.md, report.tex, PNG plots (and report.json when asked) into --out (default
RUN_DIR/report of the first run) and prints the Markdown report to stdout. Progress goes to stderr.
Bad input (a missing or malformed record, an unknown preset) is one clear message, exit status 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

from arc_eval.errors import INTERRUPTED, OK, USAGE
from arc_eval.registry import highlighted_method
from arc_eval.arguments import OneLineParser, number_parser, once_each
from arc_eval.analysis.accuracy import accuracy_rows
from arc_eval.analysis.errors import AnalysisError
from arc_eval.analysis.load import Dataset, load_runs
from arc_eval.analysis.mcnemar import PValue, compare_methods
from arc_eval.analysis.presets import (
    HARDWARE_PRESETS,
    QWEN3_CONFIGS,
    ModelSpec,
    hardware_preset,
    model_preset,
    preset_for_model_name,
)
from arc_eval.analysis.report import (
    Report,
    bound_breaches,
    dataset_bounds,
    partial_warnings,
    ReportOptions,
    build_report,
    render_report_latex,
    render_report_markdown,
    write_atomic,
)
from arc_eval.analysis.roofline import DEFAULT_BASELINE, NORMALISATIONS, MethodCost

FORMATS = ("md", "tex", "png", "json")
MAX_SCRATCH_GB = 1e6  # the parser's bound; the hardware's own HBM bounds it lower (presets.hardware_preset)
DEFAULT_FORMATS = "md,tex,png"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="arc-eval report",
        description="Accuracy, McNemar and roofline tables (Markdown, LaTeX) and plots (PNG) from arc-eval run directories.",
    )
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (manifest.json, calls.jsonl, tasks.jsonl)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: RUN_DIR/report of the first run)"
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help=f"method that savings and speedup are measured against, a recorded method (default: {DEFAULT_BASELINE}; "
        "a run without it gets no savings figures, and a note says so)",
    )
    parser.add_argument(
        "--hardware", default="h200", help=f"{'|'.join(HARDWARE_PRESETS)} or a TOML/JSON file (default: %(default)s)"
    )
    parser.add_argument(
        "--model-preset",
        default=None,
        help=f"{'|'.join(QWEN3_CONFIGS)} or a TOML/JSON file with config.json keys (default: from the manifest's model name)",
    )
    parser.add_argument(
        "--format",
        default=DEFAULT_FORMATS,
        help=f"comma-separated subset of {','.join(FORMATS)} (default: %(default)s)",
    )
    parser.add_argument("--scratch-gb", type=number_parser(MAX_SCRATCH_GB, minimum=0), default=None,
                        help="scratch reserve S in GB, below the hardware's HBM (default: 10%% of HBM)")
    parser.add_argument(
        "--normalise",
        choices=NORMALISATIONS,
        default="success",
        help="roofline cost per success (all tasks / correct ones, the paper's), per successful trajectory, or per task",
    )
    parser.add_argument("--arc", default=None, metavar="METHOD",
                        help="method A of the McNemar tests, a recorded method (default: the paper's method, arc, when recorded)")
    return once_each(parser)  # a flag given twice is refused


def resolve_models(dataset: Dataset, flag: str | None) -> tuple[dict[str, ModelSpec], list[str]]:
    """Model preset per recorded model name: the flag, else 8B / 32B in the name, scripted -> 8B."""
    names = sorted({t.model for t in dataset.tasks} | {r.manifest.model for r in dataset.runs})
    notes: list[str] = []
    models: dict[str, ModelSpec] = {}
    if flag is not None:
        spec = model_preset(flag)
        if len(names) > 1:
            notes.append(f"--model-preset {flag} applies to every model: {', '.join(names)}")
        return {name: spec for name in names}, notes
    scripted = {r.manifest.model for r in dataset.runs if r.manifest.backend == "scripted"}
    for name in names:
        preset = preset_for_model_name(name)
        if preset is None and (name in scripted or name == "scripted"):
            preset = "qwen3-8b"
            notes.append(
                f"model {name!r} is a scripted run: its roofline uses the qwen3-8b preset by default "
                "(give --model-preset to choose another)"
            )
        if preset is None:
            raise AnalysisError(
                f"cannot tell the model size of {name!r} from its name: give --model-preset "
                f"{'|'.join(QWEN3_CONFIGS)}|FILE"
            )
        models[name] = model_preset(preset)
    return models, notes


def _parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise AnalysisError(f"--format {text!r}: use a comma-separated subset of {','.join(FORMATS)}")
    return formats


def _json_number(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isinf(x):
        return "inf"
    return x


def _json_p(p: PValue) -> dict[str, Any]:
    return {"value": p.value, "log10": p.log10, "text": p.format()}


def report_json(dataset: Dataset, options: ReportOptions, costs: Sequence[MethodCost]) -> dict[str, Any]:
    """Every number of the report in a machine-readable form."""
    accuracy = []
    for breakdown in ("overall", "length", "domain"):
        for r in accuracy_rows(dataset.tasks, breakdown):
            accuracy.append(
                {
                    "task_kind": r.task_kind,
                    "model": r.model,
                    "variant": r.variant,
                    "method": r.method,
                    "breakdown": breakdown,
                    "category": r.category,
                    "attempts": r.attempts,
                    "passes": r.passes,
                    "no_answers": r.no_answers,
                    "mean_no_answer": r.mean_no_answer,
                    "mean_pass": r.mean_pass,
                    "mean_accuracy": r.mean_accuracy,
                    "sd_accuracy": r.sd_accuracy,
                    "per_seed": [
                        {"seed": s.seed, "attempts": s.attempts, "passes": s.passes, "no_answers": s.no_answers}
                        for s in r.per_seed
                    ],
                }
            )
    mcnemar = []
    for outcome in ("correct", "submitted"):
        for c in compare_methods(dataset.tasks, options.arc_method, outcome):
            t, so = c.total, c.seed_odds
            mcnemar.append(
                {
                    "task_kind": c.task_kind,
                    "model": c.model,
                    "variant": c.variant,
                    "a": c.method_a,
                    "b": c.method_b,
                    "outcome": outcome,
                    "a_only": t.a_only,
                    "b_only": t.b_only,
                    "both": t.both,
                    "neither": t.neither,
                    "statistic": t.statistic,
                    "chi2_p": _json_p(t.chi2_p),
                    "exact_p": _json_p(t.exact_p),
                    "exact_p_one_sided": _json_p(t.exact_p_one_sided),
                    "odds_ratio": _json_number(t.odds_ratio),
                    "per_seed_odds": {
                        "kind": so.kind,
                        "mean": so.mean,
                        "sd": so.sd,
                        "finite_seeds": so.finite_seeds,
                        "discordant_seeds": so.discordant_seeds,
                    },
                    "unpaired_a": c.unpaired_a,
                    "unpaired_b": c.unpaired_b,
                    # a task id paired under several seeds: McNemar over the distinct items (each at its first seed)
                    "distinct_items": c.distinct_items if c.distinct is not None else None,
                    # every repeated item has one outcome pair under all its seeds: the table's row is `distinct`
                    "seed_copies": c.seed_copies,
                    "clustered_p": None if c.clustered_p is None else _json_p(c.clustered_p),
                    "distinct": None if c.distinct is None else {
                        "a_only": c.distinct.a_only, "b_only": c.distinct.b_only, "both": c.distinct.both,
                        "neither": c.distinct.neither, "chi2_p": _json_p(c.distinct.chi2_p),
                        "exact_p": _json_p(c.distinct.exact_p),
                        "exact_p_one_sided": _json_p(c.distinct.exact_p_one_sided),
                    },
                }
            )
    roofline = []
    for m in costs:
        roofline.append(
            {
                "task_kind": m.task_kind,
                "model": m.model,
                "variant": m.variant,
                "method": m.method,
                "normalisation": m.normalisation,
                "n_tasks": m.n_tasks,
                "n_success": m.n_success,
                "decode_tokens": m.decode_tokens,
                "prompt_tokens": m.prompt_tokens,
                "total_decode_bytes": m.weight_bytes + m.kv_bytes,
                "total_prefill_flops": m.prefill_flops,
                "bw_bytes": m.bw_bytes,
                "t_tot": m.t_tot,
                "t_dec": m.t_dec,
                "t_pre": m.t_pre,
                "baseline": m.baseline,
                "savings_percent": m.savings,
                "speedup": m.speedup,
                "bw_savings_percent": m.bw_savings,
                # beside the re-prefill figures above: prefill charged for the tokens the server did not serve from
                # its prefix cache (calls.jsonl cached_prompt_tokens); null when no call in scope recorded them
                "replayed_calls": m.replayed_calls,
                "cache_recorded_calls": m.cache_recorded_calls,
                "total_prefill_flops_cached": m.prefill_flops_cached if m.cache_recorded_calls else None,
                "t_pre_cached": m.t_pre_cached,
                "t_tot_cached": m.t_tot_cached,
                "savings_cached_percent": m.savings_cached,
            }
        )
    bounds = dataset_bounds(dataset)
    prompt_bounds = [
        {
            "task_kind": b.task_kind,
            "model": b.model,
            "variant": b.variant,
            "method": b.method,
            "sent_calls": b.sent,
            **{
                name: {
                    "held": check.held,
                    "broken": [{"seed": x.seed, "task_id": x.task_id, "call_index": x.call_index,
                                "purpose": x.purpose, "value": x.value, "bound": x.bound} for x in check.breaches],
                    "not_recorded": check.not_recorded,
                }
                for name, check in (("prompt_within_limit", b.within_limit),
                                    ("estimate_equals_prompt", b.estimate_matches),
                                    ("estimate_within_view_budget", b.within_budget))
            },
            "has_view_budget": b.has_budget,
        }
        for b in bounds
    ]
    hw = options.hardware
    return {
        "schema": "arc-eval-report/1",
        "runs": [str(r.run_dir) for r in dataset.runs],
        "hardware": {
            "name": hw.name,
            "n_gpu": hw.n_gpu,
            "hbm_bytes": hw.hbm_bytes,
            "bandwidth_bytes_per_s": hw.bandwidth_bytes_per_s,
            "peak_flops": hw.peak_flops,
            "scratch_bytes": hw.scratch,
        },
        "models": {
            name: {
                "preset": s.name,
                "weight_bytes": s.weight_bytes,
                "kv_bytes_per_token": s.kv_bytes_per_token,
                "total_params": s.total_params,
            }
            for name, s in options.models.items()
        },
        "warnings": partial_warnings(dataset) + bound_breaches(bounds),
        "notes": list(dataset.notes),
        "accuracy": accuracy,
        "mcnemar": mcnemar,
        "roofline": roofline,
        "prompt_bounds": prompt_bounds,
    }


def run_report(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> Report:
    formats = _parse_formats(args.format)

    def progress(message: str) -> None:
        print(message, file=stderr, flush=True)

    hardware = hardware_preset(args.hardware, args.scratch_gb)
    dataset = load_runs([Path(d) for d in args.run_dirs], progress)
    methods = sorted({t.method for t in dataset.tasks})
    for flag, method in (("--baseline", args.baseline), ("--arc", args.arc)):
        if dataset.tasks and method is not None and method not in methods:
            raise AnalysisError(f"{flag} {method}: no task of that method in the runs (methods: {', '.join(methods)})")
    models, model_notes = resolve_models(dataset, args.model_preset)
    options = ReportOptions(
        hardware=hardware,
        models=models,
        model_notes=tuple(model_notes),
        baseline=args.baseline if args.baseline is not None else DEFAULT_BASELINE,
        arc_method=args.arc if args.arc is not None else (highlighted_method() or ""),
        normalisation=args.normalise,
    )
    progress(f"computing tables over {len(dataset.tasks):,} finished task(s)")
    report = build_report(dataset, options)
    for warning in report.warnings:
        progress(f"warning: {warning}")
    out_dir: Path = args.out if args.out is not None else Path(args.run_dirs[0]) / "report"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AnalysisError(f"cannot create the output directory {out_dir}: {exc}") from None
    if "png" in formats and dataset.tasks:
        try:
            from arc_eval.analysis.plots import write_plots
        except ImportError as exc:
            raise AnalysisError(
                f"PNG plots need matplotlib ({exc}): pip install 'arc-ref[eval]', or leave png out of --format"
            ) from None

        progress("drawing plots")
        try:
            report.figures = write_plots(dataset, report.costs, out_dir, options)
        except OSError as exc:
            raise AnalysisError(f"cannot write the plots into {out_dir}: {exc}") from None
    markdown = render_report_markdown(report)
    try:
        if "md" in formats:
            write_atomic(out_dir / "report.md", markdown.encode("utf-8"))
        if "tex" in formats:
            write_atomic(out_dir / "report.tex", render_report_latex(report).encode("utf-8"))
        if "json" in formats:
            data = json.dumps(report_json(dataset, options, report.costs), indent=1, allow_nan=False)
            write_atomic(out_dir / "report.json", data.encode("utf-8"))
    except OSError as exc:
        raise AnalysisError(f"cannot write the report into {out_dir}: {exc}") from None
    stdout.write(markdown)
    stdout.flush()
    written = [f"report.{f}" for f in formats if f != "png"]
    if report.figures:
        written.append(f"{len(report.figures)} plot(s)")
    progress(f"wrote {', '.join(written) or 'nothing'} into {out_dir}")
    return report


def report_main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Entry point of `arc-eval report`; returns an exit status of ``arc_eval.errors.EXIT_STATUSES``."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    parser = _parser()
    try:
        old_err = sys.stderr
        sys.stderr = err  # argparse writes usage errors to sys.stderr
        try:
            args = parser.parse_args(list(argv))
        finally:
            sys.stderr = old_err
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else USAGE.code
    try:
        run_report(args, out, err)
    except AnalysisError as exc:
        print(f"arc-eval report: error: {exc.message}", file=err)
        return exc.exit_status.code
    except KeyboardInterrupt:
        print("arc-eval report: interrupted (files already written are complete)", file=err)
        return INTERRUPTED.code
    return OK.code


def main() -> None:
    """`python -m arc_eval.analysis.cli RUN_DIR...`: the same as `arc-eval report RUN_DIR...`."""
    raise SystemExit(report_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
