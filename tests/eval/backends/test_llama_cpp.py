"""llama.cpp's `llama-server` as a second target: detected from /v1/models, counted exactly with
/apply-template + /tokenize, its refusals classified.

The mock tests answer with llama-server's own shapes (tools/server/server-context.cpp,
server-common.cpp); the last test runs a real llama-server when one is available:
``LLAMA_SERVER`` (the binary) or ``llama-server`` on PATH, and a GGUF: ``ARC_TEST_GGUF``, or one
made by benchmarks/make_tiny_gguf.py from ../shared/data/qwen3-tokenizer (or ``$ARC_SHARED_DATA``)
with llama.cpp's gguf-py (``LLAMA_CPP_DIR`` or an installed ``gguf``). CI cannot build llama-server in time, so there it
skips, saying which of these is missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from arc_ref.config import parse_tools
from arc_ref.message import ToolCall
from arc_eval.backends.faults import PREFILL_FIX, SHARED_KV_FIX
from arc_eval.backends.openai_backend import OpenAIBackend
from tests.eval.helpers import openai_backend
from arc_eval.types import (
    BackendRequestError,
    BackendUnavailable,
    ChatRequest,
    ContextOverflow,
    Message,
)
from proofs_check.shared_data import shared_data_dir
from tests.waiting import http_ok, wait_until

REPO = Path(__file__).resolve().parents[3]
TOKENIZER_DIR = shared_data_dir() / "qwen3-tokenizer"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "_recall",
            "description": "Fetch a stored observation by its id.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
]


def render(body: dict[str, Any]) -> str:
    """The mock's template: one line per message, then the generation prompt."""
    lines = [f"<{m['role']}>{m.get('content') or ''}" for m in body["messages"]]
    if body.get("tools"):
        lines.insert(0, "<tools>" + json.dumps(body["tools"]))
    return "\n".join(lines) + "\n<assistant>"


def llama_mock(
    n_ctx: int = 4096, chat: Callable[[dict[str, Any], int], httpx.Response] | None = None
) -> tuple[Callable[[httpx.Request], httpx.Response], list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            card = {"id": "tiny.gguf", "aliases": ["tiny"], "owned_by": "llamacpp",
                    "meta": {"n_ctx": n_ctx, "n_ctx_train": 32768}}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        body = json.loads(request.content)
        seen.append({"path": path, **body})
        if path == "/apply-template":
            return httpx.Response(200, json={"prompt": render(body)})
        if path == "/tokenize":
            content = body.get("content")
            return httpx.Response(200, json={"tokens": list(range(len(content.split()))) if content else []})
        prompt_tokens = len(render(body).split())
        if chat is not None:
            return chat(body, prompt_tokens)
        message = {"role": "assistant", "content": "garbage"}
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "length"}],
                                         "usage": usage})

    return handler, seen


def run(handler: Callable[[httpx.Request], httpx.Response], job: Callable[[OpenAIBackend], Any],
        **options: Any) -> Any:
    settings: dict[str, Any] = {"context_limit": 4096, "max_tokens": 256, "api_key": "",
                                "backoff_base_s": 0.01}
    settings.update(options)

    async def go() -> Any:
        async with openai_backend("http://llama.invalid:8080/v1", "tiny", transport=httpx.MockTransport(handler),
                                  **settings) as backend:
            return await job(backend)

    return asyncio.run(go())


def ask(text: str = "go on") -> ChatRequest:
    return ChatRequest((Message("system", "You are an agent."), Message("user", text)))


def test_llama_server_is_detected_and_counted_with_its_own_template_and_tokenizer() -> None:
    handler, seen = llama_mock()

    async def job(backend: OpenAIBackend) -> Any:
        infos = await backend.check_server()
        reply = await backend.complete(ChatRequest(ask("one two three").messages, tools=parse_tools(TOOLS)))
        return infos, reply, backend.calibration()

    infos, reply, calibration = run(handler, job, tools=TOOLS)
    assert (infos[0].kind, infos[0].window, infos[0].window_field) == ("llama.cpp", 4096, "meta.n_ctx")
    assert "tiny" in infos[0].model_ids  # an alias is a served name
    assert reply.counted_prompt_tokens == reply.prompt_tokens > 0
    assert calibration == {**calibration, "source": "server", "max_abs_diff": 0}
    tokenize = [entry for entry in seen if entry["path"] == "/tokenize"]
    assert tokenize and all("messages" not in entry and entry["add_special"] is True for entry in tokenize)
    template = [entry for entry in seen if entry["path"] == "/apply-template"][-1]
    assert template["tools"] == TOOLS and template["chat_template_kwargs"] == {"enable_thinking": False}


def test_a_slot_window_below_the_context_limit_names_llama_servers_flags() -> None:
    handler, _ = llama_mock(n_ctx=2048)
    with pytest.raises(BackendRequestError, match=r"window is 2048 tokens \(meta.n_ctx\).*kv-unified-per-slot"):
        run(handler, lambda backend: backend.check_server())


def test_exceed_context_size_error_is_an_overflow_when_the_window_cannot_hold_it() -> None:
    def refuse(body: dict[str, Any], prompt_tokens: int) -> httpx.Response:
        error = {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt_tokens, "n_ctx": 300,
                 "message": f"request ({prompt_tokens} tokens) exceeds the available context size (300 tokens), "
                            "try increasing it"}
        return httpx.Response(400, json={"error": error})

    handler, _ = llama_mock(n_ctx=300, chat=refuse)  # check_server would have refused this window
    with pytest.raises(ContextOverflow, match="exceeds the available context size"):
        run(handler, lambda backend: backend.complete(ask("word " * 400)))
    # the same refusal of a prompt the window holds is the server's fault, not an overflow
    with pytest.raises(BackendRequestError, match=r"refused as too long a prompt of 6 tokens \(counted by its own counting endpoint\)"):
        run(handler, lambda backend: backend.complete(ask("short")), context_limit=4096)


def test_a_shared_kv_pool_overflow_is_retried_then_explained() -> None:
    def full(body: dict[str, Any], prompt_tokens: int) -> httpx.Response:
        error = {"code": 500, "type": "server_error", "message": "Context size has been exceeded."}
        return httpx.Response(500, json={"error": error})

    handler, seen = llama_mock(chat=full)
    with pytest.raises(BackendUnavailable) as caught:
        run(handler, lambda backend: backend.complete(ask()), max_retries=2)
    assert "gave up after 3 attempts" in str(caught.value) and SHARED_KV_FIX in str(caught.value)
    assert sum(entry["path"] == "/v1/chat/completions" for entry in seen) == 3


def test_tools_without_jinja_stop_at_once_with_the_fix() -> None:
    def no_jinja(body: dict[str, Any], prompt_tokens: int) -> httpx.Response:
        error = {"code": 500, "type": "server_error", "message": "tools param requires --jinja flag"}
        return httpx.Response(500, json={"error": error})

    handler, seen = llama_mock(chat=no_jinja)
    with pytest.raises(BackendRequestError, match="restart llama-server with --jinja"):
        run(handler, lambda backend: backend.check_server(), tools=TOOLS)
    assert sum(entry["path"] == "/v1/chat/completions" for entry in seen) == 1  # never retried


def prefilling(body: dict[str, Any]) -> httpx.Response | None:
    """llama-server's default --prefill-assistant (server-common.cpp): two assistant messages at the end are
    refused (one is continued, not answered); None when the conversation passes."""
    roles = [message["role"] for message in body["messages"]]
    if roles[-2:] == ["assistant", "assistant"]:
        error = {"code": 400, "type": "invalid_request_error",
                 "message": "Cannot have 2 or more assistant messages at the end of the list."}
        return httpx.Response(400, json={"error": error})
    return None


def prefill_mock(prefill: bool) -> tuple[Callable[[httpx.Request], httpx.Response], list[dict[str, Any]]]:
    handler, seen = llama_mock()

    def answer(request: httpx.Request) -> httpx.Response:
        if prefill and request.url.path in ("/apply-template", "/v1/chat/completions"):
            body = json.loads(request.content)
            refusal = prefilling(body)
            if refusal is not None:
                seen.append({"path": request.url.path, **body})
                return refusal
        return handler(request)

    return answer, seen


def test_tool_mode_against_a_prefilling_llama_server_stops_before_the_first_task_with_the_fix() -> None:
    handler, seen = prefill_mock(prefill=True)
    with pytest.raises(BackendRequestError) as caught:
        run(handler, lambda backend: backend.check_server(), tools=TOOLS)
    assert "Cannot have 2 or more assistant messages" in str(caught.value) and PREFILL_FIX in str(caught.value)
    assert sum(entry["path"] == "/apply-template" for entry in seen) == 1  # never retried
    # text mode never ends a prompt with the assistant's message: no probe, the same server passes
    handler, seen = prefill_mock(prefill=True)
    run(handler, lambda backend: backend.check_server())
    assert not any(entry["path"] == "/apply-template" and entry["messages"][-1]["role"] == "assistant"
                   for entry in seen)
    # started with --no-prefill-assistant, tool mode passes
    handler, _ = prefill_mock(prefill=False)
    infos = run(handler, lambda backend: backend.check_server(), tools=TOOLS)
    assert infos[0].kind == "llama.cpp"


def test_a_prefill_refusal_during_a_run_is_a_configuration_fault_with_the_fix() -> None:
    handler, seen = prefill_mock(prefill=True)
    transcript = ChatRequest((*ask().messages, Message("assistant", "thinking"), Message("assistant", "more")),
                             tools=parse_tools(TOOLS))
    with pytest.raises(BackendRequestError, match="--no-prefill-assistant") as caught:
        run(handler, lambda backend: backend.complete(transcript), tools=TOOLS)
    assert not isinstance(caught.value, ContextOverflow)
    assert sum(entry["path"] == "/apply-template" for entry in seen) == 1


# -- a real llama-server ---------------------------------------------------------------------------


def _llama_server() -> str | None:
    binary = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    return binary if binary and os.access(binary, os.X_OK) else None


def _gguf(tmp: Path) -> tuple[Path | None, str]:
    """A GGUF to serve, and why there is none when there is none."""
    given = os.environ.get("ARC_TEST_GGUF")
    if given:
        return (Path(given), "") if Path(given).is_file() else (None, f"ARC_TEST_GGUF={given} is not a file")
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        return None, f"no ARC_TEST_GGUF, and {TOKENIZER_DIR} (to make a tiny GGUF; ARC_SHARED_DATA moves it) is absent"
    llama_cpp = os.environ.get("LLAMA_CPP_DIR")
    if not llama_cpp and importlib.util.find_spec("gguf") is None:
        return None, "no ARC_TEST_GGUF, and neither LLAMA_CPP_DIR (for its gguf-py) nor the gguf package to make one"
    spec = importlib.util.spec_from_file_location("make_tiny_gguf", REPO / "benchmarks" / "make_tiny_gguf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp / "tiny.gguf"
    arguments = [str(out), "--tokenizer-dir", str(TOKENIZER_DIR)]
    if llama_cpp:
        arguments += ["--llama-cpp", llama_cpp]
    module.main(arguments)
    return out, ""


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = _llama_server()
    if binary is None:
        pytest.skip("no llama-server: set LLAMA_SERVER to the binary or put llama-server on PATH")
    model, why = _gguf(tmp_path_factory.mktemp("gguf"))
    if model is None:
        pytest.skip(why)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    log = tmp_path_factory.mktemp("log") / "llama-server.log"
    with open(log, "wb") as sink:
        server = subprocess.Popen(
            [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "4096", "-np", "1",
             "-t", "1", "--jinja", "--no-prefill-assistant", "--alias", "tiny"],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    try:
        try:
            wait_until(http_ok(f"http://127.0.0.1:{port}/health"), server, "llama-server", base_s=60, poll_s=0.2)
        except AssertionError as failure:
            raise AssertionError(f"{failure}: {log.read_text(errors='replace')[-2000:]}") from None
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(30)


def test_a_real_llama_server_counts_exactly_in_text_and_tool_mode(llama_server: str) -> None:
    call = ToolCall("call_1", "_recall", '{"id": "§0001-ab12"}')
    history = (
        Message("system", "You are an agent. Answer with Thought: and Action: lines."),
        Message("user", "Find the needle. Ünïcode, 数字 12345, and tabs\tto count."),
        Message("assistant", "look it up.", (call,)),
        Message("tool", "[§0001-ab12 chunk 1/1] NEEDLE=XYZ", tool_call_id="call_1"),
        Message("user", "go on"),
    )

    async def job(backend: OpenAIBackend) -> Any:
        infos = await backend.check_server()
        offered = parse_tools(backend.tools) if backend.tools else ()
        replies = [await backend.complete(ChatRequest(history[:n], max_tokens=8, tools=offered)) for n in (2, 5)]
        return infos, replies, backend.calibration()

    for tools in (None, TOOLS):
        async def go() -> Any:
            async with openai_backend(llama_server, "tiny", context_limit=4096, max_tokens=64, api_key="",
                                      tools=tools) as backend:
                return await job(backend)

        infos, replies, calibration = asyncio.run(go())
        assert infos[0].kind == "llama.cpp" and infos[0].window == 4096
        for reply in replies:
            assert reply.counted_prompt_tokens == reply.prompt_tokens > 0
            assert isinstance(reply.content, str)  # garbage, but text
        assert calibration["source"] == "server" and calibration["max_abs_diff"] == 0
