"""Needle-in-a-haystack generation and scoring (paper: "Benchmarks", guardrail, fixture size)."""

from __future__ import annotations

import random
import re

import pytest

from arc_ref.chat import CHATML
from arc_ref.tokenizers import get_tokenizer
from arc_eval.sandbox import VirtualSandbox
from arc_eval.tasks.nih import (
    NEEDLE_ALPHABET,
    NEEDLE_BANNER_LABEL,
    NEEDLE_SHAPE_RE,
    distractor_names,
    extract_needle,
    make_needle,
    make_nih_tasks,
    needle_token,
    score_nih,
)


def test_needle_has_24_symbols_of_a_30_symbol_alphabet() -> None:
    assert len(NEEDLE_ALPHABET) == 30 == len(set(NEEDLE_ALPHABET))
    rng = random.Random(1)
    needles = [make_needle(rng) for _ in range(200)]
    assert all(len(n) == 24 and set(n) <= set(NEEDLE_ALPHABET) for n in needles)
    assert len(set(needles)) == 200
    # every symbol shows up: the draw covers the whole alphabet
    assert set("".join(needles)) == set(NEEDLE_ALPHABET)


def test_task_ids_and_needles_are_stable_and_paired() -> None:
    short = make_nih_tasks(42, 5)
    long = make_nih_tasks(42, 20, noise_lines_per_side=5)
    assert [t.task_id for t in short] == [f"nih-s42-{i:04d}" for i in range(5)]
    # same ids and needles whatever the run size or fixture size: outcomes pair across runs
    assert [(t.task_id, t.answer) for t in short] == [(t.task_id, t.answer) for t in long[:5]]
    again = make_nih_tasks(42, 5)
    assert [t.files for t in again] == [t.files for t in short]
    other_seed = make_nih_tasks(82, 5)
    assert {t.answer for t in other_seed}.isdisjoint({t.answer for t in short})
    assert other_seed[0].task_id == "nih-s82-0000"


def test_secrets_file_layout_banner_and_noise() -> None:
    task = make_nih_tasks(122, 1, layout="paper")[0]
    secrets = task.files["secrets.txt"]
    lines = secrets.splitlines()
    needle_lines = [i for i, line in enumerate(lines) if line.startswith("NEEDLE=")]
    assert len(needle_lines) == 1
    index = needle_lines[0]
    assert lines[index] == f"NEEDLE={task.answer}"
    assert NEEDLE_BANNER_LABEL in lines[index - 1] and NEEDLE_BANNER_LABEL in lines[index + 1]
    noise = [line for line in lines if line.startswith("NOISE")]
    assert len(noise) == 50
    assert all("not the needle" in line for line in noise)
    assert sum(line.startswith("NOISE above") for line in lines[:index]) == 25
    assert sum(line.startswith("NOISE below") for line in lines[index:]) == 25


@pytest.mark.parametrize("noise", [0, 5, 10, 25, 30])
def test_nothing_but_the_needle_looks_like_a_needle(noise: int) -> None:
    for task in make_nih_tasks(42, 20, noise_lines_per_side=noise):
        everything = "\n".join([task.goal, *task.files.values()])
        assert NEEDLE_SHAPE_RE.findall(everything) == [task.answer]
        assert re.findall(r"NEEDLE=(\S+)", everything) == ["<value>", "<value>", task.answer]


def test_fixture_size_matches_the_paper() -> None:
    sizes = {
        noise: len(make_nih_tasks(42, 1, noise_lines_per_side=noise, layout="paper")[0].files["secrets.txt"])
        for noise in (5, 10, 25, 30)
    }
    assert 4000 <= sizes[25] <= 5000  # paper: about 4.5k characters at the default
    assert sizes[5] < sizes[10] < sizes[25] < sizes[30] < 8000  # below the elision limit
    assert sizes[5] > 500  # above the keep-verbatim threshold even at the smallest sweep point


def test_goal_orders_the_reads_and_the_submission() -> None:
    task = make_nih_tasks(42, 1, distractor_files=3, layout="paper")[0]
    assert sorted(task.files) == ["notes_01.txt", "notes_02.txt", "notes_03.txt", "secrets.txt"]
    positions = [task.goal.index(f"cat {name}") for name in ["secrets.txt", *distractor_names(3)]]
    assert positions == sorted(positions)
    assert task.goal.index("submit NEEDLE=<value>") > positions[-1]
    assert task.meta["noise_lines_per_side"] == 25 and task.kind == "nih"


def test_full_transcript_overflows_between_calls_10_and_20() -> None:
    """The documented arithmetic: at 16k/4096 a never-compacted transcript overflows mid-task."""
    tokenizer = get_tokenizer("o200k_base")
    usable = 16384 - 4096
    system = "You are an agent in a sandbox. Reply with Thought: and Action: lines. " * 25
    for noise in (5, 25, 30):
        task = make_nih_tasks(42, 1, noise_lines_per_side=noise, layout="paper")[0]
        sandbox = VirtualSandbox(task.files)
        messages = [("system", system), ("user", task.goal)]
        actions = ["cat secrets.txt", *(f"cat {n}" for n in distractor_names(16)), "submit x"]
        first_overflow = None
        for call, action in enumerate(actions, start=1):
            if tokenizer.count(CHATML.render(messages)) > usable:
                first_overflow = call
                break
            messages.append(("assistant", f"Thought: step {call} of the plan.\nAction: {action}"))
            messages.append(("user", sandbox.run(action).text))
        assert first_overflow is not None and 10 <= first_overflow <= 18, (noise, first_overflow)


def test_score_only_the_needle_token() -> None:
    task = make_nih_tasks(42, 1)[0]
    assert score_nih(task, f"NEEDLE={task.answer}")
    assert score_nih(task, f"I am sure: `NEEDLE={task.answer}`.")
    assert score_nih(task, f"NEEDLE={task.answer} and again NEEDLE={task.answer}")
    assert not score_nih(task, task.answer)  # the bare value is not the token
    assert not score_nih(task, f"NEEDLE={task.answer[:-1]}")
    assert not score_nih(task, f"NEEDLE={task.answer}X")
    assert not score_nih(task, f"NEEDLE={task.answer.lower()}")
    assert not score_nih(task, f"NEEDLE={task.answer} or NEEDLE=ABC")  # a hedge is no answer
    assert not score_nih(task, None) and not score_nih(task, "")
    assert extract_needle("NEEDLE=ABC2") == "ABC2"
    assert needle_token(f"x NEEDLE={task.answer}.") == f"NEEDLE={task.answer}"
    assert needle_token("nothing") is None


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="n_tasks"):
        make_nih_tasks(42, -1)
    with pytest.raises(ValueError, match="noise_lines_per_side"):
        make_nih_tasks(42, 1, noise_lines_per_side=-2)
    assert make_nih_tasks(42, 0) == []
    with pytest.raises(ValueError, match="unknown NIH layout 'odd'; use one of varied, paper"):
        make_nih_tasks(42, 1, layout="odd")


def test_varied_layout_draws_each_task_its_own_shape_and_records_it() -> None:
    tasks = make_nih_tasks(42, 60, noise_lines_per_side=25, distractor_files=16)
    paper = make_nih_tasks(42, 60, layout="paper")
    assert [(t.task_id, t.answer) for t in tasks] == [(t.task_id, t.answer) for t in paper]  # same needles
    assert [t.files for t in make_nih_tasks(42, 5)] == [t.files for t in tasks[:5]]  # a prefix of a longer run
    for task in tasks:
        meta = task.meta
        files = meta["distractor_files"]
        assert 8 <= files <= 24 and 0 <= meta["needle_step"] - 1 <= files // 2
        assert meta["delay_steps"] == files - (meta["needle_step"] - 1) >= files / 2
        names = distractor_names(files)
        assert sorted(task.files) == sorted([*names, "secrets.txt"])
        assert meta["distractor_chars"] == [len(task.files[name]) for name in names]
        assert all(1900 <= chars <= 6600 for chars in meta["distractor_chars"])
        plan = [line.split(". ", 1)[1].split("  --")[0] for line in task.goal.splitlines()[1:-2]]
        assert plan == list(task.required_actions) and plan[meta["needle_step"] - 1] == meta["needle_action"]
        lines = task.files["secrets.txt"].split("\n")
        assert lines[meta["needle_line"] - 1] == f"NEEDLE={task.answer}"
        assert meta["noise_above"] + meta["noise_below"] == 50
        assert sum(line.startswith("NOISE above") for line in lines) == meta["noise_above"]
    shapes = {(t.meta["needle_step"], t.meta["distractor_files"], t.meta["noise_above"]) for t in tasks}
    assert len(shapes) > 40  # the tasks differ: 60 tasks are not one task repeated
    assert len({t.meta["distractor_files"] for t in tasks}) > 8 and len({t.meta["needle_step"] for t in tasks}) > 6
