"""Each program's exit statuses are one table, documented where users read them, and its errors map through it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arc_ref.frontends import exit_status as arc_ref_statuses
from arc_ref.frontends.cli import main as arc_ref_main
from arc_ref.errors import ConfigError
from arc_eval import errors as arc_eval_statuses

ROOT = Path(__file__).resolve().parent.parent


def _table_codes(text: str, heading: str) -> list[int]:
    """The status column of the first `| status | ...` table after ``heading``."""
    after = text.split(heading, 1)[1]
    table = after[after.index("| status |"):].split("\n\n", 1)[0]
    return [int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)]


def test_arc_ref_statuses_are_the_spec_table_and_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    spec = (ROOT / "spec" / "trace.md").read_text(encoding="utf-8")
    codes = [status.code for status in arc_ref_statuses.EXIT_STATUSES]
    assert _table_codes(spec, "**Exit status of `arc-ref`**") == codes
    with pytest.raises(SystemExit) as done:
        arc_ref_main(["--help"])
    assert done.value.code == arc_ref_statuses.OK.code
    help_text = " ".join(capsys.readouterr().out.split())
    for status in arc_ref_statuses.EXIT_STATUSES:
        assert f"{status.code} {' '.join(status.when.split())[:60]}" in help_text


def test_arc_eval_statuses_are_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _table_codes(readme, "### Exit statuses") == [status.code for status in arc_eval_statuses.EXIT_STATUSES]


def _subclasses(root: type) -> list[type]:
    found, todo = [], [root]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def test_every_arc_eval_error_carries_a_status_of_the_table() -> None:
    import arc_eval.analysis.cli  # noqa: F401  (every module that defines an error)
    import arc_eval.backends.scripted_server  # noqa: F401
    import arc_eval.cli  # noqa: F401
    import arc_eval.runner  # noqa: F401
    import arc_eval.run_spec  # noqa: F401

    errors = _subclasses(arc_eval_statuses.EvalError)
    assert len(errors) >= 8  # usage, records, schema, LongBench, analysis, backend (3 kinds), overflow, input
    for error in errors:
        assert error.exit_status in arc_eval_statuses.EXIT_STATUSES, error
    assert arc_eval_statuses.status_of(ConfigError("x")) is arc_eval_statuses.USAGE
    from arc_eval.types import BackendUnavailable

    assert arc_eval_statuses.status_of(BackendUnavailable("down")) is arc_eval_statuses.SERVER_STOPPED
    with pytest.raises(TypeError, match="a bug"):
        arc_eval_statuses.status_of(RuntimeError("unexpected"))


def test_arc_ref_inspect_ends_with_its_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`arc-ref inspect --record` of an id a store does not hold: status 1 (INSPECT_FAILED), one line."""
    from arc_ref.frontends.cli import main
    from arc_ref.persist import DurableStore
    from arc_ref.config import preset

    store_path = tmp_path / "s.db"
    with DurableStore.create(str(store_path), preset("minimal")):
        pass
    code = main(["inspect", str(store_path), "--record", "§999"])
    err = capsys.readouterr().err
    assert code == arc_ref_statuses.INSPECT_FAILED.code == 1 and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "line"), [
    (["proxy", "--bogus"], "arc-ref proxy: unrecognized arguments: --bogus (see arc-ref proxy --help)"),
    (["budgets", "--limit", "3"], "arc-ref budgets: unrecognized arguments: --limit 3 (see arc-ref budgets --help)"),
    (["inspect", "x.arc", "--bogus"], "arc-ref inspect: unrecognized arguments: --bogus (see arc-ref inspect --help)"),
    (["forget", "store", "key", "--dry-run", "--bogus"],
     "arc-ref forget: unrecognized arguments: --bogus (see arc-ref forget --help)"),
    (["replay", "t.jsonl", "x"], "arc-ref replay: unrecognized arguments: x (see arc-ref replay --help)"),
])
def test_an_argument_a_command_does_not_take_is_that_commands_usage_error(
        argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As for arc-eval (review h43 NIT 3): argparse hands a command's unknown arguments to the top parser, whose
    line was `arc-ref: unrecognized arguments: --bogus (see arc-ref --help)`, naming no command."""
    with pytest.raises(SystemExit) as done:
        arc_ref_main(argv)
    assert done.value.code == arc_ref_statuses.USAGE.code
    assert capsys.readouterr().err.splitlines() == [line]
