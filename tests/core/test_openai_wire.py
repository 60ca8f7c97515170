"""arc_ref.openai_wire: the one reader of OpenAI's wire shapes (issue 29 item 1), and its callers' refusals."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from arc_ref.errors import ArcError
from arc_ref.message import ToolCall
from arc_ref.openai_wire import (
    TOOL_CALL_SHAPE,
    ShapeError,
    arguments_text,
    content_parts,
    error_body,
    error_message,
    read_tool,
    read_tool_call,
)

ROOT = Path(__file__).resolve().parents[2]


def test_content_as_an_agent_sends_it() -> None:
    assert content_parts(None) == () and content_parts("hi") == ("hi",)
    assert content_parts([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == ("a", "b")
    with pytest.raises(ShapeError) as bad:
        content_parts([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}])
    assert bad.value.rule == "part" and bad.value.index == 1 and isinstance(bad.value, ArcError)
    with pytest.raises(ShapeError) as bad:
        content_parts(7)
    assert bad.value.rule == "content"
    with pytest.raises(ShapeError):
        content_parts(["bare"])  # a bare string is a part only as a server reads it


def test_content_as_vllm_hands_it_to_a_template() -> None:
    parts = ["bare", {"type": "input_text", "text": "x"}, {"type": "refusal", "refusal": "no"},
             {"type": "text", "text": None}, {"type": "output_text", "text": 5}]
    assert content_parts(parts, as_server=True) == ("bare", "x", "no", "5")
    with pytest.raises(ShapeError):
        content_parts([{"type": "image_url"}], as_server=True)


def test_tool_calls_from_json_and_from_client_objects() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}
    read = read_tool_call(call, 0)
    assert (read.call_id, read.name, read.arguments) == ("c1", "bash", "{\"cmd\": \"ls\"}")
    assert read_tool_call(call, 0, exact=True) == read
    client = SimpleNamespace(id="c2", function=SimpleNamespace(name="grep", arguments=None))
    assert (read_tool_call(client, 0).name, read_tool_call(client, 0).arguments) == ("grep", None)
    for broken in ("text", 3, None, [call], {"id": "c3", "function": "bash"}, {"id": "c3"}):
        with pytest.raises(ShapeError) as bad:
            read_tool_call(broken, 4)
        assert bad.value.rule == "function" and bad.value.index == 4


def test_the_exact_shape_of_the_trace_format() -> None:
    with pytest.raises(ShapeError) as bad:
        read_tool_call({"id": "c", "type": "function", "function": {"name": "n", "arguments": ""}, "x": 1}, 0,
                       exact=True)
    assert bad.value.rule == "call"
    with pytest.raises(ShapeError) as bad:
        read_tool_call({"id": "c", "type": "function", "function": {"name": "n"}}, 0, exact=True)
    assert bad.value.rule == "function" and bad.value.value == {"name": "n"}


def test_arguments_text_and_tools_and_error_bodies() -> None:
    assert arguments_text(None) == "" and arguments_text("{}") == "{}"
    assert arguments_text({"q": "é"}) == '{"q": "\\u00e9"}' and arguments_text({"q": "é"}, ensure_ascii=False) == '{"q": "é"}'
    assert read_tool({"type": "function", "function": {"name": "f"}}, 0) == {"name": "f"}
    for broken in ({"function": {"name": "f"}}, {"type": "function", "function": {"name": 1}}, "f"):
        with pytest.raises(ShapeError):
            read_tool(broken, 0)
    # a request's tool without "type" is a function tool, as vLLM reads it; another type, or null, is not
    assert read_tool({"function": {"name": "f"}}, 0, type_optional=True) == {"name": "f"}
    for broken in ({"type": None, "function": {"name": "f"}}, {"type": "web", "function": {"name": "f"}}):
        with pytest.raises(ShapeError):
            read_tool(broken, 0, type_optional=True)
    body = error_body("too long", "BadRequestError", 400, "messages")
    assert body == {"error": {"message": "too long", "type": "BadRequestError", "param": "messages", "code": 400}}
    assert error_message(body) == "too long"
    assert error_message({"error": "Unauthorized"}) == "Unauthorized"  # vLLM's 401
    assert error_message({"message": "top"}) == "top" and error_message({"detail": "x"}) is None
    assert error_message([1]) is None


def test_every_front_end_reads_a_call_through_the_one_reader() -> None:
    """The proxy, the Session, the trace and the evaluation layer take the same call to the same ToolCall,
    and refuse a call without a function, each in its own words."""
    pytest.importorskip("httpx")
    from arc_eval.backends.replies import parse_completion
    from arc_eval.types import BackendReplyError, Message
    from arc_ref.frontends.proxy import Refused, agent_message
    from arc_ref.session import SessionError, tool_call
    from arc_ref.trace import TraceError, _calls

    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "ls"}}
    expected = ToolCall("c1", "bash", "ls")
    assert agent_message({"role": "assistant", "content": None, "tool_calls": [call]}, 1).calls == (expected,)
    assert tool_call(call) == expected and _calls([call]) == (expected,)
    assert Message.from_json({"role": "assistant", "content": None, "tool_calls": [call]}).tool_calls == (expected,)
    reply = {"choices": [{"message": {"content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    assert parse_completion(reply, "test").tool_calls[0].name == "bash"

    broken = {"id": "c1", "type": "function"}
    with pytest.raises(Refused, match="tool call 1 must have an id and a function name"):
        agent_message({"role": "assistant", "tool_calls": [broken]}, 1)
    with pytest.raises(SessionError, match=f"a tool call must be {TOOL_CALL_SHAPE.replace('{', '.').replace('}', '.')}"):
        tool_call(broken)
    with pytest.raises(TraceError, match="call 1 of 'calls' must be"):
        _calls([broken])
    with pytest.raises(BackendReplyError, match=r"tool_calls\[0\] needs a function with a string name"):
        parse_completion({"choices": [{"message": {"content": None, "tool_calls": [broken]}}]}, "test")


def test_the_wire_shapes_are_read_in_one_module() -> None:
    """No other module of arc_ref or of the evaluation layer takes a tool call's function apart by hand."""
    readers = []
    for folder in (ROOT / "arc_ref", ROOT / "eval"):
        for path in folder.rglob("*.py"):
            if path.name == "openai_wire.py":
                continue
            text = path.read_text(encoding="utf-8")
            for needle in ('call.get("function"', "call.get('function'", 'body.get("error"'):
                if needle in text:
                    readers.append(f"{path.relative_to(ROOT)}: {needle}")
    assert readers == []


def test_serve_scripted_and_the_proxy_share_one_error_body() -> None:
    pytest.importorskip("starlette")
    from arc_eval.backends import scripted_server

    status, body = scripted_server._error(413, "too large", "BadRequestError")
    assert status == 413 and body == error_body("too large", "BadRequestError", 413)
    assert json.dumps(body)  # JSON as sent


def test_a_tool_s_strict_and_defer_loading_are_kept_where_set_and_refused_when_not_boolean() -> None:
    """The config's tools keep a function's ``strict`` and ``defer_loading`` and a tool's own ``defer_loading`` (the
    function's where it sets none), as vLLM 0.32 keeps them; null is unset; any other value is refused."""
    from arc_ref.config import parse_tools
    from arc_ref.errors import ConfigError
    from arc_ref.message import ToolSpec

    tools = parse_tools([
        {"type": "function", "function": {"name": "a", "strict": True, "defer_loading": None}},
        {"type": "function", "function": {"name": "b"}, "defer_loading": False},
        {"type": "function", "function": {"name": "c", "defer_loading": True}, "defer_loading": False},
    ])
    assert tools == (ToolSpec("a", strict=True), ToolSpec("b", defer_loading=False, listed_defer_loading=False),
                     ToolSpec("c", defer_loading=True, listed_defer_loading=False))
    assert tools[2].openai() == {"type": "function", "function": {"name": "c", "defer_loading": True},
                                 "defer_loading": False}
    assert tools[0].server_dump() == {"type": "function", "function": {
        "name": "a", "description": None, "parameters": None, "strict": True}}
    for tool, shown in (({"name": "a", "strict": "true"}, "function.strict"),
                        ({"name": "a", "defer_loading": 1}, "function.defer_loading")):
        with pytest.raises(ConfigError, match=f"tool 1's {shown} must be true, false or null"):
            parse_tools([{"type": "function", "function": tool}])
    with pytest.raises(ConfigError, match="tool 1's defer_loading must be true, false or null, got \"no\""):
        parse_tools([{"type": "function", "function": {"name": "a"}, "defer_loading": "no"}])
    with pytest.raises(ConfigError, match="unknown function key"):
        parse_tools([{"type": "function", "function": {"name": "a", "cache_control": {}}}])
