"""Real agent runs through ARC: full-transcript tokens against ARC's view at every call, and exact recall.

    python benchmarks/bench_trajectories.py [--data ../shared/data/trajectories]

For each trajectory in the shared data (OpenHands CodeAct on Multi-SWE-bench, SWE-agent with GPT-4 and
with function calling) and each window (the paper preset at 16k, and a 32k variant), prints per call the
tokens of the full transcript (everything appended, ChatML, o200k_base) and of ARC's active view, then
the largest view, whether the full transcript would have overflowed L, and whether every stored
observation comes back byte for byte through `_recall-start` / `_recall-next`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from arc_ref.config import Config, make_setup, preset
from arc_ref.errors import ConfigError
from arc_ref.machine import AgentTurn, Observe, agent_turn, init, observe, view
from arc_ref.recall import chunk_count
from arc_ref.render import ASSISTANT, USER, agent_message
from arc_ref.view import verify_tokens

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trajectories import DATA_DIR, Trajectory, load_all  # noqa: E402

WINDOWS: dict[str, dict[str, Any]] = {
    "16k": {},  # the paper preset as shipped: L_ctx 16384, G_max 4096
    "32k": {"context_limit": 32768, "summary_budget": 4096, "recent_budget": 12288, "page_budget": 2048,
            "page_size": 16, "recall_budget": 8192, "chunk_tokens": 3968},
}


def configure(goal: str, overrides: dict[str, Any]) -> tuple[Config, str]:
    """The window's config for this goal; shrinks R when a long goal would make K exceed L (and says so)."""
    config = preset("paper", goal=goal, capacity=4096, **overrides)
    try:
        make_setup(config)
        return config, ""
    except ConfigError:
        pass
    loose = make_setup(config.replace(context_limit=10**7))
    available = config.context_limit - config.max_completion - loose.prefix_tokens - config.overhead
    parts = ("summary_budget", "recent_budget", "page_budget", "recall_budget")
    factor = available / sum(getattr(config, name) for name in parts)
    scaled = {name: int(getattr(config, name) * factor) for name in parts}
    scaled["page_size"] = max(1, (scaled["page_budget"] - 64) // config.stub_cap)
    scaled["chunk_tokens"] = max(1, scaled["recall_budget"] // 2 - 64)
    shrunk = config.replace(**scaled)
    make_setup(shrunk)
    changed = ", ".join(f"{name} {value}" for name, value in scaled.items())
    return shrunk, f"budgets scaled by {factor:.2f} to fit a goal of {loose.prefix_tokens} tokens: {changed}"


def run(trajectory: Trajectory, window: str, verbose: bool) -> dict[str, Any]:
    config, note = configure(trajectory.goal, WINDOWS[window])
    state = init(config)
    setup = state.setup
    count = setup.tokenizer.count
    chat = setup.chat
    full = sum(message.tokens for message in state.prefix) + setup.generation_tokens
    rows = []
    for number, step in enumerate(trajectory.steps, start=1):
        shown = view(state)
        exact = verify_tokens(setup, shown)
        rows.append((number, full, exact))
        state, _ = agent_turn(state, AgentTurn(step.thought, step.action))
        state, _ = observe(state, Observe(step.action, step.observation, step.returncode))
        full += count(chat.render_message(ASSISTANT, agent_message(step.thought, step.action)))
        full += count(chat.render_message(USER, step.observation))
    exact_final = verify_tokens(setup, view(state))
    rows.append((len(trajectory.steps) + 1, full, exact_final))
    if verbose:
        print("    call  full-transcript  ARC-view")
        for number, full_tokens, arc_tokens in rows:
            print(f"    {number:>4} {full_tokens:>16,} {arc_tokens:>9,}")
    exact_records = 0
    checked_bytes = 0
    for record in state.records:
        probe, answered = agent_turn(state, AgentTurn("", f"_recall-start {record.obs_id}"))
        payloads = [r.payload for r in answered.recalls]
        for _ in range(chunk_count(record.n_tokens, config.chunk_tokens) - 1):
            probe, answered = agent_turn(probe, AgentTurn("", f"_recall-next {record.obs_id}"))
            payloads.extend(r.payload for r in answered.recalls)
        recovered = "".join(payloads).encode("utf-8")
        if recovered == record.content.encode("utf-8"):
            exact_records += 1
            checked_bytes += len(recovered)
    return {
        "calls": len(rows),
        "full_max": max(r[1] for r in rows),
        "arc_max": max(r[2] for r in rows),
        "arc_mean": sum(r[2] for r in rows) / len(rows),
        "budget": setup.budget,
        "limit": setup.limit,
        "overflow_calls": sum(1 for r in rows if r[1] > setup.limit),
        "records": state.stored,
        "exact_records": exact_records,
        "bytes": checked_bytes,
        "note": note,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA_DIR)
    parser.add_argument("--verbose", action="store_true", help="print every call")
    arguments = parser.parse_args()
    if not arguments.data.is_dir():
        print(f"skipped: no trajectory data at {arguments.data} (it ships in ../shared/data/trajectories)")
        return 0
    trajectories = load_all(arguments.data)
    print(f"{len(trajectories)} trajectories from {arguments.data}")
    all_exact = True
    for trajectory in trajectories:
        for window in WINDOWS:
            print(f"{trajectory.source} {trajectory.name} [{window}]: {len(trajectory.steps)} tool calls")
            result = run(trajectory, window, arguments.verbose)
            all_exact &= result["exact_records"] == result["records"]
            print(
                f"  full transcript max {result['full_max']:,} tokens ({result['overflow_calls']} of "
                f"{result['calls']} calls over L = {result['limit']:,}); ARC view max {result['arc_max']:,}, "
                f"mean {result['arc_mean']:,.0f} (K = {result['budget']:,}); "
                f"recall byte-exact {result['exact_records']}/{result['records']} observations "
                f"({result['bytes']:,} bytes)"
            )
            if result["note"]:
                print(f"  note: {result['note']}")
    print("every observation recovered byte for byte" if all_exact else "SOME OBSERVATIONS DIFFER")
    return 0 if all_exact else 1


if __name__ == "__main__":
    sys.exit(main())
