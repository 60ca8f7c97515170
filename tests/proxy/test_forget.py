"""`arc-ref forget` (arc_ref.persist.postgres_forget): whole proxy conversations removed from a PostgreSQL store, by key
or by creation time, never a session's task, and a request of a conversation forgotten while it runs answered as a
new conversation (never a fork without its rows)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from typing import Any

import pytest

from tests.proxy.harness import bash_call_reply, needs_qwen3
from tests.proxy.test_shared import continued, first_request, in_process_shared

from arc_ref.frontends.cli import main
from arc_ref.persist.rows import GENESIS, chain

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'arc-ref[postgres]')")
pytestmark = [needs_qwen3]

TABLES = ("arc_replies", "arc_marks", "arc_events")


def other_request(task: str) -> dict[str, Any]:
    request = first_request()
    return {**request, "messages": [request["messages"][0], {"role": "user", "content": task}]}


def counts(url: str, key: str) -> dict[str, int]:
    """Rows of conversation ``key`` in each table."""
    with psycopg.connect(url) as connection:
        found = {table: connection.execute(f"SELECT count(*) FROM {table} WHERE task = %s", (key,)).fetchone()[0]
                 for table in TABLES}
        found["arc_tasks"] = connection.execute("SELECT count(*) FROM arc_tasks WHERE key = %s", (key,)).fetchone()[0]
    return found


def whole_chains(url: str) -> dict[str, int]:
    """Every task's rows checked from row 1 along the checksum chain up to its head: {key: rows}."""
    checked = {}
    with psycopg.connect(url) as connection:
        for key, seq, head in connection.execute("SELECT key, seq, checksum FROM arc_tasks").fetchall():
            checksum, number = GENESIS, 0
            for number, line, stored in connection.execute(
                    "SELECT seq, line, checksum FROM arc_events WHERE task = %s AND seq <= %s ORDER BY seq",
                    (key, seq)).fetchall():
                checksum = chain(checksum, number, line.encode("utf-8"))
                assert stored == checksum, (key, number)
            assert (number, checksum) == (seq, head), (key, number, seq)
            checked[key] = seq
    return checked


def serve(url: str, *requests: dict[str, Any], upstream: Any = bash_call_reply) -> list[Any]:
    """``requests`` one after another through a new in-process instance; their replies."""
    async def scenario() -> list[Any]:
        proxy, client = in_process_shared(url, upstream)
        try:
            return [await proxy.complete(request, None) for request in requests]
        finally:
            await proxy.close()
            await client.aclose()
    return asyncio.run(scenario())


def test_forget_by_key_removes_the_conversation_whole_and_its_next_request_starts_anew(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres.create_database("arc_test_forget_key")
    first, kept = serve(url, first_request(), other_request("List the files of d2."))
    before = counts(url, first.conversation)
    assert before["arc_events"] >= 2 and before["arc_marks"] >= 1 and before["arc_replies"] == 1
    kept_before = counts(url, kept.conversation)
    assert main(["forget", url, first.conversation]) == 0
    said = capsys.readouterr().out
    assert said == (f"forgot 1 conversation(s): {before['arc_events']} rows, {before['arc_marks']} marks,"
                    " 1 kept replies\n")
    assert counts(url, first.conversation) == dict.fromkeys((*TABLES, "arc_tasks"), 0)
    assert counts(url, kept.conversation) == kept_before  # another conversation untouched
    with psycopg.connect(url) as connection, pytest.raises(psycopg.errors.RaiseException, match="append-only"):
        connection.execute("DELETE FROM arc_events WHERE task = %s", (kept.conversation,))  # still append-only
    (again,) = serve(url, continued(first, "a.txt\n"))  # the agent goes on: a new conversation, its history
    assert again.conversation not in (first.conversation, kept.conversation)
    assert counts(url, again.conversation)["arc_events"] > before["arc_events"]
    assert set(whole_chains(url)) == {again.conversation, kept.conversation}


def test_forget_by_age_lists_on_a_dry_run_and_leaves_newer_ones_and_other_tasks(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres.create_database("arc_test_forget_age")
    old, new = serve(url, first_request(), other_request("List the files of d2."))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("UPDATE arc_tasks SET created = now() - interval '40 days' WHERE key = %s",
                           (old.conversation,))
        # a session's task (no proxy position), older still: never forget's
        connection.execute("INSERT INTO arc_tasks (key, seq, checksum, created) VALUES ('session-1', 0, %s,"
                           " now() - interval '90 days')", (GENESIS,))
    old_rows = counts(url, old.conversation)["arc_events"]
    assert main(["forget", url, "--older-than", "30", "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in listed[:-1]] == [old.conversation]
    assert listed[0].endswith(f"\t{old_rows} rows") and listed[-1] == f"would forget 1 conversation(s), {old_rows} rows"
    assert counts(url, old.conversation)["arc_tasks"] == 1  # a dry run removes nothing
    assert main(["forget", url, "--older-than", "30"]) == 0
    assert capsys.readouterr().out.startswith(f"forgot 1 conversation(s): {old_rows} rows")
    assert counts(url, old.conversation)["arc_tasks"] == 0 and counts(url, new.conversation)["arc_tasks"] == 1
    # a named key that is no proxy conversation (a session's task, a key never stored, one too young): status 1
    assert main(["forget", url, "session-1", "nothing-here", new.conversation, "--created-before", "2000-01-01"]) == 1
    error = capsys.readouterr().err
    assert "not a proxy conversation" in error and "session-1, nothing-here" in error
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks").fetchone() == (2,)


def test_forget_refuses_what_it_cannot_do_saying_why(postgres: Any, tmp_path: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres.create_database("arc_test_forget_refusals")
    assert main(["forget", str(tmp_path), "abc"]) == 2
    assert "forget takes a PostgreSQL store" in capsys.readouterr().err
    assert main(["forget", url]) == 2
    assert "say what to forget" in capsys.readouterr().err
    assert main(["forget", url + "#abc", "abc"]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["forget", url, "--older-than", "-1"])
    with pytest.raises(SystemExit):
        main(["forget", url, "--created-before", "yesterday"])
    with pytest.raises(SystemExit):  # review h22 F1: up to 1,000,000 was taken, and past ~739,000 days was BC
        main(["forget", url, "--older-than", "100001"])
    assert "a number of days from 0 to 100,000" in capsys.readouterr().err


def test_a_database_made_before_forget_gets_the_function_that_lets_it_delete_and_the_index(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = postgres.create_database("arc_test_forget_old_schema")
    (first,) = serve(url, first_request())
    with psycopg.connect(url, autocommit=True) as connection:  # the function as arc-ref wrote it before forget
        connection.execute("CREATE OR REPLACE FUNCTION arc_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
                           " BEGIN RAISE EXCEPTION 'ARC tables are append-only: % on % refused', TG_OP, TG_TABLE_NAME;"
                           " END $$")
        connection.execute("DROP INDEX arc_marks_by_task")
    assert main(["forget", url, first.conversation]) == 0
    assert "building the index arc_marks_by_task" in capsys.readouterr().err  # review h22 F3: it waited silently
    assert counts(url, first.conversation)["arc_events"] == 0
    with psycopg.connect(url) as connection:
        assert "arc.forgetting" in connection.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'arc_append_only'").fetchone()[0]
        assert connection.execute("SELECT indisvalid FROM pg_index WHERE indexrelid ="
                                  " to_regclass('arc_marks_by_task')").fetchone() == (True,)  # made, concurrently


def test_a_conversation_forgotten_while_its_request_runs_is_answered_as_a_new_one(postgres: Any) -> None:
    """The conversation is forgotten while the upstream answers a request continuing it: the commit in place finds
    no head, the fork it turns into finds no parent (its row gone), nothing is written, and the request is tried
    again as a new conversation from its messages: answered, and every task in the database whole from row 1."""
    url = postgres.create_database("arc_test_forget_racing")
    (first,) = serve(url, first_request())
    forgotten: list[str] = []

    def upstream(request: Any) -> Any:
        if len(json.loads(request.content)["messages"]) > 2 and not forgotten:
            assert main(["forget", url, first.conversation]) == 0
            forgotten.append(first.conversation)
        return bash_call_reply(request)

    (later,) = serve(url, continued(first, "a.txt\n"), upstream=upstream)
    assert forgotten and later.conversation != first.conversation
    assert set(whole_chains(url)) == {later.conversation}


def test_a_conversation_forgotten_between_its_mark_and_its_rows_is_answered_as_a_new_one(
        postgres: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance that never saw the conversation found its mark, then read its rows after forget removed them: not
    a damaged store (500) but a conversation gone, and the request answered as a new one."""
    from arc_ref.persist import postgres_conversations

    url = postgres.create_database("arc_test_forget_rows")
    (first,) = serve(url, first_request())
    reading = postgres_conversations.RequestTransaction.rows
    forgotten: list[str] = []

    async def forgetting_first(transaction: Any, key: str, after: int, upto: int) -> Any:
        if not forgotten:
            assert await asyncio.to_thread(main, ["forget", url, key]) == 0
            forgotten.append(key)
        return await reading(transaction, key, after, upto)

    monkeypatch.setattr(postgres_conversations.RequestTransaction, "rows", forgetting_first)
    (later,) = serve(url, continued(first, "a.txt\n"))
    assert forgotten == [first.conversation] and later.conversation != first.conversation
    assert set(whole_chains(url)) == {later.conversation}


def test_a_role_that_may_not_delete_or_replace_the_function_is_told_what_to_do(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The proxies' role (SELECT, INSERT, UPDATE: no DELETE) runs forget: refused, naming the owner's role, and
    nothing removed; on a database made before forget it cannot replace the trigger's function either."""
    url = postgres.create_database("arc_test_forget_rights")
    (first,) = serve(url, first_request())
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE ROLE arc_no_delete LOGIN")
        connection.execute("GRANT SELECT, INSERT, UPDATE ON arc_tasks, arc_replies TO arc_no_delete;"
                           " GRANT SELECT, INSERT ON arc_events, arc_marks, arc_meta TO arc_no_delete")
    limited = url.replace("arc@", "arc_no_delete@")
    assert main(["forget", limited, first.conversation]) == 2
    error = capsys.readouterr().err
    assert "this role cannot delete ARC's rows" in error and "nothing forgotten" in error and "owns" in error
    assert counts(url, first.conversation)["arc_events"] > 0
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE OR REPLACE FUNCTION arc_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
                           " BEGIN RAISE EXCEPTION 'append-only'; END $$")
    assert main(["forget", limited, first.conversation]) == 2
    assert "cannot replace its function arc_append_only()" in capsys.readouterr().err
    assert counts(url, first.conversation)["arc_events"] > 0


@pytest.mark.slow
def test_forget_in_a_loop_beside_two_proxy_processes_loses_no_request_and_breaks_no_task(
        postgres: Any, tmp_path: Any) -> None:
    """Real processes: two `arc-ref proxy` instances on one database, six agents continuing their conversations
    round-robin (25 turns each, the upstream answering in 40 ms), and `arc-ref forget --older-than 0` run again and
    again meanwhile, each removing every conversation there is. Every request is answered 200; every task left is
    whole from row 1 along its chain; no mark names a missing task. (Here 150 requests, and requests
    whose conversation went while they ran, each tried again as a new one; three runs: 7-8 forgets, 20-24 such.)"""
    from pathlib import Path

    from tests.deployment import agents_beside, arc_proxy, running, scripted_upstream
    from tests.proxy.harness import QWEN3

    assert QWEN3 is not None
    url = postgres.create_database("arc_test_forget_soak")
    upstream = scripted_upstream(tmp_path, Path(QWEN3), latency_ms=40)
    proxies = [arc_proxy(tmp_path, upstream.url, Path(QWEN3), url, {}) for _ in range(2)]
    with running(upstream, *proxies):
        statuses, forgets = agents_beside(proxies, 6, 25, lambda: ["forget", url, "--older-than", "0"])
    logs = "".join(log.read_text(errors="replace") for log in tmp_path.glob("proxy-*.log"))
    print(f"{len(statuses)} requests, {len(forgets)} forgets, {logs.count('was forgotten')} requests tried again")
    assert statuses == [200] * 150, logs[-3000:]
    # (1: a conversation a commit held was left, and said so)
    assert len(forgets) >= 3 and all(status == 0 or (status == 1 and "left" in said) for status, said in forgets), \
        forgets
    assert "Traceback" not in logs and logs.count("was forgotten") >= 1  # the race was run, not missed
    # (review h22 F9: psycopg's own "error ignored terminating <AsyncPipeline ...>: pipeline aborted", raw, ~20 a run)
    assert "pipeline aborted" not in logs and "error ignored" not in logs, logs[-3000:]
    whole_chains(url)
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM arc_marks m WHERE NOT EXISTS"
                                  " (SELECT 1 FROM arc_tasks t WHERE t.key = m.task)").fetchone() == (0,)


def test_a_request_whose_conversation_keeps_going_is_a_503_to_retry(postgres: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt's commit finds its conversation forgotten (forget run again and again): after 3 tries again the
    request is answered 503 store_unavailable with retry-after, as a passing fault is (not 500, a fault for good)."""
    from arc_ref.persist import postgres_conversations

    url = postgres.create_database("arc_test_forget_again_and_again")
    (first,) = serve(url, first_request())
    commits: list[int] = []

    async def always_gone(transaction: Any, *arguments: Any) -> bool:
        commits.append(1)
        raise postgres_conversations.ConversationGone("db", first.conversation)

    monkeypatch.setattr(postgres_conversations.RequestTransaction, "commit", always_gone)
    with pytest.raises(Exception) as refused:
        serve(url, continued(first, "a.txt\n"))
    assert getattr(refused.value, "status", None) == 503 and getattr(refused.value, "retry_after", None) == 5
    assert len(commits) == 4 and "4 times in a row" in str(refused.value)


def test_a_database_without_arc_s_schema_is_refused_and_left_as_it_was(postgres: Any,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F2: forget (even --dry-run) made ARC's five tables and its function in any database it was
    pointed at, and said 'would forget 0 conversation(s)', exit 0."""
    url = postgres.create_database("arc_test_forget_no_schema")
    for argv in (["--dry-run", "--older-than", "0"], ["--older-than", "0"], ["somekey"]):
        assert main(["forget", url, *argv]) == 2
        assert "holds no ARC store (no table arc_meta); nothing was changed" in capsys.readouterr().err
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'arc_%'").fetchone() == (0,)
        assert connection.execute("SELECT count(*) FROM pg_proc WHERE proname = 'arc_append_only'").fetchone() == (0,)


def test_forgets_at_once_leave_nothing_and_say_so(postgres: Any) -> None:
    """Review h22 F7: forgets of the same conversations at once (three here) each skipped the rows the other had locked and
    reported them 'left, a request was committing to them', exit 1, though the other removed them all."""
    url = postgres.create_database("arc_test_forget_twice")
    serve(url, first_request())  # ARC's schema
    with psycopg.connect(url, autocommit=True) as connection:  # 3,000 old conversations of two rows each, by SQL
        connection.execute("INSERT INTO arc_tasks (key, seq, checksum, position, head, created) SELECT 'old-' || n,"
                           " 2, 'c', 1, 'h', now() - interval '40 days' FROM generate_series(1, 3000) AS n")
        connection.execute("INSERT INTO arc_events SELECT 'old-' || n, s, '{}', 'c' FROM generate_series(1, 3000) AS n,"
                           " generate_series(1, 2) AS s")
    command = [sys.executable, "-m", "arc_ref.frontends.cli", "forget", url, "--older-than", "30"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    forgot = [int(out.split("forgot ")[1].split()[0].replace(",", "")) for _, out, _ in outcomes]
    assert sum(forgot) == 3000 and all(code == 0 for code, _, _ in outcomes), outcomes
    assert not any("left" in err for _, _, err in outcomes), outcomes
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks WHERE key LIKE 'old-%'").fetchone() == (0,)


def test_the_function_upgraded_is_the_one_of_the_store_s_schema(postgres: Any) -> None:
    """Review h22 F11: forget looked the trigger function up by name alone; with the store in a schema of its own
    (search_path in the URL) another schema's newer one was found first, this schema's old one was kept, and every
    DELETE was refused."""
    base = postgres.create_database("arc_test_forget_two_schemas")
    url = base + ("&" if "?" in base else "?") + "options=-csearch_path%3Dother"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA other")
        connection.execute("CREATE FUNCTION public.arc_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
                           " BEGIN IF current_setting('arc.forgetting', true) = 'on' THEN RETURN OLD; END IF;"
                           " RAISE EXCEPTION 'append-only'; END $$")
    (first,) = serve(url, first_request())  # ARC's schema made in "other"
    with psycopg.connect(base, autocommit=True) as connection:  # its function as arc-ref wrote it before forget
        connection.execute("CREATE OR REPLACE FUNCTION other.arc_append_only() RETURNS trigger LANGUAGE plpgsql AS $$"
                           " BEGIN RAISE EXCEPTION 'ARC tables are append-only: % on % refused', TG_OP, TG_TABLE_NAME;"
                           " END $$")
    assert main(["forget", url, first.conversation]) == 0
    with psycopg.connect(base) as connection:
        assert connection.execute("SELECT count(*) FROM other.arc_tasks").fetchone() == (0,)


def test_a_setting_to_fix_is_no_retry_later(postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F6: an invalid port and a PgBouncer in statement mode (no transactions) read 'is unavailable ...;
    retry later', though no retry changes them; and postgresql:// was shown as 'the database postgresql:'."""
    from tests.deployment import PgBouncer, require_pgbouncer

    assert main(["forget", "postgresql://arc@127.0.0.1:99999/arc", "--older-than", "0"]) == 2
    error = capsys.readouterr().err
    assert 'invalid port number: "99999"' in error and "retry later" not in error, error
    assert main(["forget", "postgresql://", "--older-than", "0"]) == 2
    assert "the database postgresql:// " in capsys.readouterr().err
    require_pgbouncer()
    url = postgres.create_database("arc_test_forget_statement_pooler")
    (first,) = serve(url, first_request())
    bouncer = PgBouncer.start(postgres, pool_mode="statement")
    try:
        assert main(["forget", bouncer.url("arc_test_forget_statement_pooler"), first.conversation]) == 2
    finally:
        bouncer.stop()
    error = capsys.readouterr().err
    assert "statement pooling mode" in error and "pool_mode to transaction" in error and "retry later" not in error
    assert counts(url, first.conversation)["arc_tasks"] == 1


def test_psycopg_s_second_error_of_a_failed_pipeline_is_not_logged_and_its_other_warnings_are(
        caplog: pytest.LogCaptureFixture) -> None:
    """A pipeline whose statement failed raises that error to the proxy, which handles it; psycopg then logs each
    statement queued after it as "error ignored ...: pipeline aborted" (review h22 F9). Those go; the rest stay."""
    from arc_ref.persist.postgres import _psycopg

    logger = logging.getLogger("psycopg")
    _psycopg()
    with caplog.at_level("WARNING", logger="psycopg"):
        logger.warning("error ignored terminating %r: %s", "<AsyncPipeline>",
                       psycopg.errors.PipelineAborted("pipeline aborted"))
        logger.warning("error ignored in rollback on %s: %s", "<Connection>", psycopg.OperationalError("server closed"))
    said = [record.getMessage() for record in caplog.records]
    assert said == ["error ignored in rollback on <Connection>: server closed"], said


def test_psycopg_s_second_error_of_a_pipeline_whose_connection_was_lost_is_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    """The connection lost under a pipeline (PgBouncer killed or restarted, PostgreSQL stopped): the proxy gets that
    error and says so itself ("... is unavailable (...); the request is tried again"); psycopg then logs it a second
    time as "error ignored terminating <psycopg.AsyncPipeline [BAD] ...>: the connection is lost", raw (review h71:
    28 to 36 such lines a chaos run through PgBouncer). psycopg logs that line only while the block's own error is
    raised, so it goes too; a lost connection outside a pipeline stays."""
    from arc_ref.persist.postgres import _psycopg

    logger = logging.getLogger("psycopg")
    _psycopg()
    with caplog.at_level("WARNING", logger="psycopg"):
        logger.warning("error ignored terminating %r: %s", "<psycopg.AsyncPipeline [BAD]>",
                       psycopg.OperationalError("the connection is lost"))
        logger.warning("error ignored terminating %r: %s", "<psycopg.AsyncPipeline [BAD]>",
                       psycopg.OperationalError("flush request failed: server closed the connection unexpectedly"))
        logger.warning("error ignored in rollback on %s: %s", "<Connection>", psycopg.OperationalError("server closed"))
    said = [record.getMessage() for record in caplog.records]
    assert said == ["error ignored in rollback on <Connection>: server closed"], said


def test_an_interrupted_forget_says_how_many_it_removed_before_and_the_rest_stay_whole(
        postgres: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F8: Ctrl-C (or SIGTERM) after the first batch of 500 had been committed: exit 130 and not a word
    of the 500 gone. Now it says how many went before it and that the batch under way was rolled back."""
    from arc_ref.persist import postgres_forget

    url = postgres.create_database("arc_test_forget_interrupted")
    serve(url, first_request())  # ARC's schema
    with psycopg.connect(url, autocommit=True) as connection:  # 1,200 old conversations of two rows each, by SQL
        connection.execute("INSERT INTO arc_tasks (key, seq, checksum, position, head, created) SELECT 'old-' || n,"
                           " 2, 'c', 1, 'h', now() - interval '40 days' FROM generate_series(1, 1200) AS n")
        connection.execute("INSERT INTO arc_events SELECT 'old-' || n, s, '{}', 'c' FROM generate_series(1, 1200) AS n,"
                           " generate_series(1, 2) AS s")
    removing = postgres_forget._forget_batch
    batches: list[int] = []

    def interrupted_in_the_second(connection: Any, batch: list[str], *rest: Any, **options: Any) -> Any:
        batches.append(len(batch))
        if len(batches) == 2:
            raise KeyboardInterrupt
        return removing(connection, batch, *rest, **options)

    monkeypatch.setattr(postgres_forget, "_forget_batch", interrupted_in_the_second)
    assert main(["forget", url, "--older-than", "30"]) == 130
    error = capsys.readouterr().err
    assert "interrupted: 500 of 1,200 conversations forgotten before it" in error and "run forget again" in error, error
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks WHERE key LIKE 'old-%'").fetchone() == (700,)
    monkeypatch.setattr(postgres_forget, "_forget_batch", removing)
    assert main(["forget", url, "--older-than", "30"]) == 0
    assert "forgot 700 conversation(s)" in capsys.readouterr().out


def backdate(url: str, days: int, *, last_active: bool = True) -> None:
    """Every conversation created (and, with ``last_active``, last committed to) ``days`` days ago."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("UPDATE arc_tasks SET created = now() - %s * interval '1 day'" +
                           (", last_active = now() - %s * interval '1 day'" if last_active else ""),
                           (days, days) if last_active else (days,))


def test_idle_for_spares_a_conversation_still_in_use_that_older_than_removes(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Two conversations started 40 days ago; an agent came back to one today. `--older-than 30` picks both (the one
    in use would lose its stored outputs); `--idle-for 30` picks only the idle one: each commit sets the
    conversation's ``last_active``."""
    url = postgres.create_database("arc_test_forget_idle")
    (in_use,) = serve(url, first_request())
    (idle,) = serve(url, other_request("List the files of d2."))
    backdate(url, 40)
    (later,) = serve(url, continued(in_use, "a.txt\n"))
    assert later.conversation == in_use.conversation  # committed in place: its last_active is now
    assert main(["forget", url, "--older-than", "30", "--dry-run"]) == 0
    assert "would forget 2 conversation(s)" in capsys.readouterr().out
    assert main(["forget", url, "--idle-for", "30", "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert idle.conversation in listed and in_use.conversation not in listed and "would forget 1 " in listed, listed
    assert main(["forget", url, "--idle-for", "30", in_use.conversation, idle.conversation]) == 1  # one not idle
    said = capsys.readouterr()
    assert said.out.startswith("forgot 1 conversation(s)") and f"idle since before" in said.err, said
    assert set(whole_chains(url)) == {in_use.conversation}


def test_a_conversation_committed_to_after_it_was_chosen_is_not_forgotten_by_idle_for(postgres: Any) -> None:
    """--idle-for is checked again under each conversation's row lock: a request that committed between the choice
    and the removal keeps its conversation (and it is not reported as left)."""
    import datetime

    from arc_ref.persist.postgres import Database
    from arc_ref.persist.postgres_forget import chosen, forget

    url = postgres.create_database("arc_test_forget_idle_race")
    (first,) = serve(url, first_request())
    backdate(url, 40)
    db = Database(url, pool_size=1, create_schema=False)
    try:
        cutoff = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
        picked, _ = chosen(db, [], None, cutoff)
        assert [conversation.key for conversation in picked] == [first.conversation]
        serve(url, continued(first, "a.txt\n"))  # the agent came back meanwhile
        done = forget(db, [first.conversation], None, active_before=cutoff)
    finally:
        db.close()
    assert (done.conversations, done.busy) == (0, ())
    assert set(whole_chains(url)) == {first.conversation}


def test_a_database_made_before_last_active_gets_it_from_the_first_proxy_and_idle_for_waits_for_it(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A database whose arc_tasks has no ``last_active`` (an arc-ref before it): ``--idle-for`` is refused, saying
    what to do, nothing removed; the next proxy to start adds the column. The rows it had get the time it was added
    (review h34: they were NULL, read as their creation time, so the first `--idle-for 30` after the upgrade removed
    a conversation started 40 days ago that an older proxy had served an hour before, as --older-than would): such a
    conversation is forgotten only once no request committed to it for DAYS after the upgrade."""
    url = postgres.create_database("arc_test_forget_idle_old")
    (first,) = serve(url, first_request())
    with psycopg.connect(url, autocommit=True) as connection:  # (the trigger setting it came with it: review h34 F2)
        connection.execute("DROP TRIGGER arc_tasks_last_active ON arc_tasks")
        connection.execute("ALTER TABLE arc_tasks DROP COLUMN last_active")
    backdate(url, 40, last_active=False)
    assert main(["forget", url, "--idle-for", "30"]) == 2
    assert "has no column arc_tasks.last_active" in capsys.readouterr().err
    assert set(whole_chains(url)) == {first.conversation}
    (other,) = serve(url, other_request("List the files of d2."))  # a proxy of this version starts: the column
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*) FROM arc_tasks WHERE last_active IS NULL").fetchone() == (0,)
        assert connection.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'arc_tasks_last_active'"
                                  ).fetchone() == (1,)
    assert main(["forget", url, "--idle-for", "30"]) == 0  # its last commit is unknown: counted from the upgrade
    assert capsys.readouterr().out.startswith("forgot 0 conversation(s)")
    assert set(whole_chains(url)) == {first.conversation, other.conversation}
    with psycopg.connect(url, autocommit=True) as connection:  # 40 days later, nothing committed to it since
        connection.execute("UPDATE arc_tasks SET last_active = last_active - interval '40 days' WHERE key = %s",
                           (first.conversation,))
    assert main(["forget", url, "--idle-for", "30"]) == 0
    assert capsys.readouterr().out.startswith("forgot 1 conversation(s)")
    assert set(whole_chains(url)) == {other.conversation}


def test_a_commit_whose_statement_leaves_last_active_out_still_sets_it(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h34 F2: an instance whose start found no ``last_active`` (its role could not add it) leaves it out of
    its commits for as long as it runs, also once another instance, of the owner's role, has added it (as the
    warning advises); an arc-ref before the column (a rolling upgrade) never sets it. `forget --idle-for 30` then
    removed a conversation such an instance served a minute before. A trigger sets it on every commit."""
    url = postgres.create_database("arc_test_forget_idle_untouched")
    (first,) = serve(url, first_request())
    backdate(url, 40)

    async def scenario() -> Any:
        proxy, client = in_process_shared(url, bash_call_reply)
        proxy.database.last_active = False  # as one whose start found no column: its statement leaves it out
        try:
            return await proxy.complete(continued(first, "a.txt\n"), None)
        finally:
            await proxy.close()
            await client.aclose()

    assert asyncio.run(scenario()).conversation == first.conversation  # committed in place a moment ago
    assert main(["forget", url, "--idle-for", "30"]) == 0
    assert capsys.readouterr().out.startswith("forgot 0 conversation(s)")
    assert set(whole_chains(url)) == {first.conversation}


def test_a_day_of_older_than_and_idle_for_is_86400_seconds_across_a_daylight_saving_change(
        postgres: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`--older-than D` and `--idle-for D` go back D x 86,400 s, as `forget DIR --idle-for` does, whatever the
    database's TimeZone: in a zone with daylight saving, D calendar days across a change are D x 24 h -+ 1 h (review
    h34 F9). Two conversations 20 minutes either side of the exact boundary: the older one alone is picked."""
    import datetime
    import zoneinfo

    zone = zoneinfo.ZoneInfo("America/New_York")
    now = datetime.datetime.now(datetime.timezone.utc)
    days = next(d for d in range(1, 367)
                if (now - datetime.timedelta(days=d)).astimezone(zone).utcoffset() != now.astimezone(zone).utcoffset())
    url = postgres.create_database("arc_test_forget_dst")
    (newer,) = serve(url, first_request())
    (older,) = serve(url, other_request("List the files of d2."))
    with psycopg.connect(url, autocommit=True) as connection:
        name = connection.execute("SELECT current_database()").fetchone()[0]
        connection.execute(f'ALTER DATABASE "{name}" SET timezone TO \'America/New_York\'')
        for conversation, minutes in ((newer, 20), (older, -20)):
            connection.execute("UPDATE arc_tasks SET created = now() - %s * interval '86400 seconds' + %s * interval"
                               " '1 minute', last_active = now() - %s * interval '86400 seconds' + %s * interval"
                               " '1 minute' WHERE key = %s", (days, minutes, days, minutes, conversation.conversation))
    with psycopg.connect(url) as connection:  # (the setting is the database's: every new session has it)
        assert connection.execute("SHOW timezone").fetchone() == ("America/New_York",)
    for option in ("--older-than", "--idle-for"):
        assert main(["forget", url, option, str(days), "--dry-run"]) == 0
        listed = capsys.readouterr().out
        assert older.conversation in listed and newer.conversation not in listed, (option, days, listed)
