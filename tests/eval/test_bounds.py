"""Every number of `arc-eval` bounded above and parsed strictly, every list without a value twice, every flag
given once, every argument text (issue 31, item 2): each case of the issue, refused at once with exit 2 and one
line, never a traceback, a grown memory or a silent reading."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from arc_ref.options import OptionInfo, option_fields, option_info
from arc_eval.cli import build_parser, main
from arc_eval.registry import BACKENDS, METHODS, TASKS
from arc_eval.run_spec import MAX_CONCURRENCY, RunSpec

RUN = "import sys; from arc_eval.cli import main; sys.exit(main(sys.argv[1:]))"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    """Run ``arc-eval`` in process; it must end with exit 2 and one line on stderr, nothing written."""
    out = tmp_path / "run"
    started = time.monotonic()
    code = main([*argv, "--out", str(out), "--no-progress"] if argv[0] in ("nih", "longbench") else argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
    assert time.monotonic() - started < 30  # refused at once, not after growing a list
    return err


@pytest.mark.parametrize(("argv", "message"), [
    # unbounded sizes: each grew the process's memory without end before (the RSS 254 -> 999 MiB in 12 s)
    (["nih", "--tasks", "1", "--concurrency", "1000000000000"], "--concurrency: expected an integer from 1 to 4096"),
    (["nih", "--tasks", str(10**23)], "--tasks: expected an integer from 1 to 100000"),
    (["nih", "--tasks", "1", "--noise-lines", str(10**12)], "--noise-lines: expected an integer from 0 to 100000"),
    (["nih", "--tasks", "1", "--distractor-files", str(10**9)],
     "--distractor-files: expected an integer from 0 to 10000"),
    (["nih", "--tasks", "100000"], "--tasks 100000 x up to 158,500 characters of files per task"),
    (["nih", "--tasks", "1", "--max-steps", str(10**12)], "--max-steps: expected an integer from 1 to 10000"),
    (["nih", "--tasks", "1", "--context-limit", str(10**30)], "expected an integer from 1 to 2147483647"),
    (["nih", "--tasks", "1", "--rag-top-k", str(10**9)], "--rag-top-k: expected an integer from 1 to 1000"),
    (["nih", "--tasks", "1", "--temperature", "1e309"], "--temperature: expected a number from 0 to 2"),
    (["nih", "--tasks", "1", "--seeds", str(2**63)], "--seeds: expected an integer from -9223372036854775808"),
    (["nih", "--tasks", "1", "--force-at-calls", "10001"], "--force-at-calls: expected an integer from 1 to 10000"),
    (["nih", "--tasks", "1", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
      "--request-timeout", "1e300"], "--request-timeout: expected a number above 0, at most 86400"),
    (["nih", "--tasks", "1", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
      "--max-retries", "1000"], "--max-retries: expected an integer from 0 to 100"),
    (["bench", "--only", "concurrency", "--concurrency", "1000000000000"], "expected an integer from 1 to 4096"),
    (["report", "no-run", "--scratch-gb", "500"], "--scratch-gb must be from 0 to below the 141 GB of HBM of H200"),
    (["report", "no-run", "--scratch-gb", "1e999"], "--scratch-gb: expected a number from 0 to 1e+06"),
    # integers in ASCII digits only: read as 1, 10 and 1 before
    (["nih", "--tasks", "１"], "--tasks: expected an integer from 1 to 100000 (ASCII digits only), got '１'"),
    (["nih", "--tasks", "1_0"], "(ASCII digits only), got '1_0'"),
    (["nih", "--tasks", " 1 "], "(ASCII digits only), got ' 1 '"),
    (["nih", "--tasks", "+1"], "(ASCII digits only), got '+1'"),
    (["nih", "--tasks", "1", "--temperature", "３"], "--temperature: expected a number from 0 to 2 (ASCII digits"),
    (["nih", "--tasks", "1", "--temperature", "nan"], "got 'nan'"),
    (["nih", "--tasks", "1", "--temperature", "0_5"], "got '0_5'"),
    (["bench", "--tasks", " 5"], "--tasks: expected an integer from 1 to 100000 (ASCII digits only), got ' 5'"),
    # a value twice in a list: refused like --seeds 1 1 (accepted before)
    (["nih", "--tasks", "1", "--force-at-calls", "5", "5"], "--force-at-calls lists 5 more than once; give each once"),
    (["nih", "--tasks", "1", "--seeds", "1", "1"], "--seeds lists 1 more than once"),
    (["nih", "--tasks", "1", "--methods", "arc,arc"], "--methods: lists arc more than once; give each once"),
    (["nih", "--tasks", "1", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
      "--base-url", "http://127.0.0.1:9/v1"], "--base-url lists http://127.0.0.1:9/v1 more than once"),
    (["bench", "--only", "overhead", "--only", "overhead"], "--only lists overhead more than once"),
    # a flag given twice: kept its last value before
    (["nih", "--tasks", "1", "--tasks", "2"], "argument --tasks: given more than once; give it once"),
    (["nih", "--tasks", "1", "--seeds", "1", "--seeds", "2"], "argument --seeds: given more than once"),
    (["nih", "--tasks", "1", "--tool-calling", "--tool-calling"], "--tool-calling: given more than once"),
    (["ablation", "noise-lines", "--task", "nih", "--task", "nih"], "argument --task: given more than once"),
    (["bench", "--tasks", "1", "--tasks", "2"], "argument --tasks: given more than once"),
    (["serve-scripted", "--port", "0", "--port", "1"], "argument --port: given more than once"),
    (["serve-scripted", "--concurrency", "1000000000000"], "--concurrency: expected an integer from 1 to 4096"),
    (["serve-scripted", "--max-model-len", "１"], "--max-model-len: expected an integer from 2 to 2147483647 (ASCII"),
    (["serve-scripted", "--latency-ms", "1e300"], "--latency-ms: expected a number from 0 to 60000"),
    (["serve-scripted", "--inject-faults", "503,1_0"], "a fault is an HTTP status 400-599 or 'drop', got '1_0'"),
    # an argument that is not UTF-8 text: a UnicodeEncodeError traceback (exit 1) before
    (["nih", "--tasks", "1", "--model", os.fsdecode(b"\xff")],
     "arc-eval: argument 5 (after --model) is not valid UTF-8 text: b'\\xff'"),
])
def test_each_case_is_refused_at_once_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    if argv[0] == "nih" and "--methods" not in argv:
        argv = [*argv, "--methods", "arc"]
    assert message in refused(argv, capsys, tmp_path)


def test_a_non_utf8_argument_from_the_shell_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The issue's own command, as the shell hands it over: the byte 0xff in argv."""
    done = subprocess.run([sys.executable.encode(), b"-c", RUN.encode(), b"nih", b"--tasks", b"1", b"--model", b"\xff",
                           b"--out", str(tmp_path / "run").encode()], capture_output=True, timeout=120)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "is not valid UTF-8 text: b'\\xff'" in err and not (tmp_path / "run").exists()


def test_concurrency_beyond_the_task_runs_starts_no_more_workers(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The largest --concurrency with one task runs at once: the workers are never more than a batch's jobs."""
    started = time.monotonic()
    assert main(["nih", "--tasks", "1", "--seeds", "42", "--methods", "arc", "--concurrency", str(MAX_CONCURRENCY),
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert time.monotonic() - started < 60
    assert "arc" in capsys.readouterr().out


def test_the_repeatable_flags_say_so_and_take_each_value() -> None:
    args = build_parser().parse_args(["bench", "--only", "throughput", "--only", "overhead"])
    assert args.__dict__["bench:only"] == ["throughput", "overhead"]
    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    shown = " ".join(commands.choices["nih"].format_help().split())
    assert "(repeat it for more; no value twice)" in shown and "(default: 8; 1 to 4096)" in shown


def _numbers(options_class: type) -> list[tuple[str, OptionInfo]]:
    return [(attribute.name, option_info(attribute)) for attribute in option_fields(options_class)
            if option_info(attribute).number is not None]


def test_every_numeric_option_states_an_upper_bound() -> None:
    """Each option class's numbers (the run's, every task's, method's and backend's, the bench's) carry a maximum,
    so their parsers refuse what exceeds it; every count flag too."""
    from arc_eval.backends.scripted_server import ServeOptions
    from arc_eval.bench import BenchOptions

    classes = [RunSpec, BenchOptions, ServeOptions, *(entry.options for registry in (TASKS, METHODS, BACKENDS)
                                        for entry in registry.entries())]
    numbers = [(cls.__name__, name, info) for cls in classes for name, info in _numbers(cls)]
    assert len(numbers) >= 22
    unbounded = [f"{cls}.{name}" for cls, name, info in numbers if info.maximum is None]
    assert unbounded == []
    assert all(0 < entry.count_maximum <= 100_000 for entry in TASKS.entries())


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {flag}", sub_action) for flag, sub_action in _actions(sub)]
        elif action.option_strings:
            found.append((action.option_strings[0], action))
    return found


def test_no_flag_of_arc_eval_reads_a_number_with_bare_int_or_float() -> None:
    """int() reads '１', '1_0' and ' 1 ', float() 'inf': every numeric flag goes through a bounded, strict parser."""
    from arc_eval.analysis.cli import _parser as report_parser
    from arc_eval.backends.scripted_server import _parser as serve_parser

    actions = _actions(build_parser()) + _actions(report_parser()) + _actions(serve_parser())
    bare = [flag for flag, action in actions if action.type in (int, float)]
    assert bare == []


def test_options_built_in_code_are_checked_alike() -> None:
    """The same bounds and the no-twice rule hold for a spec built in code (an ablation's variant, a test)."""
    from arc_ref.errors import ConfigError

    with pytest.raises(ConfigError, match="--force-at-calls lists 5 more than once"):
        RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=Path("x"), force_at_calls=(5, 5))
    with pytest.raises(ConfigError, match="--concurrency must be at most 4096"):
        RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=Path("x"), concurrency=4097)
    with pytest.raises(ConfigError, match="--concurrency must be an integer, got 2.5"):
        RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=Path("x"), concurrency=2.5)
    spec = RunSpec.build(task_kind="nih", methods=("arc",), seeds=(1,), out=Path("x"), tasks_per_seed=7000)
    with pytest.raises(ConfigError, match="--tasks 7000 x up to 158,500 characters"):
        spec.validate()
    assert attrs.evolve(spec, tasks_per_seed=6774).validate() is None  # the largest count the default shape holds
