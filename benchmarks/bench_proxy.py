"""The proxy's own overhead per request: an agent loop direct to serve-scripted vs through `arc-ref proxy`.

    python benchmarks/bench_proxy.py [--turns 20] [--agents 8] [--output-lines 40]

Prints, measured in one run: the latency of each chat request (median and p99, milliseconds) when the agents
talk to the upstream directly and when they talk to it through the proxy, at concurrency 1 (one agent) and 8
(eight agents at once, each its own conversation), and the difference of the medians (the proxy's overhead per
request: conversation identity, the new events through the core, the view, the upstream round trip's extra
hop). The upstream is `arc-eval serve-scripted` on Qwen3's files (../shared/data/qwen3-tokenizer), whose policy
always calls the agent's bash tool; each agent resends its whole history every turn with a short tool output
(outputs stay verbatim in H, so both routes send the upstream the same amount of text).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.proxy.harness import BASH_TOOL, QWEN3, serve_proxy  # noqa: E402
from arc_eval.backends.scripted_server import build_app, serve_in_thread  # noqa: E402
from arc_eval.types import Message  # noqa: E402


def always_bash(messages: Sequence[Message]) -> str:
    """A policy that always runs one more command (a reply with a tool call every turn)."""
    return f"Thought: step {len(messages)}.\nAction: bash ls -la"


async def agent(client: httpx.AsyncClient, base_url: str, number: int, turns: int, output: str,
                latencies: list[float]) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": f"Task {number}: list the files, {turns} times."}]
    for _ in range(turns):
        started = time.perf_counter()
        response = await client.post(f"{base_url}/chat/completions", json={
            "model": "scripted", "messages": messages, "tools": [BASH_TOOL]})
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or ():
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


def run(base_url: str, agents: int, turns: int, output: str) -> list[float]:
    async def main() -> list[float]:
        latencies: list[float] = []
        async with httpx.AsyncClient(timeout=120) as client:
            await asyncio.gather(*(agent(client, base_url, number, turns, output, latencies)
                                   for number in range(agents)))
        return latencies

    return asyncio.run(main())


def figures(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return statistics.median(ordered) * 1000, p99 * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="requests per agent")
    parser.add_argument("--agents", type=int, default=8, help="agents at once for the second figure")
    parser.add_argument("--output-lines", type=int, default=40, help="lines of each tool output")
    arguments = parser.parse_args()
    if QWEN3 is None:
        print("bench_proxy: Qwen3's files are not in ../shared/data (run from the repository root)", file=sys.stderr)
        return 2
    output = "\n".join(f"-rw-r--r-- 1 user user {number * 97} file_{number}.py" for number in range(
        arguments.output_lines))
    upstream = build_app(always_bash, max_model_len=65536, tokenizer=str(QWEN3), concurrency=64,
                         model_name="scripted")
    rows = []
    with serve_in_thread(upstream) as upstream_url, serve_proxy(upstream_url, context_limit=65536,
                                                                 recent_budget=16000) as proxy_url:
        run(proxy_url, 1, 2, output)  # warm both (template compiled, connections open)
        run(upstream_url, 1, 2, output)
        for agents in (1, arguments.agents):
            direct = figures(run(upstream_url, agents, arguments.turns, output))
            proxied = figures(run(proxy_url, agents, arguments.turns, output))
            rows.append((agents, direct, proxied))
    print(f"proxy overhead per request: {arguments.turns} requests per agent, tool outputs of"
          f" {arguments.output_lines} lines, upstream serve-scripted (Qwen3's template and tokenizer), one run")
    print(f"{'agents at once':>14} | {'direct median':>13} | {'direct p99':>10} | {'proxy median':>12} |"
          f" {'proxy p99':>9} | {'overhead (median)':>17}")
    for agents, (direct_median, direct_p99), (proxy_median, proxy_p99) in rows:
        print(f"{agents:>14} | {direct_median:>10.1f} ms | {direct_p99:>7.1f} ms | {proxy_median:>9.1f} ms |"
              f" {proxy_p99:>6.1f} ms | {proxy_median - direct_median:>14.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
