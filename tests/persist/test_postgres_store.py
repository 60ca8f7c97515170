"""The PostgreSQL store (issue 30 item 1): the SQLite store's contract on a shared database. Rows are the replay
trace (export = the same lines a SQLite store of the same events exports), reopening is replaying, a damaged,
edited or missing row stops the open naming it, several writers catch up instead of overwriting, the database
down is StoreUnavailable with nothing acknowledged lost, and the counted round trips are the wire's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from arc_ref.config import preset
from arc_ref.errors import CapacityExceeded
from arc_ref.machine import AgentTurn, Observe
from arc_ref.persist import DurableStore, StoreCorrupt, StoreError, StoreExists, StoreNotFound

from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir
from tests.deployment import PostgresServer
from tests.waiting import wait_until
from tests.persist.test_store import CONFIG, events, folded

postgres_store = pytest.importorskip("arc_ref.persist.postgres")
psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
PostgresStore = postgres_store.PostgresStore
StoreUnavailable = postgres_store.StoreUnavailable


def written(url: str, key: str = "task") -> "postgres_store.PostgresStore":
    store = PostgresStore.create(url, key, CONFIG)
    for event in events():
        store.append(event)
    return store


def sql(url: str, statement: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)


def test_rows_are_the_sqlite_stores_lines_and_reopening_is_replaying(pg_url: str, tmp_path: Path) -> None:
    store = written(pg_url)
    with DurableStore.create(tmp_path / "task.arc", CONFIG) as sqlite_store:
        for event in events():
            sqlite_store.append(event)
        sqlite_rows = [(row.seq, row.line, row.checksum) for row in sqlite_store.events()]
    reopened = PostgresStore.open(pg_url, "task")
    assert [(row.seq, row.line, row.checksum) for row in reopened.events()] == sqlite_rows
    assert reopened.state == store.state == folded()
    assert (reopened.seq, reopened.checksum) == (store.seq, store.checksum) == (len(events()) + 1, sqlite_rows[-1][2])
    reader = PostgresStore.open(pg_url, "task", readonly=True)
    with pytest.raises(StoreError, match="read-only"):
        reader.append(Observe("ls", ""))
    assert list(reader.events(3, 2)) == list(reopened.events())[2:4]


def test_refused_events_store_nothing_and_keys_are_unique(pg_url: str) -> None:
    store = PostgresStore.create(pg_url, "small", preset("minimal", capacity=3))
    with pytest.raises(StoreExists):
        PostgresStore.create(pg_url, "small", CONFIG)
    with pytest.raises(StoreNotFound):
        PostgresStore.open(pg_url, "absent")
    with pytest.raises(StoreError, match="task key"):
        PostgresStore.open(pg_url, "no spaces")
    before = store.seq
    with pytest.raises(CapacityExceeded):
        for number in range(20):
            store.append(Observe(f"cmd {number}", "x"))
    assert store.seq == before + 3 and store.state.stored == 3
    assert PostgresStore.open(pg_url, "small").seq == store.seq  # the refused fourth left no row


def test_export_is_a_trace_that_replay_reproduces(pg_url: str, tmp_path: Path) -> None:
    written(pg_url)
    exported = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "export", f"{pg_url}#task"],
                              capture_output=True, text=True, check=False)
    if exported.returncode != 0 and "no ARC store" in exported.stderr:
        pytest.fail(f"arc-ref export does not read postgresql:// yet: {exported.stderr}")
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert lines == [row.line for row in PostgresStore.open(pg_url, "task").events()]
    trace = tmp_path / "trace.jsonl"
    trace.write_text(exported.stdout, encoding="utf-8")
    replayed = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", str(trace)], capture_output=True,
                              text=True, check=False)
    assert replayed.returncode == 0, replayed.stderr


def test_copy_moves_a_task_of_the_database_into_a_sqlite_store(pg_url: str, tmp_path: Path) -> None:
    source = written(pg_url)
    copied = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "copy", f"{pg_url}#task",
                             str(tmp_path / "task.arc")], capture_output=True, text=True, check=False)
    assert copied.returncode == 0 and copied.stderr == "", copied.stderr
    with DurableStore.open(tmp_path / "task.arc") as store:  # a writer: the same rows and state
        assert [row.line for row in store.events()] == [row.line for row in source.events()]
        assert store.state == source.state and store.checksum == source.checksum


def test_a_damaged_edited_or_missing_row_stops_the_open_naming_it(pg_url: str) -> None:
    written(pg_url)
    with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        sql(pg_url, "UPDATE arc_events SET line = line WHERE seq = 3")
    sql(pg_url, "ALTER TABLE arc_events DISABLE TRIGGER arc_events_append_only")  # what a tamperer could do
    sql(pg_url, "UPDATE arc_events SET line = replace(line, 'a.txt', 'A.txt') WHERE task = 'task' AND seq = 2")
    with pytest.raises(StoreCorrupt, match="row 2 fails its checksum"):
        PostgresStore.open(pg_url, "task")
    written(pg_url, "second")
    sql(pg_url, "DELETE FROM arc_events WHERE task = 'second' AND seq = 9")
    with pytest.raises(StoreCorrupt, match="1 acknowledged event is missing: rows up to 9 were acknowledged"):
        PostgresStore.open(pg_url, "second")
    written(pg_url, "third")
    sql(pg_url, "DELETE FROM arc_events WHERE task = 'third' AND seq = 4")
    with pytest.raises(StoreCorrupt, match="row 4 is missing"):
        PostgresStore.open(pg_url, "third")


def test_writers_in_several_places_catch_up_instead_of_overwriting(pg_url: str) -> None:
    first = PostgresStore.create(pg_url, "shared", preset("minimal", capacity=100))
    second = PostgresStore.open(pg_url, "shared")
    first.append(Observe("ls", "one"))
    second.append(Observe("cat", "two"))  # folds row 2 first, then appends row 3
    first.append(AgentTurn("again", "ls"))
    assert first.seq == second.seq + 1 == 4
    assert PostgresStore.open(pg_url, "shared").state == first.state
    workers = [PostgresStore.open(pg_url, "shared") for _ in range(4)]

    def append(store: "postgres_store.PostgresStore", number: int) -> None:
        for turn in range(10):
            store.append(Observe(f"worker {number} turn {turn}", str(turn)))

    threads = [threading.Thread(target=append, args=(store, number)) for number, store in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = PostgresStore.open(pg_url, "shared")
    assert final.seq == 4 + 40  # nothing lost, nothing written twice: every row checked by the chain on open
    actions = [row.line for row in final.events(5)]
    assert len(set(actions)) == 40


def _schema_made_while_waiting(url: str, ensure: "Callable[[Any, Any], Any]") -> list[BaseException]:
    """``ensure(database, connection)`` run on an empty database while another connection holds the schema's
    advisory lock, having seen no ``arc_meta``; that other one creates the whole schema and commits once
    ``ensure`` waits for the lock (instances starting at once on an empty database, review h58 F1). What
    ``ensure`` raised."""
    failures: list[BaseException] = []
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (postgres_store._SCHEMA_LOCK,))

        def other_instance() -> None:
            try:
                database = postgres_store.Database(url, pool_size=1)
                with database.connection() as connection:
                    ensure(database, connection)
                database.close()
            except BaseException as problem:  # noqa: BLE001 - asserted on below
                failures.append(problem)

        thread = threading.Thread(target=other_instance)
        thread.start()
        with psycopg.connect(url, autocommit=True) as watcher:
            wait_until(lambda: bool(watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]),
                None, "the other instance waiting for the schema's lock")
        for statement in postgres_store.SCHEMA:
            holder.execute(statement)
        holder.execute("INSERT INTO arc_meta VALUES ('application', %s), ('schema_version', %s)",
                       (postgres_store.APPLICATION, str(postgres_store.SCHEMA_VERSION)))
        holder.execute("COMMIT")
        thread.join()
    return failures


def test_instances_starting_at_once_on_an_empty_database_all_start(pg_url: str) -> None:
    """Review h58 F1: three `arc-ref proxy` instances started at once on an empty database: two refused to start,
    "has no ARC schema (arc_meta) but a table of ARC's name (relation "arc_meta" already exists): another
    application's". The one that waited for the schema's lock looked for arc_meta again with to_regclass in the
    same transaction, through the catalog cache that still said "no such table" (PostgreSQL reads the other's
    commit into that cache only at a transaction's start or when it locks a table), and created the tables again."""
    assert _schema_made_while_waiting(pg_url, lambda database, connection: None) == []
    with psycopg.connect(pg_url, autocommit=True) as connection:
        assert dict(connection.execute("SELECT key, value FROM arc_meta").fetchall()) == {
            "application": postgres_store.APPLICATION, "schema_version": str(postgres_store.SCHEMA_VERSION)}


def test_the_database_down_is_unavailable_and_nothing_acknowledged_is_lost(postgres: PostgresServer) -> None:
    url = postgres.create_database("arc_test_down")
    store = written(url)
    acknowledged = store.seq
    postgres.kill()
    try:
        with pytest.raises(StoreUnavailable, match="unavailable"):
            store.append(Observe("ls", "while down"))
        with pytest.raises(StoreUnavailable):
            PostgresStore.open(url, "task")
    finally:
        postgres.resume()
    assert store.seq == acknowledged  # the failed append changed nothing
    store.append(Observe("ls", "back"))
    reopened = PostgresStore.open(url, "task")
    assert reopened.seq == acknowledged + 1 and reopened.state == store.state


def test_counted_round_trips_are_the_wires(pg_url: str, tmp_path: Path) -> None:
    """The counter against libpq's own trace of the protocol: a round trip is the client sending, then waiting
    for what the server answers (a run of front-end messages followed by back-end ones)."""
    store = written(pg_url)
    other = PostgresStore.open(pg_url, "task")
    other.append(Observe("ls", "by another writer"))
    database = store.database
    with database.connection():
        pass
    connection = database._idle[-1]
    trace = tmp_path / "libpq.trace"
    with open(trace, "w") as handle:
        connection.pgconn.trace(handle.fileno())
        connection.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        before = database.round_trips
        store.append(Observe("cat", "catching up first"))
        counted = database.round_trips - before
        connection.pgconn.untrace()
    directions = [line.split()[0] for line in trace.read_text().splitlines() if line.strip()]
    waits = sum(1 for earlier, later in zip(directions, directions[1:]) if earlier == "F" and later == "B")
    assert counted == waits == 3  # lock and head; the other writer's row; rows, head and COMMIT


def test_inspect_names_a_task_of_a_database_and_refuses_a_url_without_one(pg_url: str) -> None:
    written(pg_url)
    shown = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "inspect", f"{pg_url}#task", "--events"],
                           capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout.strip().splitlines()) >= len(events()) + 1
    missing = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "inspect", pg_url], capture_output=True,
                             text=True, check=False)
    assert missing.returncode == 2 and "#KEY" in missing.stderr and "Traceback" not in missing.stderr


def require_password(postgres: PostgresServer, role: str, password: str) -> None:
    """``role`` logs in with a password checked by SCRAM (the session's server trusts every other role)."""
    sql(postgres.dsn, f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    rules = postgres.data / "pg_hba.conf"
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    written_rules = f"host all {role} 127.0.0.1/32 scram-sha-256\n" + rules.read_text()
    subprocess.run([*as_postgres, "sh", "-c", f"cat > '{rules}'"], input=written_rules, text=True, check=True)
    subprocess.run([*as_postgres, str(postgres.programs / "pg_ctl"), "-D", str(postgres.data), "reload"],
                   check=True, capture_output=True)
    time.sleep(0.5)  # the postmaster reads pg_hba.conf again on SIGHUP


def test_a_connection_refused_for_good_is_not_worded_as_a_retry(postgres: PostgresServer, tmp_path: Path) -> None:
    """Review h7 m3: a missing database was 'unavailable ...; retry later'. A database, a role or a password the
    server refuses is StoreRefused saying what to fix, at start and on a request; the server down stays
    StoreUnavailable (retry)."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase

    require_password(postgres, "arc_locked", "right")
    host = f"127.0.0.1:{postgres.port}"
    refused = {
        f"postgresql://arc@{host}/arc_no_such_db": 'database "arc_no_such_db" does not exist): create it (createdb',
        f"postgresql://arc_ghost@{host}/postgres": 'role "arc_ghost" does not exist): create the role',
        f"postgresql://arc_locked:wrong@{host}/postgres": 'password authentication failed for user "arc_locked"',
        f"postgresql://arc_locked@{host}/postgres": "no password supplied): give the password",
    }
    for url, expected in refused.items():
        for open_it in (lambda: PostgresStore.open(url, "task"), lambda: AsyncDatabase(url).check_schema()):
            with pytest.raises(postgres_store.StoreRefused) as problem:
                open_it()
            assert expected in str(problem.value) and "retry" not in str(problem.value), str(problem.value)
            assert "wrong" not in str(problem.value)  # the password is not shown
    sql(postgres.dsn, "CREATE DATABASE arc_locked_db OWNER arc_locked")
    PostgresStore.create(f"postgresql://arc_locked:right@{host}/arc_locked_db", "task", CONFIG)  # the right one
    postgres.kill()
    try:
        with pytest.raises(StoreUnavailable, match="retry later"):
            PostgresStore.open(postgres.url("postgres"), "task")
    finally:
        postgres.resume()
    qwen3 = qwen3_dir()
    if qwen3 is None:
        pytest.skip(f"the proxy's start not checked: {QWEN3_ABSENT}")
    started = subprocess.run(
        [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", "--store", f"postgresql://arc@{host}/arc_no_such_db",
         "--upstream", "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{qwen3}", "--context-limit", "16384"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert started.returncode == 2 and "Traceback" not in started.stderr, started.stderr
    assert 'refused the connection (database "arc_no_such_db" does not exist): create it' in started.stderr
    assert "retry later" not in started.stderr


def start_proxy(store: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`arc-ref proxy --store STORE` until it refuses to start (or 20 s: it listened); its output."""
    qwen3 = qwen3_dir()
    if qwen3 is None:
        pytest.skip(f"the proxy's start not checked: {QWEN3_ABSENT}")
    command = [sys.executable, "-m", "arc_ref.frontends.cli", "proxy", "--store", store, "--upstream",
               "http://127.0.0.1:9/v1", "--tokenizer", f"hf-dir:{qwen3}", "--context-limit", "16384", "--port", "0",
               *extra]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20, cwd=tmp_path)
    except subprocess.TimeoutExpired as listening:  # it started: what it printed
        out = listening.stdout.decode() if isinstance(listening.stdout, bytes) else (listening.stdout or "")
        err = listening.stderr.decode() if isinstance(listening.stderr, bytes) else (listening.stderr or "")
        return subprocess.CompletedProcess(command, -1, out, err)


def test_a_database_the_proxy_cannot_use_is_refused_at_start_saying_why(postgres: PostgresServer,
                                                                         tmp_path: Path) -> None:
    """Review h9 MINOR 5: another application's table of ARC's name and a read-only role on an empty database
    exited 70 'internal error (a bug in arc-ref)'; a read-only role on an ARC database started, then answered every
    request 500. Each is now exit 2 at start, one line naming what to do; a writing role starts."""
    foreign = postgres.create_database("arc_foreign_table")
    sql(foreign, "CREATE TABLE arc_events (id int, payload text)")
    empty = postgres.create_database("arc_empty_for_reader")
    ready = postgres.create_database("arc_ready_for_reader")
    PostgresStore.create(ready, "task", CONFIG)  # the schema made by a role that can
    sql(postgres.dsn, "CREATE ROLE arc_reader LOGIN")
    sql(ready, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO arc_reader")
    reader = f"postgresql://arc_reader@127.0.0.1:{postgres.port}"
    expected = {
        foreign: "has no ARC schema (arc_meta) but a table of ARC's name",
        f"{reader}/arc_empty_for_reader": "is empty and its role cannot create ARC's tables",
        f"{reader}/arc_ready_for_reader": "its role cannot write ARC's tables (it lacks INSERT on arc_tasks, UPDATE"
                                          " on arc_tasks, INSERT on arc_events, INSERT on arc_marks)",
    }
    for url, message in expected.items():
        started = start_proxy(url, tmp_path)
        assert started.returncode == 2, (url, started.returncode, started.stderr)
        assert message in started.stderr and "internal error" not in started.stderr, started.stderr
    assert PostgresStore.open(f"{reader}/arc_ready_for_reader", "task", readonly=True).seq == 1  # reading is fine
    listening = start_proxy(ready, tmp_path, "--db-connections", "5000")
    assert listening.returncode == -1, listening.stderr  # it started
    assert "up to 5000 connections" in listening.stdout
    assert "warning: --db-connections 5000, but the server takes" in listening.stderr


def test_idle_connections_go_back_to_the_server(pg_url: str) -> None:
    """Review h9 MAJOR 1: an instance kept every connection a burst opened for ever. Connections idle past the
    limit are closed; the pool opens new ones when needed."""
    import asyncio

    from arc_ref.persist.postgres_conversations import AsyncDatabase

    def open_connections() -> int:
        with psycopg.connect(pg_url, autocommit=True) as connection:
            row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
                                     " 'arc-ref proxy%%'").fetchone()
        return int(row[0]) if row else -1

    async def scenario() -> tuple[int, int, int]:
        database = AsyncDatabase(pg_url, pool_size=3)
        holders = [database.connection() for _ in range(3)]
        for holder in holders:
            await holder.__aenter__()
        for holder in holders:
            await holder.__aexit__(None, None, None)
        burst = open_connections()
        kept = await database.close_idle(3600.0)  # none idle that long
        closed = await database.close_idle(0.0)
        await database.close()
        return burst, kept, closed

    burst, kept, closed = asyncio.run(scenario())
    assert (burst, kept, closed) == (3, 0, 3)
    assert open_connections() == 0


def refusal_of(url: str) -> StoreError:
    """The StoreError opening a connection to ``url`` raises."""
    try:
        with postgres_store.Database(url, pool_size=1).connection():
            pass
    except StoreError as problem:
        return problem
    raise AssertionError(f"{url} connected")


def test_more_refusals_for_good_and_none_that_may_pass(postgres: PostgresServer) -> None:
    """Review h11 MINOR 1-4: sslmode=require against a server without SSL, a database closed to connections and a
    pg_hba.conf reject line are for good (they read as 'retry later'); an LDAP or RADIUS failure may be its server
    down (it read as for good); a password given as a query parameter was shown; a role without SELECT on arc_meta
    was told the database is empty."""
    from arc_ref.persist.postgres_conversations import AsyncDatabase

    sql(postgres.dsn, "CREATE DATABASE arc_closed")
    sql(postgres.dsn, "ALTER DATABASE arc_closed ALLOW_CONNECTIONS false")
    assert isinstance(refusal_of(postgres.url("postgres") + "?sslmode=require"), postgres_store.StoreRefused)
    assert isinstance(refusal_of(postgres.url("arc_closed")), postgres_store.StoreRefused)
    rejected = ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  pg_hba.conf'
                ' rejects connection for host "127.0.0.1", user "x", database "y", no encryption')  # PG 15's words
    assert isinstance(postgres_store.connect_failed("postgresql://x@h/y", Exception(rejected)),
                      postgres_store.StoreRefused)
    pooler = ('connection failed: connection to server at "127.0.0.1", port 6432 failed: FATAL:  unsupported startup'
              ' parameter: options')  # PgBouncer 1.18's words for the proxy's startup options (review h14 O1)
    refused = postgres_store.connect_failed("postgresql://x@h:6432/y", Exception(pooler))
    assert isinstance(refused, postgres_store.StoreRefused) and "ignore_startup_parameters" in str(refused)
    for method in ("LDAP", "RADIUS", "GSSAPI"):
        text = f'connection failed: FATAL:  {method} authentication failed for user "arc"'
        assert isinstance(postgres_store.connect_failed("postgresql://arc@h/arc", Exception(text)), StoreUnavailable)
    sql(postgres.dsn, "CREATE ROLE arc_query_password LOGIN PASSWORD 'right'")
    shown = refusal_of(postgres.url("postgres").replace("arc@", "arc_query_password@") + "?password=Wr0ngSecret")
    assert "Wr0ngSecret" not in str(shown) and "password=***" in str(shown), str(shown)
    url = postgres.create_database("arc_no_meta_rights")
    AsyncDatabase(url).check_schema()
    sql(url, "CREATE ROLE arc_no_meta LOGIN")
    sql(url, "GRANT SELECT, INSERT, UPDATE ON arc_tasks TO arc_no_meta;"
             " GRANT SELECT, INSERT ON arc_events, arc_marks TO arc_no_meta")
    with pytest.raises(StoreError) as refused:
        AsyncDatabase(url.replace("arc@", "arc_no_meta@")).check_schema()
    assert "is empty" not in str(refused.value) and "cannot read ARC's tables" in str(refused.value), refused.value
