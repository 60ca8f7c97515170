"""Issue 20's acceptance: agents nobody here wrote, run unchanged through `arc-ref proxy` in front of
`arc-eval serve-scripted` (policy arc_eval.agent.recall_then_submit). Slow (real agent processes); needs the
extra 'agents' (mini-swe-agent, openai-agents), Qwen3's files in ../shared/data; skipped with a reason otherwise."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.harness import big_log, needs_qwen3, serve_proxy, serve_upstream, task_text

import httpx  # noqa: E402

from arc_ref.persist import DurableStore  # noqa: E402
from arc_ref.tools import ARC_TOOL_NAMES  # noqa: E402

MINI = Path(sys.executable).parent / "mini"
pytestmark = [
    pytest.mark.slow,
    needs_qwen3,
    pytest.mark.skipif(not MINI.exists() or shutil.which("bash") is None,
                       reason="mini-swe-agent is not installed (pip install 'arc-ref[agents]')"),
]
G_MAX = 4096


def run_mini(base_url: str, task: str, workdir: Path, name: str) -> dict[str, Any]:
    """`mini` (mini-swe-agent) pointed unchanged at the proxy: litellm, tool calling, no confirmation."""
    trajectory = workdir / f"{name}.traj.json"
    environment = {**os.environ, "OPENAI_API_KEY": "not-needed", "MSWEA_COST_TRACKING": "ignore_errors",
                   "MSWEA_CONFIGURED": "true", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "4",
                   "MSWEA_GLOBAL_CONFIG_DIR": str(workdir / "mini-config")}
    done = subprocess.run(
        [str(MINI), "-m", "openai/scripted", "-t", task, "-y", "--exit-immediately", "-c", "mini.yaml",
         "-c", f"model.model_kwargs.api_base={base_url}", "-c", "agent.step_limit=12", "-o", str(trajectory)],
        cwd=workdir, env=environment, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(trajectory.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def rounds(base_url: str) -> list[dict[str, Any]]:
    return httpx.get(base_url.removesuffix("/v1") + "/arc/rounds").json()  # type: ignore[no-any-return]


def check_rounds(records: list[dict[str, Any]]) -> None:
    """Every upstream request: the server's count equals the proxy's, <= K <= L; max_tokens <= G_max."""
    for record in records:
        if record["status"] == 200:
            assert record["upstream_prompt_tokens"] == record["view_tokens"] <= record["budget"] <= record["limit"]
        assert record["max_tokens"] <= G_MAX


def check_trajectory(trajectory: dict[str, Any], value: str) -> None:
    assert trajectory["info"]["exit_status"] == "Submitted"
    assert trajectory["info"]["submission"] == f"NEEDLE_KEY={value}\n"
    text = json.dumps(trajectory["messages"])
    for name in ARC_TOOL_NAMES:
        assert f'"{name}"' not in text, f"the agent saw ARC's tool {name}"


def summary(records: list[dict[str, Any]]) -> str:
    agent = sum(1 for record in records if not record["hidden"])
    hidden = len(records) - agent
    largest = max(record["view_tokens"] for record in records)
    equal = all(r["upstream_prompt_tokens"] == r["view_tokens"] for r in records if r["status"] == 200)
    return (f"upstream requests {len(records)} (agent requests {agent}, hidden rounds {hidden}), largest upstream"
            f" prompt {largest} (K = {records[0]['budget']}, L = {records[0]['limit']}), server count = proxy"
            f" count on every answered request: {equal}, statuses {sorted({r['status'] for r in records})}")


def test_mini_swe_agent_through_the_proxy_then_a_restart_gives_the_same_ids(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    big_log(log)
    store = tmp_path / "store"
    with serve_upstream() as (server, upstream_url):
        with serve_proxy(upstream_url, store=store) as base_url:
            trajectory = run_mini(base_url, task_text(log), tmp_path, "first")
            first = rounds(base_url)
        with serve_proxy(upstream_url, store=store) as base_url:  # restarted on the same store
            again = run_mini(base_url, task_text(log), tmp_path, "again")
            second = rounds(base_url)
    check_trajectory(trajectory, "violet-42")
    check_trajectory(again, "violet-42")
    check_rounds(first + second)
    assert any(record["hidden"] for record in first)
    assert server.stats.chat_requests == len(first) + len(second)
    ids = []
    for records in (first, second):  # the conversation each run ended in
        with DurableStore.open(store / records[-1]["conversation"] / "task.arc", readonly=True) as opened:
            ids.append([record.obs_id for record in opened.state.records])
    assert records[-1]["conversation"] != first[-1]["conversation"]  # the rerun forked the first run's
    assert ids[0] == ids[1] != []  # ... and its outputs got the same ids
    print("\nmini-swe-agent:", summary(first), "\nafter the restart:", summary(second), "\nstored ids:", ids[0])


def test_two_mini_agents_at_once_on_different_tasks(tmp_path: Path) -> None:
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    big_log(logs[0], needle_line=120)
    logs[1].write_text(big_log(logs[1], needle_line=200).replace("violet-42", "amber-7"), encoding="utf-8")
    with serve_upstream() as (server, upstream_url), serve_proxy(upstream_url) as base_url:
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda item: run_mini(base_url, task_text(item[1]), tmp_path, f"agent{item[0]}"),
                                 enumerate(logs)))
        records = rounds(base_url)
    check_trajectory(runs[0], "violet-42")
    check_trajectory(runs[1], "amber-7")
    check_rounds(records)
    assert len({record["conversation"] for record in records}) == 2
    assert server.stats.max_in_flight >= 1
    print("\ntwo agents at once:", summary(records))


def test_mini_swe_agent_survives_503s_injected_upstream(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    big_log(log)
    with serve_upstream(faults=[503, 503]) as (server, upstream_url), serve_proxy(upstream_url) as base_url:
        trajectory = run_mini(base_url, task_text(log), tmp_path, "faults")
        records = rounds(base_url)
    check_trajectory(trajectory, "violet-42")
    check_rounds(records)
    assert server.stats.faults_injected == 2 and [r["status"] for r in records].count(503) == 2
    print("\n503s injected:", summary(records))


def test_openai_agents_sdk_streams_through_the_proxy(tmp_path: Path) -> None:
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install 'arc-ref[agents]')")
    from openai import AsyncOpenAI

    log = tmp_path / "big.log"
    big_log(log)

    @agents.function_tool
    def bash(command: str) -> str:
        """Execute a bash command."""
        return subprocess.run(command, shell=True, capture_output=True, text=True, check=False).stdout

    async def scenario(base_url: str) -> tuple[str, list[str]]:
        client = AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0)
        model = agents.OpenAIChatCompletionsModel(model="scripted", openai_client=client)
        agent = agents.Agent(name="reader", instructions="You are a helpful assistant.", model=model, tools=[bash])
        result = agents.Runner.run_streamed(agent, input=task_text(log), max_turns=8,
                                            run_config=agents.RunConfig(tracing_disabled=True))
        seen = []
        async for event in result.stream_events():
            if event.type == "run_item_stream_event" and event.item.type == "tool_call_item":
                seen.append(event.item.raw_item.name)
        return str(result.final_output), seen

    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url) as base_url:
        final, called = asyncio.run(scenario(base_url))
        records = rounds(base_url)
    assert final == "NEEDLE_KEY=violet-42"
    assert called and set(called) == {"bash"}  # no ARC tool call ever reached the streaming client
    assert any(record["hidden"] for record in records)
    assert all(record["streamed"] for record in records)  # the SDK asked for streams on every request
    check_rounds(records)
    print("\nopenai-agents streaming:", summary(records), "tools the agent saw called:", called)
