"""The PostgreSQL store: ARC tasks' events in a shared database, beside the embedded SQLite store (issue 30).

The contract is the SQLite store's (spec/store.md): one append-only row per event, numbered from 1 like the lines
of a replay trace (row 1 the config line), each row the event's replay-trace line with the chained checksum
``c_n = sha256(c_(n-1) + "\\n" + n + "\\n" + line_n)``; an event is acknowledged only after its row is committed;
reopening is replaying; `arc-ref export` of a task is its rows, a trace any port replays. One database holds
many tasks, each under a key (a proxy's conversation, a Session, an `arc-ref mcp` store).

What differs from SQLite is only where the acknowledgement record lives and who may write. The head of a task
(``arc_tasks``: its last row and that row's checksum) is updated in the same transaction as the rows it names, so
it cannot run ahead of them; opening refuses a log that ends before its head or whose row there has another
checksum (rows deleted or edited: the table is append-only by a trigger too). Any number of writers, in any
number of processes and hosts: a writer locks the task's head row (``SELECT ... FOR UPDATE``) for the
transaction of its append, first folds the rows other writers appended since it last looked (catching up:
checked against the chain from the checksum it holds), then appends. Readers read one consistent snapshot
(REPEATABLE READ) and take no lock.

The database unreachable, restarting or failing over raises `StoreUnavailable` (retryable: the proxy answers
503); nothing is acknowledged then, and the next call reconnects. Connections are pooled per process
(`Database`); a pooled connection whose server went away is noticed without a round trip (its socket reads as
closed) and replaced.

Round trips: an append is two (lock and read the head; then the rows, the new head and COMMIT in one pipeline),
plus one when another writer appended in between (its rows). `Database.round_trips` counts them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence
from urllib.parse import urlsplit

from arc_ref.config import Config
from arc_ref.machine import ArcState, Event, init, step
from arc_ref.persist import rows
from arc_ref.persist.errors import StoreCorrupt, StoreError, StoreExists, StoreNotFound
from arc_ref.persist.rows import GENESIS, Appended, OpenReport, StoredEvent, chain, checked_rows, event_row_line
from arc_ref.persist.store import DurableStore
from arc_ref.trace import config_line, encode_config_line

if TYPE_CHECKING:  # psycopg is an optional extra ("postgres"); imported when a database is opened
    import psycopg

APPLICATION = "ARC1"  # arc_meta.application: this database holds ARC tasks
SCHEMA_VERSION = 1
SCHEMES = ("postgresql://", "postgres://")
DEFAULT_POOL_SIZE = 32
CONNECT_TIMEOUT_S = 5
KEY_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SCHEMA_LOCK = 0x41524331  # pg_advisory_xact_lock key while the schema is created ("ARC1")

REPLIES = """
CREATE TABLE arc_replies (
    task text PRIMARY KEY REFERENCES arc_tasks (key),
    seq bigint NOT NULL,            -- the task's head row when the reply was committed
    checksum text NOT NULL,         -- that row's chained checksum: the reply is the task's latest while both match
    asked text NOT NULL,            -- the request it answered, as a client's retry repeats it (sha256, hex)
    reply text NOT NULL             -- what the agent was sent (JSON: completion, hidden_rounds, view_tokens)
)
"""
"""The proxy's latest reply per conversation, for a client's retry that reaches another instance (created in a
database of schema 1 that lacks it by the first proxy that starts on it; no other reader needs it)."""

RUNNING = """
CREATE UNLOGGED TABLE arc_running (
    asked text NOT NULL,            -- the request running, as a client's retry repeats it (as arc_replies.asked)
    attempt text NOT NULL,          -- that request's own id (identical requests of two agents: two rows)
    instance text NOT NULL,         -- the proxy instance running it, which renews its lease while it runs
    until timestamptz NOT NULL,     -- its lease: a row past it is ignored (its instance died or hangs), then swept
    PRIMARY KEY (asked, attempt)
)
"""
"""The requests the proxy instances run now, for a client's retry of one that reaches another instance while the
first attempt runs: it waits for that attempt instead of forking the conversation and asking the upstream again.
UNLOGGED: no write-ahead log, so a request's row costs no flush to disk (its insert rides the request's first
round trip, its delete the commit's); the server's crash or a failover to a standby empties it, which only lets a
retry in flight then fork, as before the table. Created in a database of schema 1 that lacks it by the first proxy
that starts on it; no other reader needs it."""

LAST_ACTIVE = "ALTER TABLE arc_tasks ADD COLUMN IF NOT EXISTS last_active timestamptz DEFAULT now()"
"""``arc_tasks.last_active``: when a proxy last committed a request to the conversation (set by each commit, and
when it is created), for `arc-ref forget --idle-for`. Added by the first proxy that starts on a database made
before it; the rows it had get that time (now() at the ALTER, stored once, no table rewrite): their last commit
was never recorded, and an older proxy may have served one an hour before, so each counts as active at the
upgrade (review h34: NULL, read as the creation time, had the first `--idle-for 30` remove conversations started
more than 30 days before and still in use)."""

LAST_ACTIVE_TRIGGER = """
CREATE OR REPLACE FUNCTION arc_last_active() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_active := now();  -- a commit moved the conversation's head, whichever arc-ref made it
    RETURN NEW;
END $$;
CREATE TRIGGER arc_tasks_last_active BEFORE UPDATE OF seq ON arc_tasks FOR EACH ROW EXECUTE FUNCTION arc_last_active()
"""
"""Every commit sets ``arc_tasks.last_active``, also one whose statement leaves it out (review h34 F2): that of an
instance that started before the column was there (its role could not add it; it never looks again) and that of an
arc-ref before the column (a rolling upgrade). Added with the column, and by the first proxy of the owner's role
that starts on a database that has the column without it."""

MARKS_BY_TASK = "CREATE INDEX IF NOT EXISTS arc_marks_by_task ON arc_marks (task)"
"""``arc_marks`` by task, for `arc-ref forget`: deleting a task checks its foreign keys, one scan of ``arc_marks`` per
task without it (10,000 conversations: 117 s); made by the first forget in a database made before it."""
FORGETTING = "arc.forgetting"  # set (SET LOCAL ... = 'on') only by `arc-ref forget`'s transactions
APPEND_ONLY = f"""
CREATE OR REPLACE FUNCTION arc_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('{FORGETTING}', true) = 'on' THEN
        RETURN OLD;  -- arc-ref forget: a whole conversation removed, in one transaction
    END IF;
    RAISE EXCEPTION 'ARC tables are append-only: % on % refused', TG_OP, TG_TABLE_NAME;
END $$
"""
"""Rows are never updated, and deleted only by `arc-ref forget`, which removes whole proxy conversations
(`arc_ref.persist.postgres_forget`); the function is replaced by the first ``forget`` in a database made before."""

SCHEMA = (
    """
CREATE TABLE arc_meta (
    key text PRIMARY KEY,
    value text NOT NULL
)
""",
    """
CREATE TABLE arc_tasks (
    key text PRIMARY KEY,           -- the task (a conversation, a session, an MCP store)
    seq bigint NOT NULL,            -- its last acknowledged row
    checksum text NOT NULL,         -- that row's chained checksum
    position integer NOT NULL DEFAULT 0,   -- the proxy: agent messages applied
    head text NOT NULL DEFAULT '',  -- the proxy: the chain hash at position
    created timestamptz NOT NULL DEFAULT now(),
    last_active timestamptz DEFAULT now()  -- the proxy: its last commit (LAST_ACTIVE)
)
""",
    LAST_ACTIVE_TRIGGER,
    """
CREATE TABLE arc_events (
    task text NOT NULL REFERENCES arc_tasks (key),
    seq bigint NOT NULL,            -- 1 = the config line, then one event per row, as in an export
    line text NOT NULL,             -- the replay trace line (spec/trace.md), canonical JSON
    checksum text NOT NULL,         -- sha256(previous checksum + "\\n" + seq + "\\n" + line), hex
    PRIMARY KEY (task, seq)
)
""",
    """
CREATE TABLE arc_marks (
    hash text NOT NULL,             -- the proxy's hash chain over the agent's messages
    task text NOT NULL REFERENCES arc_tasks (key),
    position integer NOT NULL,      -- agent messages up to this mark
    seq bigint NOT NULL,            -- rows of the task at this mark
    checksum text NOT NULL,         -- the chained checksum of row seq: binds the mark to the rows
    added bigint GENERATED ALWAYS AS IDENTITY,  -- the order marks were added (the latest fork first)
    PRIMARY KEY (hash, task)
)
""",
    REPLIES,
    RUNNING,
    MARKS_BY_TASK,
    APPEND_ONLY,
    """
CREATE TRIGGER arc_events_append_only BEFORE UPDATE OR DELETE ON arc_events
    FOR EACH ROW EXECUTE FUNCTION arc_append_only()
""",
    """
CREATE TRIGGER arc_marks_append_only BEFORE UPDATE OR DELETE ON arc_marks
    FOR EACH ROW EXECUTE FUNCTION arc_append_only()
""",
)


def has_last_active_trigger(connection: "psycopg.Connection[Any]") -> bool:
    """Whether ``arc_tasks`` has the trigger that sets ``last_active`` on every commit (`LAST_ACTIVE_TRIGGER`)."""
    found = connection.execute("SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass('arc_tasks')"
                               " AND tgname = 'arc_tasks_last_active')").fetchone()
    return bool(found and found[0])


def has_last_active(connection: "psycopg.Connection[Any]") -> bool:
    """Whether ``arc_tasks`` has the column ``last_active`` (`LAST_ACTIVE`; a database made before it lacks it)."""
    found = connection.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('arc_tasks')"
                               " AND attname = 'last_active' AND NOT attisdropped)").fetchone()
    return bool(found and found[0])


class StoreUnavailable(StoreError):
    """The database cannot be reached now (down, restarting, failing over): retry later; nothing was acknowledged."""


def is_database_url(text: object) -> bool:
    """Whether a --store / path argument names a PostgreSQL database rather than a file or directory."""
    return isinstance(text, str) and text.startswith(SCHEMES)


def split_task_url(text: str) -> tuple[str, str | None]:
    """``postgresql://.../db#KEY`` -> (the database URL, KEY); no fragment: (URL, None)."""
    url, _, key = text.partition("#")
    return url, (key or None)


def shown_url(url: str) -> str:
    """The URL without its password (in the authority or as a ``password`` query parameter), for messages."""
    parts, shown = urlsplit(url), url  # (the URL as written otherwise: urlunsplit made postgresql:// postgresql:)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        shown = shown.replace(parts.netloc, f"{parts.username or ''}:***@{netloc[-1]}", 1)
    if parts.query:
        query = "&".join("password=***" if pair.split("=", 1)[0].strip().lower() == "password" else pair
                         for pair in parts.query.split("&"))
        shown = shown.replace(f"?{parts.query}", f"?{query}", 1)
    return shown


def check_key(key: str) -> str:
    if not KEY_PATTERN.fullmatch(key):
        raise StoreError(f"task key {key!r}: 1 to 128 of A-Z a-z 0-9 . _ -")
    return key


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// store needs psycopg: pip install 'arc-ref[postgres]'") from None
    if _secondary_pipeline_errors not in logging.getLogger("psycopg").filters:
        logging.getLogger("psycopg").addFilter(_secondary_pipeline_errors)
    return psycopg


def _secondary_pipeline_errors(record: logging.LogRecord) -> bool:
    """psycopg's warnings, less "error ignored terminating <AsyncPipeline ...>: pipeline aborted": a pipeline whose
    statement failed raises that first error to its caller, which handles it (a conversation forgotten while its
    request ran, a lock past its wait), then logs each statement queued after it as this second one, raw on the
    proxy's standard error (review h22 F9: a dozen such lines in a run beside forget). So does a pipeline whose
    connection was lost (PgBouncer killed, PostgreSQL stopped): its caller gets and reports the error, and psycopg,
    which logs "error ignored terminating <pipeline>: ..." only while the block's own error is raised, says it again
    as "... the connection is lost" (review h71: 28 to 36 such lines a chaos run through PgBouncer). Any other
    warning is kept (a lost connection outside a pipeline included)."""
    import psycopg  # (installed by _psycopg, after it imported psycopg)

    arguments = record.args if isinstance(record.args, tuple) else ()
    if any(isinstance(argument, psycopg.errors.PipelineAborted) for argument in arguments):
        return False
    terminating = record.msg == "error ignored terminating %r: %s"
    return not (terminating and any(isinstance(argument, psycopg.OperationalError) for argument in arguments))


class StoreRefused(StoreError):
    """The server refused the connection for a reason no retry changes (no such database or role, a wrong password,
    pg_hba.conf), or the URL cannot be used (an invalid port): the URL or the server's accounts must be fixed."""


# The server's refusals of a connection that waiting cannot cure, each with what to do. psycopg gives a failed
# connection no SQLSTATE, so they are read from the server's FATAL line (its English wording, lc_messages=C or en);
# anything else (refused, timed out, starting up, shutting down, too many clients) stays StoreUnavailable.
_REFUSALS = (
    (re.compile(r'FATAL:\s+database ".*" does not exist'),
     "create it (createdb -h HOST -U USER NAME, as in the README's 'Running several proxies') or fix the URL"),
    (re.compile(r'FATAL:\s+database ".*" is not currently accepting connections'),
     "the database is closed to connections (ALLOW_CONNECTIONS false): open it, or use another"),
    (re.compile(r'FATAL:\s+role ".*" does not exist'), "create the role (createuser) or fix the user in the URL"),
    # (LDAP, RADIUS, GSSAPI and SSPI failures are left out: the same words when their server is only unreachable)
    (re.compile(r"FATAL:\s+(password authentication failed|no pg_hba\.conf entry|pg_hba\.conf rejects connection|"
                r"(Peer|Ident|certificate) authentication failed|role \".*\" is not permitted to log in|"
                r"permission denied for database)"),
     "fix the user or password in the URL, or the server's pg_hba.conf / the role's rights"),
    (re.compile(r"fe_sendauth: no password supplied"), "give the password in the URL (or PGPASSWORD / ~/.pgpass)"),
    (re.compile(r"unsupported startup parameter", re.IGNORECASE),
     "a connection pooler (PgBouncer?) refuses a startup parameter of the connection: let it pass (PgBouncer:"
     " ignore_startup_parameters) or connect to PostgreSQL itself"),
    (re.compile(r"server does not support SSL, but SSL was required|certificate verify failed"),
     "fix sslmode or the certificates in the URL, or the server's SSL settings"),
    (re.compile(r"transaction blocks not allowed in statement pooling mode"),  # PgBouncer, pool_mode = statement
     "arc-ref needs transactions, which a pooler in statement mode refuses: set its pool_mode to transaction (or"
     " session), or connect to PostgreSQL itself"),
)
# A URL libpq cannot use (review h22 F6: 'invalid port number' read as 'retry later'), each with what to fix.
_URL_FAULTS = (
    (re.compile(r'invalid port number|invalid integer value ".*" for connection option|invalid \w+ value: "'),
     "fix the URL"),
)


def store_error(url: str, problem: Exception) -> StoreError:
    """psycopg's error as the store's: the server unreachable or gone (OperationalError) is StoreUnavailable, a
    connection it refuses for good StoreRefused."""
    if isinstance(problem, _psycopg().OperationalError):
        return connect_failed(url, problem)
    return StoreError(f"the database {shown_url(url)}: {str(problem).strip()}")


def connect_failed(url: str, problem: Exception) -> StoreError:
    """A failed connection (or a connection lost in use) as StoreRefused when no retry can change the server's
    answer, else StoreUnavailable (retry later)."""
    text = str(problem).strip()
    for pattern, advice in _URL_FAULTS:
        found = pattern.search(text)
        if found:
            return StoreRefused(f"cannot use the database {shown_url(url)} ({text[found.start():].splitlines()[0]}):"
                                f" {advice}")
    for pattern, advice in _REFUSALS:
        found = pattern.search(text)
        if found:
            reason = text[found.start():].splitlines()[0].removeprefix("FATAL:").strip()
            return StoreRefused(f"the database {shown_url(url)} refused the connection ({reason}): {advice}")
    return unavailable(url, problem)


def unavailable(url: str, problem: Exception) -> StoreUnavailable:
    first = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    return StoreUnavailable(f"the database {shown_url(url)} is unavailable ({first}); retry later")


# --- connections ---------------------------------------------------------------------------------------


class Database:
    """A pool of autocommit connections to one PostgreSQL database (thread-safe), and its schema.

    ``connection()`` lends one; a connection whose socket is readable while idle (the server closed it: a restart,
    a kill) is dropped without a round trip, and one that failed during use is closed instead of returned.
    ``round_trips`` counts the client's waits for the server (each query outside a pipeline, each pipeline sync).
    """

    def __init__(self, url: str, pool_size: int = DEFAULT_POOL_SIZE, connect_timeout_s: int = CONNECT_TIMEOUT_S,
                 create_schema: bool = True) -> None:
        self.url = url
        self.create_schema = create_schema  # False: a database without ARC's schema is refused, nothing written
        self.shown = shown_url(url)
        self.pool_size = pool_size
        self.connect_timeout_s = connect_timeout_s
        self.round_trips = 0
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(pool_size)
        self._guard = threading.Lock()
        self._schema_checked = False
        self._psycopg = _psycopg()

    def _connect(self) -> "psycopg.Connection[Any]":
        driver = self._psycopg
        try:
            connection: "psycopg.Connection[Any]" = driver.connect(
                self.url, autocommit=True, connect_timeout=self.connect_timeout_s, application_name="arc-ref")
            return connection
        except driver.OperationalError as problem:
            raise connect_failed(self.url, problem) from None
        except driver.ProgrammingError as problem:  # a malformed URL
            raise StoreError(f"cannot use the database {self.shown}: {problem}") from None

    @contextlib.contextmanager
    def connection(self) -> Iterator["psycopg.Connection[Any]"]:
        """A connection of the pool for the duration of the block; psycopg's errors become StoreUnavailable
        (the server went away) or StoreError; a connection left inside a transaction is rolled back."""
        psycopg = self._psycopg
        if not self._slots.acquire(timeout=60):
            raise StoreUnavailable(f"the database {self.shown}: all {self.pool_size} connections busy for 60 s")
        connection = None
        try:
            connection = self._take()
            if not self._schema_checked:
                self.ensure_schema(connection)
            try:
                yield connection
            except psycopg.Error as problem:
                raise store_error(self.url, problem) from None
        finally:
            if connection is not None:
                self._give_back(connection)
            self._slots.release()

    def _take(self) -> "psycopg.Connection[Any]":
        while True:
            with self._guard:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            if connection.closed or _reads_as_closed(connection):
                connection.close()
                continue
            return connection

    def _give_back(self, connection: "psycopg.Connection[Any]") -> None:
        pq = self._psycopg.pq
        status = connection.pgconn.transaction_status
        if connection.closed or status == pq.TransactionStatus.UNKNOWN:
            connection.close()
            return
        if status != pq.TransactionStatus.IDLE:
            try:
                connection.execute("ROLLBACK")
            except self._psycopg.Error:
                connection.close()
                return
        with self._guard:
            self._idle.append(connection)

    def discard_idle(self) -> None:
        """Close every idle connection (after the server restarted, before the next use notices each one)."""
        with self._guard:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def close(self) -> None:
        self.discard_idle()

    def ensure_schema(self, connection: "psycopg.Connection[Any]") -> None:
        """Check the database's ARC schema, creating it in an empty database (under an advisory lock, so that
        instances starting at once create it once); refuse another application's tables or another version, and
        a role that cannot create the tables, each saying what to do."""
        errors = self._psycopg.errors
        creating: list[bool] = []  # set when the tables are being created
        try:
            self._ensure_schema(connection, creating)
        except errors.DuplicateTable as problem:
            raise StoreCorrupt(f"the database {self.shown} has no ARC schema (arc_meta) but a table of ARC's name"
                               f" ({str(problem).strip().splitlines()[0]}): another application's; give ARC a"
                               " database of its own") from None
        except errors.InsufficientPrivilege as problem:
            first = str(problem).strip().splitlines()[0]
            if creating:
                raise StoreError(f"the database {self.shown} is empty and its role cannot create ARC's tables"
                                 f" ({first}): grant it CREATE on the schema, or start the first instance with a role"
                                 " that can") from None
            raise StoreError(f"the database {self.shown}: its role cannot read ARC's tables ({first}): grant it"
                             " SELECT on them (a proxy or a writer also INSERT and UPDATE), or use the role that owns"
                             " them") from None
        except self._psycopg.Error as problem:
            raise store_error(self.url, problem) from None

    def writable(self, connection: "psycopg.Connection[Any]") -> None:
        """StoreError naming what is missing when the connection's role cannot write ARC's tables (a proxy checks
        this at start rather than failing every request)."""
        # (has_table_privilege with a list of privileges is true when any one is held: each asked alone)
        needed = [(table, right) for table, rights in (("arc_meta", ("SELECT",)),
                                                      ("arc_tasks", ("SELECT", "INSERT", "UPDATE")),
                                                      ("arc_events", ("SELECT", "INSERT")),
                                                      ("arc_marks", ("SELECT", "INSERT"))) for right in rights]
        rows = connection.execute("SELECT " + ", ".join("has_table_privilege(%s, %s)" for _ in needed),
                                  [value for pair in needed for value in pair]).fetchone()
        self.round_trips += 1
        missing = [f"{right} on {table}" for (table, right), granted in zip(needed, rows or ()) if not granted]
        if missing:
            raise StoreError(f"the database {self.shown}: its role cannot write ARC's tables (it lacks "
                             f"{', '.join(missing)}): grant them, or use the role that owns the tables")

    def ensure_replies(self, connection: "psycopg.Connection[Any]") -> str | None:
        """The proxy's ``arc_replies``: created (under the schema's advisory lock) in an ARC database made before it
        existed. None when the connection's role can read and write it; else why not (the proxy then answers a
        client's retry that reaches another instance with a fork, as before)."""
        return self._ensure_table(connection, "arc_replies", REPLIES, ("SELECT", "INSERT", "UPDATE"))

    def ensure_running(self, connection: "psycopg.Connection[Any]") -> str | None:
        """The proxy's ``arc_running`` (`RUNNING`): created (under the schema's advisory lock) in an ARC database made
        before it existed. None when the connection's role can read and write it; else why not (the proxy then lets a
        client's retry that reaches another instance while the first attempt runs fork, as before)."""
        return self._ensure_table(connection, "arc_running", RUNNING, ("SELECT", "INSERT", "UPDATE", "DELETE"))

    def _ensure_table(self, connection: "psycopg.Connection[Any]", table: str, create: str,
                      rights: tuple[str, ...]) -> str | None:
        """Table ``table`` made by ``create`` under the schema's advisory lock when it is absent; None when the
        connection's role has every one of ``rights`` on it, else why not."""
        driver = self._psycopg
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                found = connection.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
                self.round_trips += 2
                if not found or not found[0]:
                    connection.execute(create)
                    self.round_trips += 1
        except driver.errors.InsufficientPrivilege as problem:
            return f"its role cannot create the table {table} ({str(problem).strip().splitlines()[0]})"
        except driver.Error as problem:
            raise store_error(self.url, problem) from None
        granted = connection.execute("SELECT " + ", ".join("has_table_privilege(%s, %s)" for _ in rights),
                                     [value for right in rights for value in (table, right)]).fetchone()
        self.round_trips += 1
        if not granted or not all(granted):
            return f"its role lacks {', '.join(rights[:-1])} or {rights[-1]} on {table}"
        return None

    def ensure_last_active(self, connection: "psycopg.Connection[Any]") -> tuple[bool, str | None]:
        """``arc_tasks.last_active`` (`LAST_ACTIVE`) and its trigger (`LAST_ACTIVE_TRIGGER`): added (under the
        schema's advisory lock, waiting at most 5 s for the table's lock) to an ARC database made before them.
        Whether the column is there (else the proxy's commits leave it out, and ``forget --idle-for`` refuses the
        database), and why not both are (None when they are)."""
        driver = self._psycopg
        column = False
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                column, trigger = has_last_active(connection), has_last_active_trigger(connection)
                self.round_trips += 3
                if not column or not trigger:
                    connection.execute("SET LOCAL lock_timeout = '5s'")
                    if not column:
                        connection.execute(LAST_ACTIVE)
                    if not trigger:
                        connection.execute(LAST_ACTIVE_TRIGGER)
                    self.round_trips += 1 + (not column) + (not trigger)
                self.round_trips += 1
        except driver.errors.InsufficientPrivilege as problem:
            what = "the trigger arc_tasks_last_active" if column else "the column arc_tasks.last_active"
            return column, f"its role cannot add {what} ({str(problem).strip().splitlines()[0]})"
        except driver.errors.LockNotAvailable:
            what = "the trigger arc_tasks_last_active" if column else "the column arc_tasks.last_active"
            return column, f"the table arc_tasks stayed locked for 5 s; the next start adds {what}"
        except driver.Error as problem:
            raise store_error(self.url, problem) from None
        return True, None

    def _ensure_schema(self, connection: "psycopg.Connection[Any]", creating: list[bool]) -> None:
        found = self._meta(connection)
        if found is None and not self.create_schema:
            raise StoreNotFound(f"the database {self.shown} holds no ARC store (no table arc_meta); nothing was"
                                " changed")
        if found is None:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                self.round_trips += 2
                found = self._meta(connection, cached=False)  # (another instance may have made it meanwhile)
                if found is None:
                    creating.append(True)
                    for statement in SCHEMA:
                        connection.execute(statement)
                    connection.execute("INSERT INTO arc_meta VALUES ('application', %s), ('schema_version', %s)",
                                       (APPLICATION, str(SCHEMA_VERSION)))
                    self.round_trips += len(SCHEMA) + 1
                    found = {"application": APPLICATION, "schema_version": str(SCHEMA_VERSION)}
        if found.get("application") != APPLICATION:
            raise StoreCorrupt(f"the database {self.shown} holds tables of another application (arc_meta)")
        if found.get("schema_version") != str(SCHEMA_VERSION):
            raise StoreCorrupt(f"the database {self.shown} holds ARC schema {found.get('schema_version')}; this"
                               f" arc-ref reads schema {SCHEMA_VERSION}: use the arc-ref that made it, or give this"
                               " one a database of its own")
        self._schema_checked = True

    def _meta(self, connection: "psycopg.Connection[Any]", cached: bool = True) -> dict[str, str] | None:
        """arc_meta's rows; None when the table does not exist (an empty database). ``cached=False``: read
        pg_class itself (in the schema a CREATE TABLE uses), not the backend's catalog cache: inside the
        transaction that waited for the schema's lock, that cache may still hold "no arc_meta" from the look before
        the wait while another instance created the tables meanwhile (PostgreSQL takes such news in at a
        transaction's start or when it locks a table, not after an advisory lock; review h58 F1)."""
        exists = connection.execute(
            "SELECT to_regclass('arc_meta') IS NOT NULL" if cached else
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_class WHERE relname = 'arc_meta' AND relnamespace ="
            " (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = current_schema()))").fetchone()
        self.round_trips += 1
        if not exists or not exists[0]:
            return None
        self.round_trips += 1
        return dict(connection.execute("SELECT key, value FROM arc_meta").fetchall())


def _reads_as_closed(connection: "psycopg.Connection[Any]") -> bool:
    """An idle connection whose socket is readable: the server sent something unasked (its goodbye when it shut
    down) or closed it. Costs no round trip."""
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


_databases: dict[str, Database] = {}
_databases_guard = threading.Lock()


def database(url: str) -> Database:
    """The process's one pool for ``url``."""
    with _databases_guard:
        found = _databases.get(url)
        if found is None:
            found = _databases[url] = Database(url)
        return found


# --- rows: checking and folding -------------------------------------------------------------------------


def fold_row(state: ArcState | None, seq: int, line: str, where: str) -> tuple[ArcState, str | None]:
    """The state after row ``seq`` (row 1: ``init`` of its config), and the config line when seq is 1;
    StoreCorrupt naming the row when it is not a legal line or event (`arc_ref.persist.rows.fold_row`)."""
    return rows.fold_row(state, seq, line, where), (line if seq == 1 else None)


def _missing(where: str, head_seq: int, head_checksum: str, rows: int, checksum_at_head: str | None) -> str | None:
    """Why the rows read are not every acknowledged event (None when they are)."""
    if head_seq > rows:
        missing = head_seq - rows
        return (f"{where}: {missing} acknowledged event{'s are' if missing > 1 else ' is'} missing: rows up to"
                f" {head_seq} were acknowledged (arc_tasks) but the log ends at row {rows} (arc-ref export writes"
                f" the {rows} rows that are there)")
    if rows > head_seq:
        return f"{where}: rows after the acknowledged row {head_seq} exist (written outside a writer's transaction)"
    if checksum_at_head != head_checksum:
        return (f"{where}: row {head_seq} is not the acknowledged row (its chained checksum differs from"
                " arc_tasks): acknowledged rows were replaced")
    return None


# --- one task ------------------------------------------------------------------------------------------


class PostgresStore:
    """An ARC task whose every event is committed to PostgreSQL before it is acknowledged (see the module doc).

    The same methods as `arc_ref.persist.DurableStore` (create, open, append, append_many, events, export_lines,
    state, seq, checksum, close), for the Session, `arc-ref mcp`, `inspect` and `export`; writers in several
    processes may share a task (each catches up before it appends).
    """

    def __init__(self, db: Database, key: str, readonly: bool) -> None:
        self.database = db
        self.key = key
        self.path = f"{db.shown}#{key}"  # how messages name it (no password)
        self._readonly = readonly
        self._state: ArcState | None = None
        self._guard = threading.RLock()
        self.seq = 0
        self.checksum = GENESIS
        self.snapshot_seq = 0
        self.report = OpenReport(0, 0, 0, 0.0, "")
        self.closed = False

    @classmethod
    def create(cls, url: str, key: str, config: Config) -> "PostgresStore":
        """A new task ``key`` under ``config`` (StoreExists when the key is taken)."""
        line = encode_config_line(config_line(config))
        state = init(config)  # ConfigError before anything is written
        store = cls(database(url), check_key(key), readonly=False)
        checksum = chain(GENESIS, 1, line.encode("utf-8"))
        psycopg = store.database._psycopg
        with store.database.connection() as connection:
            try:
                with connection.pipeline():  # one round trip: the block's end sends the only Sync
                    connection.execute("BEGIN")
                    connection.execute("INSERT INTO arc_tasks (key, seq, checksum) VALUES (%s, 1, %s)",
                                       (key, checksum))
                    connection.execute("INSERT INTO arc_events VALUES (%s, 1, %s, %s)", (key, line, checksum))
                    connection.execute("COMMIT")
                store.database.round_trips += 1
            except psycopg.errors.UniqueViolation:
                raise StoreExists(f"{store.path} already exists; open it, or choose another key") from None
        store._state, store.seq, store.checksum = state, 1, checksum
        store.report = OpenReport(1, 0, 0, 0.0, "new store")
        return store

    @classmethod
    def open(cls, url: str, key: str, *, readonly: bool = False) -> "PostgresStore":
        """Reopen task ``key``: the fold of its rows, each checked; StoreNotFound, or StoreCorrupt naming a bad row
        or how many acknowledged events are missing."""
        store = cls(database(url), check_key(key), readonly)
        started = time.perf_counter()
        store._catch_up_read()
        store.report = OpenReport(store.seq, 0, store.seq - 1, time.perf_counter() - started, "no snapshot")
        return store

    def _catch_up_read(self) -> None:
        """Fold the rows after ``seq`` in one consistent read (REPEATABLE READ), checked against the head."""
        with self.database.connection() as connection:
            with connection.pipeline():
                connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                head = connection.execute("SELECT seq, checksum FROM arc_tasks WHERE key = %s", (self.key,))
                rows = connection.execute("SELECT seq, line, checksum FROM arc_events WHERE task = %s AND seq > %s"
                                          " ORDER BY seq", (self.key, self.seq))
                connection.execute("COMMIT")
            found = head.fetchone()
            fetched = rows.fetchall()
            self.database.round_trips += 1
        if found is None:
            raise StoreNotFound(f"no ARC task {self.key!r} in {self.database.shown}")
        self._fold(fetched, found[0], found[1])

    def _fold(self, rows: Sequence[tuple[int, str, str]], head_seq: int, head_checksum: str) -> None:
        state, seq, checksum = self._state, self.seq, self.checksum
        at_head = checksum if seq == head_seq else None
        for seq, line, checksum in checked_rows(rows, self.path, self.seq, self.checksum):
            state, config_text = fold_row(state, seq, line, self.path)
            if seq == head_seq:
                at_head = checksum
        if seq == 0:
            raise StoreCorrupt(f"{self.path} holds no rows (not even the config line)")
        problem = _missing(self.path, head_seq, head_checksum, seq, at_head)
        if problem is not None:
            raise StoreCorrupt(problem)
        self._state, self.seq, self.checksum = state, seq, checksum

    # --- reading ------------------------------------------------------------------------------

    @property
    def state(self) -> ArcState:
        if self._state is None or self.closed:
            raise StoreError(f"{self.path} is closed")
        return self._state

    @property
    def readonly(self) -> bool:
        return self._readonly

    def events(self, start: int = 1, count: int | None = None) -> Iterator[StoredEvent]:
        """The stored rows from ``start`` up to the row this store has folded (row 1 is the config line)."""
        start = max(1, min(start, self.seq + 1))
        end = self.seq if count is None else min(self.seq, start + max(0, count) - 1)
        if end < start:
            return
        with self.database.connection() as connection:
            rows = connection.execute("SELECT seq, line, checksum FROM arc_events WHERE task = %s AND seq >= %s"
                                      " AND seq <= %s ORDER BY seq", (self.key, start, end)).fetchall()
            self.database.round_trips += 1
        for seq, line, checksum in rows:
            yield StoredEvent(seq, line, checksum)

    def export_lines(self) -> Iterator[str]:
        for stored in self.events():
            yield stored.line

    # --- writing ------------------------------------------------------------------------------

    def append(self, event: Event) -> Appended:
        return self.append_many((event,))[0]

    def append_many(self, events: Iterable[Event]) -> list[Appended]:
        """Lock the task, fold what other writers appended, apply ``events`` (all or none), commit, return."""
        with self._guard:
            if self.closed:
                raise StoreError(f"{self.path} is closed")
            if self._readonly:
                raise StoreError(f"{self.path} is open read-only; open it without readonly to append")
            events = list(events)
            for event in events:
                event_row_line(event)  # refused before anything is locked
            with self.database.connection() as connection:
                with connection.pipeline():
                    connection.execute("BEGIN")
                    locked = connection.execute("SELECT seq, checksum FROM arc_tasks WHERE key = %s FOR UPDATE",
                                                (self.key,))
                head = locked.fetchone()
                self.database.round_trips += 1
                if head is None:
                    raise StoreNotFound(f"no ARC task {self.key!r} in {self.database.shown}")
                if head[0] != self.seq or head[1] != self.checksum:  # another writer appended: catch up
                    rows = connection.execute("SELECT seq, line, checksum FROM arc_events WHERE task = %s AND"
                                              " seq > %s ORDER BY seq", (self.key, self.seq)).fetchall()
                    self.database.round_trips += 1
                    if head[0] < self.seq:
                        raise StoreCorrupt(f"{self.path}: the database holds {head[0]} rows, fewer than the"
                                           f" {self.seq} this writer saw acknowledged")
                    self._fold(rows, head[0], head[1])
                state, seq, checksum = self.state, self.seq, self.checksum
                rows_out: list[tuple[str, int, str, str]] = []
                acknowledged: list[Appended] = []
                for event in events:
                    state, output = step(state, event)  # ArcError: nothing of this batch is stored
                    line = event_row_line(event)
                    seq += 1
                    checksum = chain(checksum, seq, line.encode("utf-8"))
                    rows_out.append((self.key, seq, line, checksum))
                    acknowledged.append(Appended(seq, checksum, output))
                if not rows_out:
                    connection.execute("ROLLBACK")
                    self.database.round_trips += 1
                    return []
                with connection.pipeline():
                    with connection.cursor() as cursor:
                        cursor.executemany("INSERT INTO arc_events VALUES (%s, %s, %s, %s)", rows_out)
                    connection.execute("UPDATE arc_tasks SET seq = %s, checksum = %s WHERE key = %s",
                                       (seq, checksum, self.key))
                    connection.execute("COMMIT")
                self.database.round_trips += 1
            self._state, self.seq, self.checksum = state, seq, checksum
            return acknowledged

    def snapshot_due(self) -> bool:
        return False

    def write_snapshot(self) -> str:
        return "no snapshot: a PostgreSQL store folds its rows (no pickled state is shared between processes)"

    def close(self, snapshot: bool = True) -> None:
        with self._guard:
            self.closed = True

    def __enter__(self) -> "PostgresStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Store = DurableStore | PostgresStore
"""A task's durable store: a SQLite file (the embedded default) or a task in a PostgreSQL database."""


def _task(location: str) -> tuple[str, str]:
    url, key = split_task_url(location)
    if key is None:
        raise StoreError(f"{shown_url(url)}: name the task in the database: {shown_url(url)}#KEY")
    return url, key


def open_store(location: str | os.PathLike[str], *, readonly: bool = False, use_snapshot: bool = True) -> Store:
    """`DurableStore.open` for a path; for ``postgresql://.../DB#KEY`` the task KEY of that database."""
    if is_database_url(location):
        assert isinstance(location, str)
        return PostgresStore.open(*_task(location), readonly=readonly)
    return DurableStore.open(location, readonly=readonly, use_snapshot=use_snapshot)


def create_store(location: str | os.PathLike[str], config: Config) -> Store:
    """`DurableStore.create` for a path; for ``postgresql://.../DB#KEY`` a new task KEY in that database."""
    if is_database_url(location):
        assert isinstance(location, str)
        return PostgresStore.create(*_task(location), config)
    return DurableStore.create(location, config)


__all__ = ["Database", "Store", "create_store", "open_store", "PostgresStore", "StoreRefused", "StoreUnavailable", "checked_rows", "database", "event_row_line",
           "fold_row", "is_database_url", "shown_url", "split_task_url"]
