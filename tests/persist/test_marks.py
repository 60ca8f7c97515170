"""The proxy's conversation index (arc_ref.persist.marks, issue 29 item 3): marks.jsonl beside each store, with the
store's integrity rules: every line chained and bound to its store's rows, damage detected and named."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from arc_ref.config import preset
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore, StoreCorrupt, StoreError
from arc_ref.persist.marks import INDEX_FILE, IndexMark, MarkFile

CONFIG = preset("minimal")


def conversation(directory: Path, marks: int = 3, text: str = "line") -> tuple[DurableStore, list[IndexMark]]:
    """A store with ``marks`` events, a mark after each (as the proxy writes them)."""
    directory.mkdir(parents=True)
    store = DurableStore.create(directory / "task.arc", CONFIG)
    index = MarkFile.create(directory)
    written = []
    for number in range(1, marks + 1):
        store.append(Observe(f"cat f{number}", f"{text} {number}\n" * number, 0))
        mark = IndexMark(f"h{number}", number, store.seq, store.checksum)
        index.append(mark)
        written.append(mark)
    return store, written


def reopen(directory: Path, store: DurableStore) -> list[IndexMark]:
    return MarkFile.open(directory, store.seq, ((row.seq, row.checksum) for row in store.events()))[1]


def lines(directory: Path) -> list[bytes]:
    return (directory / INDEX_FILE).read_bytes().splitlines(keepends=True)


def write(directory: Path, content: list[bytes]) -> None:
    (directory / INDEX_FILE).write_bytes(b"".join(content))


def test_marks_come_back_as_written(tmp_path: Path) -> None:
    store, written = conversation(tmp_path / "c")
    assert reopen(tmp_path / "c", store) == written
    assert oct((tmp_path / "c" / INDEX_FILE).stat().st_mode & 0o777) == "0o600"
    assert all(set(json.loads(line)) == {"chain", "checksum", "hash", "position", "seq"} for line in lines(tmp_path / "c"))


def test_an_edited_line_is_named(tmp_path: Path) -> None:
    """A mark edited in place (valid JSON, another position) was resumed at the wrong message before: now refused."""
    store, _ = conversation(tmp_path / "c")
    content = lines(tmp_path / "c")
    value = json.loads(content[1])
    value["position"] = 7
    content[1] = (json.dumps(value) + "\n").encode()
    write(tmp_path / "c", content)
    with pytest.raises(StoreCorrupt, match=r"marks.jsonl': line 2 of the conversation index fails its checksum"):
        reopen(tmp_path / "c", store)


@pytest.mark.parametrize("damage, line", [
    (lambda content: [content[0], b'{"hash": "h2", "pos' + b"\n", content[2]], 2),  # a damaged byte run
    (lambda content: [content[0], content[2]], 2),  # a line lost
    (lambda content: [content[1], content[0], content[2]], 1),  # reordered
    (lambda content: [content[0], b"\n", *content[1:]], 2),  # an empty line
])
def test_damage_is_detected_and_named(tmp_path: Path, damage, line: int) -> None:  # type: ignore[no-untyped-def]
    store, _ = conversation(tmp_path / "c")
    write(tmp_path / "c", damage(lines(tmp_path / "c")))
    with pytest.raises(StoreCorrupt, match=f"line {line} of the conversation index"):
        reopen(tmp_path / "c", store)


def test_a_line_cut_by_a_crash_is_dropped_and_cut_off(tmp_path: Path) -> None:
    store, written = conversation(tmp_path / "c")
    content = lines(tmp_path / "c")
    write(tmp_path / "c", [*content[:2], content[2][:17]])  # the last write was cut
    index, marks = MarkFile.open(tmp_path / "c", store.seq, ((row.seq, row.checksum) for row in store.events()))
    assert marks == written[:2] and lines(tmp_path / "c") == content[:2]  # cut off: the next mark has its own line
    index.append(written[2])
    assert reopen(tmp_path / "c", store) == written


def test_an_index_of_other_rows_is_named(tmp_path: Path) -> None:
    store, _ = conversation(tmp_path / "a")
    other, _ = conversation(tmp_path / "b", marks=2, text="other")
    write(tmp_path / "a", lines(tmp_path / "b"))  # b's index beside a's store
    with pytest.raises(StoreCorrupt, match="line 1: the mark is not of its store's rows"):
        reopen(tmp_path / "a", store)
    short, _ = conversation(tmp_path / "c", marks=1)
    write(tmp_path / "c", lines(tmp_path / "a"))  # marks of rows the store does not hold
    with pytest.raises(StoreCorrupt, match="past the last row 2 of its store"):
        reopen(tmp_path / "c", short)


def test_only_files_the_index_made_are_written(tmp_path: Path) -> None:
    store, _ = conversation(tmp_path / "c", marks=1)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    os.replace(tmp_path / "c" / INDEX_FILE, tmp_path / "kept")
    os.symlink(target, tmp_path / "c" / INDEX_FILE)
    with pytest.raises(StoreCorrupt, match="cannot be read \\(a symbolic link\\)"):
        reopen(tmp_path / "c", store)
    with pytest.raises(StoreError, match="cannot write the conversation index"):
        MarkFile(tmp_path / "c" / INDEX_FILE, 1, "x").append(IndexMark("h", 1, 1, "x"))
    assert target.read_bytes() == b""
    with pytest.raises(StoreError, match="cannot create the conversation index"):
        MarkFile.create(tmp_path / "c")  # one is there


def test_the_proxy_finds_a_conversation_by_its_marks_and_sets_a_damaged_one_aside_when_it_opens_it(
        tmp_path: Path) -> None:
    """arc-ref proxy --store DIR finds a conversation by its marks without opening its store (a store written
    before the shared index existed: its marks file read at start); the first request that holds it opens the
    store and checks every mark against the rows; one whose index is damaged is set aside with the reason, the
    others served (issue 25 item 3: it refused to start before; then every store was opened at start)."""
    pytest.importorskip("httpx")
    from arc_ref.frontends.proxy import ConversationGone, Conversations, ProxySettings

    store, written = conversation(tmp_path / "store" / "k1")
    store.close()
    settings = ProxySettings(upstream="http://127.0.0.1:9/v1", tokenizer="unused", store=tmp_path / "store")
    conversations = Conversations(settings)
    assert conversations.deepest(["h1", "h2", "h3", "h4"]) == ("k1", 3) and conversations.opened == 0

    async def hold(into: Conversations) -> tuple[int, int]:
        async with into.held("k1") as held:
            found = held.deepest_mark(["h1", "h2", "h3"])
            assert found is not None
            return held.position, found[1]

    assert asyncio.run(hold(conversations)) == (3, 3) and conversations.opened == 1
    conversations.close()
    content = lines(tmp_path / "store" / "k1")
    value = json.loads(content[2])
    value["seq"] = 2  # the last mark moved back a row: resumed at the wrong row before
    content[2] = (json.dumps(value) + "\n").encode()
    write(tmp_path / "store" / "k1", content)
    reopened = Conversations(settings)
    assert reopened.deepest(["h1", "h2", "h3"]) == ("k1", 3)  # the shared index names it; its marks decide
    with pytest.raises(ConversationGone, match="line 3 of the conversation index fails its checksum"):
        asyncio.run(hold(reopened))
    assert "line 3 of the conversation index fails its checksum" in reopened.set_aside["k1"]
    assert reopened.deepest(["h1", "h2", "h3"]) is None and reopened.by_key == {}
    reopened.close()
    (tmp_path / "store" / "hashes.sqlite").unlink()  # no shared index: the marks files are read at start
    at_start = Conversations(settings)
    assert "line 3 of the conversation index fails its checksum" in at_start.set_aside["k1"]
    at_start.close()


def test_a_fork_of_a_durable_conversation_replays_the_rows_up_to_its_mark(tmp_path: Path) -> None:
    """A regenerated message forks a durable conversation: the child's store holds the parent's rows up to the
    mark (read back through arc_ref.persist.rows.row_events, not the trace parser) and its state is the mark's.
    With the last replayed event dropped, the child's rows and state differ: this fails."""
    pytest.importorskip("httpx")
    from arc_ref.frontends.proxy import Conversations, ProxySettings

    settings = ProxySettings(upstream="http://127.0.0.1:9/v1", tokenizer="unused", store=tmp_path / "store")
    conversations = Conversations(settings)
    parent = conversations.new(CONFIG)
    marks = []
    for number in range(1, 4):
        parent.apply(Observe(f"cat f{number}", f"line {number}\n" * number, 0))
        marks.append(parent.mark(f"h{number}"))
    child = conversations.fork(parent, marks[1])
    assert parent.store is not None and child.store is not None and child.store is not parent.store
    assert [row.line for row in child.store.events(2)] == [row.line for row in parent.store.events(2, 2)]
    assert child.store.seq == marks[1].seq == 3 and child.store.checksum == next(parent.store.events(3, 1)).checksum
    conversations.close()
