"""Issue 30 item 3: the real deployment. A real PostgreSQL (Debian's package, tests/deployment.py), three
`arc-ref proxy` processes on it behind HAProxy (round-robin, no stickiness), `arc-eval serve-scripted` upstream,
and agents nobody here wrote: mini-swe-agent and the OpenAI Agents SDK.

- Through the balancer, every upstream view is identical (by digest, in order) to a one-process run's.
- kill -9 of one instance while it holds a request, then of the database while a request is open: both agents
  finish; every tool output they sent is stored in their conversation (nothing acknowledged lost), every
  conversation's rows pass their chain and head, and every stored id's chunks reassemble to its output exactly.

Slow (agent processes); skips, saying why, without Qwen3's files, the agents, PostgreSQL or HAProxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import (
    POSTGRES_REQUIRED,
    Haproxy,
    PostgresServer,
    arc_proxy,
    haproxy_absent,
    rounds,
    running,
    scripted_upstream,
    views,
)
from tests.proxy.harness import BUDGETS, QWEN3, big_log, needs_qwen3, task_text
from tests.proxy.test_acceptance import MINI, check_trajectory, run_mini

import httpx  # noqa: E402

pytestmark = [pytest.mark.slow, needs_qwen3,
              pytest.mark.skipif(not MINI.exists(), reason="mini-swe-agent is not installed (arc-ref[agents])")]
agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install 'arc-ref[agents]')")


@pytest.fixture
def balancer_available() -> None:
    why = haproxy_absent()
    if why is not None:
        if os.environ.get(POSTGRES_REQUIRED) == "1":
            pytest.fail(f"{POSTGRES_REQUIRED}=1 but {why}")
        pytest.skip(why)


def run_sdk(base_url: str, task: str, outputs: list[str] | None = None) -> str:
    """The OpenAI Agents SDK (streaming, as test_acceptance runs it), retrying 5xx like a deployment would."""
    from openai import AsyncOpenAI

    @agents.function_tool
    def bash(command: str) -> str:
        """Execute a bash command."""
        output = subprocess.run(command, shell=True, capture_output=True, text=True, check=False).stdout
        if outputs is not None:
            outputs.append(output)
        return output

    async def scenario() -> str:
        client = AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=8)
        model = agents.OpenAIChatCompletionsModel(model="scripted", openai_client=client)
        agent = agents.Agent(name="reader", instructions="You are a helpful assistant.", model=model, tools=[bash])
        result = agents.Runner.run_streamed(agent, input=task, max_turns=8,
                                            run_config=agents.RunConfig(tracing_disabled=True))
        async for _ in result.stream_events():
            pass
        return str(result.final_output)

    return asyncio.run(scenario())


def test_agents_through_the_balancer_see_what_one_process_shows(postgres: PostgresServer, tmp_path: Path,
                                                                 balancer_available: None) -> None:
    assert QWEN3 is not None
    log = tmp_path / "big.log"
    big_log(log)
    alone: dict[str, list[str]] = {}
    for agent in ("mini", "sdk"):  # one process, no database, a fresh upstream per agent (its call ids count)
        upstream = scripted_upstream(tmp_path, QWEN3)
        single = arc_proxy(tmp_path, upstream.url, QWEN3, None, BUDGETS)
        with running(single, upstream):
            if agent == "mini":
                check_trajectory(run_mini(single.url, task_text(log), tmp_path, "alone"), "violet-42")
            else:
                assert run_sdk(single.url, task_text(log)) == "NEEDLE_KEY=violet-42"
            alone[agent] = views(rounds(single))
    url = postgres.create_database("arc_deployment_views")
    upstream = scripted_upstream(tmp_path, QWEN3)
    instances = [arc_proxy(tmp_path, upstream.url, QWEN3, url, BUDGETS) for _ in range(3)]
    balancer = Haproxy.start([f"127.0.0.1:{instance.port}" for instance in instances])
    shared: dict[str, list[str]] = {}
    with running(balancer, *instances, upstream):
        check_trajectory(run_mini(balancer.url, task_text(log), tmp_path, "balanced"), "violet-42")
        first = [record for instance in instances for record in rounds(instance)]
        shared["mini"] = views(first)
        upstream.stop()  # a fresh upstream on the same port: the same call ids as the one-process run
        restarted = scripted_upstream(tmp_path, QWEN3, port=upstream.port)
        with running(restarted):  # stopped here: `running` above holds the first upstream, not this one
            assert run_sdk(balancer.url, task_text(log)) == "NEEDLE_KEY=violet-42"
            both = [record for instance in instances for record in rounds(instance)]
            shared["sdk"] = views([record for record in both if record not in first])
            served = [len(rounds(instance)) for instance in instances]
    assert shared == alone
    assert sum(1 for count in served if count) >= 2  # the conversations moved between instances
    print(f"\nviews identical by digest: mini {len(alone['mini'])}, sdk {len(alone['sdk'])}; upstream rounds per"
          f" instance {served}")


def upstream_call_in_flight(among: list[Any], ceiling_s: float = 120) -> Any:
    """The first of the proxy instances ``among`` seen with an upstream call in flight (its /arc/rounds: a call
    without a status yet): a request there has read its conversation and not committed yet."""
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        for instance in among:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if any(record["status"] == 0 for record in rounds(instance)):
                    return instance
        time.sleep(0.02)
    raise AssertionError("no request was in flight within the ceiling")


def stored_conversations(url: str) -> dict[str, Any]:
    """Every conversation in the database, opened (its rows checked against the chain and its head)."""
    import psycopg

    from arc_ref.persist.postgres import PostgresStore

    with psycopg.connect(url, autocommit=True) as connection:
        keys = [key for (key,) in connection.execute("SELECT key FROM arc_tasks ORDER BY created").fetchall()]
    return {key: PostgresStore.open(url, key, readonly=True).state for key in keys}


def exactly_recalled(state: Any) -> int:
    """Every stored id's chunks, concatenated and with S^-1 applied (claim 5), are its output; the count."""
    from arc_ref.recall import reassemble, stored_chunk

    for record in state.records:
        chunks = [stored_chunk(record.shown, record.inner_cuts, number)
                  for number in range(1, len(record.inner_cuts) + 2)]
        assert reassemble(chunks) == record.content, record.obs_id
        assert state.lookup(record.obs_id) == record  # the id resolves to it (A1)
    return len(state.records)


def tool_outputs(trajectory: dict[str, Any]) -> list[str]:
    """The tool messages mini-swe-agent sent (its observations), as text: those before its last model reply (the
    ones after it, such as its submission's, were never sent)."""
    messages = trajectory["messages"]
    last_reply = max(number for number, message in enumerate(messages) if message.get("role") == "assistant")
    texts = []
    for message in messages[:last_reply]:
        if message.get("role") == "tool":
            content = message.get("content")
            texts.append(content if isinstance(content, str) else
                         "".join(part.get("text", "") for part in content or ()))
    return texts


def test_kill_one_instance_then_the_database_mid_request(postgres: PostgresServer, tmp_path: Path,
                                                          balancer_available: None) -> None:
    assert QWEN3 is not None
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    big_log(logs[0], needle_line=120)
    logs[1].write_text(big_log(logs[1], needle_line=200).replace("violet-42", "amber-7"), encoding="utf-8")
    url = postgres.create_database("arc_deployment_kills")
    upstream = scripted_upstream(tmp_path, QWEN3, latency_ms=400)  # requests stay in flight long enough to kill
    instances = [arc_proxy(tmp_path, upstream.url, QWEN3, url, BUDGETS) for _ in range(3)]
    balancer = Haproxy.start([f"127.0.0.1:{instance.port}" for instance in instances])
    results: dict[str, Any] = {}
    sdk_outputs: list[str] = []
    events: list[str] = []

    def mini() -> None:
        results["mini"] = run_mini(balancer.url, task_text(logs[0]), tmp_path, "killed")

    def sdk() -> None:
        results["sdk"] = run_sdk(balancer.url, task_text(logs[1]), sdk_outputs)

    with running(balancer, *instances, upstream):
        workers = [threading.Thread(target=mini), threading.Thread(target=sdk)]
        for worker in workers:
            worker.start()
        victim = upstream_call_in_flight(instances)
        victim.kill()
        events.append(f"kill -9 of instance {victim.port} while a request of it was with the upstream")
        holder = upstream_call_in_flight([instance for instance in instances if instance is not victim])
        postgres.kill()
        events.append(f"kill -9 of PostgreSQL while a request of instance {holder.port} was with the upstream (its"
                      " commit to come)")
        time.sleep(1.0)
        postgres.resume()
        events.append("PostgreSQL restarted (crash recovery) after 1 s")
        for worker in workers:
            worker.join(600)
    assert not any(worker.is_alive() for worker in workers)
    check_trajectory(results["mini"], "violet-42")
    assert results["sdk"] == "NEEDLE_KEY=amber-7"
    conversations = stored_conversations(url)  # every one opens: chain and head checked
    stored = {key: [record.content for record in state.records] for key, state in conversations.items()}
    mini_sent = tool_outputs(results["mini"])
    assert mini_sent and mini_sent in stored.values(), "a conversation holds every output mini-swe-agent sent"
    assert sdk_outputs and sdk_outputs in stored.values(), "a conversation holds every output the SDK agent sent"
    retried = [line for instance in instances for line in instance.log.read_text(errors="replace").splitlines()
               if "the request is tried again" in line]
    assert retried, "no request met the database down (the kill was not mid-request)"
    events.append(f"requests tried again while the database was down: {len(retried)} ({retried[0][:100]}...)")
    recalled = sum(exactly_recalled(state) for state in conversations.values())
    print("\n" + "\n".join(events) + f"\nboth agents finished; {len(conversations)} conversations, {recalled}"
          " stored ids, each reassembled exactly; every conversation's rows pass the chain and the head")


def test_a_request_whose_instance_is_killed_before_answering_is_sent_to_another_by_the_balancer(
        postgres: PostgresServer, tmp_path: Path, balancer_available: None) -> None:
    """The README's haproxy.cfg (this module's): a request whose instance dies (kill -9) after the whole request
    reached it and before it answered is sent to another instance by HAProxy itself (`retry-on empty-response`,
    which needs the request kept, `option http-buffer-request`, in a buffer it fits, `tune.bufsize`: the body
    here, ~20 KB, a short agent history, is over HAProxy's default 16 KB); a client that does not retry gets its
    200. Review h51: without `option http-buffer-request` HAProxy answered 502 (log `SH--`, no retry) and only a
    client's own retry went on, after waiting out the dead attempt's lease (15 s) on another instance."""
    url = postgres.create_database("arc_deployment_balancer_retry")
    upstream = scripted_upstream(tmp_path, QWEN3, latency_ms=1500)  # a request in flight long enough to kill
    instances = [arc_proxy(tmp_path, upstream.url, QWEN3, url, BUDGETS) for _ in range(2)]
    balancer = Haproxy.start([f"127.0.0.1:{instance.port}" for instance in instances])
    history = ("-" * 99 + "\n") * 200  # 20 KB in 400 tokens (a rule drawn 200 times)
    answers: list[httpx.Response] = []

    def ask() -> None:
        answers.append(httpx.post(f"{balancer.url}/chat/completions", timeout=120, json={
            "model": "scripted", "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                              {"role": "user", "content": f"Read this log.\n{history}"}]}))

    with running(balancer, *instances, upstream):
        worker = threading.Thread(target=ask)
        worker.start()
        upstream_call_in_flight(instances).kill()
        worker.join(120)
    assert not worker.is_alive() and len(answers) == 1
    assert answers[0].status_code == 200, f"{answers[0].status_code} {answers[0].text[:300]}"
