"""Roofline model of serving cost: HBM traffic, decode and prefill time (paper eqs. 1-2 and the
ablation "HBM Bandwidth Analysis").

For one recorded trajectory (the calls of one task, auxiliary calls included) with prompt p_k and
completion m_k per call k:

    L_k       = p_k + (m_k - 1) / 2                      mean context while decoding call k
    Lbar      = sum_k m_k L_k / sum_k m_k                 decode-token-weighted mean context
    B         = max(1, floor((n_gpu HBM - M_w - S) / (Lbar kv_b)))   attainable decode batch
    BW_decode = sum_k m_k (M_w / B + L_k kv_b)           bytes streamed from HBM while decoding
    T_decode  = BW_decode / bandwidth
    T_prefill = sum_k FLOPs_prefill(p_k) / peak FLOP/s   (every call re-prefills its whole prompt)

With prefix caching (``trajectory_cost`` given (p_k, m_k, c_k) triples, c_k the tokens of call k's
prompt shared with the previous prompt of its task): T_prefill = sum_k FLOPs_prefill(p_k | c_k) / peak,
the uncached part only; decode still reads the whole KV of p_k (BW_decode unchanged).
    T_total   = T_prefill + T_decode

Recorded calls are always costed the paper's way (T_prefill: every call re-prefills its whole prompt, blind to
any prefix cache). Beside it, T_prefill_cached charges each call only the tokens its server did not serve from
its prefix cache, c_k = ``cached_prompt_tokens`` as the server reported it (vLLM's
usage.prompt_tokens_details.cached_tokens); a call whose record lacks the field is charged whole, and
``cache_recorded`` counts the replayed calls that had it. Decode is the same in both.

A call that overflowed (rejected before any prefill) or ended in an error is not replayed.
Per method the costs are summed over its finished tasks and divided by the number of successes
(correct tasks): the paper's "per successful trajectory" cost, which charges failed attempts to
the successes (see ANALYSIS.md for the alternatives `successful` and `task`).
Savings (%) = 100 (1 - T_total / T_total(baseline)) and speedup = T_total(baseline) / T_total:
both are time ratios, as the paper's tables compute them (its "Sav." column follows t_tot, not bw).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from arc_eval.errors import InvalidInput
from arc_eval.analysis.accuracy import method_order
from arc_eval.analysis.errors import AnalysisError
from arc_eval.schema import CallRecord, TaskKey, TaskRecord
from arc_eval.analysis.presets import HardwareSpec, ModelSpec

NORMALISATIONS = ("success", "successful", "task")
DEFAULT_BASELINE = "sliding_window"


@dataclass(frozen=True, slots=True)
class CallCost:
    """Roofline terms of one call."""

    call_index: int
    purpose: str
    prompt_tokens: int
    completion_tokens: int
    replayed: bool  # False: overflow or error, no prefill and no decode
    mean_context: float  # L_k
    weight_bytes: float  # m_k M_w / B
    kv_bytes: float  # m_k L_k kv_b
    prefill_matmul_flops: float
    prefill_attention_flops: float
    prefill_lm_head_flops: float
    cached_tokens: int | None = None  # c_k as the record gives it (None: not recorded)
    prefill_flops_cached: float = 0.0  # prefill of the tokens not served from the prefix cache (all when unknown)

    @property
    def decode_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def prefill_flops(self) -> float:
        return self.prefill_matmul_flops + self.prefill_attention_flops + self.prefill_lm_head_flops


@dataclass(frozen=True, slots=True)
class TrajectoryCost:
    """Roofline cost of one trajectory."""

    calls: tuple[CallCost, ...]
    decode_tokens: int
    mean_context: float | None  # Lbar; None when nothing was decoded
    batch_size: int | None  # B; None when nothing was decoded
    free_hbm_bytes: float  # n_gpu HBM - M_w - S
    weight_bytes: float
    kv_bytes: float
    prefill_flops: float
    t_decode: float
    t_prefill: float
    prefill_flops_cached: float = 0.0  # with the recorded prefix-cache hits (module docstring)
    t_prefill_cached: float = 0.0
    cache_recorded: int = 0  # replayed calls whose record gives the server's cached tokens

    @property
    def decode_bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def t_total(self) -> float:
        return self.t_prefill + self.t_decode

    @property
    def t_total_cached(self) -> float:
        return self.t_prefill_cached + self.t_decode

    @property
    def skipped_calls(self) -> int:
        return sum(1 for c in self.calls if not c.replayed)


def free_hbm(model: ModelSpec, hardware: HardwareSpec) -> float:
    """n_gpu HBM - M_w - S, the bytes left for KV caches; an error when the model does not fit."""
    free = hardware.total_hbm_bytes - model.weight_bytes - hardware.scratch
    if free <= 0:
        raise AnalysisError(
            f"{model.name} does not fit on {hardware.name} x{hardware.n_gpu}: weights "
            f"{model.weight_bytes / 1e9:.2f} GB + scratch {hardware.scratch / 1e9:.2f} GB >= HBM "
            f"{hardware.total_hbm_bytes / 1e9:.2f} GB (use more GPUs or a smaller --scratch-gb)"
        )
    return free


def batch_size(l_bar: float, model: ModelSpec, hardware: HardwareSpec) -> int:
    """B = max(1, floor((n_gpu HBM - M_w - S) / (Lbar kv_b)))  (ablation, "Roofline model")."""
    return max(1, math.floor(free_hbm(model, hardware) / (l_bar * model.kv_bytes_per_token)))


def mean_context(prompt_tokens: int, completion_tokens: int) -> float:
    """L_k = p_k + (m_k - 1) / 2: the mean context length over the m_k decode steps of call k."""
    return prompt_tokens + (completion_tokens - 1) / 2


def is_replayed(call: CallRecord) -> bool:
    """Overflowed calls were rejected before prefill; error calls produced nothing to count."""
    return not call.overflow and call.finish_reason in ("stop", "length")


def trajectory_cost(
    calls: Sequence[CallRecord | tuple[int, int] | tuple[int, int, int]], model: ModelSpec, hardware: HardwareSpec
) -> TrajectoryCost:
    """Cost of one trajectory: recorded calls, or plain (prompt_tokens, completion_tokens) pairs, or
    (prompt_tokens, completion_tokens, cached_tokens) triples (prefix caching: see the module docstring).

    A recorded call's ``t_prefill`` re-prefills its whole prompt; its ``t_prefill_cached`` uses the record's
    ``cached_prompt_tokens`` (the server's prefix-cache hits) where it has them. A triple's c is used by both."""
    rows: list[tuple[int, str, int, int, bool]] = []
    cached: list[int] = []  # c_k of t_prefill: 0 for a record (the paper's re-prefill), a triple's own
    recorded: list[int | None] = []  # c_k of t_prefill_cached: the record's cached_prompt_tokens, a triple's own
    for i, call in enumerate(calls, start=1):
        if isinstance(call, CallRecord):
            rows.append((call.call_index, call.purpose, call.prompt_tokens, call.completion_tokens, is_replayed(call)))
            cached.append(0)
            recorded.append(call.cached_prompt_tokens)
        else:
            p, m = call[0], call[1]
            c = call[2] if len(call) == 3 else 0
            if p < 0 or m < 0 or not 0 <= c <= p:
                raise InvalidInput("token counts must be non-negative and cached tokens at most the prompt's")
            rows.append((i, "agent", p, m, True))
            cached.append(c)
            recorded.append(call[2] if len(call) == 3 else None)
    kv_b = model.kv_bytes_per_token
    weights = model.weight_bytes
    free = free_hbm(model, hardware)
    decode_tokens = sum(m for _, _, _, m, replayed in rows if replayed)
    weighted = math.fsum(m * mean_context(p, m) for _, _, p, m, replayed in rows if replayed)
    l_bar = weighted / decode_tokens if decode_tokens else None
    batch = batch_size(l_bar, model, hardware) if l_bar is not None else None
    costs = []
    for (index, purpose, p, m, replayed), c, known in zip(rows, cached, recorded, strict=True):
        mean_k = mean_context(p, m)
        if replayed and batch is not None:
            weight, kv = m * weights / batch, m * mean_k * kv_b
        else:
            weight, kv = 0.0, 0.0
        parts = model.prefill_flops_parts(p, c) if c else model.prefill_flops_parts(p)
        matmul, attention, lm_head = parts if replayed else (0.0, 0.0, 0.0)
        if not replayed:
            with_cache = 0.0
        elif known is None or known == c:
            with_cache = matmul + attention + lm_head
        else:
            with_cache = sum(model.prefill_flops_parts(p, known or 0))
        costs.append(CallCost(index, purpose, p, m, replayed, mean_k, weight, kv, matmul, attention, lm_head, known,
                              with_cache))
    weight_bytes = math.fsum(c.weight_bytes for c in costs)
    kv_bytes = math.fsum(c.kv_bytes for c in costs)
    prefill = math.fsum(c.prefill_flops for c in costs)
    prefill_cached = math.fsum(c.prefill_flops_cached for c in costs)
    return TrajectoryCost(
        calls=tuple(costs),
        decode_tokens=decode_tokens,
        mean_context=l_bar,
        batch_size=batch,
        free_hbm_bytes=free,
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        prefill_flops=prefill,
        t_decode=(weight_bytes + kv_bytes) / hardware.total_bandwidth,
        t_prefill=prefill / hardware.total_flops,
        prefill_flops_cached=prefill_cached,
        t_prefill_cached=prefill_cached / hardware.total_flops,
        cache_recorded=sum(1 for c in costs if c.replayed and c.cached_tokens is not None),
    )


def decode_time(decode_bytes: float, hardware: HardwareSpec) -> float:
    """T_decode = BW_decode / bandwidth (seconds)."""
    return decode_bytes / hardware.total_bandwidth


def savings_percent(t_total: float, t_total_baseline: float) -> float:
    """Sav. (%) = 100 (1 - T_total / T_total(baseline)), as in the paper's HBM tables."""
    return 100.0 * (1.0 - t_total / t_total_baseline)


def speedup(t_total: float, t_total_baseline: float) -> float:
    """Speedup (x) = T_total(baseline) / T_total."""
    return t_total_baseline / t_total


@dataclass(frozen=True, slots=True)
class MethodCost:
    """Summed and normalised roofline cost of one method within (variant, model, task_kind)."""

    variant: str
    model: str
    task_kind: str
    method: str
    normalisation: str
    n_tasks: int
    n_success: int
    n_without_calls: int  # finished tasks with no recorded call (cost unknown, counted as 0)
    skipped_calls: int  # overflow / error calls not replayed
    decode_tokens: int
    prompt_tokens: int
    weight_bytes: float  # totals over the tasks in scope
    kv_bytes: float
    prefill_flops: float
    t_decode: float
    t_prefill: float
    baseline: str | None = None
    baseline_t_total: float | None = None
    baseline_bw: float | None = None
    # with the server's recorded prefix-cache hits (module docstring): totals, and how many replayed calls had them
    prefill_flops_cached: float = 0.0
    t_prefill_cached: float = 0.0
    replayed_calls: int = 0
    cache_recorded_calls: int = 0
    baseline_t_total_cached: float | None = None

    @property
    def denominator(self) -> int:
        return self.n_tasks if self.normalisation == "task" else self.n_success

    def _per(self, total: float) -> float | None:
        return total / self.denominator if self.denominator else None

    @property
    def bw_bytes(self) -> float | None:
        """Decode HBM traffic per unit (per success by default), bytes."""
        return self._per(self.weight_bytes + self.kv_bytes)

    @property
    def t_dec(self) -> float | None:
        return self._per(self.t_decode)

    @property
    def t_pre(self) -> float | None:
        return self._per(self.t_prefill)

    @property
    def t_tot(self) -> float | None:
        return self._per(self.t_decode + self.t_prefill)

    @property
    def t_pre_cached(self) -> float | None:
        """Prefill per unit charging only the tokens the server did not serve from its prefix cache; None when no
        call in scope recorded the server's cached tokens (``cache_recorded_calls``)."""
        return self._per(self.t_prefill_cached) if self.cache_recorded_calls else None

    @property
    def t_tot_cached(self) -> float | None:
        return self._per(self.t_decode + self.t_prefill_cached) if self.cache_recorded_calls else None

    @property
    def savings_cached(self) -> float | None:
        """Time savings (%) against the baseline, both with the recorded prefix-cache hits."""
        t = self.t_tot_cached
        if t is None or self.baseline_t_total_cached is None or self.baseline_t_total_cached == 0:
            return None
        return savings_percent(t, self.baseline_t_total_cached)

    @property
    def savings(self) -> float | None:
        """Time savings (%) against the baseline, None when either side is undefined."""
        t = self.t_tot
        if t is None or self.baseline_t_total is None or self.baseline_t_total == 0:
            return None
        return savings_percent(t, self.baseline_t_total)

    @property
    def bw_savings(self) -> float | None:
        bw = self.bw_bytes
        if bw is None or self.baseline_bw is None or self.baseline_bw == 0:
            return None
        return 100.0 * (1.0 - bw / self.baseline_bw)

    @property
    def speedup(self) -> float | None:
        t = self.t_tot
        if t is None or t == 0 or self.baseline_t_total is None:
            return None
        return speedup(t, self.baseline_t_total)


def method_costs(
    tasks: Iterable[TaskRecord],
    calls: Mapping[TaskKey, Sequence[CallRecord]],
    models: Mapping[str, ModelSpec] | ModelSpec,
    hardware: HardwareSpec,
    baseline: str | None = DEFAULT_BASELINE,
    normalisation: str = "success",
) -> list[MethodCost]:
    """Roofline cost per (task_kind, model, variant, method), with savings against `baseline`.

    `models` maps a run's model name to its ModelSpec (or one spec for all).
    """
    if normalisation not in NORMALISATIONS:
        raise AnalysisError(f"normalisation must be one of {', '.join(NORMALISATIONS)}, not {normalisation!r}")
    acc: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for task in tasks:
        spec = models if isinstance(models, ModelSpec) else models.get(task.model)
        if spec is None:
            raise AnalysisError(f"no model preset for {task.model!r}: give --model-preset")
        group = (task.task_kind, task.model, task.variant, task.method)
        a = acc.setdefault(
            group,
            dict.fromkeys(
                (
                    "n_tasks",
                    "n_success",
                    "no_calls",
                    "skipped",
                    "dec_tok",
                    "prompt_tok",
                    "w",
                    "kv",
                    "flops",
                    "t_dec",
                    "t_pre",
                    "flops_cached",
                    "t_pre_cached",
                    "replayed",
                    "cache_recorded",
                ),
                0.0,
            ),
        )
        a["n_tasks"] += 1
        a["n_success"] += int(task.correct)
        own = calls.get(task.key, ())
        if not own:
            a["no_calls"] += 1
        if normalisation == "successful" and not task.correct:
            continue
        cost = trajectory_cost(own, spec, hardware)
        a["skipped"] += cost.skipped_calls
        a["dec_tok"] += cost.decode_tokens
        a["prompt_tok"] += sum(c.prompt_tokens for c in cost.calls if c.replayed)
        a["w"] += cost.weight_bytes
        a["kv"] += cost.kv_bytes
        a["flops"] += cost.prefill_flops
        a["t_dec"] += cost.t_decode
        a["t_pre"] += cost.t_prefill
        a["flops_cached"] += cost.prefill_flops_cached
        a["t_pre_cached"] += cost.t_prefill_cached
        a["replayed"] += sum(1 for c in cost.calls if c.replayed)
        a["cache_recorded"] += cost.cache_recorded
    rows = []
    for kind, model, variant, method in sorted(acc, key=lambda g: (g[0], g[1], g[2], method_order(g[3]))):
        a = acc[(kind, model, variant, method)]
        rows.append(
            MethodCost(
                variant=variant,
                model=model,
                task_kind=kind,
                method=method,
                normalisation=normalisation,
                n_tasks=int(a["n_tasks"]),
                n_success=int(a["n_success"]),
                n_without_calls=int(a["no_calls"]),
                skipped_calls=int(a["skipped"]),
                decode_tokens=int(a["dec_tok"]),
                prompt_tokens=int(a["prompt_tok"]),
                weight_bytes=a["w"],
                kv_bytes=a["kv"],
                prefill_flops=a["flops"],
                t_decode=a["t_dec"],
                t_prefill=a["t_pre"],
                prefill_flops_cached=a["flops_cached"],
                t_prefill_cached=a["t_pre_cached"],
                replayed_calls=int(a["replayed"]),
                cache_recorded_calls=int(a["cache_recorded"]),
            )
        )
    if baseline is None:
        return rows
    base = {(r.task_kind, r.model, r.variant): r for r in rows if r.method == baseline}
    out = []
    for r in rows:
        b = base.get((r.task_kind, r.model, r.variant))
        out.append(
            dataclasses.replace(
                r,
                baseline=baseline if b is not None else None,
                baseline_t_total=b.t_tot if b is not None else None,
                baseline_bw=b.bw_bytes if b is not None else None,
                baseline_t_total_cached=b.t_tot_cached if b is not None else None,
            )
        )
    return out


def explain_trajectory(
    calls: Sequence[CallRecord | tuple[int, int]], model: ModelSpec, hardware: HardwareSpec, title: str = ""
) -> str:
    """The roofline worked by hand for one trajectory: every intermediate value, as plain text."""
    cost = trajectory_cost(calls, model, hardware)
    kv_b = model.kv_bytes_per_token
    lines = []
    if title:
        lines.append(title)
    lines += [
        f"model {model.name}: {model.total_params:,} parameters x {model.bytes_per_param} B = M_w {model.weight_bytes:,.0f} B",
        f"  kv_b = 2 x {model.num_hidden_layers} layers x {model.num_key_value_heads} kv heads x {model.head_dim} head dim"
        f" x {model.kv_bytes_per_element} B = {kv_b:,.0f} B/token",
        f"  prefill FLOPs(p) = 2 x {model.matmul_params:,} x p + 2 x {model.num_hidden_layers} x"
        f" {model.num_attention_heads} x {model.head_dim} x p (p + 1) + 2 x {model.hidden_size} x {model.vocab_size}",
        f"hardware {hardware.name} x{hardware.n_gpu}: HBM {hardware.total_hbm_bytes:,.0f} B, bandwidth"
        f" {hardware.total_bandwidth:,.0f} B/s, peak {hardware.total_flops:,.0f} FLOP/s, scratch S {hardware.scratch:,.0f} B",
        "",
        f"{'k':>3} {'purpose':<8} {'p_k':>7} {'m_k':>6} {'L_k':>10} {'m_k*L_k':>13} {'KV bytes':>18} {'weight bytes':>18}"
        f" {'prefill FLOPs':>14}",
    ]
    for c in cost.calls:
        if not c.replayed:
            lines.append(
                f"{c.call_index:>3} {c.purpose:<8} {c.prompt_tokens:>7} {c.completion_tokens:>6}   (overflow/error: not replayed)"
            )
            continue
        lines.append(
            f"{c.call_index:>3} {c.purpose:<8} {c.prompt_tokens:>7} {c.completion_tokens:>6} {c.mean_context:>10.1f}"
            f" {c.completion_tokens * c.mean_context:>13,.1f} {c.kv_bytes:>18,.0f} {c.weight_bytes:>18,.0f} {c.prefill_flops:>14.4e}"
        )
    lines.append("")
    if cost.mean_context is None or cost.batch_size is None:
        lines.append("no decoded token: Lbar and B undefined, decode bytes 0")
    else:
        weighted = cost.mean_context * cost.decode_tokens
        lines += [
            f"sum m_k = {cost.decode_tokens:,}; sum m_k L_k = {weighted:,.1f}; Lbar = {cost.mean_context:,.3f} tokens",
            f"B = max(1, floor(({hardware.total_hbm_bytes:,.0f} - {model.weight_bytes:,.0f} - {hardware.scratch:,.0f})"
            f" / ({cost.mean_context:,.3f} x {kv_b:,.0f}))) = max(1, floor({cost.free_hbm_bytes:,.0f}"
            f" / {cost.mean_context * kv_b:,.1f})) = {cost.batch_size}",
            f"weight bytes = sum m_k M_w / B = {cost.decode_tokens:,} x {model.weight_bytes:,.0f} / {cost.batch_size}"
            f" = {cost.weight_bytes:,.0f}",
            f"KV bytes = sum m_k L_k kv_b = {weighted:,.1f} x {kv_b:,.0f} = {cost.kv_bytes:,.0f}",
        ]
    lines += [
        f"BW_decode = {cost.decode_bytes:,.0f} B = {cost.decode_bytes / 1e12:.6f} TB",
        f"T_decode = {cost.decode_bytes:,.0f} / {hardware.total_bandwidth:,.0f} = {cost.t_decode:.6f} s",
        f"prefill FLOPs = {cost.prefill_flops:.6e}; T_prefill = {cost.prefill_flops:.6e} / {hardware.total_flops:.4e}"
        f" = {cost.t_prefill:.6f} s",
        f"T_total = {cost.t_prefill:.6f} + {cost.t_decode:.6f} = {cost.t_total:.6f} s",
    ]
    if cost.cache_recorded and any(isinstance(call, CallRecord) for call in calls):
        replayed = sum(1 for c in cost.calls if c.replayed)
        hits = sum(c.cached_tokens or 0 for c in cost.calls if c.replayed)
        lines += [
            "(above: re-prefill, every call prefills its whole prompt, blind to the server's prefix cache)",
            f"with the server's prefix-cache hits (cached_prompt_tokens on {cost.cache_recorded} of {replayed} replayed"
            f" call(s), {hits:,} tokens; a call without it charged whole): prefill FLOPs ="
            f" {cost.prefill_flops_cached:.6e}; T_prefill = {cost.t_prefill_cached:.6f} s; T_total ="
            f" {cost.t_prefill_cached:.6f} + {cost.t_decode:.6f} = {cost.t_total_cached:.6f} s",
        ]
    return "\n".join(lines)
