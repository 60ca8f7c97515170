"""`arc-ref forget`: whole proxy conversations removed from a PostgreSQL store (their rows, marks and kept reply).

ARC's tables are append-only (`APPEND_ONLY`): a task's rows are never updated or deleted while it lives, which is
what makes every stored observation recoverable from its id (A2). What an operator needs besides is to remove whole
conversations: those past a retention time, and the forks racing requests left (README, "Running several
proxies"). ``forget`` does that and nothing finer: every row, mark and reply of a conversation goes, in one
transaction, or none. Only the proxy's conversations (``position`` > 0) are touched; a session's or an MCP server's
task is not.

A conversation forgotten while one of its requests runs on some instance: that request's commit finds it gone (the
head it would move is not there; a fork, written in one REPEATABLE READ snapshot, inserts its task only where its
parent is in that snapshot, so a parent removed before it leaves the fork's rows without their task and they fail
their foreign key; one removed after it is copied whole), writes nothing, and the request is tried again as a new
conversation (`arc_ref.persist.postgres_conversations.ConversationGone`). A conversation whose head row a commit holds at the
moment is left for a later run (``FOR UPDATE SKIP LOCKED``) and counted as busy.
"""

from __future__ import annotations

import datetime
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

import attrs

from arc_ref.persist.errors import StoreError
from arc_ref.persist.postgres import (
    _SCHEMA_LOCK,
    APPEND_ONLY,
    FORGETTING,
    MARKS_BY_TASK,
    Database,
    _psycopg,
    has_last_active,
    store_error,
)

if TYPE_CHECKING:
    import psycopg

FORGET_BATCH = 500  # conversations removed per transaction
_Times = tuple["datetime.datetime | None", "datetime.datetime | None"]  # (created before, last active before)
HELD_WAIT = "3s"  # how long the last pass waits for the row of a conversation skipped as held (lock_timeout)


@attrs.frozen
class Conversation:
    """A proxy conversation as ``forget`` lists it."""

    key: str
    created: datetime.datetime
    rows: int  # its head row: rows stored


@attrs.frozen
class Forgotten:
    """What a ``forget`` removed, and what it left."""

    conversations: int = 0
    rows: int = 0
    marks: int = 0
    replies: int = 0
    busy: tuple[str, ...] = ()  # named or chosen, but a commit held its head row: left for a later run


def chosen(db: Database, keys: Sequence[str], created_before: datetime.datetime | None,
           active_before: datetime.datetime | None = None) -> tuple[list[Conversation], list[str]]:
    """The proxy conversations to forget: those named by ``keys`` (created before ``created_before``, last active
    before ``active_before``, when given), or with no keys every one the times pick, oldest first; and the named keys
    left out (not a proxy conversation of this database: absent, or a session's or an MCP server's task; or not
    picked by the times)."""
    with db.connection() as connection:
        if active_before is not None and not has_last_active(connection):
            raise StoreError(f"the database {db.shown} has no column arc_tasks.last_active (made by an arc-ref older"
                             " than --idle-for): start an arc-ref proxy of this version on it once, with the role that"
                             " owns ARC's tables, or use --older-than")
        if not keys and created_before is None and active_before is None:
            raise StoreError("forget needs conversation keys or a time (--created-before, --older-than, --idle-for)")
        times, values = _picked_by(created_before, active_before)
        found = connection.execute(
            "SELECT key, created, seq FROM arc_tasks WHERE (%s OR key = ANY(%s)) AND position > 0" + times
            + " ORDER BY created, key", (not keys, list(keys), *values)).fetchall()
    conversations = [Conversation(str(key), created, int(seq)) for key, created, seq in found]
    picked = {conversation.key for conversation in conversations}
    unknown = [key for key in dict.fromkeys(keys) if key not in picked]
    return conversations, unknown


def forget(db: Database, keys: Sequence[str], created_before: datetime.datetime | None = None,
           progress: Callable[[Forgotten], None] = lambda done: None,
           active_before: datetime.datetime | None = None) -> Forgotten:
    """Remove conversations ``keys`` (proxy conversations; with ``created_before``, only those created before it;
    with ``active_before``, only those last active before it, checked again under each one's row lock: one a request
    committed to meanwhile stays), `FORGET_BATCH` per transaction; ``progress`` is called after each."""
    times = (created_before, active_before)
    done = Forgotten()
    with db.connection() as connection:
        _allow_forgetting(db, connection)
        _index_marks_by_task(db, connection)
        replies = connection.execute("SELECT to_regclass('arc_replies') IS NOT NULL").fetchone()
        for start in range(0, len(keys), FORGET_BATCH):
            try:
                done = _forget_batch(connection, list(keys[start:start + FORGET_BATCH]), times,
                                     bool(replies and replies[0]), done)
            except _psycopg().errors.InsufficientPrivilege as problem:
                raise StoreError(f"the database {db.shown}: this role cannot delete ARC's rows"
                                 f" ({str(problem).strip().splitlines()[0]}): {_forgotten_so_far(done)}; run forget"
                                 " with the role that owns ARC's tables") from None
            progress(done)
        if done.busy:
            done = _forget_held(db, connection, times, bool(replies and replies[0]), done)
    return done


def _forget_held(db: Database, connection: "psycopg.Connection[Any]", times: _Times, replies: bool,
                 done: Forgotten) -> Forgotten:
    """The conversations skipped because their row was locked, once more, waiting up to `HELD_WAIT` for each lock:
    one another forget was removing is gone by then (not left: review h22 F7, two forgets at once each reported
    thousands 'left' and exit 1 with none left); one a request's commit held is forgotten once it is done; one still
    held past the wait is left."""
    busy = list(done.busy)
    try:
        return _forget_batch(connection, busy, times, replies, attrs.evolve(done, busy=()), wait=True)
    except _psycopg().errors.LockNotAvailable:  # a commit held one past the wait: every key still there is left
        still = {str(key) for (key,) in connection.execute("SELECT key FROM arc_tasks WHERE key = ANY(%s)",
                                                           (busy,)).fetchall()}
        return attrs.evolve(done, busy=tuple(key for key in busy if key in still))


def _picked_by(created_before: datetime.datetime | None, active_before: datetime.datetime | None
               ) -> tuple[str, tuple[datetime.datetime, ...]]:
    """The SQL condition (``AND ...``, or nothing) and its values that pick conversations by the times given; a row
    without ``last_active`` (stored before the column existed) counts as last active when it was created."""
    condition = ""
    values: tuple[datetime.datetime, ...] = ()
    if created_before is not None:
        condition, values = condition + " AND created < %s", (*values, created_before)
    if active_before is not None:
        condition, values = condition + " AND coalesce(last_active, created) < %s", (*values, active_before)
    return condition, values


def _forgotten_so_far(done: Forgotten) -> str:
    return f"{done.conversations} conversation(s) forgotten before this" if done.conversations else "nothing forgotten"


def _forget_batch(connection: "psycopg.Connection[Any]", batch: list[str], times: _Times, replies: bool,
                  done: Forgotten, wait: bool = False) -> Forgotten:
    """One transaction: the batch's conversations whose row it can lock, removed whole. ``wait``: it waits for a
    locked row up to `HELD_WAIT` (LockNotAvailable past it) instead of skipping it."""
    with connection.transaction():
        connection.execute(f"SET LOCAL {FORGETTING} = 'on'")
        if wait:
            connection.execute(f"SET LOCAL lock_timeout = '{HELD_WAIT}'")
        condition, values = _picked_by(*times)
        locked = [str(key) for (key,) in connection.execute(
            "SELECT key FROM arc_tasks WHERE key = ANY(%s) AND position > 0" + condition + " FOR UPDATE"
            + ("" if wait else " SKIP LOCKED"), (batch, *values)).fetchall()]
        removed_replies = connection.execute("DELETE FROM arc_replies WHERE task = ANY(%s)",
                                             (locked,)).rowcount if replies else 0
        marks = connection.execute("DELETE FROM arc_marks WHERE task = ANY(%s)", (locked,)).rowcount
        rows = connection.execute("DELETE FROM arc_events WHERE task = ANY(%s)", (locked,)).rowcount
        tasks = connection.execute("DELETE FROM arc_tasks WHERE key = ANY(%s)", (locked,)).rowcount
    # a key of the batch not locked: a commit held its row (busy), or it went meanwhile (another forget), or (with
    # --idle-for) a request committed to it since it was chosen: no longer picked, it stays and is not busy
    held = {str(key) for (key,) in connection.execute(
        "SELECT key FROM arc_tasks WHERE key = ANY(%s) AND NOT key = ANY(%s)" + condition, (batch, locked, *values)
    ).fetchall()}
    return Forgotten(done.conversations + tasks, done.rows + rows, done.marks + marks, done.replies + removed_replies,
                     done.busy + tuple(key for key in batch if key in held))


def _index_marks_by_task(db: Database, connection: "psycopg.Connection[Any]") -> None:
    """`MARKS_BY_TASK` in a database made before it, built CONCURRENTLY (the proxies' commits go on meanwhile); one a
    failed build left invalid built again. A role that may not: a warning, and forget goes on (one scan of
    ``arc_marks`` per conversation removed)."""
    driver = _psycopg()
    found = connection.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('arc_marks_by_task')"
                               ).fetchone()
    if found is not None and found[0]:
        return
    print(f"arc-ref forget: building the index arc_marks_by_task in {db.shown} (once; it waits for the transactions"
          " open on arc_marks to end)", file=sys.stderr, flush=True)  # (review h22 F3: it waited without a word)
    try:
        if found is not None:
            connection.execute("DROP INDEX CONCURRENTLY IF EXISTS arc_marks_by_task")
        connection.execute(MARKS_BY_TASK.replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY"))
    except driver.errors.InsufficientPrivilege as problem:
        print(f"arc-ref forget: warning: the database {db.shown} has no index arc_marks_by_task and this role cannot"
              f" make it ({str(problem).strip().splitlines()[0]}): each conversation removed scans arc_marks whole;"
              " run forget once with the role that owns ARC's tables", file=sys.stderr, flush=True)
    except driver.Error as problem:
        raise store_error(db.url, problem) from None


def _allow_forgetting(db: Database, connection: "psycopg.Connection[Any]") -> None:
    """The append-only trigger's function as `APPEND_ONLY` writes it (one that lets ``forget`` delete), replaced in a
    database made by an arc-ref older than ``forget`` (under the schema's advisory lock)."""
    driver = _psycopg()
    # the function the triggers of this search path call (review h22 F11: by name alone, another schema's new one
    # was found, the old one kept, and every DELETE refused)
    source = connection.execute("SELECT prosrc FROM pg_proc WHERE oid = to_regproc('arc_append_only')").fetchone()
    if source is not None and FORGETTING in str(source[0]):
        return
    try:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            connection.execute(APPEND_ONLY)
    except driver.errors.InsufficientPrivilege as problem:
        raise StoreError(f"the database {db.shown} was made by an arc-ref older than forget, and this role cannot"
                         f" replace its function arc_append_only() ({str(problem).strip().splitlines()[0]}): run"
                         " forget once with the role that owns ARC's tables") from None
    except driver.Error as problem:
        raise store_error(db.url, problem) from None


__all__ = ["FORGET_BATCH", "Conversation", "Forgotten", "chosen", "forget"]
