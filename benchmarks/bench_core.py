"""Per-step cost of the core against the number of stored observations, and the cost of a view.

    python benchmarks/bench_core.py [--big 100000] [--small 100] [--steps 400]

Prints, measured in one run:
- time per step (agent turn + observe + view) with SMALL and with BIG observations already stored,
  and their ratio (target <= 1.2: a step must not grow with history);
- time to build a view at both sizes, and with a configuration whose K is twice as large (a view is
  O(K), whatever N is);
- how many times the tokenizer reads a stored observation's content: once, when it is stored.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from arc_ref.config import Config, preset
from arc_ref.machine import AgentTurn, ArcState, Observe, agent_turn, init, observe, view
from arc_ref.options import integer_parser

MOST_STORED = 10_000_000  # the capacity, --big + 2 x --steps + 10, stays below the core's 2^31 - 1
MOST_STEPS = 1_000_000
WIDE_FILL = 400  # observations of the states whose K is doubled (any --big)

WORDS = ("def", "return", "self", "import", "class", "the", "file", "line", "error", "0", "1", "None", "->")


def make_texts(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(rng.randint(5, 60))]
        texts.append("\n".join(lines))
    return texts


def fill(state: ArcState, count: int, texts: list[str], progress: bool) -> ArcState:
    started = time.perf_counter()
    for i in range(count):
        state, _ = agent_turn(state, AgentTurn("look at the next file", f"cat file_{i}.py"))
        state, _ = observe(state, Observe(f"cat file_{i}.py", texts[i % len(texts)], 0))
        if progress and i and i % 10000 == 0:
            rate = i / (time.perf_counter() - started)
            print(f"  filled {i:,} observations ({rate:,.0f}/s)", file=sys.stderr, flush=True)
    return state


def one_step(state: ArcState, n: int, texts: list[str]) -> tuple[float, ArcState]:
    t0 = time.perf_counter()
    state, _ = agent_turn(state, AgentTurn("look at the next file", f"cat file_{n}.py"))
    state, _ = observe(state, Observe(f"cat file_{n}.py", texts[n % len(texts)], 0))
    view(state)
    return time.perf_counter() - t0, state


def time_interleaved(small: ArcState, big: ArcState, steps: int, texts: list[str]) -> tuple[float, float]:
    """Median seconds per step (agent turn + observe + view) of each state, the two states taking turns
    step by step on the same inputs so that machine noise falls on both alike."""
    small_samples, big_samples = [], []
    for i in range(steps):
        n = 10**7 + i
        seconds, small = one_step(small, n, texts)
        small_samples.append(seconds)
        seconds, big = one_step(big, n, texts)
        big_samples.append(seconds)
    return statistics.median(small_samples), statistics.median(big_samples)


def time_call(function: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        function()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=integer_parser(1, MOST_STORED), default=100,
                        help=f"observations stored in the small state (1 to {MOST_STORED:,})")
    parser.add_argument("--big", type=integer_parser(1, MOST_STORED), default=100_000,
                        help=f"observations stored in the big state (--small to {MOST_STORED:,})")
    parser.add_argument("--steps", type=integer_parser(1, MOST_STEPS), default=400,
                        help=f"steps timed on each state (1 to {MOST_STEPS:,})")
    parser.add_argument("--preset", default="paper", choices=("paper", "minimal"))
    arguments = parser.parse_args()
    if arguments.big < arguments.small:
        parser.error(f"--big ({arguments.big}) must be at least --small ({arguments.small})")

    config: Config = preset(arguments.preset, capacity=max(arguments.big, WIDE_FILL) + arguments.steps * 2 + 10)
    texts = make_texts(64)
    print(f"preset {arguments.preset} (tokenizer {config.tokenizer}), observations of "
          f"{min(map(len, texts))}-{max(map(len, texts))} characters")

    small = fill(init(config), arguments.small, texts, progress=False)
    print(f"filling {arguments.big:,} observations ...", file=sys.stderr, flush=True)
    big = fill(small, arguments.big - arguments.small, texts, progress=True)

    per_step_small, per_step_big = time_interleaved(small, big, arguments.steps, texts)
    print(f"step (agent + observe + view), median of {arguments.steps}, the two states interleaved:")
    print(f"  {arguments.small:>9,} stored: {per_step_small * 1e6:9.1f} us")
    print(f"  {arguments.big:>9,} stored: {per_step_big * 1e6:9.1f} us")
    print(f"  ratio big/small: {per_step_big / per_step_small:.3f}  (target <= 1.2)")

    view_small = time_call(lambda: view(small), 200)
    view_big = time_call(lambda: view(big), 200)
    text_small = time_call(lambda: view(small).text(), 200)
    text_big = time_call(lambda: view(big).text(), 200)
    print("view build, median of 200:")
    print(f"  {arguments.small:>9,} stored: {view_small * 1e6:8.1f} us (+ text: {text_small * 1e6:.1f} us), "
          f"{view(small).tokens} tokens")
    print(f"  {arguments.big:>9,} stored: {view_big * 1e6:8.1f} us (+ text: {text_big * 1e6:.1f} us), "
          f"{view(big).tokens} tokens")
    print(f"  ratio big/small: {view_big / view_small:.3f}")

    doubled = config.replace(
        context_limit=config.context_limit * 2, summary_budget=config.summary_budget * 2,
        recent_budget=config.recent_budget * 2, page_budget=config.page_budget * 2,
        page_size=config.page_size * 2, recall_budget=config.recall_budget * 2,
    )
    wide = fill(init(doubled), WIDE_FILL, texts, progress=False)
    wide, _ = agent_turn(wide, AgentTurn("read", f"_recall {wide.records[3].obs_id}\n_recall-next {wide.records[3].obs_id}"))
    narrow = fill(init(config), WIDE_FILL, texts, progress=False)
    narrow, _ = agent_turn(narrow, AgentTurn("read", f"_recall {narrow.records[3].obs_id}\n_recall-next {narrow.records[3].obs_id}"))
    text_narrow = time_call(lambda: view(narrow).text(), 300)
    text_wide = time_call(lambda: view(wide).text(), 300)
    print("view text at the same N, K doubled (a view is O(K)):")
    print(f"  K = {narrow.setup.budget:>6}: {text_narrow * 1e6:8.1f} us, view {view(narrow).tokens} tokens")
    print(f"  K = {wide.setup.budget:>6}: {text_wide * 1e6:8.1f} us, view {view(wide).tokens} tokens")

    counted: list[int] = []
    tokenizer = big.setup.tokenizer
    probe = "PROBE " + texts[0]
    originals = {name: getattr(tokenizer, name) for name in ("count", "count_and_starts", "encode", "token_starts")}

    def spying(name: str) -> Callable[..., object]:
        def tokenizing(text: str, *rest: object) -> object:
            if probe in text:
                counted.append(len(text))
            return originals[name](text, *rest)
        return tokenizing

    for name in originals:
        setattr(tokenizer, name, spying(name))
    try:
        probed, _ = observe(big, Observe("cat probe.txt", probe, 0))
        for _ in range(5):
            probed, _ = agent_turn(probed, AgentTurn("next", "ls"))
            view(probed)
    finally:
        for name in originals:
            delattr(tokenizer, name)
    exact = sum(1 for length in counted if length == len(probe))
    print("tokenizations of one stored observation (content of "
          f"{len(probe)} chars): {exact} as the record's n_j (with its chunk cuts), "
          f"{len(counted) - exact} inside its rendered H message, then none over 5 more steps")
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_core"))
