"""`arc-eval report` checks each method's sent calls against the bounds they had to keep (review h60 F5): p_k <= L,
the method's own estimate equal to the server's p_k, (ARC) its estimate <= K; it counts them per method and names
each call that breaks one, in the report itself (a broken bound also as a warning at the top). Runs recorded before
the fields (no estimated_prompt_tokens, view_budget, prompt_limit) still report, saying "not recorded"."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from arc_eval.analysis.cli import report_main

from .synthetic_runs import RunSpec, write_run

L = 16384 - 4096


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = report_main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _report(run: Path) -> tuple[str, dict[str, Any], str]:
    code, _, err = _run([str(run), "--format", "md,json", "--out", str(run / "report")])
    assert code == 0, err
    return ((run / "report" / "report.md").read_text(encoding="utf-8"),
            json.loads((run / "report" / "report.json").read_text(encoding="utf-8")), err)


def _rows(md: str) -> dict[str, list[str]]:
    table = md[md.index("prompt bounds per sent call"):]
    table = table[:table.index("\n###")] if "\n###" in table else table
    rows = {}
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| Method") and not line.startswith("| **Qwen"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("*")] = cells[1:]
    return rows


def _write(run: Path) -> list[dict[str, Any]]:
    write_run(run, RunSpec(methods=("sliding_window", "arc"), seeds=(1,), tasks_per_seed=2, calls_per_task=(3, 3),
                           behaviour={"sliding_window": (0.0, 1.0, 100), "arc": (0.0, 1.0, 100)}))
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


def _save(run: Path, calls: list[dict[str, Any]]) -> None:
    (run / "calls.jsonl").write_text("".join(json.dumps(call) + "\n" for call in calls))


def test_a_run_with_the_fields_is_counted_per_method_and_each_breach_is_named(tmp_path: Path) -> None:
    run = tmp_path / "r"
    calls = _write(run)
    for call in calls:
        call.update(estimated_prompt_tokens=call["prompt_tokens"], prompt_limit=L)
        if call["method"] == "arc":
            call["view_budget"] = L - 1
    _save(run, calls)
    md, report, err = _report(run)
    rows = _rows(md)
    assert rows["Sliding_window"] == ["6", "6 / 6", "6 / 6", "—"]
    assert rows["ARC"] == ["6", "6 / 6", "6 / 6", "6 / 6"]
    assert "BOUND BROKEN" not in md + err and "differs from the server's p_k" not in md
    # one counter mismatch (a baseline), one p_k over L (a baseline), one ARC view over its K
    sw = [c for c in calls if c["method"] == "sliding_window"]
    arc = [c for c in calls if c["method"] == "arc"]
    sw[1]["estimated_prompt_tokens"] = sw[1]["prompt_tokens"] - 7
    sw[2]["prompt_tokens"] = L + 3
    sw[2]["estimated_prompt_tokens"] = L + 3
    arc[4]["estimated_prompt_tokens"] = arc[4]["prompt_tokens"] = L
    _save(run, calls)
    md, report, err = _report(run)
    rows = _rows(md)
    assert rows["Sliding_window"] == ["6", "5 / 6", "5 / 6", "—"]
    assert rows["ARC"] == ["6", "6 / 6", "6 / 6", "5 / 6"]
    where = f"seed 1 task {sw[1]['task_id']} call {sw[1]['call_index']} (agent)"
    assert (f"Sliding_window: its own estimate differs from the server's p_k on 1 of 6 sent call(s): {where}:"
            f" estimate {sw[1]['prompt_tokens'] - 7:,}, p_k {sw[1]['prompt_tokens']:,}") in md
    over = f"seed 1 task {sw[2]['task_id']} call {sw[2]['call_index']} (agent): p_k {L + 3:,}, L {L:,}"
    assert f"Sliding_window (Needle-in-a-haystack, Qwen/Qwen3-8B): p_k <= L fails on 1 of 6 sent call(s): {over}" in md
    k = f"seed 1 task {arc[4]['task_id']} call {arc[4]['call_index']} (agent): estimate {L:,}, K {L - 1:,}"
    assert f"ARC (Needle-in-a-haystack, Qwen/Qwen3-8B): estimate <= K fails on 1 of 6 sent call(s): {k}" in md
    top = md[:md.index("## Runs")]
    assert "**Warning:** BOUND BROKEN: Sliding_window" in top and "BOUND BROKEN: ARC" in top
    assert "warning: BOUND BROKEN: Sliding_window" in err
    bounds = {row["method"]: row for row in report["prompt_bounds"]}
    assert bounds["sliding_window"]["estimate_equals_prompt"]["held"] == 5
    assert bounds["sliding_window"]["estimate_equals_prompt"]["broken"] == [
        {"seed": 1, "task_id": sw[1]["task_id"], "call_index": sw[1]["call_index"], "purpose": "agent",
         "value": sw[1]["prompt_tokens"] - 7, "bound": sw[1]["prompt_tokens"]}]
    assert bounds["arc"]["estimate_within_view_budget"]["held"] == 5 and bounds["arc"]["has_view_budget"]
    assert any("BOUND BROKEN: ARC" in w for w in report["warnings"])


def test_overflow_and_error_calls_are_not_sent_calls(tmp_path: Path) -> None:
    run = tmp_path / "r"
    calls = _write(run)
    for call in calls:
        call.update(estimated_prompt_tokens=call["prompt_tokens"], prompt_limit=L)
    calls[0].update(overflow=True, finish_reason="overflow", prompt_tokens=L + 500, completion_tokens=0)
    calls[1].update(finish_reason="error", prompt_tokens=0, completion_tokens=0)
    _save(run, calls)
    md, _, err = _report(run)
    assert _rows(md)["Sliding_window"] == ["4", "4 / 4", "4 / 4", "—"]
    assert "BOUND BROKEN" not in md + err


def test_a_run_recorded_before_the_fields_says_not_recorded(tmp_path: Path) -> None:
    run = tmp_path / "r"
    calls = _write(run)
    assert not any({"estimated_prompt_tokens", "view_budget", "prompt_limit"} & set(call) for call in calls)
    md, report, _ = _report(run)
    rows = _rows(md)
    # p_k <= L still checked, L from the manifest; the estimate and K are not in the records
    assert rows["Sliding_window"] == ["6", "6 / 6", "not recorded", "—"]
    assert rows["ARC"] == ["6", "6 / 6", "not recorded", "not recorded"]
    bounds = {row["method"]: row for row in report["prompt_bounds"]}
    assert bounds["arc"]["estimate_equals_prompt"] == {"held": 0, "broken": [], "not_recorded": 6}
    # an old run's p_k over the manifest's L is named too
    calls[0]["prompt_tokens"] = L + 1
    _save(run, calls)
    md, _, _ = _report(run)
    assert _rows(md)["Sliding_window"][1] == "5 / 6" and "p_k <= L fails on 1 of 6 sent call(s)" in md


def test_records_with_and_without_the_fields_together_say_how_many_were_not_recorded(tmp_path: Path) -> None:
    run = tmp_path / "r"
    calls = _write(run)
    for call in calls[:2]:
        call.update(estimated_prompt_tokens=call["prompt_tokens"], prompt_limit=L)
    _save(run, calls)
    md, _, _ = _report(run)
    assert _rows(md)["Sliding_window"] == ["6", "6 / 6", "2 / 2 (4 not recorded)", "—"]
