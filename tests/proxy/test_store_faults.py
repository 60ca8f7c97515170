"""`arc-ref proxy --store DIR` when the store fails for a passing reason (issue 25 item 3): a full disk, a busy
index. The request is answered 503 `store_unavailable` (retryable), never a 500 with a traceback; the conversation
is kept (not set aside, so its next request resumes it rather than starting anew); nothing stays open and locked."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app

from arc_ref.frontends import proxy as proxy_module  # noqa: E402
from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_ref.persist import DurableStore, StoreError  # noqa: E402
from arc_ref.persist.errors import StoreFull  # noqa: E402
from arc_ref.persist.marks import MarkFile  # noqa: E402
from benchmarks.proxy_cases import fake_upstream, task  # noqa: E402
from tests.proxy.test_hostile import call_reply, post  # noqa: E402

pytestmark = needs_qwen3


def _continued(first: Any, output: str = "output\n") -> list[dict[str, Any]]:
    return [*task(1), first.json()["choices"][0]["message"], {"role": "tool", "tool_call_id": "c1", "content": output}]


def _edited(number: int) -> list[dict[str, Any]]:
    return [*task(1), {"role": "assistant", "content": f"edited {number}"}, {"role": "user", "content": "again"}]


@contextlib.contextmanager
def _proxy(store: Path) -> Iterator[tuple[Any, str]]:
    """The proxy app on ``store`` (and its URL) in front of an upstream that always calls the bash tool."""
    with fake_upstream() as upstream:
        upstream.reply = lambda body: call_reply()
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      store=store))
        with serve_app(app) as base:
            yield app, base


def _no_space(self: Any, mark: Any) -> None:
    """MarkFile.append on a full disk."""
    raise StoreError("cannot write the conversation index: No space left on device (injected)")


def test_a_full_disk_when_a_conversation_is_opened_is_503_and_the_conversation_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _proxy(tmp_path / "store") as (app, base):
        first = post(base, task(1), tools=[BASH_TOOL])
        key = first.headers["x-arc-conversation"]
        opened = proxy_module.DurableStore.open
        failures = iter([StoreFull("the file system is full (injected); nothing is damaged")])

        def full_once(path: Any, **options: Any) -> Any:
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return opened(path, **options)

        monkeypatch.setattr(proxy_module.DurableStore, "open", full_once)
        app.state.proxy.conversations.evict(now=float("inf"))  # out of memory: the next request opens it
        refused = post(base, _continued(first), tools=[BASH_TOOL])
        assert (refused.status_code, refused.json()["error"]["type"]) == (503, "store_unavailable")
        assert refused.headers.get("retry-after")
        assert app.state.proxy.conversations.set_aside == {}
        again = post(base, _continued(first), tools=[BASH_TOOL])  # the retry resumes the same conversation
        assert (again.status_code, again.headers["x-arc-conversation"]) == (200, key)


def test_a_mark_or_index_that_cannot_be_written_is_503_not_500(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _proxy(tmp_path / "store") as (app, base):
        first = post(base, task(1), tools=[BASH_TOOL])

        with monkeypatch.context() as patch:
            patch.setattr(MarkFile, "append", _no_space)
            refused = post(base, _continued(first), tools=[BASH_TOOL])
            assert (refused.status_code, refused.json()["error"]["type"]) == (503, "store_unavailable")
        index = app.state.proxy.conversations.hash_index

        def busy(rows: Any) -> None:
            raise StoreError("the conversations' index cannot be written: database is locked (injected)")

        with monkeypatch.context() as patch:
            patch.setattr(index, "add", busy)
            refused = post(base, _continued(first, "other output\n"), tools=[BASH_TOOL])
            assert (refused.status_code, refused.json()["error"]["type"]) == (503, "store_unavailable")


def test_a_fork_that_fails_leaves_no_store_open_and_no_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    with _proxy(store) as (app, base):
        assert post(base, task(1), tools=[BASH_TOOL]).status_code == 200
        directories = sorted(path.name for path in store.iterdir() if path.is_dir())

        with monkeypatch.context() as patch:  # the fork's store is made, then its first mark fails
            patch.setattr(MarkFile, "append", _no_space)
            for number in range(3):
                assert post(base, _edited(number), tools=[BASH_TOOL]).status_code == 503
        conversations = app.state.proxy.conversations
        assert [key for key, held in conversations.by_key.items() if held.store is not None] == []
        assert sorted(path.name for path in store.iterdir() if path.is_dir()) == directories

        def full(path: Any, config: Any) -> Any:
            raise StoreFull("the file system is full (injected)")

        with monkeypatch.context() as patch:  # the fork's store cannot even be created
            patch.setattr(proxy_module.DurableStore, "create", full)
            assert post(base, _edited(9), tools=[BASH_TOOL]).status_code == 503
        assert sorted(path.name for path in store.iterdir() if path.is_dir()) == directories
        for directory in store.iterdir():  # no store of this test left locked: each opens (StoreLocked if not)
            if directory.is_dir():
                DurableStore.open(directory / "task.arc").close(snapshot=False)
