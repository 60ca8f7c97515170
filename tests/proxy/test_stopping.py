"""`arc-ref proxy` stopped by a signal, as systemd or Kubernetes stop it (review h43's NIT 6): the real command in a
subprocess, a request in flight on a held upstream when the signal arrives.

SIGTERM or SIGHUP: one line on stderr says the signal and how many requests are in flight; the port closes; the
request in flight gets its whole reply; a second line says the drain is done; the exit status is 0. Ctrl-C (SIGINT):
the same, with status 130 (Ctrl-C's status for every arc-ref command). A second signal during the drain stops the
proxy at once: one line, the requests in flight cut, exit status 128 + that signal. Before, the proxy drained
quietly and ended by the signal itself (-15, a shell's 143); SIGHUP killed it at once, its requests in flight cut;
a second SIGTERM did nothing, and a second Ctrl-C answered the request in flight 500 and wrote uvicorn's
tracebacks (137 lines) on stderr."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.proxy.harness import QWEN3, needs_qwen3
from tests.stopping import listening, signals_as_by_default
from tests.waiting import http_ok, wait_until

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends import exit_status  # noqa: E402
from benchmarks.proxy_cases import FakeUpstream, completion, fake_upstream, free_port  # noqa: E402

pytestmark = needs_qwen3
REPO = Path(__file__).resolve().parents[2]
REQUEST = {"model": "fake", "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "List the files."}]}


class Running:
    """`arc-ref proxy` in front of ``upstream``, its stderr in a file."""

    def __init__(self, upstream: FakeUpstream, folder: Path, ignored: tuple[int, ...] = ()) -> None:
        def signals() -> None:
            signals_as_by_default()
            for number in ignored:
                signal.signal(number, signal.SIG_IGN)
        self.port = free_port()
        self.errors_path = folder / "stderr"
        self.errors = open(self.errors_path, "w+", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", "--upstream", upstream.url, "--tokenizer",
             f"hf-dir:{QWEN3}", "--port", str(self.port)], stdout=subprocess.DEVNULL, stderr=self.errors, cwd=REPO,
            preexec_fn=signals)
        wait_until(http_ok(f"http://127.0.0.1:{self.port}/health"), self.process, "arc-ref proxy")

    def said(self) -> str:
        return self.errors_path.read_text(encoding="utf-8")

    def wait_for_line(self, pattern: str) -> None:
        import re

        wait_until(lambda: re.search(pattern, self.said()) is not None, self.process, f"a line {pattern!r} on stderr",
                   base_s=30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(60)
        self.errors.close()


@pytest.fixture
def held_upstream() -> Iterator[tuple[FakeUpstream, threading.Event]]:
    """A fake upstream whose replies wait until the event is set (set at the end in any case)."""
    release = threading.Event()
    with fake_upstream() as upstream:
        def reply(body: dict[str, Any]) -> Any:
            release.wait(300)
            return 200, json.dumps(completion("the whole reply")).encode()
        upstream.reply = reply
        try:
            yield upstream, release
        finally:
            release.set()


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``work`` running in a thread: the thread and a list that receives its result or its exception."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except Exception as problem:  # noqa: BLE001 - handed to the test
            outcome.append(problem)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def ask(port: int) -> str:
    """The proxy's whole reply to REQUEST: its message's content."""
    response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=REQUEST, timeout=300)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


def ask_streamed(port: int) -> str:
    """The proxy's whole streamed reply to REQUEST: its content's deltas joined, once `data: [DONE]` has come."""
    deltas, done = [], False
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json={**REQUEST, "stream": True},
                      timeout=300) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for choice in json.loads(line.removeprefix("data: "))["choices"]:
                    deltas.append(choice["delta"].get("content") or "")
    assert done, deltas
    return "".join(deltas)


@pytest.mark.parametrize(("sent", "status", "streamed"), [(signal.SIGTERM, exit_status.OK.code, False),
                                                          (signal.SIGTERM, exit_status.OK.code, True),
                                                          (signal.SIGHUP, exit_status.OK.code, False),
                                                          (signal.SIGINT, exit_status.INTERRUPTED.code, False)])
def test_a_stop_says_so_lets_the_request_in_flight_finish_and_exits_with_its_status(
        held_upstream: tuple[FakeUpstream, threading.Event], tmp_path: Path, sent: int, status: int,
        streamed: bool) -> None:
    upstream, release = held_upstream
    proxy = Running(upstream, tmp_path)
    try:
        thread, outcome = in_thread(lambda: (ask_streamed if streamed else ask)(proxy.port))
        wait_until(lambda: len(upstream.requests) == 1, proxy.process, "the request at the upstream")
        proxy.process.send_signal(sent)
        name = signal.Signals(sent).name
        proxy.wait_for_line(rf"arc-ref proxy: stopped by {name}: draining 1 request in flight")
        wait_until(lambda: not listening(proxy.port), proxy.process, "the port closed")
        assert proxy.process.poll() is None and thread.is_alive()  # the request is still waited for
        release.set()
        thread.join(300)
        assert outcome == ["the whole reply"]
        assert proxy.process.wait(300) == status
        lines = [line for line in proxy.said().splitlines() if ": warning: " not in line]  # (the fake's usage)
        assert lines[-2:] == [f"arc-ref proxy: stopped by {name}: draining 1 request in flight (a second signal"
                              " stops it at once)",
                              "arc-ref proxy: drained: every request in flight finished; stopped"], lines
    finally:
        proxy.close()


def test_a_stop_with_nothing_in_flight_says_so(held_upstream: tuple[FakeUpstream, threading.Event],
                                              tmp_path: Path) -> None:
    upstream, _ = held_upstream
    proxy = Running(upstream, tmp_path)
    try:
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.process.wait(300) == exit_status.OK.code
        assert proxy.said().splitlines()[-2:] == [
            "arc-ref proxy: stopped by SIGTERM: no request in flight",
            "arc-ref proxy: drained: every request in flight finished; stopped"]
    finally:
        proxy.close()


@pytest.mark.parametrize(("first", "second"), [(signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT),
                                               (signal.SIGHUP, signal.SIGHUP), (signal.SIGINT, signal.SIGINT)])
def test_a_second_signal_during_the_drain_stops_at_once(
        held_upstream: tuple[FakeUpstream, threading.Event], tmp_path: Path, first: int, second: int) -> None:
    upstream, release = held_upstream
    proxy = Running(upstream, tmp_path)
    try:
        thread, outcome = in_thread(lambda: ask(proxy.port))
        wait_until(lambda: len(upstream.requests) == 1, proxy.process, "the request at the upstream")
        proxy.process.send_signal(first)
        proxy.wait_for_line(r"draining 1 request in flight")
        proxy.process.send_signal(second)
        assert proxy.process.wait(300) == 128 + second  # the upstream still holds the request
        assert proxy.said().splitlines()[-1] == (f"arc-ref proxy: stopped at once by a second signal"
                                                 f" ({signal.Signals(second).name}): 1 request in flight cut")
        assert "Traceback" not in proxy.said()  # (before, a second Ctrl-C: uvicorn's 137 lines of them)
        thread.join(300)
        assert isinstance(outcome[0], httpx.TransportError), outcome  # cut, not answered
    finally:
        release.set()
        proxy.close()


def test_the_statuses_of_a_stop_are_in_the_table() -> None:
    codes = {status.code for status in exit_status.EXIT_STATUSES}
    assert {0, 128 + signal.SIGHUP, 128 + signal.SIGINT, 128 + signal.SIGTERM} <= codes
    assert "SIGTERM" in exit_status.OK.when and "SIGHUP" in exit_status.OK.when


def test_a_signal_ignored_at_start_stays_ignored(held_upstream: tuple[FakeUpstream, threading.Event],
                                                  tmp_path: Path) -> None:
    """`nohup arc-ref proxy ...`: SIGHUP ignored when it starts (the terminal closing) does not stop it."""
    upstream, _ = held_upstream
    proxy = Running(upstream, tmp_path, ignored=(signal.SIGHUP,))
    try:
        proxy.process.send_signal(signal.SIGHUP)  # (an ignored signal is dropped when sent)
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.process.wait(300) == exit_status.OK.code
        assert "stopped by SIGTERM" in proxy.said() and "SIGHUP" not in proxy.said()
    finally:
        proxy.close()


def test_the_count_of_requests_in_flight_holds_a_stream_whose_client_left(
        held_upstream: tuple[FakeUpstream, threading.Event]) -> None:
    """The count a stop's lines give (`CountedApp`): a plain request from its head to its reply's last byte, and a
    stream whose client left after its first keepalive until its reply is committed (the drain waits for it too);
    a request answered is no longer counted (before its client has read the reply: no race with a stop)."""
    from arc_ref.frontends.proxy import ProxySettings
    from arc_ref.frontends.proxy_app import CountedApp, build_app
    from tests.proxy.harness import serve_app

    upstream, release = held_upstream
    counted = CountedApp(build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}",
                                                 context_limit=16384, keepalive_s=0.05)))
    with serve_app(counted) as base_url:
        assert httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
        assert counted.in_flight() == 0
        with httpx.stream("POST", f"{base_url}/chat/completions", json={**REQUEST, "stream": True},
                          timeout=300) as response:
            assert next(response.iter_lines()) == ": keepalive"
            assert counted.in_flight() == 1
        # the client has left; its request runs on, held by the upstream
        wait_until(lambda: len(counted.app.state.unattended) == 1, None, "the stream's handler ended")
        assert counted.in_flight() == 1
        thread, outcome = in_thread(lambda: ask(int(base_url.rsplit(":", 1)[1].split("/")[0])))
        wait_until(lambda: len(upstream.requests) == 2, None, "the second request at the upstream")
        assert counted.in_flight() == 2
        release.set()
        thread.join(300)
        assert outcome == ["the whole reply"]
        wait_until(lambda: counted.in_flight() == 0, None, "the stream's reply committed")
