"""Tool-calling mode (spec/rendering.md section 13) on a small tool-capable template and tokenizer made here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arc_ref.config import Config, make_setup, preset
from arc_ref.errors import ConfigError, InvalidEvent
from arc_ref.machine import (
    AgentTurn,
    ArcState,
    Observe,
    ToolResult,
    ToolTurn,
    agent_turn,
    init,
    observe,
    step,
    tool_result,
    tool_turn,
    view,
)
from arc_ref.message import ToolCall
from arc_ref.text import halving_lengths
from arc_ref.tools import ARC_TOOLS, call_command, clipped_arguments
from tests.core.test_tokenizers import _train_tokenizer_json

TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{{ messages[0].content }}\nTools:{% for tool in tools %}\n"
    "{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}{% if not tools %}<|im_start|>system\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% elif message.role == 'tool' %}<|im_start|>tool {{ message.tool_call_id }}\n{{ message.content }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}\n<|im_start|>call {{ call.function.name }}"
    " {{ call.function.arguments | tojson }}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ENVIRONMENT = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("toolmodel")
    _train_tokenizer_json(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOL_TEMPLATE}), encoding="utf-8")
    return str(directory)


def tool_config_fields(model_dir: str) -> dict[str, Any]:
    """The overrides of ``tool_config`` (as a trace's config line carries them)."""
    return {
        "tokenizer": f"hf-dir:{model_dir}", "chat_format": "template", "action_mode": "tools", "tools": ENVIRONMENT,
        "context_limit": 9000, "recent_budget": 1200, "summary_budget": 900, "page_budget": 900,
        "recall_budget": 400, "overhead": 40, "signature_chars": 160, "capacity": 400,
    }


def tool_config(model_dir: str, **overrides: Any) -> Config:
    settings = tool_config_fields(model_dir)
    settings.update(overrides)
    return preset("minimal", **settings)


def pairs_hold(state: ArcState) -> None:
    messages = view(state).chat_messages()
    called = [call["id"] for message in messages for call in message.get("tool_calls", ())]
    for position, message in enumerate(messages):
        if message["role"] == "tool":
            earlier = [call["id"] for m in messages[:position] for call in m.get("tool_calls", ())]
            assert message["tool_call_id"] in earlier
    answered = [message["tool_call_id"] for message in messages if message["role"] == "tool"]
    assert set(called) - {call.call_id for call in state.pending} <= set(answered)


def test_a_tool_turn_answers_arc_calls_and_hands_the_others_to_the_environment(model_dir: str) -> None:
    state = init(tool_config(model_dir))
    view_tools = view(state).tools()
    assert view_tools is not None and [tool["function"]["name"] for tool in view_tools] == [
        *(tool.name for tool in ARC_TOOLS), "read_file"]
    calls = (ToolCall("c1", "read_file", '{"path": "a.txt"}'), ToolCall("c2", "catalog-first", "{}"),
             ToolCall("c3", "rm_rf", "{}"))
    state, turn = tool_turn(state, ToolTurn("Reading.", calls))
    assert [call.call_id for call in turn.environment_calls] == ["c1"] and state.pending == (calls[0],)
    assert [(answer.call_id, answer.content) for answer in turn.answered] == [
        ("c2", "catalog-first: the catalog is empty"), ("c3", "rm_rf: no tool has this name; not run")]
    with pytest.raises(InvalidEvent, match="c1 of the previous turn have no result yet"):
        tool_turn(state, ToolTurn("again", ()))
    with pytest.raises(InvalidEvent, match="no pending tool call has id 'c9' \\(pending: c1\\)"):
        tool_result(state, ToolResult("c9", "x"))
    state, observed = tool_result(state, ToolResult("c1", "hello world"))
    assert observed.verbatim and state.records[0].signature == 'read_file {"path": "a.txt"}' and not state.pending
    results = [message for message in view(state).chat_messages() if message["role"] == "tool"]
    # layout "lean" (spec/rendering.md section 14): the call's message shows the action, the result only its code;
    # ARC's answers after it, each in its call's place (section 13: a template may pair results by position)
    assert results == [{"role": "tool", "tool_call_id": "c1", "content": "Observation (rc=0):\nhello world"},
                       {"role": "tool", "tool_call_id": "c2", "content": "catalog-first: the catalog is empty"},
                       {"role": "tool", "tool_call_id": "c3", "content": "rm_rf: no tool has this name; not run"}]
    state, recalled = tool_turn(state, ToolTurn("", (ToolCall("c4", "_recall", json.dumps({"id": observed.obs_id})),)))
    assert recalled.recalls[0].payload == "hello world" and "[recall" in recalled.answered[0].response
    pairs_hold(state)


def tool_order(state: ArcState) -> list[str]:
    return [message["tool_call_id"] for message in view(state).chat_messages() if message["role"] == "tool"]


def test_arc_answers_take_their_calls_places_among_the_results(model_dir: str) -> None:
    """spec/rendering.md section 13: a template that pairs results with calls by position (Qwen3's writes no call
    id: review h30 F8) reads each of ARC's answers as its own call's: an answer joins H with the turn when no
    environment call comes before its call, otherwise right after the results of the environment calls before it."""
    calls = (ToolCall("a0", "catalog-first", "{}"), ToolCall("e1", "read_file", '{"path": "1"}'),
             ToolCall("a2", "catalog-next", "{}"), ToolCall("e3", "read_file", '{"path": "3"}'),
             ToolCall("a4", "rm_rf", "{}"))
    state, turn = tool_turn(init(tool_config(model_dir)), ToolTurn("", calls))
    assert [answer.call_id for answer in turn.answered] == ["a0", "a2", "a4"]  # all answered at once, as before
    assert tool_order(state) == ["a0"]
    in_order, _ = tool_result(state, ToolResult("e1", "one"))
    assert tool_order(in_order) == ["a0", "e1", "a2"]
    in_order, _ = tool_result(in_order, ToolResult("e3", "three"))
    assert tool_order(in_order) == ["a0", "e1", "a2", "e3", "a4"] and not in_order.waiting_answers
    pairs_hold(in_order)
    # results in another order are kept in the agent's order; an answer still waits for every earlier call's result
    crossed, _ = tool_result(state, ToolResult("e3", "three"))
    assert tool_order(crossed) == ["a0", "e3"]
    crossed, _ = tool_result(crossed, ToolResult("e1", "one"))
    assert tool_order(crossed) == ["a0", "e3", "e1", "a2", "a4"]
    pairs_hold(crossed)


def test_a_result_shares_r_with_the_answers_that_wait_for_it(model_dir: str) -> None:
    """The answers waiting for a result are part of its unit: the result's share of R leaves room for them, so the
    unit (turn, answers, result) costs at most R once they join H, at the longest output shown verbatim."""
    config = tool_config(model_dir, recent_budget=300)
    calls = (ToolCall("e1", "read_file", '{"path": "1"}'), ToolCall("a2", "_recall_meta", '{"id": "§9"}'))
    state, _ = tool_turn(init(config), ToolTurn("", calls))
    assert tool_order(state) == []

    def unit_tokens(length: int) -> tuple[bool, int]:
        after, observed = tool_result(state, ToolResult("e1", "word " * length))
        start = max(number for number, entry in enumerate(after.live) if type(entry).__name__ == "ToolTurnEntry")
        assert tool_order(after) == ["e1", "a2"]
        return observed.verbatim, sum(entry.message.tokens for entry in after.live[start:])

    low, high = 0, 400  # the longest output still shown verbatim
    assert unit_tokens(low)[0] and not unit_tokens(high)[0]
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if unit_tokens(middle)[0] else (low, middle)
    assert unit_tokens(low)[1] <= config.recent_budget


def test_text_events_and_tool_events_belong_to_their_modes(model_dir: str) -> None:
    state = init(tool_config(model_dir))
    with pytest.raises(InvalidEvent, match="belongs to action_mode 'text'"):
        observe(state, Observe("ls", "x"))
    with pytest.raises(InvalidEvent, match="belongs to action_mode 'text'"):
        agent_turn(state, AgentTurn("t", "ls"))
    text_state = init(preset("minimal"))
    with pytest.raises(InvalidEvent, match="needs action_mode 'tools'"):
        step(text_state, ToolTurn("t", ()))
    with pytest.raises(InvalidEvent, match="needs action_mode 'tools'"):
        step(text_state, ToolResult("c", "x"))
    with pytest.raises(InvalidEvent, match="must be distinct and non-empty"):
        tool_turn(state, ToolTurn("t", (ToolCall("c", "ls", "{}"), ToolCall("c", "ls", "{}"))))
    with pytest.raises(InvalidEvent, match="calls must be a tuple of ToolCall"):
        tool_turn(state, ToolTurn("t", [ToolCall("c", "ls", "{}")]))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["read_file", "_recall", "no_such_tool"])
def test_arguments_whose_json_holds_a_lone_surrogate_refuse_the_turn(model_dir: str, name: str) -> None:
    """The arguments' JSON text decodes to a lone surrogate: not text (rendering.md §13); before, rendering the
    view (or the note echoing the argument) raised a TypeError in the tokenizer: a traceback, replay exit 70."""
    state = init(tool_config(model_dir))
    for arguments in ('{"path": "\\ud800"}', '{"\\udfff": "a"}', '["ok", {"deep": ["\\ud83d"]}]', '"\\udc00"'):
        with pytest.raises(InvalidEvent, match=r"are not text: their JSON holds a lone surrogate escape \(U\+D"):
            tool_turn(state, ToolTurn("t", (ToolCall("c1", name, arguments),)))
    state, turn = tool_turn(state, ToolTurn("t", (ToolCall("c1", name, '{"path": "\\ud83d\\ude00 \\\\ud800"}'),)))
    assert view(state).tokens > 0  # a surrogate pair is a character, an escaped backslash is text


def test_a_lone_surrogate_in_arguments_is_an_error_line_of_replay(model_dir: str) -> None:
    from arc_ref.trace import encode, replay
    config_line = encode({"op": "config", "preset": "minimal", **tool_config_fields(model_dir)})
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "\\ud800"}'}}
    outputs = list(replay([config_line, encode({"op": "tool_turn", "thought": "", "calls": [call]}), '{"op": "view"}']))
    assert outputs[1] == {"op": "error", "line": 2, "message": "the arguments of tool call 'c1' are not text: their JSON"
                          " holds a lone surrogate escape (U+D800)"}
    assert outputs[2]["op"] == "view"


@pytest.mark.parametrize("layout", ["paper", "lean"])
def test_a_turn_and_its_results_fit_r_and_fold_as_one_unit(model_dir: str, layout: str) -> None:
    """Layout paper: H <= R after every event. Layout lean: the bound is on the sum (S, G, U, H within M + R + P +
    Q), every unit of H within R (spec/rendering.md 11.1)."""
    config = tool_config(model_dir, layout=layout)
    state = init(config)
    number = 0
    for round_ in range(12):
        calls = tuple(ToolCall(f"c{number + k}", "read_file", json.dumps({"path": f"f{round_}-{k}"})) for k in range(3))
        number += 3
        state, turn = tool_turn(state, ToolTurn(f"round {round_} " * 20, calls))
        for call in turn.environment_calls:
            state, result = tool_result(state, ToolResult(call.call_id, f"content {call.call_id} " * (40 * (round_ % 3))))
            tokens = sum(entry.message.tokens for entry in state.live)
            if layout == "paper":
                assert tokens <= config.recent_budget
            else:
                parts = [0 if message is None else message.tokens
                         for message in (state.summary.message, state.catalog_message, state.recall_message)]
                assert sum(parts) + tokens <= (config.summary_budget + config.recent_budget + config.page_budget
                                               + config.recall_budget)
            pairs_hold(state)
        shown = view(state)
        assert shown.tokens == state.setup.tokenizer.count(shown.text()) <= shown.budget
    assert state.summary.items, "older units were folded into S"


def test_a_turn_too_large_for_r_is_refused_with_the_reason(model_dir: str) -> None:
    state = init(tool_config(model_dir))
    calls = tuple(ToolCall(f"c{k}", "read_file", "{}") for k in range(40))
    with pytest.raises(InvalidEvent, match="a tool turn with 40 call\\(s\\) cannot fit recent_budget R = 1200"):
        tool_turn(state, ToolTurn("t", calls))


def test_a_call_too_long_for_r_is_shown_with_its_long_strings_clipped(model_dir: str) -> None:
    """The model's own call whose arguments cannot fit R (a file written in one call) is not refused (review s12 h4
    MAJOR 1: the agent got a 400 for the model's reply, and its retry the same): the text is clipped whole, then
    every string value longer than the first length of halving_lengths that fits (spec/rendering.md section 13);
    the environment gets the call as the model made it, and the view stays within R and counts exactly."""
    state = init(tool_config(model_dir))
    body = "".join(f"line {number}: print('hello world')\n" for number in range(600))
    arguments = json.dumps({"path": "a.py", "nested": [{"text": body}], "mode": 7})
    call = ToolCall("c1", "read_file", arguments)
    state, result = tool_turn(state, ToolTurn("I will write the file now. " * 20, (call,)))
    assert result.environment_calls == (call,)  # the environment runs the call as made
    entry = state.live[-1]
    shown = entry.message.tool_calls[0]
    decoded = json.loads(shown.arguments)
    assert decoded["path"] == "a.py" and decoded["mode"] == 7 and entry.message.content == "…"
    kept = decoded["nested"][0]["text"]
    assert kept.endswith("…") and body.startswith(kept[:-1]) and 0 < len(kept) < len(body)
    lengths = halving_lengths(len(body))
    at = lengths.index(len(kept) - 1)
    assert at >= 1 and shown.arguments == clipped_arguments(arguments, lengths[at])
    left = state.config.recent_budget - state.setup.result_reserve("c1")
    assert entry.message.tokens <= left
    longer = ToolCall("c1", "read_file", clipped_arguments(arguments, lengths[at - 1]))
    assert state.setup.message("assistant", "…", (longer,)).tokens > left  # the first length that fits
    shown_view = view(state)
    assert shown_view.tokens == state.setup.tokenizer.count(shown_view.text()) <= shown_view.budget
    state, stored = tool_result(state, ToolResult("c1", "written"))
    assert stored.verbatim


def test_a_large_result_is_shown_as_its_stub_within_the_unit(model_dir: str) -> None:
    state = init(tool_config(model_dir))
    state, _ = tool_turn(state, ToolTurn("", (ToolCall("c1", "read_file", "{}"),)))
    state, result = tool_result(state, ToolResult("c1", "big file " * 2000))
    assert not result.verbatim and "is too large for the recent window" in view(state).chat_messages()[-1]["content"]
    assert state.records[-1].content == "big file " * 2000


def test_tool_mode_configuration_is_checked(model_dir: str) -> None:
    with pytest.raises(ConfigError, match="the smallest tool turn"):
        make_setup(tool_config(model_dir, recent_budget=60, stub_cap=50))
    setup = make_setup(tool_config(model_dir))
    assert 0 < setup.tool_reserve < setup.tool_unit_floor <= setup.config.recent_budget


@pytest.mark.parametrize(
    ("name", "arguments", "word", "argument"),
    [
        ("_recall", '{"id": "§01-3 trailing"}', "_recall", "§01-3"),
        ("catalog-page", '{"page": 2}', "catalog-page", "2"),
        ("catalog-page", '{"other": "x", "page": "3"}', "catalog-page", "3"),
        ("_recall", "§01-3", "_recall", "§01-3"),
        ("_recall", "", "_recall", None),
        ("catalog-first", "{}", "catalog-first", None),
        ("_recall", '"§02-1"', "_recall", "§02-1"),
        ("_recall", " \t\x0b\x0c\r\n", "_recall", None),  # ASCII whitespace only: no value
        ("_recall", "\u00a0", "_recall", "\u00a0"),  # a no-break space is a character (rendering.md §1), not blank
        ("_recall", "\u2028§01-3", "_recall", "\u2028§01-3"),
        ("_recall", '{"id": 1.0}', "_recall", "1.0"),  # a value that is not a string: its JSON text
        ("_recall", '{"id": ["§01-3", 2]}', "_recall", '["§01-3",'),
        ("_recall", '{"id": "a", "id": "b"}', "_recall", "b"),  # a repeated key: its last value
        ("_recall", "{not json", "_recall", "{not"),  # not JSON: the text itself is the one value
    ],
)
def test_a_call_to_an_arc_tool_is_its_command(name: str, arguments: str, word: str, argument: str | None) -> None:
    command = call_command(ToolCall("c", name, arguments))
    assert (command.word, command.argument) == (word, argument)
