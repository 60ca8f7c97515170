"""The registry (arc_eval.registry): a component writes its name, options and behaviour once.

A toy task and a toy method registered from this test module run end to end through ``arc-eval``: their
flags, validation, records, manifest ``config`` and report labels come from their entries alone. No
generic module names a registered task or method.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterator

import attrs
import pytest
from attrs import frozen

from arc_ref.errors import ConfigError
from arc_eval.cli import main
from arc_eval.methods.base import MethodSettings
from arc_eval.methods.full_context import FullContextMethod
from arc_eval.registry import (
    BACKENDS,
    ComponentOptions,
    METHODS,
    TASKS,
    MethodEntry,
    TaskEntry,
    int_option,
    option_owners,
    register_method,
    register_task,
)
from arc_eval.tasks.nih import make_nih_tasks, needle_token
from arc_eval.types import Task

EVAL = Path(__file__).resolve().parents[2] / "eval"
TOY_TASK = "toy_needle"
TOY_METHOD = "toy_keep_all"


@frozen
class ToyTaskOptions(ComponentOptions):
    toy_files: int = int_option(2, minimum=1, maximum=100, help="toy: distractor files per task")


@frozen
class ToySource:
    options: ToyTaskOptions

    def tasks(self, seed: int, count: int | None) -> list[Task]:
        drawn = make_nih_tasks(seed, count or 0, distractor_files=self.options.toy_files)
        return [attrs.evolve(task, kind=TOY_TASK, task_id=f"toy-{task.task_id}") for task in drawn]


def _toy_score(task: Task, submission: str, reply: str) -> tuple[bool, str | None]:
    token = needle_token(submission)
    return token is not None and task.answer in token, token


@frozen
class ToyMethodOptions(ComponentOptions):
    toy_level: int = int_option(1, minimum=1, maximum=100, help="toy: a knob only the toy method has")


class ToyKeepAll(FullContextMethod):
    name = TOY_METHOD

    def __init__(self, settings: MethodSettings) -> None:
        super().__init__(settings)
        self.options = settings.options_of(self.name, ToyMethodOptions)


@pytest.fixture
def toys() -> Iterator[None]:
    register_task(TaskEntry(name=TOY_TASK, label="Toy needle", help="a toy task", options=ToyTaskOptions,
                            source=ToySource, scorer=_toy_score, plan_steps=lambda task: len(task.files) + 1,
                            count_flag="--toy-tasks", count_default=3, count_help="toy tasks per seed", order=9))
    register_method(MethodEntry(name=ToyKeepAll.name, label="Toy_keep_all", order=9, factory=ToyKeepAll,
                                options=ToyMethodOptions))
    try:
        yield
    finally:
        TASKS.unregister(TOY_TASK)
        METHODS.unregister(TOY_METHOD)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_toy_task_and_method_registered_from_a_test_module_run_end_to_end(
        toys: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = [TOY_TASK, "--toy-tasks", "2", "--toy-files", "3", "--seeds", "5", "--methods",
            f"{TOY_METHOD},sliding_window", "--toy-level", "4", "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    tasks = lines(out / "tasks.jsonl")
    assert {(task["task_kind"], task["method"]) for task in tasks} == {(TOY_TASK, TOY_METHOD),
                                                                        (TOY_TASK, "sliding_window")}
    assert len(tasks) == 4 and all(task["task_id"].startswith("toy-") for task in tasks)
    toy = [task for task in tasks if task["method"] == TOY_METHOD]
    assert all(task["correct"] for task in toy)  # scored by its scorer
    assert all(1 <= task["meta"]["distractor_files"] <= 4 for task in tasks)  # its option: 3, varied over D/2..3D/2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tasks_per_seed"] == 2 and manifest["config"]["toy_files"] == 3
    assert manifest["config"]["toy_level"] == 4 and "rag_top_k" not in manifest["config"]  # only the run's methods
    assert TOY_METHOD in capsys.readouterr().out  # the summary table, its row in the registered order
    from arc_eval.analysis.report import kind_label, method_label

    assert (kind_label(TOY_TASK), method_label(TOY_METHOD)) == ("Toy needle", "Toy_keep_all")
    assert main([TOY_TASK, "--toy-level", "0", "--out", str(tmp_path / "bad")]) == 2  # bounds from the option
    assert "argument --toy-level: expected an integer from 1 to 100" in capsys.readouterr().err
    from arc_eval.run_spec import RunSpec

    with pytest.raises(ConfigError, match="--toy-level must be at least 1"):  # the same bound, built in code
        RunSpec.build(TOY_TASK, (TOY_METHOD,), (1,), tmp_path, toy_level=0)


def test_the_toy_is_gone_when_unregistered(toys: None) -> None:
    assert TOY_METHOD in METHODS.names() and TOY_TASK in TASKS.names()
    METHODS.unregister(TOY_METHOD)
    with pytest.raises(ConfigError, match=f"unknown method '{TOY_METHOD}'"):
        METHODS.get(TOY_METHOD)


def test_a_name_is_registered_once_and_every_option_has_one_owner() -> None:
    entry = METHODS.get("sliding_window")
    with pytest.raises(ConfigError, match="registered twice"):
        register_method(attrs.evolve(entry, label="another"))
    owners = option_owners()
    assert owners["rag_top_k"] == "method rag_memory" and owners["recall_budget_chars"] == "method arc"
    assert owners["base_urls"] == "backend openai" and owners["agent"] == "backend scripted"


def test_options_hooks_have_working_defaults_and_an_options_class_without_them_is_refused() -> None:
    """The hooks a run calls (``check``, ``resolved``, ``describe``, ``plan_note``) are declared on
    ``ComponentOptions`` with defaults, so no caller looks for them with getattr; a class that does not derive from it
    cannot register."""

    @attrs.frozen
    class Bare:
        level: int = int_option(1, minimum=1, maximum=100, help="a knob")

    entry = METHODS.get("sliding_window")
    with pytest.raises(ConfigError, match="must derive from arc_eval.registry.ComponentOptions"):
        register_method(attrs.evolve(entry, name="bare_options", options=Bare))
    defaults = ToyMethodOptions()
    defaults.check()
    assert defaults.resolved() is defaults
    assert defaults.describe("m") is None and defaults.plan_note(10) is None


def _owner_modules() -> set[Path]:
    """The files where a task, method or backend registers itself (each may name itself)."""
    import sys

    modules = set()
    for entry in (*TASKS.entries(), *METHODS.entries(), *BACKENDS.entries()):
        factory = getattr(entry, "factory", None) or getattr(entry, "source", None)
        module = sys.modules[getattr(factory, "__module__", "")]
        modules.add(Path(str(module.__file__)).resolve())
    return modules


# Modules that choose a component as a default of their own figures, never to branch on it: the benchmarks measure
# NIH and sliding_window by definition (README's performance figures); the roofline compares with sliding_window,
# the paper's reference baseline (a report flag, --baseline, chooses another).
CHOOSERS = {"bench.py", "analysis/roofline.py"}


def test_no_generic_module_names_a_task_or_a_method() -> None:
    """Only a component's own module spells its name; the rest looks it up (docstrings and comments aside)."""
    names = {*TASKS.names(), *METHODS.names()}
    owners = _owner_modules() | {(EVAL / name).resolve() for name in CHOOSERS}
    found = []
    for path in sorted(EVAL.rglob("*.py")):
        if path.resolve() in owners:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path.relative_to(EVAL)}:{node.lineno}: {node.value!r}")
    assert not found, "a generic module names a component:\n" + "\n".join(found)
