"""One nesting limit for every JSON reader (issue 27 item 7; spec/trace.md §2 and §8), its edges in each reader.

Before: a trace line was read up to Python's recursion limit, less the frames on the stack. A config line whose
tool ``parameters`` nested n levels (Qwen3's template, tool mode) was taken for n <= 971, and for n = 972..982
`arc-ref replay` stopped with exit status 70 and no line written (a RecursionError in json.dumps or the parser);
tool call arguments had a limit of their own (256). Now every reader measures `arc_ref.json_limits.nesting` before
it parses and takes at most MAX_NESTING = 128 levels: limit and limit + 1 are tried in each reader here (the MCP
server's in tests/hostile/test_mcp_lines.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.config import TOOL_PARAMETERS_NESTING, preset
from arc_ref.errors import ConfigError, InvalidEvent
from arc_ref.json_limits import MAX_NESTING, nesting, nesting_beyond_limit, value_nesting
from arc_ref.persist import DurableStore
from arc_ref.session import Session
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir


def _qwen3() -> str:
    directory = qwen3_dir()
    if directory is None:
        pytest.skip(QWEN3_ABSENT)
    return f"hf-dir:{directory}"


def nested_schema(depth: int) -> dict[str, Any]:
    """A JSON Schema nesting ``depth`` levels: an array of arrays ... of strings."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def nested_tool(depth: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "nested", "parameters": nested_schema(depth)}}


def config_line(parameters_depth: int) -> str:
    """A tool-mode config line on Qwen3 whose one tool's parameters nest ``parameters_depth`` levels."""
    config = {"op": "config", "preset": "minimal", "tokenizer": _qwen3(), "chat_format": "template",
              "action_mode": "tools", "context_limit": 60000, "tools": [nested_tool(parameters_depth)]}
    return json.dumps(config)


def replay(*lines: str) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "replay", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=300)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ ab'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\ ab'), inner, max_size=3),
    max_leaves=30,
)


@given(json_values)
def test_the_depth_of_a_json_text_is_the_depth_of_its_value(value: Any) -> None:
    """`nesting` reads the text (strings with brackets, quotes and backslashes left out) as the parser nests it."""
    assert nesting(json.dumps(value)) == value_nesting(value)


def test_the_measure_on_text_that_is_not_json() -> None:
    assert nesting("1") == 0 and nesting("[[1], {}]") == 2
    assert nesting('["]]]", [["\\"[[["]]]') == 3  # brackets in strings, an escaped quote
    assert nesting('[[ "never closed [[[[[[') == 2  # an unclosed string runs to the end
    assert nesting("]]][[[[") == 1  # prefix counts: -3, then up to +1
    assert nesting_beyond_limit("[" * MAX_NESTING) is None
    assert nesting_beyond_limit("[" * (MAX_NESTING + 1)) == MAX_NESTING + 1
    deep = '{"é": "[[\\"", "x": ' + "[" * MAX_NESTING + "]" * MAX_NESTING + "}"
    assert nesting_beyond_limit(deep) == nesting_beyond_limit(deep.encode("utf-8")) == MAX_NESTING + 1  # a body
    assert nesting_beyond_limit(b"\xff[" + b"[" * MAX_NESTING) == MAX_NESTING + 1  # bytes that are not UTF-8


def test_replay_takes_a_line_at_the_limit_and_refuses_one_past_it() -> None:
    """A text-mode line: at 128 levels it is read (and refused for its unknown key), at 129 it is not read."""
    config = '{"op": "config", "preset": "minimal"}'
    at_limit = '{"op": "view", "x": ' + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "}"
    past = '{"op": "view", "x": ' + "[" * MAX_NESTING + "]" * MAX_NESTING + "}"
    code, answers, err = replay(config, at_limit, past, '{"op": "view"}')
    assert code == 0, err
    assert [answer["op"] for answer in answers] == ["config", "error", "error", "view"]
    assert answers[1]["message"] == "unknown key(s) x for op 'view'"
    assert answers[2]["message"] == f"JSON nested {MAX_NESTING + 1} levels deep (at most {MAX_NESTING})"


@pytest.mark.parametrize("depth", [TOOL_PARAMETERS_NESTING, TOOL_PARAMETERS_NESTING + 1, 972, 982, 50_000])
def test_replay_of_a_config_whose_tool_parameters_nest_deep(depth: int) -> None:
    """Parameters at 124 levels (the line at 128) start the task; one more, and the depths that crashed the
    replay before (972..982: exit 70, no line), are one error line each, and the replay goes on."""
    line = config_line(depth) if depth < 900 else config_line(1).replace(
        '{"type": "string"}', "{" + '"a": {' * (depth - 1) + "}" * (depth - 1) + "}")
    code, answers, err = replay(line, '{"op": "view"}')
    assert code == 0 and "Traceback" not in err, err
    assert len(answers) == 2
    if depth <= TOOL_PARAMETERS_NESTING:
        assert answers[0]["op"] == "config" and answers[1]["op"] == "view"
        assert answers[0]["config"]["tools"][0]["function"]["parameters"] == nested_schema(depth)
    else:
        assert answers[0]["message"] == f"JSON nested {depth + 4} levels deep (at most {MAX_NESTING})"
        assert answers[1]["op"] == "error"


def test_the_python_api_holds_tool_parameters_to_the_same_limit(tmp_path: Path) -> None:
    """A Session (and any Config) takes parameters at 124 levels, whose config line a store writes and reads
    back; at 125 levels the line could not be read, so the configuration is refused."""
    session = Session(_qwen3(), goal="Solve it.", tools=[nested_tool(TOOL_PARAMETERS_NESTING)],
                      path=tmp_path / "session.arc", context_limit=60000)
    session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "nested", "arguments": "{}"}}]})
    session.add_tool_result("c1", "done")
    session.close()
    with DurableStore.open(tmp_path / "session.arc", readonly=True) as store:
        assert store.state.stored == 1  # the config row, 128 levels deep, reads back
    with pytest.raises(ConfigError, match=f"tool 1's parameters are nested {TOOL_PARAMETERS_NESTING + 1} levels"
                                          f" deep \\(at most {TOOL_PARAMETERS_NESTING}"):
        preset("minimal", tokenizer=_qwen3(), chat_format="template", action_mode="tools",
               tools=[nested_tool(TOOL_PARAMETERS_NESTING + 1)])
    with pytest.raises(ConfigError, match="levels deep"):  # far deeper: measured without recursion
        preset("minimal", tokenizer=_qwen3(), chat_format="template", action_mode="tools",
               tools=[nested_tool(20_000)])


def test_budgets_set_tools_holds_parameters_to_the_same_limit() -> None:
    """`arc-ref budgets --set tools=...`: the value is read as a JSON text (its own limit), then as tools."""
    for depth, status in ((TOOL_PARAMETERS_NESTING, 0), (TOOL_PARAMETERS_NESTING + 1, 2), (5000, 2)):
        tools = json.dumps([nested_tool(depth)]) if depth < 900 else "[" * depth + "]" * depth
        done = subprocess.run([sys.executable, "-m", "arc_ref.frontends.cli", "budgets", "--preset", "minimal", "--set",
                               f"tokenizer={_qwen3()}", "--set", "chat_format=template", "--set",
                               "action_mode=tools", "--set", "context_limit=60000", "--set", f"tools={tools}"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == status, (depth, done.stderr)
        assert "Traceback" not in done.stderr
        if depth == TOOL_PARAMETERS_NESTING + 1:
            assert f"parameters are nested {depth} levels deep" in done.stderr
        if depth == 5000:
            assert f"JSON nested {depth} levels deep (at most {MAX_NESTING})" in done.stderr


def test_tool_call_arguments_at_the_limit_and_past_it() -> None:
    session = Session(_qwen3(), goal="Solve it.", tools=[nested_tool(1)])
    past = "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    with pytest.raises(InvalidEvent, match=f"are nested {MAX_NESTING + 1} levels deep \\(at most {MAX_NESTING}\\)"):
        session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "nested", "arguments": past}}]})
    at_limit = "[" * MAX_NESTING + "]" * MAX_NESTING
    session.add_assistant({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "nested", "arguments": at_limit}}]})
    session.add_tool_result("c1", "done")
    assert any(at_limit in json.dumps(message) for message in session.messages())


def test_the_proxy_reads_a_body_at_the_limit_and_refuses_one_past_it() -> None:
    """`arc-ref proxy`'s request body: 128 levels (a tool's parameters at 124) are read and served, 129 and 50,004
    are a 400 naming the depth before anything reaches the upstream (before: 129 was read, and 50,004 levels
    were a 500 Internal Server Error, a RecursionError in the proxy's log)."""
    harness = pytest.importorskip("tests.proxy.harness", reason="the proxy extra is not installed")
    import httpx

    if harness.QWEN3 is None:
        pytest.skip(QWEN3_ABSENT)

    def body(depth: int) -> str:
        return json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "hi"}],
                           "tools": [nested_tool(depth - 4)]})

    deepest = ('{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function",'
               ' "function": {"name": "f", "parameters": ' + '{"a": ' * 49_999 + "{}" + "}" * 49_999 + "}}]}")
    with harness.serve_upstream() as (server, upstream_url):
        with harness.serve_proxy(upstream_url) as base_url:
            def post(text: str) -> httpx.Response:
                return httpx.post(f"{base_url}/chat/completions", content=text.encode("utf-8"), timeout=120,
                                  headers={"Content-Type": "application/json"})

            for depth, text in ((MAX_NESTING + 1, body(MAX_NESTING + 1)), (50_004, deepest)):
                refused = post(text)
                assert refused.status_code == 400, refused.text
                error = refused.json()["error"]
                assert error["code"] == "bad_request", error
                assert error["message"] == f"the body is JSON nested {depth} levels deep (at most {MAX_NESTING})"
            assert server.stats.chat_requests == 0  # nothing refused reached the upstream
            served = post(body(MAX_NESTING))
            assert served.status_code == 200, served.text
            assert server.stats.chat_requests >= 1
