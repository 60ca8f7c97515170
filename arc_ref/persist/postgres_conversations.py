"""The proxy's conversations in PostgreSQL (issue 30 item 2): any instance serves any request of any conversation.

A conversation is a task of `arc_ref.persist.postgres` (its rows, its head) plus its marks in ``arc_marks``: the
proxy's hash chain over the agent's messages (`arc_ref.frontends.proxy.chain_next`), each mark naming the task, the agent
messages up to it (``position``), the rows then (``seq``) and the chained checksum of that row, which binds the
mark to the rows. The index is thus in the database with the same integrity rule as the rows.

A request holds no connection while the model answers it (an optimistic commit, `RequestTransaction`): it reads
the deepest known message of the request and that conversation's head without a lock (with, in the same round
trip, the rows of the conversation this instance expects, when it has seen it before), gives the connection back,
and folds what other instances appended since this instance last saw the conversation (catching up from its rows,
checked against the chain). The request's events and marks are kept in memory; at the end one transaction moves
the head from the row the request began at to its own (``UPDATE ... WHERE seq = base AND checksum = base``: the
row lock and the check in one statement) and writes the rows and marks before the reply is sent (nothing is
acknowledged before it is committed). When the head moved meanwhile (another request of the conversation, on any
instance, committed first), the request is committed as a fork at the mark it began at instead: its rows are the
same (the chain binds no task key), so are its views and ids. An instance killed mid-request leaves nothing of the
conversation: nothing of it was written before the commit, and PostgreSQL rolls back a transaction whose connection
closes. What a request writes before its commit is its row in ``arc_running`` (`RunningMarker`: a client's retry
that reaches another instance waits for the attempt it names), in the reads' round trip, in an unlogged table (no
flush to disk); the commit removes it in its own transaction, and the row of an instance killed mid-request is
ignored once its lease (renewed by the instance while the request runs) is past. Round trips per request: one to
read (one more to fold a conversation this instance never saw, or to fork), one to commit in place (one statement
moves the head and, only when it moved, writes the rows, marks and reply and removes the ``arc_running`` row;
COMMIT in the same round trip), one more when another request had moved the head or held it past the lock timeout
(committed as a fork, the failed transaction rolled back in the same round trip), one to commit a new conversation
or a fork; one more to remove the ``arc_running`` row of a request that ends without a commit. A client's retry
first claims its request (one round trip per look while another attempt of it runs: `AsyncDatabase.claim_running`),
its row then written by the claim.

The connections are `psycopg.AsyncConnection`s; a request holds one only while it reads and while it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Sequence

import attrs

from arc_ref.machine import ArcState
from arc_ref.persist.postgres import (
    CONNECT_TIMEOUT_S,
    DEFAULT_POOL_SIZE,
    Database,
    StoreUnavailable,
    _psycopg,
    _reads_as_closed,
    connect_failed,
    shown_url,
    store_error,
)
from arc_ref.persist.store import GENESIS, StoreCorrupt, StoreError, chain

if TYPE_CHECKING:
    import psycopg

FIND = """
SELECT t.key, t.seq, t.checksum, t.position, t.head, m.position, m.seq, m.checksum, m.hash
FROM arc_marks m JOIN arc_tasks t ON t.key = m.task
WHERE m.hash = ANY(%s) AND NOT t.key = ANY(%s)
ORDER BY m.position DESC, (t.position = m.position) DESC, m.added DESC
LIMIT 1
"""
"""The deepest mark among the request's hashes, as committed, in a conversation this instance has not set aside;
of the conversations that passed it, one still there (resumed in place) before the latest one added."""
_MOVED = """
WITH moved AS (
    UPDATE arc_tasks SET seq = %(seq)s, checksum = %(checksum)s, position = %(position)s, head = %(head)s{touch}
    WHERE key = %(key)s AND seq = %(base_seq)s AND checksum = %(base_checksum)s RETURNING key
), events AS (
    INSERT INTO arc_events (task, seq, line, checksum)
    SELECT moved.key, r.seq, r.line, r.checksum
    FROM moved, unnest(%(seqs)b::bigint[], %(lines)b::text[], %(checksums)b::text[]) AS r (seq, line, checksum)
), marks AS (
    INSERT INTO arc_marks (hash, task, position, seq, checksum)
    SELECT r.hash, moved.key, r.position, r.seq, r.checksum
    FROM moved, unnest(%(mark_hashes)b::text[], %(mark_positions)b::integer[], %(mark_seqs)b::bigint[],
                       %(mark_checksums)b::text[]) AS r (hash, position, seq, checksum)
)"""
_REPLACING_REPLY = ("ON CONFLICT (task) DO UPDATE SET seq = EXCLUDED.seq, checksum = EXCLUDED.checksum,"
                    " asked = EXCLUDED.asked, reply = EXCLUDED.reply")  # one row per conversation: its latest
_KEPT = f""", kept AS (
    INSERT INTO arc_replies (task, seq, checksum, asked, reply)
    SELECT moved.key, %(seq)s, %(checksum)s, %(asked)s, %(reply)s FROM moved {_REPLACING_REPLY}
)"""
_RAN = """, ran AS (
    DELETE FROM arc_running USING moved
    WHERE arc_running.asked = %(running_asked)s AND arc_running.attempt = %(running_attempt)s
)"""
TOUCHED = ", last_active = now()"  # (arc_tasks.last_active, `arc_ref.persist.postgres.LAST_ACTIVE`, when there)


@functools.cache
def move_head(touch: bool, reply: bool, running: bool) -> str:
    """A request's commit in place, in one statement: the conversation's head moved from the row the request began at
    to its own (locking the head row, waiting only for another request's commit, at most `COMMIT_LOCK_TIMEOUT`), and,
    only when that matched (in READ COMMITTED it matches nothing when another commit moved the head meanwhile), the
    request's rows, marks, reply (``reply``) and the removal of its ``arc_running`` row (``running``); the count of
    heads moved (1 or 0). ``touch``: ``last_active`` set too. Its arrays go in binary (``%(...)b``): psycopg writes an
    array's text form escaping each element in Python, seconds for an observation of megabytes."""
    return (_MOVED.format(touch=TOUCHED if touch else "") + (_KEPT if reply else "") + (_RAN if running else "")
            + "\nSELECT count(*) FROM moved")


COMMIT_LOCK_TIMEOUT = "5s"  # a head row locked longer than this (a stuck commit): the request forks instead

REPLY_OF = """
SELECT r.task, r.reply
FROM arc_marks m JOIN arc_replies r ON r.task = m.task
JOIN arc_tasks t ON t.key = r.task AND t.seq = r.seq AND t.checksum = r.checksum
WHERE m.hash = %s AND r.asked = %s
ORDER BY m.added DESC
LIMIT 1
"""
"""A conversation that passed the request's last message and whose head is still the row its reply to that request
was committed with (a client's retry of it gets that reply, `RequestTransaction.reply`)."""
KEEP_REPLY = f"INSERT INTO arc_replies VALUES (%s, %s, %s, %s, %s) {_REPLACING_REPLY}"

RUN = ("INSERT INTO arc_running (asked, attempt, instance, until) VALUES (%s, %s, %s, now() + %s * interval '1 second')"
       " ON CONFLICT (asked, attempt) DO UPDATE SET until = EXCLUDED.until")
"""A request's running-attempt row (`RunningMarker`), sent with its first round trip (`RequestTransaction.begin`);
written again, its lease renewed, by the next attempt after a database failure."""
RAN = "DELETE FROM arc_running WHERE asked = %s AND attempt = %s"
CLAIM_LOCK = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
"""A client's retry's claim (`CLAIM`) of request ``asked`` taken one at a time: a lock on the request for the claim's
transaction only (in the two-key space: never the schema's lock, `arc_ref.persist.postgres._SCHEMA_LOCK`)."""
CLAIM_KEY = 0x41524352  # CLAIM_LOCK's first key ("ARCR"): the second is the request's hash
CLAIM = ("INSERT INTO arc_running (asked, attempt, instance, until)"
         " SELECT %(asked)s, %(attempt)s, %(instance)s, now() + %(lease)s * interval '1 second'"
         " WHERE NOT EXISTS (SELECT 1 FROM arc_running WHERE asked = %(asked)s AND until > now()) RETURNING 1")
"""A client's retry's own running-attempt row, written only when no attempt of its request runs (no row of its
``asked`` whose lease is not past): run after `CLAIM_LOCK`, in a statement of its own, so that its snapshot sees the
row of the claim that held the lock before it (review h58 F4: two retries that waited for one dead attempt both
ran)."""
RENEW = ("UPDATE arc_running SET until = now() + %s * interval '1 second'"
         " WHERE instance = %s AND attempt = ANY(%s)")
SWEEP_RUNNING = ("DELETE FROM arc_running WHERE (asked, attempt) IN (SELECT asked, attempt FROM arc_running"
                 " WHERE until < now() - interval '1 minute' FOR UPDATE SKIP LOCKED)")
"""The rows of instances that died mid-request (their leases past a minute ago), removed by any running instance;
rows another instance's sweep holds are left to it (two sweeps never wait for each other: no deadlock)."""

IDLE_CONNECTION_S = 60.0  # a pooled connection idle this long is closed (`AsyncDatabase.close_idle`)
ROWS_AFTER = "SELECT seq, line, checksum FROM arc_events WHERE task = %s AND seq > %s AND seq <= %s ORDER BY seq"


_RUNNING_NAMED = re.compile(r"(?<![\w$])arc_running(?![\w$])")


def names_running(problem: Exception) -> bool:
    """Whether the server's error names ``arc_running`` as the table it is about: its primary message (``relation
    "arc_running" does not exist``, ``permission denied for table arc_running``), not the statement's line the
    server quotes after it (another table missing in a statement that also names arc_running), nor a table whose name
    only begins alike (review h73: any other table's error taken for arc_running's loss would turn the requests'
    marks off, and a commit would be tried again as long as it failed so)."""
    primary = getattr(getattr(problem, "diag", None), "message_primary", None)  # (the server's errors have one)
    return isinstance(primary, str) and _RUNNING_NAMED.search(primary) is not None


class ConversationGone(StoreError):
    """The conversation a request goes on from was removed (`arc-ref forget`) while the request ran: nothing of the
    request was written; tried again, it is a new conversation (`arc_ref.frontends.proxy_shared`)."""

    def __init__(self, shown: str, key: str) -> None:
        super().__init__(f"{shown}#{key} was forgotten (arc-ref forget) while a request of it ran")
        self.key = key


@attrs.frozen
class Found:
    """The deepest known mark of a request, and the head of the conversation that passed it (as committed)."""

    key: str
    seq: int  # the conversation's head: rows
    checksum: str
    position: int  # agent messages applied
    head: str
    mark_position: int
    mark_seq: int
    mark_checksum: str
    mark_hash: str

    @property
    def in_place(self) -> bool:
        """The conversation is still at the mark (resume it; forked at commit if another request moves it
        meanwhile), rather than past it (fork it there)."""
        return self.position == self.mark_position


@attrs.define
class RunningMarker:
    """A request's row in ``arc_running`` while it runs on this instance (a client's retry of it that reaches another
    instance waits for it, `arc_ref.frontends.proxy_shared`): written with the request's first round trip
    (`RequestTransaction.begin`; a client's retry's before, by its claim, `AsyncDatabase.claim_running`), removed
    with its commit (the same transaction: never before its reply is committed), or, when the request ends without
    one (failed, refused, cancelled, or a retry that found its reply), by a statement of its own.
    Its lease is renewed while it runs (`AsyncDatabase.renew_running`)."""

    asked: str  # the request, as a client's retry repeats it (`asked_digest`, as ``arc_replies.asked``)
    attempt: str  # this request's id
    instance: str  # the instance that runs it
    lease_s: float
    held: bool = False  # written and not yet removed (as far as this instance knows)


@attrs.frozen
class CachedConversation:
    """An instance's copy of a conversation's state after row ``seq`` (checksum ``checksum``)."""

    key: str
    seq: int
    checksum: str
    state: ArcState


class AsyncDatabase:
    """A pool of autocommit `psycopg.AsyncConnection`s to one database (the proxy's request path).

    As `arc_ref.persist.postgres.Database`: a pooled connection whose server went away is dropped without a round
    trip, one that failed in use is closed; psycopg's errors become StoreUnavailable (retry) or StoreError. At most
    ``pool_size`` connections at once (a request holds one while it reads and while it commits, not while the
    upstream answers it); one idle for ``IDLE_CONNECTION_S`` is closed by `close_idle` (a burst's connections go back
    to the server)."""

    def __init__(self, url: str, pool_size: int = DEFAULT_POOL_SIZE, connect_timeout_s: int = CONNECT_TIMEOUT_S,
                 idle_in_transaction_s: float = 60.0) -> None:
        self.url = url
        self.idle_in_transaction_s = idle_in_transaction_s
        self.shown = shown_url(url)
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self.round_trips = 0
        self._driver = _psycopg()
        self._idle: list[tuple[float, psycopg.AsyncConnection[Any]]] = []  # (when it came back, the connection)
        self._slots = asyncio.Semaphore(pool_size)
        self._closed = False  # after close(): a connection handed back is closed, not kept
        self.replies = False  # arc_replies is there and writable (`check_schema`): commits keep their reply
        self.replies_missing: str | None = None  # else why not
        self.replies_lost = False  # it was, and went away while the proxy ran (`lose_replies`)
        self.running = False  # arc_running is there and writable (`check_schema`): requests mark their attempts
        self.running_missing: str | None = None  # else why not
        self.running_lost = False  # it was, and went away while the proxy ran (`lose_running`)
        self.last_active = False  # arc_tasks.last_active is there (`check_schema`): commits set it
        self.last_active_missing: str | None = None  # why not, or why not its trigger (`LAST_ACTIVE_TRIGGER`)
        self.schema_checked = False  # `check_schema` done: the facts above are known

    def check_schema(self) -> None:
        """Create or check the schema (synchronously, at start: a bad URL, another application's tables or a role
        that cannot write them are refused before the proxy listens)."""
        sync = Database(self.url, pool_size=1, connect_timeout_s=self.connect_timeout_s)
        try:
            with sync.connection() as connection:
                sync.writable(connection)
                missing = sync.ensure_replies(connection)
                running = sync.ensure_running(connection)
                last_active = sync.ensure_last_active(connection)
        finally:
            sync.close()
        self.replies, self.replies_missing = missing is None, missing
        self.running, self.running_missing = running is None, running
        self.last_active, self.last_active_missing = last_active
        self.schema_checked = True

    def lose_replies(self, why: str) -> None:
        """Commits keep no reply from now on (``arc_replies`` went away or became unwritable while the proxy runs)."""
        self.replies, self.replies_missing = False, f"arc_replies cannot be written any more ({why})"
        self.replies_lost = True

    def lose_running(self, problem: Exception) -> None:
        """Requests mark their attempts no more (``arc_running`` went away or became unwritable while the proxy runs):
        said once on stderr; a client's retry that reaches another instance while the first attempt runs forks."""
        if not self.running:
            return
        self.running, self.running_lost = False, True
        self.running_missing = f"arc_running cannot be written any more ({str(problem).strip().splitlines()[0]})"
        print(f"arc-ref proxy: warning: the database {self.shown}: {self.running_missing}: requests go on without"
              " their running-attempt rows (a client's retry that reaches another instance while the first attempt"
              " runs forks); restart the proxy to make the table again", file=sys.stderr, flush=True)

    def _running_lost(self, problem: Exception) -> bool:
        """Whether ``problem`` says ``arc_running`` is gone or unwritable (then noted: `lose_running`)."""
        errors = self._driver.errors
        if isinstance(problem, (errors.UndefinedTable, errors.InsufficientPrivilege)) and names_running(problem):
            self.lose_running(problem)
            return True
        return False

    async def claim_running(self, marker: RunningMarker) -> bool:
        """A client's retry: ``marker``'s row written (its lease from now, `CLAIM`) when no attempt of its request runs
        now on any instance (no row of its ``asked`` whose lease is not past), one claim of the request at a time
        (`CLAIM_LOCK`), so that of the retries waiting for one attempt only one runs when it ends without its reply
        (its instance died, it failed) and the others wait for that one (one round trip). True when written (the
        marker is then held: renewed while it runs, removed at its end), or without ``arc_running``."""
        if not self.running:
            return True
        async with self.connection() as connection:
            try:
                async with connection.pipeline():
                    await connection.execute("BEGIN")
                    # a claim whose instance stopped mid-transaction holds the request's lock no longer than these
                    await connection.execute(f"SET LOCAL lock_timeout = '{COMMIT_LOCK_TIMEOUT}'")
                    await connection.execute("SET LOCAL idle_in_transaction_session_timeout ="
                                             f" '{int(self.idle_in_transaction_s * 1000)}ms'")
                    await connection.execute(CLAIM_LOCK, (CLAIM_KEY, marker.asked))
                    cursor = await connection.execute(CLAIM, {"asked": marker.asked, "attempt": marker.attempt,
                                                              "instance": marker.instance, "lease": marker.lease_s})
                    await connection.execute("COMMIT")
                row = await cursor.fetchone()
            except self._driver.errors.LockNotAvailable:
                return False  # another claim of it held the lock past the timeout: the retry looks again
            except self._driver.Error as problem:
                if self._running_lost(problem):
                    return True
                raise
            finally:
                self.round_trips += 1
        if row is None:
            return False
        marker.held = True
        return True

    async def renew_running(self, instance: str, attempts: Sequence[str], lease_s: float) -> None:
        """The leases of ``instance``'s running ``attempts`` renewed, and the rows of instances that died mid-request
        swept (one round trip)."""
        if not self.running:
            return
        async with self.connection() as connection:
            try:
                async with connection.pipeline():
                    await connection.execute(RENEW, (lease_s, instance, list(attempts)))
                    await connection.execute(SWEEP_RUNNING)
            except self._driver.Error as problem:
                if not self._running_lost(problem):
                    raise
        self.round_trips += 1

    async def drop_running(self, marker: RunningMarker) -> None:
        """Remove a request's ``arc_running`` row (one round trip): the request ended without a commit that did."""
        if not self.running:
            return
        async with self.connection() as connection:
            try:
                await connection.execute(RAN, (marker.asked, marker.attempt))
            except self._driver.Error as problem:
                if not self._running_lost(problem):
                    raise
        marker.held = False
        self.round_trips += 1

    async def answered(self, asked_at: str, asked: str) -> tuple[str, str] | None:
        """The conversation whose latest reply answered request ``asked`` (`REPLY_OF`), and that reply's JSON text;
        None when no conversation that passed ``asked_at`` has it as its latest (one round trip)."""
        if not self.replies:
            return None
        async with self.connection() as connection:
            cursor = await connection.execute(REPLY_OF, (asked_at, asked))
            row = await cursor.fetchone()
        self.round_trips += 1
        return None if row is None else (str(row[0]), str(row[1]))

    async def check_connection(self) -> None:
        """Connect as the request path connects (a pooler that refuses a startup parameter of it is refused at
        start, not on every request) and run one query."""
        connection = await self._connect()
        try:
            await connection.execute("SELECT 1")
        except self._driver.Error as problem:
            raise store_error(self.url, problem) from None
        finally:
            await connection.close()

    async def _connect(self) -> "psycopg.AsyncConnection[Any]":
        driver = self._driver
        try:
            # TCP keepalives (an instance cut off from the database notices within ~25 s); no startup options and no
            # server-side prepared statements, so that a pooler in transaction mode (PgBouncer) can stand between:
            # the idle-in-transaction limit is set in each transaction that writes (`_move_head`, `_write`)
            connection: "psycopg.AsyncConnection[Any]" = await driver.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self.connect_timeout_s, prepare_threshold=None,
                application_name=f"arc-ref proxy {os.getpid()}",  # which instance holds what (pg_stat_activity)
                keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
            return connection
        except driver.OperationalError as problem:
            raise connect_failed(self.url, problem) from None
        except driver.ProgrammingError as problem:
            raise StoreError(f"cannot use the database {self.shown}: {problem}") from None

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator["psycopg.AsyncConnection[Any]"]:
        driver = self._driver
        async with self._slots:
            connection = None
            try:
                while connection is None:
                    connection = self._idle.pop()[1] if self._idle else await self._connect()
                    if connection.closed or _reads_as_closed(connection):  # type: ignore[arg-type]
                        await connection.close()
                        connection = None
                try:
                    yield connection
                except driver.Error as problem:
                    raise store_error(self.url, problem) from None
            finally:
                if connection is not None:
                    await self._give_back(connection)

    async def _give_back(self, connection: "psycopg.AsyncConnection[Any]") -> None:
        pq = self._driver.pq
        status = connection.pgconn.transaction_status
        if connection.closed or status == pq.TransactionStatus.UNKNOWN or self._closed:
            await connection.close()
            return
        if status != pq.TransactionStatus.IDLE:
            try:
                await connection.execute("ROLLBACK")
            except self._driver.Error:
                await connection.close()
                return
        self._idle.append((time.monotonic(), connection))

    @property
    def idle_connections(self) -> int:
        """Pooled connections open and not lent now."""
        return len(self._idle)

    async def head(self, key: str) -> tuple[int, str] | None:
        """Conversation ``key``'s head row and its checksum as committed (None: no such conversation)."""
        async with self.connection() as connection:
            cursor = await connection.execute("SELECT seq, checksum FROM arc_tasks WHERE key = %s", (key,))
            row = await cursor.fetchone()
        self.round_trips += 1
        return None if row is None else (int(row[0]), str(row[1]))

    async def discard_idle(self) -> None:
        """Close every idle connection (the server went away: each would fail at its next use)."""
        idle, self._idle = self._idle, []
        for _, connection in idle:
            await connection.close()

    async def close_idle(self, idle_s: float = IDLE_CONNECTION_S) -> int:
        """Close the connections idle for ``idle_s`` or longer (the oldest are at the front); how many."""
        cutoff = time.monotonic() - idle_s
        old = [connection for returned, connection in self._idle if returned <= cutoff]
        self._idle = [(returned, connection) for returned, connection in self._idle if returned > cutoff]
        for connection in old:
            with contextlib.suppress(self._driver.Error, OSError):
                await connection.close()
        return len(old)

    def server_connections(self) -> tuple[int, int] | None:
        """(max_connections less the superuser's reserve, connections open now) on the server; None when it cannot
        be read (synchronously, at start)."""
        sync = Database(self.url, pool_size=1, connect_timeout_s=self.connect_timeout_s)
        try:
            with sync.connection() as connection:
                limit = connection.execute("SELECT current_setting('max_connections')::int"
                                           " - current_setting('superuser_reserved_connections')::int,"
                                           " (SELECT count(*) FROM pg_stat_activity WHERE backend_type ="
                                           " 'client backend')").fetchone()
        except StoreError:
            return None
        finally:
            sync.close()
        return None if limit is None else (int(limit[0]), int(limit[1]))

    async def close(self) -> None:
        self._closed = True
        await self.discard_idle()


class RequestTransaction:
    """One proxy request on one conversation (see the module doc): `begin` (on a connection of
    `AsyncDatabase.connection()`, given back after the reads), then `resume`/`fork`/`create`, `append` and `mark` as
    the request goes (in memory), and `commit` at the end (on a connection of its own)."""

    def __init__(self, db: AsyncDatabase, connection: "psycopg.AsyncConnection[Any] | None") -> None:
        self.db = db
        self.connection = connection  # the reads' connection (None once given back)
        self.key = ""
        self.seq = 0
        self.checksum = GENESIS
        self.position = 0
        self.head = ""
        self._created: tuple[str, str] | None = None  # (config line, its checksum) of a new conversation
        self._forked_from: tuple[str, int] | None = None  # (parent key, rows copied)
        self._resumed: Found | None = None  # the head this request goes on from in place (checked at commit)
        self.forked_at_commit = False  # another request moved the head meanwhile: committed as a fork at the mark
        self._rows: list[tuple[str, int, str, str]] = []
        self._marks: list[tuple[str, str, int, int, str]] = []
        self.reply: tuple[str, str] | None = None  # (the request's digest, the reply's JSON): kept with the commit
        self.running: RunningMarker | None = None  # the request's arc_running row: written by begin, removed by commit
        self._aborted = False  # the commit's transaction failed: the next one's pipeline rolls it back first

    async def begin(self, hashes: Sequence[str], expected: CachedConversation | None, set_aside: Sequence[str] = ()
                    ) -> tuple[Found | None, list[tuple[int, str, str]]]:
        """The deepest known mark of ``hashes`` and its conversation's head, as committed (no lock), in none of the
        conversations ``set_aside``; and, in the same round trip, the rows of ``expected`` (the conversation this
        instance last saw at these hashes) after the row it holds. Returns the mark (None: a new conversation) and
        those rows up to the head (to check against it)."""
        connection = self.connection
        assert connection is not None
        running = self.running if self.db.running else None
        try:
            async with connection.pipeline():
                found_cursor = await connection.execute(FIND, (list(hashes), list(set_aside)))
                rows_cursor = None
                if expected is not None:
                    rows_cursor = await connection.execute(ROWS_AFTER, (expected.key, expected.seq, 2**62))
                if running is not None:  # in the same round trip (an unlogged row: its commit waits for no flush)
                    await connection.execute(RUN, (running.asked, running.attempt, running.instance, running.lease_s))
        except self.db._driver.Error as problem:
            if running is None or not self.db._running_lost(problem):
                raise
            self.db.round_trips += 1
            return await self.begin(hashes, expected, set_aside)  # arc_running went away: read again without it
        if running is not None:
            running.held = True
        row = await found_cursor.fetchone()
        rows = list(await rows_cursor.fetchall()) if rows_cursor is not None else []
        self.db.round_trips += 1
        if row is None:
            return None, []
        found = Found(*row)
        if expected is None or expected.key != found.key:
            rows = []
        return found, [row for row in rows if row[0] <= found.seq]  # read after the head: rows past it left out

    async def gone(self, key: str) -> bool:
        """Whether conversation ``key`` is no longer in the database (`arc-ref forget` removed it; one round trip)."""
        async with self.db.connection() as connection:
            cursor = await connection.execute("SELECT 1 FROM arc_tasks WHERE key = %s", (key,))
            found = await cursor.fetchone()
        self.db.round_trips += 1
        return found is None

    async def rows(self, key: str, after: int, upto: int) -> list[tuple[int, str, str]]:
        """Rows ``after`` < seq <= ``upto`` of conversation ``key`` (one round trip; on a connection of its own when
        the reads' one was given back)."""
        async with contextlib.AsyncExitStack() as stack:
            connection = (self.connection if self.connection is not None
                          else await stack.enter_async_context(self.db.connection()))
            cursor = await connection.execute(ROWS_AFTER, (key, after, upto))
            rows = list(await cursor.fetchall())
        self.db.round_trips += 1
        return rows

    @property
    def made(self) -> str | None:
        """The conversation this request makes: ``"new"``, ``"fork"`` (at begin, or at commit because another
        request moved the head meanwhile), or None (it goes on in place)."""
        if self._created is not None:
            return "new"
        return "fork" if self._forked_from is not None or self.forked_at_commit else None

    def resume(self, found: Found) -> None:
        """Go on in place from the conversation's head (moved at `commit` only if it is still there)."""
        if (found.mark_seq, found.mark_checksum) != (found.seq, found.checksum):
            raise StoreCorrupt(f"{self.db.shown}#{found.key}: its head is at the mark {found.mark_hash[:12]} (agent"
                               f" message {found.position}) but the mark names row {found.mark_seq} and the head"
                               f" row {found.seq}")
        self.key, self.seq, self.checksum = found.key, found.seq, found.checksum
        self.position, self.head = found.position, found.head
        self._resumed = found

    def fork(self, found: Found, key: str) -> None:
        """A new conversation ``key`` equal to ``found``'s at its mark: its rows up to there copied at commit."""
        self._forked_from = (found.key, found.mark_seq)
        self.key, self.seq, self.checksum = key, found.mark_seq, found.mark_checksum
        self.position, self.head = found.mark_position, found.mark_hash
        self.mark(found.mark_hash)

    def create(self, key: str, config_line: str, first_hash: str) -> None:
        """A new conversation ``key``: row 1 its config line, then its first mark (the system prompt and goal)."""
        self.key = key
        self.seq, self.checksum = 1, chain(GENESIS, 1, config_line.encode("utf-8"))
        self._created = (config_line, self.checksum)
        self.position, self.head = 1, first_hash
        self.mark(first_hash)

    def append(self, line: str) -> None:
        """One event's row, kept until `commit`."""
        self.seq += 1
        self.checksum = chain(self.checksum, self.seq, line.encode("utf-8"))
        self._rows.append((self.key, self.seq, line, self.checksum))

    def mark(self, chain_hash: str) -> None:
        """The agent's messages so far end at ``chain_hash`` (kept until `commit`)."""
        self.head = chain_hash
        self._marks.append((chain_hash, self.key, self.position, self.seq, self.checksum))

    def _as_fork(self, key: str) -> None:
        """The request resumed a conversation another request moved meanwhile: its rows and marks become those of a
        fork ``key`` at the mark it resumed from (the same rows and checksums: the chain names no task)."""
        found = self._resumed
        assert found is not None
        self._resumed, self.forked_at_commit = None, True
        self._forked_from = (found.key, found.mark_seq)
        self.key = key
        self._rows = [(key, seq, line, checksum) for _, seq, line, checksum in self._rows]
        self._marks = [(found.mark_hash, key, found.mark_position, found.mark_seq, found.mark_checksum),
                       *((chain_hash, key, position, seq, checksum)
                         for chain_hash, _, position, seq, checksum in self._marks)]

    @property
    def applied_nothing(self) -> bool:
        """The request resumed or forked a conversation and applied no event (refused, or its upstream failed,
        before its first): committing it would write nothing new (in place) or a bare copy no reply names (a fork)."""
        if self._created is not None or self._rows:
            return False
        return (self._resumed is not None and not self._marks) or (self._forked_from is not None
                                                                   and len(self._marks) <= 1)

    async def commit(self, fork_key: Callable[[], str] = lambda: uuid.uuid4().hex) -> bool:
        """The request's rows, marks and new head in one transaction. A conversation resumed in place: its head moved
        from the row the request began at and everything written in one statement and COMMIT (`move_head`, one round
        trip); when another request moved it meanwhile, that transaction wrote nothing, and the request is committed
        as a fork ``fork_key()`` at that mark (`forked_at_commit`) in another (one more). A new conversation or a
        fork: the conversation, the rows, the marks and COMMIT (one round trip). Only after it returns is anything
        acknowledged. False: nothing to write (`applied_nothing`), nothing written."""
        if self.applied_nothing:
            return False
        errors = self.db._driver.errors
        async with self.db.connection() as connection:
            self.connection = connection
            try:
                while True:
                    try:
                        if self._resumed is not None and await self._move_head(connection):
                            if self.running is not None and self.db.running:
                                self.running.held = False  # removed in the commit's transaction
                            return True
                        if self._resumed is not None:
                            self._as_fork(fork_key())
                        await self._write(connection)
                        break
                    except errors.ForeignKeyViolation:
                        if self._forked_from is None:
                            raise
                        raise ConversationGone(self.db.shown, self._forked_from[0]) from None
                    except (errors.UndefinedTable, errors.InsufficientPrivilege) as problem:
                        if self.running is not None and self.db._running_lost(problem):
                            self._aborted = True  # nothing of the failed transaction was written: again without it
                            continue
                        if self.reply is None or not self.db.replies or "arc_replies" not in str(problem):
                            raise
                        # arc_replies dropped or its rights revoked while the proxy runs: the commit goes on without
                        # it (nothing of the failed transaction was written), and so do later ones
                        self.db.lose_replies(str(problem).strip().splitlines()[0])
                        self._aborted = True
            finally:
                self.connection = None
        self.db.round_trips += 1
        if self.running is not None and self.db.running:
            self.running.held = False  # removed in the commit's transaction
        return True

    async def _move_head(self, connection: "psycopg.AsyncConnection[Any]") -> bool:
        """`move_head` in a transaction of its own: True when the head was still the row this request began at (moved,
        and the rows, marks and reply written and committed); False when another request moved it (or held it past
        `COMMIT_LOCK_TIMEOUT`): nothing written, no transaction open."""
        found = self._resumed
        assert found is not None
        driver = self.db._driver
        marks = self._marks
        values = {"seq": self.seq, "checksum": self.checksum, "position": self.position, "head": self.head,
                  "key": found.key, "base_seq": found.seq, "base_checksum": found.checksum,
                  "seqs": [row[1] for row in self._rows], "lines": [row[2] for row in self._rows],
                  "checksums": [row[3] for row in self._rows], "mark_hashes": [mark[0] for mark in marks],
                  "mark_positions": [mark[2] for mark in marks], "mark_seqs": [mark[3] for mark in marks],
                  "mark_checksums": [mark[4] for mark in marks]}
        reply = self.reply is not None and self.db.replies
        if self.reply is not None and reply:
            values.update(asked=self.reply[0], reply=self.reply[1])
        running = self.running is not None and self.db.running
        if self.running is not None and running:
            values.update(running_asked=self.running.asked, running_attempt=self.running.attempt)
        statement = move_head(self.db.last_active, reply, running)
        try:
            async with connection.pipeline():
                await self._begin(connection)  # READ COMMITTED: move_head's re-check needs it
                cursor = await connection.execute(statement, values)
                await connection.execute("COMMIT")
            counted = await cursor.fetchone()
            return counted is not None and counted[0] == 1
        except driver.errors.LockNotAvailable:
            self._aborted = True  # rolled back at the start of the fork's pipeline
            return False
        finally:
            self.db.round_trips += 1

    async def _begin(self, connection: "psycopg.AsyncConnection[Any]", isolation: str = "READ COMMITTED") -> None:
        """A commit's transaction begun (in its pipeline), after rolling back the one that failed before it."""
        if self._aborted:
            await connection.execute("ROLLBACK")
            self._aborted = False
        await connection.execute(f"BEGIN ISOLATION LEVEL {isolation}")
        await self._limit_transaction(connection)

    async def _limit_transaction(self, connection: "psycopg.AsyncConnection[Any]") -> None:
        """A commit's transaction's limits (in its pipeline): how long it waits for the head row's lock, and how long
        the server lets it sit idle (a transaction whose COMMIT never came, its instance stuck, holds its rows' locks
        no longer)."""
        await connection.execute(f"SET LOCAL lock_timeout = '{COMMIT_LOCK_TIMEOUT}'")
        await connection.execute("SET LOCAL idle_in_transaction_session_timeout ="
                                 f" '{int(self.db.idle_in_transaction_s * 1000)}ms'")

    async def _write(self, connection: "psycopg.AsyncConnection[Any]") -> None:
        """A new conversation or a fork (one made at the mark, or at commit), its rows, marks and reply: one
        transaction, one round trip."""
        async with connection.pipeline():
            await self._begin(connection, "REPEATABLE READ")  # one snapshot: a fork's parent and rows agree
            if self._created is not None:
                line, checksum = self._created
                await connection.execute("INSERT INTO arc_tasks (key, seq, checksum) VALUES (%s, 1, %s)",
                                         (self.key, checksum))
                await connection.execute("INSERT INTO arc_events VALUES (%s, 1, %s, %s)", (self.key, line, checksum))
            elif self._forked_from is not None:
                parent, upto = self._forked_from
                first = self._marks[0]
                # only while the parent is there, in this transaction's one snapshot (REPEATABLE READ): the rows
                # copied below are all of it, whenever `arc-ref forget` removes it; one it removed before leaves the
                # fork without its task, so that the inserts below fail (ConversationGone). No lock: a commit that
                # holds the parent's head row (a stuck one) does not hold up its forks
                await connection.execute("INSERT INTO arc_tasks (key, seq, checksum) SELECT %s, %s, %s FROM arc_tasks"
                                         " WHERE key = %s", (self.key, first[3], first[4], parent))
                await connection.execute("INSERT INTO arc_events SELECT %s, seq, line, checksum FROM arc_events"
                                         " WHERE task = %s AND seq <= %s", (self.key, parent, upto))
            if self._rows:
                async with connection.cursor() as cursor:
                    await cursor.executemany("INSERT INTO arc_events VALUES (%s, %s, %s, %s)", self._rows)
            if self._marks:
                async with connection.cursor() as cursor:
                    await cursor.executemany("INSERT INTO arc_marks (hash, task, position, seq, checksum)"
                                             " VALUES (%s, %s, %s, %s, %s)", self._marks)
            await connection.execute("UPDATE arc_tasks SET seq = %s, checksum = %s, position = %s, head = %s"
                                     " WHERE key = %s", (self.seq, self.checksum, self.position, self.head, self.key))
            if self.reply is not None and self.db.replies:
                await connection.execute(KEEP_REPLY, (self.key, self.seq, self.checksum, *self.reply))
            if self.running is not None and self.db.running:
                await connection.execute(RAN, (self.running.asked, self.running.attempt))
            await connection.execute("COMMIT")


__all__ = ["AsyncDatabase", "CachedConversation", "ConversationGone", "Found", "RequestTransaction", "RunningMarker",
           "StoreUnavailable"]
