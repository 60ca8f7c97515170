"""A client's retry that reaches another `arc-ref proxy` instance while its first attempt still runs (several
instances on one PostgreSQL): each request's row in ``arc_running`` while it runs makes the retry wait for that
attempt, then take its reply (or run itself when it failed), as one instance does, instead of forking the
conversation and asking the upstream again; a crashed instance's row holds a retry no longer than its lease; a
request that is not a retry never waits for one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.proxy.harness import BUDGETS, QWEN3, bash_call_reply, needs_qwen3, serve_app

import httpx  # noqa: E402

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
pytestmark = [needs_qwen3]

from tests.proxy.test_shared import continued, first_request, in_process_shared  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def numbered_reply(request: Any, number: int) -> Any:
    """`bash_call_reply`, its content naming the upstream call (a reply asked anew is told apart)."""
    reply = json.loads(bash_call_reply(request).content)
    reply["choices"][0]["message"]["content"] += f" (call {number})"
    return httpx.Response(200, json=reply)


def live_rows(database: str) -> int:
    """The ``arc_running`` rows whose lease is not past."""
    with psycopg.connect(database) as connection:
        row = connection.execute("SELECT count(*) FROM arc_running WHERE until > now()").fetchone()
    return int(row[0]) if row else 0


async def until(condition: Any) -> None:
    """Until ``condition()`` holds (looked at every 10 ms; the test's own timeout guards a hang)."""
    while not condition():
        await asyncio.sleep(0.01)


def retry_while_running(database: str, first_fails: bool) -> tuple[Any, ...]:
    """Two in-process instances on ``database``; the first request sent to the first one, its upstream call held;
    the client's retry of it sent to the second meanwhile; once the retry waits (or asked the upstream), the first
    call answered (a 500 when ``first_fails``). (The first's reply or error, the retry's, both instances' stats,
    the upstream calls, the order of events.)"""
    calls: list[int] = []
    order: list[str] = []
    release: list[asyncio.Event] = []

    async def upstream(request: Any) -> Any:
        calls.append(1)
        number = len(calls)
        order.append(f"asked {number}")
        if number == 1:
            await release[0].wait()
            order.append("first answered")
            if first_fails:
                return httpx.Response(500, json={"error": "the upstream failed"})
        return numbered_reply(request, number)

    async def scenario() -> tuple[Any, ...]:
        release.append(asyncio.Event())
        (one, one_client), (other, other_client) = (in_process_shared(database, upstream) for _ in range(2))
        try:
            first = asyncio.ensure_future(one.complete(first_request(), None))
            await until(lambda: calls)  # the first attempt waits on the upstream (its reads, and its row, done)
            retry = asyncio.ensure_future(other.complete(first_request(), None, retry=True))
            # the retry waits for it (before: it forked and asked the upstream again at once)
            await until(lambda: len(calls) > 1 or other.retries_waiting)
            release[0].set()
            results = await asyncio.gather(first, retry, return_exceptions=True)
            return (*results, one.stats(), other.stats())
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    return (*asyncio.run(scenario()), calls, order)


@pytest.mark.parametrize("first_fails", [False, True])
def test_a_retry_on_another_instance_while_the_first_attempt_runs_waits_for_it(postgres: Any,
                                                                               first_fails: bool) -> None:
    """Two instances on one database, the upstream slow to answer the first attempt (sent to the first instance): the
    client's retry of it sent to the second instance meanwhile forked the conversation and asked the upstream again
    (only the instance running an attempt knew of it). Now the retry waits for the first attempt (its row in
    arc_running), then sends its reply: one upstream call, one conversation, no fork. When the first attempt fails,
    the retry then runs itself (its upstream call after the first one's failure)."""
    database = postgres.create_database(f"arc_test_running_elsewhere_{int(first_fails)}")
    first, retry, one_stats, other_stats, calls, order = retry_while_running(database, first_fails)
    if first_fails:
        assert getattr(first, "status", None) == 500, first
        assert order == ["asked 1", "first answered", "asked 2"], order  # the retry ran after the first failed
        assert retry.completion["choices"][0]["message"]["content"].endswith("(call 2)")
        assert other_stats["client_retries_answered"] == 0
    else:
        assert len(calls) == 1, f"the retry asked the upstream again: {order}"
        assert retry.completion == first.completion and retry.conversation == first.conversation
        assert (retry.hidden_rounds, retry.view_tokens) == (first.hidden_rounds, first.view_tokens)
        assert other_stats["client_retries_answered"] == 1
    assert one_stats["forks_at_commit"] == other_stats["forks_at_commit"] == 0
    assert other_stats["client_retries_waited_elsewhere"] == 1
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks").fetchone() == (1,)  # nothing forked or copied
        assert connection.execute("SELECT count(*) FROM arc_running").fetchone() == (0,)  # each removed at its end


def test_a_retry_on_another_instance_waits_through_pgbouncer_in_transaction_mode(postgres: Any) -> None:
    """The same through PgBouncer in transaction mode (the row's insert rides the reads' pipeline, its implicit
    transaction): the retry waits, one upstream call, one conversation."""
    from tests.deployment import PgBouncer, require_pgbouncer

    require_pgbouncer()
    postgres.create_database("arc_test_running_pgbouncer")
    bouncer = PgBouncer.start(postgres, pool_size=2)
    try:
        first, retry, _, other_stats, calls, order = retry_while_running(
            bouncer.url("arc_test_running_pgbouncer"), False)
    finally:
        bouncer.stop()
    assert len(calls) == 1, f"the retry asked the upstream again: {order}"
    assert retry.completion == first.completion and retry.conversation == first.conversation
    assert other_stats["client_retries_waited_elsewhere"] == 1 and other_stats["client_retries_answered"] == 1


def test_the_rows_of_dead_instances_are_swept_by_a_running_one(postgres: Any) -> None:
    """An instance killed mid-request never removes its row: any instance renewing its own leases removes the rows
    whose lease is past by a minute (and leaves the others, and those another sweep holds: two sweeps never wait
    for each other). It renews the attempts it runs, not every row of its own: one whose removal failed runs out
    (review h67)."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase

    database = postgres.create_database("arc_test_running_swept")
    db = AsyncDatabase(database)
    db.check_schema()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("INSERT INTO arc_running VALUES ('dead', 'a', 'gone', now() - interval '2 minutes'),"
                           " ('recent', 'b', 'gone', now() - interval '10 seconds'),"
                           " ('mine', 'c', 'here', now() + interval '1 second'),"
                           " ('other', 'd', 'there', now() + interval '1 second'),"
                           " ('unremoved', 'e', 'here', now() + interval '1 second')")  # its removal failed

    async def renew() -> None:
        try:
            await db.renew_running("here", ["c"], 30.0)
        finally:
            await db.close()

    with psycopg.connect(database) as holder:  # another instance's sweep holds this dead row: it is left to it
        holder.execute("SELECT 1 FROM arc_running WHERE asked = 'dead' FOR UPDATE")
        ended = threading.Timer(10, holder.rollback)  # (a sweep that waited for it: not for ever)
        ended.start()
        asyncio.run(renew())
        ended.cancel()
        holder.rollback()
    with psycopg.connect(database) as connection:
        rows = dict(connection.execute("SELECT asked, until > now() + interval '20 seconds' FROM arc_running"
                                       ).fetchall())
    assert rows == {"dead": False, "recent": False, "mine": True, "other": False, "unremoved": False}, rows
    db = AsyncDatabase(database)
    db.check_schema()
    asyncio.run(renew())  # the next sweep takes it
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_running WHERE asked = 'dead'").fetchone() == (0,)


def test_a_retry_claims_its_request_only_while_no_attempt_of_it_runs(postgres: Any, monkeypatch: Any) -> None:
    """`AsyncDatabase.claim_running`: a retry's row is written only while no row of its request has a live lease (a
    dead attempt's row does not count; another request's neither), and a claim held up by another claim of the same
    request that never ends (its instance stopped mid-transaction) is a look that found a row, not a failure (that
    retry would then run, and fork): the lock's wait is cut (5 s; 100 ms here)."""
    from arc_ref.persist import postgres_conversations
    from arc_ref.persist.postgres_conversations import CLAIM_KEY, AsyncDatabase, RunningMarker

    monkeypatch.setattr(postgres_conversations, "COMMIT_LOCK_TIMEOUT", "100ms")
    database = postgres.create_database("arc_test_running_claims")
    db = AsyncDatabase(database)
    db.check_schema()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("INSERT INTO arc_running VALUES ('req', 'dead', 'gone', now() - interval '1 second')")

    def marker(asked: str, attempt: str) -> Any:
        return RunningMarker(asked, attempt, "here", 30.0)

    async def claims() -> list[Any]:
        try:
            first, second, elsewhere = marker("req", "1"), marker("req", "2"), marker("other", "3")
            seen = [await db.claim_running(first), first.held, await db.claim_running(second), second.held,
                    await db.claim_running(elsewhere)]
            stuck = marker("stuck", "4")
            with psycopg.connect(database) as holder:  # a claim of "stuck" whose COMMIT never comes
                holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext('stuck'))", (CLAIM_KEY,))
                ended = threading.Timer(10, holder.rollback)  # (a claim that waits for it with no limit: not for ever)
                ended.start()
                seen.append(await db.claim_running(stuck))
                ended.cancel()
                holder.rollback()
            seen.append(await db.claim_running(stuck))
            return seen
        finally:
            await db.close()

    assert asyncio.run(claims()) == [True, True, False, False, True, False, True]
    with psycopg.connect(database) as connection:
        rows = connection.execute("SELECT asked, attempt FROM arc_running WHERE until > now() ORDER BY asked").fetchall()
    assert rows == [("other", "3"), ("req", "1"), ("stuck", "4")]


def test_a_first_attempt_longer_than_the_lease_still_holds_the_retry(postgres: Any) -> None:
    """The first attempt's instance renews its lease while the attempt runs: a retry on another instance waits past
    the lease (here 1.5 s, three renewals) for as long as the attempt runs, and gets its reply."""
    database = postgres.create_database("arc_test_running_renewed")
    calls: list[int] = []
    release: list[asyncio.Event] = []

    async def upstream(request: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            await release[0].wait()
        return numbered_reply(request, len(calls))

    async def scenario() -> tuple[Any, ...]:
        release.append(asyncio.Event())
        (one, one_client), (other, other_client) = (in_process_shared(database, upstream, running_lease_s=1.5)
                                                    for _ in range(2))
        try:
            first = asyncio.ensure_future(one.complete(first_request(), None))
            await until(lambda: calls)
            renewed = getattr(one, "leases_renewed", 0)
            retry = asyncio.ensure_future(other.complete(first_request(), None, retry=True))
            await until(lambda: len(calls) > 1 or other.retries_waiting)
            # a lease's time passes, and more, while the retry waits: renewed three times since it came
            await until(lambda: len(calls) > 1 or getattr(one, "leases_renewed", 0) >= renewed + 3)
            release[0].set()
            return await first, await retry, other.stats()
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    first, retry, other_stats = asyncio.run(scenario())
    assert len(calls) == 1, "the retry stopped waiting while the first attempt ran, and asked the upstream again"
    assert retry.completion == first.completion and other_stats["client_retries_answered"] == 1


def test_a_request_that_is_not_a_retry_is_not_held_by_a_running_attempt(postgres: Any, monkeypatch: Any) -> None:
    """The same request without the retry header, sent to another instance while the first attempt runs (its row in
    arc_running live), does not wait for it: it runs at once and commits in place, and the first attempt, committing
    after it, is committed as a fork (as before arc_running; two agents that start alike are two requests). The
    first attempt's row stays until that fork's commit (review h67: removed by the in-place commit that found the
    head moved, a retry waiting for it would have run before its reply was committed)."""
    from arc_ref.persist.postgres_conversations import RequestTransaction

    database = postgres.create_database("arc_test_running_not_a_retry")
    calls: list[int] = []
    release: list[asyncio.Event] = []
    at_fork: list[int] = []  # the live arc_running rows when a commit becomes a fork's
    write = RequestTransaction._write

    async def fork_written(self: Any, connection: Any) -> None:
        if self.forked_at_commit:
            at_fork.append(await asyncio.to_thread(live_rows, database))
        await write(self, connection)

    monkeypatch.setattr(RequestTransaction, "_write", fork_written)

    async def upstream(request: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the first attempt of the continued request
            await release[0].wait()
        return numbered_reply(request, len(calls))

    async def scenario() -> tuple[Any, ...]:
        release.append(asyncio.Event())
        (one, one_client), (other, other_client) = (in_process_shared(database, upstream) for _ in range(2))
        try:
            later = continued(await one.complete(first_request(), None), "a.txt")
            first = asyncio.ensure_future(one.complete(later, None))
            await until(lambda: len(calls) == 2)
            running = await asyncio.to_thread(live_rows, database)  # the first attempt's row, live
            again = await asyncio.wait_for(other.complete(later, None), 60)  # not held: the first is still held
            still_running = not first.done()
            release[0].set()
            return await first, again, running, still_running, one.stats(), other.stats()
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    first, again, running, still_running, one_stats, other_stats = asyncio.run(scenario())
    assert running == 1 and still_running
    assert other_stats["client_retries_waited_elsewhere"] == 0 and other_stats["forks_at_commit"] == 0
    assert one_stats["forks_at_commit"] == 1 and first.conversation != again.conversation
    assert at_fork == [1]  # the first attempt's row, live until its fork is committed
    assert len(calls) == 3
    assert live_rows(database) == 0


@contextlib.contextmanager
def hanging_upstream() -> Iterator[tuple[str, threading.Event]]:
    """An upstream that answers no chat request until the event is set (then 500); its base URL and the event."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    stop = threading.Event()

    async def chat(request: Request) -> JSONResponse:
        while not stop.is_set():
            await asyncio.sleep(0.05)
        return JSONResponse({"error": "stopped"}, status_code=500)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"])])
    try:
        with serve_app(app) as base_url:
            yield base_url, stop
            stop.set()
    finally:
        stop.set()


PROXY_PROCESS = """
import json, sys
import uvicorn
from arc_ref.frontends.proxy import ProxySettings
from arc_ref.frontends.proxy_app import build_app
given = json.loads(sys.argv[1])
port = given.pop("port")
uvicorn.run(build_app(ProxySettings(**given)), host="127.0.0.1", port=port, log_level="warning")
"""


def test_a_retry_after_the_first_attempts_instance_was_killed_runs_once_its_lease_is_past(postgres: Any,
                                                                                          tmp_path: Path) -> None:
    """The instance running the first attempt killed (kill -9) mid-request: its arc_running row stays, never renewed
    nor removed; a retry on another instance waits for it only until its lease (here 3 s) is past, then runs."""
    from tests.deployment import free_port
    from tests.waiting import http_ok, wait_until

    database = postgres.create_database("arc_test_running_killed")
    calls: list[int] = []

    def upstream(request: Any) -> Any:
        calls.append(1)
        return numbered_reply(request, len(calls))

    async def retry_elsewhere(other: Any, client: Any) -> tuple[Any, Any]:
        try:
            reply = await asyncio.wait_for(other.complete(first_request(), None, retry=True), 120)
            return reply, other.stats()
        finally:
            await other.close()
            await client.aclose()

    other, client = in_process_shared(database, upstream)  # ready before the kill: the retry comes right after it
    with hanging_upstream() as (upstream_url, _):
        port = free_port()
        settings = {"port": port, "upstream": upstream_url, "tokenizer": f"hf-dir:{QWEN3}", "overrides": BUDGETS,
                    "context_limit": 16384, "database": database, "running_lease_s": 3.0}
        log = open(tmp_path / "proxy.log", "wb")
        process = subprocess.Popen([sys.executable, "-c", PROXY_PROCESS, json.dumps(settings)], cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT)
        log.close()
        sent: list[Any] = []
        try:
            wait_until(http_ok(f"http://127.0.0.1:{port}/health"), process, "the first proxy instance")
            sender = threading.Thread(target=lambda: sent.append(_post_quietly(f"http://127.0.0.1:{port}/v1")))
            sender.start()
            try:
                wait_until(lambda: _live_rows_or_none(database) == 1, process, "the first attempt's arc_running row",
                           base_s=60.0)
                with psycopg.connect(database) as connection:  # its lease is the instance's (review h67: not 15 s)
                    lease = connection.execute("SELECT until - now() <= interval '3 seconds' FROM arc_running"
                                               ).fetchone()
            finally:
                process.kill()  # kill -9, mid-request
                process.wait()
            reply, stats = asyncio.run(retry_elsewhere(other, client))
            sender.join(60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert lease == (True,)
    assert stats["client_retries_waited_elsewhere"] == 1  # it waited for the dead instance's attempt
    assert len(calls) == 1 and reply.completion["choices"][0]["message"]["content"].endswith("(call 1)")
    assert stats["client_retries_answered"] == 0 and live_rows(database) == 0
    assert sent and sent[0] is None  # the first attempt's client saw its connection cut


def dead_attempt(connection: Any, proxy: Any) -> str:
    """The row of `first_request`'s attempt on a killed instance (a lease of an hour, never renewed); its digest."""
    from arc_ref.frontends.proxy import AskedRequest, parse_request
    from arc_ref.frontends.proxy_shared import asked_digest

    hashes = parse_request(first_request(), None, proxy.known)[3]
    asked = asked_digest(AskedRequest.of(hashes, first_request()))
    connection.execute("INSERT INTO arc_running VALUES (%s, 'dead', 'killed', now() + interval '1 hour')", (asked,))
    return asked


def test_of_the_retries_waiting_for_a_dead_attempt_only_one_runs_when_its_lease_is_past(postgres: Any) -> None:
    """Review h58 F4: the instance running the first attempt killed, its row stays until its lease passes; the
    client's retries on two other instances both wait for it, and when the lease passed both ran: the upstream was
    asked twice for the same view and a second conversation was left. Now the first to find no live row claims the
    request (its own row, written in the same transaction as the look) and runs; the other waits for it, then gets
    its reply. The dead instance's row is written here (a lease of an hour, never renewed) and its lease made to
    pass once both retries wait. So that no timing decides it, each retry, once it stopped waiting, goes on to its
    reply lookup only after the other one too stopped waiting, or after the other looked again and still waits."""
    database = postgres.create_database("arc_test_running_one_retry_runs")
    calls: list[int] = []

    def upstream(request: Any) -> Any:
        calls.append(1)
        return numbered_reply(request, len(calls))

    async def scenario() -> tuple[Any, ...]:
        (one, one_client), (other, other_client) = (in_process_shared(database, upstream) for _ in range(2))
        stopped_waiting: list[str] = []

        def held_after_waiting(proxy: Any, peer: Any) -> None:
            answered_before = proxy._answered_before

            async def held(asked: Any) -> Any:
                stopped_waiting.append("me")
                looked = peer.database.round_trips
                await until(lambda: len(stopped_waiting) == 2 or (peer.database.round_trips > looked
                                                                   and peer.retries_waiting == 1))
                return await answered_before(asked)

            proxy._answered_before = held

        held_after_waiting(one, other)
        held_after_waiting(other, one)
        try:
            with psycopg.connect(database, autocommit=True) as connection:  # the killed instance's attempt
                asked = dead_attempt(connection, one)
                retries = [asyncio.ensure_future(proxy.complete(first_request(), None, retry=True))
                           for proxy in (one, other)]
                await asyncio.wait_for(until(lambda: one.retries_waiting == other.retries_waiting == 1), 60)
                connection.execute("UPDATE arc_running SET until = now() WHERE attempt = 'dead'")  # its lease passed
                replies = await asyncio.wait_for(asyncio.gather(*retries), 60)
            return (*replies, one.stats(), other.stats())
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    first, second, one_stats, other_stats = asyncio.run(scenario())
    assert len(calls) == 1, "both retries ran once the dead attempt's lease was past"
    assert first.completion == second.completion and first.conversation == second.conversation
    assert one_stats["client_retries_answered"] + other_stats["client_retries_answered"] == 1
    assert one_stats["client_retries_waited_elsewhere"] == other_stats["client_retries_waited_elsewhere"] == 1
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks").fetchone() == (1,)  # no second conversation
    assert live_rows(database) == 0  # the claim's row went with its commit, the other's with its reply


def test_a_retry_whose_client_left_gives_up_instead_of_asking_and_lets_the_next_one_run(postgres: Any) -> None:
    """Review h58 F4 (its second suggestion): a client's retry whose client left (its own timeout) while it waited
    for a dead attempt stops waiting (499 client_gone), without asking the upstream; the client's next retry, on
    another instance, runs it once the dead attempt's lease is past: one upstream call. A retry whose client left
    before it claimed a request no attempt ran gives up alike once it claimed it, the claim let go at once: the next
    retry of it runs. (Before, each ran and asked the upstream for a reply only a later retry could read.) The
    client's presence is the HTTP server's `CLIENT_LEFT` probe, set here for each retry."""
    from arc_ref.frontends.proxy import CLIENT_LEFT

    database = postgres.create_database("arc_test_running_retry_client_left")
    calls: list[int] = []
    gone = [False]

    def upstream(request: Any) -> Any:
        calls.append(1)
        return numbered_reply(request, len(calls))

    async def left() -> bool:
        return gone[0]

    async def still_there() -> bool:
        return False

    async def retried(proxy: Any, body: dict[str, Any], probe: Any) -> Any:
        CLIENT_LEFT.set(probe)  # (this task's context only)
        try:
            return await proxy.complete(body, None, retry=True)
        except Exception as problem:  # noqa: BLE001 - the 499 expected
            return problem

    async def scenario() -> tuple[Any, ...]:
        (one, one_client), (other, other_client) = (in_process_shared(database, upstream) for _ in range(2))
        try:
            with psycopg.connect(database, autocommit=True) as connection:  # the killed instance's attempt
                asked = dead_attempt(connection, one)
                abandoned = asyncio.ensure_future(retried(one, first_request(), left))
                await asyncio.wait_for(until(lambda: one.retries_waiting == 1), 60)
                gone[0] = True  # its client's timeout: it stops waiting (the dead attempt's lease not past yet)
                given_up = await asyncio.wait_for(abandoned, 60)
                waiting_then = one.retries_waiting
                kept = asyncio.ensure_future(retried(other, first_request(), still_there))
                await asyncio.wait_for(until(lambda: other.retries_waiting == 1), 60)
                connection.execute("UPDATE arc_running SET until = now() WHERE attempt = 'dead'")  # its lease passed
                replies = [given_up, waiting_then, await asyncio.wait_for(kept, 60)]
            asked_before = len(calls)
            terse = {**first_request(), "messages": [{"role": "system", "content": "You are terse."},
                                                     {"role": "user", "content": "Go."}]}
            unclaimed = await retried(one, terse, left)  # no attempt of it runs: claimed at once, then let go
            rows_then = await asyncio.to_thread(live_rows, database)
            next_one = await retried(other, terse, still_there)
            return (*replies, asked_before, unclaimed, rows_then, next_one)
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    abandoned, waiting, kept, asked_before, unclaimed, rows_then, next_one = asyncio.run(scenario())
    assert (getattr(abandoned, "status", None), getattr(abandoned, "code", None)) == (499, "client_gone"), abandoned
    assert waiting == 0
    assert kept.completion["choices"][0]["message"]["content"].endswith("(call 1)") and asked_before == 1
    assert (getattr(unclaimed, "status", None), getattr(unclaimed, "code", None)) == (499, "client_gone"), unclaimed
    assert rows_then == 0  # its claim let go
    assert next_one.completion["choices"][0]["message"]["content"].endswith("(call 2)") and len(calls) == 2
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks").fetchone() == (2,)
    assert live_rows(database) == 0


def _post_quietly(base_url: str) -> Any:
    """The first request sent to ``base_url``; None when its connection is cut (the instance killed)."""
    try:
        return httpx.post(f"{base_url}/chat/completions", json=first_request(), timeout=120)
    except httpx.TransportError:
        return None


def _live_rows_or_none(database: str) -> int | None:
    try:
        return live_rows(database)
    except psycopg.Error:  # no such table (an arc-ref before arc_running)
        return None


def test_a_role_that_cannot_make_arc_running_still_serves_saying_so_once(postgres: Any,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A database made before arc_running and a role that may write ARC's tables but create none: the instance starts
    without it, one warning line saying so, serves, and a retry that reaches another instance while the first attempt
    runs forks, as before the table."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase

    database = postgres.create_database("arc_test_running_no_table")
    AsyncDatabase(database).check_schema()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("DROP TABLE arc_running")
        connection.execute("CREATE ROLE arc_no_running LOGIN")
        connection.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        connection.execute("GRANT SELECT, INSERT, UPDATE ON arc_tasks, arc_replies TO arc_no_running;"
                           " GRANT SELECT, INSERT ON arc_events, arc_marks, arc_meta TO arc_no_running")
    limited = database.replace("arc@", "arc_no_running@")
    calls: list[int] = []
    release: list[asyncio.Event] = []

    async def upstream(request: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            await release[0].wait()
        return numbered_reply(request, len(calls))

    async def scenario() -> tuple[Any, ...]:
        release.append(asyncio.Event())
        (one, one_client), (other, other_client) = (in_process_shared(limited, upstream) for _ in range(2))
        try:
            first = asyncio.ensure_future(one.complete(first_request(), None))
            await until(lambda: calls)
            retry = await asyncio.wait_for(other.complete(first_request(), None, retry=True), 60)  # not held
            release[0].set()
            return await first, retry, other.stats()
        finally:
            for proxy, client in ((one, one_client), (other, other_client)):
                await proxy.close()
                await client.aclose()

    first, retry, stats = asyncio.run(scenario())
    assert len(calls) == 2 and retry.conversation != first.conversation  # as before arc_running
    assert stats["client_retries_waited_elsewhere"] == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "arc_running" in line]
    assert len(warned) == 2 and all("cannot create the table arc_running" in line for line in warned), warned  # one
    # line per instance started


def test_arc_running_dropped_while_the_proxy_runs_costs_no_request(postgres: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """arc_running dropped while the instance runs: the requests go on (their reads and commits without the row),
    one warning line, and a retry no longer waits."""
    database = postgres.create_database("arc_test_running_dropped")

    async def scenario() -> tuple[Any, ...]:
        proxy, client = in_process_shared(database, bash_call_reply)
        try:
            first = await proxy.complete(first_request(), None)
            with psycopg.connect(database, autocommit=True) as connection:
                connection.execute("DROP TABLE arc_running")
            later = await proxy.complete(continued(first, "a.txt"), None)  # its reads without the row, then its commit
            other = await proxy.complete({**first_request(), "messages": [
                {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Go."}]}, None)
            again = await proxy.complete(continued(first, "a.txt"), None, retry=True)
            return first, later, other, again, proxy
        finally:
            await proxy.close()
            await client.aclose()

    first, later, other, again, proxy = asyncio.run(scenario())
    assert later.conversation == first.conversation and other.conversation != first.conversation
    assert again.completion == later.completion  # the retry: the kept reply, as before
    assert not proxy.database.running and proxy.database.running_lost
    assert capsys.readouterr().err.count("arc_running cannot be written any more") == 1


def test_another_tables_error_is_not_taken_for_arc_runnings_loss(postgres: Any,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Only an error whose primary message names arc_running says the table is lost (review h73): a core table
    missing (arc_marks dropped here) fails the request (500 store_failed) with the running rows still on, and no
    warning about arc_running; the server's errors about a table whose name begins alike, or about another table in
    a statement whose quoted line also names arc_running, are not arc_running's either."""
    from arc_ref.persist.postgres_conversations import names_running

    database = postgres.create_database("arc_test_running_other_table")

    async def scenario() -> tuple[Any, Any]:
        proxy, client = in_process_shared(database, bash_call_reply)
        try:
            with psycopg.connect(database, autocommit=True) as connection:
                connection.execute("DROP TABLE arc_marks CASCADE")
            try:
                await proxy.complete(first_request(), None)
                return "answered", proxy
            except Exception as problem:  # noqa: BLE001 - the 500 expected
                return problem, proxy
        finally:
            await proxy.close()
            await client.aclose()

    failed, proxy = asyncio.run(scenario())
    assert (getattr(failed, "status", None), getattr(failed, "code", None)) == (500, "store_failed"), failed
    assert proxy.database.running and not proxy.database.running_lost
    assert "arc_running" not in capsys.readouterr().err
    named = []
    with psycopg.connect(database, autocommit=True) as connection:
        for statement in ("SELECT 1 FROM arc_running_gone", "SELECT 1\nFROM arc_marks_gone, arc_running",
                          "DROP TABLE arc_running", "SELECT 1 FROM arc_running"):
            try:
                connection.execute(statement)
                named.append("no error")
            except psycopg.errors.UndefinedTable as problem:
                named.append(names_running(problem))
    assert named == [False, False, "no error", True]


def test_a_request_marks_its_attempt_in_its_first_round_trip_and_removes_it_in_its_commit(postgres: Any) -> None:
    """The row costs a request no round trip: written with its reads, removed in its commit's transaction (a request
    resumed in place whose upstream failed after its events, a fork, one committed in place: the round trips of an
    instance without arc_running; review h67: the one in place was not counted); a request that ends with nothing to
    commit (its upstream failed before its first event) removes it with one of its own. The table is unlogged: its
    rows cost no flush to disk."""
    failing = [False]

    def upstream(request: Any) -> Any:
        if failing[0]:
            return httpx.Response(500, json={"error": "down"})
        return bash_call_reply(request)

    async def scenario(database: str, running: bool) -> list[int]:
        proxy, client = in_process_shared(database, upstream)
        proxy.database.running = proxy.database.running and running  # False: as without the table
        trips = []
        try:
            failing[0] = False
            first = await proxy.complete(first_request(), None)
            later = continued(first, "a.txt")
            before = proxy.database.round_trips
            failed = continued(await proxy.complete(later, None), "b.txt")  # in place
            trips.append(proxy.database.round_trips - before)
            failing[0] = True
            for request in (failed, failed):  # its tool output committed, then nothing new
                before = proxy.database.round_trips
                with pytest.raises(Exception):
                    await proxy.complete(request, None)
                trips.append(proxy.database.round_trips - before)
            failing[0] = False
            for request in (first_request(), later):  # a fork (its rows read), one in place
                before = proxy.database.round_trips
                await proxy.complete({**request, "temperature": 0.5}, None)
                trips.append(proxy.database.round_trips - before)
            assert not proxy._dropping  # (each removal of a row kept only while it runs)
            return trips
        finally:
            await proxy.close()
            await client.aclose()

    without = asyncio.run(scenario(postgres.create_database("arc_test_running_trips_without"), False))
    database = postgres.create_database("arc_test_running_trips")
    marked = asyncio.run(scenario(database, True))
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_running").fetchone() == (0,)
        assert connection.execute("SELECT relpersistence FROM pg_class WHERE relname = 'arc_running'").fetchone() == (
            "u",)
    assert marked == [without[0], without[1], without[2] + 1, *without[3:]], (marked, without)


def test_the_running_rows_statements_lose_the_table_quietly_and_say_any_other_failure(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`AsyncDatabase.claim_running`, `renew_running` and `drop_running` (review h67: only the reads' and the commit's
    loss of arc_running had a test). Another failure of their statement (a trigger refuses it here) is the caller's
    StoreError: a renewal that failed is said and tried again, a row whose removal failed runs out. arc_running
    dropped while instances run: each of them, the first to meet it, notes the table lost (one warning line) and
    goes on (a claim is then granted: the retry runs as before the table); once lost, none costs a round trip."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase, RunningMarker
    from arc_ref.persist.store import StoreError

    database = postgres.create_database("arc_test_running_lost_or_failed")
    databases = [AsyncDatabase(database) for _ in range(3)]
    for db in databases:
        db.check_schema()
    marker = RunningMarker("req", "1", "here", 30.0)

    async def scenario() -> list[Any]:
        claimer, renewer, dropper = databases
        seen: list[Any] = []
        try:
            seen.append(await claimer.claim_running(marker))
            with psycopg.connect(database, autocommit=True) as connection:
                connection.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                                   " $$BEGIN RAISE EXCEPTION 'arc_running: refused by the test'; END$$")
                connection.execute("CREATE TRIGGER refuse BEFORE UPDATE OR DELETE ON arc_running"
                                   " FOR EACH ROW EXECUTE FUNCTION refuse()")
            for failing in (renewer.renew_running("here", ["1"], 30.0), dropper.drop_running(marker)):
                try:
                    await failing
                    seen.append("no error")
                except StoreError as problem:
                    seen.append("refused by the test" in str(problem))
            seen.append(marker.held)  # (its removal failed: as far as this instance knows, it is there)
            with psycopg.connect(database, autocommit=True) as connection:
                connection.execute("DROP TABLE arc_running")
            await renewer.renew_running("here", ["1"], 30.0)  # no error: the table lost
            await dropper.drop_running(marker)
            seen.append(await claimer.claim_running(RunningMarker("req", "2", "here", 30.0)))
            seen.append([(db.running, db.running_lost) for db in databases])
            trips = [db.round_trips for db in databases]
            seen.append(await claimer.claim_running(RunningMarker("req", "3", "here", 30.0)))
            await renewer.renew_running("here", ["1"], 30.0)
            await dropper.drop_running(marker)
            seen.append([db.round_trips for db in databases] == trips)  # lost: no round trip
            claimer.lose_running(Exception("arc_running: met again by another request"))  # said once
            return seen
        finally:
            for db in databases:
                await db.close()

    assert asyncio.run(scenario()) == [True, True, True, True, True, [(False, True)] * 3, True, True]
    warned = [line for line in capsys.readouterr().err.splitlines() if "arc_running cannot be written" in line]
    assert len(warned) == 3, warned  # one line per instance


def test_a_running_row_is_written_again_by_the_next_attempt_and_removed_alone(postgres: Any) -> None:
    """`RequestTransaction.begin`'s row: the next attempt of a request (after a database failure) writes it again,
    its lease from now, even when the first one's lease passed meanwhile (an outage longer than a lease: renewal
    failed); `AsyncDatabase.drop_running` removes only that attempt's row, not another attempt's of the same request
    (two agents' identical requests run at once) (review h67: neither had a test)."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase, RequestTransaction, RunningMarker

    database = postgres.create_database("arc_test_running_rewritten")
    db = AsyncDatabase(database)
    db.check_schema()
    marker = RunningMarker("req", "1", "here", 30.0)

    async def attempt() -> None:
        async with db.connection() as connection:
            transaction = RequestTransaction(db, connection)
            transaction.running = marker
            await transaction.begin(["a-hash"], None)

    def rows() -> list[tuple[str, bool]]:
        with psycopg.connect(database) as connection:
            return [(attempt, live) for attempt, live in connection.execute(
                "SELECT attempt, until > now() FROM arc_running ORDER BY attempt").fetchall()]

    async def scenario() -> list[Any]:
        try:
            await attempt()
            with psycopg.connect(database, autocommit=True) as connection:
                connection.execute("UPDATE arc_running SET until = now() - interval '1 second'")  # its lease past
            seen: list[Any] = [rows()]
            await attempt()  # the next attempt after a failure
            seen.append(rows())
            with psycopg.connect(database, autocommit=True) as connection:  # another agent's identical request
                connection.execute("INSERT INTO arc_running VALUES ('req', '2', 'there', now() + interval '1 minute')")
            await db.drop_running(marker)
            seen.append(rows())
            return seen
        finally:
            await db.close()

    assert asyncio.run(scenario()) == [[("1", False)], [("1", True)], [("2", True)]]


def test_without_arc_running_a_retry_on_the_same_instance_still_waits_and_an_identical_request_does_not(
        postgres: Any) -> None:
    """One instance whose database has no arc_running (a role that cannot make it, or the table lost): the wait for
    an attempt on this instance is its own (`_attempt_of`; review h67: with the table there the claim waited too,
    so nothing showed it). A client's retry while the first attempt runs waits for it and gets its reply; the same
    request without the header runs at once (agents that start alike), and so does a retry of another request (its
    other parameters); a first attempt that fails lets one retry run,
    and a later retry of the same request waits for that one; the gauge of waiting retries ends at 0."""
    database = postgres.create_database("arc_test_running_local_waits")
    calls: list[str] = []
    release: dict[int, asyncio.Event] = {}

    async def upstream(request: Any) -> Any:
        number = len(calls) + 1
        calls.append(f"asked {number}")
        if number in release:
            await release[number].wait()
        if number == 4:  # the first attempt of the second request fails
            return httpx.Response(500, json={"error": "the upstream failed"})
        return numbered_reply(request, number)

    async def scenario() -> tuple[Any, ...]:
        for number in (1, 4, 5):
            release[number] = asyncio.Event()
        proxy, client = in_process_shared(database, upstream)
        proxy.database.running = False  # as without arc_running
        try:
            first = asyncio.ensure_future(proxy.complete(first_request(), None))
            await until(lambda: calls)
            retry = asyncio.ensure_future(proxy.complete(first_request(), None, retry=True))
            await until(lambda: len(calls) > 1 or proxy.retries_waiting)
            alike = await asyncio.wait_for(proxy.complete(first_request(), None), 60)  # not held, not a retry
            # a retry of another request (its other parameters) is not held by it either
            other = await asyncio.wait_for(proxy.complete({**first_request(), "temperature": 0.7}, None, retry=True),
                                           20)
            held = (not first.done(), not retry.done(), proxy.retries_waiting)
            release[1].set()
            replies = [await first, await retry, alike]
            later = continued(replies[0], "a.txt")
            failing = asyncio.ensure_future(proxy.complete(later, None))
            await until(lambda: len(calls) == 4)
            retried = asyncio.ensure_future(proxy.complete(later, None, retry=True))
            await until(lambda: len(calls) > 4 or proxy.retries_waiting)
            release[4].set()
            await until(lambda: len(calls) == 5)  # the first retry runs (held upstream)
            retried_again = asyncio.ensure_future(proxy.complete(later, None, retry=True))
            await until(lambda: len(calls) > 5 or proxy.retries_waiting)
            release[5].set()
            results = await asyncio.gather(failing, retried, retried_again, return_exceptions=True)
            answered = proxy.retries_answered
            # a retry of a request never answered, of the same last message as one answered here: not its reply
            unanswered = await proxy.complete({**first_request(), "temperature": 0.3}, None, retry=True)
            assert unanswered.completion != other.completion and proxy.retries_answered == answered
            return (*replies, held, *results, proxy.retries_waiting, answered, other)
        finally:
            await proxy.close()
            await client.aclose()

    first, retry, alike, held, failed, retried, retried_again, waiting, answered, other = asyncio.run(scenario())
    assert held == (True, True, 1)
    assert retry.completion == first.completion and retry.conversation == first.conversation
    assert first.conversation not in (alike.conversation, other.conversation)
    assert getattr(failed, "status", None) == 500, failed
    assert retried_again.completion == retried.completion and retried_again.conversation == retried.conversation
    assert calls == ["asked 1", "asked 2", "asked 3", "asked 4", "asked 5", "asked 6"], calls
    assert (waiting, answered) == (0, 2)


def test_arc_running_dropped_while_a_request_runs_costs_it_nothing(postgres: Any, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """arc_running dropped between a request's reads (its row written) and its commit (review h67: only a drop
    before the reads had a test): its commit in place, whose statement removes the row, fails on the missing table;
    it is made again without the row, in place, the reply sent; one warning line; and so for a new conversation's
    commit on another instance (another statement removes the row there). Each commit is tried twice, no more: the
    commit notes the loss itself (review h73: a commit that did not tried again and again, thousands of failing
    round trips, until the lease renewal's next round noted it, seconds later; the leases here are renewed never)."""
    from arc_ref.persist.postgres_conversations import RequestTransaction

    database = postgres.create_database("arc_test_running_dropped_mid_request")
    release: list[asyncio.Event] = []
    calls: list[int] = []
    tries: list[tuple[int, str]] = []  # (the transaction, the commit's statement tried)

    def counted(name: str) -> Any:
        original = getattr(RequestTransaction, name)

        async def tried(self: Any, connection: Any) -> Any:
            tries.append((id(self), name))
            if sum(one == id(self) for one, _ in tries) > 2:  # (a loop that never ends: stopped here, not hung)
                raise AssertionError(f"a commit tried {name} {len(tries)} times")
            return await original(self, connection)
        return tried

    for name in ("_move_head", "_write"):
        monkeypatch.setattr(RequestTransaction, name, counted(name))

    async def upstream(request: Any) -> Any:
        calls.append(1)
        if len(calls) in (2, 3):
            await release[-1].wait()
        return numbered_reply(request, len(calls))

    async def held(proxy: Any, body: dict[str, Any]) -> Any:
        release.append(asyncio.Event())
        asked = len(calls)
        request = asyncio.ensure_future(proxy.complete(body, None))
        await until(lambda: len(calls) > asked)
        await asyncio.to_thread(_drop_running, database)
        release[-1].set()
        return await request

    async def scenario() -> tuple[Any, ...]:
        (one, one_client), (another, another_client) = (in_process_shared(database, upstream, running_lease_s=3600.0)
                                                        for _ in range(2))
        try:
            first = await one.complete(first_request(), None)
            later = await held(one, continued(first, "a.txt"))  # in place
            await asyncio.to_thread(AsyncDatabase(database).check_schema)  # made again (a proxy started meanwhile)
            other = await held(another, {**first_request(), "messages": [
                {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Go."}]})  # new
            return first, later, other, [(proxy.database.running, proxy.database.running_lost, proxy.store_retries)
                                         for proxy in (one, another)]
        finally:
            for proxy, client in ((one, one_client), (another, another_client)):
                await proxy.close()
                await client.aclose()

    from arc_ref.persist.postgres_conversations import AsyncDatabase

    first, later, other, lost = asyncio.run(scenario())
    assert later.conversation == first.conversation and other.conversation != first.conversation
    assert later.completion["choices"][0]["message"]["content"].endswith("(call 2)")
    assert other.completion["choices"][0]["message"]["content"].endswith("(call 3)")
    assert lost == [(False, True, 0), (False, True, 0)]  # made again at once, not tried again as after an outage
    assert capsys.readouterr().err.count("arc_running cannot be written any more") == 2  # one line per instance
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks").fetchone() == (2,)
    assert [name for _, name in tries] == ["_write", "_move_head", "_move_head", "_write", "_write"], tries


def _drop_running(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS arc_running")


def test_a_request_cancelled_again_while_its_row_is_removed_still_removes_it(postgres: Any) -> None:
    """A request cut while it runs (its client gone, or a second signal stopping the proxy at once) with nothing to
    commit: its row is removed by a statement of its own, which goes on when the request is cancelled again while
    it waits for it (review h67: a removal cancelled with the request would leave the row live for a whole lease,
    holding a retry elsewhere). The removal is held up here by a lock on the row, then let go."""
    database = postgres.create_database("arc_test_running_cancelled")
    calls: list[int] = []
    mode = ["answer"]

    async def upstream(request: Any) -> Any:
        calls.append(1)
        if mode[0] == "fail":
            return httpx.Response(500, json={"error": "down"})
        if mode[0] == "hang":
            await asyncio.Event().wait()
        return bash_call_reply(request)

    async def scenario() -> tuple[Any, ...]:
        proxy, client = in_process_shared(database, upstream)
        try:
            first = await proxy.complete(first_request(), None)
            later = continued(first, "a.txt")
            failed = continued(await proxy.complete(later, None), "b.txt")
            mode[0] = "fail"
            with contextlib.suppress(Exception):
                await proxy.complete(failed, None)  # its tool output committed: sent again, nothing new
            mode[0] = "hang"
            asked = len(calls)
            request = asyncio.ensure_future(proxy.complete(failed, None))
            await until(lambda: len(calls) > asked)
            with psycopg.connect(database) as holder:  # the row locked: its removal waits
                holder.execute("SELECT 1 FROM arc_running FOR UPDATE")
                request.cancel()
                await until(lambda: proxy._dropping)
                while not await asyncio.to_thread(_waiting_for_a_lock, database):  # the removal's DELETE is there
                    await asyncio.sleep(0.01)
                request.cancel()  # cancelled again while it waits for the removal
                with contextlib.suppress(asyncio.CancelledError):
                    await request
                removals = list(proxy._dropping)
                holder.rollback()
            await asyncio.wait_for(asyncio.gather(*removals, return_exceptions=True), 60)
            return await asyncio.to_thread(live_rows, database), request.cancelled()
        finally:
            await proxy.close()
            await client.aclose()

    rows, cancelled = asyncio.run(scenario())
    assert cancelled and rows == 0


def _waiting_for_a_lock(database: str) -> bool:
    """Whether a statement on ``database`` waits for a lock now."""
    with psycopg.connect(database) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                 " AND wait_event_type = 'Lock'").fetchone()
    return bool(row and row[0])
