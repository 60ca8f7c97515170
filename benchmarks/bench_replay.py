"""`arc-ref replay` against its floor: time and peak memory as ratios, measured side by side in one run.

    python benchmarks/bench_replay.py [--sizes 10000 30000 100000] [--repeat 2] [--baseline-python PY]
                                      [--replay-args --verify] [--breakdown]

For each size, a synthetic trace is written (paper preset, o200k_base; observations of 60-30,000
characters, log-uniform, mostly ASCII words with some 'é' and '中'; agent turns with normal actions,
recalls and catalog commands; compactions; a view every ten events). Then, each in a fresh interpreter
and taking turns (replay, floor, replay, floor, ...) so that machine noise falls on both alike:

- replay: `arc-ref replay TRACE` (arc_ref.frontends.cli.main), its output written to a file;
- floor: what any replay must do at least: read and parse every line (json.loads), count every
  observation's tokens once (o200k_base; a non-ASCII text is counted through its UTF-8 bytes, so no
  second copy stays on the string), hold every observation once as a Python str, and write the
  output lines (the replay's own output, read back from its file: the floor pays for writing them,
  not for producing them). In tool mode (``--mode tools``, Qwen3's template) the floor counts each new
  message once with the fastest exact encoder there is, the one the replay itself uses
  (`HuggingFaceTokenizer.count`: tiktoken's fast engine on ASCII texts without added tokens, spec/rendering.md
  section 2, and ``tokenizers`` elsewhere), so the ratio falls only when ARC's own work does, not because its
  encoder got faster; the same encodes through ``tokenizers`` alone are timed after its clock and printed beside.

Start-up (interpreter, arc_ref, the tokenizer and, for a Qwen3 file, its fast engine, built at once as a server
builds it; `arc-ref replay` alone would build it after its first MiB of ASCII text) is left out of every child's clock and, where Linux lets a process reset its peak (/proc/self/clear_refs),
of its peak memory (the memory start-up freed is first handed back, glibc's malloc_trim, so that the work's own
allocations show); its seconds are printed beside each size ("start-up s").

Each child measures itself after start-up (interpreter, arc_ref and the tokenizer loaded): seconds of
work (wall clock and CPU time) and peak resident memory above its own start-up (ru_maxrss). Printed per
size: events/s, median seconds of each, the time ratios replay/floor (medians of the per-round ratios;
the CPU-time ratio is the steadier one on a machine shared with other work), the memory ratio
replay/floor (floor memory ~ the payload held once as str), and the SHA-256 of the replay output.
``--baseline-python PYTHON`` replays with another interpreter too, in every round (e.g. a virtual
environment whose arc_ref is the code before a change): its figures are printed beside, measured in the
same run, and its output must be byte-identical (the output is a contract).
``--breakdown`` adds one more replay per round, timed from inside (the tokenizer's and the id scheme's
methods wrapped), beside that round's floor: the time of the observations' counts with their chunk cuts, of every other text's
count, of the fingerprints, of the view text's JSON escaping and (tool mode) of the served template's renders,
against the floor's own encode time, and what is left beyond the floor's own parsing and writing (the state
machine's Python), each in multiples of the floor's CPU time; "the work the output needs" is the floor plus those
extras, renders left out (they are how a served template's places are counted, not text the output holds).
Targets (issue 12): time ratio <= 2 at 30,000 and 100,000 events; memory ratio <= 1.25; (issue 28) time
ratio <= 1.5 at 30,000 events (text mode).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MOST_EVENTS = 10_000_000  # a trace's capacity, events + 1, stays below the core's 2^31 - 1
WORDS = ("def", "return", "self", "import", "class", "the", "file", "line", "error", "0", "1", "None", "->", "é", "中")
SMALLEST, LARGEST = 60, 30_000

# Each child's start of measurement: the memory start-up freed (e.g. building a tokenizer's engine) handed back to the
# system and the peak reset (Linux), so that the work's own peak shows; then the resident size it starts from.
_PEAK_FROM_HERE = r"""import ctypes, gc
gc.collect()
try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
except (OSError, AttributeError):
    pass
try:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
except OSError:
    pass
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

_REPLAY_CHILD = r"""
import json, resource, sys, time
try:
    from arc_ref.frontends import cli
except ImportError:  # a baseline checkout from before the front ends moved (issue 29)
    from arc_ref import cli
import arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
trace, stats, tokenizer_name, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
began = time.perf_counter()
tokenizer = get_tokenizer(tokenizer_name)
getattr(tokenizer, "build_fast_engine", lambda: None)()  # as a server would at start (a checkout before it: none)
tokenizer.count("start-up: the tokenizer's engines are built before the clock starts")
engine = time.perf_counter() - began  # loading and, where the tokenizer has one, building its fast engine
#PEAK_FROM_HERE#
started, cpu = time.perf_counter(), time.process_time()
code = cli.main(["replay", trace, *extra])
sys.stdout.flush()
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(stats, "w") as out:
    json.dump({"seconds": seconds, "cpu": cpu, "start_kib": start_rss, "peak_kib": peak, "code": code,
               "start_s": engine}, out)
"""

_TOOL_FLOOR_CHILD = r"""
import json, resource, sys, time
import arc_ref.frontends.cli, arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
trace, expected, stats, tokenizer_name = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
tokenizer = get_tokenizer(tokenizer_name)
tokenizer.build_fast_engine()  # built before the clock starts, as in the replay's child
count = tokenizer.count  # the replay's own exact encoder: its fast engine where it takes a text
#PEAK_FROM_HERE#
started, cpu = time.perf_counter(), time.process_time()
held, turns, tokens, encoding, clock = [], [], 0, 0.0, time.process_time
out = sys.stdout.buffer
with open(trace, "rb") as lines, open(expected, "rb") as outputs:
    for line in lines:
        event = json.loads(line)
        op = event.get("op")
        if op == "tool_result" or op == "user":
            text = event["observation" if op == "tool_result" else "content"]
            began = clock()
            tokens += count(text)
            encoding += clock() - began
            held.append(text)
        elif op == "tool_turn":
            text = event["thought"] + "".join(call["function"]["name"] + call["function"]["arguments"]
                                              for call in event.get("calls", ()))
            began = clock()
            tokens += count(text)
            encoding += clock() - began
            turns.append(text)
        out.write(outputs.readline())
out.flush()
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
# after the clock: the same encodes through tokenizers alone (what the floor cost before the fast engine), and
# their count, which must be the same
slow = get_tokenizer(tokenizer_name)._tokenizer.encode
began = clock()
slow_tokens = sum(len(slow(text, add_special_tokens=False)) for text in held + turns)
slow_cpu = clock() - began
assert slow_tokens == tokens, (slow_tokens, tokens)
with open(stats, "w") as stats_out:
    json.dump({"seconds": seconds, "cpu": cpu, "start_kib": start_rss, "peak_kib": peak, "tokens": tokens,
               "encode_cpu": encoding, "payload_bytes": sum(sys.getsizeof(text) for text in held),
               "payload_chars": sum(len(text) for text in held), "tokenizers_encode_cpu": slow_cpu}, stats_out)
"""

_FLOOR_CHILD = r"""
import json, resource, sys, time
import arc_ref.frontends.cli, arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
get_tokenizer("o200k_base")
trace, expected, stats = sys.argv[1], sys.argv[2], sys.argv[3]
encoding = get_tokenizer("o200k_base")._encoding
count_str, count_bytes = encoding.encode_ordinary, encoding._encode_bytes
#PEAK_FROM_HERE#
started, cpu = time.perf_counter(), time.process_time()
held, tokens, encoding, clock = [], 0, 0.0, time.process_time
out = sys.stdout.buffer
with open(trace, "rb") as lines, open(expected, "rb") as outputs:
    for line in lines:
        event = json.loads(line)
        if event.get("op") == "observe":
            text = event["observation"]
            began = clock()
            tokens += len(count_str(text) if text.isascii() else count_bytes(text.encode("utf-8")))
            encoding += clock() - began
            held.append(text)
        out.write(outputs.readline())
out.flush()
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(stats, "w") as stats_out:
    json.dump({"seconds": seconds, "cpu": cpu, "start_kib": start_rss, "peak_kib": peak, "tokens": tokens,
               "encode_cpu": encoding, "payload_bytes": sum(sys.getsizeof(text) for text in held),
               "payload_chars": sum(len(text) for text in held)}, stats_out)
"""

_BREAKDOWN_CHILD = r"""
import json, sys, time
from arc_ref.frontends import cli
import arc_ref.ids, arc_ref.machine, arc_ref.store, arc_ref.templates, arc_ref.tokenizers, arc_ref.trace
from arc_ref.tokenizers import get_tokenizer
trace, stats, tokenizer_name = sys.argv[1], sys.argv[2], sys.argv[3]
clock = time.process_time  # CPU time: steadier than the wall clock on a shared machine
spent = {"observations": 0.0, "other_texts": 0.0, "fingerprints": 0.0, "escaping": 0.0, "renders": 0.0}
depth = [0]

def timed(function, kind):
    def wrapper(*arguments):
        if depth[0]:  # inside another timed call: counted there
            return function(*arguments)
        depth[0] += 1
        began = clock()
        try:
            return function(*arguments)
        finally:
            spent[kind] += clock() - began
            depth[0] -= 1
    return wrapper

tokenizer_class = type(get_tokenizer(tokenizer_name))
tokenizer_class.count_and_starts = timed(tokenizer_class.count_and_starts, "observations")
tokenizer_class.count = timed(tokenizer_class.count, "other_texts")
tokenizer_class.encode = timed(tokenizer_class.encode, "other_texts")
arc_ref.ids.IdScheme.make = timed(arc_ref.ids.IdScheme.make, "fingerprints")
arc_ref.trace._ESCAPE = timed(arc_ref.trace._ESCAPE, "escaping")
for module in (arc_ref.ids, arc_ref.machine, arc_ref.store, arc_ref.tokenizers):  # a text's UTF-8 form, made once
    module.utf8_bytes = timed(module.utf8_bytes, "observations")  # for its checks, fingerprint and encode (the floor
    # encodes each observation to UTF-8 inside its timed encode); inside another timed call it is counted there
arc_ref.templates.ChatTemplate.render_parts = timed(arc_ref.templates.ChatTemplate.render_parts, "renders")
started = clock()
code = cli.main(["replay", trace])
sys.stdout.flush()
spent["cpu"] = clock() - started
with open(stats, "w") as out:
    json.dump(spent, out)
"""


_REPLAY_CHILD, _TOOL_FLOOR_CHILD, _FLOOR_CHILD = (child.replace("#PEAK_FROM_HERE#\n", _PEAK_FROM_HERE)
                                                 for child in (_REPLAY_CHILD, _TOOL_FLOOR_CHILD, _FLOOR_CHILD))


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


BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run one shell command and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def tool_call(number: int, name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {"id": f"call_{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def write_tool_trace(path: Path, events: int, tokenizer: str, seed: int = 11) -> None:
    """A tool-mode trace (Qwen3's template) of ``events`` lines after the config line.

    An agent loop: a tool turn calls bash once (sometimes twice) and each call is answered by a tool_result
    (the same observations as the text-mode trace); some turns call ARC's tools (_recall, _recall-next,
    _recall_meta on ids already stored, catalog-first/-next); a few user messages and compactions; a view
    every ten events.
    """
    from arc_ref.config import preset
    from arc_ref.ids import IdScheme
    from arc_ref.machine import USER_ACTION
    from arc_ref.store import action_signature

    rng = random.Random(seed)
    scheme = IdScheme(events + 1, preset("paper").fingerprint_bits)
    ids: list[str] = []
    pending: list[tuple[str, str]] = []  # (call id, action) of calls waiting for their result
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"op": "config", "preset": "paper", "capacity": events + 1, "tokenizer": tokenizer,
                              "chat_format": "template", "action_mode": "tools", "tools": [BASH_TOOL]}) + "\n")
        for n in range(events):
            roll = rng.random()
            line: dict[str, object]
            if n % 10 == 9:
                line = {"op": "view"}
            elif pending:
                call_id, action = pending.pop(0)
                text = observation_text(rng)
                line = {"op": "tool_result", "call_id": call_id, "observation": text}
                ids.append(scheme.make(len(ids) + 1, action_signature(action), text))
            elif roll < 0.70 or not ids:
                calls = [tool_call(n, "bash", {"command": f"cat file_{n}.py"})]
                if roll < 0.10:
                    calls.append(tool_call(n + events, "bash", {"command": f"wc -l file_{n}.py"}))
                for call in calls:
                    function = call["function"]
                    assert isinstance(function, dict)
                    pending.append((str(call["id"]), f"{function['name']} {function['arguments']}"))
                line = {"op": "tool_turn", "thought": f"Next, file {n}.", "calls": calls}
            elif roll < 0.85:
                word = rng.choice(("_recall", "_recall-next", "_recall_meta"))
                line = {"op": "tool_turn", "thought": "Read it again.",
                        "calls": [tool_call(n, word, {"id": rng.choice(ids)})]}
            elif roll < 0.92:
                word = rng.choice(("catalog-first", "catalog-next"))
                line = {"op": "tool_turn", "thought": "Browse.", "calls": [tool_call(n, word, {})]}
            elif roll < 0.97:
                text = f"Also check file_{n}.py, please."
                line = {"op": "user", "content": text}
                ids.append(scheme.make(len(ids) + 1, action_signature(USER_ACTION), text))
            else:
                line = {"op": "compact", "reason": rng.choice(("forced", "reactive"))}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


def run_child(python: str, code: str, arguments: list[str], stdout: Path, stats: Path) -> dict[str, float]:
    with stdout.open("wb") as out:  # run in the scratch folder: the current folder must not shadow arc_ref
        done = subprocess.run([python, "-c", code, *arguments], stdout=out, check=False, cwd=stats.parent)
    if done.returncode != 0:  # its own message is above, on standard error
        raise SystemExit(f"bench_replay: a child run by {python} ended with status {done.returncode} (its message is"
                         " above); stopped")
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


def _row(label: str, events: int, replays: list[dict[str, float]], floors: list[dict[str, float]], sha: str) -> str:
    """One line of figures: medians of the replays and of the floors they were paired with."""
    wall_ratios = [r["seconds"] / f["seconds"] for r, f in zip(replays, floors)]
    cpu_ratios = [r["cpu"] / f["cpu"] for r, f in zip(replays, floors)]
    replay_mib = statistics.median((r["peak_kib"] - r["start_kib"]) / 1024 for r in replays)
    floor_mib = statistics.median((f["peak_kib"] - f["start_kib"]) / 1024 for f in floors)
    replay_s = statistics.median(r["seconds"] for r in replays)
    floor_s = statistics.median(f["seconds"] for f in floors)
    return (f"{label:<9}{events:>8,} {events / replay_s:>9,.0f} {replay_s:>8.2f} {floor_s:>7.2f} "
            f"{statistics.median(wall_ratios):>6.2f} {statistics.median(cpu_ratios):>6.2f} {replay_mib:>8.1f} "
            f"{floor_mib:>7.1f} {replay_mib / max(floor_mib, 0.1):>6.2f}  {sha}  "
            f"[{', '.join(f'{ratio:.2f}' for ratio in wall_ratios)}]")


_PARTS = (("cuts", "observations' encodes and chunk cuts beyond the floor's encodes"),
          ("other_texts", "other new texts' counts"), ("fingerprints", "fingerprints"),
          ("escaping", "view text escaping"), ("renders", "served template renders (spec/rendering.md 3.1)"),
          ("bookkeeping", "the rest: the state machine's Python, beyond the floor's own parsing and writing"))


def breakdown_parts(spent: dict[str, float], floor: dict[str, float]) -> dict[str, float]:
    """An instrumented replay (`_BREAKDOWN_CHILD`) beside a floor run, in multiples of that floor's CPU time: the replay
    is 1 (the floor's work) + the parts (``_PARTS``); "needed" is 1 + the parts its output holds (renders and
    bookkeeping left out)."""
    floor_s = floor["cpu"]
    timed = ("observations", "other_texts", "fingerprints", "escaping", "renders")
    parts = {kind: spent[kind] / floor_s for kind in timed if kind != "observations"}
    parts["cuts"] = (spent["observations"] - floor["encode_cpu"]) / floor_s
    floor_rest = floor_s - floor["encode_cpu"]  # the floor's parsing and writing
    parts["bookkeeping"] = (spent["cpu"] - sum(spent[kind] for kind in timed) - floor_rest) / floor_s
    parts["total"] = spent["cpu"] / floor_s
    parts["needed"] = 1 + parts["cuts"] + parts["other_texts"] + parts["fingerprints"] + parts["escaping"]
    return parts


def print_breakdown(rounds: list[dict[str, float]]) -> None:
    """Medians over the rounds of `breakdown_parts`."""
    median = {kind: statistics.median(parts[kind] for parts in rounds) for kind in rounds[0]}
    shown = ", ".join(f"{label} {median[kind]:+.2f}" for kind, label in _PARTS if kind != "renders" or median[kind])
    print(f"  breakdown in floors of CPU time (medians of {len(rounds)} instrumented replay(s), each beside its round's "
          f"floor): "
          f"the floor's work 1 + {shown} = x{median['total']:.2f} (instrumented); "
          f"the work the output needs alone: x{median['needed']:.2f}", flush=True)


def measure(events: int, repeat: int, replay_args: list[str], baseline: str | None, scratch: Path,
            tokenizer: str | None = None, with_breakdown: bool = False) -> None:
    """Rounds of (replay, [baseline,] floor) on one trace; ``tokenizer``: a tool-mode trace under that hf-dir
    tokenizer's template (its floor: one encode per new message), else the text-mode trace (o200k_base)."""
    trace = scratch / f"trace_{events}.jsonl"
    if tokenizer is None:
        write_trace(trace, events)
        floor_code, floor_extra, tokenizer_name = _FLOOR_CHILD, [], "o200k_base"
    else:
        write_tool_trace(trace, events, tokenizer)
        floor_code, floor_extra, tokenizer_name = _TOOL_FLOOR_CHILD, [tokenizer], tokenizer
    runs: dict[str, list[dict[str, float]]] = {"replay": [], "baseline": [], "floor": []}
    parts: list[dict[str, float]] = []
    digests: dict[str, set[str]] = {"replay": set(), "baseline": set()}
    pythons = {"replay": sys.executable, "baseline": baseline}
    stats = scratch / "stats.json"
    output = scratch / "replay.jsonl"
    for _ in range(repeat):
        for name in ("replay", "baseline"):
            python = pythons[name]
            if python is None:
                continue
            arguments = [str(trace), str(stats), tokenizer_name, *(replay_args if name == "replay" else [])]
            runs[name].append(run_child(python, _REPLAY_CHILD, arguments, output, stats))
            digests[name].add(digest(output))
        runs["floor"].append(run_child(sys.executable, floor_code,
                                       [str(trace), str(output), str(stats), *floor_extra],
                                       scratch / "floor.jsonl", stats))
        if digest(scratch / "floor.jsonl") != digest(output):
            raise SystemExit("the floor did not write the replay's output")
        if with_breakdown:
            spent = run_child(sys.executable, _BREAKDOWN_CHILD, [str(trace), str(stats), tokenizer_name],
                              scratch / "breakdown.jsonl", stats)
            parts.append(breakdown_parts(spent, runs["floor"][-1]))
    shas = digests["replay"] | digests["baseline"]
    if len(shas) != 1:
        raise SystemExit(f"replays of the same trace wrote different outputs: {sorted(shas)}")
    sha = shas.pop()
    floor = runs["floor"][0]
    start = {name: statistics.median(run.get("start_s", math.nan) for run in runs[name]) for name in runs
             if runs[name] and name != "floor"}
    print(f"{events:,} events: payload {floor['payload_bytes'] / 2**20:.1f} MiB as str "
          f"({floor['payload_chars'] / 1e6:.1f}M characters), load {load()}; start-up s (not timed): "
          + ", ".join(f"{name} {seconds:.2f}" for name, seconds in start.items()), flush=True)
    if "tokenizers_encode_cpu" in floor:
        fast_s = statistics.median(run["encode_cpu"] for run in runs["floor"])
        slow_s = statistics.median(run["tokenizers_encode_cpu"] for run in runs["floor"])
        print(f"  the floor's encodes (CPU s, median): {fast_s:.2f} with the exact encoder it uses, {slow_s:.2f} through"
              f" tokenizers alone (the same counts; measured after its clock)", flush=True)
    print(_row("replay", events, runs["replay"], runs["floor"], sha), flush=True)
    if baseline is not None:
        print(_row("baseline", events, runs["baseline"], runs["floor"], sha), flush=True)
    if parts:
        print_breakdown(parts)


def qwen3_tokenizer() -> str | None:
    """``hf-dir:`` of Qwen3's files in the shared data (proofs_check.shared_data; absolute: the children run in a scratch folder)."""
    sys.path.append(str(Path(__file__).resolve().parent.parent))  # after any other checkout's (a baseline's)
    from proofs_check.shared_data import qwen3_dir

    directory = qwen3_dir()
    return None if directory is None else f"hf-dir:{directory}"


def main() -> int:
    from arc_ref.options import integer_parser

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=integer_parser(1, MOST_EVENTS), nargs="+", default=[10_000, 30_000, 100_000],
                        help=f"events of each trace (1 to {MOST_EVENTS:,})")
    parser.add_argument("--repeat", type=integer_parser(1, 1000), default=2,
                        help="rounds (replay, [baseline,] floor) per size (1 to 1000)")
    parser.add_argument("--mode", choices=("text", "tools"), default="text",
                        help="text: the paper preset under o200k_base; tools: tool mode under Qwen3's template")
    parser.add_argument("--baseline-python", default=None, metavar="PYTHON",
                        help="also replay with this interpreter (another checkout's arc_ref) in every round")
    parser.add_argument("--breakdown", action="store_true",
                        help="one more replay per size, timed from inside: where its time goes against the floor's")
    parser.add_argument("--replay-args", nargs=argparse.REMAINDER, default=[],
                        help="extra arguments for `arc-ref replay` (e.g. --verify); must come last")
    arguments = parser.parse_args()
    if arguments.baseline_python is not None and shutil.which(arguments.baseline_python) is None:
        parser.error(f"--baseline-python {arguments.baseline_python!r} is not an interpreter that can be run")
    tokenizer = None
    if arguments.mode == "tools":
        tokenizer = qwen3_tokenizer()
        if tokenizer is None:
            from proofs_check.shared_data import QWEN3_ABSENT

            print(f"bench_replay: tool mode needs Qwen3's files: {QWEN3_ABSENT}", file=sys.stderr)
            return 2
    described = ("paper preset, o200k_base" if tokenizer is None else
                 "tool mode, paper preset, Qwen3's template and tokenizer (floor: one encode per new message)")
    print(f"{described}, observations of {SMALLEST}-{LARGEST} characters, a view every 10 events; "
          f"{arguments.repeat} round(s) per size; replay args {arguments.replay_args}; "
          f"load average {load()} on {os.cpu_count()} CPUs")
    print(f"{'':<9}{'events':>8} {'events/s':>9} {'replay s':>8} {'floor s':>7} {'time x':>6} {'cpu x':>6} "
          f"{'rep. MiB':>8} {'fl. MiB':>7} {'mem x':>6}  output sha256     [time x per round]")
    with tempfile.TemporaryDirectory() as scratch:
        for events in arguments.sizes:
            measure(events, arguments.repeat, arguments.replay_args, arguments.baseline_python, Path(scratch),
                    tokenizer, arguments.breakdown)
    print("MiB = peak resident memory above the child's own start-up (the floor's ~ the payload held once as str); "
          "time x = wall-clock replay / floor, cpu x = the same in CPU time (steadier on a shared machine), "
          "mem x = replay / floor memory; targets: time <= 1.5 at 30k events (text mode), memory <= 1.25")
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_replay"))
