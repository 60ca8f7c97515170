"""PNG plots of a report (matplotlib, Agg canvas; no pyplot global state).

- accuracy per method with the per-seed spread (mean bar, SD whisker, one dot per seed);
- accuracy against the ablation variant (e.g. recall budget), one line per method;
- HBM traffic and roofline time (prefill + decode) per method;
- prompt tokens per call over one trajectory for each method (the same task for all methods),
  and the mean over all tasks by call index.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from arc_eval.analysis.accuracy import AccuracyRow, accuracy_rows, method_order
from arc_eval.analysis.load import Dataset
from arc_eval.analysis.report import highlighted, kind_label, method_label, variant_label, variant_order, variant_params, write_atomic
from arc_eval.analysis.roofline import MethodCost

DPI = 110


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _save(fig: Figure, path: Path) -> Path:
    import io

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    write_atomic(path, buffer.getvalue())
    return path


def plot_accuracy(rows: Sequence[AccuracyRow], variants: Sequence[str], title: str, path: Path) -> Path:
    """Mean accuracy per method (one bar per variant), SD whiskers and one dot per seed."""
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
    return _save(fig, path)


def plot_accuracy_vs_variant(
    rows: Sequence[AccuracyRow], variants: Sequence[str], params: Sequence[dict[str, Any]], title: str, path: Path
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
    return _save(fig, path)


def plot_hbm(costs: Sequence[MethodCost], variants: Sequence[str], title: str, path: Path) -> Path:
    """Decode HBM traffic (left) and roofline time, prefill + decode stacked (right), per method;
    one bar per variant."""
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
    return _save(fig, path)


def plot_prompt_tokens(dataset: Dataset, kind: str, model: str, title: str, path: Path) -> Path | None:
    """Prompt tokens per call: one trajectory per method (same task, seed and variant for all) and the
    mean over all tasks by call index. None when no task has calls."""
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
    for method in methods:
        match = [
            t for t in tasks if t.variant == variant and t.method == method and (t.seed, t.task_id) == (seed, task_id)
        ]
        if match:
            calls = dataset.calls[match[0].key]
            ax_one.plot(
                [c.call_index for c in calls], [c.prompt_tokens for c in calls], marker=".", label=method_label(method)
            )
        sums: dict[int, list[int]] = {}
        for t in tasks:
            if t.variant == variant and t.method == method:
                for c in dataset.calls[t.key]:
                    sums.setdefault(c.call_index, []).append(c.prompt_tokens)
        xs = sorted(sums)
        ax_mean.plot(xs, [sum(sums[x]) / len(sums[x]) for x in xs], label=method_label(method))
    limits = dataset.manifests_for(variant, model, kind)
    if limits:
        budget = limits[0].context_limit - limits[0].max_tokens
        for ax in (ax_one, ax_mean):
            ax.axhline(budget, color="grey", linestyle="--", linewidth=0.8, label="L_ctx - G_max")
    ax_one.set_title(f"task {task_id}, seed {seed}", fontsize=8)
    ax_mean.set_title("mean over the tasks that reached each call index", fontsize=8)
    for ax in (ax_one, ax_mean):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("call index")
        ax.set_ylabel("prompt tokens")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def write_plots(dataset: Dataset, costs: Sequence[MethodCost], out_dir: Path) -> list[Path]:
    """Every plot of the report, one file per (task kind, model); returns the files written."""
    written: list[Path] = []
    for kind in sorted({t.task_kind for t in dataset.tasks}):
        label = kind_label(kind)
        rows = accuracy_rows((t for t in dataset.tasks if t.task_kind == kind), "overall")
        for model in sorted({r.model for r in rows}):
            name = f"{kind}_{slug(model)}"
            mine = [r for r in rows if r.model == model]
            variants = [v for v in variant_order(dataset, kind, model) if any(r.variant == v for r in mine)]
            written.append(
                plot_accuracy(
                    mine, variants, f"{label}, {model}: accuracy per method", out_dir / f"accuracy_{name}.png"
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
                    )
                )
            model_costs = [c for c in costs if c.task_kind == kind and c.model == model]
            if any(c.t_tot is not None for c in model_costs):
                written.append(
                    plot_hbm(
                        model_costs,
                        variants,
                        f"{label}, {model}: HBM traffic and roofline time",
                        out_dir / f"hbm_{name}.png",
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
