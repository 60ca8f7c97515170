"""arc-ref proxy (arc_ref.frontends.proxy) over real HTTP: serve-scripted on Qwen3's files upstream, an agent loop that
resends its whole history every turn in front (tests/proxy/harness.py)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import (
    BASH_TOOL,
    big_log,
    needs_qwen3,
    run_agent,
    serve_proxy,
    serve_upstream,
    task_text,
)

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import UPSTREAM_HEADERS, Proxy, ProxySettings, Refused, sse_chunks  # noqa: E402
from arc_ref.session import TOOL_MODE_SYSTEM  # noqa: E402
from arc_ref.tools import ARC_TOOL_NAMES  # noqa: E402

pytestmark = needs_qwen3


def rounds(base_url: str) -> list[dict[str, Any]]:
    return httpx.get(base_url.removesuffix("/v1") + "/arc/rounds").json()  # type: ignore[no-any-return]


def no_arc_names(payload: Any) -> None:
    text = json.dumps(payload)
    for name in ARC_TOOL_NAMES:
        assert f'"{name}"' not in text, f"the agent saw ARC's tool {name}"


def test_an_agent_reads_a_long_output_recalls_it_inside_the_proxy_and_submits(tmp_path: Path) -> None:
    """The upstream gets ARC's view (its count = the server's, <= K), recall rounds stay hidden, the agent
    never sees an ARC tool, max_tokens <= G_max, usage sums the hidden calls."""
    log = tmp_path / "big.log"
    big_log(log)
    with serve_upstream() as (server, upstream_url), serve_proxy(upstream_url) as base_url:
        messages, responses, submitted = run_agent(base_url, task_text(log))
        upstream_rounds = rounds(base_url)
        assert httpx.get(f"{base_url}/models").json() == httpx.get(f"{upstream_url}/models").json()  # forwarded
        assert submitted == "NEEDLE_KEY=violet-42\n"
        hidden = sum(int(response.headers["x-arc-hidden-rounds"]) for response in responses)
        assert hidden >= 1 and len(upstream_rounds) == len(responses) + hidden
        assert server.stats.chat_requests == len(upstream_rounds)
        for record in upstream_rounds:
            assert record["status"] == 200
            assert record["upstream_prompt_tokens"] == record["view_tokens"] <= record["budget"] <= record["limit"]
            assert record["max_tokens"] <= 4096
        no_arc_names(messages)
        for response in responses:
            no_arc_names(response.json())
        last = responses[-1].json()["usage"]
        assert last["prompt_tokens"] == sum(record["upstream_prompt_tokens"] for record in upstream_rounds[-1 - int(
            responses[-1].headers["x-arc-hidden-rounds"]):])


def test_identity_resumes_forks_and_separates_conversations(tmp_path: Path) -> None:
    """Key order and null fields do not matter; a regenerated reply forks; another system text, tools list or
    conversation name is another conversation; two runs sharing the system and the task diverge."""
    log = tmp_path / "big.log"
    big_log(log)
    task = task_text(log)
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url) as base_url:
        def ask(messages: list[dict[str, Any]], tools: list[Any] = [BASH_TOOL], **headers: str) -> httpx.Response:
            response = httpx.post(f"{base_url}/chat/completions", json={"model": "scripted", "messages": messages,
                                                                        "tools": tools}, headers=headers, timeout=60)
            assert response.status_code == 200, response.text
            return response

        start = [{"role": "system", "content": "S"}, {"role": "user", "content": task}]
        first = ask(start)
        key = first.headers["x-arc-conversation"]
        reply = first.json()["choices"][0]["message"]
        call = reply["tool_calls"][0]
        reordered = {"tool_calls": [{"function": {"arguments": json.dumps(json.loads(call["function"]["arguments"])),
                                                  "name": "bash"}, "type": "function", "id": call["id"]}],
                     "content": reply["content"], "role": "assistant", "refusal": None}
        history = [*start, reordered, {"role": "tool", "tool_call_id": call["id"], "content": "no such file"}]
        assert ask(history).headers["x-arc-conversation"] == key  # resumed: the reply was known
        regenerated = ask(start)  # regenerated: forked at the task
        forked = regenerated.headers["x-arc-conversation"]
        assert forked != key
        again = regenerated.json()["choices"][0]["message"]
        answer = {"role": "tool", "tool_call_id": again["tool_calls"][0]["id"], "content": "no such file"}
        assert ask([*start, again, answer]).headers["x-arc-conversation"] == forked  # the fork goes on in place
        assert ask([{"role": "system", "content": "S2"}, start[1]]).headers["x-arc-conversation"] != key
        assert ask(start, tools=[]).headers["x-arc-conversation"] != key
        named = ask(start, **{"X-Arc-Conversation": "run-2"}).headers["x-arc-conversation"]
        assert named != key and ask(start, **{"X-Arc-Conversation": "run-3"}).headers["x-arc-conversation"] != named


def test_upstream_errors_pass_back_unchanged_and_the_retry_resumes(tmp_path: Path) -> None:
    """A 503 upstream comes back as the same 503; the agent's retry resends the same history and gets the ids a
    run without the failure gets."""
    log = tmp_path / "big.log"
    big_log(log)
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url) as base_url:
        _, clean, _ = run_agent(base_url, task_text(log), headers={"X-Arc-Conversation": "clean"})
    with serve_upstream(faults=[503]) as (server, upstream_url), serve_proxy(upstream_url) as base_url:
        body = {"model": "scripted", "messages": [{"role": "user", "content": task_text(log)}], "tools": [BASH_TOOL]}
        failed = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)
        assert failed.status_code == 503 and server.stats.faults_injected == 1
        _, retried, submitted = run_agent(base_url, task_text(log), headers={"X-Arc-Conversation": "clean"})
    assert submitted == "NEEDLE_KEY=violet-42\n"
    assert [r.headers["x-arc-view-tokens"] for r in retried] == [r.headers["x-arc-view-tokens"] for r in clean]


def test_arc_refusals_are_typed_400s_never_5xx(tmp_path: Path) -> None:
    """A configuration whose K exceeds L, and capacity, are 400s naming the budget (clients do not retry)."""
    with serve_upstream() as (server, upstream_url):
        with serve_proxy(upstream_url, recent_budget=12000) as base_url:
            body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
            refused = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60)
            assert refused.status_code == 400
            assert refused.json()["error"]["type"] == "arc_refused" and refused.json()["error"]["code"] == "configuration"
        with serve_proxy(upstream_url, capacity=2) as base_url:
            messages = [{"role": "user", "content": "task"}]
            for number in range(3):
                messages += [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"c{number}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": f"c{number}", "content": "out"}]
            refused = httpx.post(f"{base_url}/chat/completions", json={"model": "scripted", "messages": messages,
                                                                       "tools": [BASH_TOOL]}, timeout=60)
            error = refused.json()["error"]
            assert refused.status_code == 400 and error["code"] == "capacity" and error["budget"]["N_max"] == 2
            bad = httpx.post(f"{base_url}/chat/completions", json={"model": "scripted", "messages": [
                {"role": "user", "content": "t"}, {"role": "tool", "tool_call_id": "nope", "content": "x"}]},
                timeout=60)
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_event"
        assert server.stats.chat_requests == 0  # nothing refused reached the upstream


def test_streaming_clients_get_sse_without_arc_calls(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    big_log(log)
    with serve_upstream(latency_ms=300) as (_, upstream_url), serve_proxy(upstream_url, keepalive_s=0.1) as base_url:
        messages: list[dict[str, Any]] = [{"role": "user", "content": task_text(log)}]
        for _ in range(3):
            with httpx.stream("POST", f"{base_url}/chat/completions", timeout=60, json={
                    "model": "scripted", "messages": messages, "tools": [BASH_TOOL], "stream": True,
                    "stream_options": {"include_usage": True}}) as response:
                assert response.status_code == 200
                lines = [line for line in response.iter_lines() if line]
            assert ": keepalive" in lines and lines[-1] == "data: [DONE]"
            # a reply slower than the first keepalive carries its x-arc headers as comments (review s12 h4 MINOR 6)
            comments = dict(line[2:].split(": ", 1) for line in lines if line.startswith(": x-arc-"))
            assert set(comments) == {"x-arc-hidden-rounds", "x-arc-view-tokens", "x-arc-conversation"}
            assert "x-arc-view-tokens" not in response.headers and int(comments["x-arc-view-tokens"]) > 0
            chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
            no_arc_names(chunks)
            assert chunks[-1]["usage"]["prompt_tokens"] > 0
            calls = [call for chunk in chunks for choice in chunk["choices"]
                     for call in choice["delta"].get("tool_calls") or ()]
            content = "".join(choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"])
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": [{k: call[k] for k in ("id", "type", "function")} for call in calls]})
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": log.read_text()})
        assert content == "NEEDLE_KEY is violet-42."  # found through hidden recall rounds, streamed


def test_a_restarted_proxy_with_a_store_gives_the_same_ids_and_views(tmp_path: Path) -> None:
    """Stopped after the first turn and started again on its store, the proxy resumes the conversation in place:
    the same stored ids as an uninterrupted run, the same view counts, the same reply."""
    from arc_ref.persist import DurableStore

    log = tmp_path / "big.log"
    big_log(log)

    def stored_ids(store: Path) -> list[str]:
        (directory,) = [path for path in store.iterdir() if path.is_dir()]
        with DurableStore.open(directory / "task.arc", readonly=True) as opened:
            return [record.obs_id for record in opened.state.records]

    with serve_upstream() as (_, upstream_url):
        with serve_proxy(upstream_url, store=tmp_path / "straight") as base_url:
            _, straight, submitted = run_agent(base_url, task_text(log))
        with serve_proxy(upstream_url, store=tmp_path / "store") as base_url:
            messages, before, _ = run_agent(base_url, task_text(log), steps=1)
        with serve_proxy(upstream_url, store=tmp_path / "store") as base_url:  # a new process, the same store
            resumed = httpx.post(f"{base_url}/chat/completions", timeout=60, json={
                "model": "scripted", "messages": messages, "tools": [BASH_TOOL]})
    assert submitted == "NEEDLE_KEY=violet-42\n" and len(straight) == 2
    assert len([path for path in (tmp_path / "store").iterdir() if path.is_dir()]) == 1  # resumed in place: no new conversation
    assert resumed.headers["x-arc-conversation"] == before[0].headers["x-arc-conversation"]
    assert stored_ids(tmp_path / "store") == stored_ids(tmp_path / "straight") != []
    assert [r.headers["x-arc-view-tokens"] for r in (*before, resumed)] == [
        r.headers["x-arc-view-tokens"] for r in straight]
    assert resumed.headers["x-arc-hidden-rounds"] == straight[1].headers["x-arc-hidden-rounds"]
    strip_id = [{**call, "id": None} for call in resumed.json()["choices"][0]["message"]["tool_calls"]]
    assert strip_id == [{**call, "id": None} for call in straight[1].json()["choices"][0]["message"]["tool_calls"]]


def test_arc_answers_reach_the_model_in_their_calls_places() -> None:
    """A reply calling the agent's bash and then ARC's catalog-first: the agent gets bash alone; the next upstream
    request shows bash's result, then ARC's answer, in the order of the calls (Qwen3's template pairs results with
    calls by position and writes no id: review h30 F8 saw the answer read as bash's output)."""
    replies = iter([
        {"content": "both", "tool_calls": [
            {"id": "b1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "a1", "type": "function", "function": {"name": "catalog-first", "arguments": "{}"}}]},
        {"content": "done"},
    ])
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": {"role": "assistant", **next(replies)},
                                                      "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    from tests.proxy.harness import BUDGETS, QWEN3

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
            first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            message = first.completion["choices"][0]["message"]
            assert [call["id"] for call in message["tool_calls"]] == ["b1"]
            messages += [message, {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]
            await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            sent = seen[-1]["messages"]
            calls = [call["id"] for call in sent[-3]["tool_calls"]]
            results = [(item["tool_call_id"], item["content"]) for item in sent[-2:]]
            assert calls == ["b1", "a1"] and results == [
                ("b1", "Observation (rc=?):\na.txt"), ("a1", "catalog-first: the catalog is empty")]

    asyncio.run(scenario())


def test_mixed_calls_go_back_without_arc_calls_and_arc_answers_stay() -> None:
    """A reply calling ARC's _recall and the agent's bash: the agent gets only bash; the next view holds ARC's
    answer; the hidden-round cap returns the text when the model keeps calling only ARC's tools and they show it
    nothing new."""
    replies = iter([
        {"content": "both", "tool_calls": [
            {"id": "a1", "type": "function", "function": {"name": "_recall_meta", "arguments": '{"id": "§1"}'}},
            {"id": "b1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        *({"content": "again", "tool_calls": [  # shows nothing new: counted by --max-hidden-rounds
            {"id": f"a{n}", "type": "function", "function": {"name": "_recall_meta", "arguments": '{"id": "§1"}'}}]}
          for n in range(2, 5)),
        *({"content": "done"} for _ in range(3)),
    ])
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        seen.append(sent)
        message = next(replies)
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                                      "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    from tests.proxy.harness import BUDGETS, QWEN3

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, max_hidden_rounds=2),
                          client)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
            first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            message = first.completion["choices"][0]["message"]
            assert [call["id"] for call in message["tool_calls"]] == ["b1"] and first.hidden_rounds == 0
            messages += [message, {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]
            second = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            assert second.hidden_rounds == 2 and second.completion["choices"][0]["message"] == {
                "role": "assistant", "content": "again"}
            assert second.completion["usage"]["prompt_tokens"] == 3
            # another system text or tools list is another conversation, with that prefix (not a fork of this one)
            for system, tools in (("S2", [BASH_TOOL]), ("", [])):
                shown = [{"role": "system", "content": system}] if system else []
                await proxy.complete({"model": "m", "messages": [*shown, {"role": "user", "content": "go"}],
                                      "tools": tools}, None)
                sent_system = seen[-1]["messages"][0]["content"]
                assert sent_system.startswith(f"{system}\n\n") if system else sent_system == TOOL_MODE_SYSTEM
                assert [t["function"]["name"] for t in seen[-1]["tools"]][-1] == ("bash" if tools else "catalog-page")
            named = await proxy.complete({"model": "m", "messages": [{"role": "user", "content": "go"}],
                                          "metadata": {"conversation_id": "run-9", "user": "u"}, "temperature": 0},
                                         "run-9")
            assert named.conversation != first.conversation  # a named conversation is its own
            assert seen[-1]["metadata"] == {"user": "u"} and seen[-1]["temperature"] == 0  # the rest passes through
            with pytest.raises(Refused, match="must be the user's task"):
                await proxy.complete({"model": "m", "messages": [{"role": "tool", "tool_call_id": "x"}]}, None)

    asyncio.run(scenario())
    assert [tool["function"]["name"] for tool in seen[0]["tools"]][-1] == "bash"
    assert any(message.get("tool_call_id") == "a1" for message in seen[1]["messages"])  # ARC's answer kept
    assert sse_chunks({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}, False)[-1] == (
        "data: [DONE]\n\n")


def test_the_reply_s_reasoning_goes_back_to_the_agent() -> None:
    """A server with a reasoning parser returns the model's thinking in ``reasoning`` (vLLM 0.32; other servers
    ``reasoning_content``): the agent gets it with the reply, streamed first (review s12 h5 M3a: the agent got an
    empty message). The view keeps no reasoning (an observation is what ARC keeps; spec/statements.md): the agent's
    next request, which sends it back on the assistant message, shows the model that message's text and calls only."""
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        message = {"role": "assistant", "content": "ok", "reasoning": "First list.", "reasoning_content": "First list."}
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    from tests.proxy.harness import BUDGETS, QWEN3

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
            first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            messages += [first.completion["choices"][0]["message"], {"role": "user", "content": "more"}]
            second = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            assert second.conversation == first.conversation
            return first.completion, second.completion

    first, _ = asyncio.run(scenario())
    assert first["choices"][0]["message"] == {"role": "assistant", "content": "ok", "reasoning": "First list.",
                                              "reasoning_content": "First list."}
    assert "First list." not in json.dumps(seen[1]["messages"])
    streamed = [json.loads(event[len("data: "):]) for event in sse_chunks(first, False)[:-1]]
    assert streamed[0]["choices"][0]["delta"] == {"role": "assistant", "reasoning": "First list.",
                                                  "reasoning_content": "First list."}
    assert streamed[1]["choices"][0]["delta"] == {"content": "ok"}


def test_a_long_output_read_chunk_by_chunk_is_progress_not_a_loop() -> None:
    """A model reading a stored output of many chunks, one per round, gets every chunk and then acts: rounds that show
    it a chunk it had not seen in the request count against --max-read-rounds, not --max-hidden-rounds (review s12 h4
    MAJOR 2: past 8 chunks the agent got an empty reply). Past both limits the reply goes back without a call."""
    from tests.proxy.harness import BUDGETS, QWEN3

    output = "".join(f"line {number:05d}: " + "abcdefgh " * 12 + "\n" for number in range(1200))
    frame = re.compile(r"\[recall (§[^ \]]+) chunk (\d+)/(\d+)\]")

    def reader() -> tuple[Any, list[tuple[int, int]]]:
        read: list[tuple[int, int]] = []

        def upstream(request: httpx.Request) -> httpx.Response:
            sent = json.loads(request.content)
            text = json.dumps(sent["messages"], ensure_ascii=False)
            found = frame.findall(text)
            if found:
                read.append((int(found[-1][1]), int(found[-1][2])))
            stored = re.findall(r"§\d+-\d+", text)
            if sent["messages"][-1]["role"] == "user":
                message: dict[str, Any] = {"content": "", "tool_calls": [
                    {"id": "b0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat"}'}}]}
            elif found and found[-1][1] == found[-1][2]:
                message = {"content": "", "tool_calls": [
                    {"id": "b1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
            else:
                name = "_recall-next" if found else "_recall"
                message = {"content": "", "tool_calls": [{"id": f"r{len(read)}", "type": "function", "function": {
                    "name": name, "arguments": json.dumps({"id": stored[-1]})}}]}
            return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                             "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                                          "finish_reason": "tool_calls"}],
                                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        return upstream, read

    async def scenario(max_read_rounds: int) -> tuple[Any, list[tuple[int, int]]]:
        upstream, read = reader()
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS, max_hidden_rounds=2,
                                        max_read_rounds=max_read_rounds), client)
            messages: list[dict[str, Any]] = [{"role": "user", "content": "read the log"}]
            first = await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None)
            messages += [first.completion["choices"][0]["message"],
                         {"role": "tool", "tool_call_id": "b0", "content": output}]
            return await proxy.complete({"model": "m", "messages": messages, "tools": [BASH_TOOL]}, None), read

    reply, read = asyncio.run(scenario(64))
    chunks = read[0][1]
    assert chunks > 4 and read == [(number, chunks) for number in range(1, chunks + 1)]  # each chunk once, in order
    assert reply.hidden_rounds == chunks
    assert [call["id"] for call in reply.completion["choices"][0]["message"]["tool_calls"]] == ["b1"]
    reply, read = asyncio.run(scenario(3))  # 3 rounds reading, then 2 more (new chunks past the read limit)
    assert reply.hidden_rounds == 3 + 2 and [number for number, _ in read] == [1, 2, 3, 4, 5]
    assert "tool_calls" not in reply.completion["choices"][0]["message"]


def test_a_client_s_retry_of_an_answered_request_gets_the_same_reply() -> None:
    """The OpenAI SDK retries a request whose reply it did not receive (a timeout, a cut connection) with
    ``x-stainless-retry-count`` >= 1 (review s12 h4 MINOR 4: each such retry forked the conversation, a copy of
    it, and asked the upstream again). A retry of the request the conversation's latest reply answered gets that
    reply, also while the first attempt still runs; the same request without the header, with other parameters,
    or after the conversation went on is a fork as before."""
    from tests.proxy.harness import BUDGETS, QWEN3

    calls: list[int] = []
    release = asyncio.Event()

    async def upstream(request: httpx.Request) -> httpx.Response:
        calls.append(len(json.loads(request.content)["messages"]))
        number = len(calls)
        if number == 3:
            await release.wait()  # the third upstream call is slow: the client retries meanwhile
        message = {"role": "assistant", "content": f"reply {number}", "tool_calls": [
            {"id": f"b{number}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
        return httpx.Response(200, json={"id": f"x{number}", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
            proxy = Proxy(ProxySettings("http://up/v1", f"hf-dir:{QWEN3}", overrides=BUDGETS), client)
            body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [BASH_TOOL]}
            first = await proxy.complete(body, None)
            again = await proxy.complete(json.loads(json.dumps(body)), None, retry=True)
            assert again.completion == first.completion and again.conversation == first.conversation
            assert len(calls) == 1  # answered from the first attempt's reply
            other = await proxy.complete({**body, "temperature": 0.5}, None, retry=True)  # not the same request
            assert other.conversation != first.conversation and len(calls) == 2
            # the first attempt still runs when the retry comes: the retry waits for it and gets its reply
            body2 = {**body, "messages": [*body["messages"], first.completion["choices"][0]["message"],
                                          {"role": "tool", "tool_call_id": "b1", "content": "a.txt"}]}
            attempt = asyncio.ensure_future(proxy.complete(body2, None))
            await asyncio.sleep(0.2)
            retried = asyncio.ensure_future(proxy.complete(body2, None, retry=True))
            # a retry of another request (other parameters, or another credential) does not wait for it: a fork
            unrelated = await asyncio.wait_for(proxy.complete({**body2, "temperature": 0.7}, None, retry=True), 20)
            token = UPSTREAM_HEADERS.set({"Authorization": "Bearer other"})
            try:
                other_key = await asyncio.wait_for(proxy.complete(json.loads(json.dumps(body2)), None, retry=True), 20)
            finally:
                UPSTREAM_HEADERS.reset(token)
            assert not attempt.done() and not retried.done() and len(calls) == 5
            assert first.conversation not in (unrelated.conversation, other_key.conversation)
            release.set()
            done, retried_reply = await attempt, await retried
            assert retried_reply.completion == done.completion and retried_reply.conversation == first.conversation
            assert len(calls) == 5
            token = UPSTREAM_HEADERS.set({"Authorization": "Bearer third"})
            try:  # the answered request's retry with another credential: asked anew (the upstream checks the key)
                assert (await proxy.complete(body2, None, retry=True)).conversation != first.conversation
            finally:
                UPSTREAM_HEADERS.reset(token)
            assert len(calls) == 6
            body3 = {**body2, "messages": [*body2["messages"], done.completion["choices"][0]["message"],
                                           {"role": "tool", "content": "b.txt", "tool_call_id":
                                            done.completion["choices"][0]["message"]["tool_calls"][0]["id"]}]}
            assert (await proxy.complete(body3, None)).conversation == first.conversation and len(calls) == 7
            late = await proxy.complete(body2, None, retry=True)  # the conversation went on since: a fork
            assert late.conversation != first.conversation and len(calls) == 8
            plain = await proxy.complete(body3, None)  # the same request without the header: a fork, as before
            assert plain.conversation not in (first.conversation, late.conversation) and len(calls) == 9

    asyncio.run(scenario())


def test_the_sdk_s_retry_header_reaches_the_proxy(tmp_path: Path) -> None:
    """Over HTTP: ``x-stainless-retry-count: 1`` on a request already answered gets the same completion and makes no
    upstream call; ``0`` (a first attempt: the same history sent again on purpose) is a fork, as before."""
    with serve_upstream() as (server, upstream_url), serve_proxy(upstream_url, store=tmp_path / "store") as base_url:
        body = {"model": "scripted", "messages": [{"role": "user", "content": task_text(tmp_path / "none.log")}],
                "tools": [BASH_TOOL]}

        def ask(count: str | None) -> httpx.Response:
            headers = {"x-stainless-retry-count": count} if count is not None else {}
            response = httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=60)
            assert response.status_code == 200, response.text
            return response

        first = ask(None)
        retried = ask("1")
        assert retried.json() == first.json() and server.stats.chat_requests == 1
        assert retried.headers["x-arc-conversation"] == first.headers["x-arc-conversation"]
        again = ask("0")
        assert again.headers["x-arc-conversation"] != first.headers["x-arc-conversation"]
        assert server.stats.chat_requests == 2 and len(rounds(base_url)) == 2


def test_a_hidden_round_showing_a_whole_catalog_page_is_a_reading_round() -> None:
    """Layout lean's default page N (the stubs that have left H) and page N chosen with catalog-page (the whole
    page) are different pages to read (review s13 h8 m2: both counted as page N, so the whole page's round was
    counted against --max-hidden-rounds); a chunk already in U is not read anew."""
    from arc_ref.config import preset
    from arc_ref.frontends.proxy import HiddenRounds, _shown_items
    from arc_ref.machine import ToolResult, ToolTurn, default_page, init, tool_result, tool_turn
    from arc_ref.message import ToolCall
    from tests.proxy.harness import QWEN3

    state = init(preset("minimal", tokenizer=f"hf-dir:{QWEN3}", chat_format="template", action_mode="tools",
                        tools=[BASH_TOOL], layout="lean", page_size=2, context_limit=3000, recent_budget=420,
                        summary_budget=300, page_budget=300, recall_budget=200, chunk_tokens=24, prefill_cost=1))
    number = 0
    while default_page(state) == 0 or state.stored < 6:
        number += 1
        state, _ = tool_turn(state, ToolTurn("", (ToolCall(f"c{number}", "bash", "{}"),)))
        state, _ = tool_result(state, ToolResult(f"c{number}", f"output {number} " * 40))
    before = _shown_items(state)
    page = json.dumps({"page": str(default_page(state))})
    state, _ = tool_turn(state, ToolTurn("", (ToolCall("p", "catalog-page", page),)))
    assert HiddenRounds(idle_limit=0, read_limit=1).another(before, _shown_items(state)[:1])  # a reading round
    stored = state.records[0].obs_id
    state, turn = tool_turn(state, ToolTurn("", (ToolCall("r", "_recall", json.dumps({"id": stored})),)))
    rounds = HiddenRounds(idle_limit=0, read_limit=1)
    assert not rounds.another(_shown_items(state), [("chunk", recall.obs_id, str(recall.chunk))
                                                    for recall in turn.recalls])  # the chunk U shows already
