"""`arc-eval nih` against a real llama.cpp `llama-server`: the harness's count of every prompt vs the
server's `usage.prompt_tokens`, and how every task ended.

    python benchmarks/bench_llama_server.py --llama-server BIN (--gguf FILE | --llama-cpp SRC)
        [--tasks 2] [--methods all] [--max-tokens 256] [--context-limit 16384] [--slots 2]
        [--threads 1] [--max-steps N] [--tool-calling] [--tokenizer DIR] [--count-with auto|server|local]
        [--out DIR]

Without ``--gguf`` a random-weight model is made first (benchmarks/make_tiny_gguf.py, from
../shared/data/qwen3-tokenizer and llama.cpp's gguf-py in SRC): its replies are garbage, so every
task must end as no answer, never as a crash. The server runs with ``--jinja`` (the model's Qwen3
template), ``--no-prefill-assistant`` (a last assistant message is answered after, as vLLM does)
and one window per slot (``-np SLOTS --kv-unified-per-slot CONTEXT_LIMIT``; see eval/SERVING.md). Prints, from the run's records: calls, the largest and mean |harness count -
usage.prompt_tokens| over all calls (0 when the harness counts as the server does), the largest
prompt against the usable budget, and the tasks' ends. ``--tokenizer DIR`` (the model directory the
GGUF was made from; needed by ``--tool-calling``) makes the harness count with that directory's own
template and tokenizer; with ``--count-with local`` every call's harness count is that local count, so
the figure compares the harness's rendering with llama-server's own.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the tests' one readiness wait
from tests.waiting import http_ok, wait_until  # noqa: E402
from arc_eval.cli import main as arc_eval  # noqa: E402
from arc_eval.errors import INTERRUPTED, TERMINATED  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402
from benchmarks.servers import SERVERS, Stopped, run  # noqa: E402  (the server, stopped however the run ends)

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_gguf(out: Path, llama_cpp: str | None, tokenizer_dir: str | None) -> Path:
    sys.path.insert(0, str(HERE))
    from make_tiny_gguf import main as make  # noqa: E402 (a sibling script)

    arguments = [str(out)]
    if llama_cpp:
        arguments += ["--llama-cpp", llama_cpp]
    if tokenizer_dir:
        arguments += ["--tokenizer-dir", tokenizer_dir]
    make(arguments)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    parser.add_argument("--gguf", default=None)
    parser.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP_DIR"))
    parser.add_argument("--tokenizer-dir", default=None)
    parser.add_argument("--tasks", type=integer_parser(1, 100_000), default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument("--methods", default="all")
    parser.add_argument("--max-tokens", type=integer_parser(1, 2**31 - 1), default=256)
    parser.add_argument("--max-steps", type=integer_parser(1, 100_000), default=None,
                        help="agent steps per task (default: the plan's)")
    parser.add_argument("--context-limit", type=integer_parser(1, 2**31 - 1), default=16384)
    parser.add_argument("--slots", type=integer_parser(1, 1024), default=2)
    parser.add_argument("--threads", type=integer_parser(1, 1024), default=1)
    parser.add_argument("--tool-calling", action="store_true")
    parser.add_argument("--tokenizer", default=None, metavar="DIR",
                        help="arc-eval --tokenizer: count with this model directory's template and tokenizer")
    parser.add_argument("--count-with", choices=("auto", "server", "local"), default="auto")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not args.llama_server:
        parser.error("pass --llama-server BIN or set LLAMA_SERVER")
    if shutil.which(args.llama_server) is None:
        parser.error(f"--llama-server {args.llama_server!r} is not a program that can be run")
    if args.gguf and not Path(args.gguf).is_file():
        parser.error(f"--gguf {args.gguf!r} is not a file")
    if args.max_tokens >= args.context_limit:
        parser.error(f"--max-tokens ({args.max_tokens}) must be below --context-limit ({args.context_limit})")
    work = Path(tempfile.mkdtemp(prefix="arc-llama-"))
    gguf = Path(args.gguf) if args.gguf else make_gguf(work / "tiny.gguf", args.llama_cpp, args.tokenizer_dir)
    port = free_port()
    log = work / "llama-server.log"
    command = [args.llama_server, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--jinja",
               "--no-prefill-assistant", "--alias", "tiny", "-np", str(args.slots), "--kv-unified-per-slot", str(args.context_limit),
               "-t", str(args.threads)]
    print("llama-server " + " ".join(command[1:]), flush=True)
    with open(log, "wb") as sink:
        server = SERVERS.start(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        SERVERS.raise_if_stopped()
        try:
            wait_until(http_ok(f"http://127.0.0.1:{port}/health"), server, "llama-server", base_s=120, poll_s=0.2)
        except AssertionError as failure:
            raise SystemExit(f"{failure}; its log: {log}") from None
        out = Path(args.out) if args.out else work / "run"
        argv = ["nih", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "tiny",
                "--context-limit", str(args.context_limit), "--max-tokens", str(args.max_tokens),
                "--tasks", str(args.tasks), "--seeds", *map(str, args.seeds), "--methods", args.methods,
                "--concurrency", str(args.slots), "--out", str(out), "--no-progress"]
        if args.tool_calling:
            argv.append("--tool-calling")
        if args.tokenizer:
            argv += ["--tokenizer", args.tokenizer]
        argv += ["--count-with", args.count_with]
        if args.max_steps:
            argv += ["--max-steps", str(args.max_steps)]
        print("arc-eval " + " ".join(argv), flush=True)
        started = time.perf_counter()
        code = arc_eval(argv)
        wall = time.perf_counter() - started
        # arc-eval's event loop took SIGINT and SIGTERM while it ran (it stops the run itself, recording what
        # finished) and left them at their defaults; a signal it took for Ctrl-C (SIGHUP) stops this run here, and
        # so does one its loop took (its status says which): the run is then stopped, not reported
        SERVERS.stop_on_signals()
        SERVERS.raise_if_stopped()
        if code in (INTERRUPTED.code, TERMINATED.code):
            raise Stopped(signal.SIGINT if code == INTERRUPTED.code else signal.SIGTERM)
    finally:
        SERVERS.stop(server, 30)
    if not (out / "calls.jsonl").is_file():
        print(f"bench_llama_server: arc-eval exited with status {code} and recorded no call in {out} (its message"
              f" is above); llama-server's log: {log}", file=sys.stderr)
        return code or 1
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    tasks = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    compared = [call for call in calls if call.get("counted_prompt_tokens") is not None]
    gaps = [abs(call["counted_prompt_tokens"] - call["prompt_tokens"]) for call in compared]
    usable = args.context_limit - args.max_tokens
    ends = collections.Counter((task["end"], "no answer" if task["no_answer"] else "answered") for task in tasks)
    print(f"exit code {code}, {wall:.0f} s wall; {len(tasks)} tasks, {len(calls)} calls "
          f"({len(compared)} with both counts, {sum(call['overflow'] for call in calls)} overflows)")
    print(f"largest |harness count - usage.prompt_tokens|: {max(gaps, default=0)} "
          f"(mean {sum(gaps) / max(1, len(gaps)):.3f}) over {len(gaps)} calls")
    print(f"largest prompt: {max((call['prompt_tokens'] for call in calls), default=0)} tokens "
          f"(usable budget {usable} = {args.context_limit} - {args.max_tokens})")
    print("task ends: " + ", ".join(f"{end} / {answer}: {n}" for (end, answer), n in sorted(ends.items())))
    errors = [task["error"] for task in tasks if task["error"]]
    print(f"task errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    return code


if __name__ == "__main__":
    SERVERS.stop_on_signals()
    sys.exit(run(main, "bench_llama_server"))
