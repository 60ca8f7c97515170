"""Every hostile or careless input of issue 9 and every server fault of issue 8 (item 2), tried as a user would.

    python benchmarks/refusal_cases.py [--no-fuzz] [--only WORDS]

Each case is a real subprocess: `arc-ref replay` fed crafted standard input, closed and full streams given
by shell redirections (`<&-`, `>&-`, `> /dev/full`), `/dev/zero` under `timeout`, `arc-ref budgets --set`,
and `arc-eval` against `arc-eval serve-scripted` started with its fault options (answering like a
misconfigured vLLM) or against a small vLLM-shaped server in this script that answers with bodies breaking
the API (serve-scripted only breaks the protocol on purpose, never the JSON shapes). Resume cases run in a
temporary directory.

It prints one row per case: case | command | exit code (expected) | the message's first line, where the
message is what a user reads: the error line `arc-ref replay` writes for the line in question (exit 0: the
replay goes on), or the first line on standard error. A row is `ok` when the exit code is the expected one,
the message holds the expected words, any extra check holds (nothing recorded, a file cleaned up), and no
output shows a traceback. The script exits 1 when any row differs. Then the fuzzer of
tests/hostile/test_fuzz_replay.py runs its default budget and prints how many inputs it tried (and the
budget of its slow run). About a minute or two in all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the tests' one readiness wait
from tests.waiting import http_ok, wait_until  # noqa: E402
from benchmarks.servers import SERVERS, run  # noqa: E402  (the servers, stopped however the run ends)
from arc_ref.frontends.cli import EXIT_IO, EXIT_LINE_TOO_LONG, EXIT_OK, EXIT_USAGE, MAX_LINE_BYTES
from arc_ref.tokenizers import TOKENIZER_FILE_LIMIT
from proofs_check.shared_data import QWEN3_NAME, shared_data_dir

REPO = Path(__file__).resolve().parents[1]
QWEN3_DIR = shared_data_dir() / QWEN3_NAME
ARC_REF = [sys.executable, "-m", "arc_ref.frontends.cli"]
ARC_EVAL = [sys.executable, "-c", "import sys; from arc_eval.cli import main; sys.exit(main(sys.argv[1:]))"]
ARC_REF_SHELL = " ".join(shlex.quote(part) for part in ARC_REF)
EXIT_STOPPED = 3  # arc-eval: the server or its answers stopped the run (eval/SERVING.md)
EXIT_REPORT_BAD_INPUT = 2  # arc-eval report: bad input, like every arc-eval command (issue 21 item 3)
CONFIG = '{"op":"config","preset":"minimal"}'
OBSERVE = '{"op":"observe","action":"ls","observation":"x"}'
MESSAGE_WIDTH = 300
COMMAND_WIDTH = 76


@dataclass
class Outcome:
    exit_code: int | None  # None: the command did not end within its time limit
    message: str
    problems: list[str] = field(default_factory=list)


@dataclass
class Case:
    name: str
    command: str  # as a user would type it, shortened for the table
    run: Callable[[], Outcome]
    exit_code: int
    expect: str  # words the message must hold
    needs: str | None = None  # the name of an earlier case whose outcome this one builds on (run first by --only)


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a message's "Fix: ..." is kept whole and its middle cut instead."""
    text = text.replace("\n", " ")
    if len(text) <= width:
        return text
    fix = text.find(" Fix: ")
    if fix > 0 and len(text) - fix < width * 2 // 3:
        tail = text[fix:]
        head = text[: width - len(tail) - 2]
        return head[: head.rfind(" ")] + " …" + tail
    return text[: width - 1] + "…"


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def _tracebacks(*texts: str) -> list[str]:
    return [f"a traceback, ending in: {_cut(text.strip().splitlines()[-1], 200)}" for text in texts
            if "Traceback (most recent call last)" in text or "Exception ignored" in text]


def _decoded(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


def _run(argv: list[str], stdin: bytes | None = None, timeout: float = 120, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as late:
        return None, _decoded(late.stdout), _decoded(late.stderr)
    return done.returncode, _decoded(done.stdout), _decoded(done.stderr)


def from_stderr(argv: list[str], stdin: bytes | None = None, timeout: float = 120, cwd: Path | None = None,
                env: dict[str, str] | None = None, pick: str | None = None, lines: int = 1) -> Outcome:
    """The first line on standard error (or the first holding ``pick``; with ``lines``, it and the next ones)."""
    code, out, err = _run(argv, stdin, timeout, cwd, env)
    written = [line for line in err.splitlines() if line.strip()]
    start = next((index for index, line in enumerate(written) if pick and pick in line), 0)
    chosen = " / ".join(line.strip() for line in written[start:start + lines]) or "(nothing on stderr)"
    return Outcome(code, chosen, _tracebacks(out, err))


def shell(script: str, stdin: bytes | None = None, timeout: float = 120) -> Outcome:
    """A bash line, so that `<&-`, `>&-` and `> /dev/full` mean what they mean to a user."""
    return from_stderr(["bash", "-c", script], stdin, timeout)


def replay_line(lines: list[bytes | str], line: int) -> Outcome:
    """`arc-ref replay -` on the lines; the message is the error line answering line ``line``. The replay must
    answer every input line with one JSON line."""
    data = b"".join((item if isinstance(item, bytes) else item.encode("utf-8", errors="surrogatepass")) + b"\n"
                    for item in lines)
    code, out, err = _run([*ARC_REF, "replay", "-"], data)
    problems = _tracebacks(out, err)
    answers = []
    for text in out.splitlines():
        try:
            answers.append(json.loads(text))
        except ValueError:
            problems.append(f"an output line that is not JSON: {_cut(text, 80)}")
    if len(answers) != len(lines):
        problems.append(f"{len(answers)} output lines for {len(lines)} input lines")
    if err:
        problems.append(f"standard error: {_cut(err, 120)}")
    answer = answers[line - 1] if len(answers) >= line else {}
    if answer.get("op") != "error":
        problems.append(f"line {line} was answered by {_cut(json.dumps(answer), 80)}, not by an error line")
    return Outcome(code, f"error line: {answer.get('message', '')}", problems)


def checked(outcome: Outcome, check: Callable[[], str | None]) -> Outcome:
    """``outcome`` with the problem ``check`` finds, if any."""
    problem = check()
    if problem:
        outcome.problems.append(problem)
    return outcome


# --- servers ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    """The one readiness wait of the tests (tests/waiting.py), a benchmark's stop when it fails."""
    try:
        wait_until(http_ok(url), process, f"the server at {url}", base_s=60)
    except AssertionError as failure:
        raise SystemExit(str(failure)) from None


@contextlib.contextmanager
def serve_scripted(*flags: str, problems: list[str]) -> Iterator[str]:
    """`arc-eval serve-scripted --max-model-len 4096 FLAGS` in a process of its own; yields its base URL. A
    traceback the server printed is added to ``problems`` when it has stopped."""
    port = free_port()
    process = SERVERS.start([*ARC_EVAL, "serve-scripted", "--port", str(port), "--max-model-len", "4096", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        SERVERS.raise_if_stopped()
        _wait_healthy(f"http://127.0.0.1:{port}/health", process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        SERVERS.stop(process, 30)
        _, err = process.communicate()
        problems.extend(f"serve-scripted: {problem}" for problem in _tracebacks(_decoded(err)))


GOOD_COMPLETION = {
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Thought: look.\nAction: ls"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}


class BrokenVLLM(ThreadingHTTPServer):
    """A vLLM-shaped server (model card, /tokenize, chat) whose `/tokenize` answers ``tokenize`` and whose chat
    answers ``chat`` to every request but the 1-token probe (so that a run gets past its checks and meets the
    broken answer in a task)."""

    daemon_threads = True

    def __init__(self, tokenize: Any = None, chat: Any = None) -> None:
        super().__init__(("127.0.0.1", 0), _BrokenVLLMHandler)
        self.tokenize_body = {"count": 12} if tokenize is None else tokenize
        self.chat_body = GOOD_COMPLETION if chat is None else chat


class _BrokenVLLMHandler(BaseHTTPRequestHandler):
    server: BrokenVLLM

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _answer(self, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/v1/models":
            self._answer({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm",
                                                      "max_model_len": 4096}]})
        else:
            self._answer({})

    def do_POST(self) -> None:  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/tokenize":
            self._answer(self.server.tokenize_body)
        elif request.get("max_tokens") == 1:
            self._answer(GOOD_COMPLETION)  # the probe of check_server
        else:
            self._answer(self.server.chat_body)


@contextlib.contextmanager
def broken_vllm(tokenize: Any = None, chat: Any = None) -> Iterator[str]:
    server = BrokenVLLM(tokenize, chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _env_without_key() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}


def nih_over_http(url: str, out: Path, *extra: str, model: str = "scripted") -> list[str]:
    """arc-eval nih over HTTP; ``extra`` may replace a default flag (a flag is given once)."""
    defaults = {"--context-limit": "4096", "--max-tokens": "256", "--max-retries": "1"}
    base = [part for flag, value in defaults.items() if flag not in extra for part in (flag, value)]
    return [*ARC_EVAL, "nih", "--backend", "openai", "--base-url", url, "--model", model, *base, "--tasks", "1",
            "--seeds", "42", "--methods", "sliding_window", "--out", str(out), "--no-progress", *extra]


def recorded_tasks(out: Path) -> int:
    tasks = out / "tasks.jsonl"
    return len(tasks.read_text().splitlines()) if tasks.exists() else 0


def nothing_recorded(out: Path) -> Callable[[], str | None]:
    return lambda: f"{recorded_tasks(out)} task(s) recorded" if recorded_tasks(out) else None


def no_run_directory(out: Path) -> Callable[[], str | None]:
    return lambda: f"{out} was created" if out.exists() else None


# --- the cases ------------------------------------------------------------------------------------------


def replay_cases(scratch: Path) -> list[Case]:
    nines = "9" * 4300
    trace = scratch / "trace.jsonl"
    trace.write_text(CONFIG + "\n" + OBSERVE + "\n", encoding="utf-8")
    long_line = [CONFIG.encode(), b"x" * (MAX_LINE_BYTES + 1), OBSERVE.encode()]
    long_input = b"\n".join(long_line) + b"\n"

    def over_the_limit() -> Outcome:
        code, out, err = _run([*ARC_REF, "replay", "-"], long_input)
        outcome = Outcome(code, _first_line(err), _tracebacks(out, err))
        answers = [json.loads(line) for line in out.splitlines()]
        if [answer["op"] for answer in answers] != ["config", "error"]:
            outcome.problems.append(f"expected a config line and one error line, got {[a['op'] for a in answers]}")
        return outcome

    return [
        Case("surrogate in goal", "arc-ref replay - <<< '{...,\"goal\":\"\\ud800\"}'",
             lambda: replay_line(['{"op":"config","preset":"minimal","goal":"\\ud800"}'], 1), EXIT_OK,
             "not valid Unicode text"),
        Case("surrogate in system", "arc-ref replay - <<< '{...,\"system\":\"a\\udc00\"}'",
             lambda: replay_line(['{"op":"config","preset":"minimal","system":"a\\udc00"}'], 1), EXIT_OK,
             "not valid Unicode text"),
        Case("surrogate in an unknown key's name", "arc-ref replay - <<< '{...,\"\\ud800\":1}'",
             lambda: replay_line(['{"op":"config","preset":"minimal","\\ud800":1}'], 1), EXIT_OK,
             "not valid Unicode text"),
        Case("surrogate as raw bytes ED A0 80", "printf '{...\"observation\":\"\\xed\\xa0\\x80\"}' | arc-ref replay -",
             lambda: replay_line([CONFIG, b'{"op":"observe","action":"ls","observation":"\xed\xa0\x80"}'], 2),
             EXIT_OK, "not UTF-8 text"),
        Case("surrogate in another field (thought)", "arc-ref replay - <<< 'CONFIG\\n{\"op\":\"agent\",\"thought\":\"\\ud800\",...}'",
             lambda: replay_line([CONFIG, '{"op":"agent","thought":"\\ud800","action":"ls"}'], 2), EXIT_OK,
             "not valid Unicode text"),
        Case("surrogate in an observation", "arc-ref replay - <<< 'CONFIG\\n{\"op\":\"observe\",...,\"observation\":\"\\udfff\"}'",
             lambda: replay_line([CONFIG, '{"op":"observe","action":"ls","observation":"\\udfff"}'], 2), EXIT_OK,
             "not valid Unicode text"),
        Case("closed stdin", "arc-ref replay - <&-", lambda: shell(f"{ARC_REF_SHELL} replay - <&-"), EXIT_IO,
             "standard input is closed"),
        Case("closed stdout", "arc-ref replay trace.jsonl >&-",
             lambda: shell(f"{ARC_REF_SHELL} replay {shlex.quote(str(trace))} >&-"), EXIT_IO,
             "standard output is closed"),
        Case("full stdout", "arc-ref replay trace.jsonl > /dev/full",
             lambda: shell(f"{ARC_REF_SHELL} replay {shlex.quote(str(trace))} > /dev/full"), EXIT_IO,
             "No space left on device"),
        Case("closed stdout (budgets)", "arc-ref budgets --preset minimal >&-",
             lambda: shell(f"{ARC_REF_SHELL} budgets --preset minimal >&-"), EXIT_IO, "standard output is closed"),
        Case("reader goes away (| head -c 100)", "arc-ref replay - < 3001 lines | head -c 100",
             lambda: shell(f"{ARC_REF_SHELL} replay - | head -c 100 > /dev/null; exit ${{PIPESTATUS[0]}}",
                           ("\n".join([CONFIG] + ['{"op":"view"}'] * 3000) + "\n").encode()), EXIT_OK, ""),
        Case("/dev/zero (endless line)", "timeout 60 arc-ref replay - < /dev/zero",
             lambda: shell(f"timeout 60 {ARC_REF_SHELL} replay - < /dev/zero"), EXIT_LINE_TOO_LONG,
             f"longer than {MAX_LINE_BYTES} bytes"),
        Case(f"a line of {MAX_LINE_BYTES + 1} bytes", "arc-ref replay - < (config, 32 MiB + 1 of x, observe)",
             over_the_limit, EXIT_LINE_TOO_LONG, f"line 2 is longer than {MAX_LINE_BYTES} bytes"),
        Case("4,300-digit capacity (replay)", "arc-ref replay - <<< '{...,\"capacity\":999…(4300 digits)}'",
             lambda: replay_line([f'{{"op":"config","preset":"minimal","capacity":{nines}}}'], 1), EXIT_OK,
             "capacity must be at most 2147483647 (2^31 - 1), got an integer of 4300 digits"),
        Case("4,300-digit capacity (budgets)", "arc-ref budgets --preset minimal --set capacity=999…(4300)",
             lambda: from_stderr([*ARC_REF, "budgets", "--preset", "minimal", "--set", f"capacity={nines}"]),
             EXIT_USAGE, "a 4300-digit number is out of range"),
        Case("capacity 2^31 (budgets)", "arc-ref budgets --preset minimal --set capacity=2147483648",
             lambda: from_stderr([*ARC_REF, "budgets", "--preset", "minimal", "--set", "capacity=2147483648"]),
             EXIT_USAGE, "at most 2147483647"),
        Case("full-width digits (budgets)", "arc-ref budgets --preset minimal --set capacity=１２",
             lambda: from_stderr([*ARC_REF, "budgets", "--preset", "minimal", "--set", "capacity=１２"]),
             EXIT_USAGE, "needs an integer written as in JSON"),
        Case("full-width digits (replay)", "arc-ref replay - <<< '{...,\"capacity\":１２}'",
             lambda: replay_line(['{"op":"config","preset":"minimal","capacity":１２}'], 1), EXIT_OK, "not valid JSON"),
        Case("1_000 (budgets)", "arc-ref budgets --preset minimal --set capacity=1_000",
             lambda: from_stderr([*ARC_REF, "budgets", "--preset", "minimal", "--set", "capacity=1_000"]),
             EXIT_USAGE, "needs an integer written as in JSON"),
        Case("1_000 (replay)", "arc-ref replay - <<< '{...,\"capacity\":1_000}'",
             lambda: replay_line(['{"op":"config","preset":"minimal","capacity":1_000}'], 1), EXIT_OK, "not valid JSON"),
    ]


def lossy_tokenizer_json(path: Path) -> str:
    """A BPE over a-z and space with no byte fallback and no unknown token: it silently drops other characters."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: index for index, char in enumerate("abcdefghijklmnopqrstuvwxyz ")}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", "isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.save(str(path))
    return str(path)


def tokenizer_cases(scratch: Path) -> list[Case]:
    lossy = lossy_tokenizer_json(scratch / "lossy.json")
    fifo = scratch / "fifo.json"
    os.mkfifo(fifo)
    sparse = scratch / "sparse.json"
    with open(sparse, "wb") as handle:
        handle.truncate(TOKENIZER_FILE_LIMIT + 1)  # a hole: no disk used, nothing to read

    def budgets(tokenizer: str) -> Callable[[], Outcome]:
        return lambda: from_stderr([*ARC_REF, "budgets", "--preset", "minimal", "--set", f"tokenizer={tokenizer}"],
                                   timeout=60)

    return [
        Case("lossy tokenizer.json (budgets)", "arc-ref budgets --preset minimal --set tokenizer=hf:lossy.json",
             budgets(f"hf:{lossy}"), EXIT_USAGE, "is lossy"),
        Case("lossy tokenizer.json (replay)", "arc-ref replay - <<< '{...,\"tokenizer\":\"hf:lossy.json\"}'",
             lambda: replay_line([json.dumps({"op": "config", "preset": "minimal", "tokenizer": f"hf:{lossy}"})], 1),
             EXIT_OK, "is lossy"),
        Case("lossy tokenizer.json (arc-eval)", "arc-eval nih --tokenizer-json lossy.json",
             lambda: from_stderr([*ARC_EVAL, "nih", "--tokenizer-json", lossy, "--tasks", "1", "--seeds", "42",
                                  "--out", str(scratch / "lossy-run"), "--no-progress"]), EXIT_USAGE, "is lossy"),
        Case("tokenizer path is a directory", "arc-ref budgets --preset minimal --set tokenizer=hf:DIR",
             budgets(f"hf:{scratch}"), EXIT_USAGE, "not a regular file"),
        Case("tokenizer path is a FIFO", "arc-ref budgets --preset minimal --set tokenizer=hf:fifo.json",
             budgets(f"hf:{fifo}"), EXIT_USAGE, "not a regular file"),
        Case("tokenizer too large (sparse)", f"arc-ref budgets ... --set tokenizer=hf:sparse.json ({TOKENIZER_FILE_LIMIT + 1} B)",
             budgets(f"hf:{sparse}"), EXIT_USAGE, f"more than the limit of {TOKENIZER_FILE_LIMIT}"),
    ]


def reply_cases(scratch: Path) -> list[Case]:
    """Answers that break the API, from the vLLM-shaped server above: refused at the probe or in the first task,
    exit 3, and the task in flight is not recorded."""
    choice = GOOD_COMPLETION["choices"]
    faults: list[tuple[str, dict[str, Any], str]] = [
        ("/tokenize without `count`", {"tokenize": {"tokens": []}}, "has no `count`"),
        ("/tokenize `count` not a number", {"tokenize": {"count": "12"}}, "`count` must be a non-negative integer"),
        ("`choices` not a list", {"chat": {"choices": "no"}}, "`choices` must be a non-empty list"),
        ("`choices` of strings", {"chat": {"choices": ["Action: ls"]}}, "choices[0] must be an object"),
        ("`usage` a string", {"chat": {"choices": choice, "usage": "12 tokens"}}, "`usage` must be an object"),
        ("usage.prompt_tokens a string", {"chat": {"choices": choice, "usage": {"prompt_tokens": "12"}}},
         "usage.prompt_tokens must be"),
        ("completion not JSON object", {"chat": [1, 2]}, "a chat completion must be a JSON object"),
    ]

    def case(name: str, bodies: dict[str, Any], expect: str, index: int) -> Case:
        out = scratch / f"reply-{index}"

        def run() -> Outcome:
            with broken_vllm(**bodies) as url:
                outcome = from_stderr(nih_over_http(url, out, model="m"), env=_env_without_key(), pick="arc-eval:")
            return checked(outcome, nothing_recorded(out))

        (where, body), = bodies.items()
        shown_body = json.dumps(body, ensure_ascii=False)
        return Case(f"reply: {name}", f"arc-eval nih --backend openai ... ({where} answers {shown_body})", run,
                    EXIT_STOPPED, expect)

    return [case(name, bodies, expect, index) for index, (name, bodies, expect) in enumerate(faults)]


def server_fault_cases(scratch: Path) -> list[Case]:
    """Issue 8 item 2: serve-scripted answering like a misconfigured vLLM; each stops before the first task."""

    def fault(name: str, flags: tuple[str, ...], extra: tuple[str, ...], expect: str, code: int = EXIT_STOPPED,
              model: str = "scripted", env: dict[str, str] | None = None, shown: str = "") -> Case:
        out = scratch / ("fault-" + re.sub(r"[^a-z0-9]+", "-", name.lower()))

        def run() -> Outcome:
            server_problems: list[str] = []
            with serve_scripted(*flags, problems=server_problems) as url:
                outcome = from_stderr(nih_over_http(url, out, *extra, model=model), env=env or _env_without_key(),
                                      pick="arc-eval:" if code else None)
            outcome.problems += server_problems
            if code == EXIT_STOPPED:
                return checked(outcome, no_run_directory(out))
            if code == EXIT_OK:
                outcome.message = f"ran: {recorded_tasks(out)} task(s) recorded"
                return checked(outcome, lambda: None if recorded_tasks(out) == 1 else "the task was not recorded")
            return outcome

        command = " ".join(["serve-scripted", *flags, "+ arc-eval nih ...", shown or " ".join(extra)]).strip()
        return Case(name, command, run, code, expect)

    tool_dir = str(QWEN3_DIR)
    key_env = {**_env_without_key(), "OPENAI_API_KEY": "sesame"}
    cases = [
        fault("wrong model name", (), (), "serves scripted, not 'Qwen/Qwen3-8B'. Fix: pass --model scripted",
              model="Qwen/Qwen3-8B", shown="--model Qwen/Qwen3-8B"),
        fault("401: server has --api-key, run has none", ("--api-key", "sesame"), (),
              "HTTP 401: Unauthorized. Fix: pass the server's key with --api-key KEY"),
        fault("401 fixed: --api-key given", ("--api-key", "sesame"), ("--api-key", "sesame"), "ran", code=EXIT_OK),
        fault("401 fixed: OPENAI_API_KEY set", ("--api-key", "sesame"), (), "ran", code=EXIT_OK, env=key_env,
              shown="(OPENAI_API_KEY=sesame)"),
        fault("every request overflowing", ("--overflow-every-request",), (),
              "refused a 1-token probe of a one-line prompt as too long"),
        fault("never answering", ("--never-answer",), ("--request-timeout", "1"),
              "gave up after 2 attempts; last error: no answer within 1"),
        fault("window smaller than --context-limit", (), ("--context-limit", "8192"),
              "smaller than --context-limit 8192"),
    ]
    if QWEN3_DIR.is_dir():
        cases.insert(4, fault("tool mode off on the server", ("--no-auto-tool-choice",),
                              ("--tool-calling", "--tokenizer", tool_dir),
                              "Fix: restart vLLM with --enable-auto-tool-choice --tool-call-parser hermes",
                              shown="--tool-calling --tokenizer qwen3-tokenizer"))
    else:
        print(f"skipped: tool mode off (needs {QWEN3_DIR})")
    return cases


FIRST_RUN = "first run (relative --out)"


def resume_cases(scratch: Path) -> list[Case]:
    """Resume forgives what does not change the run and refuses what does (issue 9.4)."""
    work = scratch / "resume"
    work.mkdir()
    first = ["nih", "--tasks", "2", "--seeds", "42", "--methods", "sliding_window", "--out", "run",
             "--no-progress", "--concurrency", "2"]
    finished: dict[str, str] = {}

    def first_run() -> Outcome:
        outcome = from_stderr([*ARC_EVAL, *first], cwd=work)
        finished["tasks"] = (work / "run" / "tasks.jsonl").read_text() if (work / "run" / "tasks.jsonl").exists() else ""
        outcome.message = f"ran: {recorded_tasks(work / 'run')} task(s) recorded"
        return outcome

    def resumed() -> Outcome:
        again = ["nih", "--methods", "sliding_window", "--out", str(work / "run"), "--seeds", "42", "--tasks", "2",
                 "--concurrency", "5"]
        outcome = from_stderr([*ARC_EVAL, *again], cwd=scratch, pick="resuming")
        return checked(outcome, lambda: None if (work / "run" / "tasks.jsonl").read_text() == finished.get("tasks")
                       else "tasks.jsonl changed: tasks were redone")

    def another_seed() -> Outcome:
        return from_stderr([*ARC_EVAL, *first[:4], "43", *first[5:]], cwd=work, pick="arc-eval:", lines=2)

    def leftover_tmp() -> Outcome:
        out = work / "killed"
        out.mkdir()
        (out / "manifest.json.tmp").write_text('{"schema": "arc-ev')
        outcome = from_stderr([*ARC_EVAL, "nih", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window",
                               "--out", str(out), "--no-progress"], cwd=work)
        outcome.message = f"ran: {recorded_tasks(out)} task(s) recorded; manifest.json.tmp " + (
            "still there" if (out / "manifest.json.tmp").exists() else "removed")
        return checked(outcome, lambda: "manifest.json.tmp left" if (out / "manifest.json.tmp").exists() else None)

    def repeated_seed() -> Outcome:
        outcome = from_stderr([*ARC_EVAL, "nih", "--tasks", "1", "--seeds", "42", "42", "--out", "twice",
                               "--no-progress"], cwd=work)
        return checked(outcome, no_run_directory(work / "twice"))

    return [
        Case(FIRST_RUN, "arc-eval " + " ".join(first), first_run, EXIT_OK, "ran: 2 task(s)"),
        Case("resume: abs. --out, reordered, bar, conc. 5",
             "arc-eval nih --methods sliding_window --out /ABS/run --seeds 42 --tasks 2 --concurrency 5",
             resumed, EXIT_OK, "resuming", needs=FIRST_RUN),
        Case("resume with another seed (refused)", "arc-eval nih --tasks 2 --seeds 43 ... --out run",
             another_seed, EXIT_USAGE, "seeds: stored [42] != requested [43]", needs=FIRST_RUN),
        Case("leftover manifest.json.tmp", "arc-eval nih ... --out killed (holding manifest.json.tmp)",
             leftover_tmp, EXIT_OK, "manifest.json.tmp removed"),
        Case("--seeds 42 42", "arc-eval nih --tasks 1 --seeds 42 42", repeated_seed, EXIT_USAGE,
             "--seeds lists 42 more than once"),
    ]


def argument_cases(scratch: Path) -> list[Case]:
    def nih(*extra: str) -> Callable[[], Outcome]:
        return lambda: from_stderr([*ARC_EVAL, "nih", "--backend", "openai", "--model", "m", *extra, "--out",
                                    str(scratch / "args-run"), "--no-progress"], pick="error:")

    run = scratch / "resume" / "run"
    return [
        Case("port 99999 in --base-url", "arc-eval nih --backend openai --model m --base-url http://host:99999/v1",
             nih("--base-url", "http://host:99999/v1"), EXIT_USAGE, "port 99999 is outside 0-65535"),
        Case("serve-scripted --port 70000", "arc-eval serve-scripted --port 70000",
             lambda: from_stderr([*ARC_EVAL, "serve-scripted", "--port", "70000"], pick="error:"), EXIT_USAGE,
             "70000"),
        Case("serve-scripted --port -1", "arc-eval serve-scripted --port -1",
             lambda: from_stderr([*ARC_EVAL, "serve-scripted", "--port", "-1"], pick="error:"), EXIT_USAGE, "-1"),
        Case("ftp:// base URL", "arc-eval nih --backend openai --model m --base-url ftp://host/v1",
             nih("--base-url", "ftp://host/v1"), EXIT_USAGE, "expected an http:// or https:// URL"),
        Case("base URL without a scheme", "arc-eval nih --backend openai --model m --base-url localhost:8000/v1",
             nih("--base-url", "localhost:8000/v1"), EXIT_USAGE, "localhost:8000/v1"),
        Case("report --arc with no such method", "arc-eval report run --arc nosuch",
             lambda: from_stderr([*ARC_EVAL, "report", str(run), "--arc", "nosuch", "--out", str(scratch / "rep"),
                                  "--format", "md"], pick="nosuch"), EXIT_REPORT_BAD_INPUT,
             "--arc nosuch: no task of that method in the runs", needs=FIRST_RUN),  # the run it reports on
    ]


# --- issue 18 (items 5, 6, 7, 9): arguments and lines that crashed or hung, a huge result, unusable run dirs --


# A Session given a tool result one byte over the largest observation: the refusal is raised at once, then
# the call still waits and takes a small result (the script exits 1 with the refusal's line on stderr).
TOO_LARGE_RESULT = """
import sys
from arc_ref.session import Session
session = Session("hf-dir:" + sys.argv[1], goal="Solve it.", tools=[{"type": "function", "function": {"name": "bash"}}])
session.messages()
session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
try:
    session.add_tool_result("c1", "\u00e9" * (32 * 2**20 + 1))
except Exception as refused:
    session.add_tool_result("c1", "a.txt")
    sys.exit(f"{type(refused).__name__}: {refused}")
"""


def mcp_cases(work: Path) -> list[Case]:
    """`arc-ref mcp STORE` fed one hostile line after the handshake: the line's answer (never none)."""
    sys.path.insert(0, str(REPO))
    from tests.hostile import test_mcp_lines as hostile

    def answered(name: str, line: bytes, code: int) -> Callable[[], Outcome]:
        def run() -> Outcome:
            server = hostile.Server(work / f"mcp-{len(os.listdir(work))}.arc")
            problems: list[str] = []
            try:
                server.answer(json.dumps(hostile.INITIALIZE).encode())
                server.send(json.dumps(hostile.INITIALIZED).encode())
                answer = server.answer(line)
                error = answer.get("error") or {}
                message = f"{error.get('code')} {error.get('message', '')}" if error else json.dumps(answer)[:200]
                if error.get("code") != code:
                    problems.append(f"error code {error.get('code')}, expected {code}")
            except AssertionError as problem:
                message, problems = "(no answer)", [str(problem).splitlines()[0]]
            finally:
                status, err = server.close()
            return Outcome(status, message, problems + _tracebacks(err))
        return run

    return [Case(f"mcp: {name}", f"arc-ref mcp STORE <<< {name} line", answered(name, line, code), EXIT_OK,
                 words)
            for name, line, code, words, *_ in hostile.HOSTILE]


def issue18_input_cases(scratch: Path) -> list[Case]:
    """Front ends given hostile input (issue 18, items 5, 6, 7 and 9): every line answered, a clear refusal."""
    work = scratch / "issue18"
    work.mkdir()
    nih = [*ARC_EVAL, "nih", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window", "--no-progress"]

    def read_only_out() -> Outcome:
        shared = Path(tempfile.mkdtemp(prefix="refusal-read-only-"))  # in /tmp: reachable by nobody
        try:
            shared.chmod(0o755)
            out = shared / "ro"
            out.mkdir()
            out.chmod(0o555)
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
            outcome = from_stderr([*as_nobody, *nih, "--out", str(out)], cwd=shared, pick="arc-eval:")
            outcome.message = outcome.message.replace(str(shared), "$RO")
            return checked(outcome, lambda: f"left {sorted(os.listdir(out))}" if os.listdir(out) else None)
        finally:
            subprocess.run(["rm", "-rf", str(shared)], check=False)

    def empty_out() -> Outcome:
        here = work / "empty-out"
        here.mkdir()
        outcome = from_stderr([*nih, "--out", ""], cwd=here)
        return checked(outcome, lambda: f"wrote {sorted(os.listdir(here))}" if os.listdir(here) else None)

    def unrelated_out() -> Outcome:
        out = work / "photos"
        out.mkdir()
        (out / "holiday.jpg").write_bytes(b"\xff\xd8")
        outcome = from_stderr([*nih, "--out", str(out)], pick="arc-eval:")
        return checked(outcome, lambda: None if os.listdir(out) == ["holiday.jpg"] else f"left {os.listdir(out)}")

    qwen_tools = json.dumps({"op": "config", "preset": "minimal", "tokenizer": f"hf-dir:{QWEN3_DIR}",
                             "chat_format": "template", "action_mode": "tools", "context_limit": 3000,
                             "tools": [{"type": "function", "function": {"name": "bash"}}]})

    def tool_turn(arguments: str) -> str:
        return json.dumps({"op": "tool_turn", "thought": "", "calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": arguments}}]})

    def then_answered(lines: list[str]) -> Outcome:
        outcome = replay_line([*lines, '{"op": "view"}'], 2)
        return outcome

    return [
        Case("tool call arguments nesting 100,000 deep", "arc-ref replay - (tool_turn, arguments [[[...]]])",
             lambda: then_answered([qwen_tools, tool_turn("[" * 100_000 + "]" * 100_000)]), EXIT_OK,
             "its arguments are nested 100000 levels deep (at most 128)"),
        Case("tool call arguments with a 5,000-digit integer", "arc-ref replay - (tool_turn, {\"id\": 99...9})",
             lambda: then_answered([qwen_tools, tool_turn('{"id": ' + "9" * 5000 + "}")]), EXIT_OK,
             "its arguments hold an integer of 5000 digits (at most 4300)"),
        *mcp_cases(work),
        Case("a tool result over 64 MiB (Session, Qwen3)", "session.add_tool_result('c1', 'é' * (32 MiB + 1))",
             lambda: from_stderr([sys.executable, "-c", TOO_LARGE_RESULT, str(QWEN3_DIR)], pick="InvalidEvent"),
             1, "is larger than the largest stored observation, 67,108,864 bytes (64 MiB)"),
        Case("--out a read-only directory", "arc-eval nih ... --out RO (mode 0555, not root)", read_only_out,
             EXIT_USAGE, "cannot write in run directory"),
        Case("--out ''", "arc-eval nih ... --out ''", empty_out, EXIT_USAGE, "--out names no directory"),
        Case("--out an unrelated non-empty directory", "arc-eval nih ... --out photos (holding holiday.jpg)",
             unrelated_out, EXIT_USAGE, "is not empty (holiday.jpg)"),
    ]


# --- the table ------------------------------------------------------------------------------------------


# --- the durable store and its front ends (issue 18, items 1-3 and 8) --------------------------------------

_STORE_WRITER = """
import os, sys
from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore
store = DurableStore.create(sys.argv[1], preset("minimal", capacity=100))
for number in range(40):
    store.append(Observe(f"cat f{number}.txt", f"row {number} é中 " * 5))
if sys.argv[2] == "kill":
    os.kill(os.getpid(), 9)  # 40 events acknowledged, in STORE-wal until a checkpoint
if sys.argv[2] == "hold":
    os.write(1, b"ready\\n")
    sys.stdin.read()  # a writer holding the store open until its input ends
store.close()
"""


def _store(path: Path, how: str = "close") -> Path:
    """A store of 41 rows at ``path``: closed cleanly, or its writer killed after acknowledging them."""
    subprocess.run([sys.executable, "-c", _STORE_WRITER, str(path), how], capture_output=True, timeout=120)
    return path


def _from_stdout(argv: list[str], pick: str, env: dict[str, str] | None = None) -> Outcome:
    """The first line on standard output holding ``pick`` (a command that succeeds); stderr must be empty."""
    code, out, err = _run(argv, env=env)
    outcome = Outcome(code, next((line for line in out.splitlines() if pick in line), "(no such line on stdout)"),
                      _tracebacks(out, err))
    if err.strip():
        outcome.problems.append(f"standard error: {_cut(err, 120)}")
    return outcome


def _untouched(victim: Path) -> Callable[[], str | None]:
    return lambda: None if victim.read_text() == "precious\n" else f"{victim.name} was written through"


def store_cases(scratch: Path) -> list[Case]:
    """The store's WAL lost or damaged after a crash, two names of one store, files planted beside it, and the
    front ends given a damaged store or failing streams (issue 18.1-3, 18.8). Statuses: spec/store.md."""
    work = scratch / "store"
    work.mkdir()
    victim = work / "victim.txt"
    victim.write_text("precious\n")

    def wal_damaged(damage: str, command: str = "inspect") -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = _store(work / f"wal-{damage.replace(' ', '-')}-{command}.arc", "kill")
            wal = Path(str(path) + "-wal")
            if damage == "deleted":
                wal.unlink()
                Path(str(path) + "-shm").unlink(missing_ok=True)
            elif damage == "truncated":
                os.truncate(wal, wal.stat().st_size // 2)
            else:
                data = bytearray(wal.read_bytes())
                data[len(data) // 2] ^= 0x10
                wal.write_bytes(bytes(data))
            return from_stderr([*ARC_REF, command, str(path)])
        return run

    def second_writer_by_symlink() -> Outcome:
        path = _store(work / "held.arc")
        alias = work / "alias.arc"
        alias.symlink_to(path)
        holder = subprocess.Popen([sys.executable, "-c", _STORE_WRITER.replace(
            'store = DurableStore.create(sys.argv[1], preset("minimal", capacity=100))',
            "store = DurableStore.open(sys.argv[1])").replace("range(40)", "range(0)"), str(path), "hold"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert holder.stdout is not None
            holder.stdout.readline()
            outcome = from_stderr([*ARC_REF, "mcp", str(alias)])
        finally:
            holder.communicate(b"", timeout=60)
        return outcome

    def hard_link() -> Outcome:
        path = _store(work / "linked.arc")
        os.link(path, work / "other-name.arc")
        return from_stderr([*ARC_REF, "mcp", str(work / "other-name.arc")])

    def planted(name: str, command: str) -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = work / f"planted-{name.strip('.')}-{command}.arc"
            if command != "mcp":
                _store(path)
                Path(str(path) + name).unlink(missing_ok=True)
            Path(str(path) + name).symlink_to(victim)
            outcome = from_stderr([*ARC_REF, command, str(path)])
            if outcome.message == "(nothing on stderr)":
                outcome.message = f"served; {victim.name} " + ("untouched" if _untouched(victim)() is None
                                                                else "WRITTEN THROUGH")
            return checked(outcome, _untouched(victim))
        return run

    def fifo(name: str, command: str) -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = _store(work / f"fifo-{name.strip('.')}.arc")
            Path(str(path) + name).unlink(missing_ok=True)
            os.mkfifo(str(path) + name)
            outcome = from_stderr([*ARC_REF, command, str(path)], timeout=60)
            if outcome.message == "(nothing on stderr)":
                outcome.message = f"served until the end of its input; {name} ignored"
            return outcome
        return run

    def damaged_snapshot() -> Outcome:
        path = _store(work / "snapshot.arc")
        with sqlite3.connect(path) as connection:
            connection.execute("UPDATE snapshots SET key = ?", ("ÿþ non-ASCII",))
        connection.close()
        return _from_stdout([*ARC_REF, "inspect", str(path)], "opened in")

    def damaged_schema(command: str) -> Callable[[], Outcome]:
        def run() -> Outcome:
            path = _store(work / f"schema-{command}.arc")
            with sqlite3.connect(path) as connection:
                connection.execute("PRAGMA writable_schema = ON")
                connection.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE events(' WHERE name = 'events'")
            connection.close()
            return from_stderr([*ARC_REF, command, str(path)])
        return run

    good = _store(work / "good.arc")
    quoted = shlex.quote(str(good))
    cases = [
        Case("WAL deleted after a kill", "kill -9 writer; rm s.arc-wal s.arc-shm; arc-ref inspect s.arc",
             wal_damaged("deleted"), EXIT_USAGE, "40 acknowledged events are missing"),
        Case("WAL truncated after a kill", "kill -9 writer; truncate -s 50% s.arc-wal; arc-ref inspect s.arc",
             wal_damaged("truncated"), EXIT_USAGE, "acknowledged events are missing"),
        Case("WAL byte flipped after a kill", "kill -9 writer; flip a byte of s.arc-wal; arc-ref inspect s.arc",
             wal_damaged("a byte flipped"), EXIT_USAGE, "acknowledged events are missing"),
        Case("WAL deleted: the writer appends nothing", "kill -9 writer; rm s.arc-wal s.arc-shm; arc-ref mcp s.arc",
             wal_damaged("deleted", "mcp"), EXIT_USAGE, "40 acknowledged events are missing"),
        Case("WAL deleted: export", "kill -9 writer; rm s.arc-wal s.arc-shm; arc-ref export s.arc",
             wal_damaged("deleted", "export"), EXIT_USAGE, "arc-ref export writes the 1 rows that are there"),
        Case("second writer through a symlink", "arc-ref mcp alias.arc (-> a store a writer holds)",
             second_writer_by_symlink, EXIT_USAGE, "is open for writing by process"),
        Case("writer through a hard link", "ln s.arc other.arc; arc-ref mcp other.arc", hard_link, EXIT_USAGE,
             "has 2 names (hard links)"),
        Case("planted STORE.lock symlink, new store", "ln -s victim new.arc.lock; arc-ref mcp new.arc </dev/null",
             planted(".lock", "mcp"), EXIT_OK, "untouched"),
        Case("planted STORE.ack symlink, new store", "ln -s victim new.arc.ack; arc-ref mcp new.arc </dev/null",
             planted(".ack", "mcp"), EXIT_OK, "untouched"),
        Case("planted STORE.ack symlink, existing store", "ln -sf victim s.arc.ack; arc-ref inspect s.arc",
             planted(".ack", "inspect"), EXIT_USAGE, "(a symbolic link)"),
        Case("STORE.lock is a FIFO", "mkfifo s.arc.lock; arc-ref mcp s.arc </dev/null", fifo(".lock", "mcp"),
             EXIT_OK, "ignored"),
        Case("STORE.ack is a FIFO", "mkfifo s.arc.ack; arc-ref mcp s.arc </dev/null", fifo(".ack", "mcp"),
             EXIT_USAGE, "is not a regular file"),
        Case("damaged snapshot row (non-ASCII key)", "arc-ref inspect s.arc", damaged_snapshot, EXIT_OK,
             "snapshot ignored: its row is damaged"),
        Case("damaged schema: inspect", "arc-ref inspect s.arc", damaged_schema("inspect"), EXIT_USAGE,
             "malformed database schema"),
        Case("damaged schema: the writer", "arc-ref mcp s.arc", damaged_schema("mcp"), EXIT_USAGE,
             "malformed database schema"),
        Case("--from 10**30", f"arc-ref inspect s.arc --events --from {10**30}",
             lambda: from_stderr([*ARC_REF, "inspect", str(good), "--events", "--from", str(10**30)], pick="error"),
             EXIT_USAGE, "--from: expected an integer from 1 to 9223372036854775807"),
        Case("--from 42 (past the last row)", "arc-ref inspect s.arc --events --from 42",
             lambda: from_stderr([*ARC_REF, "inspect", str(good), "--events", "--from", "42"]), 1,
             "no row 42: the store has rows 1-41"),
        Case("PYTHONIOENCODING=ascii", "PYTHONIOENCODING=ascii arc-ref inspect s.arc --events --full",
             lambda: _from_stdout([*ARC_REF, "inspect", str(good), "--events", "--full"], "é中",
                                  env={**os.environ, "PYTHONIOENCODING": "ascii"}), EXIT_OK, "row 0 é中"),
    ]
    for argv in ("export", "inspect --events", "inspect --view", "inspect"):
        command, *extra = argv.split()
        line = f"{ARC_REF_SHELL} {command} {quoted} {' '.join(extra)}"
        cases.append(Case(f"{argv}: /dev/full", f"arc-ref {command} s.arc {' '.join(extra)} > /dev/full",
                          _redirected(line, " > /dev/full"), EXIT_IO, "No space left on device"))
        cases.append(Case(f"{argv}: closed stdout", f"arc-ref {command} s.arc {' '.join(extra)} >&-",
                          _redirected(line, " >&-"), EXIT_IO, "standard output is closed"))
    if os.geteuid() == 0:  # a read-only bind mount needs root
        cases.append(Case("cleanly closed store on read-only media", "mount -o remount,bind,ro; arc-ref inspect",
                          lambda: _read_only_media(work, good), EXIT_OK, "rows (the config line and 40 events)"))
    return cases


def _redirected(line: str, redirection: str) -> Callable[[], Outcome]:
    return lambda: shell(line + redirection)


def _read_only_media(work: Path, store: Path) -> Outcome:
    source, media = work / "media-source", work / "media"
    source.mkdir()
    media.mkdir()
    shutil.copy(store, source / store.name)
    mounted = subprocess.run(["mount", "--bind", str(source), str(media)], capture_output=True)
    if mounted.returncode != 0:
        return Outcome(None, f"cannot bind-mount here: {_decoded(mounted.stderr).strip()}")
    try:
        remounted = subprocess.run(["mount", "-o", "remount,bind,ro", str(media)], capture_output=True)
        if remounted.returncode != 0:
            return Outcome(None, f"cannot remount read-only here: {_decoded(remounted.stderr).strip()}")
        return _from_stdout([*ARC_REF, "inspect", str(media / store.name)], "rows (the config line")
    finally:
        subprocess.run(["umount", str(media)], capture_output=True)


def shown(message: str, scratch: Path) -> str:
    """The message as the table shows it: the temporary directory as $TMP, the servers' ports as PORT."""
    return re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:PORT", message.replace(str(scratch), "$TMP"))


def bounds_cases(scratch: Path) -> list[Case]:
    """Issue 31 item 2: every number bounded above and read in ASCII digits, no value twice, a flag given once, an
    argument that is text. Before: the sizes grew memory without end (`--concurrency 10**12`: 254 -> 999 MiB in
    12 s), `１`, `1_0` and `' 1 '` were read as numbers, `--force-at-calls 5 5` and a repeated flag were taken, and
    `--model $'\\xff'` ended in a traceback (exit 1)."""
    work = scratch / "bounds"
    work.mkdir()
    store = _store(work / "s.arc")

    def nih(*extra: str) -> Callable[[], Outcome]:
        return lambda: from_stderr([*ARC_EVAL, "nih", "--seeds", "42", "--methods", "arc", *extra, "--out",
                                    str(work / "run"), "--no-progress"], timeout=60)

    def arc_ref(*argv: str) -> Callable[[], Outcome]:
        return lambda: from_stderr([*ARC_REF, *argv], pick="error", timeout=60)

    def serve(*extra: str) -> Callable[[], Outcome]:
        return lambda: from_stderr([*ARC_EVAL, "serve-scripted", "--port", "0", *extra], pick="error", timeout=60)

    bound = "expected an integer from"
    return [
        Case("--concurrency 10**12, one task", "arc-eval nih --tasks 1 --concurrency 1000000000000",
             nih("--tasks", "1", "--concurrency", str(10**12)), EXIT_USAGE, f"--concurrency: {bound} 1 to 4096"),
        Case("--tasks 10**23", "arc-eval nih --tasks 100000000000000000000000", nih("--tasks", str(10**23)),
             EXIT_USAGE, f"--tasks: {bound} 1 to 100000"),
        Case("--tasks 100000 (memory of one seed)", "arc-eval nih --tasks 100000", nih("--tasks", "100000"),
             EXIT_USAGE, "x up to 158,500 characters of files per task"),
        Case("--noise-lines 10**12", "arc-eval nih --tasks 1 --noise-lines 1000000000000",
             nih("--tasks", "1", "--noise-lines", str(10**12)), EXIT_USAGE, f"--noise-lines: {bound} 0 to 100000"),
        Case("--distractor-files 10**9", "arc-eval nih --tasks 1 --distractor-files 1000000000",
             nih("--tasks", "1", "--distractor-files", str(10**9)), EXIT_USAGE,
             f"--distractor-files: {bound} 0 to 10000"),
        Case("--tasks １ (full-width)", "arc-eval nih --tasks １", nih("--tasks", "１"), EXIT_USAGE,
             "(ASCII digits only), got '１'"),
        Case("--tasks 1_0", "arc-eval nih --tasks 1_0", nih("--tasks", "1_0"), EXIT_USAGE,
             "(ASCII digits only), got '1_0'"),
        Case("--tasks ' 1 '", "arc-eval nih --tasks ' 1 '", nih("--tasks", " 1 "), EXIT_USAGE,
             "(ASCII digits only), got ' 1 '"),
        Case("--temperature nan", "arc-eval nih --tasks 1 --temperature nan", nih("--tasks", "1", "--temperature",
             "nan"), EXIT_USAGE, "--temperature: expected a number from 0 to 2"),
        Case("--force-at-calls 5 5", "arc-eval nih --tasks 1 --force-at-calls 5 5",
             nih("--tasks", "1", "--force-at-calls", "5", "5"), EXIT_USAGE, "--force-at-calls lists 5 more than once"),
        Case("--seeds 1 1", "arc-eval nih --tasks 1 --seeds 1 1", nih("--tasks", "1", "--seeds", "1", "1"),
             EXIT_USAGE, "argument --seeds: given more than once"),
        Case("--tasks 1 --tasks 2", "arc-eval nih --tasks 1 --tasks 2", nih("--tasks", "1", "--tasks", "2"),
             EXIT_USAGE, "argument --tasks: given more than once; give it once"),
        Case("--model $'\\xff'", "arc-eval nih --tasks 1 --model $'\\xff'",
             nih("--tasks", "1", "--model", os.fsdecode(b"\xff")), EXIT_USAGE,
             "(after --model) is not valid UTF-8 text: b'\\xff'"),
        Case("bench --concurrency 10**12", "arc-eval bench --only concurrency --concurrency 1000000000000",
             lambda: from_stderr([*ARC_EVAL, "bench", "--only", "concurrency", "--concurrency", str(10**12)],
                                 timeout=60), EXIT_USAGE, f"--concurrency: {bound} 1 to 4096"),
        Case("serve-scripted --concurrency 10**12", "arc-eval serve-scripted --concurrency 1000000000000",
             serve("--concurrency", str(10**12)), EXIT_USAGE, f"--concurrency: {bound} 1 to 4096"),
        Case("serve-scripted --port 0 --port 1", "arc-eval serve-scripted --port 0 --port 1", serve("--port", "1"),
             EXIT_USAGE, "argument --port: given more than once"),
        Case("report --scratch-gb 1e999", "arc-eval report RUN --scratch-gb 1e999",
             lambda: from_stderr([*ARC_EVAL, "report", str(work), "--scratch-gb", "1e999"], pick="error"),
             EXIT_USAGE, "--scratch-gb: expected a number from 0 to 1e+06"),
        Case("inspect --catalog １", "arc-ref inspect s.arc --catalog １", arc_ref("inspect", str(store), "--catalog",
             "１"), EXIT_USAGE, f"--catalog: {bound} 0 to 2147483647 (ASCII digits only)"),
        Case("inspect --count 10**30", "arc-ref inspect s.arc --events --count 10**30",
             arc_ref("inspect", str(store), "--events", "--count", str(10**30)), EXIT_USAGE,
             f"--count: {bound} 0 to 9223372036854775807"),
        Case("inspect --from 1 --from 2", "arc-ref inspect s.arc --events --from 1 --from 2",
             arc_ref("inspect", str(store), "--events", "--from", "1", "--from", "2"), EXIT_USAGE,
             "argument --from: given more than once"),
        Case("budgets --set capacity twice", "arc-ref budgets --preset minimal --set capacity=50 --set capacity=60",
             arc_ref("budgets", "--preset", "minimal", "--set", "capacity=50", "--set", "capacity=60"), EXIT_USAGE,
             "--set capacity given more than once"),
        Case("arc-ref replay $'\\xff'", "arc-ref replay $'\\xff'", arc_ref("replay", os.fsdecode(b"\xff")),
             EXIT_USAGE, "argument 2 (after replay) is not valid UTF-8 text: b'\\xff'"),
    ]


def with_needs(chosen: set[str], cases: list[Case]) -> set[str]:
    """The cases named in ``chosen`` and those they build on (``needs``, and theirs); each is an earlier case."""
    earlier: dict[str, Case] = {}
    for case in cases:
        assert case.needs is None or case.needs in earlier, f"{case.name!r} needs a later or unknown case"
        earlier[case.name] = case
    found, pending = set(chosen), list(chosen)
    while pending:
        need = earlier[pending.pop()].needs
        if need is not None and need not in found:
            found.add(need)
            pending.append(need)
    return found


def run_cases(groups: list[tuple[str, list[Case]]], scratch: Path) -> int:
    differing = 0
    print(f"{'case':<44} | {'command':<{COMMAND_WIDTH}} | exit (expected) | message")
    for title, cases in groups:
        print(f"-- {title}")
        for case in cases:
            outcome = case.run()
            problems = list(outcome.problems)
            if outcome.exit_code != case.exit_code:
                problems.append(f"exit {outcome.exit_code}, expected {case.exit_code}")
            if case.expect not in outcome.message:
                problems.append(f"the message lacks {case.expect!r}")
            differing += bool(problems)
            code = "none" if outcome.exit_code is None else str(outcome.exit_code)
            mark = "" if not problems else "  DIFFERS: " + "; ".join(problems)
            print(f"{case.name:<44} | {_cut(case.command, COMMAND_WIDTH):<{COMMAND_WIDTH}} | "
                  f"{code:>4} ({case.exit_code:>2}) {'ok' if not problems else '!!'}     | "
                  f"{_cut(shown(outcome.message, scratch), MESSAGE_WIDTH)}{mark}")
    return differing


def fuzz_counts() -> None:
    """Run the fuzzer's default budget here and print what it tried; the slow budget is printed, not run."""
    sys.path.insert(0, str(REPO))
    from tests.hostile import test_fuzz_replay as fuzz

    started = time.monotonic()
    in_process = fuzz._fuzz_in_process(fuzz.TRACES_IN_PROCESS)
    cli = fuzz._fuzz_cli(fuzz.CLI_INPUTS)
    print(f"fuzzer (tests/hostile/test_fuzz_replay.py), default run, here: {in_process['inputs']} traces "
          f"({in_process['lines']} lines) replayed in process, {cli['inputs']} inputs ({cli['lines']} lines) "
          f"to `arc-ref replay -` in a subprocess; every line answered by one JSON line, exit 0, no traceback "
          f"[{time.monotonic() - started:.1f}s]")
    print(f"fuzzer, slow run (pytest -m slow): {fuzz.TRACES_IN_PROCESS_SLOW} traces in process, "
          f"{fuzz.CLI_INPUTS_SLOW} inputs to the CLI")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the fuzzer's default budget and print its counts (default: yes)")
    parser.add_argument("--only", default="", metavar="WORDS",
                        help="run only the cases whose name holds WORDS (and the earlier ones they build on)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="refusal-cases-") as directory:
        scratch = Path(directory)
        groups = [
            ("arc-ref replay / budgets: input and streams (issue 9.1)", replay_cases(scratch)),
            ("lossless tokenizers only (issue 9.2)", tokenizer_cases(scratch)),
            ("backend answers that break the API (issue 9.3; a vLLM-shaped server in this script)",
             reply_cases(scratch)),
            ("resume (issue 9.4), in a temporary directory", resume_cases(scratch)),
            ("CLI arguments (issue 9.5)", argument_cases(scratch)),
            ("serve-scripted answering like a misconfigured vLLM (issue 8.2)", server_fault_cases(scratch)),
            ("the durable store and its front ends (issue 18.1-3, 18.8)", store_cases(scratch)),
            ("hostile input to the front ends (issue 18, items 5, 6, 7, 9)", issue18_input_cases(scratch)),
            ("numbers bounded and read strictly, no value or flag twice, arguments as text (issue 31.2)",
             bounds_cases(scratch)),
        ]
        chosen = {case.name for _, cases in groups for case in cases if args.only in case.name}
        if not chosen:
            parser.error(f"--only {args.only!r}: no case's name holds it")
        needed = with_needs(chosen, [case for _, cases in groups for case in cases]) - chosen
        if needed:
            print(f"--only {args.only!r}: also the case(s) the chosen ones build on: {', '.join(sorted(needed))}")
        groups = [(title, [case for case in cases if case.name in chosen | needed]) for title, cases in groups]
        differing = run_cases(groups, scratch)
    total = sum(len(cases) for _, cases in groups)
    print(f"{total - differing} of {total} cases as expected, {differing} differ "
          f"[{time.monotonic() - started:.1f}s]")
    if args.fuzz:
        fuzz_counts()
    return 1 if differing else 0


if __name__ == "__main__":
    SERVERS.stop_on_signals()
    sys.exit(run(main, "refusal_cases"))
