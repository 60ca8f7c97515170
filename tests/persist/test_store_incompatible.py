"""A stored row that is intact but that this arc-ref refuses (review h75): named as such, not as damage.

A conversation stored by one arc-ref is read by a later one after an upgrade. When the later one's rules differ
(ARC's tool listing grew by 16 tokens, so a stored configuration's budgets no longer fit, K > L; an event field
an older arc-ref cannot read), the row's checksum still holds: the store is not damaged, and the message says so
and what to do, instead of only the core's advice to lower budgets that no one can change in a stored
conversation. The running arc-ref's stricter rule is stood in for by the core's check refusing the row.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from arc_ref.config import preset
from arc_ref.errors import ConfigError
from arc_ref.machine import Observe
from arc_ref.persist import DurableStore, StoreCorrupt
from arc_ref.persist import rows
from arc_ref.trace import TraceError

CONFIG = preset("minimal", capacity=12)


def _stored(path: Path) -> None:
    with DurableStore.create(path, CONFIG) as store:
        store.append(Observe("ls", "a.txt\nb.txt"))
        store.append(Observe("cat a.txt", "hello"))


def test_a_configuration_row_this_arc_ref_refuses_is_named_intact(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "task.arc"
    _stored(path)

    def stricter(config: object) -> object:  # this arc-ref counts the prefix 16 tokens longer than the writer
        raise ConfigError("K = B + M + R + P + Q + eta = 4110 exceeds L = 4096 (A4: K <= L); lower summary_budget")

    monkeypatch.setattr(rows, "init", stricter)
    with pytest.raises(StoreCorrupt) as refused:  # still set aside or refused wherever a damaged store is
        DurableStore.open(path)
    message = str(refused.value)
    assert "row 1: K = B + M" in message
    assert "row 1 is intact, its checksum holds" in message
    assert "another arc-ref version, or another tokenizer or chat template" in message
    assert refused.value.code == "store_incompatible"


def test_an_event_row_this_arc_ref_cannot_read_is_named_intact(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "task.arc"
    _stored(path)

    def older(obj: object) -> object:  # an arc-ref from before a field could be null (returncode: 29 Nov 13:28)
        raise TraceError("'returncode' must be an integer, got null")

    monkeypatch.setattr(rows, "event_from_line", older)
    with pytest.raises(StoreCorrupt) as refused:
        DurableStore.open(path)
    found = re.search(r"row (\d+): 'returncode' must be an integer, got null", str(refused.value))
    assert found is not None
    assert f"row {found.group(1)} is intact, its checksum holds" in str(refused.value)


def test_a_damaged_row_is_still_named_damaged(tmp_path: Path) -> None:
    path = tmp_path / "task.arc"
    _stored(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET line = CAST(? AS BLOB) WHERE seq = 3",
                           ('{"op":"observe","command":"cat a.txt","output":"HELLO"}',))
    with pytest.raises(StoreCorrupt, match="row 3 fails its checksum") as refused:
        DurableStore.open(path)
    assert "is intact" not in str(refused.value)
    assert refused.value.code == "store_corrupt"
