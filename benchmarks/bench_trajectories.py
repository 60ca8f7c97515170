"""Real agent runs replayed through the six methods: prompt tokens, prefix-cache prefill, roofline cost, recall.

    python benchmarks/bench_trajectories.py [--data ../shared/data/trajectories] [--windows 16k,32k]
                                            [--formats o200k,qwen3] [--calls]

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
* ``served``: calls answered / agent calls (full context's calls over L are not served and cost nothing);
* ``>full``: agent calls where the method's prompt is longer than full context's, counted where full fits;
  ``>f+o``: longer than full context's plus the method's fixed overhead (its first prompt minus full's: for
  ARC its instructions);
* ``HBM GB``: the roofline's decode traffic (``arc_eval.analysis.roofline``, Qwen3-8B at 16k, Qwen3-32B on
  two H200 at 32k, the presets of the paper), and ``T s`` / ``T$ s``: its total time without and with
  prefix caching (decode reads the whole KV in both; prefill costs the uncached tokens only with caching).

Costs are over the calls each method got answered. Ratios compare ARC with full context on the same run.
Finally every observation ARC stored comes back byte for byte through ``_recall-start`` / ``_recall-next``.
The issue's "before" figures come from running this same script with PYTHONPATH at the old tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from arc_eval.analysis.presets import hardware_preset, model_preset
from arc_eval.analysis.roofline import trajectory_cost
from arc_eval.agent.scripted import ScriptedBackend
from arc_eval.counting import TokenCounter, make_counter
from arc_eval.methods import make_method, method_names
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import system_prompt
from arc_eval.types import ChatReply, ChatRequest, ContextOverflow, Message, Observation
from arc_ref.machine import AgentTurn, agent_turn
from arc_ref.recall import reassemble
from arc_ref.recall import chunk_count
from arc_ref.render import agent_message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trajectories import DATA_DIR, Trajectory, load_all  # noqa: E402

QWEN3_DIR = DATA_DIR.parent / "qwen3-tokenizer"
WINDOWS = {"16k": 16384, "32k": 32768}
MAX_TOKENS = 4096
# the paper's serving setups: Qwen3-8B on one H200 at 16k, Qwen3-32B on two H200 at 32k
ROOFLINE = {"16k": ("qwen3-8b", "h200", 1), "32k": ("qwen3-32b", "h200", 2)}
SHORT = {"full_context": "full", "sliding_window": "window", "llm_summary": "summary",
         "structured_state": "state", "rag_memory": "rag", "arc": "arc"}


def formats() -> dict[str, tuple[str, str]]:
    found = {"o200k": ("o200k_base", "chatml")}
    if (QWEN3_DIR / "tokenizer.json").is_file():
        found["qwen3"] = (f"hf-dir:{QWEN3_DIR}", "template")
    return found


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

    def __init__(self, name: str, settings: MethodSettings, backend: ScriptedBackend) -> None:
        self.name = name
        self.settings = settings
        self.method = make_method(name, settings)
        self.backend = backend
        self.counter = settings.counter
        self.previous: list[int] = []
        self.requests: list[tuple[int, int, int]] = []  # (prompt, completion, cached) of served requests
        self.agent_prompts: list[int | None] = []  # per agent call: its prompt tokens, None when not served

    def serve(self, messages: Sequence[Message], completion: int) -> int | None:
        """Account one request: None when it is over L (a server rejects it before any prefill)."""
        tokens = self.counter.count(messages)
        if tokens > self.settings.usable_tokens:
            return None
        ids = self.counter.tokenizer.encode(self.counter.render(messages))
        cached = common_prefix(self.previous, ids)
        self.previous = ids
        self.requests.append((tokens, completion, min(cached, tokens)))
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
            if step is None:
                break
            self.method.record_agent(step.thought, step.action)
            self.method.record_observation(step.action, Observation(step.observation, step.returncode))


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


def measure(trajectory: Trajectory, window: str, counter: TokenCounter) -> dict[str, Any]:
    """``counter``: the one counter of this counting, shared by the methods and the backend (as a run's is)."""
    settings = MethodSettings(context_limit=WINDOWS[window], max_tokens=MAX_TOKENS, counter=counter)
    model_name, hardware_name, gpus = ROOFLINE[window]
    model, hardware = model_preset(model_name), dataclasses.replace(hardware_preset(hardware_name), n_gpu=gpus)
    results: dict[str, Any] = {}
    replays = {}
    for name in method_names():
        backend = ScriptedBackend(context_limit=10**7, counter=counter)
        replay = Replay(name, settings, backend)
        asyncio.run(replay.run(trajectory))
        replays[name] = replay
        plain = trajectory_cost([(p, m) for p, m, _ in replay.requests], model, hardware)
        cached = trajectory_cost(replay.requests, model, hardware)
        results[name] = {
            "prompt": sum(p for p, _, _ in replay.requests),
            "prefill": sum(p - c for p, _, c in replay.requests),
            "served": sum(1 for p in replay.agent_prompts if p is not None),
            "calls": len(replay.agent_prompts),
            "hbm": plain.decode_bytes / 1e9,
            "t": plain.t_total,
            "t_cached": cached.t_total,
        }
    full = replays["full_context"].agent_prompts
    for name, replay in replays.items():
        # a method's fixed overhead: its first prompt (no history yet) minus full context's (ARC: its instructions)
        overhead = (replay.agent_prompts[0] or 0) - (full[0] or 0)
        pairs = [(own, theirs) for own, theirs in zip(replay.agent_prompts, full) if theirs is not None and own is not None]
        results[name]["over_full"] = sum(1 for own, theirs in pairs if own > theirs)
        results[name]["over_full_overhead"] = sum(1 for own, theirs in pairs if own > theirs + max(overhead, 0))
        results[name]["overhead"] = overhead
    results["arc"]["exact"] = recall_exact(replays["arc"])
    results["_needs_compaction"] = any(p is None for p in full)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA_DIR)
    parser.add_argument("--windows", default="16k,32k")
    parser.add_argument("--formats", default="o200k,qwen3")
    arguments = parser.parse_args()
    if not arguments.data.is_dir():
        print(f"skipped: no trajectory data at {arguments.data} (it ships in ../shared/data/trajectories)")
        return 0
    trajectories = load_all(arguments.data)
    available = formats()
    chosen = [name for name in arguments.formats.split(",") if name in available]
    missing = [name for name in arguments.formats.split(",") if name not in available]
    if missing:
        print(f"skipped counting {', '.join(missing)}: no tokenizer at {QWEN3_DIR}")
    print(f"{len(trajectories)} trajectories from {arguments.data}; {sum(len(t.steps) + 1 for t in trajectories)}"
          " agent calls per method and setting")
    all_exact = True
    started = time.perf_counter()
    for counting in chosen:
        tokenizer, chat_format = available[counting]
        counter = make_counter(tokenizer, chat_format)
        for window in arguments.windows.split(","):
            model_name, hardware_name, gpus = ROOFLINE[window]
            print(f"\n== {window}, {counting} (roofline {model_name} on {gpus} x {hardware_name}) ==")
            print(f"{'trajectory':<34} {'method':<8} {'prompt':>10} {'prefill':>10} {'served':>8} {'>full':>5}"
                  f" {'>f+o':>5} {'HBM GB':>8} {'T s':>8} {'T$ s':>8}")
            totals: dict[str, dict[str, float]] = {}
            for trajectory in trajectories:
                results = measure(trajectory, window, counter)
                label = f"{trajectory.name[:26]}{'' if results['_needs_compaction'] else ' (fits)'}"
                for name in method_names():
                    row = results[name]
                    total = totals.setdefault(name, {"prompt": 0, "prefill": 0, "hbm": 0.0, "t": 0.0,
                                                     "t_cached": 0.0, "over_full": 0, "over_full_overhead": 0})
                    for key in total:
                        total[key] += row[key]
                    print(f"{label:<34} {SHORT[name]:<8} {row['prompt']:>10,} {row['prefill']:>10,}"
                          f" {row['served']:>3}/{row['calls']:<4} {row['over_full']:>5} {row['over_full_overhead']:>5}"
                          f" {row['hbm']:>8.2f}"
                          f" {row['t']:>8.3f} {row['t_cached']:>8.3f}")
                exact, stored = results["arc"]["exact"]
                all_exact &= exact == stored
                arc, full = results["arc"], results["full_context"]
                print(f"{'':<34} arc/full prompt {arc['prompt'] / full['prompt']:.3f}, prefill"
                      f" {arc['prefill'] / full['prefill']:.2f}x; ARC's overhead {arc['overhead']} tokens;"
                      f" recall byte-exact {exact}/{stored}")
            for name in method_names():
                total = totals[name]
                print(f"{'all five':<34} {SHORT[name]:<8} {int(total['prompt']):>10,} {int(total['prefill']):>10,}"
                      f" {'':>8} {int(total['over_full']):>5} {int(total['over_full_overhead']):>5}"
                      f" {total['hbm']:>8.2f} {total['t']:>8.3f}"
                      f" {total['t_cached']:>8.3f}")
    print(f"\n{time.perf_counter() - started:.0f} s")
    print("every observation recovered byte for byte" if all_exact else "SOME OBSERVATIONS DIFFER")
    return 0 if all_exact else 1


if __name__ == "__main__":
    sys.exit(main())
