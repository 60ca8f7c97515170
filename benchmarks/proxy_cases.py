"""Issue 25's hostile cases against a real `arc-ref proxy` process: what each client sees, what the others see, RSS.

    python benchmarks/proxy_cases.py [--tree DIR] [--only NAME,...] [--list]

Each case starts its own proxy (``python -m arc_ref.frontends.cli proxy`` with ``PYTHONPATH=DIR``, so the same script measures
another checkout, e.g. main before a change) in front of a fake upstream in this process (whose replies each case
sets: completions, malformed bodies, a cut connection, a key it requires) and prints one line: the HTTP status and
the start of the body the hostile client got, what a well-behaved client of another conversation saw at the same
time (status and latency), and the proxy's RSS. Only HTTP and the command line are used, so a checkout without
this script's fixes runs it too. Tests of the same cases, with assertions: tests/proxy/test_hostile.py.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from arc_ref.options import integer_parser, number_parser

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.servers import SERVERS, run  # noqa: E402  (the proxies, stopped however the run ends)
from proofs_check.shared_data import QWEN3_ABSENT, QWEN3_NAME, shared_data_dir  # noqa: E402

QWEN3 = shared_data_dir() / QWEN3_NAME
WINDOW = 16384
# budgets main needed to hold mini-swe-agent's prefix (the cases other than the out-of-the-box one pass them)
BUDGETS = ["--set", "recent_budget=2000", "--set", "recall_budget=2600", "--set", "chunk_tokens=1200",
           "--set", "summary_budget=1500"]
BASH_TOOL = {"type": "function", "function": {"name": "bash", "description": "Execute a bash command",
                                              "parameters": {"type": "object", "properties": {
                                                  "command": {"type": "string"}}, "required": ["command"]}}}


def cli_module(tree: Path) -> str:
    """The module of `arc-ref` in ``tree`` (arc_ref.cli before the front ends moved to arc_ref/frontends)."""
    return "arc_ref.frontends.cli" if (tree / "arc_ref" / "frontends" / "cli.py").is_file() else "arc_ref.cli"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def completion(content: str = "ok", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}


class FakeUpstream:
    """An OpenAI-shaped upstream in a thread: ``reply`` (a function of the request body) decides each answer:
    a (status, body bytes) pair, or "cut" to close the connection after ``delay_s``."""

    def __init__(self, require_key: str | None = None) -> None:
        self.reply: Callable[[dict[str, Any]], Any] = lambda body: (200, json.dumps(completion()).encode())
        self.delay_s = 0.0
        self.require_key = require_key
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorized(self) -> bool:
                if upstream.require_key and self.headers.get("authorization") != f"Bearer {upstream.require_key}":
                    self._send(401, b'{"error": "Unauthorized"}')
                    return False
                return True

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                models = {"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": WINDOW}]}
                self._send(200, json.dumps(models).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                upstream.requests.append(body)
                upstream.headers.append(dict(self.headers))
                if not self._authorized():
                    return
                if upstream.delay_s:
                    time.sleep(upstream.delay_s)
                answer = upstream.reply(body)
                if answer == "cut":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(*answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def fake_upstream(**options: Any) -> Iterator[FakeUpstream]:
    upstream = FakeUpstream(**options)
    try:
        yield upstream
    finally:
        upstream.close()


class Proxy:
    """`arc-ref proxy` as a process of the checkout ``tree``."""

    def __init__(self, tree: Path, upstream: str, *extra: str, budgets: bool = True, wait: bool = True,
                 env: dict[str, str] | None = None, tokenizer: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.tree = tree
        command = [sys.executable, "-m", cli_module(tree), "proxy", "--upstream", upstream, "--tokenizer",
                   tokenizer or f"hf-dir:{QWEN3}", "--port", str(self.port), *(BUDGETS if budgets else []), *extra]
        environment = {**os.environ, "PYTHONPATH": str(tree), **(env or {})}
        self.process = SERVERS.start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=environment, cwd=tree)
        SERVERS.raise_if_stopped()  # a signal while it started (the run's end kills it)
        self.started = time.monotonic()
        self.listening_after: float | None = None
        if wait:
            self.wait_listening()

    def wait_listening(self, timeout_s: float = 120) -> bool:
        """True once it answers on its port; False when it exited first (or never answered)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                self.listening_after = time.monotonic() - self.started
                return True
            time.sleep(0.1)
        return False

    def rss_mib(self) -> float:
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def open_files(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.process.pid}/fd"))
        except OSError:
            return -1

    def stop(self) -> tuple[int | None, str]:
        SERVERS.stop(self.process, 30)
        _, error = self.process.communicate()
        return self.process.returncode, error


def chat(url: str, messages: list[dict[str, Any]], timeout: float = 120, headers: dict[str, str] | None = None,
         **extra: Any) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        response = httpx.post(f"{url}/chat/completions", json={"model": "fake", "messages": messages, **extra},
                              headers=headers, timeout=timeout)
        return response.status_code, response.text, time.monotonic() - started
    except httpx.HTTPError as problem:
        return 0, f"no answer ({type(problem).__name__})", time.monotonic() - started


def task(number: int, text: str = "List the files.") -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Task {number}: {text}"}]


def short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


Row = dict[str, Any]


class Others:
    """A well-behaved client of its own conversation, asking every 0.2 s while a hostile case runs."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            status, _, seconds = chat(self.url, task(900 + number % 3), timeout=600)
            self.results.append((status, seconds))
            self._stop.wait(0.2)

    def __enter__(self) -> "Others":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(700)

    def summary(self) -> str:
        if not self.results:
            return "no answer while it ran"
        statuses = sorted({status for status, _ in self.results})
        worst = max(seconds for _, seconds in self.results)
        return f"{len(self.results)} requests, statuses {statuses}, slowest {worst:.2f} s"


# --- the cases ------------------------------------------------------------------------------------------------


def mini_prefix() -> list[dict[str, Any]]:
    """mini-swe-agent's first request: its system prompt and its instance template around a task (~1.5k tokens)."""
    import importlib.util

    import yaml

    found = importlib.util.find_spec("minisweagent")  # located, not imported (its import prints a banner)
    assert found is not None and found.submodule_search_locations, "mini-swe-agent is not installed"
    folder = Path(list(found.submodule_search_locations)[0]) / "config"
    loaded = yaml.safe_load((folder / "mini.yaml").read_text(encoding="utf-8"))
    instance = loaded["agent"]["instance_template"].replace("{{task}}", "Count the lines of notes.txt.")
    return [{"role": "system", "content": loaded["agent"]["system_template"]}, {"role": "user", "content": instance}]


def case_out_of_the_box(tree: Path) -> Row:
    """The README's proxy line with no budgets, mini-swe-agent's first request."""
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url, budgets=False)
        try:
            status, body, _ = chat(proxy.url, mini_prefix(), tools=[BASH_TOOL])
            return {"status": status, "body": body, "rss": proxy.rss_mib()}
        finally:
            proxy.stop()


def start_refusal(tree: Path, *arguments: str, budgets: bool = True) -> Row:
    """A bad option: does the proxy exit at start (status, its last line) or listen and fail every request?"""
    with fake_upstream() as upstream:
        extra = list(arguments)
        upstream_url = upstream.url
        if "--upstream" in extra:
            at = extra.index("--upstream")
            upstream_url = extra[at + 1]
            del extra[at: at + 2]
        tokenizer = None  # a flag given twice is refused since h29-eval's options: the case's replaces the default
        if "--tokenizer" in extra:
            at = extra.index("--tokenizer")
            tokenizer = extra[at + 1]
            del extra[at: at + 2]
        proxy = Proxy(tree, upstream_url, *extra, budgets=budgets, wait=False, tokenizer=tokenizer)
        listening = proxy.wait_listening(30)
        row: Row = {"rss": proxy.rss_mib()}
        if listening:
            status, body, _ = chat(proxy.url, task(1), timeout=60)
            row.update(status=status, body=f"listened; a request got {status}: {body}")
        code, error = proxy.stop()
        lines = [line for line in error.strip().splitlines() if line.strip()]
        if not listening:
            row.update(status=f"exit {code}", body=f"{len(lines)} line(s) on stderr: {lines[-1] if lines else ''}")
        return row


def port_text(tree: Path, port: str) -> Row:
    with fake_upstream() as upstream:
        done = subprocess.run([sys.executable, "-m", cli_module(tree), "proxy", "--upstream", upstream.url,
                               "--tokenizer", f"hf-dir:{QWEN3}", "--port", port, *BUDGETS],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
                              timeout=60)
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return {"status": f"exit {done.returncode}", "body": f"{len(lines)} line(s): {lines[-1] if lines else ''}"}


def case_upstream_key(tree: Path) -> Row:
    """The client's Authorization for an upstream that requires a key."""
    with fake_upstream(require_key="sk-test") as upstream:
        direct = httpx.post(f"{upstream.url}/chat/completions", json={"model": "fake", "messages": task(1)},
                            headers={"Authorization": "Bearer sk-test"}, timeout=30).status_code
        # the window given (--set context_limit: every checkout reads it): the proxy has no key of its own to ask
        proxy = Proxy(tree, upstream.url, "--set", f"context_limit={WINDOW}")
        try:
            status, body, _ = chat(proxy.url, task(1), headers={"Authorization": "Bearer sk-test"})
            return {"status": status, "body": f"direct {direct}; through the proxy: {body}", "rss": proxy.rss_mib()}
        finally:
            proxy.stop()


def two_conversations(tree: Path, store: Path, upstream: FakeUpstream) -> list[list[dict[str, Any]]]:
    """Two conversations in ``store`` (one reply each), the proxy stopped again; their histories so far."""
    proxy = Proxy(tree, upstream.url, "--store", str(store))
    histories = []
    try:
        for number in (1, 2):
            messages = task(number)
            status, body, _ = chat(proxy.url, messages)
            assert status == 200, body
            histories.append([*messages, json.loads(body)["choices"][0]["message"],
                              {"role": "user", "content": "go on"}])
    finally:
        proxy.stop()
    return histories


def conversation_folders(store: Path) -> list[Path]:
    return sorted((path for path in store.iterdir() if path.is_dir()), key=lambda path: path.stat().st_mtime)


def damaged_store(tree: Path, damage: Callable[[Path, Path], Callable[[], None] | None],
                  second_proxy: bool = False) -> Row:
    """Two conversations in a store, the first damaged by ``damage(store, its folder)``: does the proxy start, and
    what do the damaged and the healthy conversation get?"""
    with tempfile.TemporaryDirectory() as scratch, fake_upstream() as upstream:
        store = Path(scratch) / "store"
        histories = two_conversations(tree, store, upstream)
        first = conversation_folders(store)[0]
        holder = None
        undo = None
        if second_proxy:
            holder = Proxy(tree, upstream.url, "--store", str(store))
        else:
            undo = damage(store, first)
        try:
            proxy = Proxy(tree, upstream.url, "--store", str(store), wait=False)
            if not proxy.wait_listening(60):
                code, error = proxy.stop()
                lines = [line for line in error.strip().splitlines() if line.strip()]
                return {"status": f"exit {code}", "body": f"{len(lines)} line(s) on stderr: "
                        f"{lines[-1] if lines else ''}", "others": "nobody served"}
            try:
                damaged = chat(proxy.url, histories[0])
                healthy = chat(proxy.url, histories[1])
                new = chat(proxy.url, task(3))
                return {"status": damaged[0], "body": damaged[1], "rss": proxy.rss_mib(),
                        "others": f"other stored conversation {healthy[0]}, a new one {new[0]}"}
            finally:
                proxy.stop()
        finally:
            if holder is not None:
                holder.stop()
            if undo is not None:
                undo()


def truncate_ack(store: Path, folder: Path) -> None:
    ack = folder / "task.arc.ack"
    data = ack.read_bytes()
    ack.write_bytes(data[: max(0, len(data) // 2 - 1)])


def empty_mark(store: Path, folder: Path) -> None:
    with open(folder / "marks.jsonl", "a", encoding="utf-8") as marks:
        marks.write("{}\n")


def no_task_file(store: Path, folder: Path) -> None:
    (folder / "task.arc").unlink()


def read_only(store: Path, folder: Path) -> Callable[[], None] | None:
    """The store made read-only: by its modes, and for root (whom modes do not stop) by a read-only bind mount."""
    for path in [store, *store.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    if os.geteuid() != 0:
        return None
    subprocess.run(["mount", "--bind", str(store), str(store)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(store)], check=True)
    return lambda: subprocess.run(["umount", str(store)], check=True)


def case_big_request(tree: Path, megabytes: int, timeout_s: float) -> Row:
    """One client sends a task of ``megabytes`` MB; another conversation asks meanwhile."""
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
        try:
            chat(proxy.url, task(900))  # the other client's conversation exists already
            text = ("lorem ipsum dolor sit amet " * (megabytes * 2**20 // 27 + 1))[: megabytes * 2**20]
            result: list[tuple[int, str, float]] = []
            hostile = threading.Thread(target=lambda: result.append(chat(proxy.url, task(1, text),
                                                                         timeout=timeout_s)), daemon=True)
            peak = proxy.rss_mib()
            with Others(proxy.url) as others:
                hostile.start()
                while hostile.is_alive():
                    peak = max(peak, proxy.rss_mib())
                    hostile.join(0.5)
                time.sleep(1)
            status, body, seconds = result[0]
            return {"status": status, "body": f"after {seconds:.1f} s: {body}", "others": others.summary(),
                    "rss": peak}
        finally:
            proxy.stop()


def malformed(tree: Path, reply: Any) -> Row:
    """The upstream answers ``reply``; then the same history is sent again (a good reply): was anything recorded?"""
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
        try:
            messages = task(1)
            clean = httpx.post(f"{proxy.url}/chat/completions", json={"model": "fake", "messages": messages},
                               timeout=60)
            upstream.reply = lambda body: reply
            sent = [*messages, clean.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
            status, body, _ = chat(proxy.url, sent)
            upstream.reply = lambda body: (200, json.dumps(completion()).encode())
            retry = httpx.post(f"{proxy.url}/chat/completions", json={"model": "fake", "messages": sent}, timeout=60)
            same = retry.headers.get("x-arc-conversation") == clean.headers.get("x-arc-conversation")
            return {"status": status, "body": body, "rss": proxy.rss_mib(),
                    "others": f"the retry (same history) got {retry.status_code}, "
                    + ("resumed in place: nothing was recorded" if same else
                       "forked: the failed reply had been recorded in the conversation")}
        finally:
            proxy.stop()


def case_models_upstream_down(tree: Path) -> Row:
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
    try:  # the upstream is gone now
        response = httpx.get(f"{proxy.url}/models", timeout=30)
        return {"status": response.status_code, "body": response.text, "rss": proxy.rss_mib()}
    finally:
        proxy.stop()


def case_cut_stream(tree: Path) -> Row:
    """The upstream holds the request past the proxy's first keepalive (5 s), then closes the connection."""
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
        try:
            upstream.delay_s = 6.5
            upstream.reply = lambda body: "cut"
            with httpx.stream("POST", f"{proxy.url}/chat/completions", timeout=60, json={
                    "model": "fake", "messages": task(1), "stream": True}) as response:
                lines = [line for line in response.iter_lines() if line]
            ending = "ends with [DONE]" if lines and lines[-1] == "data: [DONE]" else "no [DONE] at the end"
            errors = sum(1 for line in lines if line.startswith("data: {") and '"error"' in line)
            return {"status": response.status_code, "body": f"{len(lines)} SSE lines, {errors} error event(s), "
                    f"{ending}: {' | '.join(lines)}", "rss": proxy.rss_mib()}
        finally:
            proxy.stop()


def case_deep_json(tree: Path) -> Row:
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
        try:
            depth = 100_000
            body = '{"model": "fake", "messages": [{"role": "user", "content": "x"}], "x": ' + "[" * depth + \
                "]" * depth + "}"
            response = httpx.post(f"{proxy.url}/chat/completions", content=body,
                                  headers={"content-type": "application/json"}, timeout=60)
            return {"status": response.status_code, "body": response.text, "rss": proxy.rss_mib()}
        finally:
            proxy.stop()


def forwarded(tree: Path, **extra: Any) -> Row:
    """A request field the proxy must refuse or handle: the status, and what reached the upstream."""
    arc_call = [{"id": "r1", "type": "function", "function": {"name": "_recall", "arguments": '{"id": "x"}'}}]
    with fake_upstream() as upstream:
        if "tool_choice" in extra:  # a model that obeys: it calls _recall every time
            upstream.reply = lambda body: (200, json.dumps(completion("", arc_call)).encode())
        proxy = Proxy(tree, upstream.url)
        try:
            status, body, _ = chat(proxy.url, task(1), tools=[BASH_TOOL], **extra)
            seen = [{key: request.get(key) for key in extra} for request in upstream.requests]
            return {"status": status, "body": body, "rss": proxy.rss_mib(),
                    "others": f"{len(upstream.requests)} upstream call(s), sent {short(json.dumps(seen[:1]), 60)}"}
        finally:
            proxy.stop()


def case_full_disk(tree: Path) -> Row:
    """The store's file system refuses writes (RLIMIT_FSIZE of 64 KiB, SIGXFSZ ignored: EFBIG on the write that
    passes it, as a full disk's ENOSPC): a task larger than that."""
    import resource

    with tempfile.TemporaryDirectory() as scratch, fake_upstream() as upstream:
        def limited() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

        environment = {**os.environ, "PYTHONPATH": str(tree)}
        port = free_port()
        process = SERVERS.start(
            [sys.executable, "-m", cli_module(tree), "proxy", "--upstream", upstream.url, "--tokenizer",
             f"hf-dir:{QWEN3}", "--port", str(port), "--store", f"{scratch}/store", *BUDGETS],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, cwd=tree,
            preexec_fn=limited)
        url = f"http://127.0.0.1:{port}/v1"
        try:
            SERVERS.raise_if_stopped()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                time.sleep(0.1)
            small = chat(url, task(1))
            big = [*task(2), {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "row ok\n" * 20000}]
            status, body, _ = chat(url, big, tools=[BASH_TOOL])
            after = chat(url, task(3))
            return {"status": status, "body": body,
                    "others": f"before it a small conversation got {small[0]}, after it a new one got {after[0]}"}
        finally:
            SERVERS.stop(process, 30)
            process.communicate()


def case_memory(tree: Path, conversations: int, limit: int | None = None) -> Row:
    """RSS per conversation after ``conversations`` conversations of 6 messages each, then idle for a while
    (``limit``: the proxy's --max-conversations, a checkout that has it)."""
    bound = ["--max-conversations", str(limit)] if limit is not None else []
    with tempfile.TemporaryDirectory() as scratch, fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url, "--store", f"{scratch}/store", *bound)
        try:
            chat(proxy.url, task(0))
            before = proxy.rss_mib()
            for number in range(1, conversations + 1):
                messages = task(number, f"List the files of directory {number}.")
                status, body, _ = chat(proxy.url, messages)
                messages += [json.loads(body)["choices"][0]["message"],
                             {"role": "user", "content": f"Now the hidden ones of {number}, please. " * 20}]
                chat(proxy.url, messages)
            after = proxy.rss_mib()
            time.sleep(5)
            idle = proxy.rss_mib()
        finally:
            proxy.stop()
        restart = Proxy(tree, upstream.url, "--store", f"{scratch}/store", *bound, wait=False)
        try:
            listening = restart.wait_listening(600)
            files = restart.open_files()
            second = Proxy(tree, upstream.url, "--store", f"{scratch}/store", wait=False)
            second_listening = second.wait_listening(120)
            second_code, second_error = second.stop()
            rss_restart = restart.rss_mib()
        finally:
            restart.stop()
    per = (after - before) / conversations
    second_text = "listened" if second_listening else \
        f"exit {second_code}: {short(second_error.strip().splitlines()[-1] if second_error.strip() else '', 80)}"
    return {"status": "-", "body": f"{conversations} conversations: {per:.3f} MiB each (RSS {before:.0f} -> "
            f"{after:.0f} MiB, {idle:.0f} after 5 s idle); restart on their store: listening after "
            f"{restart.listening_after or float('nan'):.1f} s, {files} open files, RSS {rss_restart:.0f} MiB;"
            f" a second proxy on the same --store: {second_text}", "rss": after, "listened": listening}


def case_ownership(tree: Path) -> Row:
    """Client B replays client A's whole history: whose conversation goes on? And who can read /arc/rounds?"""
    with fake_upstream() as upstream:
        proxy = Proxy(tree, upstream.url)
        try:
            messages = task(1)
            first = httpx.post(f"{proxy.url}/chat/completions", json={"model": "fake", "messages": messages},
                               headers={"Authorization": "Bearer key-a"}, timeout=60)
            history = [*messages, first.json()["choices"][0]["message"], {"role": "user", "content": "next"}]
            other = httpx.post(f"{proxy.url}/chat/completions", json={"model": "fake", "messages": history},
                               headers={"Authorization": "Bearer key-b"}, timeout=60)
            owner = httpx.post(f"{proxy.url}/chat/completions", json={"model": "fake", "messages": history},
                               headers={"Authorization": "Bearer key-a"}, timeout=60)
            rounds = httpx.get(proxy.url.removesuffix("/v1") + "/arc/rounds", timeout=30)
            a, b, a2 = (response.headers.get("x-arc-conversation", "?")[:8] for response in (first, other, owner))
            return {"status": rounds.status_code, "body": f"GET /arc/rounds without a key: {short(rounds.text, 60)}",
                    "others": f"A's conversation {a}, B replaying A's history got {b}, A's next request {a2}",
                    "rss": proxy.rss_mib()}
        finally:
            proxy.stop()


def case_same_prompt(tree: Path, processes: int, store: bool, hold_s: float = 2.0) -> Row:
    """Two agents that start alike (one system prompt and task: best-of-n): A's first upstream call is held
    ``hold_s``; how long does B's first request (the same history) take? With ``processes`` 2, A asks one proxy
    and B another, both on one --store."""
    with fake_upstream() as upstream, tempfile.TemporaryDirectory() as directory:
        arrived = threading.Event()

        def reply(body: dict[str, Any]) -> tuple[int, bytes]:
            if not arrived.is_set():  # the first call (A's): held
                arrived.set()
                time.sleep(hold_s)
            return 200, json.dumps(completion("ok")).encode()

        upstream.reply = reply
        extra = ["--store", directory] if store else []
        proxies = [Proxy(tree, upstream.url, *extra) for _ in range(processes)]
        try:
            answers: dict[str, tuple[int, str, float]] = {}
            first = threading.Thread(target=lambda: answers.update(A=chat(proxies[0].url, task(1))))
            first.start()
            arrived.wait(60)
            answers["B"] = chat(proxies[-1].url, task(1))
            b_done_while_a_held = first.is_alive()
            first.join(120)
            (a_status, _, a_s), (b_status, b_text, b_s) = answers["A"], answers["B"]
            return {"status": b_status, "body": f"B (the same history) answered in {b_s:.3f} s"
                    f" ({'while' if b_done_while_a_held else 'after'} A's upstream call was held {hold_s:g} s);"
                    f" {short(b_text, 50) if b_status != 200 else 'a completion'}",
                    "others": f"A: status {a_status} in {a_s:.2f} s; {len(upstream.requests)} upstream calls"
                    f" ({'two processes on one --store' if processes == 2 else 'one process'}"
                    f"{', --store' if store and processes == 1 else ''})",
                    "rss": proxies[-1].rss_mib()}
        finally:
            for proxy in proxies:
                proxy.stop()


def cases(tree: Path, args: argparse.Namespace) -> dict[str, Callable[[], Row]]:
    return {
        "out_of_the_box": lambda: case_out_of_the_box(tree),
        "tokenizer_missing_dir": lambda: start_refusal(tree, "--tokenizer", "hf-dir:/nonexistent/model"),
        "tokenizer_bytes": lambda: start_refusal(tree, "--tokenizer", "bytes"),
        "recent_budget_negative": lambda: start_refusal(tree, "--set", "recent_budget=-5", budgets=False),
        "upstream_not_a_url": lambda: start_refusal(tree, "--upstream", "notaurl"),
        "port_70000": lambda: port_text(tree, "70000"),
        "port_minus_1": lambda: port_text(tree, "-1"),
        "store_dev_null": lambda: start_refusal(tree, "--store", "/dev/null"),
        "upstream_key": lambda: case_upstream_key(tree),
        "store_truncated_ack": lambda: damaged_store(tree, truncate_ack),
        "store_empty_mark": lambda: damaged_store(tree, empty_mark),
        "store_no_task_file": lambda: damaged_store(tree, no_task_file),
        "store_second_proxy": lambda: damaged_store(tree, truncate_ack, second_proxy=True),
        "store_read_only": lambda: damaged_store(tree, read_only),
        "request_10_mb": lambda: case_big_request(tree, 10, 600),
        "request_100_mb": lambda: case_big_request(tree, 100, args.big_timeout),
        "upstream_list": lambda: malformed(tree, (200, b"[]")),
        "upstream_string": lambda: malformed(tree, (200, b'"hello"')),
        "upstream_choices_null": lambda: malformed(tree, (200, b'{"choices": [null]}')),
        "upstream_usage_list": lambda: malformed(tree, (200, json.dumps({**completion(), "usage": [1]}).encode())),
        "upstream_empty_object": lambda: malformed(tree, (200, b"{}")),
        "upstream_not_json": lambda: malformed(tree, (200, b"<html>")),
        "models_upstream_down": lambda: case_models_upstream_down(tree),
        "stream_cut": lambda: case_cut_stream(tree),
        "deep_json": lambda: case_deep_json(tree),
        "n_3": lambda: forwarded(tree, n=3),
        "tool_choice_recall": lambda: forwarded(tree, tool_choice={"type": "function",
                                                                   "function": {"name": "_recall"}}),
        "max_tokens_true": lambda: forwarded(tree, max_tokens=True),
        "full_disk": lambda: case_full_disk(tree),
        "memory": lambda: case_memory(tree, args.conversations, args.max_conversations),
        "ownership": lambda: case_ownership(tree),
        "same_prompt": lambda: case_same_prompt(tree, 1, store=False),
        "same_prompt_store": lambda: case_same_prompt(tree, 1, store=True),
        "same_prompt_two_processes": lambda: case_same_prompt(tree, 2, store=True),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose arc_ref runs (default: this one)")
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    parser.add_argument("--conversations", type=integer_parser(1, 1_000_000), default=200,
                        help="conversations of the memory case (1 to 1000000)")
    parser.add_argument("--max-conversations", type=integer_parser(1, 1_000_000), default=None,
                        help="the memory case's proxy --max-conversations (a checkout that has the flag)")
    parser.add_argument("--big-timeout", type=number_parser(86_400, exclusive_minimum=0), default=120,
                        help="seconds the 100 MB request may take (above 0, at most 86400)")
    args = parser.parse_args()
    if not (args.tree / "arc_ref" / "__init__.py").is_file():
        parser.error(f"--tree {str(args.tree)!r} is not a checkout of arc-ref (no arc_ref/__init__.py there)")
    if not (QWEN3 / "tokenizer.json").is_file():
        print(f"proxy_cases: {QWEN3_ABSENT}", file=sys.stderr)
        return 2
    table = cases(args.tree.resolve(), args)
    if args.list:
        print("\n".join(table))
        return 0
    chosen = [name for name in args.only.split(",") if name] or list(table)
    unknown = [name for name in chosen if name not in table]
    if unknown:
        print(f"proxy_cases: unknown case(s) {', '.join(unknown)}; --list names them", file=sys.stderr)
        return 2
    print(f"tree: {args.tree}")
    for name in chosen:
        started = time.monotonic()
        try:
            row = table[name]()
        except Exception as problem:  # a case that breaks the script is a finding too: print it, go on
            row = {"status": "case failed", "body": f"{type(problem).__name__}: {problem}"}
        rss = row.get("rss")
        print(f"{name}: status {row.get('status')} | {short(str(row.get('body', '')), 160)}"
              + (f" | others: {row['others']}" if row.get("others") else "")
              + (f" | RSS {rss:.0f} MiB" if isinstance(rss, float) else "")
              + f" | {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    SERVERS.stop_on_signals()
    sys.exit(run(main, "proxy_cases"))
