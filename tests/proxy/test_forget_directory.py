"""`arc-ref forget DIR KEY ...` (arc_ref.persist.directory_forget): conversations removed from a running proxy's
--store directory, by key, each whole (its folder and its rows of the shared index), a conversation a request holds
left for later, and the agent's next request of a forgotten one a new conversation."""

from __future__ import annotations

import fcntl
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.proxy.harness import BASH_TOOL, needs_qwen3, serve_proxy, serve_upstream

from arc_ref.frontends.cli import main
from arc_ref.persist import lock as lock_module
from arc_ref.persist.errors import StoreNotFound
from arc_ref.persist.lock import WriterLock

pytestmark = [needs_qwen3]


def start(task: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": task}]


def turn(base_url: str, messages: list[dict[str, Any]]) -> str:
    """One request; the reply, its tool outputs and a user message appended to ``messages``; the conversation
    header."""
    response = httpx.post(f"{base_url}/chat/completions", timeout=120,
                          json={"model": "scripted", "messages": messages, "tools": [BASH_TOOL]})
    assert response.status_code == 200, response.text
    said = response.json()["choices"][0]["message"]
    messages.append(said)
    messages += [{"role": "tool", "tool_call_id": call["id"], "content": "a.txt\n"}
                 for call in said.get("tool_calls") or ()]
    messages.append({"role": "user", "content": "go on"})
    return str(response.headers["x-arc-conversation"])


def index_keys(store: Path) -> set[str]:
    with sqlite3.connect(store / "hashes.sqlite") as index:
        return {key for (key,) in index.execute("SELECT DISTINCT key FROM hashes")}


def test_forget_removes_a_conversation_of_a_running_proxy_and_its_agent_starts_anew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    first, second = start("List the files."), start("List the files of d2.")
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url, store=store) as base_url:
        forgotten, kept = turn(base_url, first), turn(base_url, second)
        assert index_keys(store) == {forgotten, kept}
        assert main(["forget", str(store), forgotten, "--dry-run"]) == 0
        assert capsys.readouterr().out == f"{forgotten}\nwould forget 1 conversation(s)\n"
        assert (store / forgotten).is_dir()
        assert main(["forget", str(store), forgotten]) == 0
        assert capsys.readouterr().out.startswith("forgot 1 conversation(s): ")
        assert not (store / forgotten).exists() and index_keys(store) == {kept}
        again = turn(base_url, first)  # the agent goes on: a new conversation from its messages
        assert again not in (forgotten, kept) and (store / again).is_dir()
        assert turn(base_url, second) == kept  # the other one goes on in place
    assert sorted(path.name for path in store.iterdir() if path.is_dir()) == sorted((again, kept))


def test_a_conversation_a_process_holds_is_left_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    messages = start("List the files.")
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url, store=store) as base_url:
        key = turn(base_url, messages)
    holder = WriterLock(store / key / "task.arc", store / key / "task.arc")  # as a proxy holds it for a request
    try:
        assert main(["forget", str(store), key]) == 1  # some left: a script sees it (review h21 MINOR-2)
    finally:
        holder.release()
    said = capsys.readouterr()
    assert said.out == "forgot 0 conversation(s): 0 index rows\n" and f"left, a proxy process holds them now: {key}" \
        in said.err
    assert (store / key / "task.arc").exists() and index_keys(store) == {key}


def test_forget_in_a_directory_refuses_what_it_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url, store=store) as base_url:
        key = turn(base_url, start("List the files."))
    assert main(["forget", str(tmp_path / "elsewhere"), key]) == 2
    assert "or an arc-ref proxy --store directory" in capsys.readouterr().err
    assert main(["forget", str(store), "--older-than", "1"]) == 2
    assert "records no creation time" in capsys.readouterr().err
    assert main(["forget", str(store)]) == 2
    capsys.readouterr()
    assert main(["forget", str(store), "..", ".", "nothing", f"../store/{key}", key]) == 1  # only a folder's name
    said = capsys.readouterr()
    assert said.out.startswith("forgot 1 conversation(s)") and "not a conversation of" in said.err
    assert f".., ., nothing, ../store/{key}" in said.err
    assert store.is_dir() and index_keys(store) == set()


def test_a_removal_a_killed_forget_left_is_finished_and_never_indexed(tmp_path: Path) -> None:
    """A forget killed between renaming a folder and removing it leaves ``.forgetting-KEY``: a proxy starting on the
    directory does not take it for a conversation (before, any folder with marks was indexed at start), and the next
    forget removes it."""
    store = tmp_path / "store"
    with serve_upstream() as (_, upstream_url):
        with serve_proxy(upstream_url, store=store) as base_url:
            key, other = turn(base_url, start("List the files.")), turn(base_url, start("List d2."))
        (store / key).rename(store / f".forgetting-{key}")
        with sqlite3.connect(store / "hashes.sqlite") as index:
            index.execute("DELETE FROM hashes WHERE key = ?", (key,))
        with serve_proxy(upstream_url, store=store):
            pass
    assert index_keys(store) == {other}
    assert main(["forget", str(store), other]) == 0
    assert [path.name for path in store.iterdir() if path.is_dir()] == []


def test_a_store_removed_while_its_lock_is_taken_is_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The file was opened by name, then removed (forget, which holds the lock until the folder is gone) before its
    lock was taken: the lock of a file without a name is refused, not used to write rows nobody will find."""
    path = tmp_path / "task.arc"
    path.write_bytes(b"")
    real_flock = fcntl.flock

    def removed_first(descriptor: int, operation: int) -> None:
        if path.exists():
            path.unlink()
        real_flock(descriptor, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", removed_first)
    held_before = dict(lock_module._held_locks)  # (another test's stores may be held in this process)
    with pytest.raises(StoreNotFound, match="was removed while it was being opened"):
        WriterLock(path, path)
    assert lock_module._held_locks == held_before  # not noted as held


@pytest.mark.slow
def test_forget_in_a_loop_beside_two_proxy_processes_on_one_directory(tmp_path: Path) -> None:
    """Real processes: two `arc-ref proxy` on one --store directory, six agents of 40 turns round-robin (the upstream
    answering in 40 ms), and `arc-ref forget DIR` with every conversation's key run again and again meanwhile. Every
    request is answered 200, every forget ends 0, and every conversation left reads whole. (A run here: 240
    requests, 17 forgets removing 39 conversations, 15 of them leaving one a request held, one key set aside.)"""
    from tests.deployment import agents_beside, arc_proxy, running, scripted_upstream
    from tests.proxy.harness import QWEN3

    from arc_ref.persist import read_rows

    assert QWEN3 is not None
    store = tmp_path / "store"
    upstream = scripted_upstream(tmp_path, Path(QWEN3), latency_ms=40)
    proxies = [arc_proxy(tmp_path, upstream.url, Path(QWEN3), str(store), {}) for _ in range(2)]

    def forget_every_key() -> list[str] | None:
        keys = [folder.name for folder in store.iterdir() if folder.is_dir() and not folder.name.startswith(".")]
        return ["forget", str(store), *keys] if keys else None

    with running(upstream, *proxies):
        statuses, forgets = agents_beside(proxies, 6, 40, forget_every_key)
    logs = "".join(log.read_text(errors="replace") for log in tmp_path.glob("proxy-*.log"))
    removed = sum(int(said.split()[1]) for _, said in forgets if said.startswith("forgot"))
    print(f"{len(statuses)} requests, {len(forgets)} forgets, {removed} conversations removed")
    assert statuses == [200] * 240, logs[-3000:]
    # (1: a conversation a request held was left, and said so)
    assert len(forgets) >= 3 and all(status == 0 or (status == 1 and "left" in said) for status, said in forgets) \
        and removed >= 1, forgets
    assert "Traceback" not in logs
    for folder in store.iterdir():
        if folder.is_dir() and not folder.name.startswith("."):
            assert list(read_rows(str(folder / "task.arc")))  # every conversation left reads whole


def test_a_killed_forget_s_index_rows_go_with_its_leftover(tmp_path: Path) -> None:
    """Review h22 F5: a forget killed after its rename but before its index update left the key's rows of
    hashes.sqlite for good (the next forget removed the folder only, and 'forget KEY' then said 'not a
    conversation'); the next forget now removes them with the leftover."""
    store = tmp_path / "store"
    with serve_upstream() as (_, upstream_url):
        with serve_proxy(upstream_url, store=store) as base_url:
            key, other = turn(base_url, start("List the files.")), turn(base_url, start("List d2."))
    (store / key).rename(store / f".forgetting-{key}")  # killed here: its index rows still there
    assert index_keys(store) == {key, other}
    assert main(["forget", str(store), other]) == 0
    assert index_keys(store) == set() and not any(store.glob(".forgetting-*"))


def test_a_conversation_folder_that_is_a_link_is_refused_untouched(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F4: a conversation folder moved elsewhere and linked back was renamed, its index rows deleted,
    then rmtree refused the link (exit 2), and a .forgetting- link stayed for good. Now refused before anything is
    touched, the dry run alike; nothing outside the store is ever removed."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    with serve_upstream() as (_, upstream_url):
        with serve_proxy(upstream_url, store=store) as base_url:
            key = turn(base_url, start("List the files."))
    elsewhere.mkdir()
    (store / key).rename(elsewhere / key)
    (store / key).symlink_to(elsewhere / key)
    for argv in (["--dry-run"], []):
        assert main(["forget", str(store), key, *argv]) == 1
        assert "a symbolic link, not a conversation folder" in capsys.readouterr().err
    assert (store / key).is_symlink() and (elsewhere / key / "task.arc").is_file()
    assert index_keys(store) == {key} and not any(store.glob(".forgetting-*"))


def test_keys_may_follow_an_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F10: `forget STORE --dry-run KEY` was refused ('unrecognized arguments: KEY'); an unknown option
    still is."""
    store = tmp_path / "store"
    with serve_upstream() as (_, upstream_url):
        with serve_proxy(upstream_url, store=store) as base_url:
            key = turn(base_url, start("List the files."))
    assert main(["forget", str(store), "--dry-run", key]) == 0
    assert capsys.readouterr().out == f"{key}\nwould forget 1 conversation(s)\n"
    with pytest.raises(SystemExit):
        main(["forget", str(store), key, "--dry-run", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_an_interrupted_forget_names_what_it_removed_before_and_the_next_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h22 F8 for a directory: Ctrl-C (or SIGTERM) while the second of three conversations was removed exited
    130 without a word of the first, gone. Now it names it; the next forget finishes the second and removes the
    third."""
    import shutil

    from arc_ref.persist import directory_forget

    store = tmp_path / "store"
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url, store=store) as base_url:
        keys = [turn(base_url, start(f"List the files of d{number}.")) for number in range(3)]
    removing = shutil.rmtree
    calls: list[Any] = []

    def interrupted_at_the_second(path: Any, *rest: Any, **options: Any) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        removing(path, *rest, **options)

    monkeypatch.setattr(directory_forget.shutil, "rmtree", interrupted_at_the_second)
    assert main(["forget", str(store), *keys]) == 130
    error = capsys.readouterr().err
    assert f"interrupted: 1 conversation(s) forgotten before it: {keys[0]} (the one under way" in error, error
    monkeypatch.setattr(directory_forget.shutil, "rmtree", removing)
    assert main(["forget", str(store), *keys[1:]]) == 0  # the second a leftover now: finished, and counted
    assert [path.name for path in store.iterdir() if path.is_dir()] == [] and index_keys(store) == set()
    assert capsys.readouterr().out.startswith("forgot 2 conversation(s): ")


def test_idle_for_forgets_the_conversations_no_request_committed_to_since_and_spares_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory records no creation time, but each commit rewrites the conversation's acknowledgement record:
    ``--idle-for`` picks by the newest time of the files a commit writes (never a reader). Two conversations made
    40 days ago (their files' times set back), one continued today: only the other is forgotten; named, the one in
    use is reported as not idle (exit 1). Checked again under the store's lock: one committed to since it was
    chosen stays."""
    import os
    import time

    from arc_ref.persist import directory_forget

    store = tmp_path / "store"
    in_use, idle = start("List the files."), start("List the files of d2.")
    with serve_upstream() as (_, upstream_url), serve_proxy(upstream_url, store=store) as base_url:
        keys = {turn(base_url, in_use): "in use", turn(base_url, idle): "idle"}
        then = time.time() - 40 * 86400
        for key in keys:
            for path in (store / key).iterdir():
                os.utime(path, (then, then), follow_symlinks=False)
        assert main(["forget", str(store), "--idle-for", "30", "--dry-run"]) == 0
        assert capsys.readouterr().out.endswith("would forget 2 conversation(s)\n")
        key_in_use = turn(base_url, in_use)  # the agent comes back to one
        assert keys[key_in_use] == "in use"
        (key_idle,) = [key for key in keys if key != key_in_use]
        assert main(["forget", str(store), "--idle-for", "30", "--dry-run"]) == 0
        assert capsys.readouterr().out == f"{key_idle}\nwould forget 1 conversation(s)\n"
        assert main(["forget", str(store), "--idle-for", "30", key_in_use]) == 1
        assert "idle for 30 days: " + key_in_use in capsys.readouterr().err
        # chosen while idle, committed to before its lock is taken: it stays
        chosen = directory_forget.idle_conversations
        monkeypatch.setattr(directory_forget, "idle_conversations", lambda *args: sorted(keys))
        assert main(["forget", str(store), "--idle-for", "30"]) == 0
        assert capsys.readouterr().out.startswith("forgot 1 conversation(s)")
        monkeypatch.setattr(directory_forget, "idle_conversations", chosen)
        assert (store / key_in_use).is_dir() and not (store / key_idle).exists()
        assert index_keys(store) == {key_in_use}
        turn(base_url, in_use)  # and the agent goes on in it
    assert index_keys(store) == {key_in_use}


def test_idle_for_goes_past_a_conversation_whose_store_cannot_be_locked_and_names_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review h34 F4: one folder whose task.arc cannot be locked (here a directory, not a file) ended `forget DIR
    --idle-for 30` with status 2 at that folder: the conversations before it gone without a word, those after it
    never reached, every run again (a retention job stuck for good). Now it is left and named (status 1), and the
    others are forgotten."""
    import os
    import time

    from arc_ref.persist.hash_index import HashIndex

    store = tmp_path / "store"
    store.mkdir()
    HashIndex(store).close()
    old = time.time() - 40 * 86400
    for key in ("a-idle", "b-damaged", "c-idle"):
        (store / key).mkdir()
        (store / key / "marks.jsonl").write_text("")
        os.utime(store / key / "marks.jsonl", (old, old))
    (store / "b-damaged" / "task.arc").mkdir()
    os.utime(store / "b-damaged" / "task.arc", (old, old))
    assert main(["forget", str(store), "--idle-for", "30"]) == 1
    said = capsys.readouterr()
    assert said.out.startswith("forgot 2 conversation(s)"), said
    assert "1 conversation(s) left, their store cannot be locked: b-damaged (" in said.err, said.err
    assert "is not a regular file" in said.err and "Traceback" not in said.err
    assert sorted(path.name for path in store.iterdir() if path.is_dir()) == ["b-damaged"]
