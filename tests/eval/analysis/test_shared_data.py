"""Checks on the real material in ../shared/data (skipped when it is absent; never copied in).

- LongBench-v2 hard sample (12 questions, official data.json format): the breakdowns by domain
  and length of a run over its real ids and metadata.
- A real OpenHands trajectory (per-call prompt/completion token usage as recorded by the agent):
  the roofline worked on it, against an independent plain re-computation of the paper's formulas.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from arc_eval.analysis.accuracy import accuracy_rows
from arc_eval.analysis.cli import report_main
from arc_eval.analysis.load import load_run
from arc_eval.analysis.presets import HARDWARE_PRESETS, model_preset
from arc_eval.analysis.roofline import explain_trajectory, trajectory_cost

from .synthetic_runs import RunSpec, write_run


def _need(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"shared data not available: {path} (real material lives in ../shared/data beside the repository)")
    return path


@pytest.fixture
def longbench_sample(shared_data: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(
        _need(shared_data / "longbench_v2_hard_sample" / "data.json").read_text("utf-8")
    )
    return data


@pytest.fixture
def openhands_calls(shared_data: Path) -> list[tuple[str, list[tuple[int, int]], dict[str, int]]]:
    path = _need(shared_data / "trajectories" / "openhands_multi_swe_bench_output.jsonl")
    out = []
    for line in path.read_text("utf-8").splitlines():
        record = json.loads(line)
        usages = record["metrics"]["token_usages"]
        out.append(
            (
                record["instance_id"],
                [(u["prompt_tokens"], u["completion_tokens"]) for u in usages],
                record["metrics"]["accumulated_token_usage"],
            )
        )
    return out


def test_longbench_sample_breakdowns(tmp_path: Path, longbench_sample: list[dict[str, Any]]) -> None:
    meta = [{k: item[k] for k in ("domain", "sub_domain", "length", "difficulty")} for item in longbench_sample]
    ids = [item["_id"] for item in longbench_sample]
    run = tmp_path / "lb"
    write_run(run, RunSpec(task_kind="longbench", seeds=(42, 82), tasks_per_seed=len(ids), meta=meta, task_ids=ids))
    tasks = load_run(run).tasks
    assert {t.task_id for t in tasks} == set(ids)
    by_domain = accuracy_rows(tasks, "domain")
    domains = {item["domain"] for item in longbench_sample}
    assert {r.category for r in by_domain} == domains and len(domains) == 6
    for r in by_domain:  # 2 questions per domain in the sample, 2 seeds
        assert [s.attempts for s in r.per_seed] == [2, 2]
    by_length = accuracy_rows(tasks, "length")
    assert {r.category for r in by_length} == {"short"} and all(r.attempts == 24 for r in by_length)
    out, err = io.StringIO(), io.StringIO()
    assert report_main([str(run), "--format", "md"], stdout=out, stderr=err) == 0, err.getvalue()
    for domain in domains:
        assert f"domain = {domain}" in out.getvalue()


def _plain_roofline(
    pairs: list[tuple[int, int]], hbm: float, bandwidth: float, peak: float, scratch: float
) -> dict[str, float]:
    """The paper's eqs. written out again, independently of arc_eval.analysis.roofline (Qwen3-8B, bf16)."""
    layers, heads, kv_heads, head_dim, hidden, inter, vocab = 36, 32, 8, 128, 4096, 12288, 151936
    per_layer = hidden * heads * head_dim * 2 + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
    params = layers * (per_layer + 2 * hidden + 2 * head_dim) + 2 * vocab * hidden + hidden
    weights, kv = 2.0 * params, 2.0 * layers * kv_heads * head_dim * 2
    ls = [p + (m - 1) / 2 for p, m in pairs]
    lbar = sum(m * l for (_, m), l in zip(pairs, ls)) / sum(m for _, m in pairs)
    batch = max(1, math.floor((hbm - weights - scratch) / (lbar * kv)))
    decode_bytes = sum(m * (weights / batch + l * kv) for (_, m), l in zip(pairs, ls))
    flops = sum(
        2.0 * layers * per_layer * p + 2.0 * layers * heads * head_dim * p * (p + 1) + 2.0 * hidden * vocab
        for p, _ in pairs
    )
    return {
        "lbar": lbar,
        "batch": batch,
        "bytes": decode_bytes,
        "t_dec": decode_bytes / bandwidth,
        "t_pre": flops / peak,
    }


def test_roofline_on_a_real_recorded_trajectory(
    openhands_calls: list[tuple[str, list[tuple[int, int]], dict[str, int]]],
) -> None:
    q8, h200 = model_preset("qwen3-8b"), HARDWARE_PRESETS["h200"]
    for instance, pairs, total in openhands_calls:
        assert sum(p for p, _ in pairs) == total["prompt_tokens"], instance  # per-call usage read right
        assert sum(m for _, m in pairs) == total["completion_tokens"], instance
        cost = trajectory_cost(pairs, q8, h200)
        plain = _plain_roofline(pairs, 141e9, 4.8e12, 989e12, 0.1 * 141e9)
        assert cost.mean_context == pytest.approx(plain["lbar"], rel=1e-12)
        assert cost.batch_size == plain["batch"]
        assert cost.decode_bytes == pytest.approx(plain["bytes"], rel=1e-12)
        assert cost.t_decode == pytest.approx(plain["t_dec"], rel=1e-12)
        assert cost.t_prefill == pytest.approx(plain["t_pre"], rel=1e-12)
    text = explain_trajectory(openhands_calls[0][1], q8, h200)
    assert f"= {trajectory_cost(openhands_calls[0][1], q8, h200).batch_size}\n" in text
