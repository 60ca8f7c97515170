"""Replay throughput and memory: a synthetic event trace through `arc-ref replay` (paper preset, tiktoken).

    python benchmarks/bench_replay.py [--events 100000] [--sizes 25000 50000 100000]

For each size: writes a trace (observe / agent turns with normal actions, recalls and catalog commands /
compactions / a view every 10 events), replays it in a fresh process with `arc-ref replay`, and prints
events per second, peak resident memory, and the stored payload, so that memory growth can be compared
with payload growth (Theorem claim 6: the archive grows with the payload; the active view does not).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arc_ref.config import preset
from arc_ref.ids import IdScheme

WORDS = ("def", "return", "self", "import", "class", "the", "file", "line", "error", "0", "1", "None", "->", "é", "中")


def write_trace(path: Path, events: int, seed: int = 11) -> int:
    """Write a trace of ``events`` lines after the config line; return the payload characters stored."""
    rng = random.Random(seed)
    payload = 0
    stored = 0
    scheme = IdScheme(events + 1, preset("paper").fingerprint_bits)
    ids: list[str] = []
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"op": "config", "preset": "paper", "capacity": events + 1}) + "\n")
        for n in range(events):
            roll = rng.random()
            if n % 10 == 9:
                line: dict[str, object] = {"op": "view"}
            elif roll < 0.45 or stored == 0:
                size = rng.choice((80, 400, 1500, 4000, 12000))
                words = [rng.choice(WORDS) for _ in range(size // 5)]
                text = " ".join(words)
                line = {"op": "observe", "action": f"cat file_{n}.py", "observation": text, "returncode": 0}
                payload += len(text)
                stored += 1
                ids.append(scheme.make(stored, f"cat file_{n}.py", text))
            elif roll < 0.80:
                line = {"op": "agent", "thought": "next file", "action": f"cat file_{n + 1}.py"}
            elif roll < 0.92:
                target = ids[rng.randint(1, stored) - 1]
                word = rng.choice(("_recall", "_recall-next", "_recall_meta"))
                line = {"op": "agent", "thought": "re-read", "action": f"{word} {target}"}
            elif roll < 0.97:
                line = {"op": "agent", "thought": "browse", "action": rng.choice(("catalog-first", "catalog-next"))}
            else:
                line = {"op": "compact", "reason": rng.choice(("forced", "reactive"))}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return payload


def replay_in_child(trace: Path) -> tuple[float, int, int, int]:
    """Replay in a fresh interpreter; return (seconds, peak RSS KiB, output lines, error lines)."""
    code = (
        "import sys, resource, time\n"
        "from arc_ref.trace import replay_text\n"
        "from arc_ref.tokenizers import get_tokenizer\n"
        "get_tokenizer('o200k_base')\n"
        "t = time.perf_counter(); lines = errors = 0\n"
        "with open(sys.argv[1], encoding='utf-8') as handle:\n"
        "    for line in replay_text(handle):\n"
        "        lines += 1; errors += line.startswith('{\"line\"')\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, lines, errors)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, check=True)
    seconds, rss, lines, errors = done.stdout.split()
    return float(seconds), int(rss), int(lines), int(errors)


def baseline_rss() -> int:
    code = "import resource\nfrom arc_ref.tokenizers import get_tokenizer\nimport arc_ref.trace\nget_tokenizer('o200k_base')\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    arguments = parser.parse_args()
    base = baseline_rss()
    print(f"interpreter + tokenizer loaded: {base / 1024:.1f} MiB resident")
    print(f"{'events':>8} {'seconds':>8} {'events/s':>9} {'peak MiB':>9} {'above base':>10} {'payload MiB':>11} "
          f"{'ratio':>6} {'errors':>6}")
    with tempfile.TemporaryDirectory() as scratch:
        for events in arguments.sizes:
            trace = Path(scratch) / f"trace_{events}.jsonl"
            payload = write_trace(trace, events)
            started = time.perf_counter()
            seconds, rss, lines, errors = replay_in_child(trace)
            _ = time.perf_counter() - started
            assert lines == events + 1, f"replay wrote {lines} lines for {events + 1} input lines"
            above = (rss - base) / 1024
            payload_mib = payload / 2**20
            print(f"{events:>8,} {seconds:>8.1f} {events / seconds:>9,.0f} {rss / 1024:>9.1f} {above:>10.1f} "
                  f"{payload_mib:>11.1f} {above / payload_mib:>6.2f} {errors:>6}")
    print("ratio = resident memory above the baseline / stored payload characters (MiB); a constant ratio means "
          "memory grows with the payload only")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    sys.exit(main())
