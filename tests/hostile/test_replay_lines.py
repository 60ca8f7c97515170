"""Hostile lines for the replay contract (issue 9.1): every one is an error line, never an exception.

Each case was a traceback or a silent acceptance before: a lone surrogate in a config string or a key reached
the tokenizer or the output encoder (UnicodeEncodeError), a 4,300-digit capacity reached str() (ValueError),
NaN was taken for a JSON value, and a nested value too deep to print broke an error message (RecursionError).
"""

from __future__ import annotations

import json
import sys

import pytest

from arc_ref.config import make_setup, preset
from arc_ref.errors import ConfigError
from arc_ref.json_limits import MAX_NESTING
from arc_ref.trace import replay, replay_bytes, replay_text

CONFIG = '{"op": "config", "preset": "minimal"}'
OBSERVE = '{"op": "observe", "action": "ls", "observation": "x"}'
HUGE = "9" * 4300  # the most digits Python's JSON parser reads


def _answers(*lines: str) -> list[str]:
    """The replay's output lines; each must be UTF-8 text (what the CLI writes) and one JSON object. The same lines
    as bytes (what the CLI reads: their \\u escapes and brackets are looked for over the bytes) give the same
    output."""
    outputs = list(replay_text(list(lines)))
    assert [line.decode("utf-8") for line in replay_bytes([line.encode("utf-8") for line in lines])] == outputs
    assert len(outputs) == len(lines)
    for output in outputs:
        output.encode("utf-8")  # raises on a lone surrogate: the output line must stay valid UTF-8
        assert isinstance(json.loads(output), dict)
    return outputs


def _error_message(output: str) -> str:
    answer = json.loads(output)
    assert answer["op"] == "error", output[:300]
    message: str = answer["message"]
    return message


@pytest.mark.parametrize("field", ["goal", "system", "tokenizer", "chat_format"])
@pytest.mark.parametrize("text", ["\\ud800", "ok \\udfff", "\\udc00\\ud800"])
def test_lone_surrogate_in_a_config_string_is_an_error_line(field: str, text: str) -> None:
    config, view = _answers(f'{{"op": "config", "preset": "minimal", "{field}": "{text}"}}', '{"op": "view"}')
    assert "not valid Unicode text" in _error_message(config)
    assert "no valid config line" in _error_message(view)


@pytest.mark.parametrize(
    "line",
    [
        '{"op": "config", "preset": "minimal", "\\ud800": 1}',  # an unknown config key
        '{"op": "config", "preset": "minimal", "go\\udfffal": "x"}',
        '{"op": "config", "preset": "\\ud800"}',
        '{"\\ud800": "config", "preset": "minimal"}',
    ],
)
def test_lone_surrogate_in_a_config_key_is_an_error_line_that_echoes_no_surrogate(line: str) -> None:
    (config,) = _answers(line)
    assert "not valid Unicode text" in _error_message(config)


@pytest.mark.parametrize(
    "line",
    [
        '{"op": "observe", "action": "ls", "observation": "x", "\\udc00": 1}',  # an unknown key's name
        '{"op": "agent", "thought": "t", "action": "ls", "\\udc00x": 1}',
        '{"op": "compact", "reason": "\\ud800"}',
        '{"op": "view", "extra": [["\\udfff"]]}',
        '{"op": "\\ud800"}',
        '{"op": "observe", "action": "\\ud800", "action": "ls", "observation": "x"}',  # a dropped repeated value
        '["\\ud800"]',
    ],
)
def test_lone_surrogate_anywhere_in_an_event_line_is_an_error_line(line: str) -> None:
    _, bad, after = _answers(CONFIG, line, OBSERVE)
    assert "not valid Unicode text" in _error_message(bad)
    assert json.loads(after)["index"] == 1  # the state survived the bad line


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"op": "observe", "action": "ls", "observation": "x", "returncode": NaN, "returncode": 0}', "NaN is not"),
        ('{"op": "observe", "action": "ls", "observation": "x", "returncode": Infinity}', "Infinity is not"),
        ('{"op": "view", "x": -Infinity}', "-Infinity is not"),
        ('\ufeff{"op": "view"}', "not valid JSON"),
    ],
)
def test_what_rfc_8259_does_not_call_json_is_an_error_line(line: str, message: str) -> None:
    _, bad, after = _answers(CONFIG, line, OBSERVE)
    assert message in _error_message(bad)
    assert json.loads(after)["index"] == 1


def test_a_value_nested_too_deep_to_print_is_an_error_line() -> None:
    """The error message echoes the value: one the parser read but json.dumps cannot write must not crash it.

    Before issue 27 the parser and json.dumps both stopped near the interpreter's recursion limit, at depths that
    depend on the caller's stack; now no line deeper than MAX_NESTING is parsed, so every depth from the limit to
    past the recursion limit is one error line naming its depth.
    """
    for depth in [*range(MAX_NESTING - 2, MAX_NESTING + 2), *range(sys.getrecursionlimit() - 200,
                                                                   sys.getrecursionlimit() + 5, 7)]:
        nested = "[" * depth + "]" * depth
        for line in (
            f'{{"op": "observe", "action": {nested}, "observation": "x"}}',
            f'{{"op": "observe", "action": "ls", "observation": "x", "returncode": {nested}}}',
            f'{{"op": {nested}}}',
            f'{{"op": "config", "preset": "minimal", "goal": {nested}}}',
        ):
            outputs = _answers(CONFIG, line)
            message = _error_message(outputs[1])
            if depth + 1 > MAX_NESTING:
                assert message == f"JSON nested {depth + 1} levels deep (at most {MAX_NESTING})"
            else:
                assert "nested" not in message


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (HUGE, "an integer of 4300 digits"),
        ("-" + HUGE, "an integer of 4300 digits"),
        ("2147483648", "got 2147483648"),
        ("99999999999999999999", "an integer of 20 digits"),
    ],
)
@pytest.mark.parametrize("field", ["capacity", "context_limit", "page_size", "fingerprint_bits", "overhead"])
def test_config_integer_out_of_range_is_a_config_error(field: str, value: str, shown: str) -> None:
    (config,) = _answers(f'{{"op": "config", "preset": "minimal", "{field}": {value}}}')
    message = _error_message(config)
    assert shown in message
    assert value not in message or len(value) <= 20  # a 4,300-digit value is described, not echoed


def test_config_integers_reach_two_to_the_31_minus_one() -> None:
    largest = 2**31 - 1
    config = preset("minimal", capacity=largest, stub_cap=140, page_budget=600, summary_budget=400,
                    recent_budget=480, context_limit=largest, max_completion=largest - 2000)
    assert make_setup(config).limit == 2000
    with pytest.raises(ConfigError, match="capacity must be at most 2147483647"):
        make_setup(config.replace(capacity=largest + 1))
    with pytest.raises(ConfigError, match="an integer of 15052 bits"):  # too long even to count its digits
        make_setup(config.replace(capacity=10**4531))
    with pytest.raises(ConfigError, match="context_limit must be between its minimum and 2147483647, got an integer"
                                          " of 4001 digits"):
        make_setup(config.replace(context_limit=-(10**4000)))
    with pytest.raises(ConfigError, match="context_limit must be >= 1, got -2147483648"):
        make_setup(config.replace(context_limit=-(2**31)))


def test_config_strings_must_be_text_through_the_api_too() -> None:
    with pytest.raises(ConfigError, match=r"goal is not valid Unicode text \(lone surrogate at index 3\)"):
        make_setup(preset("minimal", goal="abc\udc80"))


def test_every_output_of_a_hostile_trace_is_one_utf8_json_line() -> None:
    lines = [
        '{"op": "config", "preset": "minimal", "system": "\\ud83d"}',
        CONFIG,
        OBSERVE,
        '{"op": "agent", "thought": "\\udfff", "action": "_recall \\ud800"}',
        '{"op": "observe", "action": "ls", "observation": "x", "returncode": ' + HUGE + "}",
        '{"op": "observe", "action": "ls", "observation": "x", "returncode": ' + HUGE + "9}",
        '{"op": "view"}',
    ]
    answers = [json.loads(output) for output in _answers(*lines)]
    assert [answer["op"] for answer in answers] == ["error", "error", "error", "error", "error", "error", "error"]
    valid = list(replay(lines[1:4] + lines[6:]))
    assert [answer["op"] for answer in valid] == ["config", "observe", "error", "view"]


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ('{"op": "observe", "action": "\\ud800", "observation": "x\\udc00"}', 'U+D800 at index 0 of a string in the value of "action"'),
        ('{"op": "view", "a": ["ok", ["\\ud801"]], "b": "\\udc02"}', 'U+D801 at index 0 of a string in the value of "a"'),
        ('{"op": "view", "a": {"k\\udfff": "\\ud800"}}', 'U+DFFF at index 1 of a key in the value of "a"'),
        ('{"op": "view", "\\udc05": "\\ud806"}', "U+DC05 at index 0 of a key in the line"),
        ('{"op": "observe", "action": "ls", "observation": "\\udc00", "action": "\\ud800"}',
         'U+D800 at index 0 of a string in the value of "action"'),  # a repeated key stands at its first place
        ('["\\ud807", "\\udc08"]', "U+D807 at index 0 of a string in the line"),
    ],
)
def test_the_first_lone_surrogate_in_the_line_order_is_reported_under_its_own_key(line: str, where: str) -> None:
    """trace.md §6: keys before their values, members in order, depth first; the top-level key named is the one
    holding the reported string (the walk popped values last-first and named the first key holding any)."""
    config = json.dumps({"op": "config", "preset": "minimal"})
    assert _error_message(_answers(config, line)[1]) == f"not valid Unicode text: a lone surrogate {where}"


def test_line_ends_are_left_out_of_a_line_read_as_bytes_or_text() -> None:
    """Every CR and LF at the end of a line is left out before it is read (spec/trace.md §1): a malformed line's
    error names the same column whatever its line end (CR is JSON white space: kept, the parser would report
    the column after it)."""
    lines = [CONFIG, "", '{"op": "observe", "action": "ls"', '{"op": "view" "x"}', OBSERVE]
    expected = list(replay_text(lines))
    assert [_error_message(output) for output in expected[1:4]] == [
        "not valid JSON: Expecting value at column 1",
        "not valid JSON: Expecting ',' delimiter at column 33",
        "not valid JSON: Expecting ',' delimiter at column 15",
    ]
    for end in ("\n", "\r\n", "\r", "\r\r\n"):
        assert list(replay_text([line + end for line in lines])) == expected, repr(end)
        as_bytes = replay_bytes([(line + end).encode("utf-8") for line in lines])
        assert [line.decode("utf-8") for line in as_bytes] == expected, repr(end)
