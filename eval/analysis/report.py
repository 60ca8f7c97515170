"""The paper's tables from recorded runs: accuracy (and LongBench breakdowns), ablations, McNemar,
HBM / roofline per method, trajectory statistics, and one roofline trajectory worked by hand.

`build_report` computes everything into a `Report` (tables + notes); `render_report_markdown` /
`render_report_latex` turn it into text; `write_report` writes the files atomically.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from arc_eval.analysis.accuracy import AccuracyRow, accuracy_rows, mechanism_note, method_order
from arc_eval.analysis.bounds import Check, MethodBounds, manifest_limits, method_bounds
from arc_eval.analysis.survival import SURVIVAL_KEY, with_survival
from arc_eval.tasks.longbench import OFFICIAL_COLUMNS, longbench_columns
from arc_eval.analysis.load import Dataset, RunData
from arc_eval.registry import METHODS, TASKS, highlighted_method
from arc_eval.schema import Manifest, TaskRecord
from arc_eval.analysis.mcnemar import PairedComparison, PValue, compare_methods
from arc_eval.analysis.presets import HardwareSpec, ModelSpec
from arc_eval.analysis.roofline import DEFAULT_BASELINE, MethodCost, explain_trajectory, method_costs
from arc_eval.analysis.tables import Cell, Table, cell, render_latex, render_markdown, tex_escape

DASH = cell("—", "--")


def method_label(method: str) -> str:
    """The label a method registers (``MethodEntry.label``); a method not registered here, its name."""
    entry = next((entry for entry in METHODS.entries() if entry.name == method), None)
    return entry.label if entry is not None else method


def kind_label(kind: str) -> str:
    """The label a task registers (``TaskEntry.label``); a task not registered here, its name."""
    entry = next((entry for entry in TASKS.entries() if entry.name == kind), None)
    return entry.label if entry is not None else kind


def highlighted(method: str) -> bool:
    """The paper's method (``MethodEntry.highlighted``): bold in tables."""
    return method == highlighted_method()


def task_table(dataset: Dataset, kind: str) -> Table | None:
    """The task's own table (``TaskEntry.report_table``), if it registers one."""
    entry = next((entry for entry in TASKS.entries() if entry.name == kind), None)
    function = entry.report_table_function() if entry is not None else None
    table: Table | None = function(dataset, kind) if function is not None else None
    return table


def variant_label(variant: str) -> str:
    return variant if variant else "(no variant)"


@dataclass(frozen=True)
class ReportOptions:
    """What the report is computed with."""

    hardware: HardwareSpec
    models: Mapping[str, ModelSpec]  # model name as recorded -> preset
    model_notes: tuple[str, ...] = ()
    baseline: str = DEFAULT_BASELINE
    arc_method: str = field(default_factory=lambda: highlighted_method() or "")
    normalisation: str = "success"


@dataclass
class Report:
    title: str
    header: list[str]
    tables: list[Table]
    notes: list[str]
    worked_example: str | None = None
    figures: list[Path] = field(default_factory=list)
    costs: list[MethodCost] = field(default_factory=list)  # the roofline rows behind the HBM tables
    warnings: list[str] = field(default_factory=list)  # shown first (a partial run, a bound broken): also on stderr


# --------------------------------------------------------------------------------------------
# number formatting


def fmt_pct(x: float | None, digits: int = 2) -> Cell:
    if x is None:
        return DASH
    return cell(f"{100 * x:.{digits}f}%")


def fmt(x: float | None, digits: int = 2) -> Cell:
    if x is None:
        return DASH
    if math.isinf(x):
        return cell("inf")
    return cell(f"{x:.{digits}f}")


def fmt_int(x: int) -> Cell:
    return cell(str(x))


def fmt_p(p: PValue) -> Cell:
    return Cell(p.format(), p.format(tex=True))


def fmt_odds(x: float | None) -> Cell:
    if x is None:
        return cell("undefined")
    if math.isinf(x):
        return cell("inf")
    return cell(f"{x:.2f}")


# --------------------------------------------------------------------------------------------
# helpers over the dataset


def _kinds(tasks: Iterable[TaskRecord]) -> list[str]:
    return sorted({t.task_kind for t in tasks})


def variant_order(dataset: Dataset, kind: str, model: str) -> list[str]:
    """Variant labels in the order the manifests declare them (then any undeclared ones)."""
    order: list[str] = []
    for run in dataset.runs:
        if run.manifest.task_kind == kind and run.manifest.model == model:
            for label in run.manifest.variants:
                if label not in order:
                    order.append(label)
    for t in dataset.tasks:
        if t.task_kind == kind and t.model == model and t.variant not in order:
            order.append(t.variant)
    return order


def variant_params(dataset: Dataset, kind: str, model: str, variant: str) -> Mapping[str, Any]:
    for m in dataset.manifests_for(variant, model, kind):
        if variant in m.variants:
            return m.variants[variant]
    return {}


def _limits(manifests: Sequence[Manifest]) -> tuple[str, str]:
    if not manifests:
        return ("?", "?")
    ctx = sorted({m.context_limit for m in manifests})
    mt = sorted({m.max_tokens for m in manifests})
    return (str(ctx[0]) if len(ctx) == 1 else "mixed", str(mt[0]) if len(mt) == 1 else "mixed")


def _group_key(model: str, variant: str, order: list[str]) -> tuple[str, int, str]:
    return (model, order.index(variant) if variant in order else len(order), variant)


def _section_header(model: str, variant: str, with_variant: bool) -> str:
    return f"{model} · variant {variant_label(variant)}" if with_variant else model


# --------------------------------------------------------------------------------------------
# tables


def accuracy_table(dataset: Dataset, kind: str) -> Table:
    """Paper Tables "LongBench-v2 hard-subset accuracy" / "Needle-in-a-haystack" (one per task kind)."""
    rows = accuracy_rows((t for t in dataset.tasks if t.task_kind == kind), "overall")
    table = Table(
        title=f"{kind_label(kind)}: accuracy across seeds",
        columns=[
            "Method",
            "Ctx.",
            "Max-T.",
            "Pass / Attempts",
            "Mean No-Ans",
            "Mean Pass",
            "Mean Acc",
            "SD Acc",
            "Mean ± SD",
            "Seeds",
        ],
        align="lrrrrrrrrl",
        label=f"tab:accuracy_{kind}",
        notes=[
            "Mean No-Ans / Mean Pass: mean over seeds of per-seed counts; Mean Acc: mean over seeds of per-seed "
            "accuracy; SD Acc: sample SD (n - 1) over seeds, — with one seed."
        ],
    )
    _fill_accuracy(table, dataset, kind, rows, breakdown=False)
    uneven: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for r in rows:  # review h27 F8: runs of different --tasks combined, or a partial run
        if len({s.attempts for s in r.per_seed}) > 1:
            uneven.setdefault((r.model, r.variant), set()).update((s.seed, s.attempts) for s in r.per_seed)
    for (model, variant), sizes in sorted(uneven.items()):
        table.notes.append(
            f"{model} {variant_label(variant)}: the seeds have different numbers of attempts ("
            + ", ".join(f"seed {seed}: {n}" for seed, n in sorted(sizes))
            + "): Mean No-Ans / Mean Pass average counts over different totals and Mean Acc weighs every seed alike;"
            " Pass / Attempts is the pooled figure."
        )
    return table


def _fill_accuracy(table: Table, dataset: Dataset, kind: str, rows: list[AccuracyRow], breakdown: bool) -> None:
    groups: dict[tuple[str, str, str], list[AccuracyRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.variant, row.category), []).append(row)
    models = sorted({r.model for r in rows})
    orders = {m: variant_order(dataset, kind, m) for m in models}
    with_variant = any(r.variant for r in rows)
    category_rank = {c: i for i, c in reversed(list(enumerate(r.category for r in rows)))}  # accuracy_rows' order
    for model, variant, category in sorted(
        groups, key=lambda g: (*_group_key(g[0], g[1], orders[g[0]]), category_rank[g[2]])
    ):
        header = _section_header(model, variant, with_variant)
        if breakdown:
            header += f" · {rows[0].breakdown} = {category}"
        section = table.add_section(header)
        ctx, max_t = _limits(dataset.manifests_for(variant, model, kind))
        for r in groups[(model, variant, category)]:
            mean, sd = r.mean_accuracy, r.sd_accuracy
            both = f"{100 * mean:.2f}% ± {100 * sd:.2f}%" if sd is not None else f"{100 * mean:.2f}% ± —"
            bold = highlighted(r.method)
            if breakdown:
                section.rows.append(
                    [
                        cell(method_label(r.method), bold=bold),
                        cell(f"{r.passes} / {r.attempts}"),
                        fmt(r.mean_no_answer),
                        fmt_pct(mean),
                        fmt_pct(sd),
                        cell(both, tex_escape(both)),
                    ]
                )
            else:
                section.rows.append(
                    [
                        cell(method_label(r.method), bold=bold),
                        cell(ctx),
                        cell(max_t),
                        cell(f"{r.passes} / {r.attempts}"),
                        fmt(r.mean_no_answer),
                        fmt(r.mean_pass),
                        fmt_pct(mean),
                        fmt_pct(sd),
                        cell(both),
                        cell(", ".join(str(s.seed) for s in r.per_seed)),
                    ]
                )


def breakdown_table(dataset: Dataset, kind: str, breakdown: str) -> Table | None:
    """LongBench-v2 accuracy by `meta.length` or `meta.domain`; None when no task has that field."""
    rows = accuracy_rows((t for t in dataset.tasks if t.task_kind == kind), breakdown)
    if not rows:
        return None
    table = Table(
        title=f"{kind_label(kind)}: accuracy by {breakdown}",
        columns=["Method", "Pass / Attempts", "Mean No-Ans", "Mean Acc", "SD Acc", "Mean ± SD"],
        align="lrrrrr",
        label=f"tab:accuracy_{kind}_{breakdown}",
    )
    _fill_accuracy(table, dataset, kind, rows, breakdown=True)
    return table


def survival_table(dataset: Dataset, kind: str) -> Table | None:
    """NIH accuracy by the compactions the needle had to survive (counted from the call records)."""
    tasks = with_survival((t for t in dataset.tasks if t.task_kind == kind), dataset.calls)
    rows = accuracy_rows(tasks, SURVIVAL_KEY)
    if not rows:
        return None
    table = Table(
        title=f"{kind_label(kind)}: accuracy by compactions the needle survived",
        columns=["Method", "Pass / Attempts", "Mean No-Ans", "Mean Acc", "SD Acc", "Mean ± SD"],
        align="lrrrrr",
        label=f"tab:accuracy_{kind}_survival",
        notes=[
            "compactions_survived: compaction events recorded on the task's calls after the call that read the "
            "needle (each method counts its own: ARC folds proactively, the baselines compact when forced or over "
            "budget); 'needle never read': the agent did not read it."
        ],
    )
    _fill_accuracy(table, dataset, kind, rows, breakdown=True)
    return table


def longbench_official_table(dataset: Dataset, kind: str) -> Table | None:
    """LongBench-v2's official columns (`result.py`): Overall, Easy, Hard, Short, Medium, Long, per seed pooled."""
    tasks = [t for t in dataset.tasks if t.task_kind == kind]
    if not tasks:
        return None
    groups: dict[tuple[str, str, str], list[TaskRecord]] = {}
    for task in tasks:
        groups.setdefault((task.model, task.variant, task.method), []).append(task)
    table = Table(
        title=f"{kind_label(kind)}: the official columns (accuracy %, all seeds pooled)",
        columns=["Method", *OFFICIAL_COLUMNS, "Attempts"],
        align="l" + "r" * (len(OFFICIAL_COLUMNS) + 1),
        label=f"tab:longbench_official_{kind}",
        notes=["As LongBench-v2's result.py: not easy counts as hard, neither short nor medium as long; "
               "— where no task falls in a column."],
    )
    sections: dict[tuple[str, str], Any] = {}
    for model, variant, method in sorted(groups, key=lambda g: (g[0], g[1], method_order(g[2]))):
        key = (model, variant)
        if key not in sections:
            sections[key] = table.add_section(_section_header(model, variant, any(v for _, v, _ in groups)))
        columns = longbench_columns(t.to_json() for t in groups[(model, variant, method)])
        sections[key].rows.append(
            [cell(method_label(method), bold=highlighted(method)),
             *(cell("—") if columns[name] is None else cell(f"{columns[name]:.1f}") for name in OFFICIAL_COLUMNS),
             fmt_int(len(groups[(model, variant, method)]))]
        )
    return table


def ablation_table(dataset: Dataset, kind: str) -> Table | None:
    """Accuracy per variant (paper Tables "Recall_budget ..."): Success, Fail, Success / (Success + Fail)."""
    rows = accuracy_rows((t for t in dataset.tasks if t.task_kind == kind), "overall")
    models = sorted({r.model for r in rows})
    if not any(len({r.variant for r in rows if r.model == m}) > 1 for m in models):
        return None
    params: list[str] = []
    for m in models:
        for v in variant_order(dataset, kind, m):
            for key in variant_params(dataset, kind, m, v):
                if key not in params:
                    params.append(key)
    table = Table(
        title=f"{kind_label(kind)}: ablation over variants",
        columns=["Method", "Variant", *params, "Success", "Fail", "Accuracy (%)"],
        align="ll" + "c" * len(params) + "rrr",
        label=f"tab:ablation_{kind}",
        notes=["Accuracy = Success / (Success + Fail), pooled over seeds; Fail includes no-answers."],
    )
    for model in models:
        order = variant_order(dataset, kind, model)
        for variant in order:
            group = [r for r in rows if r.model == model and r.variant == variant]
            if not group:
                continue
            section = table.add_section(f"{model} · {variant_label(variant)}")
            values = variant_params(dataset, kind, model, variant)
            for r in group:
                section.rows.append(
                    [
                        cell(method_label(r.method), bold=highlighted(r.method)),
                        cell(variant_label(variant)),
                        *[cell(_param_text(values.get(p))) for p in params],
                        fmt_int(r.passes),
                        fmt_int(r.fails),
                        cell(f"{100 * r.pooled_accuracy:.2f}"),
                    ]
                )
    return table


def _param_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def mcnemar_table(dataset: Dataset, kind: str, outcome: str, arc_method: str) -> Table | None:
    """Paper Tables "McNemar test on ...": A = ARC vs each baseline B, on one outcome."""
    comparisons = compare_methods((t for t in dataset.tasks if t.task_kind == kind), arc_method, outcome)
    if not comparisons:
        return None
    what = "correctness (correct vs not)" if outcome == "correct" else "completion (accepted submission vs no answer)"
    table = Table(
        title=f"{kind_label(kind)}: McNemar on {what}",
        columns=[
            "A",
            "B",
            "A-Only",
            "B-Only",
            "Both",
            "Neither",
            "χ²",
            "χ² p-val",
            "Exact p-val",
            "Exact p one-sided",
            "Odds Ratio",
            "Per-Seed Odds (± SD)",
            "Dis. Seeds",
            "Seeds w/ disc.",
        ],
        align="llrrrrrrrrrrrr",
        label=f"tab:mcnemar_{kind}_{outcome}",
        notes=[
            "χ² = max(|a - b| - 1, 0)^2 / (a + b) (continuity-corrected, clipped at 0; 0 and p = 1 when a = b or a + b = 0).",
            "Exact p-val: two-sided binomial min(1, 2 P(X <= min(a, b))), X ~ Bin(a + b, 1/2); one-sided: "
            "P(X <= min(a, b)), which is what the paper's 'Exact p-val' column reports.",
            "Odds ratio a/b (inf when b = 0 < a, undefined when a = b = 0); per-seed odds: mean ± sample SD over "
            "the seeds with b_s > 0 ('Dis. Seeds', as in the paper).",
        ],
    )
    models = sorted({c.model for c in comparisons})
    orders = {m: variant_order(dataset, kind, m) for m in models}
    with_variant = any(c.variant for c in comparisons)
    groups: dict[tuple[str, str], list[PairedComparison]] = {}
    for c in comparisons:
        groups.setdefault((c.model, c.variant), []).append(c)
    unpaired_notes = []
    for model, variant in sorted(groups, key=lambda g: _group_key(g[0], g[1], orders[g[0]])):
        section = table.add_section(_section_header(model, variant, with_variant))
        for c in groups[(model, variant)]:
            # seeds that are copies of one another (review h27 F4): the columns count each distinct item once
            r = c.distinct if c.seed_copies and c.distinct is not None else c.total
            so = c.seed_odds
            if c.seed_copies:
                seed_text = "— (seeds are copies)"
            elif so.kind == "finite" and so.mean is not None:
                seed_text = f"{so.mean:.2f} ± {so.sd:.2f}" if so.sd is not None else f"{so.mean:.2f} ± — (1 seed)"
            else:
                seed_text = so.kind
            section.rows.append(
                [
                    cell(method_label(c.method_a), bold=True),
                    cell(method_label(c.method_b)),
                    fmt_int(r.a_only),
                    fmt_int(r.b_only),
                    fmt_int(r.both),
                    fmt_int(r.neither),
                    fmt(r.statistic, 2),
                    fmt_p(r.chi2_p),
                    fmt_p(r.exact_p),
                    fmt_p(r.exact_p_one_sided),
                    fmt_odds(r.odds_ratio),
                    cell(seed_text),
                    fmt_int(so.finite_seeds),
                    fmt_int(so.discordant_seeds),
                ]
            )
            if c.seed_copies and c.distinct is not None:
                t = c.total
                unpaired_notes.append(
                    f"{model} {variant_label(variant)} {method_label(c.method_a)} vs {method_label(c.method_b)}: the"
                    f" {t.a_only + t.b_only + t.both + t.neither} pairs are {c.distinct_items} distinct items, each"
                    f" with the same outcomes under every seed (the seeds re-ran the same items: copies); the row"
                    f" counts each item once, at its lowest seed (over every copy: A-only {t.a_only}, B-only"
                    f" {t.b_only}, exact p {fmt_p(t.exact_p).md}, not independent pairs)."
                )
            elif c.distinct is not None:
                d = c.distinct
                pairs = r.a_only + r.b_only + r.both + r.neither
                unpaired_notes.append(
                    f"{model} {variant_label(variant)} {method_label(c.method_a)} vs {method_label(c.method_b)}: the"
                    f" {pairs} pairs are {c.distinct_items} distinct items run under several seeds (a seed re-runs the"
                    " same items: the pairs are not independent, and the p-values above count each item once per"
                    " seed); over the distinct items, each at the lowest seed both methods finished: A-only"
                    f" {d.a_only}, B-only {d.b_only}, χ² p {fmt_p(d.chi2_p).md}, exact p {fmt_p(d.exact_p).md},"
                    f" one-sided {fmt_p(d.exact_p_one_sided).md}; over every seed, each item weighed once (sign-flip"
                    f" test of its mean discordance, exact): p {fmt_p(c.clustered_p).md if c.clustered_p else '—'}."
                )
            if c.unpaired_a or c.unpaired_b:
                unpaired_notes.append(
                    f"{model} {variant_label(variant)}: {c.unpaired_a} task(s) of {method_label(c.method_a)} and "
                    f"{c.unpaired_b} of {method_label(c.method_b)} have no counterpart and are left out of the pairs."
                )
    table.notes.extend(unpaired_notes)
    return table


def hbm_table(costs: Sequence[MethodCost], dataset: Dataset, kind: str, options: ReportOptions) -> Table | None:
    """Paper Tables "HBM comparison ..." / "HBM evaluation per successful trajectory ..."."""
    rows = [c for c in costs if c.task_kind == kind]
    if not rows:
        return None
    unit = {"success": "per success", "successful": "per successful trajectory", "task": "per task"}[
        options.normalisation
    ]
    with_cache = any(c.cache_recorded_calls for c in rows)  # the server's prefix-cache hits are in the records
    cache_columns = ["t_pre cached (s)", "t_tot cached (s)", "Sav. cached (%)", "Cache rec."] if with_cache else []
    table = Table(
        title=f"{kind_label(kind)}: roofline cost {unit} on {options.hardware.name}",
        columns=[
            "Method",
            "n_succ",
            "n_tasks",
            "t_tot (s)",
            "t_dec (s)",
            "t_pre (s)",
            "BW (TB)",
            "Sav. (%)",
            "Speedup (×)",
            "BW sav. (%)",
            *cache_columns,
        ],
        align="lrrrrrrrrr" + "r" * len(cache_columns),
        label=f"tab:hbm_{kind}",
        notes=[
            f"Savings and speedup against {method_label(options.baseline)} within each block: Sav. = 100 (1 - t_tot / "
            "t_tot(baseline)) (time, as the paper computes it); BW sav. = 100 (1 - BW / BW(baseline)).",
            {
                "success": "Costs of all finished tasks (failed attempts included) divided by the number of correct tasks.",
                "successful": "Costs of the correct tasks only, divided by their number.",
                "task": "Costs of all finished tasks divided by their number.",
            }[options.normalisation],
            "t_pre, t_tot, Sav.: re-prefill, every call prefills its whole prompt (the paper's model, blind to any"
            " prefix cache). "
            + ("t_pre cached, t_tot cached, Sav. cached: the same calls with prefill charged only for the tokens the"
               " server did not serve from its prefix cache (calls.jsonl cached_prompt_tokens, the server's"
               " usage.prompt_tokens_details.cached_tokens), decode unchanged; Cache rec.: the replayed calls whose"
               " record has that count, of all replayed calls (a call without it is charged whole). The cache hits"
               " depend on the server (its block size, its cache's size and load, other requests), not on the"
               " method alone."
               if with_cache else
               "The server's prefix-cache hits are not recorded in these runs (calls.jsonl cached_prompt_tokens: vLLM"
               " with --enable-prompt-tokens-details records them), so no figure with them is given."),
        ],
    )
    models = sorted({c.model for c in rows})
    orders = {m: variant_order(dataset, kind, m) for m in models}
    with_variant = any(c.variant for c in rows)
    groups: dict[tuple[str, str], list[MethodCost]] = {}
    for c in rows:
        groups.setdefault((c.model, c.variant), []).append(c)
    for model, variant in sorted(groups, key=lambda g: _group_key(g[0], g[1], orders[g[0]])):
        spec = options.models.get(model)
        header = _section_header(model, variant, with_variant)
        if spec is not None:
            header += f" (preset {spec.name})"
        section = table.add_section(header)
        for c in groups[(model, variant)]:
            bw = c.bw_bytes
            section.rows.append(
                [
                    cell(method_label(c.method), bold=highlighted(c.method)),
                    fmt_int(c.n_success),
                    fmt_int(c.n_tasks),
                    fmt(c.t_tot, 3),
                    fmt(c.t_dec, 3),
                    fmt(c.t_pre, 3),
                    fmt(None if bw is None else bw / 1e12, 4),
                    fmt(c.savings, 1),
                    fmt(c.speedup, 2),
                    fmt(c.bw_savings, 1),
                    *([fmt(c.t_pre_cached, 3), fmt(c.t_tot_cached, 3), fmt(c.savings_cached, 1),
                       cell(f"{c.cache_recorded_calls:,} / {c.replayed_calls:,}")] if with_cache else []),
                ]
            )
        block = groups[(model, variant)]
        if any(highlighted(c.method) for c in block):
            table.notes.append(arc_trigger_note(dataset, kind, model, variant, spec, options.hardware))
        if all(c.baseline is None for c in block):
            table.notes.append(
                f"{model} {variant_label(variant)}: no {method_label(options.baseline)} run, no savings (--baseline "
                "METHOD measures them against another recorded method)."
            )
        elif all(c.baseline_t_total is None for c in block):
            table.notes.append(
                f"{model} {variant_label(variant)}: {method_label(options.baseline)} has no correct task, so its cost "
                "per success and the savings are undefined (try --normalise task)."
            )
    return table


# ARC's compaction trigger is read from the manifest's config (prefill_cost, expected_completion, low_water: the
# options of eval/methods/arc.py; the paper's method is the registry's highlighted one); its derived constants:
TUNED_PREFILL_COST = {398: ("Qwen3-8B", 1), 857: ("Qwen3-32B", 2)}  # arc_ref/config.py: model, H200s


def arc_trigger_note(
    dataset: Dataset, kind: str, model: str, variant: str, spec: ModelSpec | None, hardware: HardwareSpec
) -> str:
    """Which compaction trigger ARC ran with (review h27 F3): the cost-driven early fold is tuned to a roofline
    like the one that scores it, while the baselines compact only over budget or when forced."""
    settings = sorted({(m.config.get("prefill_cost"), m.config.get("expected_completion"), m.config.get("low_water"))
                       for m in dataset.manifests_for(variant, model, kind) if highlighted_method() in m.methods}, key=repr)
    where = f"{model} {variant_label(variant)}"
    if len(settings) != 1 or settings[0][0] is None:
        return f"{where}: ARC's compaction trigger (prefill_cost) is not recorded in one manifest: {settings}."
    cost, completion, low_water = settings[0]
    if cost == 0:
        return (f"{where}: ARC ran with the reactive trigger (--prefill-cost 0): it folds only when its view would "
                "exceed K, as the baselines compact only over budget or when forced.")
    tuned = TUNED_PREFILL_COST.get(cost) if isinstance(cost, int) else None
    same = (tuned is not None and spec is not None and spec.name == tuned[0] and hardware.n_gpu == tuned[1]
            and hardware.name.startswith("H200"))
    return (
        f"{where}: ARC ran with its default cost-driven early fold (--prefill-cost {cost}, --expected-completion "
        f"{completion}, --low-water {low_water}): it folds before its view reaches K when its cost model says that "
        "is cheaper, while the baselines compact only over budget or when forced. "
        + (f"The constant {cost} is derived from {tuned[0]} on {tuned[1]} H200(s) (arc_ref/config.py)"
           if tuned is not None else f"The constant {cost} is not one of the derived defaults")
        + (", the same roofline that scores this table: part of ARC's saving here is that tuned trigger. "
           if same else ". ")
        + "For ARC with the reactive trigger (the paper's real-LLM setting), rerun with --prefill-cost 0 "
        "(eval/METHODS.md, \"When compaction fires\", gives both figures)."
    )


def trajectory_table(dataset: Dataset, kind: str) -> Table:
    """Per method: calls, prompt and completion tokens, overflows, compactions, recalls (diagnostics). The prompt
    columns are over the calls sent: a prompt refused as over the window is an overflow, never sent (review h60 F3:
    the harness's count of one, 9,020 > L, was shown as the largest prompt)."""
    table = Table(
        title=f"{kind_label(kind)}: trajectory statistics (per finished task)",
        columns=[
            "Method",
            "Tasks",
            "Calls",
            "Aux calls",
            "Prompt tok./call",
            "Max prompt",
            "Completion tok.",
            "Overflows",
            "Compactions",
            "Recalls",
            "Re-exec.",
        ],
        align="lrrrrrrrrrr",
        label=f"tab:trajectories_{kind}",
    )
    groups: dict[tuple[str, str, str], list[TaskRecord]] = {}
    for t in dataset.tasks:
        if t.task_kind == kind:
            groups.setdefault((t.model, t.variant, t.method), []).append(t)
    models = sorted({g[0] for g in groups})
    orders = {m: variant_order(dataset, kind, m) for m in models}
    with_variant = any(g[1] for g in groups)
    sections: dict[tuple[str, str], Any] = {}
    clipped: list[str] = []  # per group whose baseline clipped the agent's text (TranscriptMethod._clip_agent_text)
    for model, variant, method in sorted(
        groups, key=lambda g: (*_group_key(g[0], g[1], orders[g[0]]), method_order(g[2]))
    ):
        if (model, variant) not in sections:
            sections[(model, variant)] = table.add_section(_section_header(model, variant, with_variant))
        tasks = groups[(model, variant, method)]
        calls = [c for t in tasks for c in dataset.calls.get(t.key, ())]
        n = len(tasks)
        prompts = [c.prompt_tokens for c in calls if not c.overflow]  # sent; a refused one is counted under Overflows
        sections[(model, variant)].rows.append(
            [
                cell(method_label(method)),
                fmt_int(n),
                fmt(len(calls) / n, 1),
                fmt(sum(1 for c in calls if c.purpose != "agent") / n, 1),
                fmt(sum(prompts) / len(prompts) if prompts else None, 0),
                fmt_int(max(prompts, default=0)),
                fmt(sum(c.completion_tokens for c in calls) / n, 0),
                fmt(sum(1 for c in calls if c.overflow) / n, 2),
                fmt(sum(len(c.compactions) for c in calls) / n, 2),
                fmt(sum(len(c.recalls) for c in calls) / n, 2),
                fmt(sum(t.reexecutions for t in tasks) / n, 2),
            ]
        )
        clipped_tasks = sum(1 for t in tasks if any(c.clips for c in dataset.calls.get(t.key, ())))
        if clipped_tasks:
            where = f" ({model}{', ' + variant if variant else ''})" if len(models) > 1 or with_variant else ""
            clipped.append(f"{method_label(method)}{where} in {clipped_tasks} of {n} task(s), "
                           f"{sum(1 for c in calls if c.clips)} call(s)")
    if clipped:
        table.notes.append(
            "Agent text clipped: " + "; ".join(clipped) + ". There the method's compaction left the prompt over L"
            " because its kept turns alone were too long (long replies), so the agent's own text in them was"
            " clipped as ARC's view clips it (older turns to 96 / 128 characters of thought / action, the newest to"
            " as much as fits L; observations never), where the run would otherwise have ended by overflow"
            " (calls.jsonl: clips; eval/METHODS.md, \"The six methods\")."
        )
    return table


BREACHES_NAMED = 5  # calls named per broken check and method (then how many more)


def dataset_bounds(dataset: Dataset) -> list[MethodBounds]:
    """``bounds.method_bounds`` over the dataset, L from the manifests for records written before ``prompt_limit``."""
    keys = {(t.task_kind, t.model, t.variant) for t in dataset.tasks}
    limits = manifest_limits({(kind, model, variant): dataset.manifests_for(variant, model, kind)
                              for kind, model, variant in keys})
    return method_bounds(dataset.tasks, dataset.calls, limits)


def _check_cell(check: Check) -> Cell:
    if check.checked == 0:
        return cell("not recorded")
    text = f"{check.held:,} / {check.checked:,}"
    return cell(text + (f" ({check.not_recorded:,} not recorded)" if check.not_recorded else ""))


def _breaches(check: Check, value: str, bound: str) -> str:
    named = "; ".join(b.describe(value, bound) for b in check.breaches[:BREACHES_NAMED])
    more = len(check.breaches) - BREACHES_NAMED
    return named + (f"; and {more} more" if more > 0 else "")


def bound_breaches(rows: Sequence[MethodBounds]) -> list[str]:
    """One line per method whose sent calls broke a bound it had to keep (p_k > L, ARC's estimate > K), naming them."""
    lines = []
    for r in rows:
        where = f"{kind_label(r.task_kind)}, {r.model}{', variant ' + r.variant if r.variant else ''}"
        for check, what, value, bound in ((r.within_limit, "p_k <= L", "p_k", "L"),
                                          (r.within_budget, "estimate <= K", "estimate", "K")):
            if check.breaches:
                lines.append(f"BOUND BROKEN: {method_label(r.method)} ({where}): {what} fails on "
                             f"{len(check.breaches):,} of {check.checked:,} sent call(s): {_breaches(check, value, bound)}")
    return lines


def bounds_table(rows: Sequence[MethodBounds], dataset: Dataset, kind: str, arc_method: str) -> Table | None:
    """Per method, over its sent calls: p_k <= L, its own estimate == the server's p_k, and (ARC) its estimate
    <= K (review h60 F5); each call that breaks one is named in the notes."""
    rows = [r for r in rows if r.task_kind == kind]
    if not rows:
        return None
    table = Table(
        title=f"{kind_label(kind)}: prompt bounds per sent call",
        columns=["Method", "Sent calls", "p_k <= L", "estimate == p_k", "estimate <= K"],
        align="lrrrr",
        label=f"tab:bounds_{kind}",
        notes=[
            "Over the calls sent (not overflows, not errors) of the finished tasks. p_k: the server's prompt tokens"
            " (usage.prompt_tokens); L = L_ctx - G_max (calls.jsonl prompt_limit, else the manifest's);"
            " estimate: the method's own count of the prompt before it was sent (estimated_prompt_tokens: ARC's"
            " core's count of its view, a baseline's counter's count), which it decides on; K: ARC's view budget"
            " (view_budget). A method with no K of its own shows —. \"not recorded\": records written without the"
            " field (an older run), never counted as a pass.",
        ],
    )
    models = sorted({r.model for r in rows})
    orders = {m: variant_order(dataset, kind, m) for m in models}
    with_variant = any(r.variant for r in rows)
    sections: dict[tuple[str, str], Any] = {}
    for r in sorted(rows, key=lambda r: (*_group_key(r.model, r.variant, orders[r.model]), method_order(r.method))):
        if (r.model, r.variant) not in sections:
            sections[(r.model, r.variant)] = table.add_section(_section_header(r.model, r.variant, with_variant))
        if r.has_budget:
            budget = _check_cell(r.within_budget)
        else:
            budget = cell("not recorded") if r.method == arc_method else DASH
        sections[(r.model, r.variant)].rows.append([
            cell(method_label(r.method), bold=highlighted(r.method)),
            fmt_int(r.sent),
            _check_cell(r.within_limit),
            _check_cell(r.estimate_matches),
            budget,
        ])
        where = f"{method_label(r.method)}{f' ({r.model}, {variant_label(r.variant)})' if len(models) > 1 or with_variant else ''}"
        if r.estimate_matches.breaches:
            check = r.estimate_matches
            table.notes.append(
                f"{where}: its own estimate differs from the server's p_k on {len(check.breaches):,} of "
                f"{check.checked:,} sent call(s): {_breaches(check, 'estimate', 'p_k')}. The run's counter"
                " (--tokenizer, chat format) is not the served model's: the method decided when to compact"
                " (and ARC sized its view) on counts the server does not make."
            )
    table.notes.extend(line.removeprefix("BOUND BROKEN: ") for line in bound_breaches(rows))
    return table


def pick_worked_example(dataset: Dataset, arc_method: str) -> TaskRecord | None:
    """The first correct task of ARC (else of any method) that has recorded calls."""
    candidates = [t for t in dataset.tasks if dataset.calls.get(t.key)]
    if not candidates:
        return None

    def key(t: TaskRecord) -> tuple[bool, bool, str, str, str, int, str]:
        return (t.method != arc_method, not t.correct, t.task_kind, t.model, t.variant, t.seed, t.task_id)

    return min(candidates, key=key)


# --------------------------------------------------------------------------------------------
# the report


def run_progress(run: RunData) -> tuple[str, str | None]:
    """How much of its plan a run finished: the header's words, and a warning when it is partial.

    The plan is the manifest's methods x seeds x variants x tasks_per_seed; with tasks_per_seed null (all the
    data set's items) each method's plan is the distinct (variant, seed, task) of any method, a lower bound."""
    m = run.manifest
    per_method = {name: 0 for name in m.methods}
    for t in run.tasks:
        per_method[t.method] = per_method.get(t.method, 0) + 1
    finished = len(run.tasks)
    if m.tasks_per_seed is not None:
        each = len(m.seeds) * len(m.variants) * m.tasks_per_seed
        planned = f"{finished:,} of {each * len(m.methods):,} planned task run(s) finished"
    else:
        each = len({(t.variant, t.seed, t.task_id) for t in run.tasks})
        planned = f"{finished:,} finished task run(s) (plan: every item, at least {each * len(m.methods):,})"
    counts = ", ".join(f"{name} {n:,}" for name, n in per_method.items())
    short = any(n < each for n in per_method.values()) or run.incomplete_tasks > 0
    uneven = len(set(per_method.values())) > 1
    words = f"{planned}{f' ({counts})' if uneven else ''}, {run.incomplete_tasks} incomplete"
    if not short:
        return words, None
    return words, (
        f"PARTIAL RUN `{run.run_dir}`: {planned} ({counts}). The figures are partial and biased: tasks that end "
        "early (by overflow, say) finish first, and methods may have finished different tasks. Finish the run (its "
        "own command continues it) before reading them."
    )


def partial_warnings(dataset: Dataset) -> list[str]:
    """One warning per run that finished only part of its plan (``run_progress``)."""
    return [w for w in (run_progress(run)[1] for run in dataset.runs) if w is not None]



def build_report(dataset: Dataset, options: ReportOptions) -> Report:
    """Every table of the report, computed from the records."""
    header = []
    for run in dataset.runs:
        m = run.manifest
        variants = ", ".join(variant_label(v) for v in m.variants) or "(none)"
        header.append(
            f"`{run.run_dir}`: {kind_label(m.task_kind)}, model `{m.model}` ({m.backend} backend), "
            f"methods {', '.join(m.methods)}, seeds {', '.join(map(str, m.seeds))} x {m.tasks_per_seed if m.tasks_per_seed is not None else 'all'} tasks, "
            f"variants {variants}, context_limit {m.context_limit}, max_tokens {m.max_tokens}; "
            f"{run_progress(run)[0]}; created {m.created}, "
            f"commit {m.git_commit or 'unknown'}"
        )
    hw = options.hardware
    header.append(
        f"Roofline hardware: {hw.name} x{hw.n_gpu} (HBM {hw.total_hbm_bytes / 1e9:.1f} GB, "
        f"{hw.total_bandwidth / 1e12:.2f} TB/s, {hw.total_flops / 1e12:.0f} TFLOP/s, scratch S {hw.scratch / 1e9:.2f} GB); "
        "decimal units (1 GB = 1e9 B, 1 TB = 1e12 B)."
    )
    for model, spec in sorted(options.models.items()):
        header.append(
            f"Model preset for `{model}`: {spec.name} ({spec.total_params / 1e9:.3f}e9 parameters, M_w "
            f"{spec.weight_bytes / 1e9:.2f} GB, kv_b {spec.kv_bytes_per_token:,.0f} B/token)."
        )
    notes = list(options.model_notes) + list(dataset.notes)
    mechanism = mechanism_note(t.model for t in dataset.tasks)
    if mechanism is not None:
        notes.insert(0, mechanism)
    tables: list[Table] = []
    costs = method_costs(
        dataset.tasks, dataset.calls, options.models, options.hardware, options.baseline, options.normalisation
    )
    bounds = dataset_bounds(dataset)
    for kind in _kinds(dataset.tasks):
        tables.append(accuracy_table(dataset, kind))
        for breakdown in ("length", "domain"):
            t = breakdown_table(dataset, kind, breakdown)
            if t is not None:
                tables.append(t)
        extra = task_table(dataset, kind)
        if extra is not None:
            tables.append(extra)
        abl = ablation_table(dataset, kind)
        if abl is not None:
            tables.append(abl)
        for outcome in ("correct", "submitted"):
            mc = mcnemar_table(dataset, kind, outcome, options.arc_method)
            if mc is not None:
                tables.append(mc)
        hbm = hbm_table(costs, dataset, kind, options)
        if hbm is not None:
            tables.append(hbm)
        tables.append(trajectory_table(dataset, kind))
        checked = bounds_table(bounds, dataset, kind, options.arc_method)
        if checked is not None:
            tables.append(checked)
    if mechanism is not None:
        for table in tables:
            table.notes.append(mechanism)
    warnings = partial_warnings(dataset)
    if warnings:
        for table in tables:
            table.notes.append(
                "PARTIAL: " + "; ".join(f"`{run.run_dir}` {run_progress(run)[0]}" for run in dataset.runs
                                        if run_progress(run)[1] is not None)
                + ": partial, biased figures (the warning at the top of the report says why)."
            )
    if not any(t.method == options.arc_method for t in dataset.tasks):
        notes.append(f"no {method_label(options.arc_method)} task in the runs: McNemar tables skipped")
    worked = None
    example = pick_worked_example(dataset, options.arc_method)
    if example is not None:
        spec = options.models[example.model]
        worked = explain_trajectory(
            dataset.calls[example.key],
            spec,
            options.hardware,
            title=(
                f"task {example.task_id} ({method_label(example.method)}, seed {example.seed}, variant "
                f"{variant_label(example.variant)}, model {example.model}, correct={example.correct})"
            ),
        )
    if not dataset.tasks:
        notes.append("the runs hold no finished task: nothing to tabulate")
    return Report(
        title="ARC evaluation report",
        header=header,
        tables=tables,
        notes=notes,
        worked_example=worked,
        costs=costs,
        warnings=warnings + bound_breaches(bounds),
    )


def render_report_markdown(report: Report) -> str:
    parts = [f"# {report.title}", ""]
    parts += [f"> **Warning:** {warning}\n" for warning in report.warnings]
    parts += ["## Runs", ""]
    parts += [f"- {line}" for line in report.header]
    if report.notes:
        parts += ["", "## Notes", ""]
        parts += [f"- {note}" for note in report.notes]
    parts.append("")
    for table in report.tables:
        parts.append(render_markdown(table))
    if report.worked_example:
        parts += ["### Roofline worked by hand for one trajectory", "", "```text", report.worked_example, "```", ""]
    if report.figures:
        parts += ["## Figures", ""]
        parts += [f"![{f.stem}]({f.name})" for f in report.figures]
        parts.append("")
    return "\n".join(parts)


def render_report_latex(report: Report) -> str:
    """A LaTeX fragment of booktabs tables (\\usepackage{booktabs} in the including document)."""
    parts = [f"% {report.title}: generated by arc-eval report; needs \\usepackage{{booktabs}}", ""]
    parts += [f"% WARNING: {warning}" for warning in report.warnings]
    for line in report.header:
        parts.append("% " + line.replace("\n", " "))
    parts.append("")
    for table in report.tables:
        parts.append(render_latex(table))
    if report.worked_example:
        parts += ["\\begin{verbatim}", report.worked_example, "\\end{verbatim}", ""]
    return "\n".join(parts)


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
