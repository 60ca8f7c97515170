"""Crash check at scale: a store writer killed with SIGKILL at random moments, many times (proofs_check.crash).

    python benchmarks/bench_store_crash.py [--kills 500] [--seed 7] [--max-delay 0.4] [--wal-damage 0.5]

Prints the kills, the events acknowledged, the events lost (must be 0), the events stored but never
acknowledged (a kill between the commit and the acknowledgement: mostly during the commit's fsync, after the
write; the event is kept), the reopens from a snapshot and how many were compared with the fold of every
row, and any problem. With ``--wal-damage P`` (default 0.5), after that fraction of the kills the write-ahead log
is also deleted (with or without its -shm), truncated at random or has a random byte flipped (issue 18.1): it prints
the damages, how many reopened with every acknowledged event (recovered) and how many were refused naming the
number of acknowledged events missing (refused); a reopen lacking an acknowledged event counts as lost.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from arc_ref.options import integer_parser, number_parser
from proofs_check.crash import kill_loop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=integer_parser(1, 1_000_000), default=500, help="1 to 1000000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-delay", type=number_parser(3600, minimum=0), default=0.4,
                        help="seconds after ready, at most, before a kill (0 to 3600)")
    parser.add_argument("--fold-every", type=integer_parser(1, 1_000_000), default=25,
                        help="compare the snapshot reopen with the fold of every row after every N-th kill")
    parser.add_argument("--wal-damage", type=number_parser(1, minimum=0), default=0.5,
                        help="the fraction of kills after which the WAL is deleted, truncated or has a byte flipped"
                             " (0 to 1)")
    arguments = parser.parse_args()
    started = time.perf_counter()
    # a signal (benchmarks/servers.py) leaves through kill_loop's `finally`, which kills the writer it started, and
    # the scratch folder is removed: ended at once by SIGTERM, the writer went on alone, filling the disk
    with tempfile.TemporaryDirectory() as scratch:
        figures = kill_loop(Path(scratch), arguments.kills, arguments.seed, arguments.max_delay,
                            arguments.fold_every, arguments.wal_damage)
    print(f"kills: {figures.kills}")
    print(f"events acknowledged: {figures.acknowledged}")
    print(f"events lost: {figures.lost}")
    print(f"rows in the store at the end: {figures.stored} (the config row included)")
    print(f"events stored but never acknowledged (killed after the commit, before the acknowledgement): "
          f"{figures.unacknowledged_stored}")
    print(f"reopens after a kill: {figures.kills}, {figures.snapshot_reopens} of them from a snapshot;"
          f" {figures.fold_checks} compared with the fold of every row, all equal unless a problem is listed")
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(figures.damage_kinds.items()))
    print(f"WAL damages after a kill: {figures.wal_damages} ({kinds or 'none'}); reopened with every acknowledged"
          f" event: {figures.recovered}; refused, naming the acknowledged events missing: {figures.refused}")
    print(f"refused WITHOUT the count of missing acknowledged events (each also a problem): "
          f"{len(figures.refused_uncounted)}")
    for refusal in figures.refused_uncounted:
        print(f"  {refusal}")
    print(f"problems: {figures.problems[:5] or 'none'}{' ...' if len(figures.problems) > 5 else ''}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0 if not figures.problems and figures.lost == 0 else 1


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_store_crash"))
