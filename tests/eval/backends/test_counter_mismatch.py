"""A run whose counter (--tokenizer) counts prompts otherwise than the served model says so once on stderr (review
h60: with the README's first vLLM command, no --tokenizer, the methods decided with o200k_base while vLLM served
Qwen3, and with --count-with local every call's count differed from usage.prompt_tokens; nothing said either)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from arc_eval.types import ChatRequest, Message
from tests.eval.helpers import openai_backend

MESSAGES = (Message("system", "You are an agent."), Message("user", "Find the needle in notes.txt."))


def run_calls(capsys: pytest.CaptureFixture[str], *, server_offset: int, tokenize: bool, calls: int = 2) -> str:
    """`calls` completions against a mock vLLM whose counts are the run's counter's plus `server_offset`; its
    /tokenize answers (server counting) or is missing (local counting). Returns what the run said on stderr."""
    holder: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            card = {"id": "served", "owned_by": "vllm", "max_model_len": 4096}
            return httpx.Response(200, json={"object": "list", "data": [card]})
        own = holder["client"].counting.local_count(MESSAGES, ())
        if request.url.path == "/tokenize":
            if not tokenize:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json={"count": own + server_offset, "max_model_len": 4096})
        usage = {"prompt_tokens": own + server_offset, "completion_tokens": 2}
        message = {"role": "assistant", "content": "Action: ls"}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage})

    async def run() -> None:
        client = openai_backend("http://replica.invalid:8000", "served", context_limit=4096, max_tokens=256,
                                transport=httpx.MockTransport(handler))
        holder["client"] = client
        for _ in range(calls):
            await client.complete(ChatRequest(MESSAGES))
        await client.aclose()

    capsys.readouterr()
    asyncio.run(run())
    return capsys.readouterr().err


def test_a_counter_that_differs_from_the_servers_count_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_calls(capsys, server_offset=7, tokenize=True)
    assert err.count("warning: the methods count prompts with --tokenizer o200k_base") == 1
    assert "where the server counts" in err and "Fix: --tokenizer DIR" in err


def test_a_local_count_that_differs_from_usage_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_calls(capsys, server_offset=3, tokenize=False)
    assert err.count("warning: the server charged") == 1
    assert "counted locally as" in err and "Fix: --tokenizer DIR" in err


@pytest.mark.parametrize("tokenize", [True, False])
def test_a_counter_that_agrees_with_the_server_says_nothing(capsys: pytest.CaptureFixture[str],
                                                             tokenize: bool) -> None:
    err = run_calls(capsys, server_offset=0, tokenize=tokenize)
    assert "warning" not in err, json.dumps(err)
