"""One client never harms another, for what the clients of one proxy share beyond a conversation (review h40): the
worker threads every request's core work runs on, the connections to the upstream, the process's file
descriptors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, bash_call_reply, needs_qwen3, serve_app
from tests.waiting import http_ok, wait_until

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import LARGE_WORK_CHARACTERS, Proxy, ProxySettings, listening_socket  # noqa: E402
from arc_ref.frontends.proxy_app import build_app, decode_body  # noqa: E402
from benchmarks.proxy_cases import completion, fake_upstream, free_port, task  # noqa: E402

pytestmark = needs_qwen3
ANSWERED_WITHIN_S = 30  # the small client's request is answered within this while the large ones are held


def request(task: str, output: str | None = None) -> dict[str, Any]:
    """A first request (with ``output``: its agent's first call answered with that output)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You run one bash command per turn."},
                                      {"role": "user", "content": task}]
    if output is not None:
        messages += [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "bash", "arguments": '{"command": "cat big.log"}'}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": output}]
    return {"model": "m", "messages": messages, "tools": [BASH_TOOL]}


def test_requests_with_large_outputs_never_take_the_worker_threads_a_small_request_needs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As many requests carrying a large tool output as the loop has worker threads, each held while its output is
    counted (a 20 MB output takes seconds): a small request of another client is answered meanwhile, and the
    large ones ran on the proxy's threads for large work. Before, they took every worker thread and the small
    request waited for one of them to finish (8 clients sending 20 MB outputs at once: another client's request
    waited 27 s)."""
    advance = Proxy._advance
    held = threading.Event()
    large_threads: set[str] = set()

    def slow_when_large(self: Proxy, conversation: Any, new: Any, hashes: Any) -> Any:
        if sum(len(message.text) for message in new) > LARGE_WORK_CHARACTERS:
            large_threads.add(threading.current_thread().name)
            held.wait(4 * ANSWERED_WITHIN_S)  # the count of a long output
        return advance(self, conversation, new, hashes)

    monkeypatch.setattr(Proxy, "_advance", slow_when_large)
    output = "row ok\n" * (LARGE_WORK_CHARACTERS // 7 + 1)
    workers = 2

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(workers))
        async with httpx.AsyncClient(transport=httpx.MockTransport(bash_call_reply)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", context_limit=16384), client)
            try:
                large = [asyncio.ensure_future(proxy.complete(decode_body(json.dumps(request(
                    f"Read the log {number}.", output)).encode(), proxy.known), None)) for number in range(workers)]
                while len(large_threads) < workers and not any(task.done() for task in large):
                    await asyncio.sleep(0.01)
                small = proxy.complete(decode_body(json.dumps(request("Say hello.")).encode(), proxy.known), None)
                reply = await asyncio.wait_for(small, ANSWERED_WITHIN_S)
                assert reply.completion["choices"][0]["message"]["tool_calls"]
                assert not any(task.done() for task in large)  # still held
                held.set()
                await asyncio.gather(*large)
            finally:
                held.set()
                await proxy.close()

    asyncio.run(scenario())
    assert large_threads and all(name.startswith("arc-proxy-large") for name in large_threads), large_threads


STALLED = 260  # upstream calls held at once: more than the proxy's pool of upstream connections held before (256)


def test_upstream_calls_one_client_holds_never_keep_another_clients_call_from_the_upstream() -> None:
    """One client's requests whose upstream calls hang (a model that generates for minutes, a router's backend
    that stalls), more of them than the proxy had upstream connections: another client's request still reaches the
    upstream and is answered. Before, the proxy's pool held 256 connections to the upstream: the other request
    waited for one of them up to the upstream timeout (600 s), then got 504 'the upstream did not answer', never
    having been sent."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8 * STALLED  # this process holds both ends of both hops
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"needs {wanted} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    release = threading.Event()

    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        if "hang" in body["messages"][-1]["content"]:
            release.wait(4 * ANSWERED_WITHIN_S)
        return 200, json.dumps(completion()).encode()

    with fake_upstream() as upstream:
        upstream.server.socket.listen(2 * STALLED)  # (its default backlog of 5 would make the connections retry)
        upstream.reply = reply
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384)
        with serve_app(build_app(settings)) as base_url:

            async def scenario() -> httpx.Response:
                async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=None) as client:
                    def ask(number: int, text: str) -> Any:
                        return client.post(f"{base_url}/chat/completions",
                                           json={"model": "fake", "messages": task(number, text)})

                    held = [asyncio.ensure_future(ask(number, "hang")) for number in range(STALLED)]
                    try:
                        while len(upstream.requests) < 256:  # the pool the proxy had, full
                            await asyncio.sleep(0.05)
                        return await asyncio.wait_for(ask(STALLED, "Say hello."), ANSWERED_WITHIN_S)
                    finally:
                        release.set()
                        await asyncio.gather(*held, return_exceptions=True)

            try:
                answered = asyncio.run(scenario())
            finally:
                release.set()
    assert answered.status_code == 200, answered.text


def test_a_shells_limit_on_open_files_does_not_bound_the_connections_the_proxy_serves(tmp_path: Path) -> None:
    """`arc-ref proxy` started with a soft limit of 64 open files (a shell's is often 1,024, macOS's 256) and a
    higher hard one: 100 clients connected at once (idle, or each waiting for its reply: a request in flight holds
    two descriptors) leave room for another client, which is answered. Before, the process used the soft limit:
    the connections past it were never accepted (every client refused, the slow and the quick alike) and the event
    loop logged a traceback for each try, some 16,000 a second."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard limit on open files is {hard}")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))

    with fake_upstream() as upstream, open(tmp_path / "stderr", "w+") as errors:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", "--upstream", upstream.url, "--tokenizer",
             f"hf-dir:{QWEN3}", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=errors,
            cwd=Path(__file__).resolve().parents[2], preexec_fn=limited, start_new_session=True)
        idle: list[socket.socket] = []
        try:
            wait_until(http_ok(f"http://127.0.0.1:{port}/health"), process, "arc-ref proxy", base_s=120)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
            answered = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                  json={"model": "fake", "messages": task(1)}, timeout=ANSWERED_WITHIN_S)
            assert answered.status_code == 200, answered.text
        finally:
            for connection in idle:
                connection.close()
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(60)
        errors.seek(0)
        assert "Too many open files" not in errors.read()


def test_a_connection_that_sends_no_request_is_closed_and_one_waiting_for_its_reply_is_not() -> None:
    """Connections that send nothing, or the head of a request never finished, are closed after the proxy's wait
    for a request head; a request the upstream takes longer than that to answer is answered on its connection.
    Before, such connections stayed open for ever (1,100 of them: none closed after 20 s), each holding a file
    descriptor: enough of them and every other client was refused."""
    import uvicorn

    from arc_ref.frontends.proxy_app import serve_server

    with fake_upstream() as upstream:
        upstream.delay_s = 1.0  # longer than the wait for a head below
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384)
        listener = listening_socket("127.0.0.1", 0)
        port = int(listener.getsockname()[1])
        server = uvicorn.Server(uvicorn.Config(build_app(settings), log_level="warning", access_log=False))
        thread = threading.Thread(target=lambda: asyncio.run(serve_server(server, listener, head_s=0.3)),
                                  daemon=True)
        thread.start()
        try:
            while not server.started:
                assert thread.is_alive()
                time.sleep(0.01)
            silent = socket.create_connection(("127.0.0.1", port))
            partial = socket.create_connection(("127.0.0.1", port))
            partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
            answered = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                  json={"model": "fake", "messages": task(1)}, timeout=ANSWERED_WITHIN_S)
            assert answered.status_code == 200, answered.text
            for connection in (silent, partial):
                connection.settimeout(ANSWERED_WITHIN_S)
                assert connection.recv(1024) == b""  # closed by the proxy (a timeout here: still open)
                connection.close()
        finally:
            server.should_exit = True
            thread.join(30)


def test_the_rounds_are_listed_while_the_event_loop_serves_the_other_clients() -> None:
    """GET /arc/rounds with its 10,000 rounds (3 MB of JSON) is built a slice at a time, the event loop running the
    other clients' requests in between. Before, it was built in one go on the loop, ~110 ms each: one client
    polling it made another's requests take 222 ms instead of 12 (two clients polling: 1,017 ms)."""
    from arc_ref.frontends.proxy import ROUND_LOG_SIZE, RoundRecord

    ticks = [0]
    seen: set[int] = set()  # the ticks of the loop's other task while the list was read

    class Watched(RoundRecord):
        def __getattribute__(self, name: str) -> Any:
            if name == "view_digest":
                seen.add(ticks[0])
            return super().__getattribute__(name)

    with fake_upstream() as upstream:
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384))

        async def listed() -> list[dict[str, Any]]:
            async def other_client() -> None:
                while True:
                    ticks[0] += 1
                    await asyncio.sleep(0)

            async with app.router.lifespan_context(app):
                app.state.proxy.rounds.extend(Watched(f"c{number}", False, 10, 100, 200, 50, 200, 10, seq=number)
                                              for number in range(ROUND_LOG_SIZE))
                ticker = asyncio.ensure_future(other_client())
                try:
                    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                                 base_url="http://proxy") as client:
                        response = await client.get("/arc/rounds")
                finally:
                    ticker.cancel()
                assert response.status_code == 200
                return list(response.json())

        rounds = asyncio.run(listed())
    assert [entry["seq"] for entry in rounds] == list(range(ROUND_LOG_SIZE))
    assert rounds[0] == {"conversation": "c0", "hidden": False, "view_tokens": 10, "budget": 100, "limit": 200,
                         "max_tokens": 50, "status": 200, "upstream_prompt_tokens": 10, "streamed": False,
                         "view_digest": "", "seq": 0, "upstream_cached_tokens": None, "completion_reserve": 0,
                         "asked_max_tokens": None}
    assert len(seen) >= 10, len(seen)  # the other task ran at least 10 times while the rounds were read


def test_large_bodies_in_flight_are_bounded_and_small_requests_pass_meanwhile() -> None:
    """Review h40 F6 (MAJOR): nothing bounded the bytes of large bodies held at once (48 bodies of 30 MB: the
    process from 805 to 2,287 MiB). With room for one large body, a second that arrives while the first's request
    runs waits unread, then is answered 503 'busy' with retry-after; a small request passes meanwhile; once the first
    ended, a large body is held again (what was taken was given back)."""
    release = threading.Event()

    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        if any("HOLD" in str(message.get("content")) for message in body["messages"]):
            release.wait(4 * ANSWERED_WITHIN_S)
        return 200, json.dumps(completion("done")).encode()

    output = "row ok\n" * (1_500_000 // 7)  # a body of ~1.5 MB: over the 1 MiB from which a body is held
    with fake_upstream() as upstream:
        upstream.reply = reply
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                 max_body_bytes=2 * 2**20, bodies_in_flight_bytes=2 * 2**20, body_wait_s=1.0)
        with serve_app(build_app(settings)) as base_url:
            def post(body: dict[str, Any]) -> httpx.Response:
                return httpx.post(f"{base_url}/chat/completions", json=body, timeout=4 * ANSWERED_WITHIN_S)

            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                first = pool.submit(post, request("HOLD: read the log.", output))
                deadline = time.monotonic() + ANSWERED_WITHIN_S
                while not upstream.requests and time.monotonic() < deadline:  # the first body held, its call made
                    time.sleep(0.05)
                assert upstream.requests, "the first request never reached the upstream"
                refused = post(request("Read the other log.", output))
                unsized = httpx.post(f"{base_url}/chat/completions", timeout=ANSWERED_WITHIN_S,  # chunked: no length
                                     content=iter([json.dumps(request("Read a third log.", output)).encode()]),
                                     headers={"content-type": "application/json"})
                small = post(request("Say hello."))
                assert not first.done()
                release.set()
                assert first.result().status_code == 200, first.result().text
            again = post(request("Read the other log.", output))
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["type"] == "busy" and "--bodies-in-flight-mb" in refused.json()["error"]["message"]
    assert refused.headers.get("retry-after") == "5"
    assert unsized.status_code == 503 and unsized.json()["error"]["type"] == "busy", unsized.text
    assert small.status_code == 200, small.text
    assert again.status_code == 200, again.text


def test_an_allowance_below_the_largest_body_accepted_still_holds_one_such_body() -> None:
    """Settings built in code may give an allowance below --max-body-mb (the command line refuses it): a body of
    the largest size is then held alone, never answered 503 for an allowance that could never hold it."""
    output = "row ok\n" * (1_500_000 // 7)
    with fake_upstream() as upstream:
        upstream.reply = lambda body: (200, json.dumps(completion("done")).encode())
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                 max_body_bytes=2 * 2**20, bodies_in_flight_bytes=2**20, body_wait_s=1.0)
        with serve_app(build_app(settings)) as base_url:
            answered = httpx.post(f"{base_url}/chat/completions", json=request("Read the log.", output),
                                  timeout=4 * ANSWERED_WITHIN_S)
    assert answered.status_code == 200, answered.text
