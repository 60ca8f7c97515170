"""`arc-ref` against closed, full and endless streams and hostile arguments (issue 9.1).

Each case ended in a traceback before (AttributeError on a closed stream, OSError on a full disk,
UnicodeEncodeError on a surrogate, ValueError on a 4,300-digit integer) or read without bound (/dev/zero).
Now: one line on standard error and an exit status from `arc-ref --help` (spec/trace.md §8).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = '{"op": "config", "preset": "minimal"}'
OBSERVE = '{"op": "observe", "action": "ls", "observation": "x"}'
ARC_REF = f"{shlex.quote(sys.executable)} -m arc_ref.frontends.cli"
needs_dev_full = pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")


def _shell(script: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a bash line (so that `<&-`, `>&-` and `> /dev/full` mean what they mean to a user)."""
    return subprocess.run(["bash", "-c", script], input=stdin, capture_output=True, timeout=300)


def _arc_ref(*args: str | bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", *args], input=stdin, capture_output=True,
                          timeout=300)


def _one_clean_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8", errors="replace")
    assert "Traceback" not in text and "Exception ignored" not in text, text
    assert text.count("\n") == 1, f"expected one line on standard error, got: {text!r}"
    return text


def test_closed_standard_input_is_exit_4_with_one_line() -> None:
    result = _shell(f"{ARC_REF} replay - <&-")
    assert result.returncode == 4
    assert "standard input is closed" in _one_clean_line(result.stderr)


def test_closed_standard_output_is_exit_4_with_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(CONFIG + "\n", encoding="utf-8")
    for command in (f"{ARC_REF} replay - >&-", f"{ARC_REF} replay {shlex.quote(str(trace))} >&-",
                    f"{ARC_REF} budgets --preset minimal >&-"):
        result = _shell(command, stdin=(CONFIG + "\n").encode())
        assert result.returncode == 4, command
        assert "standard output is closed" in _one_clean_line(result.stderr)


@needs_dev_full
def test_full_standard_output_is_exit_4_with_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(CONFIG + "\n" + OBSERVE + "\n", encoding="utf-8")
    for command in (f"{ARC_REF} replay - > /dev/full", f"{ARC_REF} replay {shlex.quote(str(trace))} > /dev/full",
                    f"{ARC_REF} budgets --preset minimal > /dev/full"):
        result = _shell(command, stdin=trace.read_bytes())
        assert result.returncode == 4, command
        assert "cannot write standard output: No space left on device" in _one_clean_line(result.stderr)


def test_endless_input_is_refused_after_the_line_limit() -> None:
    for command in (f"{ARC_REF} replay - < /dev/zero", f"{ARC_REF} replay /dev/zero"):
        result = _shell(command)
        assert result.returncode == 3, command
        assert "line 1 is longer than 33554432 bytes" in _one_clean_line(result.stderr)
        (answer,) = [json.loads(line) for line in result.stdout.splitlines()]
        assert answer["op"] == "error" and answer["line"] == 1 and "the replay stops here" in answer["message"]


def test_a_reader_that_goes_away_ends_the_replay_quietly() -> None:
    trace = "\n".join([CONFIG] + ['{"op": "view"}'] * 3000) + "\n"
    result = _shell(f"{ARC_REF} replay - | head -c 100 > /dev/null; exit ${{PIPESTATUS[0]}}", stdin=trace.encode())
    assert result.returncode == 0
    assert result.stderr == b""


def test_read_lines_refuses_a_line_one_byte_over_the_limit() -> None:
    from arc_ref.frontends.cli import LineTooLong, read_lines

    assert list(read_lines(io.BytesIO(b"abcd\nabcd"), limit=4)) == [b"abcd\n", b"abcd"]
    assert list(read_lines(io.BytesIO(b"abc\r\n\n"), limit=4)) == [b"abc\r\n", b"\n"]
    lines = read_lines(io.BytesIO(b"ok\nabcde\nnever read\n"), limit=4)
    assert next(lines) == b"ok\n"
    with pytest.raises(LineTooLong) as refused:
        next(lines)
    assert refused.value.number == 2 and refused.value.limit == 4
    with pytest.raises(LineTooLong):
        list(read_lines(io.BytesIO(b"abcde"), limit=4))  # at the end of the input, without its LF


def test_a_line_over_the_limit_is_answered_then_the_replay_stops(monkeypatch: pytest.MonkeyPatch,
                                                                   capfdbinary: pytest.CaptureFixture[bytes],
                                                                   tmp_path: Path) -> None:
    import arc_ref.frontends.cli as cli

    original = cli.read_lines
    monkeypatch.setattr(cli, "read_lines", lambda stream: original(stream, limit=64))
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(f"{CONFIG}\n{OBSERVE}\n{'x' * 65}\n{OBSERVE}\n".encode())
    assert cli.main(["replay", str(trace)]) == cli.EXIT_LINE_TOO_LONG
    out, err = capfdbinary.readouterr()
    answers = [json.loads(line) for line in out.splitlines()]
    assert [answer["op"] for answer in answers] == ["config", "observe", "error"]
    assert answers[2]["line"] == 3
    assert b"line 3 is longer than 64 bytes" in err


def test_an_internal_error_is_one_line_and_exit_70(monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import arc_ref.frontends.cli as cli

    def broken(lines: object, verify: bool = False) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "replay_bytes", broken)
    trace = tmp_path / "t.jsonl"
    trace.write_text(CONFIG + "\n", encoding="utf-8")
    assert cli.main(["replay", str(trace)]) == 70
    err = capfd.readouterr().err
    assert err == "arc-ref: internal error (a bug in arc-ref, please report it): RuntimeError: a bug\n"


def test_surrogates_anywhere_on_standard_input_give_error_lines_and_exit_0() -> None:
    lines = [
        '{"op": "config", "preset": "minimal", "goal": "\\ud800"}',
        CONFIG,
        '{"op": "config", "preset": "minimal", "\\ud800": 1}',
        '{"op": "observe", "\\udc00": 1, "action": "a", "observation": "x"}',
        '{"op": "agent", "thought": "\\ud800", "action": "_recall \\udfff"}',
        OBSERVE,
    ]
    result = _arc_ref("replay", "-", stdin=("\n".join(lines) + "\n").encode())
    assert result.returncode == 0 and result.stderr == b""
    answers = [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]
    assert [answer["op"] for answer in answers] == ["error", "error", "error", "error", "error", "error"]
    assert "not valid Unicode text" in answers[0]["message"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("capacity=" + "9" * 4300, "a 4300-digit number is out of range (at most 2147483647)"),
        ("capacity=99999999999999999999", "a 20-digit number is out of range"),
        ("capacity=2147483648", "capacity must be at most 2147483647 (2^31 - 1), got 2147483648"),
        ("context_limit=-" + "9" * 4300, "a 4300-digit number is out of range"),
        ("capacity=１２", "needs an integer written as in JSON"),
        ("capacity=1_000", "needs an integer written as in JSON"),
        ("capacity=+12", "needs an integer written as in JSON"),
        ("capacity= 12", "needs an integer written as in JSON"),
        ("capacity=012", "needs an integer written as in JSON"),
        ("capacity=1e3", "needs an integer written as in JSON"),
        ("capacity=", "needs an integer written as in JSON"),
    ],
)
def test_budgets_refuses_integers_that_are_not_json_integers_in_range(setting: str, message: str) -> None:
    result = _arc_ref("budgets", "--preset", "minimal", "--set", setting)
    assert result.returncode == 2
    assert message in _one_clean_line(result.stderr)


@pytest.mark.parametrize("field", [b"goal", b"system", b"tokenizer"])
def test_budgets_refuses_text_that_is_not_utf8(field: bytes) -> None:
    """A non-UTF-8 argument reaches Python as a lone surrogate (surrogateescape): refused before it is read, naming
    the argument and its bytes (issue 31: one check for every argument of arc-ref and arc-eval)."""
    result = _arc_ref("budgets", "--preset", "minimal", "--set", field + b"=\xff\xfe", stdin=b"")
    assert result.returncode == 2
    said = _one_clean_line(result.stderr)
    assert "argument 5 (after --set) is not valid UTF-8 text: b'" + field.decode() + "=\\xff\\xfe'" in said, said


def test_budgets_accepts_the_largest_config_integer() -> None:
    result = _arc_ref("budgets", "--preset", "minimal", "--set", "capacity=2147483647", "--set", "stub_cap=140",
                      "--set", "page_budget=600", "--set", "summary_budget=400", "--set", "recent_budget=480",
                      "--set", "context_limit=2147483647", "--set", "max_completion=2147481647")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {"budget": 1753, "limit": 2000, "fits": True}


def test_exit_codes_are_in_the_help() -> None:
    for command in (["--help"], ["replay", "--help"], ["budgets", "--help"]):
        shown = _arc_ref(*command).stdout.decode()
        for status in ("0 ", "2 ", "3 ", "4 ", "70 ", "130 "):
            assert f"\n  {status}" in shown, (command, status)
        assert "exit status:" in shown


def test_stderr_closed_as_well_still_gives_the_exit_status() -> None:
    result = _shell(f"{ARC_REF} replay - <&- 2>&-")
    assert result.returncode == 4
    assert result.stdout == b""

