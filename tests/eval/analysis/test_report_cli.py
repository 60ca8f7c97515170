"""`arc-eval report` end to end on synthetic runs: files, tables, plots, and clear errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from arc_eval.analysis.cli import report_main
from arc_eval.analysis.tables import Table, cell, render_latex, render_markdown, tex_escape

from .synthetic_runs import RunSpec, append_interrupted_task, tear_last_line, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = report_main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    nih = root / "nih"
    write_run(
        nih,
        RunSpec(
            tasks_per_seed=4,
            variants={
                "4k/2k": {"recall_budget_chars": 4000, "recall_max_chars": 2000},
                "16k/8k": {"recall_budget_chars": 16000, "recall_max_chars": 8000},
            },
        ),
    )
    lb = root / "lb"
    write_run(
        lb,
        RunSpec(task_kind="longbench", model="Qwen/Qwen3-32B", context_limit=32768, seeds=(42, 82), tasks_per_seed=8),
    )
    append_interrupted_task(lb)
    tear_last_line(lb / "calls.jsonl")
    out = root / "out"
    code, stdout, stderr = _run([str(nih), str(lb), "--out", str(out), "--format", "md,tex,png,json"])
    assert code == 0, stderr
    (root / "stdout.md").write_text(stdout)
    (root / "stderr.txt").write_text(stderr)
    return nih, lb, out


def test_report_files_are_written(two_runs: tuple[Path, Path, Path]) -> None:
    _, _, out = two_runs
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.tex", "report.json"}
    pngs = sorted(out.glob("*.png"))
    names = {p.name for p in pngs}
    assert {
        "accuracy_nih_qwen-qwen3-8b.png",
        "accuracy_vs_variant_nih_qwen-qwen3-8b.png",
        "hbm_nih_qwen-qwen3-8b.png",
        "prompt_tokens_nih_qwen-qwen3-8b.png",
        "accuracy_longbench_qwen-qwen3-32b.png",
        "hbm_longbench_qwen-qwen3-32b.png",
        "prompt_tokens_longbench_qwen-qwen3-32b.png",
    } <= names
    assert "accuracy_vs_variant_longbench_qwen-qwen3-32b.png" not in names  # one variant only
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5000


def test_markdown_has_the_papers_tables(two_runs: tuple[Path, Path, Path]) -> None:
    nih, lb, out = two_runs
    md = (out / "report.md").read_text()
    assert md == (out.parent / "stdout.md").read_text()  # stdout is the same report
    for title in [
        "Needle-in-a-haystack: accuracy across seeds",
        "Needle-in-a-haystack: ablation over variants",
        "Needle-in-a-haystack: McNemar on correctness",
        "Needle-in-a-haystack: McNemar on completion",
        "Needle-in-a-haystack: roofline cost per success on H200",
        "LongBench-v2: accuracy by length",
        "LongBench-v2: accuracy by domain",
        "LongBench-v2: McNemar on completion",
        "Roofline worked by hand for one trajectory",
    ]:
        assert title in md, title
    assert "NIH accuracy by domain" not in md and "Needle-in-a-haystack: accuracy by domain" not in md
    assert "torn last line dropped" in md and "1 incomplete task(s) skipped" in md
    assert "| recall_budget_chars | recall_max_chars |" in md
    assert "Qwen/Qwen3-8B · variant 4k/2k" in md
    tables = md[md.index("Needle-in-a-haystack: accuracy across seeds"):]  # (the warnings above name variants too)
    assert tables.index("variant 4k/2k") < tables.index("variant 16k/8k")  # manifest order, not alphabetical
    assert md.index("length = short") < md.index("length = medium") < md.index("length = long")


def test_json_numbers_agree_with_the_tables(two_runs: tuple[Path, Path, Path]) -> None:
    _, _, out = two_runs
    data = json.loads((out / "report.json").read_text())
    assert data["schema"] == "arc-eval-report/1"
    overall = [r for r in data["accuracy"] if r["breakdown"] == "overall" and r["task_kind"] == "longbench"]
    assert len(overall) == 6 and all(r["attempts"] == 16 for r in overall)
    arc = next(r for r in overall if r["method"] == "arc")
    assert f"| **ARC** | 32768 | 4096 | {arc['passes']} / 16 |" in (out / "report.md").read_text()
    sw = [r for r in data["roofline"] if r["method"] == "sliding_window"]
    assert all(r["savings_percent"] == 0 for r in sw if r["t_tot"] is not None)
    for row in data["mcnemar"]:
        assert row["a"] == "arc" and row["a_only"] + row["b_only"] + row["both"] + row["neither"] > 0


def test_latex_is_booktabs(two_runs: tuple[Path, Path, Path]) -> None:
    _, _, out = two_runs
    tex = (out / "report.tex").read_text()
    assert tex.count("\\begin{tabular}") == tex.count("\\end{tabular}") >= 10
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "Sliding\\_window" in tex and "$\\chi^2$" in tex
    assert "\\textbf{ARC}" in tex


def test_progress_goes_to_stderr(two_runs: tuple[Path, Path, Path]) -> None:
    _, _, out = two_runs
    err = (out.parent / "stderr.txt").read_text()
    assert "reading" in err and "drawing plots" in err and f"into {out}" in err


def test_scripted_run_defaults_to_the_8b_preset_and_says_so(tmp_path: Path) -> None:
    run = tmp_path / "scripted"
    write_run(
        run,
        RunSpec(model="scripted", backend="scripted", methods=("sliding_window", "arc"), seeds=(1,), tasks_per_seed=2),
    )
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    assert "scripted run: its roofline uses the qwen3-8b preset by default" in md
    assert (run / "report" / "report.md").is_file() and not list((run / "report").glob("*.png"))


def test_other_options(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("full_context", "arc"), seeds=(1, 2), tasks_per_seed=2))
    code, md, err = _run(
        [
            str(run),
            "--format",
            "md",
            "--hardware",
            "mi300x",
            "--baseline",
            "full_context",
            "--normalise",
            "task",
            "--scratch-gb",
            "4",
        ]
    )
    assert code == 0, err
    assert "roofline cost per task on MI300X" in md and "scratch S 4.00 GB" in md
    assert "against Full_context" in md


def test_run_without_the_default_baseline_reports_with_a_note(tmp_path: Path) -> None:
    """Review h27 F1: a run of a --methods subset without sliding_window (the recall-budget ablation runs arc
    alone) is reported when --baseline is not given: exit 0, no savings, a note naming the flag. A --baseline
    given that is not recorded is still refused."""
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("arc", "full_context"), seeds=(1,), tasks_per_seed=2))
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    assert "no Sliding_window run, no savings (--baseline METHOD" in md
    assert "roofline cost per success" in md
    code, _, err = _run([str(run), "--format", "md", "--baseline", "sliding_window"])
    assert code == 2 and "--baseline sliding_window: no task of that method" in err


@pytest.mark.parametrize(
    "setup,argv_extra,message",
    [
        ("rm_tasks", [], "tasks.jsonl is missing"),
        ("rm_manifest", [], "manifest.json is missing"),
        ("unknown_model", [], "cannot tell the model size of 'mystery-model'"),
        ("none", ["--format", "pdf"], "--format 'pdf'"),
        ("none", ["--hardware", "tpu"], "unknown hardware 'tpu'"),
        ("none", ["--baseline", "oracle"], "--baseline oracle: no task of that method"),
        ("none", ["--arc", "ARC"], "--arc ARC: no task of that method in the runs (methods: arc, full_context,"),
        ("none", ["--model-preset", "gpt"], "unknown model preset 'gpt'"),
        ("bad_line", [], "tasks.jsonl:2: not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_message(tmp_path: Path, setup: str, argv_extra: list[str], message: str) -> None:
    run = tmp_path / "r"
    write_run(
        run,
        RunSpec(model="mystery-model" if setup == "unknown_model" else "Qwen/Qwen3-8B", seeds=(1,), tasks_per_seed=2),
    )
    if setup == "rm_tasks":
        (run / "tasks.jsonl").unlink()
    elif setup == "rm_manifest":
        (run / "manifest.json").unlink()
    elif setup == "bad_line":
        lines = (run / "tasks.jsonl").read_text().split("\n")
        lines[1] = lines[1][:20]
        (run / "tasks.jsonl").write_text("\n".join(lines))
    formats = [] if "--format" in argv_extra else ["--format", "md"]  # a flag is given once
    code, out, err = _run([str(run), *formats, *argv_extra])
    assert code == 2  # bad input, the status of every arc-eval command's (arc_eval.errors.USAGE)
    assert message in err
    assert "Traceback" not in err and out == ""
    assert err.startswith("arc-eval report: error: ") or err.startswith("reading")


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    code, _, err = _run([])
    assert code == 2 and "RUN_DIR" in err
    code, _, err = _run([str(tmp_path), "--normalise", "weekly"])
    assert code == 2 and "invalid choice" in err


def test_run_without_finished_tasks_still_reports(tmp_path: Path) -> None:
    run = tmp_path / "empty"
    write_run(run, RunSpec(seeds=(1,), tasks_per_seed=0))
    code, md, err = _run([str(run)])
    assert code == 0, err
    assert "no finished task" in md


def test_table_rendering_primitives() -> None:
    t = Table(title="T_1 & co", columns=["Method", "p"], align="lr")
    s = t.add_section("Qwen3-8B")
    s.rows.append([cell("RAG_memory"), cell("2.0e-05", "$2.0 \\times 10^{-5}$")])
    md = render_markdown(t)
    assert "| **Qwen3-8B** |  |" in md and "| RAG_memory | 2.0e-05 |" in md
    tex = render_latex(t)
    assert "RAG\\_memory & $2.0 \\times 10^{-5}$ \\\\" in tex and "\\caption{T\\_1 \\& co}" in tex
    assert tex_escape("50% ± 1 × χ² {x}") == "50\\% $\\pm$ 1 $\\times$ $\\chi^2$ \\{x\\}"
    assert tex_escape("P(X <= k) · |a|") == "P(X $<$= k) $\\cdot$ $|$a$|$"
    s.rows.append([cell("short row")])
    with pytest.raises(ValueError):
        render_markdown(t)


def test_task_lines_naming_another_model_than_the_manifest(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("sliding_window", "arc"), seeds=(1,), tasks_per_seed=2))
    for name in ("tasks.jsonl", "calls.jsonl"):
        path = run / name
        path.write_text(path.read_text().replace('"Qwen/Qwen3-8B"', '"Qwen/Qwen3-8B-renamed"'))
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    assert "differ from the manifest's 'Qwen/Qwen3-8B'" in md
    assert "| Sliding_window | ? | ? |" in md


def test_items_rerun_under_several_seeds_get_the_distinct_items_note_in_markdown_and_json(tmp_path: Path) -> None:
    """Review h13 NIT-2: the note of McNemar over the distinct items (a task id paired under several seeds) and
    its ``--json`` fields: every comparison of a run whose 8 items ran under 2 seeds says 16 pairs are 8 items,
    with the counts and exact p of its JSON row."""
    run = tmp_path / "lb"
    write_run(run, RunSpec(task_kind="longbench", model="Qwen/Qwen3-32B", context_limit=32768, seeds=(42, 82),
                           tasks_per_seed=8, task_ids=[f"lbv2-{item}" for item in range(8)]))
    code, md, stderr = _run([str(run), "--out", str(tmp_path / "out"), "--format", "md,json"])
    assert code == 0, stderr
    from arc_eval.analysis.report import method_label

    rows = json.loads((tmp_path / "out" / "report.json").read_text())["mcnemar"]
    assert rows and all(row["distinct_items"] == 8 for row in rows)
    for row in rows:
        distinct = row["distinct"]
        assert distinct["a_only"] + distinct["b_only"] + distinct["both"] + distinct["neither"] == 8
        notes = [line for line in md.splitlines() if "distinct items" in line and f" vs {method_label(row['b'])}:" in line]
        assert notes and all("the 16 pairs are 8 distinct items" in note for note in notes)
        if row["seed_copies"]:  # the row itself counts the distinct items (review h27 F4); the note gives the copies'
            said = f"(over every copy: A-only {row['a_only']}, B-only {row['b_only']}, exact p {row['exact_p']['text']},"
            assert any(said in note for note in notes), (said, notes)
            continue
        said = f"A-only {distinct['a_only']}, B-only {distinct['b_only']},"  # one note per outcome's table
        assert any(said in note and f"exact p {distinct['exact_p']['text']}," in note for note in notes), (said, notes)


def test_unfinished_run_is_reported_as_partial_first_on_stderr_and_in_json(tmp_path: Path) -> None:
    """Review h27 F2: a run stopped part way (here 20 of its 36 planned task runs) was reported with exit 0 and
    only "0 incomplete". Now the report opens with a warning that says how many of the planned task runs
    finished, per method, and that the figures are partial and biased; so do stderr, every table's notes and
    report.json. The exit status stays 0 (the report was written). A finished run gets no warning."""
    run = tmp_path / "cut"
    write_run(run, RunSpec(seeds=(1, 2), tasks_per_seed=3))
    lines = (run / "tasks.jsonl").read_text().splitlines(keepends=True)
    (run / "tasks.jsonl").write_text("".join(lines[:20]))
    code, md, err = _run([str(run), "--out", str(tmp_path / "out"), "--format", "md,json"])
    assert code == 0, err
    first = md.splitlines()[2]
    assert first.startswith(f"> **Warning:** PARTIAL RUN `{run}`: 20 of 36 planned task run(s) finished (full_context 4,")
    assert "partial and biased" in first and "arc 3)" in first
    assert f"warning: PARTIAL RUN `{run}`: 20 of 36" in err
    assert "20 of 36 planned task run(s) finished (full_context 4," in md  # the Runs list
    assert md.count("PARTIAL: ") == md.count("### ") - 1 > 0  # a note under every table (not the worked example)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(report["warnings"]) == 1 and "20 of 36" in report["warnings"][0]

    whole = tmp_path / "whole"
    write_run(whole, RunSpec(seeds=(1, 2), tasks_per_seed=3))
    code, md, err = _run([str(whole), "--format", "md"])
    assert code == 0, err
    assert "PARTIAL" not in md + err and "36 of 36 planned task run(s) finished, 0 incomplete" in md


@pytest.mark.parametrize("prefill_cost", [398, 0, None])
def test_roofline_table_says_which_trigger_arc_ran_with(tmp_path: Path, prefill_cost: int | None) -> None:
    """Review h27 F3: ARC's default early fold is driven by a cost constant (398) derived from the same
    Qwen3-8B / H200 roofline that scores the table, while the baselines compact only over budget or when forced;
    the roofline table now says which trigger ARC ran with, its constants, and where the reactive figure is."""
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("sliding_window", "arc"), seeds=(1,), tasks_per_seed=3))
    manifest = json.loads((run / "manifest.json").read_text())
    if prefill_cost is not None:
        manifest["config"].update(prefill_cost=prefill_cost, expected_completion=0, low_water=5)
    (run / "manifest.json").write_text(json.dumps(manifest))
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    table = md[md.index("roofline cost per success"):]
    table = table[:table.index("###")]
    if prefill_cost == 398:
        assert "ARC ran with its default cost-driven early fold (--prefill-cost 398, --expected-completion 0," in table
        assert "derived from Qwen3-8B on 1 H200(s) (arc_ref/config.py), the same roofline that scores this table" in table
        assert "rerun with --prefill-cost 0" in table
        code, md, err = _run([str(run), "--format", "md", "--hardware", "h100-sxm"])
        assert "derived from Qwen3-8B" in md and "the same roofline" not in md
    elif prefill_cost == 0:
        assert "ARC ran with the reactive trigger (--prefill-cost 0)" in table
    else:
        assert "ARC's compaction trigger (prefill_cost) is not recorded" in table


def test_seeds_that_are_copies_count_each_item_once_in_the_mcnemar_columns(tmp_path: Path) -> None:
    """Review h27 F4: LongBench's items do not depend on the seed and the scripted agent is deterministic, so
    three seeds are three copies of each (item, method) outcome, and the McNemar columns counted each item three
    times (exact p about 64 times too small at 0 | 9). Now a comparison whose repeated items have the same
    outcomes under every seed shows the distinct items in its row, and the p-values are recomputed on them."""
    import math

    run = tmp_path / "lb"
    write_run(run, RunSpec(task_kind="longbench", model="Qwen/Qwen3-32B", context_limit=32768, seeds=(42,),
                           tasks_per_seed=12, task_ids=[f"lbv2-{item}" for item in range(12)]))
    for name in ("tasks.jsonl", "calls.jsonl"):  # seeds 82 and 122: copies of seed 42, as a deterministic run
        lines = [json.loads(line) for line in (run / name).read_text().splitlines()]
        copies = [{**line, "seed": seed} for seed in (82, 122) for line in lines]
        (run / name).write_text("".join(json.dumps(line) + "\n" for line in lines + copies))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "seeds": [42, 82, 122]}))
    code, md, err = _run([str(run), "--out", str(tmp_path / "out"), "--format", "md,json"])
    assert code == 0, err

    tasks = [json.loads(line) for line in (run / "tasks.jsonl").read_text().splitlines() if '"seed": 42' in line]
    correct = {(t["method"], t["task_id"]): t["correct"] for t in tasks}
    a_only = sum(correct[("arc", i)] and not correct[("full_context", i)] for m, i in correct if m == "arc")
    b_only = sum(correct[("full_context", i)] and not correct[("arc", i)] for m, i in correct if m == "arc")
    n = a_only + b_only
    exact = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1)) / 2**n)
    row = next(r for r in json.loads((tmp_path / "out" / "report.json").read_text())["mcnemar"]
               if r["b"] == "full_context" and r["outcome"] == "correct")
    assert row["seed_copies"] and row["a_only"] == 3 * a_only  # JSON keeps the pooled pairs, flagged
    assert row["distinct"]["a_only"] == a_only and math.isclose(row["distinct"]["exact_p"]["value"], exact)
    table = md[md.index("McNemar on correctness"):]
    line = next(x for x in table.splitlines() if x.startswith("| **ARC** | Full_context |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:4] == [str(a_only), str(b_only)] and sum(map(int, cells[2:6])) == 12
    assert cells[8] == row["distinct"]["exact_p"]["text"] and cells[11] == "— (seeds are copies)"
    assert "the 36 pairs are 12 distinct items, each with the same outcomes under every seed" in table


def test_runs_of_different_task_counts_are_flagged_in_the_accuracy_table(tmp_path: Path) -> None:
    """Review h27 F8: a run of 6 tasks per seed combined with one of 2 (other seeds) gave Mean Pass, a mean of
    counts over different totals, and an unweighted Mean Acc, with nothing said; now the table notes the seeds'
    attempts and points to the pooled Pass / Attempts. Runs of equal sizes get no such note."""
    big, small = tmp_path / "big", tmp_path / "small"
    write_run(big, RunSpec(methods=("sliding_window", "arc"), seeds=(7,), tasks_per_seed=6))
    write_run(small, RunSpec(methods=("sliding_window", "arc"), seeds=(42,), tasks_per_seed=2))
    code, md, err = _run([str(big), str(small), "--format", "md"])
    assert code == 0, err
    accuracy = md[md.index("accuracy across seeds"):]
    accuracy = accuracy[:accuracy.index("###")]
    assert "the seeds have different numbers of attempts (seed 7: 6, seed 42: 2)" in accuracy
    assert "Pass / Attempts is the pooled figure" in accuracy
    write_run(small, RunSpec(methods=("sliding_window", "arc"), seeds=(42,), tasks_per_seed=6))
    code, md, err = _run([str(big), str(small), "--format", "md"])
    assert code == 0 and "different numbers of attempts" not in md


def test_trajectory_table_says_where_a_baseline_clipped_the_agents_text(tmp_path: Path) -> None:
    """Review h27 F5: a baseline whose kept turns alone were over L clips the agent's own text (calls.jsonl:
    clips); the trajectory table says in which tasks, and says nothing when no call clipped."""
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("llm_summary", "arc"), seeds=(1,), tasks_per_seed=3))
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    assert "Agent text clipped" not in md
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    first = next(index for index, call in enumerate(calls) if call["method"] == "llm_summary")
    calls[first]["clips"] = [{"turns": 1, "newest": True, "before": 13000, "after": 7000}]
    (run / "calls.jsonl").write_text("".join(json.dumps(call) + "\n" for call in calls))
    code, md, err = _run([str(run), "--format", "md"])
    assert code == 0, err
    table = md[md.index("trajectory statistics"):]
    assert "Agent text clipped: LLM_summary in 1 of 3 task(s), 1 call(s)." in table[:table.index("###")]


def test_trajectory_table_prompt_columns_leave_out_prompts_refused_as_overflow(tmp_path: Path) -> None:
    """Review h60 F3: a prompt refused before it was sent (an overflow record holds the harness's count of it, over
    L) was the table's Max prompt and in its mean; the prompt columns are over the calls sent, Overflows counts it."""
    run = tmp_path / "r"
    write_run(run, RunSpec(methods=("full_context",), seeds=(1,), tasks_per_seed=2))

    def max_prompt() -> str:
        code, md, err = _run([str(run), "--format", "md"])
        assert code == 0, err
        table = md[md.index("trajectory statistics"):]
        header = next(line for line in table.splitlines() if line.startswith("| Method"))
        row = next(line for line in table.splitlines() if line.startswith("| Full_context"))
        return row.split("|")[header.split("|").index(" Max prompt ")].strip()

    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    before = max_prompt()
    calls[0].update(overflow=True, prompt_tokens=9_999_999)
    (run / "calls.jsonl").write_text("".join(json.dumps(call) + "\n" for call in calls))
    assert max_prompt() == before and before.isdigit() and int(before) < 9_999_999
