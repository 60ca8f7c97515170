"""`arc-ref mcp STORE` driven by the MCP SDK's own client over stdio (a real subprocess): store, recall in
chunks (exact), meta, catalog; errors as error results; the store and its recall cursors survive a restart;
a second server on the same store is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

from arc_ref.config import preset  # noqa: E402
from arc_ref.persist import DurableStore  # noqa: E402
from tests.waiting import scaled_ceiling  # noqa: E402

TOOLS = {"store_observation", "recall", "recall_next", "recall_meta", "catalog_page"}
# a long observation with multi-byte characters: several chunks of 8 bytes under the minimal preset
LOG = "".join(f"line {n}: é中😀 status=ok\n" for n in range(12))


def server(store: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "arc_ref.frontends.cli", "mcp", str(store), *options])


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)
    return result.content[0].text


async def call(client: Client, name: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(name, arguments)


def test_store_and_recall_exactly_over_mcp_stdio(tmp_path: Path) -> None:
    store = tmp_path / "agent.arc"
    seen: dict[str, Any] = {}

    async def first_session() -> None:
        options = ("--preset", "minimal", "--set", "capacity=50")
        async with Client(server(store, *options)) as client:
            listed = await client.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            schemas = {tool.name: tool.input_schema for tool in listed.tools}
            assert schemas["store_observation"]["required"] == ["action", "observation"]
            assert schemas["recall"]["required"] == ["id"]

            stored = await call(client, "store_observation", action="pytest -x", observation=LOG, returncode=1)
            assert not stored.is_error
            obs_id = stored.structured_content["id"]
            assert obs_id.startswith("§") and f"stored as {obs_id}" in text_of(stored)
            chunks = stored.structured_content["chunks"]
            assert chunks > 3

            first = await call(client, "recall", id=obs_id)
            assert not first.is_error and first.structured_content["chunk"] == 1
            assert first.structured_content["payload"] in text_of(first)  # the text is ARC's wrapped chunk
            payloads = [first.structured_content["payload"]]
            second = await call(client, "recall_next", id=obs_id)
            payloads.append(second.structured_content["payload"])
            assert second.structured_content["chunk"] == 2 and second.structured_content["more"] is True
            seen.update(obs_id=obs_id, chunks=chunks, payloads=payloads)

            meta = await call(client, "recall_meta", id=obs_id)
            assert meta.structured_content["chunks"] == chunks
            assert meta.structured_content["returncode"] == 1 and meta.structured_content["action"] == "pytest -x"
            assert text_of(meta) == meta.structured_content["stub"]

            page = await call(client, "catalog_page")
            assert obs_id in text_of(page) and page.structured_content["pages"] == 1
            # this server's tools, not ARC's command words (review h24 F10)
            assert text_of(page).endswith(f" | recall({obs_id})") and "catalog_page(page=N)" in text_of(page)
            assert "catalog-first" not in text_of(page) and "_recall" not in text_of(meta)

            typo = await call(client, "recall", id=obs_id[:-1] + ("0" if obs_id[-1] != "0" else "1"))
            assert typo.is_error and f"did you mean {obs_id}?" in text_of(typo)
            two_words = await call(client, "recall", id=f"{obs_id}\n_recall {obs_id}")
            assert two_words.is_error and "an id is one word" in text_of(two_words)
            nothing = await call(client, "catalog_page", page=7)
            assert nothing.is_error and "no such page" in text_of(nothing)
            far = await call(client, "recall", id="§49-0")
            assert far.is_error and text_of(far).startswith("recall §49-0: no stored observation has this id")
            long = await call(client, "store_observation", action="make " + "x" * 5000, observation="o")
            long_meta = await call(client, "recall_meta", id=long.structured_content["id"])
            shown = long_meta.structured_content["action"]  # review h24 F15: all 5,005 characters came back
            assert len(shown) < 20 and shown.endswith("…") and f"$ {shown} |" in text_of(long_meta)

            # a second server on the same store is refused while this one runs
            refused = subprocess.run(
                [sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(store)],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=scaled_ceiling(60),
            )
            assert refused.returncode == 2
            assert "is open for writing by process" in refused.stderr and "Traceback" not in refused.stderr

    async def second_session() -> None:  # a new server process on the same store: the cursor is durable
        async with Client(server(store)) as client:
            payloads = seen["payloads"]
            while True:
                more = await call(client, "recall_next", id=seen["obs_id"])
                if more.is_error:
                    assert "already returned" in text_of(more)
                    assert text_of(more).endswith(f"; recall({seen['obs_id']}) reads it again")
                    break
                payloads.append(more.structured_content["payload"])
            assert "".join(payloads) == LOG  # exact, chunk after chunk, across a restart
            assert len(payloads) == seen["chunks"]

    anyio.run(first_session)
    anyio.run(second_session)
    # an MCP host starts the server with the same arguments every time (review h24 F7: refused from the second)
    again = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(store), "--preset", "minimal",
                            "--set", "capacity=50"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           timeout=scaled_ceiling(60))
    assert again.returncode == 0, again.stderr
    with DurableStore.open(store, readonly=True) as reopened:
        actions = [row.line for row in reopened.events()]
        assert reopened.state.stored == 2  # the log and the long command of F15
    assert '"op":"observe"' in actions[1] and "_recall_meta" in "".join(actions)


def test_mcp_on_an_existing_store_refuses_a_new_configuration(tmp_path: Path) -> None:
    store = tmp_path / "s.arc"
    DurableStore.create(store, preset("minimal")).close()
    done = subprocess.run(
        [sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(store), "--preset", "paper"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=scaled_ceiling(60),
    )
    assert done.returncode == 2 and "its configuration was fixed when it was created" in done.stderr
    assert "differs from --preset/--set in " in done.stderr and "capacity 24 -> " in done.stderr, done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(tmp_path / "new.arc"), "--set", "page_size=x"],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=scaled_ceiling(60),
    )
    assert bad.returncode == 2 and "--set page_size needs an integer" in bad.stderr
    assert not (tmp_path / "new.arc").exists()


def test_catalog_page_of_an_empty_store_is_an_empty_page(tmp_path: Path) -> None:
    """Review h24 (nit N-e): catalog_page on a store holding no observation was an error result ("Error executing
    tool catalog_page: the catalog is empty"); it is an empty page (pages 0), as `arc-ref inspect --catalog` shows,
    and the call is a row of the store as every call is."""
    from arc_ref.frontends.mcp_server import ArcTools

    with DurableStore.create(tmp_path / "empty.arc", preset("minimal")) as store:
        tools = ArcTools(store)
        for page in (None, 1):
            shown = tools.catalog_page(page)
            assert not shown.is_error, text_of(shown)
            assert shown.structured_content == {"page": 0, "pages": 0, "stored": 0, "text": text_of(shown)}
            assert text_of(shown).startswith("the catalog is empty: nothing is stored yet")
        assert store.seq == 3  # the config line and the two calls


def test_store_observation_takes_an_unknown_return_code(tmp_path: Path) -> None:
    """The core takes a return code of None (no exit status: shown `rc=?`, spec/rendering.md 7 and 12); over MCP
    store_observation took an integer only, and an omitted one was stored as 0 (shown `rc=0`: success, which the
    client never said). Now null or no returncode is stored as unknown; its schema says so; integers as before, and
    a boolean or a string is still refused. Through the SDK's client, in-process."""
    from arc_ref.frontends.mcp_server import build_server

    async def session(store: DurableStore) -> None:
        async with Client(build_server(store)) as client:
            listed = await client.list_tools()
            schema = {tool.name: tool.input_schema for tool in listed.tools}["store_observation"]
            assert schema["required"] == ["action", "observation"]
            returncode = schema["properties"]["returncode"]
            assert {"type": "integer"} in returncode["anyOf"] and {"type": "null"} in returncode["anyOf"], returncode
            assert returncode["default"] is None and "unknown" in returncode["description"]
            shown = {}
            for name, arguments in [("null", {"returncode": None}), ("omitted", {}), ("three", {"returncode": 3}),
                                    ("zero", {"returncode": 0})]:
                stored = await call(client, "store_observation", action=f"run {name}", observation="out", **arguments)
                assert not stored.is_error, text_of(stored)
                meta = await call(client, "recall_meta", id=stored.structured_content["id"])
                shown[name] = (meta.structured_content["returncode"], " rc=?" in text_of(meta))
            assert shown == {"null": (None, True), "omitted": (None, True), "three": (3, False), "zero": (0, False)}
            for bad in (True, "1", 1.5):
                refused = await call(client, "store_observation", action="ls", observation="x", returncode=bad)
                assert refused.is_error, bad

    with DurableStore.create(tmp_path / "rc.arc", preset("minimal")) as store:
        anyio.run(session, store)
        assert [record.returncode for record in store.state.records] == [None, None, 3, 0]


def test_recalling_an_empty_observation_names_this_servers_tools(tmp_path: Path) -> None:
    """Review h59: recall and recall_next of an output stored empty answered with ARC's command words
    ("_recall §00002-...: the observation is empty", "_recall-next ..."), which a model connected over MCP cannot
    call (review h24 F10 made every other note name this server's tools). Now the note names recall / recall_next;
    the structured content is unchanged (chunk 0 of 0, an empty payload, no more)."""
    from arc_ref.frontends.mcp_server import ArcTools

    with DurableStore.create(tmp_path / "empty-output.arc", preset("minimal")) as store:
        tools = ArcTools(store)
        stored = tools.store_observation("true", "", 0)
        obs_id = stored.structured_content["id"]
        for name, answered in (("recall", tools.recall(obs_id)), ("recall_next", tools.recall_next(obs_id))):
            assert not answered.is_error
            assert text_of(answered) == f"{name} {obs_id}: the observation is empty (0 chunks)"
            assert answered.structured_content == {"id": obs_id, "chunk": 0, "chunks": 0, "payload": "", "more": False}


def test_a_client_of_the_2026_protocol_is_served(tmp_path: Path) -> None:
    """Review h59: the SDK's client pinned to the 2026-07-28 protocol (no initialize: each request carries the
    protocol version in its _meta envelope) got -32600 "the session is not initialized" for every request, and a
    client in the SDK's default mode ("auto": a server/discover probe) fell back to the older handshake, though the
    SDK serves that protocol on stdio (serve_dual_era_loop). Now a request with the envelope opens the session; a
    request with neither initialize nor the envelope before it is still told to initialize."""
    from mcp.types import PROTOCOL_VERSION_META_KEY

    store = tmp_path / "modern.arc"
    modern = "2026-07-28"

    async def session(mode: str) -> str:
        async with Client(server(store, "--preset", "minimal"), mode=mode) as client:
            stored = await call(client, "store_observation", action="cat log", observation=LOG)
            assert not stored.is_error, text_of(stored)
            obs_id = stored.structured_content["id"]
            payloads = [(await call(client, "recall", id=obs_id)).structured_content["payload"]]
            while True:
                more = await call(client, "recall_next", id=obs_id)
                if more.is_error:
                    break
                payloads.append(more.structured_content["payload"])
            assert "".join(payloads) == LOG
            return client.protocol_version

    assert anyio.run(session, modern) == modern
    assert anyio.run(session, "auto") == modern
    assert anyio.run(session, "legacy") != modern
    # without initialize and without the envelope: still told to initialize first
    lines = "\n".join(json.dumps(line) for line in (
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list",
         "params": {"_meta": {PROTOCOL_VERSION_META_KEY: modern, "io.modelcontextprotocol/clientCapabilities": {}}}},
    )) + "\n"
    done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(store)], input=lines,
                          capture_output=True, text=True, timeout=scaled_ceiling(60))
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert answers[1]["error"]["code"] == -32600 and "not initialized" in answers[1]["error"]["message"], answers
    assert {tool["name"] for tool in answers[2]["result"]["tools"]} == TOOLS, answers


def test_catalog_page_counts_what_another_writer_stored(pg_url: str) -> None:
    """Review h59: two `arc-ref mcp` servers may serve one PostgreSQL task at once (a writer folds what the others
    appended when it appends). catalog_page read the number of stored outputs before its own call caught up: a
    server that had not appended since the other stored answered "the catalog is empty" (pages 0), or a page whose
    text listed 2 outputs under "stored": 1, "pages": 1; its default was the last page it had seen, not the last
    page. Now the page and its fields are those of the state the call itself was applied to."""
    from arc_ref.frontends.mcp_server import ArcTools
    from arc_ref.persist.postgres import PostgresStore

    config = preset("minimal")  # 2 stubs a page
    first = PostgresStore.create(pg_url, "shared", config)
    second = PostgresStore.open(pg_url, "shared")
    try:
        mine, other = ArcTools(first), ArcTools(second)
        other.store_observation("ls", "one", 0)
        shown = mine.catalog_page(None)  # `mine` has seen nothing stored yet
        assert not shown.is_error and shown.structured_content["stored"] == 1, text_of(shown)
        assert shown.structured_content["page"] == shown.structured_content["pages"] == 1
        assert "observations 1-1 of 1" in text_of(shown)
        for n in range(3):
            other.store_observation(f"run {n}", f"out {n}", 0)
        last = mine.catalog_page(None)  # 4 stored: the last page is 2, though `mine` last saw 1 page
        assert (last.structured_content["page"], last.structured_content["pages"]) == (2, 2), text_of(last)
        assert last.structured_content["stored"] == 4 and "observations 3-4 of 4" in text_of(last)
        other.store_observation("five", "5", 0)
        third = mine.catalog_page(3)  # page 3 exists once `mine` has caught up
        assert not third.is_error and third.structured_content == {"page": 3, "pages": 3, "stored": 5,
                                                                   "text": text_of(third)}
    finally:
        first.close()
        second.close()


def test_an_output_over_max_observation_bytes_is_refused_before_it_is_stored(tmp_path: Path) -> None:
    """Review h59 F7: one store_observation of 30 MB of a single letter, within the 32 MiB row limit, took 1.8 GB and
    32 s to tokenize. `arc-ref mcp --max-observation-bytes N` (default 8 MiB, at most the row limit) refuses an
    output of more than N bytes of UTF-8 (bytes, not characters) before the store tokenizes it, with an error result
    naming the limit and the option; nothing is stored, and the server goes on serving."""
    store = tmp_path / "limit.arc"

    async def session() -> None:
        async with Client(server(store, "--preset", "minimal", "--max-observation-bytes", "10")) as client:
            fits = await call(client, "store_observation", action="ten bytes", observation="é" * 5)
            assert not fits.is_error, text_of(fits)
            for observation, said in [("é" * 5 + "x", "it is 11 bytes of UTF-8, over"),  # 6 characters
                                      ("x" * 11, "it is 11 characters, more than")]:
                refused = await call(client, "store_observation", action="too long", observation=observation)
                assert refused.is_error
                assert f"{said} this server's limit of 10 bytes of UTF-8" in text_of(refused), text_of(refused)
                assert "arc-ref mcp --max-observation-bytes N, at most 33,554,432" in text_of(refused)
            after = await call(client, "store_observation", action="after", observation="ok")
            assert not after.is_error, text_of(after)
            assert after.structured_content["index"] == 2

    anyio.run(session)
    with DurableStore.open(store) as reopened:
        assert [record.content for record in reopened.state.records] == ["é" * 5, "ok"]
    for option in ("33554433", "-1", "8MiB"):  # never above the row limit
        refused = subprocess.run(
            [sys.executable, "-m", "arc_ref.frontends.cli", "mcp", str(tmp_path / "new.arc"), "--max-observation-bytes",
             option], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=scaled_ceiling(60))
        assert refused.returncode == 2 and "--max-observation-bytes" in refused.stderr, refused.stderr
        assert not (tmp_path / "new.arc").exists()


def test_sizes_name_the_tokenizer_that_counted_them(tmp_path: Path) -> None:
    """Review h59 F8: the tokens store_observation and recall_meta report are counted in the store's tokenizer, and
    neither the server's instructions nor any result said which (a client budgeting another model's context could
    not tell). Now the instructions, store_observation's text and both results' structured content name it."""
    from arc_ref.frontends.mcp_server import build_server

    async def session(store: DurableStore) -> None:
        async with Client(build_server(store)) as client:
            assert client.instructions is not None
            assert "counted with this store's tokenizer, bytes (a chunk holds at most 8 of its tokens)" \
                in client.instructions, client.instructions
            stored = await call(client, "store_observation", action="ls", observation="twelve bytes")
            assert "12 tokens (bytes) in 2 chunk(s)" in text_of(stored), text_of(stored)
            assert stored.structured_content["tokenizer"] == "bytes"
            meta = await call(client, "recall_meta", id=stored.structured_content["id"])
            assert meta.structured_content["tokenizer"] == "bytes" and meta.structured_content["tokens"] == 12

    with DurableStore.create(tmp_path / "tok.arc", preset("minimal")) as store:
        anyio.run(session, store)
