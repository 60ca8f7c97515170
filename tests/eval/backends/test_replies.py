"""Issue 9.3, backend half: a reply that is not what the API promises is a `BackendReplyError`
naming the field, never a KeyError or TypeError (each body below crashed or misread before)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import httpx
import pytest

from tests.eval.helpers import openai_backend
from arc_eval.backends.replies import parse_completion
from arc_eval.backends.servers import parse_models, tokenize_count
from arc_eval.types import BackendReplyError, ChatRequest, Message

GOOD_CHOICE = {"message": {"role": "assistant", "content": "Action: ls"}, "finish_reason": "stop"}
VLLM_CARD = {"object": "list", "data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]}


def server(
    chat: Any = None, tokenize: Any = None, models: Any = VLLM_CARD, raw_chat: bytes | None = None
) -> Callable[[httpx.Request], httpx.Response]:
    """A vLLM-shaped mock answering the given bodies."""

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json=models)
        if path == "/tokenize":
            return httpx.Response(200, json=tokenize if tokenize is not None else {"count": 12})
        if raw_chat is not None:
            return httpx.Response(200, content=raw_chat)
        return httpx.Response(200, json=chat)

    return handler


def complete(handler: Callable[[httpx.Request], httpx.Response]) -> Any:
    async def run() -> Any:
        backend = openai_backend(
            "http://mock.invalid/v1", "m", context_limit=4096, max_tokens=256, api_key="",
            transport=httpx.MockTransport(handler),
        )
        try:
            return await backend.complete(ChatRequest((Message("user", "go"),)))
        finally:
            await backend.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({}, "`choices` must be a non-empty list"),
        ({"choices": []}, "`choices` must be a non-empty list"),
        ({"choices": "no"}, "`choices` must be a non-empty list"),
        ({"choices": ["text"]}, "choices[0] must be an object"),
        ({"choices": [{"message": "hi"}]}, "choices[0].message must be an object"),
        ({"choices": [{"message": {"content": 7}}]}, "message.content must be text or null"),
        ({"choices": [{**GOOD_CHOICE, "finish_reason": 3}]}, "finish_reason must be text or null"),
        ({"choices": [GOOD_CHOICE], "usage": "12 tokens"}, "`usage` must be an object"),
        ({"choices": [GOOD_CHOICE], "usage": {"prompt_tokens": "12"}}, "usage.prompt_tokens must be"),
        ({"choices": [GOOD_CHOICE], "usage": {"prompt_tokens": 1.5}}, "usage.prompt_tokens must be"),
        ({"choices": [GOOD_CHOICE], "usage": {"completion_tokens": -1}}, "usage.completion_tokens"),
        ({"choices": [GOOD_CHOICE], "usage": {"prompt_tokens": True}}, "usage.prompt_tokens must be"),
        ({"choices": [{"message": {"tool_calls": "call"}}]}, "message.tool_calls must be a list"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "needs a function with a string name"),
        (
            {"choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": 3}}]}}]},
            "arguments must be a JSON string",
        ),
        ([1, 2], "a chat completion must be a JSON object"),
    ],
)
def test_a_malformed_completion_names_its_fault(body: Any, names: str) -> None:
    with pytest.raises(BackendReplyError) as caught:
        complete(server(chat=body))
    assert names in str(caught.value)
    assert "http://mock.invalid/v1/chat/completions" in str(caught.value)


def test_a_completion_that_is_not_json_is_a_reply_error() -> None:
    with pytest.raises(BackendReplyError, match="the answer is not JSON: '<html>oops"):
        complete(server(raw_chat=b"<html>oops</html>"))


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"tokens": []}, "has no `count` (it looks like llama.cpp's /tokenize"),
        ({"count": "12"}, "`count` must be a non-negative integer"),
        ({"count": None, "max_model_len": 4096}, "`count` must be a non-negative integer"),
        ("12", "expected a JSON object"),
    ],
)
def test_a_malformed_tokenize_answer_names_its_fault(body: Any, names: str) -> None:
    with pytest.raises(BackendReplyError, match="/tokenize: ") as caught:
        complete(server(chat={"choices": [GOOD_CHOICE]}, tokenize=body))
    assert names in str(caught.value)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"models": []}, "expected an OpenAI model list"),
        ({"data": [{"name": "m"}]}, "data[0] has no string id"),
        ({"data": [{"id": "m", "max_model_len": "4k"}]}, "data[0].max_model_len must be a positive integer"),
        ({"data": [{"id": "m", "owned_by": "llamacpp", "meta": {"n_ctx": 0}}]}, "meta.n_ctx must be"),
    ],
)
def test_a_malformed_model_list_names_its_fault(body: Any, names: str) -> None:
    with pytest.raises(BackendReplyError) as caught:
        parse_models(body, "http://h/v1/models")
    assert names in str(caught.value)


def test_well_formed_replies_read_every_optional_field() -> None:
    tool_call = {"id": "c", "type": "function", "function": {"name": "_recall", "arguments": '{"id": "§1"}'}}
    body = {
        "choices": [{"message": {"content": None, "tool_calls": [tool_call]}, "finish_reason": None}],
    }
    completion = parse_completion(body, "here")
    assert completion.content == "" and completion.finish_reason is None
    assert completion.tool_calls[0].name == "_recall" and completion.prompt_tokens is None
    assert tokenize_count({"count": 0, "tokens": []}, "here") == 0
    # no usage: the harness's count stands in, and says so in counted_prompt_tokens too
    reply = complete(server(chat={"choices": [GOOD_CHOICE]}, tokenize={"count": 12}))
    assert reply.prompt_tokens == 12 and reply.counted_prompt_tokens == 12
    reply = complete(server(chat={"choices": [GOOD_CHOICE], "usage": {"prompt_tokens": 13}}))
    assert (reply.prompt_tokens, reply.counted_prompt_tokens) == (13, 12)
