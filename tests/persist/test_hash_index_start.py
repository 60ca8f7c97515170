"""DIR/hashes.sqlite opened by processes started together on a new --store (issue 25 item 3): while one switches
the new file to WAL, another's switch answers "database is locked" at once, without SQLite's busy wait. It is
tried again, not refused (before: 7 of 180 openings refused, so a proxy exited 2 at start)."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path
from typing import Any

import pytest

from arc_ref.persist.hash_index import HashIndex

ROUNDS = 60  # new directories, each opened by PROCESSES at once (about 2 s)
PROCESSES = 3


def _open_and_use(directory: str, results: Any, start: Any) -> None:
    start.wait()
    try:
        index = HashIndex(Path(directory))
        index.add([("h", "k")])
        found = index.keys_of(["h"])
        index.close()
        results.put("ok" if found == {"h": ["k"]} else f"read {found}")
    except Exception as problem:  # reported to the test, which names it
        results.put(f"{type(problem).__name__}: {problem}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks processes (Linux's fork start method)")
def test_processes_opening_a_new_index_together_all_open_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    problems = []
    for round_number in range(ROUNDS):
        directory = tmp_path / str(round_number)
        directory.mkdir()
        results, start = context.Queue(), context.Barrier(PROCESSES)
        workers = [context.Process(target=_open_and_use, args=(str(directory), results, start))
                   for _ in range(PROCESSES)]
        for worker in workers:
            worker.start()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        problems += [outcome for outcome in outcomes if outcome != "ok"]
    assert problems == []
