"""The server's prefix-cache hits per call (usage.prompt_tokens_details.cached_tokens) reach calls.jsonl as
`cached_prompt_tokens` (review h60: vLLM with --enable-prompt-tokens-details reported them on every call and the
harness dropped them, so no record said what the server's prefix cache served; ANALYSIS.md said the records could
not tell). Written only when the server says: other servers' and the scripted backend's lines are unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import httpx
import pytest

from arc_eval.backends.replies import chat_reply, parse_completion
from arc_eval.counting import make_counter
from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.schema import CallRecord, from_json
from arc_eval.types import BackendReplyError, ChatReply, ChatRequest, Message

from .helpers import FakeBackend, FakeSandbox, ScriptedReplies, exact_scorer, openai_backend, tiny_task

SETTINGS = MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter("bytes"))


def body(usage: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": "Action: ls"}, "finish_reason": "stop"}],
            "usage": usage}


def test_a_completion_reads_the_cached_tokens_the_server_reports() -> None:
    completion = parse_completion(body({"prompt_tokens": 900, "completion_tokens": 3,
                                        "prompt_tokens_details": {"cached_tokens": 768}}), "u")
    assert completion.cached_tokens == 768
    assert chat_reply(completion, 900, 0.1, len).cached_prompt_tokens == 768
    for usage in ({"prompt_tokens": 9, "completion_tokens": 3}, {"prompt_tokens": 9, "completion_tokens": 3,
                                                               "prompt_tokens_details": None}):
        assert chat_reply(parse_completion(body(usage), "u"), 9, 0.1, len).cached_prompt_tokens is None


@pytest.mark.parametrize(("details", "names"), [
    ("768", "prompt_tokens_details must be an object"),
    ({"cached_tokens": "768"}, "cached_tokens must be a non-negative integer"),
    ({"cached_tokens": -1}, "cached_tokens must be a non-negative integer"),
    ({"cached_tokens": 901}, "cached_tokens 901 exceeds usage.prompt_tokens 900"),
])  # fmt: skip
def test_malformed_cached_tokens_name_their_fault(details: Any, names: str) -> None:
    with pytest.raises(BackendReplyError, match=names):
        parse_completion(body({"prompt_tokens": 900, "completion_tokens": 3, "prompt_tokens_details": details}), "u")


def test_the_openai_backend_passes_them_on() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "owned_by": "vllm",
                                                                          "max_model_len": 4096}]})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 40, "max_model_len": 4096})
        return httpx.Response(200, json=body({"prompt_tokens": 40, "completion_tokens": 3,
                                              "prompt_tokens_details": {"cached_tokens": 32}}))

    async def run() -> ChatReply:
        async with openai_backend("http://replica.invalid:8000", "m", context_limit=4096, max_tokens=256,
                                  transport=httpx.MockTransport(handler)) as client:
            return await client.complete(ChatRequest((Message("user", "go"),)))

    assert asyncio.run(run()).cached_prompt_tokens == 32


def calls_of(cached: int | None) -> list[dict[str, Any]]:
    class Caching(FakeBackend):
        async def complete(self, request: ChatRequest) -> ChatReply:
            return attrs.evolve(await super().complete(request), cached_prompt_tokens=cached)

    backend = Caching(ScriptedReplies(["Thought: read\nAction: cat a.txt", "Action: submit NEEDLE=OK"]))
    calls, _ = asyncio.run(run_task(tiny_task(), make_method("sliding_window", SETTINGS), backend, settings=SETTINGS,
                                    max_steps=4, seed=1, sandbox=FakeSandbox({"a.txt": "alpha"}), scorer=exact_scorer))
    return [call.to_json() for call in calls]


def test_the_call_records_hold_them_only_when_the_server_said() -> None:
    said = calls_of(1)
    assert [call["cached_prompt_tokens"] for call in said] == [1, 1]
    assert [call["cached_prompt_tokens"] for call in calls_of(0)] == [0, 0]  # a reported 0 is kept
    silent = calls_of(None)
    assert all("cached_prompt_tokens" not in call for call in silent)
    assert [{k: v for k, v in call.items() if k != "cached_prompt_tokens"} for call in said] == silent
    assert from_json(CallRecord, said[0], "x").cached_prompt_tokens == 1
    assert from_json(CallRecord, silent[0], "x").cached_prompt_tokens is None
