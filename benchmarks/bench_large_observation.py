"""Time and peak memory of one large tool result in a Session under Qwen3's `hf-dir` (issue 18, item 6).

    python benchmarks/bench_large_observation.py [--sizes-mb 1 5 50]

Each size runs in a fresh subprocess (so its peak RSS is its own): a tool-mode Session on the served model's
tokenizer and chat template, one environment call, then `add_tool_result` with an observation of that many
MB of log-like text, then `messages()`. It prints the seconds, the peak RSS, the tokenizer encodes of texts
over 10,000 characters (the observation's slices, `arc_ref.tokenizers.SLICE_CHARS`) and how many times its
characters were encoded (1.00: once), and per-MB figures, so the constants can be read off and compared
between sizes (linear time: s/MB flat; memory bounded by one slice: the RSS over start stays flat).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from proofs_check.shared_data import QWEN3_NAME, shared_data_dir

REPO = Path(__file__).resolve().parents[1]
QWEN3_DIR = shared_data_dir() / QWEN3_NAME
LARGE = 10_000  # characters: longer than any header or frame, so an encode of the observation (or a slice)


def observation(size_bytes: int) -> str:
    """Log-like ASCII text of exactly ``size_bytes`` characters (one byte each)."""
    line_count = size_bytes // 40 + 1
    text = "".join(f"{n:08d} INFO worker-{n % 7} request ok in {n % 997} ms\n" for n in range(line_count))
    return text[:size_bytes]


def one_size(size_mb: float) -> dict[str, float]:
    from arc_ref import tokenizers
    from arc_ref.session import Session

    encodes = [0, 0]  # encodes, characters encoded
    original = tokenizers.HuggingFaceTokenizer._encoding

    def counted(self: tokenizers.HuggingFaceTokenizer, text: str) -> object:
        if len(text) > LARGE:
            encodes[0] += 1
            encodes[1] += len(text)
        return original(self, text)

    tokenizers.HuggingFaceTokenizer._encoding = counted  # type: ignore[method-assign]
    text = observation(int(size_mb * 2**20))
    session = Session(f"hf-dir:{QWEN3_DIR}", goal="Solve it.",
                      tools=[{"type": "function", "function": {"name": "bash"}}])
    session.messages()
    session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    encodes[:] = [0, 0]
    started = time.perf_counter()
    session.add_tool_result("c1", text)
    shown = session.messages()
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert any(message["role"] == "tool" for message in shown)
    return {"mb": size_mb, "seconds": seconds, "peak_rss_mb": peak, "rss_before_mb": before_rss,
            "encodes": encodes[0], "passes": encodes[1] / len(text)}


def main(argv: list[str] | None = None) -> int:
    from arc_ref.options import number_parser

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size_mb = number_parser(4096, exclusive_minimum=0)
    parser.add_argument("--sizes-mb", type=size_mb, nargs="+", default=[1, 5, 50],
                        help="sizes of the tool result in MB (each above 0, at most 4096)")
    parser.add_argument("--one", type=size_mb, help=argparse.SUPPRESS)  # the child's size
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one_size(args.one)))
        return 0
    if not QWEN3_DIR.is_dir():
        print(f"skipped: {QWEN3_DIR} is absent", file=sys.stderr)
        return 0
    print(f"{'MB':>6} | {'seconds':>8} | {'s/MB':>6} | {'peak RSS MB':>11} | {'RSS MB over start / MB':>22} | encodes (slices) | characters encoded / size")
    failed = 0
    for size in args.sizes_mb:
        done = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{size:>6g} | failed: {done.stderr.strip().splitlines()[-1:]}")
            failed += 1
            continue
        row = json.loads(done.stdout)
        print(f"{size:>6g} | {row['seconds']:>8.1f} | {row['seconds'] / size:>6.2f} | {row['peak_rss_mb']:>11.0f} | "
              f"{(row['peak_rss_mb'] - row['rss_before_mb']) / size:>22.0f} | {row['encodes']:>16} | "
              f"{row['passes']:.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_large_observation"))
