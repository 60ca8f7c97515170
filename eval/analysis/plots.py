"""PNG plots of a report (matplotlib, Agg canvas; no pyplot global state).

- accuracy per method with the per-seed spread (mean bar, SD whisker, one dot per seed);
- accuracy against the ablation variant (e.g. recall budget), one line per method;
- HBM traffic and roofline time (prefill + decode) per method;
- prompt tokens per call over one trajectory for each method (the same task for all methods),
  and the mean over all tasks by call index.

Seen alone, each figure says what it shows (issue 31, item 5) in a caption under it: the model and how it ran
(the scripted agent, or a served model and its backend), the roofline's model preset and hardware on the HBM
figure (an assumption, not a measurement), every method of the run it leaves out and why (no finished task, no
correct task to cost a success by), and the calls that were never served (over L_ctx - G_max, or an error),
drawn as crosses on the prompt-token figure and left out of its means.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from arc_eval.analysis.accuracy import AccuracyRow, accuracy_rows, method_order
from arc_eval.analysis.load import Dataset
from arc_eval.analysis.report import (
    ReportOptions, highlighted, kind_label, method_label, variant_label, variant_order, variant_params, write_atomic,
)
from arc_eval.analysis.roofline import MethodCost, is_replayed
from arc_eval.schema import CallRecord

DPI = 110


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def caption(fig: Figure, lines: Sequence[str], width: int = 120) -> None:
    """The figure's caption, under it (kept by the tight bounding box): what a reader of the PNG alone needs."""
    wrapped = [textwrap.fill(line, width, subsequent_indent="  ") for line in lines if line]
    fig.text(0.0, 0.0, "\n".join(wrapped), ha="left", va="top", fontsize=7, transform=fig.transFigure)


def caption_lines(fig: Figure) -> list[str]:
    """The caption's text as written (for tests and readers of the figure object)."""
    return [text.get_text() for text in fig.texts]


def run_line(dataset: Dataset, kind: str, model: str) -> str:
    """Which model made the records and how: the scripted agent (no model, no GPU) or a served model."""
    manifests = [run.manifest for run in dataset.runs if run.manifest.model == model and run.manifest.task_kind == kind]
    backends = sorted({manifest.backend for manifest in manifests})
    counting = sorted({f"{manifest.config.get('tokenizer', '?')} / {manifest.config.get('chat_format', '?')}"
                       for manifest in manifests})
    if backends == ["scripted"]:
        return (f"model {model}: the deterministic scripted agent (no model, no GPU, on this machine's CPU); prompts"
                f" counted with {', '.join(counting)}")
    return (f"model {model}, served through the {', '.join(backends) or '?'} backend (prompt tokens: the server's"
            " count); the serving hardware is not recorded by the run")


def run_methods(dataset: Dataset, kind: str, model: str) -> list[str]:
    """The methods the runs of (kind, model) were asked to run, in the manifests' order."""
    methods: list[str] = []
    for run in dataset.runs:
        if run.manifest.model == model and run.manifest.task_kind == kind:
            methods += [method for method in run.manifest.methods if method not in methods]
    return methods


def left_out_line(left_out: Sequence[tuple[str, str]]) -> str:
    if not left_out:
        return "every method of the run is shown"
    return "left out: " + "; ".join(f"{method_label(method)} ({why})" for method, why in left_out)


def never_served(call: CallRecord) -> bool:
    """A call the server never answered: over L_ctx - G_max (overflow, refused before any prefill) or an error."""
    return not is_replayed(call)


def _save(fig: Figure, path: Path) -> Path:
    import io

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    write_atomic(path, buffer.getvalue())
    return path


def accuracy_figure(rows: Sequence[AccuracyRow], variants: Sequence[str], title: str,
                    notes: Sequence[str] = ()) -> Figure:
    """Mean accuracy per method (one bar per variant), SD whiskers and one dot per seed; ``notes``: the caption."""
    methods = sorted({r.method for r in rows}, key=method_order)
    fig = Figure(figsize=(max(5.0, 0.9 * len(methods) * max(1, len(variants)) ** 0.5 + 2), 3.8), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(variants)
    for j, variant in enumerate(variants):
        xs, means, sds = [], [], []
        for i, method in enumerate(methods):
            match = [r for r in rows if r.method == method and r.variant == variant]
            if not match:
                continue
            r = match[0]
            x = i - 0.4 + width * (j + 0.5)
            xs.append(x)
            means.append(100 * r.mean_accuracy)
            sds.append(100 * (r.sd_accuracy or 0.0))
            ax.scatter([x] * len(r.per_seed), [100 * s.accuracy for s in r.per_seed], s=12, color="black", zorder=3)
        label = variant_label(variant) if len(variants) > 1 else None
        ax.bar(xs, means, width=width * 0.9, yerr=sds, capsize=3, label=label, alpha=0.8)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels([method_label(m) for m in methods], rotation=20, ha="right")
    ax.set_ylabel("accuracy (%): mean, SD, seeds")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    if len(variants) > 1:
        ax.legend(fontsize=7, title="variant", title_fontsize=7)
    zero = [r for r in rows if r.mean_accuracy == 0]
    lines = list(notes)
    if zero:
        lines.append("0 % (no visible bar): " + ", ".join(
            f"{method_label(r.method)}{'' if len(variants) == 1 else ' (' + variant_label(r.variant) + ')'}"
            for r in zero))
    caption(fig, lines, 100)
    return fig


def plot_accuracy(rows: Sequence[AccuracyRow], variants: Sequence[str], title: str, path: Path,
                  notes: Sequence[str] = ()) -> Path:
    return _save(accuracy_figure(rows, variants, title, notes), path)


def plot_accuracy_vs_variant(
    rows: Sequence[AccuracyRow], variants: Sequence[str], params: Sequence[dict[str, Any]], title: str, path: Path,
    notes: Sequence[str] = (),
) -> Path:
    """Pooled accuracy per method against the ablation variant, in the manifest's order."""
    fig = Figure(figsize=(6.0, 3.8), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for method in sorted({r.method for r in rows}, key=method_order):
        xs, ys = [], []
        for i, variant in enumerate(variants):
            match = [r for r in rows if r.method == method and r.variant == variant]
            if match:
                xs.append(i)
                ys.append(100 * match[0].pooled_accuracy)
        ax.plot(xs, ys, marker="o", label=method_label(method), linewidth=2.2 if highlighted(method) else 1.2)
    labels = []
    for variant, values in zip(variants, params):
        shown = "/".join(str(v) for v in values.values()) if values else ""
        labels.append(f"{variant_label(variant)}\n{shown}" if shown and shown != variant else variant_label(variant))
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(labels, fontsize=7)
    keys = sorted({k for values in params for k in values})
    ax.set_xlabel(", ".join(keys) if keys else "variant")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=7)
    caption(fig, notes, 100)
    return _save(fig, path)


def hbm_notes(costs: Sequence[MethodCost], options: ReportOptions | None, model: str, scripted: bool,
              methods: Sequence[str]) -> list[str]:
    """The HBM figure's caption: the assumed model preset and hardware, the methods left out and why, and the
    calls that were never served (not costed)."""
    lines = []
    if options is not None:
        hw = options.hardware
        machine = hw.name if hw.n_gpu == 1 and "TB/s" in hw.name else (
            f"{hw.n_gpu} x {hw.name} ({hw.total_hbm_bytes / 1e9:.0f} GB HBM, {hw.total_bandwidth / 1e12:.2f} TB/s,"
            f" {hw.total_flops / 1e12:.0f} TFLOP/s in all)")
        spec = options.models.get(model)
        preset = (f"{spec.name} ({spec.weight_bytes / 1e9:.1f} GB of weights, kv_b {spec.kv_bytes_per_token:,.0f}"
                  " B/token)") if spec is not None else "no model preset"
        lines.append(f"roofline, not a measurement: the recorded calls of {model} costed as {preset} on {machine}"
                     + ("; a scripted run has no model, so the preset is the report's default" if scripted else "")
                     + " (arc-eval report --model-preset, --hardware)")
    left_out = [(method, "no finished task") for method in methods if all(c.method != method for c in costs)]
    several = len({c.variant for c in costs}) > 1
    for cost in sorted(costs, key=lambda c: method_order(c.method)):
        if cost.t_tot is None:
            unit = "per task" if cost.normalisation == "task" else "per success"
            why = "no finished task" if cost.n_tasks == 0 else f"0 of {cost.n_tasks} tasks correct: no cost {unit}"
            left_out.append((cost.method, f"variant {variant_label(cost.variant)}: {why}" if several else why))
    lines.append(left_out_line(left_out))
    skipped = [(c.method, c.variant, c.skipped_calls) for c in costs if c.skipped_calls]
    if skipped:
        lines.append("not costed, never served (over L_ctx - G_max, or an error): " + ", ".join(
            f"{count:,} call(s) of {method_label(method)}" + (f" ({variant_label(variant)})" if several else "")
            for method, variant, count in skipped))
    return lines


def hbm_figure(costs: Sequence[MethodCost], variants: Sequence[str], title: str, notes: Sequence[str] = ()) -> Figure:
    """Decode HBM traffic (left) and roofline time, prefill + decode stacked (right), per method;
    one bar per variant; ``notes``: the caption."""
    shown = [c for c in costs if c.t_tot is not None]
    methods = sorted({c.method for c in shown}, key=method_order)
    fig = Figure(figsize=(max(8.0, 1.2 * len(methods) * max(1, len(variants)) ** 0.5 + 3), 4.0), layout="constrained")
    ax_bw = fig.add_subplot(1, 2, 1)
    ax_t = fig.add_subplot(1, 2, 2)
    width = 0.8 / max(1, len(variants))
    colors = ["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink", "tab:gray"]
    for j, variant in enumerate(variants):
        color = colors[j % len(colors)]
        for i, method in enumerate(methods):
            match = [c for c in shown if c.method == method and c.variant == variant]
            if not match:
                continue
            c = match[0]
            bw, t_pre, t_dec = c.bw_bytes, c.t_pre, c.t_dec
            assert bw is not None and t_pre is not None and t_dec is not None
            x = i - 0.4 + width * (j + 0.5)
            first = i == 0
            label = variant_label(variant) if len(variants) > 1 and first else None
            ax_bw.bar(x, bw / 1e12, width=width * 0.9, color=color, label=label)
            ax_t.bar(
                x,
                t_pre,
                width=width * 0.9,
                color=color,
                alpha=0.45,
                hatch="//",
                label="prefill" if first and j == 0 else None,
            )
            ax_t.bar(
                x, t_dec, width=width * 0.9, bottom=t_pre, color=color, label="decode" if first and j == 0 else None
            )
    unit = {"success": "per success", "successful": "per successful task", "task": "per task"}[
        shown[0].normalisation if shown else "success"
    ]
    for ax in (ax_bw, ax_t):
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels([method_label(m) for m in methods], rotation=25, ha="right", fontsize=8)
    ax_bw.set_ylabel(f"decode HBM traffic (TB, {unit})")
    ax_t.set_ylabel(f"roofline time (s, {unit})")
    if len(variants) > 1:
        ax_bw.legend(fontsize=7, title="variant", title_fontsize=7)
    if shown:
        ax_t.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    caption(fig, notes, 130)
    return fig


def plot_hbm(costs: Sequence[MethodCost], variants: Sequence[str], title: str, path: Path,
             notes: Sequence[str] = ()) -> Path:
    return _save(hbm_figure(costs, variants, title, notes), path)


def prompt_tokens_figure(dataset: Dataset, kind: str, model: str, title: str) -> Figure | None:
    """Prompt tokens per call: one trajectory per method (same task, seed and variant for all) and the
    mean over all tasks by call index, over the calls that were served; a call never served (over
    L_ctx - G_max, or an error) is a cross, on the left at its prompt, on the right at the mean of those of its
    index. None when no task has calls."""
    tasks = [t for t in dataset.tasks if t.task_kind == kind and t.model == model and dataset.calls.get(t.key)]
    if not tasks:
        return None
    order = variant_order(dataset, kind, model)
    variant = min({t.variant for t in tasks}, key=lambda v: order.index(v) if v in order else len(order))
    methods = sorted({t.method for t in tasks if t.variant == variant}, key=method_order)
    by_pair: dict[tuple[int, str], set[str]] = {}
    for t in tasks:
        if t.variant == variant:
            by_pair.setdefault((t.seed, t.task_id), set()).add(t.method)
    common = sorted(p for p, ms in by_pair.items() if len(ms) == len(methods)) or sorted(by_pair)
    seed, task_id = common[0]
    fig = Figure(figsize=(10.0, 3.8), layout="constrained")
    ax_one = fig.add_subplot(1, 2, 1)
    ax_mean = fig.add_subplot(1, 2, 2)
    unserved: dict[str, int] = {}
    crossed_axes: set[int] = set()
    for method in methods:
        color = None
        match = [
            t for t in tasks if t.variant == variant and t.method == method and (t.seed, t.task_id) == (seed, task_id)
        ]
        if match:
            calls = [c for c in dataset.calls[match[0].key] if not never_served(c)]
            (line,) = ax_one.plot(
                [c.call_index for c in calls], [c.prompt_tokens for c in calls], marker=".", label=method_label(method)
            )
            color = line.get_color()
            crossed = [c for c in dataset.calls[match[0].key] if never_served(c)]
            if crossed:
                crossed_axes.add(0)
                ax_one.scatter([c.call_index for c in crossed], [c.prompt_tokens for c in crossed], marker="x",
                               color=color, s=40, zorder=3)
        sums: dict[int, list[int]] = {}
        refused: dict[int, list[int]] = {}
        for t in tasks:
            if t.variant == variant and t.method == method:
                for c in dataset.calls[t.key]:
                    (refused if never_served(c) else sums).setdefault(c.call_index, []).append(c.prompt_tokens)
        xs = sorted(sums)
        (line,) = ax_mean.plot(xs, [sum(sums[x]) / len(sums[x]) for x in xs], color=color, label=method_label(method))
        if refused:
            crossed_axes.add(1)
            unserved[method] = sum(len(values) for values in refused.values())
            points = sorted(refused)
            ax_mean.scatter(points, [sum(refused[x]) / len(refused[x]) for x in points], marker="x",
                            color=line.get_color(), s=40, zorder=3)
    limits = dataset.manifests_for(variant, model, kind)
    budget = None
    if limits:
        budget = limits[0].context_limit - limits[0].max_tokens
        for ax in (ax_one, ax_mean):
            ax.axhline(budget, color="grey", linestyle="--", linewidth=0.8, label="L_ctx - G_max")
    for number in sorted(crossed_axes):
        (ax_one, ax_mean)[number].scatter([], [], marker="x", color="black", label="never served")
    ax_one.set_title(f"task {task_id}, seed {seed}", fontsize=8)
    ax_mean.set_title("mean over the tasks that reached each call index (served calls)", fontsize=8)
    for ax in (ax_one, ax_mean):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("call index")
        ax.set_ylabel("prompt tokens")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    lines = [run_line(dataset, kind, model) + "; no hardware enters a token count"]
    variants = sorted({t.variant for t in tasks}, key=lambda v: order.index(v) if v in order else len(order))
    if len(variants) > 1:
        lines.append(f"variant {variant_label(variant)} only (the first of {len(variants)})")
    if unserved:
        limit = f" = {budget:,}" if budget is not None else ""
        lines.append(
            f"x: a call never served, its prompt over L_ctx - G_max{limit} (refused before any prefill; the method's"
            " task ends there) or an error: " + ", ".join(f"{count:,} of {method_label(method)}"
                                                           for method, count in unserved.items())
            + "; the lines join served calls only, the right panel's crosses are the means of the unserved ones")
    else:
        lines.append("every call drawn was served (none over L_ctx - G_max)")
    left_out = [(method, "no recorded call") for method in run_methods(dataset, kind, model) if method not in methods]
    lines.append(left_out_line(left_out))
    caption(fig, lines, 150)
    return fig


def plot_prompt_tokens(dataset: Dataset, kind: str, model: str, title: str, path: Path) -> Path | None:
    fig = prompt_tokens_figure(dataset, kind, model, title)
    return None if fig is None else _save(fig, path)


def write_plots(dataset: Dataset, costs: Sequence[MethodCost], out_dir: Path,
                options: ReportOptions | None = None) -> list[Path]:
    """Every plot of the report, one file per (task kind, model); returns the files written. ``options`` (the
    report's hardware and model presets) name the roofline's assumptions on the HBM figure."""
    written: list[Path] = []
    for kind in sorted({t.task_kind for t in dataset.tasks}):
        label = kind_label(kind)
        rows = accuracy_rows((t for t in dataset.tasks if t.task_kind == kind), "overall")
        for model in sorted({r.model for r in rows}):
            name = f"{kind}_{slug(model)}"
            mine = [r for r in rows if r.model == model]
            variants = [v for v in variant_order(dataset, kind, model) if any(r.variant == v for r in mine)]
            shown = {r.method for r in mine}
            methods = run_methods(dataset, kind, model)
            notes = [run_line(dataset, kind, model) + "; accuracy does not depend on hardware",
                     left_out_line([(m, "no finished task") for m in methods if m not in shown])]
            written.append(
                plot_accuracy(
                    mine, variants, f"{label}, {model}: accuracy per method", out_dir / f"accuracy_{name}.png", notes
                )
            )
            if len(variants) > 1:
                params = [dict(variant_params(dataset, kind, model, v)) for v in variants]
                written.append(
                    plot_accuracy_vs_variant(
                        mine,
                        variants,
                        params,
                        f"{label}, {model}: accuracy per variant",
                        out_dir / f"accuracy_vs_variant_{name}.png",
                        notes,
                    )
                )
            model_costs = [c for c in costs if c.task_kind == kind and c.model == model]
            if any(c.t_tot is not None for c in model_costs):
                scripted = all(run.manifest.backend == "scripted" for run in dataset.runs
                               if run.manifest.model == model and run.manifest.task_kind == kind)
                machine = f" on {options.hardware.name}" if options is not None else ""
                written.append(
                    plot_hbm(
                        model_costs,
                        variants,
                        f"{label}, {model}: HBM traffic and roofline time{machine} (roofline, not measured)",
                        out_dir / f"hbm_{name}.png",
                        hbm_notes(model_costs, options, model, scripted, methods),
                    )
                )
            tokens = plot_prompt_tokens(
                dataset,
                kind,
                model,
                f"{label}, {model}: prompt tokens per call",
                out_dir / f"prompt_tokens_{name}.png",
            )
            if tokens is not None:
                written.append(tokens)
    return written
