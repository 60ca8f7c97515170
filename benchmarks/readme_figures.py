"""The README's measured figures, printed with the machine and its load (issue 31, item 5).

    python benchmarks/readme_figures.py [--only install-eval nih install-dev tests] [--jobs N]

Each figure is measured the way the README's opening commands run: a fresh clone of this repository (``git
clone`` of the working copy's HEAD into a temporary directory) and a fresh venv per command, pip without its
cache (``--no-cache-dir``) and as this machine configures it (its index and mirrors):

- ``install-eval``: ``pip install -e '.[eval]'``: seconds, then the venv's size;
- ``nih``: with that venv, ``arc-eval nih --tasks 100 --seeds 42``: seconds;
- ``install-dev``: ``pip install -e '.[dev]'``: seconds, then the venv's size;
- ``tests``: with that venv, ``pytest --collect-only`` (the number of tests the default run selects) and the
  default ``pytest -q`` run (``-n``-free; ``--jobs`` only says how many other jobs share the machine, it starts
  nothing): seconds, and its summary line.

Before and after each step it prints the load average and the running/total processes of /proc/loadavg, so a
figure taken under load says so. The last lines are the README's table rows, dated, with the machine. A full
run takes about half an hour on 2 shared cores (the test run is most of it); ``--only`` measures a part.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = ("install-eval", "nih", "install-dev", "tests")
MIB = 2**20


def machine() -> str:
    """CPU model, cores, memory and OS, in one line."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown memory"
    try:
        total = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(encoding="utf-8"))
        if total:
            memory = f"{int(total.group(1)) / 2**20:.0f} GiB"
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {memory}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def load() -> str:
    """The 1-, 5- and 15-minute load averages and running/total processes (/proc/loadavg)."""
    try:
        fields = Path("/proc/loadavg").read_text(encoding="utf-8").split()
        return f"load {fields[0]} {fields[1]} {fields[2]}, processes running/total {fields[3]}"
    except (OSError, IndexError):
        one, five, fifteen = os.getloadavg()
        return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (links not followed), as ``du --apparent-size`` counts."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            file = Path(root) / name
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def timed(command: list[str], cwd: Path, label: str) -> tuple[float, str]:
    """Run ``command``, print the load before and after; (seconds, its combined output). Stops on failure."""
    print(f"{label}: {' '.join(command)}", flush=True)
    print(f"  before: {load()}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    print(f"  after:  {load()}; {seconds:.0f} s, exit {done.returncode}", flush=True)
    if done.returncode != 0:
        sys.exit(f"{label} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return seconds, done.stdout + done.stderr


def fresh_venv(base: Path, clone: Path, extra: str, label: str) -> tuple[Path, float, int]:
    venv = base / f"venv-{extra}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    seconds, _ = timed([str(venv / "bin" / "pip"), "install", "--no-cache-dir", "-q", "-e", f".[{extra}]"], clone, label)
    size = tree_size(venv)
    print(f"  venv: {size / MIB:.0f} MiB", flush=True)
    return venv, seconds, size


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS), help="the steps to measure")
    parser.add_argument("--jobs", type=int, default=None, help="other jobs sharing the machine (said, not started)")
    arguments = parser.parse_args()
    steps = set(arguments.only)
    if "nih" in steps:
        steps.add("install-eval")
    if "tests" in steps:
        steps.add("install-dev")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print(f"machine: {machine()}")
    print(f"commit {commit}, {today}; {load()}" + (f"; {arguments.jobs} other jobs" if arguments.jobs else ""))
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="readme-figures-") as scratch:
        base = Path(scratch)
        clone = base / "arc-ref"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        shared = REPO.parent / "shared"
        if shared.exists() and not (clone.parent / "shared").exists():
            (clone.parent / "shared").symlink_to(shared)  # the tests read ../shared/data, as in a checkout
        if "install-eval" in steps:
            venv, seconds, size = fresh_venv(base, clone, "eval", "install-eval")
            run = "-"
            if "nih" in steps:
                nih_seconds, _ = timed([str(venv / "bin" / "arc-eval"), "nih", "--tasks", "100", "--seeds", "42",
                                        "--out", str(base / "runs")], clone, "nih")
                run = f"the run: {duration(nih_seconds)}"
            rows.append(f"| first: `pip install -e '.[eval]'`, then `arc-eval nih --tasks 100 --seeds 42` |"
                        f" {size / MIB:.0f} MiB | {duration(seconds)} | {run} |")
        if "install-dev" in steps:
            venv, seconds, size = fresh_venv(base, clone, "dev", "install-dev")
            run = "-"
            if "tests" in steps:
                python = str(venv / "bin" / "python")
                _, listed = timed([python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], clone,
                                  "tests collected")
                selected = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", listed)
                count = selected.group(1) if selected else "?"
                test_seconds, output = timed([python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], clone, "tests")
                summary = [line for line in output.splitlines() if " passed" in line]
                print(f"  {summary[-1] if summary else 'no summary line'}; {count} selected by the default markers")
                outcome = re.findall(r"(\d+) (passed|skipped|failed)", summary[-1] if summary else "")
                said = ", ".join(f"{int(number):,} {word}" for number, word in outcome) or f"{count} selected"
                run = f"the tests: {duration(test_seconds)} ({said})"
            rows.append(f"| second: `pip install -e '.[dev]'`, then `pytest` | {size / MIB:.0f} MiB | {duration(seconds)} | {run} |")
    print()
    print(f"README rows (measured {today}, commit {commit}, by benchmarks/readme_figures.py; {machine()}; {load()}):")
    print("| command | venv size | install time | then |")
    print("|---|---:|---:|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "readme_figures"))
