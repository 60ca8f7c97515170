"""A small fuzzer of `arc-ref replay` (issue 9.7). Its only property: one JSON line out per line in, no
traceback, exit status 0.

Inputs are random bytes, random JSON values (lone surrogates, NaN, huge integers, deep and repeated keys
included) and near-valid events over the real keys, after a valid or a random first line, so that the
state machine is driven as well as the parser. The in-process replay takes the volume; the real CLI in a
subprocess takes fewer, whole inputs (bytes split at LF as spec/trace.md §1 says). Each test prints how many
inputs it tried. The `slow` variants run many more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arc_ref.config import OVERRIDE_KEYS
from arc_ref.trace import TRACE_OPS, encode, replay, replay_text

OUTPUT_OPS = set(TRACE_OPS) | {"error"}
# How many inputs each run tries (benchmarks/refusal_cases.py prints them): traces replayed in process and
# whole inputs given to `arc-ref replay -` in a subprocess, in the default run and with `-m slow`.
TRACES_IN_PROCESS = 300
CLI_INPUTS = 12
TRACES_IN_PROCESS_SLOW = 2000
CLI_INPUTS_SLOW = 60
EVENT_KEYS = ("op", "action", "observation", "returncode", "thought", "reason", "preset")

# Text from every plane, with lone surrogates (rare among all code points; a high one before a low one makes a
# pair, which JSON reads as one character) and the characters
# that have tripped parsers or tokenizers (NUL, CR, LF, NEL, U+FEFF, U+2028, §) drawn often.
any_text = st.lists(  # a list of characters, not st.text: st.text would merge the alphabets and lose the weights
    st.one_of(
        st.characters(codec=None, exclude_categories=[]),
        st.characters(min_codepoint=0xDC00, max_codepoint=0xDFFF),  # low surrogates: lone unless after a high one
        st.sampled_from("\ud800\x00\r\n\x85\ufeff\u2028§"),
    ),
    max_size=24,
).map("".join)
plain_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
integers = st.one_of(
    st.integers(-5, 40),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 10**19, 10**300]),
    st.integers(-(10**30), 10**30),
)
scalars = st.one_of(st.none(), st.booleans(), integers, st.floats(), any_text)
keys = st.one_of(st.sampled_from(EVENT_KEYS + OVERRIDE_KEYS), any_text)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3),
    max_leaves=8,
)


def _no_tokenizer_file(obj: dict[str, Any]) -> dict[str, Any]:
    """Keep the fuzzer away from `hf:PATH` and `hf-dir:DIR` tokenizers: they read files (issue 9.2 checks those)."""
    tokenizer = obj.get("tokenizer")
    if isinstance(tokenizer, str) and tokenizer.startswith(("hf:", "hf-dir:")):
        obj["tokenizer"] = "bytes"
    return obj


commands = st.sampled_from(["_recall", "_recall-start", "_recall-next", "_recall_meta", "catalog-first",
                            "catalog-next", "catalog-page", "ls"])
actions = st.one_of(
    plain_text,
    st.lists(st.tuples(commands, st.sampled_from(["", " §01-7", " §02-0", " 1", " 2", " §9", " x"])),
             min_size=1, max_size=4).map(lambda pairs: "\n".join(word + argument for word, argument in pairs)),
)


def _weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, each drawn with its weight."""
    return st.sampled_from([strategy for weight, strategy in choices for _ in range(weight)]).flatmap(lambda s: s)


extra_keys = st.dictionaries(keys, json_values, max_size=3)
near_valid_events = _weighted(
    (3, st.builds(lambda a, o, rc: {"op": "observe", "action": a, "observation": o, "returncode": rc},
                  plain_text, st.text(max_size=300), st.integers(-3, 3))),
    (3, st.builds(lambda t, a: {"op": "agent", "thought": t, "action": a}, plain_text, actions)),
    (1, st.builds(lambda reason: {"op": "compact", "reason": reason},
                  st.sampled_from(["proactive", "reactive", "forced", "later"]))),
    (1, st.just({"op": "view"})),
    # an event with its keys and random ones, values of any JSON type
    (3, st.builds(lambda base, extra: {**base, **extra},
                  st.sampled_from([{"op": "observe", "action": "ls", "observation": "x"},
                                   {"op": "agent", "thought": "", "action": "ls"},
                                   {"op": "compact", "reason": "forced"}, {"op": "view"}]),
                  extra_keys)),
    (2, st.builds(lambda op, extra: {"op": op, **extra}, st.sampled_from(TRACE_OPS), extra_keys)),
)
override_values = st.one_of(
    st.tuples(st.sampled_from(("system", "goal", "tokenizer", "chat_format")), any_text),
    st.tuples(st.sampled_from(OVERRIDE_KEYS), json_values),
    st.tuples(st.sampled_from(OVERRIDE_KEYS), integers),
    st.tuples(keys, json_values),
)
configs = _weighted(
    (3, st.just({"op": "config", "preset": "minimal"})),
    (1, st.just({"op": "config", "preset": "minimal", "tokenizer": "o200k_base", "chunk_tokens": 3})),
    (1, st.just({"op": "config", "preset": "paper"})),
    (3, st.builds(lambda preset, pairs: {"op": "config", "preset": preset, **dict(pairs)},
                  st.sampled_from(["minimal", "paper"]), st.lists(override_values, max_size=2))),
)


def _dumped(obj: Any, ascii_only: bool) -> str:
    return json.dumps(_no_tokenizer_file(obj) if isinstance(obj, dict) else obj, ensure_ascii=ascii_only)


lines = _weighted(
    (6, st.builds(_dumped, near_valid_events, st.booleans())),
    (2, st.builds(_dumped, json_values, st.booleans())),
    (1, st.binary(max_size=60)),
    (1, plain_text),
)
first_lines = _weighted((4, st.builds(_dumped, configs, st.booleans())), (1, lines))
traces = st.builds(lambda first, rest: [first, *rest], first_lines, st.lists(lines, max_size=12))
long_traces = st.builds(lambda first, rest: [first, *rest], first_lines, st.lists(lines, min_size=8, max_size=40))


def _check_outputs(given_lines: list[str | bytes], outputs: list[str]) -> None:
    assert len(outputs) == len(given_lines), "one output line per input line"
    for number, output in enumerate(outputs, start=1):
        output.encode("utf-8")  # strict: no lone surrogate may reach the output
        answer = json.loads(output)
        assert isinstance(answer, dict) and answer["op"] in OUTPUT_OPS, output[:200]
        if answer["op"] == "error":
            assert answer["line"] == number
            assert "internal budget violation" not in answer["message"], answer["message"]


def _fuzz_in_process(examples: int) -> Counter[str]:
    tried: Counter[str] = Counter()

    @settings(max_examples=examples, deadline=None, derandomize=examples <= 300, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(traces)
    def run(trace: list[str | bytes]) -> None:
        tried["inputs"] += 1
        tried["lines"] += len(trace)
        _check_outputs(trace, list(replay_text(trace)))

    run()
    return tried


def _as_bytes(line: str | bytes) -> bytes:
    return line if isinstance(line, bytes) else line.encode("utf-8", errors="surrogatepass")


def _fuzz_cli(examples: int) -> Counter[str]:
    tried: Counter[str] = Counter()

    @settings(max_examples=examples, deadline=None, derandomize=examples <= 300, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(long_traces, st.sampled_from([b"\n", b"\r\n"]), st.booleans())
    def run(trace: list[str | bytes], line_end: bytes, final_line_end: bool) -> None:
        data = line_end.join(_as_bytes(line) for line in trace) + (line_end if final_line_end else b"")
        expected = data.split(b"\n")
        if expected[-1] == b"":
            expected.pop()  # a final LF does not start a further line
        result = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", "-"], input=data,
                                capture_output=True, timeout=300)
        tried["inputs"] += 1
        tried["lines"] += len(expected)
        assert result.returncode == 0, result.stderr.decode("utf-8", errors="replace")[-2000:]
        assert result.stderr == b"", result.stderr.decode("utf-8", errors="replace")[-2000:]
        outputs = result.stdout.decode("utf-8").split("\n")
        assert outputs.pop() == "", "every output line ends with LF"
        _check_outputs(list(expected), outputs)

    run()
    return tried


def _without_line_end(line: str | bytes) -> str | bytes:
    return line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n")


def test_written_lines_are_the_encoded_objects() -> None:
    """`replay_text` writes some lines directly (views, observe, agent and compact lines): each is exactly
    `encode` of the object `replay` gives for that line, on the fuzzer's traces (keys sorted, strings escaped)."""
    tried: Counter[str] = Counter()

    @settings(max_examples=200, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(long_traces)
    def run(trace: list[str | bytes]) -> None:
        written = list(replay_text(trace))
        objects = list(replay([_without_line_end(line) for line in trace]))  # replay_text leaves them out
        tried["lines"] += len(trace)
        tried["written"] += sum(1 for obj in objects if obj["op"] in ("observe", "agent", "compact", "view"))
        assert written == [encode(obj) for obj in objects]

    run()
    print(f"\nwritten lines vs encoded objects: {tried['lines']} lines, {tried['written']} written directly")
    assert tried["written"] >= 500


def test_fuzz_replay_in_process() -> None:
    tried = _fuzz_in_process(TRACES_IN_PROCESS)
    print(f"\nfuzz replay (in process): {tried['inputs']} traces, {tried['lines']} lines")
    assert tried["inputs"] >= TRACES_IN_PROCESS


def test_fuzz_replay_cli() -> None:
    tried = _fuzz_cli(CLI_INPUTS)
    print(f"\nfuzz arc-ref replay (subprocess): {tried['inputs']} inputs, {tried['lines']} lines")
    assert tried["inputs"] >= CLI_INPUTS


@pytest.mark.slow
def test_fuzz_replay_in_process_long() -> None:
    tried = _fuzz_in_process(TRACES_IN_PROCESS_SLOW)
    print(f"\nfuzz replay (in process, long): {tried['inputs']} traces, {tried['lines']} lines")
    assert tried["inputs"] >= TRACES_IN_PROCESS_SLOW


@pytest.mark.slow
def test_fuzz_replay_cli_long() -> None:
    tried = _fuzz_cli(CLI_INPUTS_SLOW)
    print(f"\nfuzz arc-ref replay (subprocess, long): {tried['inputs']} inputs, {tried['lines']} lines")
    assert tried["inputs"] >= CLI_INPUTS_SLOW
