"""Roofline model (paper eqs. 1-2, ablation "HBM Bandwidth Analysis") on a trajectory worked by hand."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import pytest

import arc_eval.analysis.roofline as rl
from arc_eval.analysis.errors import AnalysisError
from arc_eval.analysis.load import load_run
from arc_eval.schema import CallRecord, TaskRecord
from arc_eval.analysis.presets import HardwareSpec, ModelSpec, model_preset
from arc_eval.analysis.roofline import explain_trajectory, method_costs, trajectory_cost

from .synthetic_runs import RunSpec, write_run

# A toy model small enough to count by hand:
#   attention/layer = 8*8 (q) + 2*8*4 (k, v) + 8*8 (o) = 192; MLP/layer = 3*8*16 = 384; norms/layer = 2*8 = 16
#   total = 2*(192+384+16) + 10*8 (embedding) + 10*8 (untied lm_head) + 8 (final norm) = 1352 -> M_w = 2704 B
#   kv_b = 2 * 2 layers * 1 kv head * 4 head dim * 2 B = 32 B/token; matmul params = 2*(192+384) = 1152
TOY = ModelSpec(
    name="toy",
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    hidden_size=8,
    intermediate_size=16,
    vocab_size=10,
    tie_word_embeddings=False,
    bytes_per_param=2,
    kv_bytes_per_element=2,
    qk_norm=False,
)
TOY_HW = HardwareSpec(
    "toy-gpu", hbm_bytes=100_000, bandwidth_bytes_per_s=1_000, peak_flops=1_000_000, scratch_bytes=10_000
)


def _call(
    index: int, p: int, m: int, overflow: bool = False, finish: str = "stop", purpose: str = "agent"
) -> CallRecord:
    return CallRecord(
        variant="",
        method="arc",
        model="toy",
        task_kind="nih",
        task_id="t",
        seed=1,
        call_index=index,
        purpose=purpose,
        prompt_tokens=p,
        completion_tokens=m,
        latency_s=0.1,
        finish_reason="overflow" if overflow else finish,
        overflow=overflow,
        compactions=(),
        recalls=(),
        action=None,
        submission=None,
        reexecution=False,
    )


# Calls: (p=100, m=11), (p=300, m=1, a summary call), (p=50, m=0), (p=500, overflow: not replayed), (p=70, error)
TRAJECTORY = [
    _call(1, 100, 11),
    _call(2, 300, 1, purpose="summary"),
    _call(3, 50, 0),
    _call(4, 500, 0, overflow=True),
    _call(5, 70, 0, finish="error"),
]

# By hand:
#   L_1 = 100 + 10/2 = 105, L_2 = 300 + 0 = 300, L_3 = 50 - 1/2 = 49.5 (weight m_3 = 0)
#   sum m = 12; sum m L = 11*105 + 1*300 = 1455; Lbar = 1455/12 = 121.25
#   free = 100000 - 2704 - 10000 = 87296; Lbar kv_b = 3880; 87296/3880 = 22.499 -> B = 22
#   weight bytes = 12 * 2704 / 22 = 1474.909..., KV bytes = 1455 * 32 = 46560
#   T_decode = (1474.909... + 46560) / 1000 = 48.0349... s
#   prefill FLOPs(p) = 2*1152 p + 2*(2 layers)*(2 heads)*(4 head dim) p (p+1) + 2*8*10 = 2304 p + 32 p (p+1) + 160:
#     p=100: 230400 + 323200 + 160 = 553760; p=300: 691200 + 2889600 + 160 = 3580960; p=50: 115200 + 81600 + 160 = 196960
#   total 4331680 -> T_prefill = 4.33168 s
HAND = {
    "lbar": 121.25,
    "batch": 22,
    "weight_bytes": 12 * 2704 / 22,
    "kv_bytes": 46560.0,
    "prefill_flops": 4331680.0,
    "t_decode": (12 * 2704 / 22 + 46560) / 1000,
    "t_prefill": 4.33168,
}


def _matches_hand(cost_fn: Callable[..., Any]) -> bool:
    cost = cost_fn(TRAJECTORY, TOY, TOY_HW)
    got = {
        "lbar": cost.mean_context,
        "batch": cost.batch_size,
        "weight_bytes": cost.weight_bytes,
        "kv_bytes": cost.kv_bytes,
        "prefill_flops": cost.prefill_flops,
        "t_decode": cost.t_decode,
        "t_prefill": cost.t_prefill,
    }
    return all(math.isclose(got[k], v, rel_tol=1e-12) for k, v in HAND.items())


def test_toy_model_counts() -> None:
    assert TOY.total_params == 1352 and TOY.weight_bytes == 2704
    assert TOY.kv_bytes_per_token == 32 and TOY.matmul_params == 1152
    assert TOY.prefill_flops(100) == 553760


def test_trajectory_worked_by_hand() -> None:
    assert _matches_hand(trajectory_cost)
    cost = trajectory_cost(TRAJECTORY, TOY, TOY_HW)
    assert cost.skipped_calls == 2 and cost.decode_tokens == 12
    assert cost.t_total == pytest.approx(HAND["t_decode"] + HAND["t_prefill"])
    assert [c.replayed for c in cost.calls] == [True, True, True, False, False]
    assert cost.calls[0].mean_context == 105 and cost.calls[2].mean_context == 49.5


def test_plain_token_pairs_give_the_same_cost() -> None:
    pairs = trajectory_cost([(100, 11), (300, 1), (50, 0)], TOY, TOY_HW)
    assert pairs.t_total == pytest.approx(trajectory_cost(TRAJECTORY, TOY, TOY_HW).t_total, rel=1e-12)


def test_a_broken_formula_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutants of each formula must fail the hand check (so the check is not vacuous)."""
    monkeypatch.setattr(rl, "mean_context", lambda p, m: p + m / 2)  # L_k without the -1
    assert not _matches_hand(rl.trajectory_cost)
    monkeypatch.undo()
    monkeypatch.setattr(
        rl, "batch_size", lambda lbar, model, hw: max(1, rl.free_hbm(model, hw) / (lbar * model.kv_bytes_per_token))
    )
    assert not _matches_hand(rl.trajectory_cost)  # B without the floor
    monkeypatch.undo()
    monkeypatch.setattr(ModelSpec, "prefill_flops_parts", lambda self, p: (2.0 * self.matmul_params * p, 0.0, 0.0))
    assert not _matches_hand(rl.trajectory_cost)  # prefill without the attention term
    monkeypatch.undo()
    assert _matches_hand(rl.trajectory_cost)


def test_batch_size_is_at_least_one() -> None:
    # Lbar kv_b = 1e6 * 32 bytes >> free HBM: floor gives 0, clamped to 1
    cost = trajectory_cost([(1_000_000, 2)], TOY, TOY_HW)
    assert cost.batch_size == 1
    assert cost.weight_bytes == pytest.approx(2 * TOY.weight_bytes)


def test_nothing_decoded_means_no_decode_cost() -> None:
    cost = trajectory_cost([(100, 0)], TOY, TOY_HW)
    assert cost.mean_context is None and cost.batch_size is None
    assert cost.decode_bytes == 0 and cost.t_decode == 0 and cost.t_prefill > 0


def test_model_that_does_not_fit_is_a_clear_error() -> None:
    tiny = HardwareSpec("tiny", hbm_bytes=3000, bandwidth_bytes_per_s=1, peak_flops=1, scratch_bytes=500)
    with pytest.raises(AnalysisError, match="does not fit on tiny"):
        trajectory_cost([(10, 1)], TOY, tiny)


def test_qwen3_presets_derive_the_model_cards_counts() -> None:
    q8, q32 = model_preset("qwen3-8b"), model_preset("qwen3-32b")
    assert round(q8.total_params / 1e9, 1) == 8.2 and round(q8.non_embedding_params / 1e9, 2) == 6.95
    assert round(q32.total_params / 1e9, 1) == 32.8 and round(q32.non_embedding_params / 1e9, 1) == 31.2
    assert q8.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2 == 147_456
    assert q32.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144
    assert q8.weight_bytes == 2 * q8.total_params


def _tasks_for(method: str, correct: list[bool]) -> list[TaskRecord]:
    return [
        TaskRecord(
            variant="",
            method=method,
            model="toy",
            task_kind="nih",
            task_id=f"t{i}",
            seed=1,
            submitted=True,
            no_answer=False,
            correct=c,
            submission="x",
            end="submitted",
            error=None,
            calls=1,
            steps=1,
            reexecutions=0,
            meta={},
        )
        for i, c in enumerate(correct)
    ]


def test_normalisations_and_savings() -> None:
    base = _tasks_for("sliding_window", [True, False])
    arc = _tasks_for("arc", [True, True])
    calls = {}
    for t in base:
        calls[t.key] = (_call(1, 1000, 100),)
    for t in arc:
        calls[t.key] = (_call(1, 200, 100),)
    one_base = trajectory_cost(calls[base[0].key], TOY, TOY_HW)
    one_arc = trajectory_cost(calls[arc[0].key], TOY, TOY_HW)
    by = {c.method: c for c in method_costs(base + arc, calls, TOY, TOY_HW, "sliding_window", "success")}
    assert by["sliding_window"].t_tot == pytest.approx(2 * one_base.t_total / 1)  # both attempts charged to 1 success
    assert by["arc"].t_tot == pytest.approx(one_arc.t_total)
    assert by["arc"].savings == pytest.approx(100 * (1 - one_arc.t_total / (2 * one_base.t_total)))
    assert by["arc"].speedup == pytest.approx(2 * one_base.t_total / one_arc.t_total)
    assert by["sliding_window"].savings == 0 and by["sliding_window"].speedup == 1
    assert by["arc"].bw_bytes == pytest.approx(one_arc.decode_bytes)
    per_task = {c.method: c for c in method_costs(base + arc, calls, TOY, TOY_HW, "sliding_window", "task")}
    assert per_task["sliding_window"].t_tot == pytest.approx(one_base.t_total)
    only_ok = {c.method: c for c in method_costs(base + arc, calls, TOY, TOY_HW, "sliding_window", "successful")}
    assert only_ok["sliding_window"].t_tot == pytest.approx(one_base.t_total)
    no_base = {c.method: c for c in method_costs(arc, calls, TOY, TOY_HW, "sliding_window")}
    assert no_base["arc"].savings is None and no_base["arc"].baseline is None
    nobody = method_costs(_tasks_for("arc", [False]), {}, TOY, TOY_HW)
    assert nobody[0].t_tot is None and nobody[0].n_without_calls == 1


def test_bad_normalisation_is_refused() -> None:
    with pytest.raises(AnalysisError, match="normalisation"):
        method_costs([], {}, TOY, TOY_HW, normalisation="per-moon")


def test_explain_prints_every_intermediate() -> None:
    text = explain_trajectory(TRAJECTORY, TOY, TOY_HW, title="toy")
    assert "Lbar = 121.250" in text
    assert "= max(1, floor(87,296 / 3,880.0)) = 22" in text
    assert "KV bytes = sum m_k L_k kv_b = 1,455.0 x 32 = 46,560" in text
    assert "(overflow/error: not replayed)" in text
    assert f"T_total = {HAND['t_prefill']:.6f} + {HAND['t_decode']:.6f}" in text


def test_costs_of_a_recorded_run(tmp_path: Path) -> None:
    write_run(tmp_path / "r", RunSpec(tasks_per_seed=3))
    run = load_run(tmp_path / "r")
    q8 = model_preset("qwen3-8b")
    from arc_eval.analysis.presets import HARDWARE_PRESETS

    rows = method_costs(run.tasks, run.calls, {"Qwen/Qwen3-8B": q8}, HARDWARE_PRESETS["h200"])
    assert {r.method for r in rows} == set(RunSpec().methods)
    for r in rows:
        tasks = [t for t in run.tasks if t.method == r.method]
        total = sum(trajectory_cost(run.calls[t.key], q8, HARDWARE_PRESETS["h200"]).t_total for t in tasks)
        n_ok = sum(t.correct for t in tasks)
        assert r.n_tasks == len(tasks) and r.n_success == n_ok
        assert r.t_tot == (pytest.approx(total / n_ok) if n_ok else None)
    with pytest.raises(AnalysisError, match="no model preset"):
        method_costs(run.tasks, run.calls, {}, HARDWARE_PRESETS["h200"])


def test_prefix_caching_prefills_only_the_uncached_queries() -> None:
    """Prefix caching: the c cached tokens cost no matmul, and attention only for the p - c new queries;
    decode (HBM) is unchanged, since every generated token still reads the whole KV."""
    from arc_eval.analysis.presets import hardware_preset, model_preset

    model, hardware = model_preset("qwen3-8b"), hardware_preset("h200")
    p, c = 9000, 8000
    matmul, attention, lm_head = model.prefill_flops_parts(p, c)
    per_pair = 2.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim
    assert matmul == 2.0 * model.matmul_params * (p - c)
    assert attention == per_pair * (p * (p + 1) - c * (c + 1))
    assert model.prefill_flops_parts(p, 0) == model.prefill_flops_parts(p)
    plain = rl.trajectory_cost([(p, 100), (p + 500, 100)], model, hardware)
    cached = rl.trajectory_cost([(p, 100, 0), (p + 500, 100, p)], model, hardware)
    assert cached.decode_bytes == plain.decode_bytes
    assert cached.prefill_flops < plain.prefill_flops
    assert cached.calls[0].prefill_flops == plain.calls[0].prefill_flops
    with pytest.raises(ValueError):
        rl.trajectory_cost([(10, 1, 11)], model, hardware)
