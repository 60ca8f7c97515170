"""`arc-ref replay` against its floor: time and peak memory as ratios, measured side by side in one run.

    python benchmarks/bench_replay.py [--sizes 10000 30000 100000] [--repeat 2] [--replay-args --verify]

For each size, a synthetic trace is written (paper preset, o200k_base; observations of 60-30,000
characters, log-uniform, mostly ASCII words with some 'é' and '中'; agent turns with normal actions,
recalls and catalog commands; compactions; a view every ten events). Then, each in a fresh interpreter
and taking turns (replay, floor, replay, floor, ...) so that machine noise falls on both alike:

- replay: `arc-ref replay TRACE` (arc_ref.cli.main), its output written to a file;
- floor: what any replay must do at least: read and parse every line (json.loads), count every
  observation's tokens once (o200k_base; a non-ASCII text is counted through its UTF-8 bytes, so no
  second copy stays on the string), hold every observation once as a Python str, and write the
  output lines (the replay's own output, read back from its file: the floor pays for writing them,
  not for producing them).

Each child measures itself after start-up (interpreter, arc_ref and the tokenizer loaded): seconds of
work (perf_counter) and peak resident memory above its own start-up (ru_maxrss). Printed per size:
events/s, median seconds of each, the time ratio replay/floor (median of the per-pair ratios), the
memory ratio replay/floor (floor memory ~ the payload held once as str), the payload as str, and the
SHA-256 of the replay output (equal before and after a change: the output is a contract).
Targets (issue 12): time ratio <= 2 at 30,000 and 100,000 events; memory ratio <= 1.25.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = ("def", "return", "self", "import", "class", "the", "file", "line", "error", "0", "1", "None", "->", "é", "中")
SMALLEST, LARGEST = 60, 30_000

_REPLAY_CHILD = r"""
import json, resource, sys, time
import arc_ref.cli, arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
get_tokenizer("o200k_base")
trace, stats, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
code = arc_ref.cli.main(["replay", trace, *extra])
sys.stdout.flush()
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(stats, "w") as out:
    json.dump({"seconds": seconds, "start_kib": start_rss, "peak_kib": peak, "code": code}, out)
"""

_FLOOR_CHILD = r"""
import json, resource, sys, time
import arc_ref.cli, arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
get_tokenizer("o200k_base")
trace, expected, stats = sys.argv[1], sys.argv[2], sys.argv[3]
encoding = get_tokenizer("o200k_base")._encoding
count_str, count_bytes = encoding.encode_ordinary, encoding._encode_bytes
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
held, tokens = [], 0
out = sys.stdout.buffer
with open(trace, "rb") as lines, open(expected, "rb") as outputs:
    for line in lines:
        event = json.loads(line)
        if event.get("op") == "observe":
            text = event["observation"]
            tokens += len(count_str(text) if text.isascii() else count_bytes(text.encode("utf-8")))
            held.append(text)
        out.write(outputs.readline())
out.flush()
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(stats, "w") as stats_out:
    json.dump({"seconds": seconds, "start_kib": start_rss, "peak_kib": peak, "tokens": tokens,
               "payload_bytes": sum(sys.getsizeof(text) for text in held),
               "payload_chars": sum(len(text) for text in held)}, stats_out)
"""


def observation_text(rng: random.Random) -> str:
    """Log-uniform length in [SMALLEST, LARGEST] characters; lines of 4-16 words."""
    target = int(math.exp(rng.uniform(math.log(SMALLEST), math.log(LARGEST))))
    lines: list[str] = []
    size = 0
    while size < target:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:target]


def write_trace(path: Path, events: int, seed: int = 11) -> None:
    """A trace of ``events`` lines after the config line (recalls name ids already stored)."""
    from arc_ref.config import preset
    from arc_ref.ids import IdScheme
    from arc_ref.store import action_signature

    rng = random.Random(seed)
    scheme = IdScheme(events + 1, preset("paper").fingerprint_bits)
    ids: list[str] = []
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"op": "config", "preset": "paper", "capacity": events + 1}) + "\n")
        for n in range(events):
            roll = rng.random()
            line: dict[str, object]
            if n % 10 == 9:
                line = {"op": "view"}
            elif roll < 0.45 or not ids:
                action = f"cat file_{n}.py"
                text = observation_text(rng)
                line = {"op": "observe", "action": action, "observation": text, "returncode": 0}
                ids.append(scheme.make(len(ids) + 1, action_signature(action), text))
            elif roll < 0.80:
                line = {"op": "agent", "thought": "next file", "action": f"cat file_{n + 1}.py"}
            elif roll < 0.92:
                word = rng.choice(("_recall", "_recall-next", "_recall_meta"))
                line = {"op": "agent", "thought": "re-read", "action": f"{word} {rng.choice(ids)}"}
            elif roll < 0.97:
                line = {"op": "agent", "thought": "browse", "action": rng.choice(("catalog-first", "catalog-next"))}
            else:
                line = {"op": "compact", "reason": rng.choice(("forced", "reactive"))}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


def run_child(code: str, arguments: list[str], stdout: Path, stats: Path) -> dict[str, float]:
    with stdout.open("wb") as out:
        subprocess.run([sys.executable, "-c", code, *arguments], stdout=out, check=True)
    result: dict[str, float] = json.loads(stats.read_text())
    return result


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()[:16]


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def measure(events: int, repeat: int, replay_args: list[str], scratch: Path) -> None:
    trace = scratch / f"trace_{events}.jsonl"
    write_trace(trace, events)
    replays: list[dict[str, float]] = []
    floors: list[dict[str, float]] = []
    digests: set[str] = set()
    for attempt in range(repeat):
        output = scratch / f"replay_{events}_{attempt}.jsonl"
        stats = scratch / "stats.json"
        replays.append(run_child(_REPLAY_CHILD, [str(trace), str(stats), *replay_args], output, stats))
        digests.add(digest(output))
        floors.append(run_child(_FLOOR_CHILD, [str(trace), str(output), str(stats)], scratch / "floor.jsonl", stats))
        if digest(scratch / "floor.jsonl") != digest(output):
            raise SystemExit("the floor did not write the replay's output")
        if attempt:
            output.unlink()
    if len(digests) != 1:
        raise SystemExit(f"replays of the same trace wrote different outputs: {sorted(digests)}")
    time_ratios = [r["seconds"] / f["seconds"] for r, f in zip(replays, floors)]
    replay_mib = statistics.median((r["peak_kib"] - r["start_kib"]) / 1024 for r in replays)
    floor_mib = statistics.median((f["peak_kib"] - f["start_kib"]) / 1024 for f in floors)
    replay_s = statistics.median(r["seconds"] for r in replays)
    floor_s = statistics.median(f["seconds"] for f in floors)
    payload_mib = floors[0]["payload_bytes"] / 2**20
    print(f"{events:>8,} {events / replay_s:>9,.0f} {replay_s:>9.2f} {floor_s:>8.2f} "
          f"{statistics.median(time_ratios):>6.2f} {replay_mib:>9.1f} {floor_mib:>8.1f} {replay_mib / floor_mib:>6.2f} "
          f"{payload_mib:>8.1f} {floors[0]['payload_chars'] / 1e6:>7.1f}M  {digests.pop()}  "
          f"[{', '.join(f'{ratio:.2f}' for ratio in time_ratios)}] load {load()}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--repeat", type=int, default=2, help="replay/floor pairs per size, interleaved")
    parser.add_argument("--replay-args", nargs=argparse.REMAINDER, default=[],
                        help="extra arguments for `arc-ref replay` (e.g. --verify); must come last")
    arguments = parser.parse_args()
    print(f"paper preset, o200k_base, observations of {SMALLEST}-{LARGEST} characters, a view every 10 events; "
          f"{arguments.repeat} replay/floor pair(s) per size, interleaved; replay args {arguments.replay_args}; "
          f"load average {load()} on {os.cpu_count()} CPUs")
    print(f"{'events':>8} {'replay/s':>9} {'replay s':>9} {'floor s':>8} {'time x':>6} {'replay MiB':>9} "
          f"{'floor MiB':>8} {'mem x':>6} {'payload':>8} {'chars':>8}  output sha256    [time x per pair]")
    with tempfile.TemporaryDirectory() as scratch:
        for events in arguments.sizes:
            measure(events, arguments.repeat, arguments.replay_args, Path(scratch))
    print("MiB = peak resident memory above the child's own start-up; payload = the observations held once as str "
          "(sys.getsizeof, MiB); time x and mem x = replay / floor (targets: <= 2 at 30k and 100k events; <= 1.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
