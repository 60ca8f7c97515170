"""Crash check of the durable store: a writer killed with SIGKILL at random moments never loses an
acknowledged event (issue 10: "loses at most the event being written and never an acknowledged one").

The writer (``python -m proofs_check.crash writer STORE ACKS SEED``) opens or creates the store and appends
events forever; after each `append` returns it writes ``seq checksum sha256(line)`` to the ACKS file (one
``os.write`` of a whole line, O_APPEND) before it goes on. It snapshots every 50 events, so kills also land
while a snapshot is being written. `kill_loop` starts the writer, kills it with SIGKILL at a random moment
(before it is ready, or a random time after), then checks the store, and starts the writer again on the
same store: every acknowledged event must be there, byte for byte (its row's line hashes to the
acknowledged digest, its chained checksum is the acknowledged one); each killed run may have stored at most
one event it did not acknowledge (the one being written); and the store must reopen from its snapshot to the
same state as the fold of every event (compared after every kill, or every ``fold_every`` kills).

With ``wal_damage`` (issue 18.1), after a fraction of the kills the harness also does what a user's "stale
SQLite files" reflex or a bad disk does to the write-ahead log: deletes it (with or without its -shm),
truncates it at a random length, or flips a random byte of it. The store must then either reopen with every
acknowledged event byte for byte (recovered) or be refused with StoreCorrupt naming how many acknowledged
events are missing (refused; the count is checked against the rows that are there), also when SQLite itself
cannot read the store through the damaged WAL (the store then reads its database file alone), and when a kill cut
a checkpoint and the WAL was then deleted (the database file half old, half new: its readable rows are counted);
a reopen that lacks an acknowledged event is a loss, and any other refusal (another message, another StoreError,
a refusal without the count) a problem.
The log is then put back as it was (its -shm removed, to be rebuilt) and the loop goes on.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from attrs import Factory, define

from arc_ref.config import Config, preset
from arc_ref.machine import AgentTurn, ArcState, Compact, Event, Observe
from arc_ref.trace import encode, event_line

SNAPSHOT_EVERY = 50
READY = b"ready\n"
# Held back while kill_loop starts a writer: one that came then (Ctrl-C, a benchmark's SIGTERM) stopped the loop
# inside subprocess.Popen, after the fork, and the writer it had started ran on alone, never killed.
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def crash_config() -> Config:
    """Small budgets in bytes (fast to fold), room for a long run."""
    return preset("minimal", capacity=1_000_000, page_budget=400, stub_cap=120, summary_budget=400,
                  recall_budget=220, recent_budget=480, context_limit=2400)


def next_event(state: ArcState, seed: int, seq: int) -> Event:
    """The event the writer appends as row ``seq`` (a function of the seed, the row and the state)."""
    rng = random.Random(seed * 1_000_003 + seq)
    roll = rng.random()
    if roll < 0.55 or state.stored == 0:
        size = rng.choice((0, 10, 200, 3_000, 20_000, 60_000))  # large rows keep the commit window open
        alphabet = "abc é中😀\n\t§-_0123456789" if size <= 3_000 else "abc \n\t-_0123456789"  # (ASCII: fast recall)
        text = "".join(rng.choice(alphabet) for _ in range(min(size, 64))) * max(1, size // 64)
        return Observe(f"cat file_{seq}.txt", text, rng.randint(-2, 2))
    if roll < 0.80:
        record = state.record(rng.randint(1, state.stored))
        word = rng.choice(("_recall", "_recall-next", "_recall_meta"))
        return AgentTurn(f"re-read {seq}", f"{word} {record.obs_id}")
    if roll < 0.93:
        return AgentTurn(f"step {seq}", rng.choice(("ls", "catalog-first", "catalog-next", "pytest -x")))
    return Compact(rng.choice(("forced", "reactive")))


def writer(store_path: str, acks_path: str, seed: int) -> int:
    """Append events forever, acknowledging each after its commit (run in a child process, killed)."""
    from arc_ref.persist import DurableStore

    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held back by kill_loop while it started this process
    path = Path(store_path)
    store = DurableStore.open(path) if path.exists() else DurableStore.create(path, crash_config())
    store.snapshot_min_events, store.snapshot_growth = SNAPSHOT_EVERY, 0.0
    acks = os.open(acks_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(sys.stdout.fileno(), READY)
    while True:
        event = next_event(store.state, seed, store.seq + 1)
        done = store.append(event)
        digest = hashlib.sha256(encode(event_line(event)).encode("utf-8")).hexdigest()  # the line it wrote
        os.write(acks, f"{done.seq} {done.checksum} {digest}\n".encode("ascii"))


@define
class CrashFigures:
    kills: int = 0
    acknowledged: int = 0  # distinct events acknowledged over all runs
    lost: int = 0  # acknowledged events missing or different after a kill: must be 0
    unacknowledged_stored: int = 0  # stored events never acknowledged (killed after the commit, before the ack)
    stored: int = 0  # rows in the store at the end (the config row included)
    snapshot_reopens: int = 0  # reopens that started from a snapshot
    fold_checks: int = 0  # reopens compared with the fold of every row
    wal_damages: int = 0  # kills after which the WAL was deleted, truncated or had a byte flipped
    recovered: int = 0  # ... and the store still reopened with every acknowledged event
    refused: int = 0  # ... and the store was refused, naming how many acknowledged events are missing (maybe none)
    # ... refused as corrupt without that count: each is also a problem (issue 31.4: the one such case, a
    # checkpoint cut by the kill and the WAL deleted after it, now states its count)
    refused_uncounted: list[str] = Factory(list)
    damage_kinds: dict[str, int] = Factory(dict)  # damages by kind
    problems: list[str] = Factory(list)


def read_acks(path: Path) -> dict[int, tuple[str, str]]:
    """The complete acknowledgement lines (a line cut by the kill is not an acknowledgement)."""
    if not path.exists():
        return {}
    acks: dict[int, tuple[str, str]] = {}
    for line in path.read_bytes().split(b"\n")[:-1]:
        seq, checksum, digest = line.decode("ascii").split()
        acks[int(seq)] = (checksum, digest)
    return acks


def check_store(
    store_path: Path, acks: dict[int, tuple[str, str]], stored_before: int, figures: CrashFigures, fold: bool
) -> None:
    """Every acknowledged event is stored byte for byte and the store reopens (from its snapshot); with
    ``fold``, the reopened state is also compared with the fold of every row without the snapshot."""
    from arc_ref.persist import DurableStore, read_rows

    rows = {row.seq: row for row in read_rows(store_path)}  # numbering and chained checksums checked
    stored = len(rows)
    for seq, (checksum, digest) in acks.items():
        row = rows.get(seq)
        if row is None or row.checksum != checksum or hashlib.sha256(row.line.encode()).hexdigest() != digest:
            figures.lost += 1
            figures.problems.append(f"acknowledged row {seq} is {'missing' if row is None else 'different'}")
    # the run just killed appended one event at a time: at most its last one may be stored unacknowledged
    last_known = max(stored_before, max(acks, default=1))
    if stored > last_known + 1:
        figures.problems.append(f"the killed run stored {stored - last_known} rows past row {last_known}"
                                " (its last acknowledged or the last stored before it); at most 1")
    figures.unacknowledged_stored = len(set(range(2, stored + 1)) - set(acks))
    with DurableStore.open(store_path, readonly=True) as quick:
        figures.snapshot_reopens += quick.report.snapshot_seq > 0
        if quick.seq != stored:
            figures.problems.append(f"the reopen has {quick.seq} rows, the log {stored}")
        if fold:
            with DurableStore.open(store_path, readonly=True, use_snapshot=False) as full:
                figures.fold_checks += 1
                if quick.state != full.state:
                    figures.problems.append(
                        f"reopen from the snapshot of row {quick.report.snapshot_seq} != the fold of every row"
                    )
    figures.stored = stored


WAL_DAMAGES = ("deleted", "deleted with its -shm", "truncated", "a byte flipped")
_MISSING = re.compile(r"(\d+) acknowledged events? (?:is|are) missing: rows up to (\d+) were acknowledged"
                      r" .* the store ends at row (\d+)")
_NONE_MISSING = re.compile(r"no acknowledged event is missing \(rows up to (\d+) are there\)")


def damage_wal(store_path: Path, rng: random.Random) -> str | None:
    """Damage the store's WAL as a user or a disk might (None: there was no WAL to damage)."""
    wal = Path(str(store_path) + "-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        return None
    kind = rng.choice(WAL_DAMAGES)
    if kind.startswith("deleted"):
        wal.unlink()
        if kind.endswith("-shm"):
            Path(str(store_path) + "-shm").unlink(missing_ok=True)
    elif kind == "truncated":
        os.truncate(wal, rng.randrange(wal.stat().st_size))
    else:
        data = bytearray(wal.read_bytes())
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        wal.write_bytes(bytes(data))
    return kind


def check_damaged(store_path: Path, acks: dict[int, tuple[str, str]], figures: CrashFigures) -> None:
    """After a WAL damage: every acknowledged event reopens byte for byte, or the open is refused with the
    number of acknowledged events missing, and that number is right (the export stops after the rows there)."""
    from arc_ref.persist import DurableStore, StoreCorrupt, StoredEvent, StoreError, read_rows

    rows: dict[int, StoredEvent] = {}
    try:
        for stored in read_rows(store_path):
            rows[stored.seq] = stored
        with DurableStore.open(store_path, readonly=True) as store:
            seq = store.seq
    except StoreError as refusal:  # any refusal (SQLite's "disk I/O error" too) is checked, never a crash of the loop
        found = _MISSING.search(str(refusal))
        none_missing = _NONE_MISSING.search(str(refusal))
        last_acknowledged = max(acks, default=1)
        if not isinstance(refusal, StoreCorrupt):
            figures.problems.append(f"a damaged WAL was refused as {type(refusal).__name__}, not StoreCorrupt:"
                                    f" {refusal}")
        elif none_missing is not None:  # every acknowledged row is there, the file is damaged past or beside them
            acknowledged = int(none_missing.group(1))
            if acknowledged < last_acknowledged or len(rows) < acknowledged:
                figures.problems.append(f"refused with wrong figures ({refusal}); {len(rows)} rows are there and"
                                        f" row {last_acknowledged} was acknowledged")
        elif found is None:  # refused without the count of missing events: never acceptable (issue 31.4)
            figures.refused_uncounted.append(str(refusal))
            figures.problems.append(f"refused without the count of missing acknowledged events: {refusal}")
        else:
            missing, acknowledged, there = (int(value) for value in found.groups())
            if there != len(rows) or missing != acknowledged - there or acknowledged < last_acknowledged:
                figures.problems.append(f"refused with wrong figures ({refusal}); {len(rows)} rows are there and"
                                        f" row {last_acknowledged} was acknowledged")
        figures.refused += 1
        return
    for number, (checksum, digest) in acks.items():
        found_row = rows.get(number)
        if (found_row is None or found_row.checksum != checksum
                or hashlib.sha256(found_row.line.encode()).hexdigest() != digest):
            figures.lost += 1
            figures.problems.append(f"after a WAL damage acknowledged row {number} is"
                                    f" {'missing' if found_row is None else 'different'} and the store opened ({seq} rows)")
    figures.recovered += 1


def wait_for_acknowledged(acks_path: Path, events: int, child: subprocess.Popen[bytes],
                          seconds: float = 300.0) -> None:
    """Wait until the writer has acknowledged ``events`` events (RuntimeError after ``seconds`` or if it exits)."""
    deadline = time.monotonic() + seconds
    while len(read_acks(acks_path)) < events:
        if child.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the writer acknowledged {len(read_acks(acks_path))} of {events} events"
                               f" before the first kill ({'it exited' if child.poll() is not None else 'timed out'})")
        time.sleep(0.01)


def kill_loop(
    directory: Path, kills: int, seed: int = 7, max_delay: float = 0.4, fold_every: int = 1,
    wal_damage: float = 0.0, first_kill_after: int = 0,
) -> CrashFigures:
    """Start the writer, SIGKILL it at a random moment, check, repeat ``kills`` times on one store.

    The full fold (O(rows)) is compared with the snapshot reopen after every ``fold_every``-th kill and after
    the last; the acknowledged rows are checked after every kill. ``first_kill_after``: the first kill comes
    (at a random moment) only after that many events were acknowledged, whatever the machine's speed; with
    SNAPSHOT_EVERY, every reopen starts from a snapshot (the first precedes the SNAPSHOT_EVERY-th event)."""
    rng = random.Random(seed)
    store_path, acks_path = directory / "crash.arc", directory / "acks.txt"
    figures = CrashFigures()
    for kill in range(kills):
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # until the `try` whose `finally` kills it
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "proofs_check.crash", "writer", str(store_path), str(acks_path), str(seed)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal held back is raised here
            if rng.random() < 0.1 and not (kill == 0 and first_kill_after):  # now and then, while it starts
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                assert child.stdout is not None
                ready = child.stdout.readline()
                if ready != READY:
                    error = child.stderr.read().decode("utf-8", "replace") if child.stderr else ""
                    raise RuntimeError(f"the writer did not start: {error}")
                if kill == 0:
                    wait_for_acknowledged(acks_path, first_kill_after, child)
                time.sleep(rng.uniform(0.0, max_delay))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            for stream in (child.stdout, child.stderr):
                if stream is not None:
                    stream.close()
        if child.returncode != -signal.SIGKILL:
            figures.problems.append(f"kill {kill}: the writer had already exited with {child.returncode}")
        figures.kills += 1
        acks = read_acks(acks_path)
        figures.acknowledged = len(acks)
        if store_path.exists():  # (a kill before the store was first created leaves no store)
            check_store(store_path, acks, figures.stored, figures,
                        fold=(kill + 1) % fold_every == 0 or kill + 1 == kills)
            if rng.random() < wal_damage:
                wal = Path(str(store_path) + "-wal")
                kept = wal.read_bytes() if wal.exists() else None
                kind = damage_wal(store_path, rng)
                if kind is not None:
                    figures.wal_damages += 1
                    figures.damage_kinds[kind] = figures.damage_kinds.get(kind, 0) + 1
                    check_damaged(store_path, acks, figures)
                    assert kept is not None
                    wal.write_bytes(kept)  # put back as it was; its index is rebuilt from it
                    Path(str(store_path) + "-shm").unlink(missing_ok=True)
        elif acks:
            figures.problems.append("the store is gone")
    return figures


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "writer":
        return writer(argv[1], argv[2], int(argv[3]))
    print("usage: python -m proofs_check.crash writer STORE ACKS SEED", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
