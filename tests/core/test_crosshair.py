"""CrossHair on the contracted arithmetic (no counterexample) and on the broken variants (each caught).

Runs `crosshair check` under a time bound, as `python -m proofs_check` does. Marked `slow`: the default test
run leaves it out, CI runs it (`pytest -m slow`, see .ci/run).
"""

from __future__ import annotations

import pytest

from proofs_check.__main__ import crosshair_check
from proofs_check.broken_contracts import BROKEN, CONTRACTED

pytest.importorskip("crosshair")

pytestmark = pytest.mark.slow

PER_CONDITION_SECONDS = 4.0
RUN_BUDGET_SECONDS = 600.0


def test_contracts_of_the_core_have_no_counterexample() -> None:
    code, found, output = crosshair_check(CONTRACTED, PER_CONDITION_SECONDS, RUN_BUDGET_SECONDS)
    assert code == 0 and not found, output


def test_every_broken_variant_yields_a_counterexample() -> None:
    targets = [f"proofs_check.broken_contracts.{name}" for name in BROKEN]
    _, found, output = crosshair_check(targets, PER_CONDITION_SECONDS, RUN_BUDGET_SECONDS)
    for name, (function, known, postcondition) in BROKEN.items():
        assert any(f"calling {name}(" in line for line in found), f"CrossHair did not catch {name}:\n{output}"
        assert not postcondition(known, function(*known)), f"the recorded counterexample of {name} no longer fails"
