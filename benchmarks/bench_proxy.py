"""`arc-ref proxy` against the LiteLLM proxy and no proxy, in front of one fast fake upstream (issue 28 item 4).

    python benchmarks/bench_proxy.py [--rounds 3] [--concurrency 1 8 32] [--turns 20] [--long-turns 200]
                                     [--litellm PATH | --no-litellm] [--arc-python PY] [--baseline-python PY]
                                     [--new-runs N]

Three routes to the same upstream, each server a process of its own:
- direct: the agents talk to the upstream itself;
- arc: `arc-ref proxy --upstream ... --tokenizer hf-dir:<Qwen3's files>` (no --store: conversations in memory);
- litellm: the LiteLLM proxy (`litellm --config ... --num_workers 1`) with one model routed to the upstream as an
  OpenAI-compatible endpoint, a pass-through (no database, no callbacks, no retries). ``--litellm`` names the
  `litellm` command of an environment with LiteLLM's proxy extra (fastapi and friends); without one the
  route is left out, saying why.

The upstream (`--serve-fake`, run as its own process) answers every chat request at once with one call of the
agent's bash tool (a new call id each time) and `GET /v1/models` with a window of 65,536 tokens; it reads the
body but parses nothing, so it costs next to nothing and the same for every route.

The workload: each agent holds a conversation of a ~1 KB system prompt and a task, plus 18 messages of earlier
turns (tool outputs of 1-5 KB), 20 messages in all, and runs ``--turns`` turns (each adds the model's call and a
1-5 KB tool output: 20 -> 60 messages), resending its whole history every turn, as mini-swe-agent does; every
agent of every round starts a conversation of its own. For each concurrency (agents at once), ``--rounds``
rounds take the routes in turn (rotating the order), so machine noise falls on all alike. Printed per route
and concurrency: median and p99 latency of a request, server CPU per request (the route's server process and
its children, from /proc: the time each thread was on a CPU), and throughput (requests per second of the
round). Then, at concurrency 1 (request by request, so each request's CPU is its own): a new conversation's
first request vs a continuing one's (and the first request each server answers after it starts), and the requests
around turn 10, 50 and ``--long-turns`` (200): one conversation per turn, driven there unmeasured, then their
requests taken in turn (`turns_interleaved`), so the turns compared meet the same machine noise; ``--long-runs``
times. Where the p99 at the highest concurrency comes from is printed beside: the p99 of the rounds' first
requests (every agent's new conversation, all starting at once) and of the later ones. Then the ratios arc /
litellm and the targets of issue 28: CPU per request <= LiteLLM's at every
concurrency; p99 <= 1.2x LiteLLM's at the highest concurrency; throughput at saturation (the highest
concurrency) >= LiteLLM's; turn 200 within 1.2x of turn 10 (CPU per request); a new conversation within 2x of a
continuing one. The load average is printed before and after: the machine is shared.

Stopped by SIGTERM, SIGHUP or Ctrl-C, it stops every server it started (a second signal kills what is left at once)
and exits with 128 + the signal.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.servers import SERVERS, run  # noqa: E402  (the servers, stopped however the run ends)

BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Execute a bash command and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "the command"}},
                   "required": ["command"]}}}
SYSTEM = ("You are a helpful assistant that can interact with a computer to solve tasks. " * 6 + "\n\n"
          + "Use the bash tool to run one command at a time; read outputs carefully; when done, say so. " * 6)
WORDS = ("def", "return", "self", "import", "class", "the", "file", "line", "error", "0", "1", "None", "->", "x")
WINDOW = 65536
KEY = "sk-bench-" + "0" * 32  # LiteLLM's proxy refuses to start without a master key; every route is sent it
HEADERS = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}


# --- the fake upstream ----------------------------------------------------------------------------------------

def _completion(number: int) -> bytes:
    arguments = json.dumps({"command": f"cat src/file_{number % 97}.py"})
    return json.dumps({
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": f"Step {number}: look at the next file.",
            "tool_calls": [{"id": f"call_{number}", "type": "function",
                            "function": {"name": "bash", "arguments": arguments}}]}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}}).encode()


MODELS = json.dumps({"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "bench",
                                                 "max_model_len": WINDOW}]}).encode()


async def _serve_fake(port: int) -> None:
    counter = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                if request_line.startswith("GET") and "/models" in request_line:
                    body = MODELS
                else:
                    counter[0] += 1
                    body = _completion(counter[0])
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# --- processes, ports, CPU --------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(children.get(current, ()))
    return found


def cpu_seconds(pid: int) -> float:
    """Seconds on a CPU of every thread of the process and its descendants (/proc/*/task/*/schedstat, ns)."""
    total = 0
    for process in _descendants(pid):
        try:
            tasks = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{process}/task/{task}/schedstat") as stat:
                    total += int(stat.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def log_tail(log: Path | None, lines: int = 15) -> str:
    """The last lines of a server's log, for the error that says it did not start (its folder is removed)."""
    if log is None:
        return ""
    try:
        kept = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    except OSError:
        return ""
    return "; its log ends:\n" + "\n".join("    " + line for line in kept) if kept else ""


def wait_listening(port: int, process: subprocess.Popen[bytes], seconds: float, what: str,
                   log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening" + log_tail(log))
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on port {port} within {seconds:.0f} s" + log_tail(log))


@contextlib.contextmanager
def server_process(command: Sequence[str], port: int, what: str, env: dict[str, str] | None = None,
                   log: Path | None = None, start_seconds: float = 120) -> Iterator[subprocess.Popen[bytes]]:
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    process = SERVERS.start(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        SERVERS.raise_if_stopped()
        wait_listening(port, process, start_seconds, what, log)
        yield process
    finally:
        SERVERS.stop(process)
        if log is not None and not isinstance(out, int):
            out.close()


# --- the agents ---------------------------------------------------------------------------------------------------

def output_pool(seed: int, size: int = 64) -> list[str]:
    """Tool outputs of 1-5 KB (lines of code-like words), JSON-encoded once."""
    rng = random.Random(seed)
    pool = []
    for _ in range(size):
        target = rng.randint(1024, 5120)
        lines, length = [], 0
        while length < target:
            line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
            lines.append(line)
            length += len(line) + 1
        pool.append("\n".join(lines)[:target])
    return pool


@dataclass
class Conversation:
    """An agent's history, each message kept as its JSON text (the client's own cost stays small)."""

    encoded: list[str] = field(default_factory=list)

    def add(self, message: dict[str, Any]) -> None:
        self.encoded.append(json.dumps(message))

    def body(self) -> bytes:
        return ('{"model":"fake","messages":[' + ",".join(self.encoded) + '],"tools":['
                + json.dumps(BASH_TOOL) + "]}").encode()


def new_conversation(name: str, outputs: list[str], rng: random.Random) -> Conversation:
    """System, task and 9 earlier turns (assistant call + tool output): 20 messages."""
    conversation = Conversation()
    conversation.add({"role": "system", "content": SYSTEM})
    conversation.add({"role": "user", "content": f"Task {name}: find the failing test in the repository and fix"
                                                 " it; explain what was wrong."})
    for number in range(9):
        call = f"call_{name}_{number}"
        conversation.add({"role": "assistant", "content": f"Earlier step {number}.", "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "bash",
                                                          "arguments": json.dumps({"command": f"ls -la d{number}"})}}]})
        conversation.add({"role": "tool", "tool_call_id": call, "content": rng.choice(outputs)})
    return conversation


@dataclass
class Sample:
    latency: float
    cpu: float | None = None  # the server's CPU seconds for this request alone (request by request only)
    turn: int = 0


async def run_agent(client: Any, url: str, conversation: Conversation, turns: int, outputs: list[str],
                    rng: random.Random, samples: list[Sample], server_pid: int | None = None,
                    first_turn: int = 1) -> None:
    for turn in range(first_turn, first_turn + turns):
        before = cpu_seconds(server_pid) if server_pid is not None else 0.0
        started = time.perf_counter()
        response = await client.post(url, content=conversation.body(), headers=HEADERS)
        latency = time.perf_counter() - started
        cpu = cpu_seconds(server_pid) - before if server_pid is not None else None
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        message = response.json()["choices"][0]["message"]
        samples.append(Sample(latency, cpu, turn))
        calls = message.get("tool_calls") or []
        conversation.add({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
        for call in calls:
            conversation.add({"role": "tool", "tool_call_id": call["id"], "content": rng.choice(outputs)})


def always_bash(messages: Sequence[Any]) -> str:
    """A scripted policy that always runs one more command (serve-scripted's, for bench_many_proxies.py)."""
    return f"Thought: step {len(messages)}.\nAction: bash ls -la"


async def agent(client: Any, base_url: str, number: int, turns: int, output: str, latencies: list[float]) -> None:
    """The short agent loop bench_many_proxies.py shares: a one-line system prompt and task, ``turns`` requests
    each resending the whole history, every tool call answered with ``output``."""
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


@dataclass
class Round:
    route: str
    agents: int
    samples: list[Sample]
    seconds: float
    cpu: float

    @property
    def requests(self) -> int:
        return len(self.samples)


async def one_round(base: str, route: str, agents: int, turns: int, outputs: list[str], server_pid: int,
                    tag: str) -> Round:
    import httpx

    limits = httpx.Limits(max_connections=agents + 4, max_keepalive_connections=agents + 4)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        samples: list[Sample] = []
        rngs = [random.Random(f"{tag}-{number}") for number in range(agents)]
        conversations = [new_conversation(f"{tag}-{number}", outputs, rngs[number]) for number in range(agents)]
        cpu_before = cpu_seconds(server_pid)
        started = time.perf_counter()
        await asyncio.gather(*(run_agent(client, f"{base}/chat/completions", conversations[number], turns, outputs,
                                         rngs[number], samples) for number in range(agents)))
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(server_pid) - cpu_before
    return Round(route, agents, samples, seconds, cpu)


async def request_by_request(base: str, turns: int, outputs: list[str], server_pid: int, tag: str,
                             first_turn: int = 1) -> list[Sample]:
    """One agent, its server's CPU read around each request."""
    import httpx

    async with httpx.AsyncClient(timeout=300) as client:
        samples: list[Sample] = []
        rng = random.Random(tag)
        conversation = new_conversation(tag, outputs, rng)
        await run_agent(client, f"{base}/chat/completions", conversation, turns, outputs, rng, samples, server_pid,
                        first_turn)
    return samples


async def turns_interleaved(base: str, marks: Sequence[int], outputs: list[str], server_pid: int, tag: str,
                            width: int = 2) -> list[Sample]:
    """One conversation per mark (turn 10, 50, 200), each driven unmeasured to ``mark - width - 1`` turns; then
    their requests around the marks are taken in turn, one of each conversation after another (the order rotating),
    the server's CPU read around each: the turns compared are measured side by side, under the same machine
    conditions, not minutes apart."""
    import httpx

    url = f"{base}/chat/completions"
    async with httpx.AsyncClient(timeout=300) as client:
        rngs = [random.Random(f"{tag}-{mark}") for mark in marks]
        conversations = [new_conversation(f"{tag}-{mark}", outputs, rng) for mark, rng in zip(marks, rngs)]
        for conversation, mark, rng in zip(conversations, marks, rngs):
            await run_agent(client, url, conversation, mark - width - 1, outputs, rng, [])
        samples: list[Sample] = []
        order = list(range(len(marks)))
        for step in range(2 * width + 1):
            for which in order[step % len(order):] + order[:step % len(order)]:
                await run_agent(client, url, conversations[which], 1, outputs, rngs[which], samples, server_pid,
                                marks[which] - width + step)
    return samples


# --- figures ----------------------------------------------------------------------------------------------------

def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def tail_of(rounds: list[Round], first: bool) -> float:
    """p99 latency in ms of the rounds' first requests (turn 1) or of their later ones."""
    return percentile([sample.latency for one in rounds for sample in one.samples if (sample.turn == 1) == first],
                      0.99) * 1000


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


@dataclass
class Figures:
    median_ms: float
    p99_ms: float
    cpu_ms: float  # server CPU per request
    throughput: float  # requests per second (of the whole round)


def figures(rounds: list[Round]) -> Figures:
    latencies = [sample.latency for one in rounds for sample in one.samples]
    requests = sum(one.requests for one in rounds)
    return Figures(statistics.median(latencies) * 1000, percentile(latencies, 0.99) * 1000,
                   sum(one.cpu for one in rounds) / requests * 1000,
                   statistics.median(one.requests / one.seconds for one in rounds))


# --- the routes ---------------------------------------------------------------------------------------------------

@dataclass
class Route:
    name: str
    base: str  # .../v1
    pid: int


# `python -c` puts the current directory first on sys.path: run from a checkout, a baseline's interpreter would import
# that checkout's arc_ref instead of its own; the directory is dropped so each interpreter imports its own
_ARC_MAIN = """import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
try:
    from arc_ref.frontends.cli import main
except ImportError:  # a checkout from before the front ends moved (issue 29)
    from arc_ref.cli import main
sys.exit(main(sys.argv[1:]))
"""


def arc_command(python: str, upstream: str, port: int, qwen3: Path) -> list[str]:
    return [python, "-c", _ARC_MAIN, "proxy", "--upstream", upstream, "--tokenizer", f"hf-dir:{qwen3}",
            "--port", str(port), "--set", f"context_limit={WINDOW}", "--set", "max_completion=4096",
            "--set", "recent_budget=16000", "--set", "summary_budget=2048"]


LITELLM_CONFIG = """model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake
      api_base: {upstream}
      api_key: not-needed
litellm_settings:
  drop_params: true
  num_retries: 0
  request_timeout: 300
  telemetry: false
  turn_off_message_logging: true
general_settings:
  master_key: {key}
  disable_spend_logs: true
  disable_adding_master_key_hash_to_db: true
"""


def find_litellm(given: str | None) -> tuple[str | None, str]:
    """The `litellm` command to run the proxy with, or None and why not."""
    candidates = [given] if given else [str(Path(sys.executable).parent / "litellm"), shutil.which("litellm")]
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        python = Path(candidate).parent / "python"
        check = subprocess.run([str(python), "-c", "import fastapi, litellm.proxy.proxy_server"],
                               capture_output=True, text=True)
        if check.returncode == 0:
            return candidate, ""
        return None, (f"{candidate}: LiteLLM's proxy cannot start there ({check.stderr.strip().splitlines()[-1]});"
                      " install its proxy dependencies (pip install 'litellm[proxy]') or pass --litellm PATH")
    return None, "no `litellm` command found; pass --litellm PATH (an environment with 'litellm[proxy]')"


async def interleaved(routes: list[Route], concurrency: Sequence[int], rounds: int, turns: int,
                      outputs: list[str]) -> dict[tuple[str, int], list[Round]]:
    results: dict[tuple[str, int], list[Round]] = {}
    for agents in concurrency:
        for number in range(rounds):
            order = routes[number % len(routes):] + routes[:number % len(routes)]
            for route in order:
                tag = f"{route.name}-c{agents}-r{number}"
                results.setdefault((route.name, agents), []).append(
                    await one_round(route.base, route.name, agents, turns, outputs, route.pid, tag))
            print(f"  concurrency {agents}, round {number + 1}/{rounds} done (load {load()})", flush=True)
    return results


def window(samples: list[Sample], turn: int, width: int = 2) -> list[Sample]:
    return [sample for sample in samples if abs(sample.turn - turn) <= width]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve-fake", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--turns", type=int, default=20, help="turns per agent per round (20 -> 60 messages)")
    parser.add_argument("--long-turns", type=int, default=200, help="turns of the one long conversation")
    parser.add_argument("--litellm", default=None, help="the `litellm` command of an environment with its proxy")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--arc-python", default=sys.executable, help="the interpreter whose arc_ref to run")
    parser.add_argument("--baseline-python", default=None, metavar="PY",
                        help="also run `arc-ref proxy` of this interpreter's arc_ref (route arc-before), same run")
    parser.add_argument("--long-runs", type=int, default=6,
                        help="runs of the turn 10 / 50 / 200 conversations per route (5 requests of each per run)")
    parser.add_argument("--new-runs", type=int, default=None,
                        help="new conversations (of 6 requests) per route for new vs continuing (default: the rounds,"
                             " at least 2)")
    arguments = parser.parse_args()
    if arguments.long_turns < 13:
        parser.error("--long-turns must be at least 13 (the requests around turn 10 are compared with it)")
    if arguments.serve_fake is not None:
        asyncio.run(_serve_fake(arguments.serve_fake))
        return 0
    SERVERS.stop_on_signals()
    from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

    qwen3 = qwen3_dir()
    if qwen3 is None:
        print(f"bench_proxy: the arc route counts with Qwen3's files: {QWEN3_ABSENT}", file=sys.stderr)
        return 2
    litellm, why = (None, "left out (--no-litellm)") if arguments.no_litellm else find_litellm(arguments.litellm)
    outputs = output_pool(1)
    print(f"bench_proxy: {os.cpu_count()} CPUs, load average {load()}; concurrency {arguments.concurrency},"
          f" {arguments.rounds} rounds, {arguments.turns} turns per agent (20 -> {20 + 2 * arguments.turns} messages,"
          f" tool outputs 1-5 KB); litellm: {litellm or why}", flush=True)
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        scratch_path = Path(scratch)
        fake_port = free_port()
        fake = stack.enter_context(server_process(
            [sys.executable, str(Path(__file__).resolve()), "--serve-fake", str(fake_port)], fake_port, "fake upstream"))
        upstream = f"http://127.0.0.1:{fake_port}/v1"
        routes = [Route("direct", upstream, fake.pid)]
        arc_port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        arc = stack.enter_context(server_process(arc_command(arguments.arc_python, upstream, arc_port, qwen3),
                                                 arc_port, "arc-ref proxy", env=env, log=scratch_path / "arc.log"))
        routes.append(Route("arc", f"http://127.0.0.1:{arc_port}/v1", arc.pid))
        if arguments.baseline_python:
            before_port = free_port()
            before = stack.enter_context(server_process(
                arc_command(arguments.baseline_python, upstream, before_port, qwen3), before_port, "arc-ref proxy (before)",
                env=env, log=scratch_path / "arc-before.log"))
            routes.append(Route("arc-before", f"http://127.0.0.1:{before_port}/v1", before.pid))
        if litellm is not None:
            config = scratch_path / "litellm.yaml"
            config.write_text(LITELLM_CONFIG.format(upstream=upstream, key=KEY))
            litellm_port = free_port()
            litellm_env = {**env, "LITELLM_LOG": "ERROR", "LITELLM_MODE": "PRODUCTION", "NO_DOCS": "True",
                           "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                           "DISABLE_ADMIN_UI": "True", "LITELLM_TELEMETRY": "False"}
            litellm_process = stack.enter_context(server_process(
                [litellm, "--config", str(config), "--port", str(litellm_port), "--host", "127.0.0.1",
                 "--num_workers", "1"], litellm_port, "litellm proxy", env=litellm_env,
                log=scratch_path / "litellm.log", start_seconds=300))
            routes.append(Route("litellm", f"http://127.0.0.1:{litellm_port}/v1", litellm_process.pid))
        # the first request each server answers after it listens (a new conversation of 20 messages): what a
        # cold start leaves to it; then warm every route (imports, compiled templates, connections), and measure
        cold = {route.name: asyncio.run(request_by_request(route.base, 1, outputs, route.pid, f"cold-{route.name}"))[0]
                for route in routes}
        for route in routes:
            asyncio.run(one_round(route.base, route.name, 2, 3, outputs, route.pid, f"warm-{route.name}"))
        results = asyncio.run(interleaved(routes, arguments.concurrency, arguments.rounds, arguments.turns, outputs))
        # request by request at concurrency 1: new vs continuing, turn 10 / 50 / 200
        first: dict[str, list[Sample]] = {route.name: [] for route in routes}
        long_runs: dict[str, list[Sample]] = {route.name: [] for route in routes}
        for number in range(arguments.new_runs or max(2, arguments.rounds)):
            for route in routes:
                first[route.name] += asyncio.run(request_by_request(route.base, 6, outputs, route.pid,
                                                                    f"new-{route.name}-{number}"))
        marks = [turn for turn in (10, 50, 200) if turn < arguments.long_turns] + [arguments.long_turns]
        for number in range(arguments.long_runs):
            for route in routes:
                long_runs[route.name] += asyncio.run(turns_interleaved(
                    route.base, marks, outputs, route.pid, f"long-{route.name}-{number}"))
            print(f"  long conversations {number + 1}/{arguments.long_runs} done (load {load()})", flush=True)
    names = [route.name for route in routes]
    print(f"\nper request, by route and concurrency (medians over rounds; load average now {load()}):")
    print(f"{'route':<10} {'agents':>6} {'median ms':>10} {'p99 ms':>9} {'server CPU ms':>14} {'req/s':>8}")
    table: dict[tuple[str, int], Figures] = {}
    for agents in arguments.concurrency:
        for name in names:
            table[(name, agents)] = one = figures(results[(name, agents)])
            print(f"{name:<10} {agents:>6} {one.median_ms:>10.1f} {one.p99_ms:>9.1f} {one.cpu_ms:>14.2f}"
                  f" {one.throughput:>8.1f}")
    top = max(arguments.concurrency)
    print(f"\nwhere the p99 at concurrency {top} comes from: p99 ms of the rounds' first requests ({top} new conversations"
          " starting at once) / of the later requests: " + ", ".join(
              f"{name} {tail_of(results[(name, top)], first=True):.1f} / {tail_of(results[(name, top)], first=False):.1f}"
              for name in names))
    print("\nthe first request after start (a new conversation of 20 messages), server CPU ms / latency ms: "
          + ", ".join(f"{name} {(cold[name].cpu or 0.0) * 1000:.1f} / {cold[name].latency * 1000:.1f}" for name in names))
    print("\nrequest by request (concurrency 1), server CPU ms (median) and latency ms (median):")
    turns = marks
    head = "".join(f" {'turn ' + str(turn):>16}" for turn in turns)
    print(f"{'route':<10} {'new conv.':>16} {'continuing':>16}{head}")
    measured: dict[str, dict[str, float]] = {}
    for name in names:
        new = [sample for sample in first[name] if sample.turn == 1]
        going = [sample for sample in first[name] if sample.turn > 1]
        cells = {"new": statistics.median(s.cpu or 0.0 for s in new) * 1000,
                 "continuing": statistics.median(s.cpu or 0.0 for s in going) * 1000}
        line = (f"{name:<10} {cells['new']:>7.2f} / {statistics.median(s.latency for s in new) * 1000:>6.1f}"
                f" {cells['continuing']:>7.2f} / {statistics.median(s.latency for s in going) * 1000:>6.1f}")
        for turn in turns:
            around = window(long_runs[name], turn)
            cells[f"turn {turn}"] = statistics.median(s.cpu or 0.0 for s in around) * 1000
            line += f" {cells[f'turn {turn}']:>7.2f} / {statistics.median(s.latency for s in around) * 1000:>6.1f}"
        measured[name] = cells
        print(line)
    if "litellm" in names:
        for arc_name in [name for name in names if name.startswith("arc")]:
            print(f"\nratios {arc_name} / litellm (same run):")
            for agents in arguments.concurrency:
                arc_fig, lite = table[(arc_name, agents)], table[("litellm", agents)]
                print(f"  concurrency {agents:>3}: CPU/request {arc_fig.cpu_ms / lite.cpu_ms:.2f}x, median"
                      f" {arc_fig.median_ms / lite.median_ms:.2f}x, p99 {arc_fig.p99_ms / lite.p99_ms:.2f}x, throughput"
                      f" {arc_fig.throughput / lite.throughput:.2f}x")
        targets = [
            ("server CPU per request <= LiteLLM's at every concurrency",
             all(table[("arc", a)].cpu_ms <= table[("litellm", a)].cpu_ms for a in arguments.concurrency),
             ", ".join(f"{table[('arc', a)].cpu_ms:.2f} vs {table[('litellm', a)].cpu_ms:.2f} ms"
                       for a in arguments.concurrency)),
            (f"p99 <= 1.2x LiteLLM's at concurrency {top}",
             table[("arc", top)].p99_ms <= 1.2 * table[("litellm", top)].p99_ms,
             f"{table[('arc', top)].p99_ms:.1f} vs {table[('litellm', top)].p99_ms:.1f} ms"),
            (f"throughput at saturation (concurrency {top}) >= LiteLLM's",
             table[("arc", top)].throughput >= table[("litellm", top)].throughput,
             f"{table[('arc', top)].throughput:.1f} vs {table[('litellm', top)].throughput:.1f} req/s"),
        ]
    else:
        targets = []
    arc_cells = measured["arc"]
    last = f"turn {turns[-1]}"
    targets += [
        (f"{last} within 1.2x of turn 10 (arc, server CPU)", arc_cells[last] <= 1.2 * arc_cells["turn 10"],
         f"{arc_cells[last]:.2f} vs {arc_cells['turn 10']:.2f} ms"),
        ("a new conversation within 2x of a continuing one (arc, server CPU)",
         arc_cells["new"] <= 2 * arc_cells["continuing"],
         f"{arc_cells['new']:.2f} vs {arc_cells['continuing']:.2f} ms"),
    ]
    print("\ntargets (issue 28):")
    for text, met, detail in targets:
        print(f"  [{'met' if met else 'NOT met'}] {text}: {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, "bench_proxy"))
