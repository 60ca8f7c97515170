"""Durable store: reopen time vs replay time at 100,000 events, and the cost of one acknowledged append.

    python benchmarks/bench_store.py [--events 100000] [--appends 300]

The events are bench_replay's synthetic trace (paper preset, o200k_base; observations of 80 to 12,000
characters, agent turns, recalls, catalog commands, compactions), without its view lines (a view changes
nothing and is not an event of the log). In one run it times:

- replay: the fold of the trace lines in memory (parse + step per line: `arc_ref.persist.fold_lines`, the
  work `arc-ref replay` does without writing its output lines), twice; the ratios use the faster;
- reopen after a clean close (the writer snapshots on close): rows read and checked, the snapshot loaded;
- reopen after a crash at the worst point of the snapshot policy (a snapshot of 80% of the rows, the last
  20% folded): the store is closed without a snapshot after them, as a kill would leave it;
- reopen without the snapshot: every row read, checked and folded;

and prints each with its ratio to the replay, in wall-clock and in CPU seconds of this process (on a
machine shared with other work the CPU figures are the steadier ones). Every reopened state is compared with
the in-memory fold (untimed); the script fails if one differs. Then it times single appends (one commit and fsync each)
and what the acknowledgement record costs each (issue 18.1: after every commit the last acknowledged row is written to
STORE.ack and fdatasync'ed, apart from the WAL): rounds of appends with the record and rounds with its write left out
(a benchmark-only switch), alternating in one run, and the record's write alone. ``--appends-only`` runs just that,
on a new store of the paper preset.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from arc_ref.config import preset
from arc_ref.machine import Event, Observe
from arc_ref.options import integer_parser
from arc_ref.persist import DurableStore, fold_lines
from arc_ref.tokenizers import get_tokenizer
from arc_ref.trace import config_from_line, event_from_line, parse_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_replay import MOST_EVENTS, write_trace  # noqa: E402

BATCH = 1000  # events per commit while the store is filled


Seconds = tuple[float, float]  # (wall clock, CPU time of this process)


def clock() -> Seconds:
    return time.perf_counter(), time.process_time()


def since(start: Seconds) -> Seconds:
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


def timed(label: str, seconds: Seconds, replay: Seconds | None = None) -> None:
    ratio = f"   ratio {seconds[0] / replay[0]:.3f} wall, {seconds[1] / replay[1]:.3f} CPU" if replay else ""
    print(f"  {label:<62} {seconds[0]:8.2f} s wall {seconds[1]:8.2f} s CPU{ratio}", flush=True)


def fill(store: DurableStore, events: list[Event]) -> None:
    for start in range(0, len(events), BATCH):
        store.append_many(events[start:start + BATCH])


def _milliseconds(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    return (f"median {ordered[len(ordered) // 2] * 1000:.2f} ms, p99 {ordered[int(len(ordered) * 0.99)] * 1000:.2f} ms"
            f" over {len(ordered)}")


def append_costs(path: Path, appends: int, rounds: int = 6) -> None:
    """Single appends with and without the acknowledgement record's write, alternating rounds in one run."""
    timings: dict[bool, list[float]] = {True: [], False: []}
    record_alone: list[float] = []
    with DurableStore.open(path) as writer:
        writer.snapshot_min_events = 2**62
        acknowledgements = writer._acknowledgements
        assert acknowledgements is not None
        recorded = acknowledgements.record
        number = 0
        for round_number in range(rounds):
            with_record = round_number % 2 == 0
            acknowledgements.record = recorded if with_record else (lambda seq, checksum: None)  # type: ignore[method-assign]
            for _ in range(max(1, appends // rounds)):
                number += 1
                started = time.perf_counter()
                writer.append(Observe(f"cat extra_{number}.txt", f"line {number}\n" * 20))
                timings[with_record].append(time.perf_counter() - started)
        acknowledgements.record = recorded  # type: ignore[method-assign]
        for _ in range(max(1, appends // rounds)):
            started = time.perf_counter()
            recorded(writer.seq, writer.checksum)
            record_alone.append(time.perf_counter() - started)
        writer.close(snapshot=False)
    with_median = sorted(timings[True])[len(timings[True]) // 2]
    without_median = sorted(timings[False])[len(timings[False]) // 2]
    print(f"  single appends (step + commit + WAL fsync, synchronous=FULL, + the acknowledgement record): "
          f"{_milliseconds(timings[True])}")
    print(f"  single appends without the acknowledgement record's write (alternating rounds, same run): "
          f"{_milliseconds(timings[False])}")
    print(f"  the acknowledgement record costs {(with_median - without_median) * 1000:+.2f} ms per append"
          f" (difference of the medians, x{with_median / without_median:.2f}); its write alone"
          f" (pwrite + fdatasync of {len(_ack_record_sample())} bytes): {_milliseconds(record_alone)}")


def _ack_record_sample() -> bytes:
    from arc_ref.persist.acknowledgement import ack_record as _ack_record
    from arc_ref.persist.rows import GENESIS

    return _ack_record(1, GENESIS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=integer_parser(1, MOST_EVENTS), default=100_000,
                        help=f"events of the trace stored (1 to {MOST_EVENTS:,})")
    parser.add_argument("--appends", type=integer_parser(1, 1_000_000), default=300,
                        help="single appends timed at the end (1 to 1000000)")
    parser.add_argument("--appends-only", action="store_true",
                        help="only the single appends and the acknowledgement record's cost, on a new store")
    arguments = parser.parse_args()
    if arguments.appends_only:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "task.arc"
            DurableStore.create(path, preset("paper")).close()
            print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; store in {scratch}")
            append_costs(path, arguments.appends)
        return 0
    get_tokenizer("o200k_base")
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace.jsonl"
        write_trace(trace, arguments.events * 10 // 9 + 10)  # every 10th line of it is a view line
        lines = [line for line in trace.read_text(encoding="utf-8").splitlines() if '"op": "view"' not in line]
        lines = lines[: arguments.events + 1]
        config = config_from_line(parse_line(lines[0]))[1]
        events = [event_from_line(parse_line(line)) for line in lines[1:]]
        observations = sum(isinstance(event, Observe) for event in events)
        payload = sum(len(event.observation) for event in events if isinstance(event, Observe))
        print(f"{len(events):,} events ({observations:,} observations, {payload / 2**20:.1f} MiB of observation"
              f" text), preset paper, tokenizer {config.tokenizer}; {os.cpu_count()} CPUs, load"
              f" {os.getloadavg()[0]:.1f}")

        started = clock()
        expected = fold_lines(lines)
        first_replay = since(started)
        timed("replay: fold of the trace lines in memory (1st)", first_replay)
        started = clock()
        expected = fold_lines(lines)
        second_replay = since(started)
        replay = min(first_replay, second_replay, key=lambda pair: pair[1])  # the faster: the stricter comparison
        timed("replay: the same again (ratios use the one of less CPU time)", second_replay)

        path = Path(scratch) / "task.arc"
        cut = int(len(events) * 0.8)
        started = clock()
        with DurableStore.create(path, config) as store:
            fill(store, events[:cut])
        store = DurableStore.open(path)
        store.snapshot_min_events = 2**62  # no snapshot after 80%: the worst point of the policy
        fill(store, events[cut:])
        store.close(snapshot=False)
        timed(f"store filled ({BATCH} events per commit, snapshot at row {cut + 1:,})", since(started))

        started = clock()
        crashed = DurableStore.open(path, readonly=True)
        seconds = since(started)
        report = crashed.report
        same_after_crash = crashed.state == expected
        crashed.close()
        timed(f"reopen after a crash (snapshot of row {report.snapshot_seq:,}, {report.folded:,} folded)",
              seconds, replay)

        with DurableStore.open(path):  # the writer's close snapshots the last row
            pass
        sizes = {name: os.path.getsize(Path(scratch) / name) for name in os.listdir(scratch) if "task.arc" in name}
        started = clock()
        clean = DurableStore.open(path, readonly=True)
        seconds = since(started)
        report = clean.report
        same_after_close = clean.state == expected
        clean.close()
        timed(f"reopen after a clean close (snapshot of row {report.snapshot_seq:,})", seconds, replay)

        started = clock()
        full = DurableStore.open(path, readonly=True, use_snapshot=False)
        seconds = since(started)
        report = full.report
        same_without = full.state == expected
        full.close()
        timed(f"reopen without the snapshot ({report.folded:,} events checked and folded)", seconds, replay)

        print(f"  files: {json.dumps({name: f'{size / 2**20:.1f} MiB' for name, size in sorted(sizes.items())})}")
        print(f"  every reopened state equals the in-memory fold: "
              f"{same_after_crash and same_after_close and same_without}")

        append_costs(path, arguments.appends)
        if not (same_after_crash and same_after_close and same_without):
            print("FAILED: a reopened state differs from the fold", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_store"))
