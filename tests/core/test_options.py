"""Options written once (arc_ref.options): a number's bounds make its parser, integers and numbers in ASCII only,
no value twice, a flag given once, an argument that is text; and `arc-ref`'s own numbers under the same rules
(issue 29 item 5, issue 31 item 2)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from attrs import frozen

from arc_ref.config import preset
from arc_ref.errors import ConfigError
from arc_ref.frontends.cli import main
from arc_ref.machine import Observe
from arc_ref.options import (
    add_option_flags,
    float_option,
    int_option,
    once_each,
    option,
    options_from_args,
    strict_integer,
    strict_number,
    undecodable_argument,
    unique_settings,
)
from arc_ref.persist import DurableStore


@pytest.mark.parametrize("text", ["１", "1_0", " 1 ", "+1", "1.0", "0x1", "", "-", "1e3", "٣", "1\n"])
def test_an_integer_is_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match="ASCII digits only"):
        strict_integer(text, 0, 100)


def test_an_integer_within_its_bounds_whatever_its_length() -> None:
    assert strict_integer("007", 0, 100) == 7 and strict_integer("-5", -10, 10) == -5
    for text in ("101", "-1", "9" * 5000):  # 5,000 digits: refused by length, never converted
        with pytest.raises(ValueError, match="expected an integer from 0 to 100"):
            strict_integer(text, 0, 100)


@pytest.mark.parametrize("text", ["inf", "nan", "-inf", "1_0", "３", " 1", "1e", ".", "0x10", "1e999"])
def test_a_number_is_finite_and_ascii(text: str) -> None:
    with pytest.raises(ValueError, match="expected a number"):
        strict_number(text, 1e300, minimum=0)


def test_a_number_within_its_bounds() -> None:
    assert strict_number("1.5e1", 20, minimum=0) == 15.0 and strict_number(".5", 1, exclusive_minimum=0) == 0.5
    with pytest.raises(ValueError, match="expected a number above 0, at most 1, got '0'"):
        strict_number("0", 1, exclusive_minimum=0)
    with pytest.raises(ValueError, match="expected a number from 0 to 2, got '2.5'"):
        strict_number("2.5", 2, minimum=0)


@frozen
class Knobs:
    size: int = int_option(3, minimum=1, maximum=10, help="a size")
    rate: float = float_option(0.5, minimum=0, maximum=1, help="a rate")
    steps: tuple[int, ...] = int_option((1, 2), minimum=1, maximum=10, nargs="*", converter=tuple, help="steps")
    urls: tuple[str, ...] = option((), append=True, converter=tuple, help="repeatable")
    loud: bool = option(False, store_true=True, help="a switch")


def _parse(*argv: str) -> Knobs:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_option_flags(parser, "k", Knobs)
    return options_from_args("k", Knobs, once_each(parser).parse_args(list(argv)))


def test_the_bound_makes_the_parser_and_the_check() -> None:
    assert _parse("--size", "10", "--rate", "1", "--steps", "3", "4", "--urls", "a", "--urls", "b", "--loud") == Knobs(
        10, 1.0, (3, 4), ("a", "b"), True)
    with pytest.raises(argparse.ArgumentError, match="expected an integer from 1 to 10, got '11'"):
        _parse("--size", "11")
    with pytest.raises(ConfigError, match="--size must be at most 10, got 11"):
        Knobs(size=11)  # the same bound, built in code
    with pytest.raises(TypeError, match="maximum"):
        int_option(1, minimum=1, help="no upper bound")  # type: ignore[call-arg]


def test_no_value_twice_and_no_flag_twice() -> None:
    with pytest.raises(ConfigError, match="--steps lists 3 more than once; give each once"):
        _parse("--steps", "3", "3")
    with pytest.raises(ConfigError, match="--urls lists a more than once"):
        _parse("--urls", "a", "--urls", "a")
    for twice in (("--size", "1", "--size", "2"), ("--loud", "--loud"), ("--steps", "1", "--steps", "2")):
        with pytest.raises(argparse.ArgumentError, match="given more than once; give it once"):
            _parse(*twice)
    with pytest.raises(ValueError, match="--set capacity given more than once"):
        unique_settings([("capacity", 1), ("capacity", 2)])


def test_an_argument_that_is_not_utf8_is_named_with_its_bytes() -> None:
    assert undecodable_argument(["inspect", "s.arc"]) is None
    said = undecodable_argument(["replay", os.fsdecode(b"tr\xffce")])
    assert said == "argument 2 (after replay) is not valid UTF-8 text: b'tr\\xffce'; give every argument as UTF-8 text"
    assert "b'\\xed\\xa0\\x80'" in str(undecodable_argument(["\ud800"]))  # a lone surrogate given in code


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.arc"
    with DurableStore.create(path, preset("minimal", capacity=20)) as writer:
        writer.append(Observe("ls", "a b c"))
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["--catalog", "１"], "argument --catalog: expected an integer from 0 to 2147483647 (ASCII digits only)"),
    (["--events", "--from", " 1 "], "argument --from: expected an integer from 1 to 9223372036854775807"),
    (["--events", "--count", "1_0"], "argument --count: expected an integer from 0 to 9223372036854775807"),
    (["--events", "--count", str(10**30)], "argument --count: expected an integer from 0 to 9223372036854775807"),
    (["--events", "--from", str(10**30)], "argument --from: expected an integer from 1 to 9223372036854775807"),
    (["--events", "--from", "1", "--from", "2"], "argument --from: given more than once; give it once"),
    (["--events", "--events"], "argument --events: given more than once"),
])
def test_arc_ref_inspect_numbers_and_flags(store: Path, argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["inspect", str(store), *argv])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and message in err and "Traceback" not in err, err


def test_arc_ref_budgets_set_and_preset_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budgets", "--preset", "minimal", "--set", "capacity=50", "--set", "capacity=60"]) == 2
    assert "arc-ref budgets: --set capacity given more than once; give it once" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        main(["budgets", "--preset", "minimal", "--preset", "paper"])
    assert ended.value.code == 2 and "argument --preset: given more than once" in capsys.readouterr().err


def test_arc_ref_non_utf8_argument_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable.encode(), b"-m", b"arc_ref.frontends.cli", b"replay", b"\xff"],
                          capture_output=True, timeout=60)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("arc-ref: argument 2 (after replay) is not valid UTF-8 text: b'\\xff'")


def test_no_flag_of_arc_ref_reads_a_number_with_bare_int_or_float() -> None:
    """Every numeric flag of arc-ref's own commands goes through a bounded, strict parser (the proxy's too: its
    flags come from arc_ref.frontends.proxy_options.ProxyOptions)."""
    import arc_ref.frontends.cli as cli

    captured: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> argparse.Namespace:
        captured.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(SystemExit):
            cli.main(["budgets"])
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    subcommands = next(action for action in captured[0]._actions if isinstance(action, argparse._SubParsersAction))
    bare = [f"{name} {action.option_strings[0]}" for name, sub in subcommands.choices.items()
            for action in sub._actions if action.option_strings and action.type in (int, float)]
    assert bare == []
