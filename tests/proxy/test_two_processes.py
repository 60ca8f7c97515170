"""Two `arc-ref proxy` processes on one --store directory (issue 25 item 3): a conversation's store is locked only
while a request holds it, and a process finds what the other wrote through the shared index (hashes.sqlite).

Real processes (`arc-ref proxy` and `arc-eval serve-scripted`, the policy that recalls), an agent loop that
resends its whole history every turn and sends each request to the other process:
- the upstream views are identical, by digest and in order, to the same conversation through one process, and
  the conversation stays one (resumed in place in each process, never forked);
- a kill -9 of one process while it holds a request: the other answers the agent's retry in the same
  conversation, the agent finishes, and every tool output it sent is in the one stored conversation (its rows
  pass their chain);
- a request for a conversation the other process holds waits, then gets 503 store_busy with retry-after.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.proxy.harness import BASH_TOOL, BUDGETS, QWEN3, big_log, needs_qwen3, task_text

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from tests.deployment import Service, arc_proxy, rounds, running, scripted_upstream, views  # noqa: E402

pytestmark = needs_qwen3
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def agent(route: Callable[[int, list[dict[str, Any]]], httpx.Response], log: Path, confirmations: int = 3
          ) -> tuple[str | None, list[str], list[str]]:
    """An agent that resends its whole history every turn; ``route(number, messages)`` sends request ``number``.
    After it submits it sends the submission's output and then asks ``confirmations`` more times (more requests
    of one conversation). Returns what it submitted, the tool outputs it sent, and each answer's conversation."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."},
                                      {"role": "user", "content": task_text(log)}]
    outputs: list[str] = []
    keys: list[str] = []
    submitted = None
    for number in range(12):
        response = route(number, messages)
        assert response.status_code == 200, response.text
        keys.append(response.headers["x-arc-conversation"])
        message = response.json()["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or ():
            command = json.loads(call["function"]["arguments"])["command"]
            output = subprocess.run(command, shell=True, capture_output=True, text=True, check=False).stdout
            if output.startswith(SUBMIT):
                submitted = output.split("\n", 1)[1]
            outputs.append(output)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if not message.get("tool_calls"):
            if confirmations == 0:
                break
            confirmations -= 1
            messages.append({"role": "user", "content": f"Please confirm ({confirmations} more to go)."})
    return submitted, outputs, keys


def post(service: Service, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{service.url}/chat/completions", json={"model": "scripted", "messages": messages,
                                                               "tools": [BASH_TOOL]}, timeout=120)


def conversation_directories(store: Path) -> list[Path]:
    return [path for path in store.iterdir() if path.is_dir()]


def test_a_conversation_alternating_between_two_processes_sees_what_one_process_shows(tmp_path: Path) -> None:
    assert QWEN3 is not None
    log = tmp_path / "big.log"
    big_log(log)
    upstream = scripted_upstream(tmp_path, QWEN3)  # a fresh upstream per run: its call ids count its requests
    single = arc_proxy(tmp_path, upstream.url, QWEN3, str(tmp_path / "alone"), BUDGETS)
    with running(single, upstream):
        submitted, _, _ = agent(lambda number, messages: post(single, messages), log)
        alone = views(rounds(single))
    assert submitted == "NEEDLE_KEY=violet-42\n"
    store = tmp_path / "shared"
    upstream = scripted_upstream(tmp_path, QWEN3)
    first = arc_proxy(tmp_path, upstream.url, QWEN3, str(store), BUDGETS)
    second = arc_proxy(tmp_path, upstream.url, QWEN3, str(store), BUDGETS)
    with running(first, second, upstream):
        submitted, _, keys = agent(lambda number, messages: post((first, second)[number % 2], messages), log)
        served = [rounds(first), rounds(second)]
    assert submitted == "NEEDLE_KEY=violet-42\n"
    assert all(served), "each process served part of the conversation"
    assert views(served[0] + served[1]) == alone  # identical upstream views, in order
    assert len(set(keys)) == 1 and len(conversation_directories(store)) == 1  # one conversation, never forked
    print(f"\n{len(alone)} upstream views identical by digest; requests {len(keys)}, upstream rounds per process"
          f" {[len(records) for records in served]}")


def holds_a_lock(pid: int) -> bool:
    """Whether process ``pid`` holds a flock now (a conversation's store: it is inside a request)."""
    with open("/proc/locks", encoding="ascii") as locks:
        return any(fields[1] == "FLOCK" and fields[4] == str(pid) for fields in (line.split() for line in locks)
                   if len(fields) > 4)


def test_kill_9_of_one_process_mid_request_and_the_other_goes_on_with_nothing_lost(tmp_path: Path) -> None:
    assert QWEN3 is not None
    log = tmp_path / "big.log"
    big_log(log)
    store = tmp_path / "shared"
    upstream = scripted_upstream(tmp_path, QWEN3, latency_ms=1500)  # a request in flight long enough to kill
    first = arc_proxy(tmp_path, upstream.url, QWEN3, str(store), BUDGETS)
    second = arc_proxy(tmp_path, upstream.url, QWEN3, str(store), BUDGETS)
    killed: list[str] = []

    def route(number: int, messages: list[dict[str, Any]]) -> httpx.Response:
        if number == 0:
            return post(first, messages)
        if number == 1:  # to the second process, killed while it holds the request; the agent retries on the first
            answer: list[Any] = []
            thread = threading.Thread(target=lambda: answer.append(_post_or_error(second, messages)))
            thread.start()
            assert second.process is not None
            deadline = time.monotonic() + 60
            while not holds_a_lock(second.process.pid):
                assert time.monotonic() < deadline and thread.is_alive(), "the request never held its store"
                time.sleep(0.005)
            time.sleep(0.3)
            second.kill()
            thread.join(60)
            killed.append(str(answer[0]))
        return post(first, messages)

    with running(first, second, upstream):
        submitted, outputs, keys = agent(route, log)
    assert killed and "Error" in killed[0], killed  # the request in flight got no answer
    assert submitted == "NEEDLE_KEY=violet-42\n"
    assert len(set(keys)) == 1, keys  # the retry went on in the same conversation (in place, not forked)
    (directory,) = conversation_directories(store)
    from arc_ref.persist import DurableStore

    with DurableStore.open(directory / "task.arc", readonly=True) as stored:  # every row checked (chain, fold)
        contents = [record.content for record in stored.state.records]
    assert outputs and all(output in contents for output in outputs)  # every tool output it sent is stored


def _post_or_error(service: Service, messages: list[dict[str, Any]]) -> Any:
    try:
        return post(service, messages)
    except httpx.HTTPError as problem:
        return f"Error: {type(problem).__name__}"
