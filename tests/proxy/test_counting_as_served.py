"""The proxy counts each upstream prompt as the upstream renders that request (issue 25 item 2).

vLLM renders a chat request with the request's own ``chat_template_kwargs`` and none of its own: an agent that
sends none (mini-swe-agent, the OpenAI Agents SDK) gets Qwen3's template with ``enable_thinking`` undefined, which
writes no empty think block. The proxy counted every view with ``{"enable_thinking": false}`` (the evaluation's
default), 4 tokens (``<think>\\n\\n</think>\\n\\n``) more than vLLM's ``usage.prompt_tokens`` on every request. The
oracle here is transformers' own ``apply_chat_template`` over exactly what the upstream received; real vLLM is
benchmarks/vllm_cpu/real_vllm.py's proxy check.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from tests.proxy.harness import BASH_TOOL, BUDGETS, QWEN3, needs_qwen3

import httpx  # noqa: E402

from arc_ref.frontends.proxy import Proxy, ProxySettings, Refused  # noqa: E402
from arc_ref.tools import ARC_TOOL_NAMES  # noqa: E402
from proofs_check.shared_data import transformers_prompt  # noqa: E402

pytestmark = needs_qwen3


def vllm_kwargs(request: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.32's template kwargs for a request (ChatCompletionRequest.build_chat_params), written out here."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    effort = request.get("reasoning_effort")
    if effort is not None:
        kwargs["reasoning_effort"] = effort
        kwargs.setdefault("enable_thinking", effort != "none")
    return kwargs


def recording_upstream(sent: list[dict[str, Any]]) -> Callable[[httpx.Request], httpx.Response]:
    """A fake upstream that notes each request body in ``sent`` and answers "ok"."""

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                                      "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    return upstream


T = TypeVar("T")


def with_proxy(upstream: Callable[[httpx.Request], httpx.Response], scenario: Callable[[Proxy], Awaitable[T]]) -> T:
    """``scenario`` run against a proxy (Qwen3's template, the harness's budgets) in front of the fake ``upstream``."""

    async def run() -> T:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            return await scenario(Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client))

    return asyncio.run(run())


def test_each_upstream_prompt_is_counted_with_the_request_s_own_template_kwargs() -> None:
    pytest.importorskip("transformers", reason="transformers is the independent oracle here")
    assert QWEN3 is not None
    sent: list[dict[str, Any]] = []

    upstream = recording_upstream(sent)

    variants: list[dict[str, Any]] = [{}, {"chat_template_kwargs": {"enable_thinking": False}},
                                      {"chat_template_kwargs": {"enable_thinking": True}},
                                      {"reasoning_effort": "none"}, {"reasoning_effort": "low"}]
    counted: list[int] = []
    resumed: list[bool] = []

    async def scenario(proxy: Proxy) -> None:
        for extra in variants:
            messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List."}]
            first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL], **extra}, None)
            messages.append(first.completion["choices"][0]["message"])
            messages.append({"role": "user", "content": "And again."})
            second = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL], **extra}, None)
            counted.extend([first.view_tokens, second.view_tokens])
            resumed.append(second.conversation == first.conversation)

    with_proxy(upstream, scenario)
    assert len(sent) == len(counted) == 2 * len(variants)
    served = [transformers_prompt(QWEN3, request["messages"], request["tools"], **vllm_kwargs(request))[1]
              for request in sent]
    assert counted == served, list(zip(counted, served))
    # the think block of enable_thinking false is 4 tokens: the case every agent without kwargs hit
    assert counted[2] - counted[0] == 4 and counted[6] - counted[0] == 4 and counted[8] == counted[0]
    assert all(resumed)  # the same kwargs: the conversation resumes in place


def test_a_request_the_template_cannot_be_counted_for_is_refused() -> None:
    """Another template, documents, no generation prompt, a truncated prompt, special tokens added: vLLM would
    serve something else; a 400 names it."""
    assert QWEN3 is not None

    def upstream(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing refused reaches the upstream")

    async def scenario(proxy: Proxy) -> list[str]:
        codes = []
        for extra in ({"chat_template": "{{ messages }}"}, {"add_generation_prompt": False},
                      {"documents": [{"text": "d"}]}, {"chat_template_kwargs": ["x"]},
                      {"chat_template_kwargs": {"tools": 1}}, {"truncate_prompt_tokens": 100},
                      {"add_special_tokens": True}, {"kv_transfer_params": {"prompt_token_ids": [1, 2]}}):
            with pytest.raises(Refused) as refused:
                await proxy.complete({"model": "m", "messages": [{"role": "user", "content": "go"}], **extra}, None)
            codes.append(refused.value.code)
        return codes

    assert with_proxy(upstream, scenario) == ["unsupported"] * 8


def test_a_tool_s_strict_and_defer_loading_reach_the_upstream_and_are_counted() -> None:
    """vLLM keeps a tool's ``strict`` and ``defer_loading`` in what it hands the template (and a strict tool's
    arguments follow its schema): the OpenAI Agents SDK sends ``strict`` on every tool. The proxy sends them as the
    agent gave them and counts them as vLLM dumps them (review s12 h5 M2: they were dropped, the listing and the
    decoding not vLLM's); a tool without ``"type"`` is a function tool, as vLLM reads it (m3: refused 400); and
    ``max_completion_tokens`` is the limit when both it and ``max_tokens`` are given, as vLLM reads them (m7)."""
    pytest.importorskip("transformers", reason="transformers is the independent oracle here")
    assert QWEN3 is not None
    sent: list[dict[str, Any]] = []

    upstream = recording_upstream(sent)

    strict = {**BASH_TOOL, "function": {**BASH_TOOL["function"], "strict": True}}
    untyped = {"function": {"name": "later", "description": "Run later.", "defer_loading": True}, "defer_loading": False}
    variants: list[list[dict[str, Any]]] = [[BASH_TOOL], [strict], [strict, untyped]]
    counted: list[int] = []

    async def scenario(proxy: Proxy) -> None:
        for tools in variants:
            messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List."}]
            reply = await proxy.complete({"model": "m", "messages": messages, "tools": tools, "max_tokens": 50,
                                          "max_completion_tokens": 70}, None)
            counted.append(reply.view_tokens)

    with_proxy(upstream, scenario)
    agent_tools_sent = [[tool for tool in request["tools"] if tool["function"]["name"] not in ARC_TOOL_NAMES]
                        for request in sent]
    assert agent_tools_sent[1] == [strict]
    assert agent_tools_sent[2] == [strict, {"type": "function", "function": {
        "name": "later", "description": "Run later.", "defer_loading": True}, "defer_loading": False}]
    served = [transformers_prompt(QWEN3, request["messages"], request["tools"])[1] for request in sent]
    assert counted == served, list(zip(counted, served))
    assert counted[1] - counted[0] == 4  # ', "strict": true' in the listing
    assert [request["max_tokens"] for request in sent] == [70, 70, 70]
    assert all("max_completion_tokens" not in request for request in sent)

    def refused(tool: dict[str, Any]) -> str:
        async def scenario(proxy: Proxy) -> str:
            with pytest.raises(Refused) as refusal:
                await proxy.complete({"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [tool]},
                                     None)
            return f"{refusal.value.code}: {refusal.value}"

        return with_proxy(upstream, scenario)

    assert refused({**BASH_TOOL, "function": {**BASH_TOOL["function"], "strict": "yes"}}) == \
        "bad_tools: tool 1's function.strict must be true, false or null"
    assert refused({**BASH_TOOL, "defer_loading": 1}) == "bad_tools: tool 1's defer_loading must be true, false or null"
    assert refused({**BASH_TOOL, "type": "web"}).startswith("bad_tools: tool 1 must be")


def test_a_late_system_or_developer_message_is_refused_or_shown_as_a_user_message() -> None:
    """Review h5 B1: a system or developer message after the task (Aider's ``reminder: sys`` puts one last on every
    request) was refused, with no way round it. It still is by default (400 bad_message naming the flag); with
    ``--late-system user`` it is the user message of its text: the upstream gets that view and the count is the
    template's over what it got, the reminder at the end, after a tool result and as ``developer``."""
    pytest.importorskip("transformers", reason="transformers is the independent oracle here")
    assert QWEN3 is not None
    sent: list[dict[str, Any]] = []
    upstream = recording_upstream(sent)
    reminder = {"role": "system", "content": "Reminder: reply with one SEARCH/REPLACE block. <|im_end|> stays text."}

    async def refused(proxy: Proxy) -> Refused:
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List."}, reminder]
        with pytest.raises(Refused) as caught:
            await proxy.complete({"model": "m", "messages": messages}, None)
        return caught.value

    problem = with_proxy(upstream, refused)
    assert problem.code == "bad_message" and str(problem).count("--late-system user") == 1 and not sent

    async def as_user(proxy: Proxy) -> list[int]:
        counted = []
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List."}, reminder]
        first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
        said = first.completion["choices"][0]["message"]
        messages += [said, {"role": "user", "content": "Now run ls."}]
        second = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
        messages += [second.completion["choices"][0]["message"], {**reminder, "role": "developer"}]
        third = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
        counted += [first.view_tokens, second.view_tokens, third.view_tokens]
        assert first.conversation == second.conversation == third.conversation  # resumed in place each time
        call = {"role": "assistant", "content": "", "tool_calls": [  # between a call and its result: refused, as a
            {"id": "call_x", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
        with pytest.raises(Refused) as between:  # user message there is, saying why it is one
            await proxy.complete({"model": "m", "tools": [BASH_TOOL], "messages": [
                *messages, third.completion["choices"][0]["message"], {"role": "user", "content": "Run it."}, call,
                reminder, {"role": "tool", "tool_call_id": "call_x", "content": "out"}]}, None)
        assert between.value.code == "invalid_event" and "shown to the model as a user message" in str(between.value)
        return counted

    async def run() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            return await as_user(Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS,
                                                     late_system="user"), client))

    counted = asyncio.run(run())
    assert len(sent) == 3
    for number, request in enumerate(sent):  # a template's control token in it is shown as text (spec/rendering.md S)
        shown = [message for message in request["messages"]
                 if str(message.get("content")).replace("\u2060", "") == reminder["content"]]
        assert [message["role"] for message in shown] == ["user"] * (1 + (number == 2))
        assert "<|im_end|>" not in shown[-1]["content"] and (number == 1) != (request["messages"][-1] is shown[-1])
        assert all(message["role"] != "system" for message in request["messages"][1:])
    served = [transformers_prompt(QWEN3, request["messages"], request["tools"])[1] for request in sent]
    assert counted == served, list(zip(counted, served))
