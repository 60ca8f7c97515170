"""Clients that go away mid-request (review h35): a body cut while the proxy reads it, a stream whose client left
after its first keepalive, the process stopped while such a request still runs. None of them may cost another
client anything, flood the log, or lose what the request was about to commit."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import QWEN3, needs_qwen3, serve_app, start_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from benchmarks.proxy_cases import completion, fake_upstream  # noqa: E402

pytestmark = needs_qwen3

REQUEST = {"model": "fake", "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": "List the files."}]}


def post_scope(path: str, body: bytes, spec_version: str) -> dict[str, Any]:
    """The ASGI scope of a JSON POST of ``body`` to ``path`` from 127.0.0.1."""
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": spec_version}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8100),
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}


def test_a_client_that_leaves_while_its_body_is_read_is_no_error_of_the_proxy() -> None:
    """A client that closes its connection before its body is whole (a large body sent slowly, then the agent
    stopped) is answered by nothing, quietly: before, Starlette's ClientDisconnect left the handler and uvicorn
    logged 'Exception in ASGI application' with a 40-line traceback for each such client (100 cut uploads: 4,300
    lines of ERROR in the proxy's log)."""
    with fake_upstream() as upstream:
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384))
        body = json.dumps(REQUEST).encode()
        path = "/v1/chat/completions"
        scope = post_scope(path, body, "2.3")
        sent: list[dict[str, Any]] = []

        async def cut_client() -> None:
            messages = iter([{"type": "http.request", "body": body[:10], "more_body": True},
                             {"type": "http.disconnect"}])

            async def receive() -> dict[str, Any]:
                return next(messages)

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            async with app.router.lifespan_context(app):
                await app(scope, receive, send)  # before: raised ClientDisconnect
        asyncio.run(cut_client())
        assert upstream.requests == []
        assert all(message["type"] != "http.response.body" or not message.get("body") or sent[0]["status"] < 500
                   for message in sent), sent


def test_a_stream_that_fails_after_its_keepalive_is_logged(capfd: pytest.CaptureFixture[str]) -> None:
    """A streamed request whose upstream fails after the proxy sent its first keepalive ends with an error event (the
    status went out with the keepalive): the failure is now said on stderr as a plain request's is (review h30 F9's
    line; before, a stream that failed late left no trace in the proxy's log)."""
    release = threading.Event()
    with fake_upstream() as upstream:
        def reply(body: dict[str, Any]) -> Any:
            if not body.get("stream_test"):
                return 200, json.dumps(completion()).encode()
            release.wait(60)  # held until the client has its first keepalive
            return 500, b'{"error": {"message": "the model crashed", "type": "internal"}}'
        upstream.reply = reply
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      keepalive_s=0.05))
        with serve_app(app) as base_url:
            with httpx.stream("POST", f"{base_url}/chat/completions", json={**REQUEST, "stream": True,
                                                                               "stream_test": 1},
                              timeout=120) as response:
                lines = response.iter_lines()
                assert next(lines) == ": keepalive"
                release.set()
                said = "\n".join(lines)
    assert "the model crashed" in said and said.rstrip().endswith("data: [DONE]"), said
    assert re.search(r"arc-ref proxy: the upstream answered 500 \(conversation \w+\): the model crashed",
                     capfd.readouterr().err)


def test_stopping_the_proxy_lets_a_stream_whose_client_left_commit(tmp_path: Path) -> None:
    """A streamed request whose client left after its first keepalive still runs (its reply is committed for the
    client's retry). When the proxy is stopped meanwhile (SIGTERM, Ctrl-C), uvicorn waits for the requests whose
    clients are still connected, not for this one: the stores were closed under it and it was cancelled at the
    end, its upstream reply lost (and 'unhandled exception during asyncio.run() shutdown' printed). Now the
    shutdown waits for it too, so its reply is committed: the same history sent to the restarted proxy forks the
    conversation (its head is past the task), where before it went on in place."""
    release = threading.Event()
    with fake_upstream() as upstream:
        def reply(body: dict[str, Any]) -> Any:
            if body.get("stream_test"):
                release.wait(60)  # held until the proxy is stopping
            return 200, json.dumps(completion("the reply")).encode()
        upstream.reply = reply

        def settings() -> ProxySettings:
            return ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                 store=tmp_path, keepalive_s=0.05)
        app = build_app(settings())
        server, thread, base_url = start_app(app)
        with httpx.stream("POST", f"{base_url}/chat/completions", timeout=120,
                          json={**REQUEST, "stream": True, "stream_test": 1}) as response:
            assert next(response.iter_lines()) == ": keepalive"
        # the client has left; the proxy is stopped while its request waits on the upstream
        while len(upstream.requests) < 1:
            threading.Event().wait(0.01)
        server.should_exit = True
        while thread.is_alive() and not getattr(app.state, "draining", False):
            threading.Event().wait(0.01)
        release.set()
        thread.join(60)
        assert not thread.is_alive()
        first = [path.name for path in tmp_path.iterdir() if path.is_dir()]
        assert len(first) == 1, first
        with serve_app(build_app(settings())) as base_url:
            again = httpx.post(f"{base_url}/chat/completions", json=REQUEST, timeout=120)
        assert again.status_code == 200, again.text
        assert again.headers["x-arc-conversation"] != first[0], "the first request's reply was never committed"


def test_a_stream_whose_client_left_still_says_its_failure(capfd: pytest.CaptureFixture[str]) -> None:
    """A streamed request whose client left after its first keepalive runs on; when its upstream then fails, the
    failure is said on stderr as any other request's (before, nothing: the task's error was never read)."""
    release = threading.Event()
    with fake_upstream() as upstream:
        def reply(body: dict[str, Any]) -> Any:
            release.wait(60)  # held until the client has left
            return 500, b'{"error": {"message": "the model crashed", "type": "internal"}}'
        upstream.reply = reply
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      keepalive_s=0.05))
        with serve_app(app) as base_url:
            with httpx.stream("POST", f"{base_url}/chat/completions", json={**REQUEST, "stream": True},
                              timeout=120) as response:
                assert next(response.iter_lines()) == ": keepalive"
            while len(upstream.requests) < 1:
                threading.Event().wait(0.01)
            release.set()
        # the proxy stopped: the request whose client left was waited for (review h35 F3)
    assert re.search(r"arc-ref proxy: the upstream answered 500 \(conversation \w+\): the model crashed",
                     capfd.readouterr().err)


def test_a_body_that_stalls_is_answered_408_and_holds_nothing() -> None:
    """A client that sends part of its body and then nothing, its connection open (a hung agent, a hostile one),
    held the connection and the part read forever, and a SIGTERM's drain waited for it: the proxy never exited
    while it stalled (review h35 F8). Now a body with no byte for ``body_idle_s`` (60 s by default) is answered
    408 ``request_timeout`` and the connection closed."""
    import socket

    with fake_upstream() as upstream:
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      body_idle_s=0.2))
        body = json.dumps(REQUEST).encode()
        with serve_app(app) as base_url:
            port = int(base_url.rsplit(":", 1)[1].split("/")[0])
            with socket.create_connection(("127.0.0.1", port), timeout=60) as stalled:
                stalled.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                                + f"content-length: {len(body)}\r\n\r\n".encode() + body[:20])
                answer = b""
                while True:  # to the end: the proxy closes the connection (before: nothing, until the timeout)
                    more = stalled.recv(4096)
                    if not more:
                        break
                    answer += more
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in answer, answer
    assert upstream.requests == []


def test_a_stream_whose_client_left_before_its_first_event_is_counted_and_still_says_its_failure(
        capfd: pytest.CaptureFixture[str]) -> None:
    """A streamed request whose client is gone when the stream's first message is sent (ASGI 2.4: ``send`` raises
    OSError, as uvicorn's does for a closed connection): the stream's generator never starts, so before nothing of
    it ran (review h49): the request was not counted by GET /metrics, and its later failure not said. Now the
    response's end is watched: counted as client_gone, the failure said, the request run to its end."""
    release = threading.Event()
    with fake_upstream() as upstream:
        def reply(body: dict[str, Any]) -> Any:
            release.wait(60)  # held past the first keepalive's time: the stream path, not a plain answer
            return 500, b'{"error": {"message": "the model crashed", "type": "internal"}}'
        upstream.reply = reply
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      keepalive_s=0.05))
        body = json.dumps({**REQUEST, "stream": True}).encode()
        path = "/v1/chat/completions"
        scope = post_scope(path, body, "2.4")

        async def gone_client() -> str:
            messages = iter([{"type": "http.request", "body": body, "more_body": False}])

            async def receive() -> dict[str, Any]:
                return next(messages, {"type": "http.disconnect"})

            async def send(message: dict[str, Any]) -> None:
                raise OSError("the client closed the connection")

            async with app.router.lifespan_context(app):
                with pytest.raises(Exception):  # (Starlette's ClientDisconnect: uvicorn's to handle)
                    await app(scope, receive, send)
                release.set()
                metrics: list[dict[str, Any]] = []

                async def keep(message: dict[str, Any]) -> None:
                    metrics.append(message)
                scrape = {**scope, "method": "GET", "path": "/metrics", "raw_path": b"/metrics", "headers": []}
                while not app.state.unattended and len(upstream.requests) < 1:
                    await asyncio.sleep(0.01)
                while app.state.unattended:  # the request runs on to its end
                    await asyncio.sleep(0.01)
                await app(scrape, receive, keep)
            return b"".join(message.get("body", b"") for message in metrics).decode()
        exposition = asyncio.run(gone_client())
    assert re.search(r'arc_requests_total\{[^}]*kind="client_gone"[^}]*stream="true"[^}]*\} 1', exposition), exposition
    assert re.search(r"arc-ref proxy: the upstream answered 500 \(conversation \w+\): the model crashed",
                     capfd.readouterr().err)


def test_a_request_knows_whether_its_client_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTTP server gives each request a probe of its client (`CLIENT_LEFT`: with PostgreSQL, a client's retry
    that waited gives up once its client left, review h58 F4): True once the connection is closed, False while the
    client waits for its answer (the probe does not wait for the client's next message)."""
    from arc_ref.frontends.proxy import CLIENT_LEFT, Failed, Proxy

    seen: list[Any] = []

    async def probed(self: Any, body: Any, explicit: Any, retry: bool = False) -> Any:
        probe = CLIENT_LEFT.get()
        seen.append(None if probe is None else await probe())
        raise Failed(409, "probed", "the test's")

    monkeypatch.setattr(Proxy, "complete", probed)
    app = build_app(ProxySettings(upstream="http://upstream.invalid/v1", tokenizer=f"hf-dir:{QWEN3}",
                                  context_limit=16384))
    body = json.dumps(REQUEST).encode()
    path = "/v1/chat/completions"
    scope = post_scope(path, body, "2.3")

    async def client(leaves: bool) -> None:
        messages = iter([{"type": "http.request", "body": body, "more_body": False}])

        async def receive() -> dict[str, Any]:
            message = next(messages, None)
            if message is not None:
                return message
            if not leaves:
                await asyncio.Event().wait()  # (the client waits for its answer)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            pass

        await app(scope, receive, send)

    async def both() -> None:
        async with app.router.lifespan_context(app):
            await client(leaves=True)
            await client(leaves=False)

    asyncio.run(both())
    assert seen == [True, False]
