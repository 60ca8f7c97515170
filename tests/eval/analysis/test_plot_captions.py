"""Issue 31, item 5: each report figure, seen alone, says its model and hardware, the methods it leaves out and why,
and marks the calls that were never served (the figures' captions, read from the figure objects)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (the eval extra)")

from arc_eval.analysis.accuracy import accuracy_rows  # noqa: E402
from arc_eval.analysis.load import load_runs  # noqa: E402
from arc_eval.analysis.plots import (  # noqa: E402
    accuracy_figure, caption_lines, hbm_figure, hbm_notes, prompt_tokens_figure, run_line, write_plots,
)
from arc_eval.analysis.presets import hardware_preset, model_preset  # noqa: E402
from arc_eval.analysis.report import ReportOptions  # noqa: E402
from arc_eval.analysis.roofline import method_costs  # noqa: E402

from .synthetic_runs import DEFAULT_BEHAVIOUR, RunSpec, write_run  # noqa: E402


def caption_text(figure: object) -> str:
    """The figure's texts, their wrapped lines joined again."""
    return "\n".join(caption_lines(figure)).replace("\n  ", " ")  # type: ignore[arg-type]


def _drop_method(run: Path, method: str) -> None:
    """Leave ``method`` in the manifest but remove its records: a method of the run with no finished task."""
    for name in ("tasks.jsonl", "calls.jsonl"):
        path = run / name
        lines = [line for line in path.read_text().splitlines() if json.loads(line)["method"] != method]
        path.write_text("".join(line + "\n" for line in lines))


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scripted run like the README's first command: sliding_window never correct, full_context overflowing,
    rag_memory in the manifest without a finished task."""
    run = tmp_path_factory.mktemp("runs") / "scripted"
    behaviour = {**DEFAULT_BEHAVIOUR, "sliding_window": (1.0, 0.0, 900), "full_context": (0.6, 0.9, 2400)}
    write_run(run, RunSpec(model="scripted-fair", backend="scripted", tasks_per_seed=5, behaviour=behaviour,
                           calls_per_task=(2, 5)))  # served prompts stay under L_ctx - G_max, as the harness keeps them
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"].update(tokenizer="o200k_base", chat_format="chatml")
    (run / "manifest.json").write_text(json.dumps(manifest))
    _drop_method(run, "rag_memory")
    return run


def _options() -> ReportOptions:
    return ReportOptions(hardware=hardware_preset("h200", None), models={"scripted-fair": model_preset("qwen3-8b")})


def test_the_accuracy_figure_says_its_model_and_what_it_leaves_out(scripted_run: Path, tmp_path: Path) -> None:
    dataset = load_runs([scripted_run])
    rows = accuracy_rows(dataset.tasks, "overall")
    line = run_line(dataset, "nih", "scripted-fair")
    assert "the deterministic scripted agent (no model, no GPU" in line and "o200k_base / chatml" in line
    text = caption_text(accuracy_figure(rows, [""], "t", [line, "left out: RAG_memory (x)"]))
    assert "scripted agent" in text and "left out: RAG_memory" in text
    assert "0 % (no visible bar): Sliding_window" in text
    written = write_plots(dataset, method_costs(dataset.tasks, dataset.calls, _options().models, _options().hardware),
                          tmp_path, _options())
    assert {path.name for path in written} >= {"accuracy_nih_scripted-fair.png", "hbm_nih_scripted-fair.png",
                                               "prompt_tokens_nih_scripted-fair.png"}


def test_the_hbm_figure_names_its_assumed_model_and_hardware_and_the_methods_left_out(scripted_run: Path) -> None:
    dataset = load_runs([scripted_run])
    options = _options()
    costs = method_costs(dataset.tasks, dataset.calls, options.models, options.hardware)
    notes = hbm_notes(costs, options, "scripted-fair", True,
                      ["full_context", "sliding_window", "llm_summary", "structured_state", "rag_memory", "arc"])
    text = caption_text(hbm_figure(costs, [""], "t", notes))
    assert "roofline, not a measurement" in text and "costed as Qwen3-8B" in text
    assert "H200 (141 GB, 4.8 TB/s, 989 TFLOP/s)" in text and "the preset is the report's default" in text
    assert "RAG_memory (no finished task)" in text
    assert "Sliding_window (0 of 15 tasks correct: no cost per success)" in text
    skipped = sum(1 for calls in dataset.calls.values() for call in calls if call.overflow)
    assert skipped > 0 and f"{skipped:,} call(s) of Full_context" in text


def test_the_prompt_token_figure_marks_the_calls_never_served(scripted_run: Path) -> None:
    dataset = load_runs([scripted_run])
    figure = prompt_tokens_figure(dataset, "nih", "scripted-fair", "t")
    assert figure is not None
    text = caption_text(figure)
    unserved = sum(1 for calls in dataset.calls.values() for call in calls if call.overflow)
    assert "never served, its prompt over L_ctx - G_max = 12,288" in text
    assert f"{unserved} of Full_context" in text
    assert "left out: RAG_memory (no recorded call)" in text
    # the served lines stay under the limit; every point above it is a cross
    right = figure.axes[1]
    for line in right.get_lines():
        if line.get_label() != "L_ctx - G_max":
            assert all(y <= 12288 for y in line.get_ydata()), line.get_label()
    crosses = [collection for collection in right.collections if len(collection.get_offsets())]
    assert crosses and all(y > 12288 for collection in crosses for _, y in collection.get_offsets())
