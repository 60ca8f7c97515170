"""The decisions of `arc-ref proxy --store postgresql://...` about a client's retry and its running-attempt row
(`arc_ref.frontends.proxy_shared`), each on its own with the database's answers made by hand: how a retry waiting for
an attempt on another instance looks again, and what its wait counts (review h67: a mutation sweep of these paths
found them untested; the scenarios with PostgreSQL are in test_shared_running.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")

from arc_ref.frontends import proxy_shared  # noqa: E402
from arc_ref.frontends.proxy_shared import RequestAttempts, SharedProxy  # noqa: E402
from arc_ref.persist.postgres_conversations import RunningMarker  # noqa: E402
from arc_ref.persist.store import StoreError  # noqa: E402


def waited(monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> tuple[list[tuple[str, Any]], Any]:
    """`SharedProxy._wait_elsewhere` of one retry whose claims get ``answers`` in turn (True: claimed; False: another
    attempt of the request runs; an exception: raised), its sleeps recorded, not slept: (what it did in order, each
    look with the retries-waiting gauge at that moment; the instance's counters after)."""
    done: list[tuple[str, Any]] = []
    instance = SimpleNamespace(retries_waited=0, retries_waiting=0)

    async def claim_running(marker: RunningMarker) -> bool:
        done.append(("look", instance.retries_waiting))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return bool(answer)

    async def sleep(delay: float) -> None:
        done.append(("sleep", delay))

    instance.database = SimpleNamespace(claim_running=claim_running)
    monkeypatch.setattr(proxy_shared, "asyncio", SimpleNamespace(sleep=sleep))
    attempts = RequestAttempts(None, running=RunningMarker("asked", "attempt", "here", 15.0))  # type: ignore[arg-type]
    asyncio.run(SharedProxy._wait_elsewhere(instance, attempts))  # type: ignore[arg-type]
    return done, instance


def test_a_retry_waiting_for_another_instance_looks_again_after_50_ms_doubling_up_to_500_ms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While another attempt of the request runs, each look (one round trip) is followed by a sleep of 50 ms, twice
    as long each time, at most 500 ms (a retry never looks in a loop without sleeping, nor waits longer than 500 ms
    past the attempt's end); while it waits it counts on the gauge of retries waiting, once in the count of retries
    that waited elsewhere, and it leaves the gauge as it found it."""
    done, instance = waited(monkeypatch, [False] * 7 + [True])
    assert done == [("look", 0), ("sleep", 0.05), ("look", 1), ("sleep", 0.1), ("look", 1), ("sleep", 0.2),
                    ("look", 1), ("sleep", 0.4), ("look", 1), ("sleep", 0.5), ("look", 1), ("sleep", 0.5),
                    ("look", 1), ("sleep", 0.5), ("look", 1)]
    assert (instance.retries_waited, instance.retries_waiting) == (1, 0)


def test_a_retry_that_claims_at_once_has_not_waited_and_one_whose_database_fails_stops_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No attempt running: claimed at the first look, no sleep, nothing counted. The database failing during the wait
    (a StoreError): the wait ends there (the retry goes on as any request), the gauge back where it was."""
    done, instance = waited(monkeypatch, [True])
    assert done == [("look", 0)]
    assert (instance.retries_waited, instance.retries_waiting) == (0, 0)
    done, instance = waited(monkeypatch, [False, StoreError("down")])
    assert done == [("look", 0), ("sleep", 0.05), ("look", 1)]
    assert (instance.retries_waited, instance.retries_waiting) == (1, 0)
