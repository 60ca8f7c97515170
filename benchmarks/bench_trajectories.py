"""Real agent runs replayed through the six methods: prompt tokens, prefix-cache prefill, roofline cost, recall.

    python benchmarks/bench_trajectories.py [--data ../shared/data/trajectories] [--windows 16k,32k]
                                            [--formats o200k,qwen3] [--sections main,tradeoff,long,summary,prices]
                                            [--long-steps 500]

For each trajectory in the shared data (OpenHands CodeAct on Multi-SWE-bench, SWE-agent with GPT-4 and with
function calling), each window (16k: the paper's L_ctx 16384 with G_max 4096; 32k: L_ctx 32768) and each
counting (o200k: ChatML with o200k_base; qwen3: the Qwen3 chat template and tokenizer of
``../shared/data/qwen3-tokenizer``, skipped when absent), every method of the evaluation layer
(``arc_eval.methods``: full context, the four other baselines, ARC) is driven through the trajectory's steps
exactly as the agent loop drives it (a prompt per call, reactive compaction on overflow, condensing requests
answered by the scripted backend), and per method the script prints:

* ``prompt``: the sum over served calls of the prompt tokens (auxiliary condensing requests included);
* ``prefill``: the tokens a prefix-caching server prefills: each prompt minus its longest common token
  prefix with the previous prompt of the task (the token ids of the rendered prompt);
* ``served``: calls answered / agent calls (full context's calls over L are not served and cost nothing); the
  line ``arc/full`` gives the ratios only when both served every call (else n/a, with both counts), and the
  ``all five`` totals show their served / calls, since each sums its own served calls;
* ``comp``: compactions (the method's own events: ARC's folds, a baseline's condensing or dropping);
* ``>full``: agent calls where the method's prompt is longer than full context's, counted where full fits;
  ``>f+o``: longer than full context's plus the method's fixed overhead (its first prompt minus full's: for
  ARC its instructions);
* ``HBM GB``: the roofline's decode traffic (``arc_eval.analysis.roofline``, Qwen3-8B at 16k, Qwen3-32B on
  two H200 at 32k, the presets of the paper), and ``T s`` / ``T$ s``: its total time without and with
  prefix caching (decode reads the whole KV in both; prefill costs the uncached tokens only with caching).

ARC's cost model is configured for the roofline of its window (``prefill_cost`` 398 at 16k, Qwen3-8B on one H200;
857 at 32k, Qwen3-32B on two: spec/rendering.md 11.1). Costs are over the calls each method got answered. After each
block the issue's targets are checked on every trajectory (ARC's T$ <= full context's where full fits and <= every
bounded baseline's; ARC's prompt <= full context's + ARC's overhead on every call) and every observation ARC stored
comes back byte for byte through ``_recall-start`` / ``_recall-next``.

Section ``tradeoff``: ARC alone under several low-water marks and trigger settings (the bound alone, the cost model
with the roofline's prefill cost and the agent's own tokens per turn, or an expected completion of 256 or 64
tokens), totals over the five
trajectories per block with the number of trajectories missing a T$ target, and the settings with the least T$ over
all blocks (each block's T$ relative to its best), overall and among those missing the fewest targets. Section ``long``: a synthetic
trajectory of ``--long-steps`` steps built from the real ones (the same actions, outputs and sizes, in a seeded
shuffled order), every method: compactions per 100 steps, prompt and prefill per served call, T$. Section
``summary``: ARC alone per summary low-water mark (``summary_low_water``, spec/rendering.md 11.3: S appended to
until a fold's items do not fit M, then shrunk to this percent of M; 100 shrinks only to fit), the five
trajectories' totals and the long run, next to full context and the sliding window, ranked as above; the shipped
default is the largest mark among those missing the fewest T$ targets. Section ``prices``: each cost fold ARC takes
on the five trajectories, the cost model's price (spec/rendering.md 11.1: X and Y measured on the fold's copy, m the
agent's rate in H) beside what the roofline charged: the same replay with that fold declined (and the rule's later
cost folds until its next bound fold) gives the next call's prompt reduction and extra prefill, the tokens the
later calls generated (and H's own calls, for the framing an agent message adds to m), and T$'s change split into
prefill matmul, prefill attention, decode KV reads and decode weight reads; ``payback`` is prefill_cost * Y / (m * X)
in calls, ``margin`` the rule's m * t * X^2 over 2 * prefill_cost * Y * h.
The issue's "before" figures come from running this same script with PYTHONPATH at the old tree.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from arc_eval.analysis.presets import hardware_preset, model_preset
from arc_eval.analysis.roofline import free_hbm, trajectory_cost
from arc_eval.agent.scripted import ScriptedBackend
from arc_eval.counting import TokenCounter, make_counter
from arc_eval.methods import make_method, method_names
from arc_eval.methods.arc import ArcOptions
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import system_prompt
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Message, Observation
from arc_ref import machine, trigger
from arc_ref.config import DEFAULT_EXPECTED_COMPLETION, DEFAULT_LOW_WATER, DEFAULT_SUMMARY_LOW_WATER
from arc_ref.machine import AgentTurn, agent_turn
from arc_ref.options import integer_parser
from arc_ref.recall import chunk_count, reassemble
from arc_ref.render import agent_message
from arc_ref.summary import extends
from proofs_check.shared_data import QWEN3_NAME, shared_data_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trajectories import DATA_DIR, Step, Trajectory, TrajectoryError, load_all  # noqa: E402

QWEN3_DIR = shared_data_dir() / QWEN3_NAME
WINDOWS = {"16k": 16384, "32k": 32768}
MAX_TOKENS = 4096
# the paper's serving setups: Qwen3-8B on one H200 at 16k, Qwen3-32B on two H200 at 32k
ROOFLINE = {"16k": ("qwen3-8b", "h200", 1), "32k": ("qwen3-32b", "h200", 2)}
SHORT = {"full_context": "full", "sliding_window": "window", "llm_summary": "summary",
         "structured_state": "state", "rag_memory": "rag", "arc": "arc"}
BOUNDED = ("sliding_window", "llm_summary", "structured_state", "rag_memory")
LOW_WATERS = (5, 10, 25, 50)
SUMMARY_LOW_WATERS = (100, 75, 50, 25, 10)  # section summary: S's low-water mark (100: S re-fitted to just fit M)
# the trigger: the bound alone (prefill_cost 0), or the cost model with the roofline's prefill_cost and an expected
# completion of m tokens (only prefill_cost / m matters; these trajectories' agent turns average 66 to 113 tokens),
# or ("agent", expected_completion 0) the agent's own tokens per turn in H
TRIGGERS: dict[str, int | None] = {"bound": None, "agent": 0, "m=256": 256, "m=64": 64}
LONG_SEED = 26
# RequestSink(method, messages, prompt tokens, cached tokens by the model): a served request, as a server gets it
RequestSink = Callable[[str, Sequence[Message], int, int], None]


def formats() -> dict[str, tuple[str, str]]:
    found = {"o200k": ("o200k_base", "chatml")}
    if (QWEN3_DIR / "tokenizer.json").is_file():
        found["qwen3"] = (f"hf-dir:{QWEN3_DIR}", "template")
    return found


def roofline_of(window: str) -> tuple[Any, Any]:
    model_name, hardware_name, gpus = ROOFLINE[window]
    return model_preset(model_name), dataclasses.replace(hardware_preset(hardware_name), n_gpu=gpus)


def prefill_cost(window: str) -> int:
    """The cost model's prefill_cost for the roofline of this window (spec/rendering.md 11.1): one token's prefill
    (2 x matmul parameters / peak FLOP/s) in KV reads of one context token by one generated token (its KV and its
    share of the weights streamed for the batch, M_w / free HBM of it, at the HBM bandwidth)."""
    model, hardware = roofline_of(window)
    prefill = 2 * model.matmul_params / hardware.total_flops
    read = model.kv_bytes_per_token * (1 + model.weight_bytes / free_hbm(model, hardware)) / hardware.total_bandwidth
    return round(prefill / read)


def common_prefix(first: Sequence[int], second: Sequence[int]) -> int:
    """Length of the longest common prefix of two token id sequences."""
    limit = min(len(first), len(second))
    low = 0
    step = 1 << 14
    while low < limit:  # compare in blocks: the shared part is usually long
        high = min(limit, low + step)
        if first[low:high] == second[low:high]:
            low = high
            continue
        while low < high and first[low] == second[low]:
            low += 1
        return low
    return low


class Replay:
    """One method driven through one trajectory; every served request's tokens and ids are kept."""

    def __init__(self, name: str, settings: MethodSettings, backend: ScriptedBackend,
                 sink: RequestSink | None = None) -> None:
        self.name = name
        self.settings = settings
        self.method = make_method(name, settings)
        self.backend = backend
        self.counter = settings.counter
        self.sink = sink
        self.previous: list[int] = []
        self.requests: list[tuple[int, int, int]] = []  # (prompt, completion, cached) of served requests
        self.agent_prompts: list[int | None] = []  # per agent call: its prompt tokens, None when not served
        self.compactions = 0
        self.grows_only = name == "full_context"  # its prompt never shrinks: once over L, every later call is too

    def serve(self, messages: Sequence[Message], completion: int) -> int | None:
        """Account one request: None when it is over L (a server rejects it before any prefill)."""
        if self.grows_only and self.agent_prompts and self.agent_prompts[-1] is None:
            return None  # (full context: counting a transcript that only grows past L again would change nothing)
        tokens = self.counter.count(messages)
        if tokens > self.settings.usable_tokens:
            return None
        ids = self.counter.tokenizer.encode(self.counter.render(messages))
        cached = common_prefix(self.previous, ids)
        self.previous = ids
        self.requests.append((tokens, completion, min(cached, tokens)))
        if self.sink is not None:
            self.sink(self.name, messages, tokens, min(cached, tokens))
        return tokens

    async def aux(self, messages: Sequence[Message], purpose: str) -> ChatReply:
        reply = await self.backend.complete(ChatRequest(tuple(messages), max_tokens=self.settings.max_tokens))
        if self.serve(messages, reply.completion_tokens) is None:
            raise ContextOverflow(f"{purpose} request over L", prompt_tokens=reply.prompt_tokens,
                                  limit=self.settings.usable_tokens)
        return reply

    async def run(self, trajectory: Trajectory) -> None:
        self.method.begin(system_prompt(), trajectory.goal)
        for step in (*trajectory.steps, None):
            messages = await self.method.prompt(self.aux)
            completion = 0 if step is None else self.counter.text_tokens(agent_message(step.thought, step.action))
            served = self.serve(messages, max(completion, 1))
            retries = 0
            while served is None and retries < 3 and await self.method.compact("reactive", self.aux):
                retries += 1
                messages = await self.method.prompt(self.aux)
                served = self.serve(messages, max(completion, 1))
            self.agent_prompts.append(served)
            self.compactions += len(self.method.drain_events().compactions)
            if step is None:
                break
            self.method.record_agent(step.thought, step.action)
            self.method.record_observation(step.action, Observation(step.observation, step.returncode))
            self.compactions += len(self.method.drain_events().compactions)


def recall_exact(replay: Replay) -> tuple[int, int]:
    """(observations recovered byte for byte through _recall-start / _recall-next, observations stored)."""
    state = replay.method.state  # type: ignore[attr-defined]
    exact = 0
    for record in state.records:
        probe, answered = agent_turn(state, AgentTurn("", f"_recall-start {record.obs_id}"))
        payloads = [r.payload for r in answered.recalls]
        for _ in range(chunk_count(record.n_tokens, state.config.chunk_tokens) - 1):
            probe, answered = agent_turn(probe, AgentTurn("", f"_recall-next {record.obs_id}"))
            payloads.extend(r.payload for r in answered.recalls)
        exact += reassemble(payloads) == record.content  # D: S^-1 of the chunks (spec/rendering.md 7.1)
    return exact, state.stored


def arc_options(window: str, low_water: int = DEFAULT_LOW_WATER,
                completion: int | None = DEFAULT_EXPECTED_COMPLETION,
                summary_low_water: int = DEFAULT_SUMMARY_LOW_WATER) -> ArcOptions:
    """ARC configured for the roofline of its window (the trade-off varies the low-water mark and the trigger, the
    section summary S's low-water mark; ``completion`` None: the bound alone)."""
    if completion is None:
        return ArcOptions(low_water=low_water, prefill_cost=0, summary_low_water=summary_low_water)
    return ArcOptions(low_water=low_water, prefill_cost=prefill_cost(window), expected_completion=completion,
                      summary_low_water=summary_low_water)


def replay(name: str, trajectory: Trajectory, window: str, counter: TokenCounter,
           options: ArcOptions | None = None, sink: RequestSink | None = None) -> Replay:
    settings = MethodSettings(context_limit=WINDOWS[window], max_tokens=MAX_TOKENS, counter=counter,
                              method_options={"arc": options or arc_options(window)})
    runner = Replay(name, settings, ScriptedBackend(context_limit=10**7, counter=counter), sink)
    asyncio.run(runner.run(trajectory))
    return runner


def costs(runner: Replay, window: str) -> dict[str, Any]:
    model, hardware = roofline_of(window)
    plain = trajectory_cost([(p, m) for p, m, _ in runner.requests], model, hardware)
    cached = trajectory_cost(runner.requests, model, hardware)
    return {
        "prompt": sum(p for p, _, _ in runner.requests),
        "prefill": sum(p - c for p, _, c in runner.requests),
        "served": sum(1 for p in runner.agent_prompts if p is not None),
        "calls": len(runner.agent_prompts),
        "requests": len(runner.requests),
        "compactions": runner.compactions,
        "hbm": plain.decode_bytes / 1e9,
        "t": plain.t_total,
        "t_cached": cached.t_total,
    }


def measure(trajectory: Trajectory, window: str, counter: TokenCounter,
            sink: RequestSink | None = None) -> dict[str, Any]:
    """``counter``: the one counter of this counting, shared by the methods and the backend (as a run's is)."""
    results: dict[str, Any] = {}
    replays = {}
    for name in method_names():
        runner = replay(name, trajectory, window, counter, sink=sink)
        replays[name] = runner
        results[name] = costs(runner, window)
    full = replays["full_context"].agent_prompts
    for name, runner in replays.items():
        # a method's fixed overhead: its first prompt (no history yet) minus full context's (ARC: its instructions)
        overhead = (runner.agent_prompts[0] or 0) - (full[0] or 0)
        pairs = [(own, theirs) for own, theirs in zip(runner.agent_prompts, full) if theirs is not None and own is not None]
        results[name]["over_full"] = sum(1 for own, theirs in pairs if own > theirs)
        results[name]["over_full_overhead"] = sum(1 for own, theirs in pairs if own > theirs + max(overhead, 0))
        results[name]["overhead"] = overhead
    results["arc"]["exact"] = recall_exact(replays["arc"])
    results["_needs_compaction"] = any(p is None for p in full)
    return results


def targets(name: str, results: dict[str, Any]) -> list[str]:
    """The issue's targets on one trajectory: a line per target missed (empty: all met)."""
    arc, full = results["arc"], results["full_context"]
    missed = []
    if not results["_needs_compaction"] and arc["t_cached"] > full["t_cached"]:
        missed.append(f"{name}: ARC's T$ {arc['t_cached']:.3f} > full context's {full['t_cached']:.3f} (full fits)")
    for baseline in BOUNDED:
        if arc["t_cached"] > results[baseline]["t_cached"]:
            missed.append(f"{name}: ARC's T$ {arc['t_cached']:.3f} > {SHORT[baseline]}'s"
                          f" {results[baseline]['t_cached']:.3f}")
    if arc["over_full_overhead"]:
        missed.append(f"{name}: ARC's prompt exceeds full context's + its overhead on {arc['over_full_overhead']} calls")
    return missed


def comparison_line(arc: dict[str, Any], full: dict[str, Any], exact: int, stored: int) -> str:
    """ARC against full context on one trajectory. The ratios are sums over each method's served calls, so they
    are printed only when full context served every call; else n/a with both counts (review h27 F6)."""
    if full["served"] == full["calls"] and arc["served"] == arc["calls"]:
        ratios = f"arc/full prompt {arc['prompt'] / full['prompt']:.3f}, prefill {arc['prefill'] / full['prefill']:.2f}x"
    else:
        ratios = (f"arc/full n/a (full served {full['served']}/{full['calls']}, arc {arc['served']}/{arc['calls']}:"
                  " sums over different calls)")
    return f"{'':<34} {ratios}; ARC's overhead {arc['overhead']} tokens; recall byte-exact {exact}/{stored}"


HEADER = (f"{'trajectory':<34} {'method':<8} {'prompt':>10} {'prefill':>10} {'served':>8} {'comp':>5} {'>full':>5}"
          f" {'>f+o':>5} {'HBM GB':>8} {'T s':>8} {'T$ s':>8}")


def main_section(trajectories: list[Trajectory], window: str, counter: TokenCounter) -> tuple[bool, list[str]]:
    print(HEADER)
    totals: dict[str, dict[str, float]] = {}
    all_exact = True
    missed: list[str] = []
    for trajectory in trajectories:
        results = measure(trajectory, window, counter)
        label = f"{trajectory.name[:26]}{'' if results['_needs_compaction'] else ' (fits)'}"
        for name in method_names():
            row = results[name]
            total = totals.setdefault(name, {"prompt": 0, "prefill": 0, "compactions": 0, "hbm": 0.0, "t": 0.0,
                                             "t_cached": 0.0, "over_full": 0, "over_full_overhead": 0,
                                             "served": 0, "calls": 0})
            for key in total:
                total[key] += row[key]
            print(f"{label:<34} {SHORT[name]:<8} {row['prompt']:>10,} {row['prefill']:>10,}"
                  f" {row['served']:>3}/{row['calls']:<4} {row['compactions']:>5} {row['over_full']:>5}"
                  f" {row['over_full_overhead']:>5} {row['hbm']:>8.2f} {row['t']:>8.3f} {row['t_cached']:>8.3f}")
        exact, stored = results["arc"]["exact"]
        all_exact &= exact == stored
        arc, full = results["arc"], results["full_context"]
        print(comparison_line(arc, full, exact, stored))
        missed.extend(targets(trajectory.name[:26], results))
    for name in method_names():
        total = totals[name]
        print(f"{'all five':<34} {SHORT[name]:<8} {int(total['prompt']):>10,} {int(total['prefill']):>10,}"
              f" {int(total['served']):>3}/{int(total['calls']):<4} {int(total['compactions']):>5} {int(total['over_full']):>5}"
              f" {int(total['over_full_overhead']):>5} {total['hbm']:>8.2f} {total['t']:>8.3f}"
              f" {total['t_cached']:>8.3f}")
    if any(totals[name]["served"] < totals[name]["calls"] for name in method_names()):
        print(f"{'':<34} (each total sums its own served calls: a method that served fewer is not like for like)")
    print("targets: " + ("all met on every trajectory" if not missed else f"{len(missed)} missed"))
    for line in missed:
        print(f"  MISSED {line}")
    return all_exact, missed


def tradeoff_section(trajectories: list[Trajectory], window: str, counter: TokenCounter,
                     scores: dict[tuple[int, str], list[float]], misses: dict[tuple[int, str], int]) -> None:
    """ARC alone per low-water mark and trigger: totals over the trajectories, and how many trajectories miss a
    T$ target (ARC's T$ above full context's where full fits, or above a bounded baseline's); ``scores`` collects
    T$ per block, ``misses`` the missed targets."""
    print(f"ARC's trade-off (prefill_cost of the roofline: {prefill_cost(window)}):")
    print(f"  {'low_water':>9} {'trigger':<8} {'prompt':>10} {'prefill':>10} {'comp':>5} {'T s':>8} {'T$ s':>8}"
          f" {'missed':>6}")
    others = {}
    for trajectory in trajectories:  # the baselines do not depend on ARC's settings
        others[trajectory.name] = {name: costs(replay(name, trajectory, window, counter), window)
                                   for name in ("full_context", *BOUNDED)}
        others[trajectory.name]["_needs_compaction"] = others[trajectory.name]["full_context"]["served"] < len(
            trajectory.steps) + 1
    block: dict[tuple[int, str], float] = {}
    for low_water in LOW_WATERS:
        for trigger, completion in TRIGGERS.items():
            total = {"prompt": 0, "prefill": 0, "compactions": 0, "t": 0.0, "t_cached": 0.0}
            missed = 0
            for trajectory in trajectories:
                row = costs(replay("arc", trajectory, window, counter, arc_options(window, low_water, completion)),
                            window)
                for key in total:
                    total[key] += row[key]
                theirs = others[trajectory.name]
                missed += (not theirs["_needs_compaction"] and row["t_cached"] > theirs["full_context"]["t_cached"]) or any(
                    row["t_cached"] > theirs[name]["t_cached"] for name in BOUNDED)
            block[(low_water, trigger)] = total["t_cached"]
            misses[(low_water, trigger)] = misses.get((low_water, trigger), 0) + missed
            print(f"  {low_water:>9} {trigger:<8} {int(total['prompt']):>10,} {int(total['prefill']):>10,}"
                  f" {int(total['compactions']):>5} {total['t']:>8.3f} {total['t_cached']:>8.3f} {missed:>6}")
    best = min(block.values())
    for setting, value in block.items():
        scores.setdefault(setting, []).append(value / best)


@dataclasses.dataclass
class CostFold:
    """One cost fold as the cost model priced it (spec/rendering.md 11.1): after agent call ``call`` (1-based; the
    next prompt is the first to show it), X and Y measured on the fold's copy, h and t of H, m * t."""

    call: int
    removed: int  # X: tokens(view) - tokens(copy)
    prefilled: int  # Y: tokens(copy) - B - eta (less the old S when the copy's S only appended to it)
    recent: int  # h
    turns: int  # t
    generated: int  # m * t (trigger.generated_reads)


class FoldWatch:
    """Wraps ``arc_ref.machine.fold_decision`` while a replay runs: notes each cost fold the rule takes, priced by
    the spec's copy test (its inequality re-evaluated here, so a disagreement with the machine shows as a count
    that differs from the replay's compactions), and, for the counterfactual, answers keep instead of cost from
    agent call ``decline_from`` on until the rule next folds on the bound."""

    def __init__(self, decline_from: int | None = None) -> None:
        self.decline_from = decline_from
        self.folds: list[CostFold] = []
        self.bound_folds = 0

    def decide(self, state: Any) -> str:
        decision = ORIGINAL_FOLD_DECISION(state)
        if decision == trigger.BOUND:
            self.bound_folds += 1
            self.decline_from = None  # the rule resumes after the next bound fold
            return decision
        if decision != trigger.COST:
            return decision
        if self.decline_from is not None and state.turn >= self.decline_from:
            return trigger.KEEP
        folded, count = machine.fold(state, machine.compaction_target(state))
        if count == 0:
            return decision
        before, after = machine.view(state).tokens, machine.view(folded).tokens
        fixed = state.setup.prefix_tokens + state.setup.generation_tokens
        if extends(folded.summary, state.summary):
            fixed += state.summary.tokens
        removed, prefilled = before - after, after - fixed
        recent, turns, agent = state.live_tokens, state.live_turns, state.live_agent_tokens
        if trigger.pays(state.config, removed, prefilled, recent, turns, agent):
            self.folds.append(CostFold(state.turn, removed, prefilled, recent, turns,
                                       trigger.generated_reads(state.config, turns, agent)))
        return decision


ORIGINAL_FOLD_DECISION = machine.fold_decision


@contextlib.contextmanager
def watching(watch: FoldWatch) -> Iterator[FoldWatch]:
    machine.fold_decision = watch.decide
    try:
        yield watch
    finally:
        machine.fold_decision = ORIGINAL_FOLD_DECISION


def watched_replay(trajectory: Trajectory, window: str, counter: TokenCounter,
                   decline_from: int | None = None) -> tuple[Replay, FoldWatch]:
    with watching(FoldWatch(decline_from)) as watch:
        runner = replay("arc", trajectory, window, counter)
    return runner, watch


ROOFLINE_TERMS = ("matmul", "attention", "kv", "weights")


def roofline_terms(runner: Replay, window: str) -> tuple[float, dict[str, float]]:
    """T$ and its terms in seconds: prefill matmul, prefill attention (and the logits, a constant per call), decode
    KV reads, decode weight reads (each call's share of the batch's)."""
    model, hardware = roofline_of(window)
    cost = trajectory_cost(runner.requests, model, hardware)
    flops, bandwidth = hardware.total_flops, hardware.total_bandwidth
    terms = {"matmul": sum(c.prefill_matmul_flops for c in cost.calls) / flops,
             "attention": sum(c.prefill_attention_flops + c.prefill_lm_head_flops for c in cost.calls) / flops,
             "kv": cost.kv_bytes / bandwidth, "weights": cost.weight_bytes / bandwidth}
    return cost.t_total, terms


def fold_prices(trajectory: Trajectory, window: str, counter: TokenCounter) -> list[dict[str, Any]]:
    """Per cost fold of ARC's replay: the price the cost model put on it against what the roofline charged. The
    realized figures compare the replay with the same replay with this fold declined (and the rule's later cost
    folds until its next bound fold): the next call's prompt reduction (X) and extra prefill (Y), the tokens the
    later calls generated (the rule's m is the agent's rate so far), and T$'s change by term."""
    taken, watch = watched_replay(trajectory, window, counter)
    if len(taken.requests) != len(taken.agent_prompts):
        raise AssertionError("ARC made auxiliary requests: calls and requests no longer line up")
    total, terms = roofline_terms(taken, window)
    rows = []
    for fold in watch.folds:
        declined, _ = watched_replay(trajectory, window, counter, decline_from=fold.call)
        other_total, other_terms = roofline_terms(declined, window)
        first = fold.call  # index of the first request that shows the fold
        later = [completion for _, completion, _ in taken.requests[first:]]
        before = [completion for _, completion, _ in taken.requests[max(0, first - fold.turns):first]]
        prompt_saved = declined.requests[first][0] - taken.requests[first][0]
        extra_prefill = ((taken.requests[first][0] - taken.requests[first][2])
                         - (declined.requests[first][0] - declined.requests[first][2]))
        rows.append({"fold": fold, "prompt_saved": prompt_saved, "extra_prefill": extra_prefill, "later": later,
                     "generated_in_h": sum(before) / max(1, len(before)),
                     "delta": total - other_total, "terms": {key: terms[key] - other_terms[key] for key in terms}})
    return rows


def prices_section(trajectories: list[Trajectory], window: str, counter: TokenCounter) -> None:
    cost = prefill_cost(window)
    print(f"ARC's cost folds: the cost model's price (spec/rendering.md 11.1, prefill_cost {cost}) against the"
          " roofline's charge (realized: this replay minus the same replay with the fold declined until the next"
          " bound fold)")
    print(f"  {'trajectory':<26} {'after':>5} {'X rule/next':>13} {'Y rule/next':>13} {'m rule/H/later':>16}"
          f" {'left':>4} {'payback':>7} {'margin':>6} | {'dT$ ms':>7} = {'matmul':>7} {'attn':>6} {'KV':>7} {'weights':>7}")
    ratios_y: list[float] = []
    ratios_m: list[float] = []
    ratios_h: list[float] = []
    for trajectory in trajectories:
        for row in fold_prices(trajectory, window, counter):
            fold, later = row["fold"], row["later"]
            m = fold.generated / max(1, fold.turns)
            later_mean = sum(later) / max(1, len(later))
            payback = cost * fold.prefilled / max(1.0, m * fold.removed)  # calls at m for X per token to repay Y
            margin = fold.generated * fold.removed ** 2 / max(1, 2 * cost * fold.prefilled * fold.recent)
            ratios_y.append(row["extra_prefill"] / max(1, fold.prefilled))
            ratios_m.append(later_mean / max(1.0, m))
            ratios_h.append(row["generated_in_h"] / max(1.0, m))
            terms = row["terms"]
            print(f"  {trajectory.name[:26]:<26} {fold.call:>5} {fold.removed:>6,}/{row['prompt_saved']:<6,}"
                  f" {fold.prefilled:>6,}/{row['extra_prefill']:<6,}"
                  f" {m:>5.0f}/{row['generated_in_h']:>4.0f}/{later_mean:<5.0f} {len(later):>4}"
                  f" {payback:>7.1f} {margin:>6.2f} | {row['delta'] * 1e3:>+7.1f} = "
                  + " ".join(f"{terms[key] * 1e3:>+7.1f}" for key in ROOFLINE_TERMS))
    if ratios_y:
        print(f"  {len(ratios_y)} folds: the next call's extra prefill / Y: mean {sum(ratios_y) / len(ratios_y):.2f}"
              f" (min {min(ratios_y):.2f}); later calls' generated tokens / m: mean"
              f" {sum(ratios_m) / len(ratios_m):.2f} (min {min(ratios_m):.2f}, max {max(ratios_m):.2f}); H's calls'"
              f" generated tokens / m: mean {sum(ratios_h) / len(ratios_h):.2f}")


def synthetic(trajectories: list[Trajectory], steps: int, seed: int = LONG_SEED) -> Trajectory:
    """``steps`` steps of the real trajectories (their actions, outputs and sizes) in a seeded shuffled order: the
    pool of every step, shuffled, then shuffled again each time it is used up; the first trajectory's goal."""
    pool: list[Step] = [step for trajectory in trajectories for step in trajectory.steps]
    order: list[Step] = []
    shuffler = random.Random(seed)
    while len(order) < steps:
        batch = list(pool)
        shuffler.shuffle(batch)
        order.extend(batch)
    return Trajectory(f"synthetic-{steps}", "synthetic", trajectories[0].goal, tuple(order[:steps]))


def long_section(trajectories: list[Trajectory], window: str, counter: TokenCounter, steps: int) -> None:
    long = synthetic(trajectories, steps)
    print(f"synthetic {steps}-step trajectory ({len({s.action for s in long.steps})} distinct actions, seed"
          f" {LONG_SEED}):")
    print(f"  {'method':<8} {'served':>9} {'comp/100':>8} {'prompt/call':>11} {'prefill/call':>12} {'T$ s':>9}")
    for name in method_names():
        started = time.perf_counter()
        row = costs(replay(name, long, window, counter), window)
        served = max(row["served"], 1)
        print(f"  {SHORT[name]:<8} {row['served']:>4}/{row['calls']:<4} {100 * row['compactions'] / steps:>8.1f}"
              f" {row['prompt'] / max(row['requests'], 1):>11,.0f} {row['prefill'] / max(row['requests'], 1):>12,.0f}"
              f" {row['t_cached']:>9.3f}   ({time.perf_counter() - started:.0f} s; per served call"
              f" T$ {row['t_cached'] / served * 1000:.1f} ms)")


def summary_section(trajectories: list[Trajectory], window: str, counter: TokenCounter, steps: int,
                    scores: dict[int, list[float]], misses: dict[int, int]) -> None:
    """ARC alone per summary low-water mark (S appended to while a fold's items fit M, then shrunk to this percent
    of M): totals over the five trajectories (with the trajectories missing a T$ target) and the ``steps``-step
    synthetic trajectory, next to full context's and the sliding window's; ``scores`` collects T$ per block
    (five and long, each relative to its best), ``misses`` the missed targets (the long run's T$ above the
    window's counts as one)."""
    long = synthetic(trajectories, steps)
    others = {}
    for trajectory in trajectories:
        others[trajectory.name] = {name: costs(replay(name, trajectory, window, counter), window)
                                   for name in ("full_context", *BOUNDED)}
    fits = {name: others[name]["full_context"]["served"] == len(t.steps) + 1
            for name, t in zip(others, trajectories)}
    window_long = costs(replay("sliding_window", long, window, counter), window)
    print("ARC per summary low-water mark (five trajectories: totals; synthetic"
          f" {steps} steps: compactions per 100 steps, prompt and prefill per call, T$):")
    print(f"  {'summary_lw':>10} {'prompt':>10} {'prefill':>9} {'comp':>4} {'T s':>7} {'T$ s':>7} {'missed':>6}"
          f" | {'comp/100':>8} {'prompt/call':>11} {'prefill/call':>12} {'T$ s':>8}")
    for name, label in (("full_context", "full"), ("sliding_window", "window")):
        total = {key: sum(others[t.name][name][key] for t in trajectories)
                 for key in ("prompt", "prefill", "compactions", "t", "t_cached")}
        tail = ""
        if name == "sliding_window":
            row = window_long
            tail = (f" {100 * row['compactions'] / steps:>8.1f} {row['prompt'] / max(row['requests'], 1):>11,.0f}"
                    f" {row['prefill'] / max(row['requests'], 1):>12,.0f} {row['t_cached']:>8.3f}")
        print(f"  {label:>10} {int(total['prompt']):>10,} {int(total['prefill']):>9,} {int(total['compactions']):>4}"
              f" {total['t']:>7.3f} {total['t_cached']:>7.3f} {'':>6} |{tail}")
    five: dict[int, float] = {}
    longer: dict[int, float] = {}
    for summary_low_water in SUMMARY_LOW_WATERS:
        options = arc_options(window, summary_low_water=summary_low_water)
        total = {"prompt": 0, "prefill": 0, "compactions": 0, "t": 0.0, "t_cached": 0.0}
        missed = 0
        for trajectory in trajectories:
            row = costs(replay("arc", trajectory, window, counter, options), window)
            for key in total:
                total[key] += row[key]
            theirs = others[trajectory.name]
            missed += (fits[trajectory.name] and row["t_cached"] > theirs["full_context"]["t_cached"]) or any(
                row["t_cached"] > theirs[name]["t_cached"] for name in BOUNDED)
        row = costs(replay("arc", long, window, counter, options), window)
        missed += row["t_cached"] > window_long["t_cached"]
        five[summary_low_water], longer[summary_low_water] = total["t_cached"], row["t_cached"]
        misses[summary_low_water] = misses.get(summary_low_water, 0) + missed
        print(f"  {summary_low_water:>10} {int(total['prompt']):>10,} {int(total['prefill']):>9,}"
              f" {int(total['compactions']):>4} {total['t']:>7.3f} {total['t_cached']:>7.3f} {missed:>6} |"
              f" {100 * row['compactions'] / steps:>8.1f} {row['prompt'] / max(row['requests'], 1):>11,.0f}"
              f" {row['prefill'] / max(row['requests'], 1):>12,.0f} {row['t_cached']:>8.3f}")
    for block in (five, longer):
        best = min(block.values())
        for setting, value in block.items():
            scores.setdefault(setting, []).append(value / best)


SECTIONS = ("main", "tradeoff", "long", "summary", "prices")
FORMATS = ("o200k", "qwen3")


def comma_choices(known: Sequence[str]) -> Callable[[str], list[str]]:
    """The argparse ``type`` of a comma-separated list of names out of ``known`` (a usage error names the others)."""

    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [name for name in names if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(map(repr, unknown))}: give a comma-separated list"
                                             f" of {', '.join(known)}")
        return names

    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the trajectories' directory (default: ../shared/data/trajectories; skipped when absent)")
    parser.add_argument("--windows", type=comma_choices(tuple(WINDOWS)), default="16k,32k",
                        help=f"comma-separated: {', '.join(WINDOWS)}")
    parser.add_argument("--formats", type=comma_choices(FORMATS), default="o200k,qwen3",
                        help=f"comma-separated: {', '.join(FORMATS)} (qwen3 needs ../shared/data/qwen3-tokenizer)")
    parser.add_argument("--sections", type=comma_choices(SECTIONS), default="main,tradeoff,long",
                        help="comma-separated: main, tradeoff, long, summary (S's low-water marks), prices (each"
                             " cost fold's price against the roofline's charge)")
    parser.add_argument("--long-steps", type=integer_parser(1, 1_000_000), default=500,
                        help="steps of the synthetic trajectory of sections long and summary (1 to 1000000)")
    arguments = parser.parse_args()
    if arguments.data is None and not DATA_DIR.is_dir():
        print(f"skipped: no trajectory data at {DATA_DIR} (it ships in ../shared/data/trajectories)")
        return 0
    data = DATA_DIR if arguments.data is None else arguments.data
    if not data.is_dir():
        parser.error(f"--data {str(data)!r} is not a directory")
    sections = arguments.sections
    try:
        trajectories = load_all(data)
    except TrajectoryError as unreadable:
        parser.error(str(unreadable))
    if not trajectories:
        parser.error(f"no trajectories (*.jsonl, *.traj) in {data}")
    available = formats()
    chosen = [name for name in arguments.formats if name in available]
    missing = [name for name in arguments.formats if name not in available]
    if not chosen:
        parser.error(f"no counting left to run: --formats {','.join(missing)} needs {QWEN3_DIR}/tokenizer.json")
    if missing:
        print(f"skipped counting {', '.join(missing)}: no tokenizer at {QWEN3_DIR}")
    print(f"{len(trajectories)} trajectories from {data}; {sum(len(t.steps) + 1 for t in trajectories)}"
          " agent calls per method and setting")
    all_exact = True
    all_missed: list[str] = []
    scores: dict[tuple[int, str], list[float]] = {}
    misses: dict[tuple[int, str], int] = {}
    summary_scores: dict[int, list[float]] = {}
    summary_misses: dict[int, int] = {}
    started = time.perf_counter()
    for counting in chosen:
        tokenizer, chat_format = available[counting]
        counter = make_counter(tokenizer, chat_format)
        for window in arguments.windows:
            model_name, hardware_name, gpus = ROOFLINE[window]
            print(f"\n== {window}, {counting} (roofline {model_name} on {gpus} x {hardware_name}; ARC's prefill_cost"
                  f" {prefill_cost(window)}) ==")
            if "main" in sections:
                exact, missed = main_section(trajectories, window, counter)
                all_exact &= exact
                all_missed.extend(f"{window} {counting} {line}" for line in missed)
            if "tradeoff" in sections:
                tradeoff_section(trajectories, window, counter, scores, misses)
            if "long" in sections:
                long_section(trajectories, window, counter, arguments.long_steps)
            if "prices" in sections:
                prices_section(trajectories, window, counter)
            if "summary" in sections:
                summary_section(trajectories, window, counter, arguments.long_steps, summary_scores, summary_misses)
    if scores:
        ranked = sorted(scores.items(), key=lambda item: sum(item[1]) / len(item[1]))
        print("\nARC's settings by T$ over every block (mean of T$ / the block's best; trajectories missing a T$"
              " target, all blocks):")
        for (low_water, trigger), values in ranked:
            print(f"  low_water {low_water:>3}, trigger {trigger:<7}: {sum(values) / len(values):.4f}"
                  f"  missed {misses[(low_water, trigger)]}")
        (low_water, trigger), _ = ranked[0]
        fewest = min(misses.values())
        (safe_water, safe_trigger), _ = next(item for item in ranked if misses[item[0]] == fewest)
        print(f"least T$ by measurement: low_water {low_water}, trigger {trigger} (missing {misses[ranked[0][0]]}"
              f" targets); the least T$ among the settings missing the fewest targets ({fewest}): low_water"
              f" {safe_water}, trigger {safe_trigger}. The shipped default (arc_ref.config): low_water"
              f" {DEFAULT_LOW_WATER}, trigger"
              f" {f'm={DEFAULT_EXPECTED_COMPLETION}' if DEFAULT_EXPECTED_COMPLETION else 'agent'}")
    if summary_scores:
        ranked_summary = sorted(summary_scores.items(), key=lambda item: sum(item[1]) / len(item[1]))
        print("\nS's low-water marks by T$ over every block, five trajectories and the long run (mean of T$ / the"
              " block's best; targets missed, all blocks):")
        for summary_low_water, values in ranked_summary:
            print(f"  summary_low_water {summary_low_water:>3}: {sum(values) / len(values):.4f}"
                  f"  missed {summary_misses[summary_low_water]}")
        fewest = min(summary_misses.values())
        largest = max(mark for mark, missed in summary_misses.items() if missed == fewest)
        print(f"least T$ by measurement: summary_low_water {ranked_summary[0][0]} (a smaller S always costs less;"
              f" what S tells the agent is not measured here); the largest mark among those missing the fewest"
              f" targets ({fewest}), so keeping the most of S that costs no target: {largest}. The shipped default"
              f" (arc_ref.config): {DEFAULT_SUMMARY_LOW_WATER}")
    print(f"\n{time.perf_counter() - started:.0f} s")
    if "main" in sections:
        print("targets: " + ("all met" if not all_missed else f"{len(all_missed)} missed in all"))
    print("every observation recovered byte for byte" if all_exact else "SOME OBSERVATIONS DIFFER")
    return 0 if all_exact else 1


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_trajectories"))
