"""`arc-ref proxy --store postgresql://...`: many proxy instances, one database; any instance serves any request of
any conversation (issue 30 item 2).

The request path is the one-process proxy's (`arc_ref.frontends.proxy.Proxy._run`: the same events, views, hidden rounds
and replies), on a conversation whose state this instance holds in a bounded cache and whose rows, marks and head
live in the database (`arc_ref.persist.postgres_conversations`). Each request is one database transaction that
locks its conversation's head row for its whole duration (one request at a time goes on in place, across every
instance; another request for it forks it at its deepest committed mark instead of waiting), catches up from the
rows other instances appended, and commits the request's events and marks before the reply is sent. For the
same requests the ids and views are those of one process: the state is the fold of the same events, and which
instance folds them does not matter.

The database unreachable or restarting: nothing of that request is kept; it is tried again from the start (a new
connection, the upstream asked again) until ``store_retry_s`` (15 s) has passed, so that a restart of the database
costs the agent time, not a failed step (a stream that has begun cannot turn into a 503 any more); then 503 with a
typed body (``store_unavailable``; clients retry). A conversation this instance never saw is
folded from its rows (its cost: benchmarks/bench_many_proxies.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections import OrderedDict
from typing import Any, Callable, Sequence

from arc_ref.config import Config
from arc_ref.errors import ArcError
from arc_ref.machine import ArcState, Event, Output, init, step
from arc_ref.openai_wire import error_body
from arc_ref.persist.postgres import StoreUnavailable, event_row_line
from arc_ref.persist.postgres_conversations import (
    AsyncDatabase,
    CachedConversation,
    Found,
    RequestTransaction,
    fold_rows,
)
from arc_ref.persist.store import GENESIS, StoreCorrupt, StoreError
from arc_ref.frontends.proxy import (
    AgentMessage,
    Mark,
    Proxy,
    ProxySettings,
    Refused,
    Reply,
    RoundRecord,
    UpstreamError,
    parse_request,
)
from arc_ref.trace import config_line, encode_config_line

SEEN_HASHES_PER_CONVERSATION = 64  # the local hash -> conversation index keeps this many hashes per cached state


class StoreFailed(UpstreamError):
    """The database failed the request: 503 when it is unavailable (retry), 500 when its rows are refused."""

    def __init__(self, problem: StoreError) -> None:
        retry = isinstance(problem, StoreUnavailable)
        body = error_body(str(problem), "store_unavailable" if retry else "store_failed", 503 if retry else 500)
        super().__init__(503 if retry else 500, json.dumps(body).encode("utf-8"), "application/json")


class SharedConversation:
    """The conversation as `Proxy._run` sees it, for one request: events go through the core and into the
    request's transaction (written at its commit)."""

    def __init__(self, transaction: RequestTransaction, state: ArcState) -> None:
        self.transaction = transaction
        self.state = state
        self.lock = asyncio.Lock()  # the database's row lock serializes; this one is never contended

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
        # a request's transaction is idle while the upstream answers, each of its rounds: never longer than that
        idle = (settings.max_hidden_rounds + settings.max_read_rounds + 1) * settings.timeout_s + 60
        self.database = database or AsyncDatabase(settings.database, idle_in_transaction_s=idle)
        self.database.check_schema()  # once, at start (created in an empty database)
        self.cache: OrderedDict[str, CachedConversation] = OrderedDict()
        self.cache_limit = max(1, settings.cache_conversations)
        self.seen = SeenHashes(self.cache_limit * SEEN_HASHES_PER_CONVERSATION, self.conversations.config)
        self.conversations = self.seen  # type: ignore[assignment]  # `_run` records each mark through `add`
        self.folded_rows = 0  # rows this instance folded to catch up (conversations other instances advanced)
        self.store_retries = 0  # requests tried again while the database was unavailable

    async def close(self) -> None:
        self.fork_copies.shutdown(wait=False)
        await self.database.close()

    async def complete(self, body: dict[str, Any], explicit: str | None, retry: bool = False) -> Reply:
        """One request in one transaction. The database unavailable (down, restarting): the request is tried again
        from the start (nothing of it was kept) until ``store_retry_s`` has passed, then answered 503. ``retry`` is
        not used: on a database a retry of an answered request forks it, as an edited one does (one process keeps
        the latest reply of each conversation in memory, `Proxy.complete`)."""
        messages, tools, system, hashes, template_kwargs = parse_request(body, explicit, self.known)
        deadline = time.monotonic() + self.settings.store_retry_s
        delay = 0.1
        while True:
            try:
                return await self._complete_once(messages, tools, system, hashes, body, template_kwargs)
            except StoreUnavailable as problem:
                if time.monotonic() + delay > deadline:
                    raise StoreFailed(problem) from None
                print(f"arc-ref proxy: {problem}; the request is tried again in {delay:.1f} s", file=sys.stderr,
                      flush=True)
                await self.database.discard_idle()
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                self.store_retries += 1
            except StoreError as problem:
                raise StoreFailed(problem) from None

    async def _complete_once(self, messages: Sequence[AgentMessage], tools: list[dict[str, Any]], system: str,
                             hashes: list[str], body: dict[str, Any],
                             template_kwargs: tuple[tuple[str, Any], ...] = ()) -> Reply:
        async with self.database.connection() as connection:
            transaction = RequestTransaction(self.database, connection)
            expected_key = self.seen.deepest(hashes)
            expected = self.cache.get(expected_key) if expected_key is not None else None
            found, rows = await transaction.begin(hashes, expected)
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
            conversation = SharedConversation(transaction, state)
            try:
                reply = await self._run(conversation, messages[start:], hashes[start:], body)  # type: ignore[arg-type]
            finally:  # a refusal or an upstream error keeps what was applied, as one process does
                await transaction.commit()
                self._remember(CachedConversation(transaction.key, transaction.seq, transaction.checksum,
                                                  conversation.state))
            return reply

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
        state, seq, checksum = await asyncio.to_thread(fold_rows, None, rows, where, 0, GENESIS)
        if (seq, checksum) != (found.seq, found.checksum):
            raise StoreCorrupt(f"{where}: its rows end at row {seq}, its head names row {found.seq}")
        self.folded_rows += len(rows)
        return state

    async def _state_at_mark(self, transaction: RequestTransaction, found: Found) -> ArcState:
        where = f"{self.database.shown}#{found.key}"
        rows = await transaction.rows(found.key, 0, found.mark_seq)
        # a fork's fold: on the forks' own threads, the forks of one conversation one at a time (a burst never
        # takes the shared worker threads, nor delays the fork of another conversation by more than one copy)
        async with self.fork_turn(found.key):
            state, seq, checksum = await asyncio.get_running_loop().run_in_executor(
                self.fork_copies, fold_rows, None, rows, where, 0, GENESIS)
        if (seq, checksum) != (found.mark_seq, found.mark_checksum):
            raise StoreCorrupt(f"{where}: the mark {found.mark_hash[:12]} names row {found.mark_seq} with another"
                               " checksum than the rows hold")
        self.folded_rows += len(rows)
        return state

    def _remember(self, cached: CachedConversation) -> None:
        self.cache[cached.key] = cached
        self.cache.move_to_end(cached.key)
        while len(self.cache) > self.cache_limit:
            self.cache.popitem(last=False)


def _fields(settings: ProxySettings) -> dict[str, Any]:
    import attrs

    return attrs.asdict(settings, recurse=False)


__all__ = ["RoundRecord", "SharedProxy", "StoreFailed"]
