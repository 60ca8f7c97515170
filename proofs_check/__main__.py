"""`python -m proofs_check`: run the executable proofs and print statement -> property -> examples -> result.

1. the Hypothesis properties and state machines of this package (profile ``ci`` by default);
2. CrossHair on the contracted arithmetic of the core (no counterexample allowed) and on the broken
   variants of `proofs_check.broken_contracts` (a counterexample required for each);
3. the coverage check: every numbered statement of the appendix has at least one property.
Exit status 0 only when everything holds.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pytest

from proofs_check.broken_contracts import BROKEN, CONTRACT_STATEMENTS, CONTRACTED
from proofs_check.profiles import load_profile
from proofs_check.registry import EXAMPLES, PROPERTIES, STATEMENTS

PACKAGE_DIR = Path(__file__).resolve().parent
_COUNTEREXAMPLE = re.compile(r"error: (.*when calling .*)$")
_CALL = re.compile(r"when calling (.*)$")
BROKEN_LABEL = "(broken on purpose: must fail)"


def statement_label(key: str) -> str:
    """A row's statement as the table prints it: its key and its name (``A4 Budgeted active view``)."""
    return f"{key} {STATEMENTS[key]}" if key in STATEMENTS else key


def broken_result(reported: str | None, known_fails: bool) -> str:
    """What a deliberately broken variant's row says: ``caught`` with CrossHair's counterexample when CrossHair
    found one (and the recorded counterexample still breaks the postcondition), else ``NOT CAUGHT``."""
    if reported is not None and known_fails:
        found = _CALL.search(reported)
        call = found.group(1) if found else reported
        return f"caught: CrossHair found {call}, which breaks the postcondition"
    if reported is None:
        return "NOT CAUGHT: CrossHair found no counterexample to a contract that is broken"
    return "NOT CAUGHT: the recorded counterexample no longer breaks the postcondition"


def property_name(item: Any) -> str:
    """The registry name of a collected test: module.function, or module.Machine for a state machine."""
    cls = getattr(item, "cls", None)
    if cls is not None and cls.__qualname__.endswith(".TestCase"):
        return f"{item.module.__name__}.{cls.__qualname__[: -len('.TestCase')]}"
    function = getattr(item, "function", None)
    if function is None:
        return str(item.nodeid)
    return f"{function.__module__}.{function.__name__}"


class _Collector:
    """pytest plugin that records outcomes under registry names."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or report.outcome != "passed":
            name = property_name(item)
            previous = self.outcomes.get(name, "passed")
            self.outcomes[name] = report.outcome if previous == "passed" else previous
            self.seconds[name] = self.seconds.get(name, 0.0) + report.duration


def run_properties(profile: str, extra_args: Sequence[str]) -> tuple[int, _Collector]:
    collector = _Collector()
    args = [str(PACKAGE_DIR), "-q", "-p", "no:cacheprovider", "--no-header",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", *extra_args]
    code = pytest.main(args, plugins=[collector])
    return int(code), collector


def crosshair_check(targets: Sequence[str], per_condition_timeout: float, total_timeout: float) -> tuple[int, list[str], str]:
    """Run `crosshair check` (PEP 316 contracts); return (exit code, counterexample lines, raw output)."""
    executable = shutil.which("crosshair")
    command = [executable] if executable else [sys.executable, "-m", "crosshair"]
    command += ["check", "--analysis_kind=PEP316", f"--per_condition_timeout={per_condition_timeout}", *targets]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=total_timeout, cwd=PACKAGE_DIR.parent)
    except subprocess.TimeoutExpired:
        return 124, [], f"crosshair exceeded {total_timeout} s"
    output = done.stdout + done.stderr
    found = [match.group(1) for line in output.splitlines() if (match := _COUNTEREXAMPLE.search(line))]
    return done.returncode, found, output


def format_table(rows: Sequence[dict[str, Any]], missing: Sequence[str]) -> str:
    """The table: statement (key and name) -> property -> examples run -> result, in the appendix's order,
    the deliberately broken variants last; then one line per statement without a passing check."""
    order = list(STATEMENTS)
    ordered = sorted(rows, key=lambda r: order.index(r["statement"]) if r["statement"] in STATEMENTS else len(order))
    labels = [statement_label(row["statement"]) for row in ordered] + [statement_label(key) for key in missing]
    first = max([len("statement"), *map(len, labels)])
    width = max([len("property"), *(len(row["check"]) for row in rows)])
    lines = [f"{'statement':<{first}}  {'property':<{width}} {'examples':>9}  result"]
    for label, row in zip(labels, ordered):
        lines.append(f"{label:<{first}}  {row['check']:<{width}} {row['examples']!s:>9}  {row['result']}")
    for key in missing:
        lines.append(f"{statement_label(key):<{first}}  {'(no passing property)':<{width}} {'-':>9}  MISSING")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proofs_check", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=("ci", "thorough", "dev"), default=None,
                        help="Hypothesis profile (default: $ARC_PROOFS_PROFILE or ci)")
    parser.add_argument("--no-crosshair", action="store_true", help="skip the CrossHair checks")
    parser.add_argument("--crosshair-timeout", type=float, default=4.0, help="seconds per condition (default 4)")
    parser.add_argument("--crosshair-budget", type=float, default=300.0, help="seconds for each crosshair run")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("-k", metavar="EXPR", help="only properties matching this pytest -k expression")
    arguments = parser.parse_args(argv)

    profile = load_profile(arguments.profile)
    started = time.monotonic()
    print(f"executable proofs, Hypothesis profile {profile!r}", flush=True)
    extra = ["-k", arguments.k] if arguments.k else []
    code, collector = run_properties(profile, extra)
    if code not in (0, 1):
        print(f"pytest could not run the properties (exit code {code})", file=sys.stderr)
        return 2

    rows: list[dict[str, Any]] = []
    for name, info in sorted(PROPERTIES.items(), key=lambda item: item[1].statements):
        result = collector.outcomes.get(name, "not run")
        for statement in info.statements:
            rows.append({"statement": statement, "check": name.replace("proofs_check.", ""),
                         "examples": EXAMPLES.get(name, 0), "result": result})

    crosshair_ok = True
    if not arguments.no_crosshair:
        code_real, found_real, raw_real = crosshair_check(CONTRACTED, arguments.crosshair_timeout, arguments.crosshair_budget)
        real_result = "no counterexample" if code_real == 0 and not found_real else "FAILED"
        if real_result == "FAILED":
            crosshair_ok = False
            print(raw_real, file=sys.stderr)
        for target in CONTRACTED:
            for statement in CONTRACT_STATEMENTS[target]:
                rows.append({"statement": statement, "check": f"crosshair {target}", "examples": "symbolic",
                             "result": real_result})
        broken_targets = [f"proofs_check.broken_contracts.{name}" for name in BROKEN]
        _, found_broken, _ = crosshair_check(broken_targets, arguments.crosshair_timeout, arguments.crosshair_budget)
        for name, (function, counterexample, postcondition) in BROKEN.items():
            reported = [line for line in found_broken if f"calling {name}(" in line]
            known_fails = not postcondition(counterexample, function(*counterexample))
            ok = bool(reported) and known_fails
            crosshair_ok = crosshair_ok and ok
            rows.append({"statement": BROKEN_LABEL, "check": f"crosshair broken_contracts.{name}",
                         "examples": "symbolic", "result": broken_result(reported[0] if reported else None, known_fails)})

    covered = {row["statement"] for row in rows if row["result"] in ("passed", "no counterexample")}
    missing = [key for key in STATEMENTS if key not in covered]

    print()
    print(format_table(rows, missing))
    failed = [row for row in rows if row["result"] not in ("passed", "no counterexample") and not str(row["result"]).startswith("caught")]
    elapsed = time.monotonic() - started
    print()
    print(f"{len(rows)} rows, {sum(1 for r in rows if r['result'] == 'passed')} property rows passed, "
          f"{len(failed)} failed, {len(missing)} statements without a passing check; {elapsed:.1f} s")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps({"profile": profile, "rows": rows, "missing": missing}, indent=2))
    return 0 if code == 0 and crosshair_ok and not failed and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
