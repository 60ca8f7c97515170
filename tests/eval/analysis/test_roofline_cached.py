"""The roofline with the server's recorded prefix-cache hits (calls.jsonl cached_prompt_tokens, review h60 F2):
beside the paper's re-prefill figure (every call prefills its whole prompt), never replacing it, a figure that
charges each call's prefill only for the tokens the server did not serve from its cache; decode unchanged. A record
without the field is charged whole and counted as such; a run with none reports the re-prefill figure alone and
says so."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from arc_eval.analysis.cli import report_main
from arc_eval.analysis.presets import hardware_preset, model_preset
from arc_eval.analysis.roofline import method_costs, trajectory_cost
from arc_eval.schema import CallRecord, TaskRecord

from .synthetic_runs import RunSpec, write_run

MODEL, HARDWARE = model_preset("qwen3-8b"), hardware_preset("h200")


def record(index: int, p: int, m: int, cached: int | None, method: str = "arc", **changes: Any) -> CallRecord:
    call = CallRecord(variant="", method=method, model="m", task_kind="nih", task_id="t", seed=1, call_index=index,
                      purpose="agent", prompt_tokens=p, completion_tokens=m, latency_s=0.1, finish_reason="stop",
                      overflow=False, compactions=(), recalls=(), action=None, submission=None, reexecution=False,
                      cached_prompt_tokens=cached)
    return attrs.evolve(call, **changes)


def test_recorded_hits_give_the_uncached_prefill_beside_the_re_prefill() -> None:
    calls = [record(1, 3000, 50, 0), record(2, 5000, 50, 2944), record(3, 7000, 50, 4992)]
    cost = trajectory_cost(calls, MODEL, HARDWARE)
    blind = trajectory_cost([attrs.evolve(c, cached_prompt_tokens=None) for c in calls], MODEL, HARDWARE)
    triples = trajectory_cost([(3000, 50, 0), (5000, 50, 2944), (7000, 50, 4992)], MODEL, HARDWARE)
    pairs = trajectory_cost([(3000, 50), (5000, 50), (7000, 50)], MODEL, HARDWARE)
    # the re-prefill figure is the paper's, whatever the records say
    assert cost.t_prefill == blind.t_prefill == pairs.t_prefill and cost.prefill_flops == pairs.prefill_flops
    # beside it: prefill of the uncached tokens only, as the (p, m, c) triples cost it; decode the same
    assert cost.prefill_flops_cached == pytest.approx(triples.prefill_flops, rel=1e-12)
    assert cost.t_prefill_cached == pytest.approx(triples.t_prefill, rel=1e-12)
    assert cost.t_prefill_cached < cost.t_prefill
    assert cost.decode_bytes == blind.decode_bytes and cost.t_total_cached == cost.t_prefill_cached + cost.t_decode
    assert cost.cache_recorded == 3 and [c.cached_tokens for c in cost.calls] == [0, 2944, 4992]
    # records without the field: charged whole, none counted as recorded
    assert blind.t_prefill_cached == blind.t_prefill and blind.cache_recorded == 0
    # some with, some without: those without charged whole
    mixed = trajectory_cost([calls[0], attrs.evolve(calls[1], cached_prompt_tokens=None), calls[2]], MODEL, HARDWARE)
    assert mixed.cache_recorded == 2
    expected = trajectory_cost([(3000, 50, 0), (5000, 50, 0), (7000, 50, 4992)], MODEL, HARDWARE).prefill_flops
    assert mixed.prefill_flops_cached == pytest.approx(expected, rel=1e-12)


def test_a_call_not_replayed_costs_nothing_in_either_figure() -> None:
    over = record(2, 9000, 0, None, overflow=True, finish_reason="overflow")
    cost = trajectory_cost([record(1, 3000, 50, 2048), over], MODEL, HARDWARE)
    assert cost.calls[1].prefill_flops == cost.calls[1].prefill_flops_cached == 0.0 and cost.cache_recorded == 1


def _task(method: str, task_id: str) -> TaskRecord:
    return TaskRecord(variant="", method=method, model="m", task_kind="nih", task_id=task_id, seed=1, submitted=True,
                      no_answer=False, correct=True, submission="x", end="submitted", error=None, calls=2, steps=2,
                      reexecutions=0, meta={})


def test_method_costs_give_both_figures_and_the_cached_savings() -> None:
    tasks = [_task("sliding_window", "a"), _task("arc", "a")]
    calls = {
        tasks[0].key: (record(1, 4000, 40, 0, "sliding_window", task_id="a"),
                       record(2, 6000, 40, 3968, "sliding_window", task_id="a")),
        tasks[1].key: (record(1, 4000, 40, 0, task_id="a"), record(2, 5000, 40, None, task_id="a")),
    }
    rows = {r.method: r for r in method_costs(tasks, calls, MODEL, HARDWARE)}
    sw, arc = rows["sliding_window"], rows["arc"]
    assert (sw.cache_recorded_calls, sw.replayed_calls, arc.cache_recorded_calls, arc.replayed_calls) == (2, 2, 1, 2)
    assert sw.t_pre_cached is not None and sw.t_pre is not None and sw.t_pre_cached < sw.t_pre
    assert arc.t_pre_cached == arc.t_pre  # its one recorded hit was 0, the other call is charged whole
    assert sw.t_tot_cached == pytest.approx(sw.t_dec + sw.t_pre_cached)  # type: ignore[operator]
    assert arc.savings_cached == pytest.approx(100 * (1 - arc.t_tot_cached / sw.t_tot_cached))  # type: ignore[operator]
    assert arc.savings != arc.savings_cached
    none = {k: tuple(attrs.evolve(c, cached_prompt_tokens=None) for c in v) for k, v in calls.items()}
    for row in method_costs(tasks, none, MODEL, HARDWARE):
        assert row.cache_recorded_calls == 0 and row.t_pre_cached is None and row.t_tot_cached is None
        assert row.savings_cached is None and row.t_pre is not None


def _hbm(run: Path) -> tuple[list[str], list[str], dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    assert report_main([str(run), "--format", "md,json", "--out", str(run / "rep")], stdout=out, stderr=err) == 0
    md = (run / "rep" / "report.md").read_text(encoding="utf-8")
    table = md[md.index("roofline cost per success"):]
    table = table[:table.index("\n###")]
    header = [c.strip() for c in next(l for l in table.splitlines() if l.startswith("| Method")).strip("|").split("|")]
    arc = [c.strip() for c in next(l for l in table.splitlines() if l.startswith("| **ARC")).strip("|").split("|")]
    notes = [l for l in table.splitlines() if l.startswith("- ")]
    row = dict(zip(header, arc))
    return notes, header, {"row": row, "json": json.loads((run / "rep" / "report.json").read_text())}


def test_the_report_prints_the_cached_figure_beside_the_re_prefill_and_says_which_is_which(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("sliding_window", "arc"), seeds=(1,), tasks_per_seed=3,
                           behaviour={"sliding_window": (0.0, 1.0, 900), "arc": (0.0, 1.0, 300)}))
    notes, header, got = _hbm(run)
    before = got["row"]
    assert "t_pre cached (s)" not in header and "Cache rec." not in header  # none recorded: the re-prefill alone
    assert any("prefix-cache hits are not recorded in these runs" in n and "t_pre, t_tot, Sav.: re-prefill" in n
               for n in notes)
    assert all(r["t_pre_cached"] is None and r["cache_recorded_calls"] == 0 for r in got["json"]["roofline"])
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    for call in calls:
        if not call["overflow"]:
            call["cached_prompt_tokens"] = call["prompt_tokens"] // 2
    (run / "calls.jsonl").write_text("".join(json.dumps(call) + "\n" for call in calls))
    notes, header, got = _hbm(run)
    row = got["row"]
    assert header[:10] == ["Method", "n_succ", "n_tasks", "t_tot (s)", "t_dec (s)", "t_pre (s)", "BW (TB)", "Sav. (%)",
                           "Speedup (×)", "BW sav. (%)"]
    assert header[10:] == ["t_pre cached (s)", "t_tot cached (s)", "Sav. cached (%)", "Cache rec."]
    # the re-prefill columns are unchanged; the cached ones beside them, smaller
    assert all(row[k] == before[k] for k in header[:10])
    assert float(row["t_pre cached (s)"]) < float(row["t_pre (s)"])
    sent = sum(1 for c in calls if c["method"] == "arc" and not c["overflow"])
    assert row["Cache rec."] == f"{sent} / {sent}"
    assert any("t_pre, t_tot, Sav.: re-prefill" in n and "t_pre cached, t_tot cached, Sav. cached" in n for n in notes)
    arc = next(r for r in got["json"]["roofline"] if r["method"] == "arc")
    assert arc["t_pre_cached"] < arc["t_pre"] and arc["cache_recorded_calls"] == arc["replayed_calls"] == sent
