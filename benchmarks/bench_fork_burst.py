"""A burst of forks against an unrelated client: K requests resend one long stored conversation's history at once
while its first request's upstream call is held (so each of the others forks it), and a client Y of another
conversation sends small requests meanwhile. Prints Y's median and slowest latency, the time until the burst
is answered, and the store's size.

    python benchmarks/bench_fork_burst.py [--copies K] [--turns N] [--kb KB] [--tree DIR]

``--tree`` runs another checkout's arc_ref (e.g. main before a change) with this script; the proxy runs in this
process (`Proxy.complete`, no HTTP) in front of a fake upstream (httpx.MockTransport).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent


def integer_parser(least: int, most: int) -> Callable[[str], int]:
    """An integer from ``least`` to ``most`` (arc_ref.options has one, but arc_ref is imported from --tree, after)."""

    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and least <= int(text) <= most):
            raise argparse.ArgumentTypeError(f"expected an integer from {least} to {most}, got {text!r}")
        return int(text)

    return parse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=integer_parser(1, 10_000), default=20,
                        help="requests resending the long history at once (1 to 10000)")
    parser.add_argument("--turns", type=integer_parser(1, 10_000), default=20,
                        help="turns of the long conversation (1 to 10000)")
    parser.add_argument("--kb", type=integer_parser(1, 100_000), default=20,
                        help="KB of each of its tool outputs (1 to 100000)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose arc_ref runs")
    args = parser.parse_args()
    if not (args.tree / "arc_ref" / "__init__.py").is_file():
        parser.error(f"--tree {str(args.tree)!r} is not a checkout of arc-ref (no arc_ref/__init__.py there)")
    sys.path.insert(0, str(args.tree.resolve()))
    import httpx

    from arc_ref.frontends.proxy import Proxy, ProxySettings
    from arc_ref.frontends.proxy_app import decode_body
    from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

    qwen3 = qwen3_dir()
    if qwen3 is None:
        print(f"bench_fork_burst: {QWEN3_ABSENT}", file=sys.stderr)
        return 2
    tool = {"type": "function", "function": {"name": "bash", "description": "Run a command",
                                             "parameters": {"type": "object", "properties": {}}}}
    held = asyncio.Event()
    held.set()
    calls = [0]

    async def upstream(request: httpx.Request) -> httpx.Response:
        calls[0] += 1
        if json.loads(request.content)["messages"][1]["content"].startswith("LONG"):
            await held.wait()
        message = {"role": "assistant", "content": f"r{calls[0]}", "tool_calls": [
            {"id": f"c{calls[0]}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
        # no usage: the fake counts no prompt (a made-up prompt_tokens had the proxy warn on every run that its
        # count differed from the server's)
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})

    async def run(store: Path) -> tuple[list[float], float]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{qwen3}", store=store,
                                        overrides={"recent_budget": 2000, "recall_budget": 2600,
                                                   "chunk_tokens": 1200, "summary_budget": 1500}), client)

            async def ask(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
                body = json.dumps({"model": "m", "tools": [tool], "messages": messages}).encode()
                reply = await proxy.complete(decode_body(body, proxy.known), None)
                message = reply.completion["choices"][0]["message"]
                return [*messages, message]

            try:
                history: list[dict[str, Any]] = [{"role": "system", "content": "S"},
                                                 {"role": "user", "content": "LONG task"}]
                for turn in range(args.turns):
                    history = await ask(history)
                    history.append({"role": "tool", "tool_call_id": history[-1]["tool_calls"][0]["id"],
                                    "content": (f"t{turn} " + "word " * 200 + "\n") * args.kb})
                held.clear()
                started = time.monotonic()
                burst = [asyncio.ensure_future(ask(history)) for _ in range(args.copies)]
                latencies = []
                other: list[dict[str, Any]] = [{"role": "system", "content": "S"},
                                               {"role": "user", "content": "another task"}]
                for number in range(15):
                    asked = time.monotonic()
                    other = await ask(other)
                    latencies.append(time.monotonic() - asked)
                    other.append({"role": "tool", "tool_call_id": other[-1]["tool_calls"][0]["id"],
                                  "content": f"ok {number}"})
                    await asyncio.sleep(0.05)
                held.set()
                await asyncio.gather(*burst)
                return latencies, time.monotonic() - started
            finally:
                await proxy.close()

    with tempfile.TemporaryDirectory() as directory:
        store = Path(directory) / "store"
        latencies, took = asyncio.run(run(store))
        size = sum(path.stat().st_size for path in store.rglob("*") if path.is_file())
        conversations = sum(1 for path in store.iterdir() if path.is_dir())
    print(f"tree {args.tree}: {args.copies} copies of a {args.turns}-turn history: the other client's requests"
          f" median {statistics.median(latencies) * 1000:.0f} ms, slowest {max(latencies) * 1000:.0f} ms; the burst"
          f" answered in {took:.1f} s; {conversations} conversations, {size / 2**20:.1f} MiB stored")
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_fork_burst"))
