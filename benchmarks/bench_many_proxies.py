"""Many `arc-ref proxy` instances on one PostgreSQL database, measured (issue 30 item 4).

    python benchmarks/bench_many_proxies.py [--agents 8] [--turns 10] [--rounds 2] [--catch-up-turns 200]

Prints, measured in one run:
1. requests/s and the latency of each chat request (p50, p99) through HAProxy (round-robin) in front of one
   `arc-ref proxy` without a database (memory), and of 1, 2 and 3 instances on one PostgreSQL database; the four
   set-ups take turns (``--rounds`` times each, interleaved), every agent its own conversation resending its whole
   history every turn;
2. database round trips per request (the proxies' own count, checked against libpq's trace by
   tests/persist/test_postgres_store.py), with one instance and with three taking the requests in turn;
3. what a conversation of ``--catch-up-turns`` turns costs an instance that never saw it: its first request there
   against a request on the instance that holds it, and the fold of its rows alone.

The upstream is serve-scripted on Qwen3's files (../shared/data/qwen3-tokenizer) in this process, a policy that
always calls the agent's bash tool; PostgreSQL and HAProxy are the machine's packages (tests/deployment.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path
import itertools
import shutil
from typing import Any, Iterator

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.deployment import Haproxy, PostgresServer, Service, arc_proxy, haproxy_absent, postgres_absent  # noqa: E402
from tests.proxy.harness import BASH_TOOL, BUDGETS, QWEN3, serve_app  # noqa: E402
from arc_eval.backends.scripted_server import build_app as build_upstream  # noqa: E402
from arc_eval.backends.scripted_server import serve_in_thread  # noqa: E402
from benchmarks.bench_proxy import agent, always_bash  # noqa: E402  (one agent loop for both benchmarks)
from arc_ref.options import integer_parser  # noqa: E402
from benchmarks.servers import SERVERS, run  # noqa: E402
from proofs_check.shared_data import QWEN3_ABSENT  # noqa: E402


OUTPUT = "\n".join(f"-rw-r--r-- 1 user user {number * 97} file_{number}.py" for number in range(20))


TASK_NUMBERS = itertools.count(1)  # every agent of the run its own task, so its own conversation


def load(base_url: str, agents: int, turns: int) -> tuple[list[float], float]:
    """``agents`` agents at once, ``turns`` requests each (bench_proxy.py's agent loop): the latencies and the
    wall time."""
    async def main() -> list[float]:
        latencies: list[float] = []
        async with httpx.AsyncClient(timeout=300) as client:
            await asyncio.gather(*(agent(client, base_url, next(TASK_NUMBERS), turns, OUTPUT, latencies)
                                   for _ in range(agents)))
        return latencies

    started = time.perf_counter()
    latencies = asyncio.run(main())
    return latencies, time.perf_counter() - started


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (/proc/PID/stat), in seconds."""
    import os

    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone (a database backend whose connection closed)
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


@contextlib.contextmanager
def in_process_instance(upstream_url: str, database: str, **settings: Any) -> Iterator[tuple[str, Any]]:
    """One shared proxy in a thread of this process (its counters readable): its base URL and its app."""
    from arc_ref.frontends.proxy import ProxySettings
    from arc_ref.frontends.proxy_app import build_app

    assert QWEN3 is not None
    app = build_app(ProxySettings(upstream=upstream_url, tokenizer=f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                  database=database, **settings))
    with serve_app(app) as base_url:
        yield base_url, app


class Chat:
    """One conversation as an agent keeps it (its whole history, resent every turn)."""

    def __init__(self, name: str) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Task {name}: list the files, again and again."}]
        self.client = httpx.Client(timeout=300)

    def step(self, base_url: str) -> float:
        """One request to ``base_url``; its latency."""
        started = time.perf_counter()
        response = self.client.post(f"{base_url}/chat/completions",
                                    json={"model": "scripted", "messages": self.messages, "tools": [BASH_TOOL]})
        latency = time.perf_counter() - started
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        self.messages.append(message)
        for call in message.get("tool_calls") or ():
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": OUTPUT})
        return latency


def round_robin(base_urls: list[str], turns: int, name: str) -> list[float]:
    """One conversation, request n to instance n mod len(base_urls); the latency of each request."""
    chat = Chat(name)
    return [chat.step(base_urls[turn % len(base_urls)]) for turn in range(turns)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=integer_parser(1, 10_000), default=8,
                        help="agents at once (each its own conversation; 1 to 10000)")
    parser.add_argument("--turns", type=integer_parser(1, 100_000), default=10, help="requests per agent (1 to 100000)")
    parser.add_argument("--rounds", type=integer_parser(1, 1000), default=2,
                        help="times each set-up is measured (interleaved; 1 to 1000)")
    parser.add_argument("--catch-up-turns", type=integer_parser(1, 100_000), default=200,
                        help="turns of the conversation to catch up (1 to 100000)")
    arguments = parser.parse_args()
    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP: unwound as Ctrl-C is, through the blocks that stop each server
    for why in (postgres_absent(), haproxy_absent(),
                None if QWEN3 is not None else QWEN3_ABSENT):
        if why is not None:
            print(f"bench_many_proxies: {why}", file=sys.stderr)
            return 2
    assert QWEN3 is not None
    work = Path(__import__("tempfile").mkdtemp(prefix="arc-bench-"))
    upstream = build_upstream(always_bash, max_model_len=65536, tokenizer=str(QWEN3), concurrency=64,
                              model_name="scripted")
    postgres = PostgresServer.start()
    try:  # removed however the run ends (a signal while the upstream starts too)
        with serve_in_thread(upstream) as upstream_url:
            database = postgres.create_database("arc_bench")
            started: list[Service] = []  # each stopped below, however the run ends (a signal: benchmarks/servers.py)
            balancers: dict[str, Haproxy] = {}
            try:
                for store in (None, database, database, database):
                    with SERVERS.deferring():
                        started.append(arc_proxy(work, upstream_url, QWEN3, store, BUDGETS))
                memory, shared = started[0], started[1:]
                setups = {"memory, 1 instance": [memory], "postgres, 1 instance": shared[:1],
                          "postgres, 2 instances": shared[:2], "postgres, 3 instances": shared[:3]}
                for name, services in setups.items():
                    with SERVERS.deferring():
                        balancers[name] = Haproxy.start([f"127.0.0.1:{service.port}" for service in services])
                for name, balancer in balancers.items():  # warm: templates compiled, connections open
                    load(balancer.url, 2, 2)
                measured: dict[str, list[tuple[list[float], float]]] = {name: [] for name in setups}
                cpu: dict[str, float] = {name: 0.0 for name in setups}
                database_cpu: dict[str, float] = {name: 0.0 for name in setups}
                pids = {name: [service.process.pid for service in services if service.process is not None]
                        for name, services in setups.items()}
                for _ in range(arguments.rounds):
                    for name, balancer in balancers.items():
                        backends = postgres.pids()
                        before, database_before = cpu_seconds(pids[name]), cpu_seconds(backends)
                        measured[name].append(load(balancer.url, arguments.agents, arguments.turns))
                        cpu[name] += cpu_seconds(pids[name]) - before
                        backends = sorted(set(backends) | set(postgres.pids()))  # and those started meanwhile
                        database_cpu[name] += cpu_seconds(backends) - database_before
            finally:
                for balancer in balancers.values():
                    balancer.stop()
                for service in started:
                    service.stop()
            print(f"1. through HAProxy (round-robin): {arguments.agents} agents at once, {arguments.turns} requests"
                  f" each, {arguments.rounds} interleaved rounds per set-up; upstream serve-scripted in-process")
            print(f"{'set-up':>22} | {'requests/s':>10} | {'p50':>9} | {'p99':>9} | CPU per request: proxies, database")
            for name, runs in measured.items():
                latencies = [value for run in runs for value in run[0]]
                rate = statistics.median(len(run[0]) / run[1] for run in runs)
                print(f"{name:>22} | {rate:>10.1f} | {percentile(latencies, 0.5) * 1000:>6.1f} ms |"
                      f" {percentile(latencies, 0.99) * 1000:>6.1f} ms | {cpu[name] / len(latencies) * 1000:.1f} ms,"
                      f" {database_cpu[name] / len(latencies) * 1000:.1f} ms")

            trips = postgres.create_database("arc_bench_trips")
            with contextlib.ExitStack() as stack:
                instances = [stack.enter_context(in_process_instance(upstream_url, trips)) for _ in range(3)]
                urls = [url for url, _ in instances]
                counts = []
                for label, targets in (("one instance", urls[:1]), ("three in turn", urls)):
                    before = sum(app.state.proxy.database.round_trips for _, app in instances)
                    requests = len(round_robin(targets, 12, label))
                    after = sum(app.state.proxy.database.round_trips for _, app in instances)
                    counts.append((label, (after - before) / requests))
            print("2. database round trips per request (12 requests of one conversation):",
                  ", ".join(f"{label} {value:.2f}" for label, value in counts))

            catch = postgres.create_database("arc_bench_catch_up")
            turns = arguments.catch_up_turns
            with in_process_instance(upstream_url, catch) as (first, first_app), \
                    in_process_instance(upstream_url, catch) as (second, second_app):
                chat = Chat("long")
                built = [chat.step(first) for _ in range(turns)]
                warm = [chat.step(first) for _ in range(5)]  # the instance that holds it
                folded_before = second_app.state.proxy.folded_rows
                cold = chat.step(second)  # never saw it: folds every row first
                folded = second_app.state.proxy.folded_rows - folded_before
                behind = [chat.step(first)]  # one request behind: that request's rows come with the first trip
                key = next(iter(first_app.state.proxy.cache))
            from arc_ref.persist.postgres import PostgresStore

            started = time.perf_counter()
            opened = PostgresStore.open(catch, key, readonly=True)
            fold = time.perf_counter() - started
            print(f"3. a conversation of {turns + 5} turns ({opened.seq} rows): its next request on an instance that"
                  f" never saw it {cold * 1000:.0f} ms (it folded {folded} rows) against"
                  f" {statistics.median(warm) * 1000:.0f} ms (median of 5) on the instance that holds it, and"
                  f" {behind[0] * 1000:.0f} ms on that one when one request behind; the fold of its rows alone"
                  f" (PostgresStore.open, this process) {fold * 1000:.0f} ms; building it took"
                  f" {statistics.median(built) * 1000:.0f} ms per turn (median)")
    finally:
        postgres.remove()
        shutil.rmtree(work, ignore_errors=True)  # the proxies' logs
    return 0


if __name__ == "__main__":
    sys.exit(run(main, "bench_many_proxies"))
