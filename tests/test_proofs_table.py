"""`python -m proofs_check`'s table: each statement named, not only keyed; a broken variant reads "caught"."""

from __future__ import annotations

from proofs_check.__main__ import BROKEN_LABEL, broken_result, format_table


def test_rows_name_their_statement_and_broken_variants_read_caught() -> None:
    reported = "false when calling page_of_off_by_one(1, 1) (which returns 2)"
    rows = [
        {"statement": "T1", "check": "test_view.test_lemma2", "examples": 60, "result": "passed"},
        {"statement": "A4", "check": "test_view.test_lemma2", "examples": 60, "result": "passed"},
        {"statement": BROKEN_LABEL, "check": "crosshair broken_contracts.page_of_off_by_one", "examples": "symbolic",
         "result": broken_result(reported, True)},
    ]
    table = format_table(rows, ["P2"]).splitlines()
    assert table[0].split() == ["statement", "property", "examples", "result"]
    assert table[1].startswith("A4 Budgeted active view ") and table[2].startswith("T1 Theorem claim 1: prompt safety ")
    assert table[3].startswith(BROKEN_LABEL) and table[3].endswith(
        "caught: CrossHair found page_of_off_by_one(1, 1) (which returns 2), which breaks the postcondition")
    assert "false" not in table[3]
    assert table[4].startswith("P2 Proposition: exact recovery requires linearly growing external memory ")
    assert table[4].endswith("MISSING")


def test_a_broken_variant_without_a_counterexample_reads_not_caught() -> None:
    assert broken_result(None, True).startswith("NOT CAUGHT: CrossHair found no counterexample")
    assert broken_result("false when calling f(1)", False).startswith("NOT CAUGHT: the recorded counterexample")
