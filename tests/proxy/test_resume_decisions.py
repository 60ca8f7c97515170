"""Which stored conversation a request continues (review h63, a mutation sweep of that part of `arc-ref proxy`):
the retry of an answered request, the conversation's name from ``metadata.conversation_id``, over a mock upstream
(`Proxy` in this process) and over HTTP."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import (BASH_TOOL, BUDGETS, QWEN3, needs_qwen3, serve_proxy, serve_upstream,
                                task_text)

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import Proxy, ProxySettings  # noqa: E402

pytestmark = needs_qwen3


def mock_upstream(seen: list[dict[str, Any]]) -> Any:
    """An httpx.MockTransport handler: each request's body noted in ``seen``, one bash call named by its number."""

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        number = len(seen)
        message = {"role": "assistant", "content": f"reply {number}", "tool_calls": [
            {"id": f"b{number}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
        return httpx.Response(200, json={"id": f"x{number}", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    return reply


def test_a_retry_of_a_request_whose_last_message_differs_is_asked_anew() -> None:
    """A client's retry is answered with the conversation's latest reply only when it repeats that reply's request:
    the same last message (its chain hash), not only the same history before it. A retry whose last message (a tool
    result here) differs from the answered request's is another request: a fork asked of the upstream (a mark
    before the last one, or the task's, would have handed it the reply to the other tool result)."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            first = await proxy.complete(body, None)
            reply = first.completion["choices"][0]["message"]
            history = [*body["messages"], reply]
            second = await proxy.complete(
                {**body, "messages": [*history, {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]}, None)
            assert second.conversation == first.conversation and len(seen) == 2
            edited = {**body, "messages": [*history, {"role": "tool", "tool_call_id": "b1", "content": "b.txt"}]}
            retried = await proxy.complete(edited, None, retry=True)
            assert len(seen) == 3  # asked of the upstream: not the reply to "a.txt"
            assert retried.completion != second.completion and retried.conversation != first.conversation
            assert seen[-1]["messages"][-1]["content"].endswith("b.txt")
            # the task alone, sent again as a retry after the conversation went on: also a fork asked anew
            again = await proxy.complete(json.loads(json.dumps(body)), None, retry=True)
            assert len(seen) == 4 and again.conversation not in (first.conversation, retried.conversation)

    asyncio.run(scenario())


def test_a_conversation_id_of_its_own_in_metadata_is_not_sent_upstream() -> None:
    """``metadata.conversation_id`` is the proxy's: the upstream gets the rest of the metadata, and no metadata at
    all when the name was all it held (never ``"metadata": null`` or ``{}``)."""
    seen: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(mock_upstream(seen))) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            await proxy.complete({**body, "metadata": {"conversation_id": "n-1"}}, "n-1")
            assert "metadata" not in seen[-1]
            await proxy.complete({**body, "metadata": {"conversation_id": "n-2", "user": "u"}}, "n-2")
            assert seen[-1]["metadata"] == {"user": "u"}
            await proxy.complete({**body, "metadata": {"user": "v"}}, None)
            assert seen[-1]["metadata"] == {"user": "v"}

    asyncio.run(scenario())


def test_metadata_conversation_id_names_the_conversation_as_the_header_does_and_the_header_wins(
        tmp_path: Path) -> None:
    """Over HTTP: ``metadata.conversation_id`` names a conversation as ``X-Arc-Conversation`` does (a history
    named by the header goes on when the next request names it in its metadata); with both, the header's name is
    the conversation's; a conversation_id that is not a string names nothing."""
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url) as base_url:
        def ask(messages: list[dict[str, Any]], metadata: dict[str, Any] | None = None,
                **headers: str) -> httpx.Response:
            body: dict[str, Any] = {"model": "scripted", "messages": messages, "tools": [BASH_TOOL]}
            if metadata is not None:
                body["metadata"] = metadata
            response = httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=60)
            assert response.status_code == 200, response.text
            return response

        def made() -> int:  # conversations made new (not forks), from /metrics
            text = httpx.get(base_url.removesuffix("/v1") + "/metrics").text
            found = re.search(r'^arc_conversations_created_total\{how="new"\} (\S+)$', text, re.MULTILINE)
            return int(float(found.group(1))) if found else 0

        start = [{"role": "system", "content": "S"}, {"role": "user", "content": task_text(tmp_path / "none.log")}]
        first = ask(start, **{"X-Arc-Conversation": "run-1"})
        key = first.headers["x-arc-conversation"]

        def continued(reply: httpx.Response, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
            message = reply.json()["choices"][0]["message"]
            return [*messages, message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                         "content": "no such file"}]

        history = continued(first, start)
        second = ask(history, metadata={"conversation_id": "run-1"})
        assert second.headers["x-arc-conversation"] == key  # the same name: the same conversation, resumed
        history = continued(second, history)
        third = ask(history, metadata={"conversation_id": "run-2"}, **{"X-Arc-Conversation": "run-1"})
        assert third.headers["x-arc-conversation"] == key  # the header's name, not the metadata's
        new_before = made()
        unnamed = ask(start)
        assert unnamed.headers["x-arc-conversation"] != key and made() == new_before + 1
        resumed = ask(continued(unnamed, start), metadata={"conversation_id": 7})  # not a name: unnamed
        assert resumed.headers["x-arc-conversation"] == unnamed.headers["x-arc-conversation"]
        named = ask(start, metadata={"conversation_id": "run-3"})
        assert named.headers["x-arc-conversation"] not in (key, unnamed.headers["x-arc-conversation"])
        assert made() == new_before + 2  # its own conversation, not a fork of the unnamed one
