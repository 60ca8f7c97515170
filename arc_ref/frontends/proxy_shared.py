"""`arc-ref proxy --store postgresql://...`: many proxy instances, one database; any instance serves any request of
any conversation (issue 30 item 2).

The request path is the one-process proxy's (`arc_ref.frontends.proxy.Proxy._run`: the same events, views, hidden rounds
and replies), on a conversation whose state this instance holds in a bounded cache and whose rows, marks and head
live in the database (`arc_ref.persist.postgres_conversations`). A request reads its conversation (the head, and
the rows other instances appended since this instance last saw it) on a pooled connection and gives the connection
back before the upstream is asked: no connection and no lock is held while the model answers. At the end one
transaction commits the request's events and marks, before the reply is sent: in place when the conversation's
head is still the row the request began at, else (another request of it, on any instance, committed first) as a
fork at the mark the request began at, whose views and ids are the same. For the same requests the ids and views
are those of one process: the state is the fold of the same events, and which instance folds them does not matter.

The database unreachable or restarting: nothing of that request is kept; it is tried again from the start (a new
connection) until ``store_retry_s`` (15 s) has passed since the failure, so that a restart of the database
costs the agent time, not a failed step (a stream that has begun cannot turn into a 503 any more); then 503 with a
typed body (``store_unavailable``; clients retry) and ``retry-after``. The upstream is not asked again for what it
answered: the core is deterministic and the failed transaction left nothing, so the attempt shows the upstream the
same views, and each view it answered gets its reply again (`RequestAttempts`). A commit cut by the failure may have
been made by the server: the next attempt first reads the conversation's head, and when it holds the request's rows
the reply is sent as it was. A connection the server refuses for good (`StoreRefused`) is 500 at once. A
conversation this instance never saw is folded from its rows (its cost: benchmarks/bench_many_proxies.py).

A client's retry of a request (the OpenAI SDK's ``x-stainless-retry-count``) gets the reply its first attempt
committed, on any instance (`_answered_before`), and waits for that attempt while it runs: on this instance by
`_attempt_of`, on another by its row in ``arc_running`` (`_marked`, `_wait_elsewhere`): written in the request's
first round trip, removed in its commit's transaction (or, when it ends without a commit, by one more statement),
its lease renewed by the instance every third of ``running_lease_s`` (15 s) while it runs, so that the row of an
instance killed mid-request holds a retry no longer than that. The first attempt failed: the retry runs itself,
once it claimed the request (its own row, written only while no other runs), so that of several retries waiting
for one attempt one runs and the others wait for it. A retry whose client left meanwhile (its timeout: its next
retry comes, or none) gives up instead of running, its claim let go for the next one (review h58 F4: an abandoned
retry asked the upstream for a reply nobody would read unless a later retry came).
A request that is not a retry never waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import sys
import time
import uuid
from collections import OrderedDict
from typing import Any, AsyncIterator, Callable, Sequence

import attrs

from arc_ref.config import Config
from arc_ref.errors import ArcError
from arc_ref.machine import ArcState, Event, Output, init, step
from arc_ref.persist.postgres import StoreUnavailable, event_row_line
from arc_ref.persist.postgres_conversations import (
    IDLE_CONNECTION_S,
    AsyncDatabase,
    CachedConversation,
    ConversationGone,
    Found,
    RequestTransaction,
    RunningMarker,
)
from arc_ref.persist.errors import StoreIncompatible
from arc_ref.persist.rows import fold_rows
from arc_ref.persist.store import GENESIS, StoreCorrupt, StoreError
from arc_ref.frontends.proxy import (
    CLIENT_LEFT,
    AgentMessage,
    AskedRequest,
    Failed,
    Mark,
    Proxy,
    ProxySettings,
    Refused,
    Reply,
    RoundRecord,
    UpstreamReply,
    parse_request,
    view_digest,
)
from arc_ref.frontends.proxy_metrics import Exposition
from arc_ref.trace import config_line, encode_config_line

SEEN_HASHES_PER_CONVERSATION = 64  # the local hash -> conversation index keeps this many hashes per cached state


STORE_RETRY_AFTER_S = 5  # the 503's retry-after, as the file store's
FORGOTTEN_RETRIES = 3  # a request whose conversation `arc-ref forget` removed while it ran is tried again this often
RUNNING_POLL_S = (0.05, 0.5)  # a retry waiting for its first attempt on another instance looks again after 50 ms,
#                              doubling up to 500 ms (`SharedProxy._wait_elsewhere`)


def store_failed(problem: StoreError) -> Failed:
    """The database failed the request: 503 ``store_unavailable`` with ``retry-after`` when it is unavailable, 500
    ``store_failed`` when it refuses the connection for good or refuses the rows."""
    if isinstance(problem, StoreUnavailable):
        return Failed(503, "store_unavailable", str(problem), retry_after=STORE_RETRY_AFTER_S)
    return Failed(500, "store_failed", str(problem))


AnsweredRound = tuple[str, UpstreamReply]  # a round's view (its `view_digest`, as /arc/rounds gives it) and its reply


# a commit a failure cut: (key, head row, its checksum, the reply, the state, what it made: RequestTransaction.made)
Committing = tuple[str, int, str, Reply, ArcState, str | None]


class ConversationSetAside(ArcError):
    """The conversation ``key`` a request matched holds intact rows this arc-ref refuses (`StoreIncompatible`: another
    arc-ref version, tokenizer or chat template wrote them): set aside by this instance, the request matched again
    without it, as `arc-ref proxy --store DIR` does (review h75 F4)."""

    def __init__(self, key: str, problem: StoreIncompatible) -> None:
        super().__init__(str(problem))
        self.key = key


@attrs.define
class RequestAttempts:
    """What one request keeps across its attempts when the database fails it (`SharedProxy.complete`): the views it
    asked the upstream (their digests: a 503'd request's are kept for minutes, review h13 MINOR-3) and the replies
    (an attempt that asks the same view in the same round gets the reply, not a second generation), and the commit
    a failure cut (its conversation, head row and checksum, reply and state)."""

    request: AskedRequest  # what a client's retry of it repeats (`SharedProxy._answered_before`)
    running: RunningMarker | None = None  # its row in arc_running while it runs (`SharedProxy._marked`)
    answered: list[AnsweredRound] = attrs.field(factory=list)
    asked: int = 0  # the rounds this attempt asked so far
    began: bool = False  # this attempt's reads were answered and it asked the upstream anew: work the outage cut
    committing: Committing | None = None  # a commit a failure cut: looked for by the next attempt
    records: list[RoundRecord] = attrs.field(factory=list)  # the upstream calls of every attempt (GET /arc/rounds)


class SharedConversation:
    """The conversation as `Proxy._run` sees it, for one request: events go through the core and into the
    request's transaction (written at its commit)."""

    def __init__(self, transaction: RequestTransaction, state: ArcState, attempts: RequestAttempts) -> None:
        self.transaction = transaction
        self.state = state
        self.attempts = attempts
        self.lock = asyncio.Lock()  # one request per SharedConversation: never contended
        self.marked: list[str] = []  # the chain hashes it marked (the same)

    @property
    def key(self) -> str:
        return self.transaction.key

    @property
    def position(self) -> int:
        return self.transaction.position

    @position.setter
    def position(self, value: int) -> None:
        self.transaction.position = value

    @property
    def head(self) -> str:
        return self.transaction.head

    @property
    def seq(self) -> int:
        return self.transaction.seq

    def apply(self, event: Event) -> Output:
        line = event_row_line(event)
        self.state, output = step(self.state, event)  # ArcError: nothing kept
        self.transaction.append(line)
        return output

    def mark(self, chain_hash: str) -> Mark:
        self.transaction.mark(chain_hash)
        self.marked.append(chain_hash)
        return Mark(self.position, self.seq, None, chain_hash)


class SeenHashes:
    """This instance's memory of which conversation passed which hash (bounded): it names, before the first round
    trip, the conversation a request most likely continues, so that its new rows come back in that trip."""

    def __init__(self, limit: int, config: Callable[[str, str, list[dict[str, Any]]], Config]) -> None:
        self.limit = limit
        self.keys: OrderedDict[str, str] = OrderedDict()
        self.config = config  # a conversation's configuration, as one process makes it (`Conversations.config`)

    def add(self, chain_hash: str, conversation: Any, mark: Mark) -> None:
        self.keys[chain_hash] = conversation.key
        self.keys.move_to_end(chain_hash)
        while len(self.keys) > self.limit:
            self.keys.popitem(last=False)

    def deepest(self, hashes: list[str]) -> str | None:
        for chain_hash in reversed(hashes):
            key = self.keys.get(chain_hash)
            if key is not None:
                return key
        return None

    def close(self) -> None:
        self.keys.clear()


class SharedProxy(Proxy):
    """`Proxy` with its conversations in PostgreSQL (see the module doc)."""

    def __init__(self, settings: ProxySettings, client: Any, database: AsyncDatabase | None = None) -> None:
        assert settings.database is not None
        super().__init__(ProxySettings(**{**_fields(settings), "store": None}), client)
        # a request's transaction lasts one round trip (its commit): one idle for a minute is a stuck instance's
        self.database = database or AsyncDatabase(settings.database, pool_size=settings.db_connections,
                                                  idle_in_transaction_s=60.0)
        if not self.database.schema_checked:  # once, at start (created in an empty database); `arc-ref proxy`
            self.database.check_schema()  # checked it before listening (review h58 F3: a second look could fail)
        self.cache: OrderedDict[str, CachedConversation] = OrderedDict()
        self.cache_limit = max(1, settings.cache_conversations)
        self.seen = SeenHashes(self.cache_limit * SEEN_HASHES_PER_CONVERSATION, self.conversations.config)
        self.conversations = self.seen  # type: ignore[assignment]  # `_run` records each mark through `add`
        self.folded_rows = 0  # rows this instance folded to catch up (conversations other instances advanced)
        self.store_retries = 0  # requests tried again while the database was unavailable
        self.answers_kept = 0  # upstream replies an attempt after a database failure did not ask again
        self.commits_found = 0  # commits cut by a failure that the server had made
        self.forks_at_commit = 0  # requests committed as a fork: another request moved their conversation meanwhile
        self.set_aside: dict[str, str] = {}  # conversations whose intact rows this arc-ref refuses: why
        self._connection_sweeper: asyncio.Task[None] | None = None
        # the latest replies of this instance by their request's last message: (request, conversation, head row,
        # its checksum, reply)
        self.last_replies: OrderedDict[tuple[str, str], tuple[AskedRequest, str, int, str, Reply]] = OrderedDict()
        self.retries_answered = 0  # clients' retries answered with the reply they had missed
        # the requests running on this instance, by their last message, for a client's retry of one (`_attempt_of`)
        self.running_requests: dict[tuple[str, str], tuple[AskedRequest, asyncio.Future[None]]] = {}
        self.retries_waiting = 0  # clients' retries waiting now for their first attempt (on any instance)
        self.retries_waited = 0  # clients' retries that waited for their first attempt running on another instance
        # this instance's name in arc_running (`RunningMarker`), and the requests it runs now, by their attempt id:
        # their leases are renewed while they run (`_renew_leases`)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.markers: dict[str, RunningMarker] = {}
        self.leases_renewed = 0  # rounds of `_renew_leases` that renewed some
        self._lease_renewer: asyncio.Task[None] | None = None
        self._dropping: set[asyncio.Task[None]] = set()  # removals of arc_running rows under way
        if self.database.running_missing is not None:
            print(f"arc-ref proxy: warning: the database {self.database.shown}: {self.database.running_missing}; a"
                  " client's retry that reaches another instance while its first attempt runs forks the conversation"
                  " (grant the role CREATE and rights on arc_running, or start one instance with the role that owns"
                  " ARC's tables)", file=sys.stderr, flush=True)
        self._told_replies_lost = False
        # the upstream's replies of requests answered 503 (the database down too long), by their last message
        self.unsent_replies: OrderedDict[tuple[str, str], tuple[AskedRequest, list[AnsweredRound], float,
                                                                 Committing | None,
                                                                 list[RoundRecord]]] = OrderedDict()

    def stats(self) -> dict[str, int]:
        """This instance's counters since it started (GET /arc/stats): its cache, what catching up and the
        database's failures cost, the forks its commits made, its connections."""
        return {"upstream_calls_logged": len(self.rounds), "conversations_cached": len(self.cache),
                "rows_folded": self.folded_rows, "store_retries": self.store_retries,
                "upstream_replies_kept": self.answers_kept, "cut_commits_found": self.commits_found,
                "forks_at_commit": self.forks_at_commit, "client_retries_answered": self.retries_answered,
                "client_retries_waited_elsewhere": self.retries_waited,
                "database_round_trips": self.database.round_trips,
                "database_connections_idle": self.database.idle_connections,
                "database_connections_max": self.database.pool_size,
                "counts_differing": self.counts_differing}  # (review h34: absent here, the warning says it counts)

    def write_store_metrics(self, out: Exposition) -> None:
        """GET /metrics: those of `stats` that are this instance's own (its cache, its catch-up, the database's
        failures, its connections)."""
        out.gauge("arc_conversations_in_memory", "Conversation states this instance caches", len(self.cache))
        out.counter("arc_rows_folded_total", "Rows this instance folded to catch up with conversations other instances"
                    " advanced (or forks it made)", self.folded_rows)
        out.counter("arc_store_retries_total", "Attempts of requests tried again while the database was unavailable",
                    self.store_retries)
        out.counter("arc_upstream_replies_kept_total", "Upstream replies an attempt after a database failure did not"
                    " ask again", self.answers_kept)
        out.counter("arc_cut_commits_found_total", "Commits cut by a database failure that the server had made",
                    self.commits_found)
        out.counter("arc_forks_at_commit_total", "Requests committed as a fork: another request moved their"
                    " conversation meanwhile", self.forks_at_commit)
        out.counter("arc_client_retries_waited_elsewhere_total", "Clients' retries that waited for their first"
                    " attempt running on another instance (its arc_running row)", self.retries_waited)
        out.gauge("arc_client_retries_waiting", "Clients' retries on this instance waiting now for their first"
                  " attempt (on this instance or another)", self.retries_waiting)
        out.counter("arc_database_round_trips_total", "Round trips to the database", self.database.round_trips)
        out.gauge("arc_database_connections_idle", "Idle connections in this instance's pool",
                  self.database.idle_connections)
        out.gauge("arc_database_connections_max", "The pool's size (--db-connections)", self.database.pool_size)

    async def close(self) -> None:
        for task in (self._connection_sweeper, self._lease_renewer):
            if task is not None:
                task.cancel()
        self.fork_copies.shutdown(wait=False)
        self.large_work.shutdown(wait=False)
        await self.database.close()

    async def _sweep_connections(self) -> None:
        """From the first request on: connections idle a minute go back to the server (a burst's, most often)."""
        while True:
            await asyncio.sleep(IDLE_CONNECTION_S / 4)
            try:
                await self.database.close_idle(IDLE_CONNECTION_S)
            except Exception as problem:  # noqa: BLE001 - the sweep goes on; the next one tries again
                print(f"arc-ref proxy: closing idle database connections failed: {problem!r}", file=sys.stderr)

    async def _renew_leases(self) -> None:
        """From the first request on: the leases of the requests this instance runs (their ``arc_running`` rows),
        renewed every third of a lease, so that a retry on another instance waits for as long as one runs, and no
        longer than a lease once this instance died; with them, the rows of dead instances swept."""
        lease_s = self.settings.running_lease_s
        failing = False
        while True:
            await asyncio.sleep(lease_s / 3)
            held = [attempt for attempt, marker in self.markers.items() if marker.held]
            if not held:
                continue
            try:
                await self.database.renew_running(self.instance, held, lease_s)
                self.leases_renewed += 1
                failing = False
            except StoreError as problem:  # the next round tries again; past the lease, retries elsewhere fork
                if not failing:
                    print(f"arc-ref proxy: renewing the running requests' leases failed: {problem}", file=sys.stderr,
                          flush=True)
                failing = True

    def _start_tasks(self) -> None:
        if self._connection_sweeper is None:
            self._connection_sweeper = asyncio.get_running_loop().create_task(self._sweep_connections())
        if self._lease_renewer is None and self.database.running:
            self._lease_renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    @contextlib.asynccontextmanager
    async def _marked(self, attempts: RequestAttempts) -> AsyncIterator[None]:
        """The request's running-attempt row (`RunningMarker`) while it runs: written with its first round trip (a
        client's retry's by its claim, `_wait_elsewhere`), removed with its commit, or here when it ends without
        one (failed, refused, cancelled, or a retry that found its reply: the removal goes on when the request is
        cancelled)."""
        marker = RunningMarker(asked_digest(attempts.request), uuid.uuid4().hex, self.instance,
                               self.settings.running_lease_s)
        attempts.running = marker
        self.markers[marker.attempt] = marker
        try:
            yield
        finally:
            del self.markers[marker.attempt]
            if marker.held:
                dropping = asyncio.get_running_loop().create_task(self._drop_marker(marker))
                self._dropping.add(dropping)
                dropping.add_done_callback(self._dropping.discard)
                await asyncio.shield(dropping)

    async def _drop_marker(self, marker: RunningMarker) -> None:
        try:
            await self.database.drop_running(marker)
        except StoreError:
            pass  # not renewed any more: its lease runs out

    async def _wait_elsewhere(self, attempts: RequestAttempts) -> bool:
        """A client's retry: while an attempt of the same request runs on another instance (its ``arc_running`` row,
        its lease not past; on any instance, but one on this instance `_attempt_of` waited for already), wait for
        it, looking again after 50 ms, then twice as long each time up to 500 ms (one round trip each; only retries
        look); no attempt running, the retry claims the request: its own row is written in the same transaction as
        the look, one claim of the request at a time (`AsyncDatabase.claim_running`), so that the other retries
        waiting for the same attempt now wait for this one (review h58 F4: when a dead attempt's lease passed, each
        of them ran and asked the upstream again). The claimed row is this attempt's (`_marked`): renewed while it
        runs, removed at its end. Its reply is then found as that of any answered request (`_answered_before`); an
        attempt that failed leaves none, and the retry runs itself. A first attempt whose instance died stops
        holding the retry when its lease is past (``running_lease_s``); the database unavailable, the retry goes
        on as any request does. False: the retry's client left while it waited (`client_left`): it stopped
        waiting, claiming nothing."""
        marker = attempts.running
        assert marker is not None
        delay, longest = RUNNING_POLL_S
        waited = False
        try:
            while not await self.database.claim_running(marker):
                if await client_left():
                    return False
                if not waited:
                    waited = True
                    self.retries_waited += 1
                    self.retries_waiting += 1
                await asyncio.sleep(delay)
                delay = min(longest, delay * 2)
        except StoreError:
            pass
        finally:
            if waited:
                self.retries_waiting -= 1
        return True

    async def complete(self, body: dict[str, Any], explicit: str | None, retry: bool = False) -> Reply:
        """One request: its reads, its rounds, its commit. The database unavailable (down, restarting): the request is
        tried again from the start (nothing of it was kept; what the upstream answered is not asked again,
        `RequestAttempts`) until ``store_retry_s`` has passed since the failure (an attempt that asked the upstream
        anew before it failed starts the time again; one whose replies were all kept does not, so that a commit
        that keeps failing ends), then answered 503, a commit the failure cut looked for a last time first; the
        replies of a request answered 503 are kept for the same request sent again (`_keep_unsent`). ``retry``: the
        client's retry of a request answered before, on any instance, gets that reply when the conversation's head is
        still the row the reply committed (`_answered_before`), after waiting for it when it still runs, on this
        instance (`_attempt_of`) or on another (`_wait_elsewhere`: each request's ``arc_running`` row while it runs,
        `_marked`); any other retry forks the conversation, as an edited request does; a retry whose client left
        (`client_left`) while it waited, or by the time it claimed the request, gives up (499 ``client_gone``)
        instead of asking the upstream, its claim let go for the next retry. A conversation
        `arc-ref forget` removed while the request ran (`ConversationGone`: nothing of it written): tried again at
        once, as a new conversation, up to `FORGOTTEN_RETRIES` times."""
        messages, tools, system, hashes, template_kwargs = parse_request(body, explicit, self.known)
        self._start_tasks()
        attempts = RequestAttempts(AskedRequest.of(hashes, body))
        async with self._attempt_of(attempts.request, retry):
            unsent = self.unsent_replies.get(_request_key(attempts.request))
            if unsent is not None and unsent[0] == attempts.request:  # a 503 kept these from the agent: not asked again
                del self.unsent_replies[_request_key(attempts.request)]  # (only this very request takes them, once)
                if time.monotonic() - unsent[2] <= UNSENT_KEPT_S:
                    attempts.answered, attempts.committing = unsent[1], unsent[3]  # a cut commit: looked for first
                    attempts.records = unsent[4]  # their upstream calls: named after the conversation this commits to
            async with self._marked(attempts):
                if retry and attempts.committing is None:  # (a commit a failure cut is looked for first, in the loop)
                    claimed = await self._wait_elsewhere(attempts)
                    if claimed:
                        answered = await self._answered_before(attempts.request)
                        if answered is not None:
                            return answered
                    if not claimed or await client_left():  # nobody to answer: its claim let go (`_marked`)
                        raise Failed(499, "client_gone", "the client left while its retry waited for another"
                                     " attempt of its request: the retry gave up before asking the upstream")
                return await self._tried(messages, tools, system, hashes, body, template_kwargs, attempts)

    async def _tried(self, messages: Sequence[AgentMessage], tools: list[dict[str, Any]], system: str,
                     hashes: list[str], body: dict[str, Any], template_kwargs: tuple[tuple[str, Any], ...],
                     attempts: RequestAttempts) -> Reply:
        """`complete`'s attempts: tried again from the start while the database is unavailable (and after `arc-ref
        forget` removed the conversation), then 503 or 500."""
        deadline: float | None = None
        delay = 0.1
        gone = 0
        while True:
            attempts.began = False
            try:
                if attempts.committing is not None:
                    reply = await self._commit_found(attempts)
                    if reply is not None:
                        return reply
                attempts.asked = 0
                return await self._complete_once(messages, tools, system, hashes, body, template_kwargs, attempts)
            except ConversationGone as problem:
                # `arc-ref forget` removed the conversation meanwhile; nothing of this attempt was written: the next
                # one finds no mark of it and starts a new conversation from the request's messages
                self.cache.pop(problem.key, None)
                attempts.committing = None
                gone += 1
                if gone > FORGOTTEN_RETRIES:  # forgotten again and again: the client's own retry may fare better
                    raise Failed(503, "store_unavailable", f"{problem}, {gone} times in a row; retry",
                                 retry_after=STORE_RETRY_AFTER_S) from None
                print(f"arc-ref proxy: {problem}: the request is tried again", file=sys.stderr, flush=True)
            except ConversationSetAside as problem:  # its requests start a new conversation from their history
                self.set_aside[problem.key] = " ".join(str(problem).split())
                self.cache.pop(problem.key, None)
                attempts.committing = None
                print(f"arc-ref proxy: conversation {problem.key} set aside (its requests start a new conversation):"
                      f" {self.set_aside[problem.key]}", file=sys.stderr, flush=True)
            except StoreUnavailable as problem:
                now = time.monotonic()
                if deadline is None or attempts.began:  # a new outage: one line for it, not one per attempt
                    deadline, delay = now + self.settings.store_retry_s, 0.1
                    print(f"arc-ref proxy: {problem}; the request is tried again for up to"
                          f" {self.settings.store_retry_s:g} s", file=sys.stderr, flush=True)
                if now + delay > deadline:
                    if attempts.committing is not None:  # a last look: the server may have made the commit
                        with contextlib.suppress(StoreError):
                            found = await self._commit_found(attempts)
                            if found is not None:
                                return found
                    print(f"arc-ref proxy: the database stayed unavailable for {self.settings.store_retry_s:g} s:"
                          " the request is answered 503", file=sys.stderr, flush=True)
                    self._keep_unsent(attempts)
                    raise store_failed(problem) from None
                await self.database.discard_idle()
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                self.store_retries += 1
            except StoreError as problem:
                print(f"arc-ref proxy: the database failed the request (500 store_failed): {problem}",
                      file=sys.stderr, flush=True)
                raise store_failed(problem) from None

    @contextlib.asynccontextmanager
    async def _attempt_of(self, asked: AskedRequest, retry: bool) -> AsyncIterator[None]:
        """A request while it runs on this instance, for a client's retry of it: a retry that arrives meanwhile (the
        client's timeout, a cut connection) waits for it, then gets its reply (`_answered_before`) or, when it
        failed, runs itself, rather than fork the conversation and ask the upstream again, as one process without
        PostgreSQL does (review h35 F4). A retry that reaches another instance waits there (`_wait_elsewhere`)."""
        key = _request_key(asked)
        running = self.running_requests.get(key)
        if retry and running is not None and running[0] == asked:
            self.retries_waiting += 1
            try:
                await asyncio.wait({running[1]})
            finally:
                self.retries_waiting -= 1
            running = self.running_requests.get(key)
        if running is not None:  # another request of the same last message runs (agents that start alike)
            yield
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.running_requests[key] = (asked, done)
        try:
            yield
        finally:
            del self.running_requests[key]
            done.set_result(None)

    def _keep_unsent(self, attempts: RequestAttempts) -> None:
        """The upstream's replies of a request answered 503, for the same request sent again (the agent's retry after
        the database is back): its rounds get them as an attempt's would, and a commit the failure cut is looked for
        first (review h13 MINOR-1; bounded; each used once)."""
        now = time.monotonic()
        while self.unsent_replies and now - next(iter(self.unsent_replies.values()))[2] > UNSENT_KEPT_S:
            self.unsent_replies.popitem(last=False)  # the oldest first: none waits past its use-by time
        if attempts.answered or attempts.committing is not None:
            key = _request_key(attempts.request)
            self.unsent_replies[key] = (attempts.request, attempts.answered, now, attempts.committing,
                                        attempts.records)
            self.unsent_replies.move_to_end(key)
            while len(self.unsent_replies) > self.cache_limit:
                self.unsent_replies.popitem(last=False)

    async def _answered_before(self, asked: AskedRequest) -> Reply | None:
        """A client's retry (the OpenAI SDK's ``x-stainless-retry-count``) of a request answered before: its reply,
        when the conversation the reply was committed to still has that row as its head (the first attempt's reply
        was committed but never received); else None (a fork, as before), and with the database unavailable. The
        reply is this instance's own (`_note_reply`) or, from another instance, the one kept with the commit
        (``arc_replies``, one round trip)."""
        kept = self.last_replies.get(_request_key(asked))
        try:
            if kept is not None and kept[0] == asked and await self.database.head(kept[1]) == (kept[2], kept[3]):
                self.retries_answered += 1
                return kept[4]
            # (a reply this instance sent may have been overtaken: another instance's, in the database, may be current)
            stored = await self.database.answered(asked.asked_at, asked_digest(asked))
        except StoreError:
            return None
        if stored is None:
            return None
        try:
            reply = stored_reply(stored[1], stored[0])
        except (ValueError, KeyError, TypeError):  # not a reply this arc-ref wrote: answered as any request is
            return None
        self.retries_answered += 1
        return reply

    def _note_reply(self, attempts: RequestAttempts, key: str, seq: int, checksum: str, reply: Reply) -> None:
        """Note the request's reply, committed at head row ``seq`` of conversation ``key``, for a client's retry of it
        (by the request's last message; bounded)."""
        asked_at = _request_key(attempts.request)
        self.last_replies[asked_at] = (attempts.request, key, seq, checksum, reply)
        self.last_replies.move_to_end(asked_at)
        while len(self.last_replies) > self.cache_limit:
            self.last_replies.popitem(last=False)

    async def _commit_found(self, attempts: RequestAttempts) -> Reply | None:
        """After a failure cut a commit: the reply when the server made it (the conversation's head is the row the
        commit wrote, with its checksum: the chain names every row before it), else None (ask again)."""
        assert attempts.committing is not None
        key, seq, checksum, reply, state, made = attempts.committing
        head = await self.database.head(key)
        attempts.committing = None
        if head != (seq, checksum):
            return None
        self.commits_found += 1
        self._count_made(made)
        if attempts.running is not None:
            attempts.running.held = False  # (its arc_running row went with that commit)
        _named_rounds(attempts, key)
        self._remember(CachedConversation(key, seq, checksum, state))
        self._note_reply(attempts, key, seq, checksum, reply)
        return reply

    def _log_round(self, conversation: Any, record: RoundRecord) -> None:
        super()._log_round(conversation, record)
        conversation.attempts.records.append(record)  # named after the conversation it commits to (`_named_rounds`)

    async def _upstream(self, conversation: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                        body: dict[str, Any], tokens: int, hidden: bool) -> UpstreamReply:
        """`Proxy._upstream`, but a round whose view an earlier attempt of this request asked in the same round gets
        the reply it had (the database failed that attempt; the upstream already answered this view)."""
        attempts: RequestAttempts = conversation.attempts
        round_number = attempts.asked
        attempts.asked += 1
        if round_number < len(attempts.answered):
            asked_view, reply = attempts.answered[round_number]
            if asked_view == view_digest(messages, tools):  # (only an attempt after a failure computes it here)
                self.answers_kept += 1
                return reply
            del attempts.answered[round_number:]
        attempts.began = True  # the database answered this attempt's reads, and it does new work
        reply = await super()._upstream(conversation, messages, tools, body, tokens, hidden)
        attempts.answered.append((attempts.records[-1].view_digest, reply))  # this round's (`_log_round`)
        return reply

    async def _complete_once(self, messages: Sequence[AgentMessage], tools: list[dict[str, Any]], system: str,
                             hashes: list[str], body: dict[str, Any], template_kwargs: tuple[tuple[str, Any], ...],
                             attempts: RequestAttempts) -> Reply:
        """One attempt: the reads on a connection given back before the upstream is asked, the rounds, then the
        commit on another (in place, or as a fork at the mark when another request moved the conversation
        meanwhile: the reply then names the fork)."""
        async with self.database.connection() as connection:
            transaction = RequestTransaction(self.database, connection)
            transaction.running = attempts.running
            expected_key = self.seen.deepest(hashes)
            expected = self.cache.get(expected_key) if expected_key is not None else None
            found, rows = await transaction.begin(hashes, expected, tuple(self.set_aside))
            transaction.connection = None  # given back: none is held while a state is folded or the upstream answers
        if found is None:
            state = await asyncio.to_thread(self._new_state, system, messages[0].text, tools, template_kwargs)
            line = encode_config_line(config_line(state.config))
            transaction.create(uuid.uuid4().hex, line, hashes[0])
            start = 1
        elif found.in_place:
            transaction.resume(found)
            state = await self._caught_up(transaction, found, expected, rows)
            start = found.mark_position
        else:  # it moved on (a retry of an answered request, an edited or regenerated message): fork
            state = await self._state_at_mark(transaction, found)
            transaction.fork(found, uuid.uuid4().hex)
            start = found.mark_position
        conversation = SharedConversation(transaction, state, attempts)
        try:
            reply = await self._run(conversation, messages[start:], hashes[start:], body)  # type: ignore[arg-type]
        except BaseException:  # a refusal or an upstream error keeps what was applied, as one process does
            if await transaction.commit():
                self._committed(transaction, conversation)
            raise
        if self.database.replies:  # for a client's retry on any instance
            asked = attempts.running.asked if attempts.running is not None else asked_digest(attempts.request)
            transaction.reply = (asked, reply_text(reply))  # (the digest its arc_running row has: computed once)
        try:
            await transaction.commit()
        except BaseException:  # a failure from here on may come after the server committed: the next attempt looks
            attempts.committing = (transaction.key, transaction.seq, transaction.checksum,
                                   self._named(reply, transaction), conversation.state, transaction.made)
            raise
        self._committed(transaction, conversation)
        if self.database.replies_lost and not self._told_replies_lost:
            self._told_replies_lost = True
            print(f"arc-ref proxy: warning: the database {self.database.shown}: {self.database.replies_missing}:"
                  " commits go on without their replies (a client's retry that reaches another instance forks);"
                  " restart the proxy to make the table again", file=sys.stderr, flush=True)
        reply = self._named(reply, transaction)
        self._note_reply(attempts, transaction.key, transaction.seq, transaction.checksum, reply)
        return reply

    def _committed(self, transaction: RequestTransaction, conversation: SharedConversation) -> None:
        """After a commit: this instance's copy of the state, and, for a request committed as a fork, its rounds
        and marks under the fork's key; a conversation it made counted (GET /metrics) once it is committed, not by
        each attempt of a request the database failed."""
        self._count_made(transaction.made)
        _named_rounds(conversation.attempts, transaction.key)
        if transaction.forked_at_commit:
            self.forks_at_commit += 1
            for chain_hash in conversation.marked:
                if chain_hash in self.seen.keys:
                    self.seen.keys[chain_hash] = transaction.key
        self._remember(CachedConversation(transaction.key, transaction.seq, transaction.checksum, conversation.state))

    def _count_made(self, made: str | None) -> None:
        """A conversation a commit made (`RequestTransaction.made`), for GET /metrics."""
        if made == "new":
            self.metrics.conversations_new += 1
        elif made == "fork":
            self.metrics.conversations_forked += 1

    @staticmethod
    def _named(reply: Reply, transaction: RequestTransaction) -> Reply:
        """The reply naming the conversation its request was committed to."""
        return reply if reply.conversation == transaction.key else attrs.evolve(reply, conversation=transaction.key)

    def _new_state(self, system: str, goal: str, tools: list[dict[str, Any]],
                   template_kwargs: tuple[tuple[str, Any], ...] = ()) -> ArcState:
        config = self._config(system, goal, tools, template_kwargs)
        try:
            return init(config)
        except ArcError as problem:  # K > L for this system prompt and goal, most often
            raise Refused("configuration", f"ARC cannot hold this conversation: {problem}") from None

    async def _caught_up(self, transaction: RequestTransaction, found: Found, expected: CachedConversation | None,
                         rows: list[tuple[int, str, str]]) -> ArcState:
        """The conversation's state at its head: this instance's copy with the rows other instances appended
        folded in (they came with the first round trip), or, for a conversation it does not hold, all its rows."""
        where = f"{self.database.shown}#{found.key}"
        if expected is not None and expected.key == found.key and expected.seq <= found.seq:
            try:
                state, seq, checksum = await asyncio.to_thread(fold_rows, expected.state, rows, where, expected.seq,
                                                               expected.checksum)
                if (seq, checksum) == (found.seq, found.checksum):
                    self.folded_rows += len(rows)
                    return state
            except StoreCorrupt:
                pass  # this copy is not of these rows (the database was restored?): fold them all below
        rows = await transaction.rows(found.key, 0, found.seq)
        try:
            state, seq, checksum = await asyncio.to_thread(fold_rows, None, rows, where, 0, GENESIS)
            if (seq, checksum) != (found.seq, found.checksum):
                raise StoreCorrupt(f"{where}: its rows end at row {seq}, its head names row {found.seq}")
        except StoreCorrupt as problem:
            await self._unless_gone(transaction, found.key)
            if isinstance(problem, StoreIncompatible):
                raise ConversationSetAside(found.key, problem) from None
            raise
        self.folded_rows += len(rows)
        return state

    async def _state_at_mark(self, transaction: RequestTransaction, found: Found) -> ArcState:
        where = f"{self.database.shown}#{found.key}"
        rows = await transaction.rows(found.key, 0, found.mark_seq)
        try:
            # a fork's fold: on the forks' own threads, the forks of one conversation one at a time (a burst never
            # takes the shared worker threads, nor delays the fork of another conversation by more than one copy)
            async with self.fork_turn(found.key):
                state, seq, checksum = await asyncio.get_running_loop().run_in_executor(
                    self.fork_copies, fold_rows, None, rows, where, 0, GENESIS)
            if (seq, checksum) != (found.mark_seq, found.mark_checksum):
                raise StoreCorrupt(f"{where}: the mark {found.mark_hash[:12]} names row {found.mark_seq} with"
                                   " another checksum than the rows hold")
        except StoreCorrupt as problem:
            await self._unless_gone(transaction, found.key)
            if isinstance(problem, StoreIncompatible):
                raise ConversationSetAside(found.key, problem) from None
            raise
        self.folded_rows += len(rows)
        return state

    async def _unless_gone(self, transaction: RequestTransaction, key: str) -> None:
        """ConversationGone when the rows read short because `arc-ref forget` removed the conversation after the mark
        was found (not a damaged store)."""
        if await transaction.gone(key):
            raise ConversationGone(self.database.shown, key)

    def _remember(self, cached: CachedConversation) -> None:
        self.cache[cached.key] = cached
        self.cache.move_to_end(cached.key)
        while len(self.cache) > self.cache_limit:
            self.cache.popitem(last=False)


UNSENT_KEPT_S = 600.0  # the replies of a request answered 503 wait this long for the same request


async def client_left() -> bool:
    """Whether this request's client has left (`CLIENT_LEFT`, set by the HTTP server; not known: False)."""
    probe = CLIENT_LEFT.get()
    if probe is None:
        return False
    try:
        return await probe()
    except Exception:  # noqa: BLE001 - not known: as a client still there
        return False


def _named_rounds(attempts: RequestAttempts, key: str) -> None:
    """The request's upstream calls, those of its failed attempts included (each attempt named a conversation it
    never committed), named after the conversation it committed to (review h14 C3)."""
    for record in attempts.records:
        record.conversation = key


def _request_key(asked: AskedRequest) -> tuple[str, str]:
    """Where a request's kept reply is found: its last message and its upstream credential (another client's
    request of the same messages never takes or drops it; review h13 MINOR-2)."""
    return asked.asked_at, asked.credential


def asked_digest(asked: AskedRequest) -> str:
    """The request as a client's retry repeats it (its last message's chain hash, its other members, its credential's
    digest), as one sha256 (``arc_replies.asked``): equal requests, equal digests."""
    text = json.dumps([asked.asked_at, asked.parameters, asked.credential], sort_keys=True, ensure_ascii=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def reply_text(reply: Reply) -> str:
    """The reply as ``arc_replies`` keeps it: JSON as UTF-8 text (review h16 NIT-2: in ASCII, a CJK reply took twice
    its size), or in ASCII when the upstream sent a lone surrogate, which UTF-8 cannot hold (json escapes NUL)."""
    kept = {"completion": reply.completion, "hidden_rounds": reply.hidden_rounds, "view_tokens": reply.view_tokens}
    text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    if _LONE_SURROGATE.search(text):
        return json.dumps(kept, ensure_ascii=True, separators=(",", ":"))
    return text


def stored_reply(text: str, conversation: str) -> Reply:
    """`reply_text` read back, naming the conversation it was committed to."""
    kept = json.loads(text)
    return Reply(kept["completion"], int(kept["hidden_rounds"]), int(kept["view_tokens"]), conversation)


def _fields(settings: ProxySettings) -> dict[str, Any]:
    return attrs.asdict(settings, recurse=False)


__all__ = ["RequestAttempts", "RoundRecord", "SharedProxy", "store_failed"]
