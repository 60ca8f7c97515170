"""Servers for the proxy's tests: serve-scripted (the upstream) and `arc-ref proxy`, each in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("httpx", reason="the proxy needs the extra 'proxy' (httpx, starlette, uvicorn)")
pytest.importorskip("starlette", reason="the proxy needs the extra 'proxy' (httpx, starlette, uvicorn)")
uvicorn = pytest.importorskip("uvicorn", reason="the proxy needs the extra 'proxy' (httpx, starlette, uvicorn)")

from arc_ref.frontends.proxy import ProxySettings, listening_socket  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_eval.agent.recall_then_submit import RecallThenSubmitPolicy  # noqa: E402
from arc_eval.backends.scripted_server import build_app as build_upstream  # noqa: E402
from arc_eval.backends.scripted_server import ScriptedServer, serve_in_thread  # noqa: E402
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir  # noqa: E402

QWEN3 = qwen3_dir()
needs_qwen3 = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
MAX_MODEL_LEN = 16384
# budgets that hold mini-swe-agent's long instance template in F and show a 300-line file as its stub
BUDGETS: dict[str, Any] = {"recent_budget": 2000, "recall_budget": 2600, "chunk_tokens": 1200,
                           "summary_budget": 1500}


def bash_call_reply(request: Any) -> Any:
    """A mock upstream's answer (an httpx.MockTransport handler): one bash call, named by the request's message
    count, with a usage block."""
    import httpx

    number = len(json.loads(request.content)["messages"])
    message = {"role": "assistant", "content": f"step {number}", "tool_calls": [
        {"id": f"call_{number}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                     "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def count_hand_offs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """asyncio.to_thread counted from now on (the proxy's worker-thread hand-offs): a one-item list, the count."""
    hops = [0]
    to_thread = asyncio.to_thread

    async def counted_hop(function: Any, *args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return await to_thread(function, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted_hop)
    return hops


def big_log(path: Path, needle_line: int = 150) -> str:
    """A 300-line log (about 2,400 Qwen3 tokens, under mini-swe-agent's 10,000-character cut) with one needle."""
    lines = [f"row {number}: ok c={number * 37 % 1000:04d}" for number in range(1, 301)]
    lines[needle_line - 1] = f"row {needle_line}: NEEDLE_KEY=violet-42"
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


def task_text(path: Path) -> str:
    return f"Find the value of NEEDLE_KEY in {path} and submit it."


def upstream(**options: Any) -> ScriptedServer:
    assert QWEN3 is not None
    return build_upstream(RecallThenSubmitPolicy(), max_model_len=MAX_MODEL_LEN, tokenizer=str(QWEN3),
                          model_name="scripted", **options)


@contextlib.contextmanager
def serve_upstream(**options: Any) -> Iterator[tuple[ScriptedServer, str]]:
    server = upstream(**options)
    with serve_in_thread(server) as base_url:
        yield server, base_url


@contextlib.contextmanager
def serve_proxy(upstream_url: str, store: Path | None = None, keepalive_s: float = 5.0, max_hidden_rounds: int = 8,
                **overrides: Any) -> Iterator[str]:
    """`arc-ref proxy` on a free port in a thread (its own event loop); yields its base URL (.../v1)."""
    assert QWEN3 is not None
    settings = ProxySettings(upstream=upstream_url, tokenizer=f"hf-dir:{QWEN3}", overrides={**BUDGETS, **overrides},
                             store=store, keepalive_s=keepalive_s, max_hidden_rounds=max_hidden_rounds)
    with serve_app(build_app(settings)) as base_url:
        yield base_url


def start_app(app: Any) -> tuple[Any, threading.Thread, str]:
    """A proxy's application (`build_app`) started on a free port in a thread (its own event loop): the uvicorn
    server (``should_exit = True`` stops it), its thread and its base URL."""
    listener = listening_socket("127.0.0.1", 0)
    port = int(listener.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the proxy did not start")
        threading.Event().wait(0.01)
    return server, thread, f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """`start_app`, stopped on leaving; its base URL."""
    server, thread, base_url = start_app(app)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(30)


BASH_TOOL = {"type": "function", "function": {"name": "bash", "description": "Execute a bash command",
                                              "parameters": {"type": "object", "properties": {
                                                  "command": {"type": "string", "description": "the command"}},
                                                  "required": ["command"]}}}


def run_agent(base_url: str, task: str, *, headers: dict[str, str] | None = None, steps: int = 10,
              system: str = "You are a helpful assistant.") -> tuple[list[dict[str, Any]], list[Any], str | None]:
    """A minimal agent loop that resends its whole history every turn (as mini-swe-agent does) through the proxy:
    its messages, the HTTP responses, and what it submitted (None when it never did)."""
    import json
    import subprocess

    import httpx

    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    responses = []
    for _ in range(steps):
        response = httpx.post(f"{base_url}/chat/completions", json={"model": "scripted", "messages": messages,
                                                                       "tools": [BASH_TOOL]},
                              headers=headers, timeout=120)
        responses.append(response)
        assert response.status_code == 200, response.text
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or ():
            command = json.loads(call["function"]["arguments"])["command"]
            output = subprocess.run(command, shell=True, capture_output=True, text=True, check=False).stdout
            if output.startswith("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"):
                return messages, responses, output.split("\n", 1)[1]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if not message.get("tool_calls"):
            return messages, responses, None
    return messages, responses, None
