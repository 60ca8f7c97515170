"""Properties: over random configurations and event sequences, a store reopens to exactly the in-memory fold
(with a snapshot at random points or none, reopened midway and continued), and its export folds to it too."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from arc_ref.config import Config
from arc_ref.errors import CapacityExceeded
from arc_ref.machine import Event, init
from arc_ref.persist import DurableStore, fold_lines
from proofs_check.harness import apply, event_lists, resolve_placeholders
from proofs_check.strategies import configs


def _store_all(store: DurableStore, events: list[Event]) -> None:
    for event in events:
        resolved = resolve_placeholders(store.state, event)
        try:
            store.append(resolved)
        except CapacityExceeded:
            assert store.state.stored == store.state.config.capacity


@given(
    config=configs(),
    events=event_lists(max_events=30),
    cut=st.integers(0, 30),
    snapshot_every=st.sampled_from((1, 3, 7, 10**9)),
)
def test_a_reopened_store_is_the_fold_of_its_events(
    config: Config, events: list[Event], cut: int, snapshot_every: int
) -> None:
    expected = init(config)
    for event in events:
        expected = apply(expected, event)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "task.arc"
        store = DurableStore.create(path, config)
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        _store_all(store, events[:cut])
        store.close()
        store = DurableStore.open(path)  # reopened midway (from its closing snapshot), then continued
        store.snapshot_min_events, store.snapshot_growth = snapshot_every, 0.0
        _store_all(store, events[cut:])
        assert store.state == expected
        lines = list(store.export_lines())
        store.close(snapshot=False)  # as a crash would leave it: the last snapshot is older than the log
        for use_snapshot in (True, False):
            with DurableStore.open(path, readonly=True, use_snapshot=use_snapshot) as reopened:
                assert reopened.state == expected
                report = reopened.report
                # every row after the config row is either in the snapshot used or folded
                assert report.folded + max(report.snapshot_seq - 1, 0) == reopened.seq - 1
                if not use_snapshot:
                    assert report.snapshot_seq == 0
        assert fold_lines(lines) == expected
