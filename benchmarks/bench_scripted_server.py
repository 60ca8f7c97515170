"""Requests per second and latency of `arc-eval serve-scripted`, driven over real HTTP by httpx.

    python benchmarks/bench_scripted_server.py [--requests 2000] [--clients 1 8 32]
        [--endpoint chat|tokenize] [--server FILE_OR_MODULE ...] [--rounds 2]

Each server runs as `serve_main` in a process of its own around a constant policy, so the figure
is the HTTP layer and the server's own work (routing, JSON, counting the prompt), not a policy's.
For each number of concurrent clients it prints requests/s and the median and 99th percentile
latency. Several ``--server`` (the installed module by default, or the path of another
`scripted_server.py`, e.g. one from an older commit: ``git show REV:eval/backends/scripted_server.py
> /tmp/old.py``) are measured in turns, round after round, so load on the machine falls on all of
them alike; the last lines give each server's requests/s relative to the first one's.
Used to decide whether a hand-written HTTP server is needed (issue 13.7).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the tests' one readiness wait
from tests.waiting import http_ok, wait_until  # noqa: E402
from benchmarks.servers import SERVERS, run  # noqa: E402  (the server, stopped however the run ends)
from arc_eval.types import Message  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402

DEFAULT_SERVER = "arc_eval.backends.scripted_server"
MESSAGES = [
    {"role": "system", "content": "You are an agent. Answer with Thought: and Action: lines."},
    {"role": "user", "content": "Find the needle. " + "The haystack holds many lines. " * 40},
]


def constant_policy(messages: Sequence[Message]) -> str:
    return "Thought: read the next file.\nAction: cat notes/0001.txt"


async def drive(url: str, endpoint: str, requests: int, clients: int) -> tuple[float, list[float]]:
    """`requests` calls spread over `clients` concurrent loops; (wall seconds, latencies)."""
    root = url[: -len("/v1")]
    target = f"{url}/chat/completions" if endpoint == "chat" else f"{root}/tokenize"
    body = {"model": "scripted", "messages": MESSAGES, "max_tokens": 64}
    latencies: list[float] = []
    remaining = requests
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def loop() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                response = await client.post(target, json=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    raise SystemExit(f"unexpected HTTP {response.status_code}: {response.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        return time.perf_counter() - started, latencies


@contextlib.contextmanager
def serve_in_process(server: str) -> Iterator[str]:
    """`serve_main` of `server` (a module name or a file path) with the constant policy."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    if server.endswith(".py"):
        load = (
            "import importlib.util as u; spec = u.spec_from_file_location('bench_server', "
            f"{str(Path(server).resolve())!r}); module = u.module_from_spec(spec); "
            "spec.loader.exec_module(module)"
        )
    else:
        load = f"import importlib; module = importlib.import_module({server!r})"
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); {load}; "
        "sys.exit(module.serve_main(sys.argv[1:]))"
    )
    command = [sys.executable, "-c", code, "--port", str(port), "--concurrency", "64",
               "--policy", "bench_scripted_server:constant_policy"]
    process = SERVERS.start(command, stdout=subprocess.DEVNULL)
    try:
        SERVERS.raise_if_stopped()
        try:
            wait_until(http_ok(f"http://127.0.0.1:{port}/health"), process, f"{server}: serve-scripted", base_s=60)
        except AssertionError as failure:
            raise SystemExit(str(failure)) from None
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        SERVERS.stop(process, 30)


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or an empty or relative name
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=integer_parser(1, 10_000_000), default=2000,
                        help="requests per measurement (1 to 10000000)")
    parser.add_argument("--clients", type=integer_parser(1, 10_000), nargs="+", default=[1, 8, 32],
                        help="concurrent clients of each measurement (1 to 10000)")
    parser.add_argument("--endpoint", choices=("chat", "tokenize"), default="chat")
    parser.add_argument("--server", action="append", default=None,
                        help="a module name or a scripted_server.py path (repeat to compare)")
    parser.add_argument("--rounds", type=integer_parser(1, 1000), default=1, help="turns over all servers (1 to 1000)")
    args = parser.parse_args()
    servers = args.server or [DEFAULT_SERVER]
    for server in servers:
        if not (Path(server).is_file() if server.endswith(".py") else _module_found(server)):
            parser.error(f"--server {server!r}: no such {'file' if server.endswith('.py') else 'module'}")
    rates: dict[tuple[str, int], list[float]] = {}
    for round_index in range(args.rounds):
        for server in servers:
            with serve_in_process(server) as url:
                asyncio.run(drive(url, args.endpoint, 200, 4))  # warm-up: tokenizer, connections
                for clients in args.clients:
                    wall, latencies = asyncio.run(drive(url, args.endpoint, args.requests, clients))
                    ordered = sorted(latencies)
                    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
                    rate = len(latencies) / wall
                    rates.setdefault((server, clients), []).append(rate)
                    print(
                        f"round {round_index + 1} {server} {args.endpoint} clients={clients:<3} "
                        f"{len(latencies)} requests in {wall:6.2f} s: {rate:7.1f} req/s, "
                        f"median {1000 * statistics.median(latencies):6.2f} ms, p99 {1000 * p99:6.2f} ms",
                        flush=True,
                    )
    if len(servers) > 1:
        for clients in args.clients:
            base = statistics.median(rates[(servers[0], clients)])
            for server in servers[1:]:
                ratio = statistics.median(rates[(server, clients)]) / base
                print(f"clients={clients:<3} {server} / {servers[0]}: {ratio:5.2f}x requests/s")


if __name__ == "__main__":
    SERVERS.stop_on_signals()
    sys.exit(run(main, "bench_scripted_server"))
