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
from arc_ref.frontends.proxy import CLIENT_LEFT  # noqa: E402
from arc_ref.frontends.proxy_shared import RequestAttempts, SharedProxy  # noqa: E402
from arc_ref.persist.postgres_conversations import RunningMarker  # noqa: E402
from arc_ref.persist.store import StoreError  # noqa: E402


def waited(monkeypatch: pytest.MonkeyPatch, answers: list[Any], left_after: int | None = None
           ) -> tuple[list[tuple[str, Any]], Any]:
    """`SharedProxy._wait_elsewhere` of one retry whose claims get ``answers`` in turn (True: claimed; False: another
    attempt of the request runs; an exception: raised), its sleeps recorded, not slept: (what it did in order, each
    look with the retries-waiting gauge at that moment, and what the wait returned; the instance's counters after).
    ``left_after``: its client leaves after that many looks (`CLIENT_LEFT`: each time it is asked, recorded)."""
    done: list[tuple[str, Any]] = []

    async def left() -> bool:
        looks = sum(what == "look" for what, _ in done)
        done.append(("client left?", left_after is not None and looks >= left_after))
        return done[-1][1]
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

    async def wait() -> None:
        CLIENT_LEFT.set(left)  # (this run's context only)
        done.append(("returned", await SharedProxy._wait_elsewhere(instance, attempts)))  # type: ignore[arg-type]

    asyncio.run(wait())
    return done, instance


def test_a_retry_waiting_for_another_instance_looks_again_after_50_ms_doubling_up_to_500_ms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While another attempt of the request runs, each look (one round trip) is followed by a sleep of 50 ms, twice
    as long each time, at most 500 ms (a retry never looks in a loop without sleeping, nor waits longer than 500 ms
    past the attempt's end); while it waits it counts on the gauge of retries waiting, once in the count of retries
    that waited elsewhere, and it leaves the gauge as it found it."""
    done, instance = waited(monkeypatch, [False] * 7 + [True])
    asked = ("client left?", False)
    assert done == [("look", 0), asked, ("sleep", 0.05), ("look", 1), asked, ("sleep", 0.1), ("look", 1), asked,
                    ("sleep", 0.2), ("look", 1), asked, ("sleep", 0.4), ("look", 1), asked, ("sleep", 0.5),
                    ("look", 1), asked, ("sleep", 0.5), ("look", 1), asked, ("sleep", 0.5), ("look", 1),
                    ("returned", True)]
    assert (instance.retries_waited, instance.retries_waiting) == (1, 0)


def test_a_retry_that_claims_at_once_has_not_waited_and_one_whose_database_fails_stops_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No attempt running: claimed at the first look, no sleep, nothing counted. The database failing during the wait
    (a StoreError): the wait ends there (the retry goes on as any request), the gauge back where it was."""
    done, instance = waited(monkeypatch, [True])
    assert done == [("look", 0), ("returned", True)]
    assert (instance.retries_waited, instance.retries_waiting) == (0, 0)
    done, instance = waited(monkeypatch, [False, StoreError("down")])
    assert done == [("look", 0), ("client left?", False), ("sleep", 0.05), ("look", 1), ("returned", True)]
    assert (instance.retries_waited, instance.retries_waiting) == (1, 0)


def test_a_retry_whose_client_left_stops_waiting_at_its_next_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review h58 F4: a waiting retry whose client left (its timeout) stops waiting after its next look that found
    another attempt running, claiming nothing (False: it gives up, `SharedProxy.complete`), the gauge back where it
    was; a look that claimed the request ends the wait as before (the client is asked after it, in `complete`)."""
    done, instance = waited(monkeypatch, [False, False, False], left_after=2)
    assert done == [("look", 0), ("client left?", False), ("sleep", 0.05), ("look", 1), ("client left?", True),
                    ("returned", False)]
    assert (instance.retries_waited, instance.retries_waiting) == (1, 0)
    done, instance = waited(monkeypatch, [True], left_after=0)
    assert done == [("look", 0), ("returned", True)]


class _Stop(Exception):
    """Ends `SharedProxy._renew_leases`'s loop in a test."""


def test_leases_are_renewed_every_third_of_a_lease_only_those_held_a_failure_said_once_per_outage(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`SharedProxy._renew_leases`: it sleeps a third of ``running_lease_s`` between rounds (so a live attempt's row
    never runs out between two renewals), renews in one call the attempts it holds rows of (not those whose row is
    not written, or gone), none at all while it holds none, counts the rounds that renewed, and says a failure once
    per run of failures (review h67: only a whole scenario with a 1.5 s lease covered it, which a renewal that did
    nothing passed)."""
    slept: list[float] = []
    renewed: list[tuple[str, list[str], float]] = []
    held = RunningMarker("asked", "a", "here", 3.0)
    held.held = True
    answers: list[Any] = [None, StoreError("down"), StoreError("down"), None, StoreError("down again")]
    instance = SimpleNamespace(settings=SimpleNamespace(running_lease_s=1.5), instance="here", leases_renewed=0,
                               markers={"a": held, "b": RunningMarker("asked", "b", "here", 3.0)})

    async def renew_running(name: str, attempts: list[str], lease_s: float) -> None:
        renewed.append((name, list(attempts), lease_s))
        if len(renewed) > len(answers):
            raise _Stop()
        answer = answers[len(renewed) - 1]
        if answer is not None:
            raise answer

    async def sleep(delay: float) -> None:
        slept.append(delay)
        if len(slept) == 6:
            held.held = False  # its row removed: nothing to renew
        if len(slept) > 7:
            raise _Stop()

    instance.database = SimpleNamespace(renew_running=renew_running)
    monkeypatch.setattr(proxy_shared, "asyncio", SimpleNamespace(sleep=sleep))
    with pytest.raises(_Stop):
        asyncio.run(SharedProxy._renew_leases(instance))  # type: ignore[arg-type]
    assert slept == [0.5] * 8
    assert renewed == [("here", ["a"], 1.5)] * 5
    assert instance.leases_renewed == 2
    said = [line for line in capsys.readouterr().err.splitlines() if "renewing the running requests' leases" in line]
    assert len(said) == 2 and "down again" in said[1], said


def test_an_instance_starts_one_lease_renewer_and_none_without_arc_running() -> None:
    """`SharedProxy._start_tasks`, called by every request: the connection sweeper and the lease renewer started
    once (not one more per request), the renewer only where arc_running is there."""

    async def forever() -> None:
        await asyncio.Event().wait()

    async def started(running: bool) -> tuple[Any, ...]:
        instance = SimpleNamespace(_connection_sweeper=None, _lease_renewer=None,
                                   database=SimpleNamespace(running=running), _sweep_connections=forever,
                                   _renew_leases=forever)
        SharedProxy._start_tasks(instance)  # type: ignore[arg-type]
        first = (instance._connection_sweeper, instance._lease_renewer)
        SharedProxy._start_tasks(instance)  # type: ignore[arg-type]
        second = (instance._connection_sweeper, instance._lease_renewer)
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return first, second, len(tasks)

    first, second, count = asyncio.run(started(True))
    assert first == second and None not in first and count == 2
    first, second, count = asyncio.run(started(False))
    assert first == second and first[0] is not None and first[1] is None and count == 1
