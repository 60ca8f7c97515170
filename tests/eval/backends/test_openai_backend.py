"""OpenAIBackend end to end against `serve-scripted` over real HTTP on localhost."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Sequence

import httpx
import pytest

from arc_ref.config import parse_tools
from arc_ref.errors import ConfigError
from tests.eval.helpers import openai_backend
from arc_ref.message import ToolCall
from arc_eval.backends.openai_backend import OpenAIBackend
from arc_eval.backends.transport import api_urls
from arc_eval.types import BackendRequestError
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.scripted_server import build_app, serve_in_thread
from arc_eval.types import BackendUnavailable, ChatRequest, ContextOverflow, Message

SEEN: list[list[Message]] = []


def echo_policy(messages: Sequence[Message]) -> str:
    """A trivial policy: the action names how many messages it saw."""
    SEEN.append(list(messages))
    last = messages[-1].content
    if last.startswith("long reply"):
        return "Thought: " + "word " * 500 + "\nAction: ls"
    if last.startswith("recall please"):
        return "Thought: the citation may hold it.\nAction: _recall §0001-ab12"
    return f"Thought: I saw {len(messages)} messages.\nAction: cat a.txt"


def backend(url: str | list[str], **options: Any) -> OpenAIBackend:
    settings: dict[str, Any] = {"context_limit": 2048, "max_tokens": 256, "backoff_base_s": 0.01}
    settings.update(options)
    return openai_backend(url, "scripted", **settings)


def ask(text: str, task_id: str = "nih-s42-0000") -> ChatRequest:
    return ChatRequest(
        (Message("system", "You are an agent."), Message("user", text)), tags={"task_id": task_id}
    )


def test_normal_completion_and_exact_token_calibration() -> None:
    app = build_app(echo_policy, max_model_len=2048)
    with serve_in_thread(app) as url:

        async def run() -> None:
            async with backend(url) as client:
                reply = await client.complete(ask("go"))
                assert reply.content == "Thought: I saw 2 messages.\nAction: cat a.txt"
                assert reply.finish_reason == "stop"
                counted = await client.count_prompt_tokens(ask("go").messages)
                assert reply.prompt_tokens == counted > 0
                assert reply.completion_tokens == app.tokenizer.count(reply.content)
                assert reply.latency_s > 0
                calibration = client.calibration()
                assert calibration["source"] == "server"
                assert calibration["calls"] == 1 and calibration["max_abs_diff"] == 0

        asyncio.run(run())


def test_overflow_from_the_harness_check_and_from_the_server() -> None:
    app = build_app(echo_policy, max_model_len=600)
    with serve_in_thread(app) as url:

        async def run() -> None:
            long_text = "lorem ipsum " * 200  # ~400 tokens
            # The harness' own check: prompt > L_ctx - G_max, before any chat request is sent.
            async with backend(url, context_limit=600, max_tokens=256) as client:
                with pytest.raises(ContextOverflow) as caught:
                    await client.complete(ask(long_text))
                assert caught.value.limit == 600 - 256
                assert caught.value.prompt_tokens is not None and caught.value.prompt_tokens > 344
            assert app.stats.chat_requests == 0
            # The server's 400 (a client that believes the window is larger than it is).
            async with backend(
                url, context_limit=4096, max_tokens=256, count_with="local"
            ) as client:
                with pytest.raises(ContextOverflow, match="maximum context length is 600"):
                    await client.complete(ask(long_text * 2))
            assert app.stats.overflows == 1

        asyncio.run(run())


def test_recent_vllm_clamps_max_tokens_and_reports_length() -> None:
    app = build_app(echo_policy, max_model_len=300)
    with serve_in_thread(app) as url:

        async def run() -> None:
            # context_limit above the server's: the harness lets it through, the server clamps.
            async with backend(url, context_limit=4096, max_tokens=1024) as client:
                reply = await client.complete(ask("long reply"))
                prompt = reply.prompt_tokens
                assert reply.finish_reason == "length"
                assert reply.completion_tokens == 300 - prompt
            assert app.stats.clamped == 1

        asyncio.run(run())


def test_server_errors_are_retried_then_unavailable() -> None:
    app = build_app(echo_policy, max_model_len=2048, faults=[503, "drop", 500])
    with serve_in_thread(app) as url:

        async def run() -> None:
            async with backend(url, max_retries=3) as client:
                reply = await client.complete(ask("go"))
                assert reply.content.endswith("Action: cat a.txt")
                assert client.retries == 3
            assert app.stats.faults_injected == 3 and app.stats.completed == 1
            app.inject_faults([503] * 5)
            async with backend(url, max_retries=2) as client:
                with pytest.raises(BackendUnavailable, match="gave up after 3 attempts.*HTTP 503"):
                    await client.complete(ask("go"))

        asyncio.run(run())


def test_dead_server_is_unavailable_not_a_wrong_answer() -> None:
    async def run() -> None:
        async with backend("http://127.0.0.1:9/v1", max_retries=1) as client:
            with pytest.raises(BackendUnavailable, match="gave up after 2 attempts"):
                await client.complete(ask("go"))

    asyncio.run(run())


def test_wrong_model_name_is_a_request_error() -> None:
    app = build_app(echo_policy, max_model_len=2048)
    with serve_in_thread(app) as url:

        async def run() -> None:
            client = openai_backend(url, "Qwen/Qwen3-8B", context_limit=2048, max_tokens=256)
            with pytest.raises(BackendRequestError, match="does not exist"):
                await client.complete(ask("go"))
            with pytest.raises(
                BackendRequestError, match="serves scripted, not 'Qwen/Qwen3-8B'. Fix: pass --model scripted"
            ):
                await client.check_server()
            await client.aclose()
            async with backend(url) as good:
                info = await good.check_server()
                assert info[0].window == 2048 and info[0].kind == "vllm"
                assert info[0].model_ids == ("scripted",)

        asyncio.run(run())


@pytest.mark.parametrize("concurrency", [1, 4, 8])
def test_n_requests_are_in_flight_at_once(concurrency: int) -> None:
    app = build_app(echo_policy, max_model_len=2048, concurrency=concurrency, latency_ms=150)
    with serve_in_thread(app) as url:

        async def run() -> float:
            async with backend(url) as client:
                requests = [ask("go", task_id=f"t{i}") for i in range(8)]
                started = time.perf_counter()
                replies = await asyncio.gather(*(client.complete(r) for r in requests))
                assert len(replies) == 8
                return time.perf_counter() - started

        elapsed = asyncio.run(run())
    assert app.stats.max_in_flight == concurrency
    waves = -(-8 // concurrency)
    assert elapsed >= waves * 0.15 * 0.9


def test_several_replicas_keep_one_trajectory_on_one_replica() -> None:
    apps = [build_app(echo_policy, max_model_len=2048) for _ in range(3)]
    with (
        serve_in_thread(apps[0]) as a,
        serve_in_thread(apps[1]) as b,
        serve_in_thread(apps[2]) as c,
    ):

        async def run() -> None:
            async with backend([a, b, c]) as client:
                for _ in range(3):
                    await client.complete(ask("go", task_id="nih-s42-0007"))
                counts = [app.stats.chat_requests for app in apps]
                assert sorted(counts) == [0, 0, 3]
                await asyncio.gather(
                    *(client.complete(ask("go", task_id=f"nih-s42-{i:04d}")) for i in range(30))
                )
                assert all(app.stats.chat_requests > 0 for app in apps)

        asyncio.run(run())


def test_a_retry_moves_to_the_next_replica() -> None:
    broken = build_app(echo_policy, max_model_len=2048, faults=[503] * 10)
    healthy = build_app(echo_policy, max_model_len=2048)
    with serve_in_thread(broken) as a, serve_in_thread(healthy) as b:

        async def run() -> None:
            async with backend([a, b], max_retries=2, count_with="local") as client:
                for i in range(6):
                    reply = await client.complete(ask("go", task_id=f"t{i}"))
                    assert reply.finish_reason == "stop"

        asyncio.run(run())
    assert healthy.stats.completed == 6


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "_recall",
            "description": "Fetch a stored observation by its id.",
            "parameters": {
                "type": "object",
                "properties": {"id": {"type": "string"}},
                "required": ["id"],
            },
        },
    }
]


def test_tool_calls_travel_verbatim_both_ways() -> None:
    """A returned call comes back as a structured ToolCall; the method's messages (the call, the result answering
    its id) are sent exactly as built, with the request's own tools, and counted exactly as sent."""
    app = build_app(echo_policy, max_model_len=4096)
    tools = parse_tools(TOOLS)
    sent: list[dict[str, Any]] = []
    with serve_in_thread(app) as url:

        async def run() -> None:
            async with backend(url, context_limit=4096) as client:
                reply = await client.complete(ChatRequest(ask("recall please").messages, tools=tools))
                assert reply.content == "the citation may hold it." and reply.finish_reason == "stop"
                assert reply.tool_calls == (ToolCall("call_0", "_recall", '{"id": "§0001-ab12"}'),)
                history = ask("recall please").messages + (
                    Message("assistant", reply.content, reply.tool_calls),
                    Message("tool", "[§0001-ab12 chunk 1/1] NEEDLE=XYZ", tool_call_id="call_0"),
                    Message("user", "go on"),
                )
                original = client.transport.send

                async def spy(endpoint: str, payload: Any, *args: Any, **kwargs: Any) -> Any:
                    if endpoint == "chat":
                        sent.append(payload)
                    return await original(endpoint, payload, *args, **kwargs)

                client.transport.send = spy  # type: ignore[method-assign]
                plain = await client.complete(ChatRequest(history))  # no tools: none offered, none parsed
                assert plain.tool_calls == () and plain.content.endswith("Action: cat a.txt")
                assert client.calibration()["max_abs_diff"] == 0

        asyncio.run(run())
    assert sent[0]["messages"] == [message.as_json() for message in history_of(sent[0])]
    assert sent[0]["messages"][2]["tool_calls"][0] == {
        "id": "call_0", "type": "function", "function": {"name": "_recall", "arguments": '{"id": "§0001-ab12"}'}}
    assert sent[0]["messages"][3] == {"role": "tool", "content": "[§0001-ab12 chunk 1/1] NEEDLE=XYZ",
                                      "tool_call_id": "call_0"}
    assert "tools" not in sent[0] and "parallel_tool_calls" not in sent[0]
    # the policy read the call as a text action and the result in its own message
    last = SEEN[-1]
    assert last[2] == Message("assistant", "the citation may hold it.\nAction: _recall §0001-ab12")
    assert last[3] == Message("tool", "[§0001-ab12 chunk 1/1] NEEDLE=XYZ")


def history_of(payload: dict[str, Any]) -> list[Message]:
    return [Message.from_json(message) for message in payload["messages"]]


def test_a_request_with_tools_offers_them_one_call_at_a_time() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "scripted", "max_model_len": 2048}]})
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 40, "max_model_len": 2048, "tokens": list(range(40))})
        calls = [{"id": "c7", "type": "function", "function": {"name": "_recall", "arguments": {"id": "§1"}}},
                 {"type": "function", "function": {"name": "_recall", "arguments": '{"id": "§2"}'}}]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 40, "completion_tokens": 9}})

    async def run() -> Any:
        async with backend("http://replica.invalid:8000", transport=httpx.MockTransport(handler)) as client:
            return await client.complete(ChatRequest(ask("go").messages, tools=parse_tools(TOOLS)))

    reply = asyncio.run(run())
    assert reply.content == "" and reply.finish_reason == "stop"
    # every call as returned (an object of arguments written as JSON text, a missing id numbered); the loop keeps one
    assert reply.tool_calls == (ToolCall("c7", "_recall", '{"id": "§1"}'), ToolCall("call_1", "_recall", '{"id": "§2"}'))
    chat = [entry for entry in seen if entry["path"] == "/v1/chat/completions"][0]
    assert chat["tools"] == TOOLS and chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is False
    tokenize = [entry for entry in seen if entry["path"] == "/tokenize"][0]
    assert tokenize["tools"] == TOOLS and tokenize["messages"] == chat["messages"]


def test_request_payload_switches_thinking_off_and_caps_tokens() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":  # a vLLM card: counting starts with POST /tokenize
            card = {"id": "scripted", "owned_by": "vllm", "max_model_len": 2048}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        body = json.loads(request.content)
        seen.append({"path": request.url.path, **body})
        if request.url.path == "/tokenize":
            return httpx.Response(404, json={"detail": "Not Found"})
        usage = {"prompt_tokens": 77, "completion_tokens": 3}
        message = {"role": "assistant", "content": "<think>\n\n</think>\n\nAction: ls"}
        return httpx.Response(
            200, json={"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}
        )

    async def run() -> None:
        client = backend(
            "http://replica.invalid:8000",
            max_tokens=256,
            temperature=0.3,
            transport=httpx.MockTransport(handler),
        )
        reply = await client.complete(ChatRequest(ask("go").messages, max_tokens=100, seed=7))
        assert reply.content == "Action: ls" and reply.prompt_tokens == 77
        assert client.count_source == "local"
        calibration = client.calibration()
        assert calibration["calls"] == 1
        await client.aclose()

    asyncio.run(run())
    chat = [entry for entry in seen if entry["path"] == "/v1/chat/completions"][0]
    assert chat["chat_template_kwargs"] == {"enable_thinking": False}
    assert chat["max_tokens"] == 100 and chat["temperature"] == 0.3 and chat["seed"] == 7
    assert chat["model"] == "scripted" and "tools" not in chat


def test_constructor_and_url_errors() -> None:
    assert api_urls("http://h:8000/v1/")["tokenize"] == "http://h:8000/tokenize"
    assert api_urls("http://h:8000")["chat"] == "http://h:8000/v1/chat/completions"
    with pytest.raises(ValueError, match="http://"):
        api_urls("localhost:8000")
    with pytest.raises(ValueError, match="max_tokens < context_limit"):
        openai_backend("http://h/v1", "m", context_limit=100, max_tokens=100)
    with pytest.raises(ValueError, match="at least one base URL"):
        openai_backend([], "m", context_limit=100, max_tokens=10)
    with pytest.raises(ConfigError, match="--count-with must be one of auto, server, local"):
        openai_backend("http://h/v1", "m", context_limit=100, max_tokens=10, count_with="guess")


# vLLM 0.32's body for max_tokens > max_model_len (renderers/params.py, TokenizeParams.__post_init__), as its
# server answers it (benchmarks/vllm_cpu/run.sh checks the same words against the real server)
MAX_TOKENS_REFUSAL = (
    "max_tokens=4096 cannot be greater than max_model_len=2048. Please request fewer output tokens. "
    "(parameter=max_tokens, value=4096)"
)


def test_a_completion_cap_above_the_window_stops_the_run_with_the_fix_and_is_no_overflow() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":  # a card without max_model_len: the preflight cannot see the window
            return httpx.Response(200, json={"object": "list", "data": [{"id": "scripted", "owned_by": "vllm"}]})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 12, "tokens": list(range(12))})
        error = {"message": MAX_TOKENS_REFUSAL, "type": "BadRequestError", "param": "max_tokens", "code": 400}
        return httpx.Response(400, json={"error": error})

    async def run() -> None:
        async with backend("http://replica.invalid:8000", context_limit=8192, max_tokens=4096,
                           transport=httpx.MockTransport(handler)) as client:
            await client.complete(ask("go"))

    with pytest.raises(BackendRequestError) as refused:
        asyncio.run(run())
    text = str(refused.value)
    assert "HTTP 400: max_tokens=4096 cannot be greater than max_model_len=2048" in text
    assert "Fix: pass --max-tokens below the server's window" in text
    assert not is_context_overflow(400, MAX_TOKENS_REFUSAL)  # no prompt fits such a call: compaction cannot help
