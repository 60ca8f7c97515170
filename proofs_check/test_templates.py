"""A4, Lemma 2, Theorem claim 1 under a served model's chat template: the view counts as the server counts.

Every property here runs on Qwen3's real tokenizer and chat template (../shared/data/qwen3-tokenizer; skipped
with a message when absent) and compares with an independent oracle: the view's OpenAI messages and tools,
preprocessed as vLLM does and rendered by ``transformers``' own ``apply_chat_template``, then encoded by
``transformers``' tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from arc_ref.config import Config
from arc_ref.errors import BudgetViolation, CapacityExceeded, InvalidEvent
from arc_ref.machine import (
    ArcState, ToolResult, ToolTurn, UserMessage, init, tool_result, tool_turn, user_message, view,
)
from arc_ref.history import (ToolTurnEntry, stub_message_parts, tool_note_entry, tool_result_entry, tool_turn_entry,
                             verbatim_head)
from arc_ref.store import make_record
from arc_ref.message import ToolCall
from arc_ref.recall import reassemble
from arc_ref.text import clipped, halving_lengths
from arc_ref.tools import longest_string_value
from arc_ref.view import View
from proofs_check.harness import apply, event_lists, numbered_calls, resolve_stored, recent_allowance
from proofs_check.registry import proves
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, qwen3_with_template, transformers_prompt
from proofs_check.strategies import ENVIRONMENT_TOOLS, configs, tool_steps

QWEN3 = qwen3_dir()
pytestmark = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)


def template_configs(action_mode: str = "text", **fixed: Any) -> st.SearchStrategy[Config]:
    """Random valid configurations on Qwen3's tokenizer and its own chat template."""
    return configs(fixed={"tokenizer": f"hf-dir:{QWEN3}", "chat_format": "template", "action_mode": action_mode,
                          **fixed})


def check_view_against_the_server(state: ArcState) -> View:
    """The view's text and count equal the oracle's; every component within its budget; the parts add up."""
    assert QWEN3 is not None
    config = state.config
    shown = view(state)
    text, server_count = transformers_prompt(QWEN3, shown.chat_messages(), shown.tools(), **dict(config.template_kwargs))
    assert shown.text() == text
    assert shown.tokens == server_count
    assert server_count <= state.setup.budget <= state.setup.limit
    parts = shown.components
    assert parts.prefix <= state.setup.prefix_tokens
    assert parts.summary <= config.summary_budget
    assert parts.recent <= recent_allowance(config, parts)
    assert parts.catalog <= config.page_budget
    assert parts.recall <= config.recall_budget
    assert parts.overhead == state.setup.generation_tokens <= config.overhead
    assert sum(parts.as_dict().values()) == server_count  # the sum of the parts is the serialized count
    return shown


@given(template_configs(), event_lists())
@proves("L2", "T1", "A4")
def test_template_views_count_as_the_server_counts(config: Config, events: list[object]) -> None:
    """Before every call of a random trace, tokens(view) = the server's render-and-encode <= K <= L."""
    state = init(config)
    for event in [*events, None]:
        check_view_against_the_server(state)
        if event is not None:
            state = apply(state, event)  # type: ignore[arg-type]


@given(template_configs(), st.text(alphabet="ab \n</think>§", max_size=40), st.text(alphabet="ab \n", max_size=12))
@proves("A4")
def test_template_assistant_turn_last_costs_its_think_block(config: Config, thought: str, action: str) -> None:
    """An agent turn that ends the view gets Qwen3's empty think block; the view's count follows it exactly."""
    from arc_ref.machine import AgentTurn, agent_turn

    state = init(config)
    state, _ = agent_turn(state, AgentTurn(thought, action))
    shown = check_view_against_the_server(state)
    assert "<think>" in shown.text().rsplit("<|im_start|>assistant\n", 2)[1]


# --- tool-calling mode ---------------------------------------------------------------------------------

def check_pairs(shown: View) -> None:
    """No tool result without its call before it in the view, no answered call without its result in it; the
    results after an assistant turn answer its calls in call order (rendering.md 13: each of ARC's answers in its
    call's place, since Qwen3's template pairs results with calls by position; the callers give the environment's
    results in call order)."""
    messages = shown.chat_messages()
    for position, message in enumerate(messages):
        calls = [call["id"] for call in message.get("tool_calls", ())]
        following: list[str] = []
        for later in messages[position + 1:] if calls else ():
            if later["role"] != "tool":
                break
            following.append(later["tool_call_id"])
        assert following == calls[:len(following)], (calls, following)
    called: dict[str, int] = {}
    for position, message in enumerate(messages):
        for call in message.get("tool_calls", ()):
            called[call["id"]] = position
        if message["role"] == "tool":
            assert message["tool_call_id"] in called, "a tool result whose call was compacted away"


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS), tool_steps())
@proves("L2", "T1", "A4")
def test_tool_mode_views_count_as_the_server_counts(config: Config, steps: list[Any]) -> None:
    """Tool mode: tool listing in the system turn, assistant tool_calls, results inside user turns, think
    blocks on final assistant turns: every view equals the server's render-and-encode and stays <= K; a call
    and its result are never separated by compaction."""
    state = init(config)
    check_view_against_the_server(state)
    number = 0
    for thought, calls, results, view_while_pending, user in steps:
        made = []
        for name, arguments in calls:
            number += 1
            made.append(ToolCall(f"call_{number}", name, resolve_stored(state, arguments)))
        try:
            state, turn = tool_turn(state, ToolTurn(thought, tuple(made)))
        except InvalidEvent as refused:
            assert "cannot fit recent_budget R" in str(refused)
            continue
        shown = check_view_against_the_server(state)
        check_pairs(shown)
        assert [call.call_id for call in turn.environment_calls] == [
            call.call_id for call in made if call.name in ("read_file", "ls")]
        assert {answer.call_id for answer in turn.answered} == {
            call.call_id for call in made if call.name not in ("read_file", "ls")}
        for call, result in zip(turn.environment_calls, results):
            if view_while_pending:
                check_view_against_the_server(state)
            try:
                state, _ = tool_result(state, ToolResult(call.call_id, result))
            except CapacityExceeded:
                return
        shown = check_view_against_the_server(state)
        check_pairs(shown)
        assert not state.pending
        called = {call["id"] for message in shown.chat_messages() for call in message.get("tool_calls", ())}
        answered = {message["tool_call_id"] for message in shown.chat_messages() if message["role"] == "tool"}
        assert called == answered  # every call in the view has its result beside it
        if user is not None:  # a user message after the goal: a unit of its own, after the results
            try:
                state, _ = user_message(state, UserMessage(user))
            except CapacityExceeded:
                return
            shown = check_view_against_the_server(state)
            check_pairs(shown)


def spec_clip(arguments: str, keep: int) -> str:
    """spec/rendering.md section 13's clip_arguments, written from its text: the object the server reads, every
    string value longer than ``keep`` replaced by clipped(value, keep), written as tojson writes it."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return clipped(item, keep) if len(item) > keep else item
        if isinstance(item, list):
            return [walk(element) for element in item]
        if isinstance(item, dict):
            return {key: walk(element) for key, element in item.items()}
        return item

    clipped_value = walk(value)
    return arguments if clipped_value == value else json.dumps(clipped_value, ensure_ascii=False)


_LONG_VALUE = st.builds(lambda piece, times: piece * times, st.text(alphabet="ab \n\"\\§é中<|>", min_size=1, max_size=24),
                        st.integers(0, 400))


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS),
       st.lists(st.tuples(st.sampled_from(("read_file", "ls", "_recall")), _LONG_VALUE, st.integers(0, 60)),
                min_size=1, max_size=6),
       st.text(alphabet="ab \n<|im_end|>", max_size=300), st.lists(_LONG_VALUE, min_size=6, max_size=6))
@proves("L2", "T1", "A4")
def test_a_call_too_long_for_r_is_shown_clipped_and_counts_as_the_server_counts(
        config: Config, calls: list[tuple[str, str, int]], thought: str, outputs: list[str]) -> None:
    """spec/rendering.md section 13: a turn's message gets what R leaves after ARC's answers and each result's full
    reserve, else (when even its text clipped whole and every string of its calls' arguments clipped to an
    ellipsis cannot fit) after each result's stub frame only; it is refused only when it cannot fit even then.
    Within that room its calls are shown with every string value clipped at the first length of halving_lengths
    whose message fits (all values alike, keys and numbers kept), the environment gets the calls as made, the
    results then fit the unit within R, and every view equals the server's render-and-encode within K."""
    state = init(config)
    made = tuple(ToolCall(f"call_{number}", name, json.dumps(
        {"path": value[:short], "n": short, "body": [value, {"inner": value[short:]}]}, ensure_ascii=short % 2 == 0))
        for number, (name, value, short) in enumerate(calls, 1))
    setup = state.setup
    budget = config.recent_budget
    shown_calls = tuple(setup.shown_call(call) for call in made)
    environment = tuple(call for call in made if call.name != "_recall")
    full = sum(setup.result_reserve(call.call_id) for call in environment)
    frames = sum(setup.bare_result_reserve(call.call_id) for call in environment)
    least_text = clipped(setup.show(thought), 0)
    least = tuple(ToolCall(call.call_id, call.name, spec_clip(call.arguments, 0)) for call in shown_calls)
    try:
        after, turn = tool_turn(state, ToolTurn(thought, made))
    except InvalidEvent as refused:
        assert "cannot fit recent_budget R" in str(refused)
        if len(environment) == len(made):  # no answer of ARC's takes a share of R
            assert setup.message("assistant", least_text, least).tokens > budget - frames
        event("refused")
        return
    assert turn.environment_calls == environment
    start = max(number for number, item in enumerate(after.live) if isinstance(item, ToolTurnEntry))
    entry = after.live[start]
    answers = [*after.live[start + 1:], *(held for _, held in after.waiting_answers)]  # in H, or waiting (13)
    assert len(answers) == len(turn.answered)
    answered = sum(answer.message.tokens for answer in answers)
    bare = setup.message("assistant", least_text, least).tokens > budget - answered - full
    left = budget - answered - (frames if bare else full)
    assert entry.message.tokens <= left
    shown = entry.message.tool_calls
    lengths = halving_lengths(max(longest_string_value(call.arguments) for call in shown_calls))
    at = [keep for keep in lengths if shown == tuple(ToolCall(call.call_id, call.name, spec_clip(
        call.arguments, keep)) for call in shown_calls)]
    assert at, "every value clipped at one length of halving_lengths"
    if shown != shown_calls:  # the first length that fits (a longer one did not, with the text clipped whole)
        assert entry.message.content == least_text
        longer = lengths[lengths.index(at[0]) - 1]
        assert setup.message("assistant", least_text, tuple(ToolCall(call.call_id, call.name, spec_clip(
            call.arguments, longer)) for call in shown_calls)).tokens > left
    event(("frames reserved, " if bare else "") + ("arguments clipped" if shown != shown_calls else "shown whole"))
    check_pairs(check_view_against_the_server(after))
    for call, output in zip(environment, outputs):
        try:
            after, stored = tool_result(after, ToolResult(call.call_id, output))
        except CapacityExceeded:
            return
        if stored.folded == 0:  # the unit is still H's last (a fold may take it once complete)
            unit = [*after.live[max(number for number, item in enumerate(after.live)
                                    if isinstance(item, ToolTurnEntry)):],
                    *(held for _, held in after.waiting_answers)]  # its answers in H or waiting (13)
            assert len(unit) == 2 + len(turn.answered) + environment.index(call)
            assert unit[0].message.tool_calls == shown and sum(item.message.tokens for item in unit) <= budget
        check_pairs(check_view_against_the_server(after))


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS), tool_steps(max_turns=5))
@proves("A5", "L4", "T4", "L2")
def test_tool_mode_recall_is_exact_with_user_messages(config: Config, steps: list[Any]) -> None:
    """After random tool turns with user messages after the goal, every text stored (a tool result or a user
    message) is read back exactly by ARC's _recall then _recall-next calls under the id it got, each view <= K."""
    state = init(config)
    sent: list[tuple[str, str]] = []  # (the id a text was stored under, the text as given)
    number = 0
    for thought, calls, results, _, user in steps:
        made = []
        for name, arguments in calls:
            number += 1
            made.append(ToolCall(f"call_{number}", name, resolve_stored(state, arguments)))
        try:
            state, turn = tool_turn(state, ToolTurn(thought, tuple(made)))
        except InvalidEvent:
            continue
        try:
            for call, result in zip(turn.environment_calls, results):
                state, stored = tool_result(state, ToolResult(call.call_id, result))
                sent.append((stored.obs_id, result))
            if user is not None:
                state, stored = user_message(state, UserMessage(user))
                sent.append((stored.obs_id, user))
        except CapacityExceeded:
            break
    if state.pending:
        return
    for obs_id, text in sent:
        payloads: list[str] = []
        word = "_recall"
        while True:
            number += 1
            state, turn = tool_turn(state, ToolTurn("", (ToolCall(f"call_{number}", word, f'{{"id": "{obs_id}"}}'),)))
            assert view(state).tokens <= state.setup.budget <= state.setup.limit
            if not turn.recalls:
                break
            payloads.append(turn.recalls[0].payload)
            if turn.recalls[0].chunk >= turn.recalls[0].chunks:
                break
            word = "_recall-next"
        assert reassemble(payloads) == text  # D: the chunks of S(O) with S^-1 applied (rendering.md 7.1)


# --- a template that vLLM hands text parts ("openai" content format) ---------------------------------

PARTS_TEMPLATE = (
    "{%- macro text_of(content) -%}{%- if content is string -%}{{- content -}}{%- else -%}"
    "{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}{%- endmacro -%}"
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ text_of(messages[0].content) }}\n\n"
    "{% endif %}# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ text_of(messages[0].content) }}<|im_end|>\n"
    "{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{% if message.content %}[{{ text_of(message.content) }}]{% endif %}"
    "{%- if message.tool_calls %}{% for call in message.tool_calls %}\n<tool_call>\n{\"name\": \""
    "{{ call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A Qwen2.5-VL-like template: a macro loops over a message's content, so vLLM 0.32 hands it every content but a
tool result's as text parts, and ``{% if message.content %}`` is true of an empty content (one empty part)."""


@given(st.data(), tool_steps())
@proves("L2", "T1", "A4")
def test_text_parts_views_count_as_the_server_counts(data: st.DataObject, steps: list[Any]) -> None:
    """Tool mode on a template vLLM hands text parts: every view's text and count equal the server's (its content
    wrapped as vLLM wraps it), within K."""
    directory = qwen3_with_template(PARTS_TEMPLATE, "arc-parts-template-")
    config = data.draw(configs(fixed={"tokenizer": f"hf-dir:{directory}", "chat_format": "template",
                                      "action_mode": "tools", "tools": ENVIRONMENT_TOOLS}))
    state = init(config)

    def check() -> None:
        shown = view(state)
        text, server_count = transformers_prompt(Path(directory), shown.chat_messages(), shown.tools(), True,
                                                 **dict(config.template_kwargs))
        assert shown.text() == text
        assert shown.tokens == server_count <= state.setup.budget <= state.setup.limit

    check()
    called = 0
    for thought, calls, results, _, user in steps:
        made = numbered_calls(state, calls, called)
        called += len(made)
        try:
            state, turn = tool_turn(state, ToolTurn(thought, made))
        except InvalidEvent:
            continue  # a turn too big for R, refused whole
        check()
        try:
            for call, result in zip(turn.environment_calls, results):
                state, _ = tool_result(state, ToolResult(call.call_id, result))
            check()
            if user is not None:
                state, _ = user_message(state, UserMessage(user))
                check()
        except CapacityExceeded:
            return  # N_max reached


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS),
       st.lists(st.tuples(st.sampled_from(("read_file", "ls")), _LONG_VALUE), min_size=1, max_size=3),
       st.text(alphabet="ab \n", max_size=200))
@proves("A4")
def test_a_tool_turn_at_exactly_its_budget_keeps_its_text_or_its_calls_unclipped(
        config: Config, calls: list[tuple[str, str]], thought: str) -> None:
    """spec/rendering.md section 13, to the token: a turn whose message costs exactly its budget is shown whole;
    when its text clipped whole with every string of its calls clipped at a length of halving_lengths costs
    exactly the budget (and no longer length fits), the calls are shown clipped at that length, not shorter
    (h37 sweep: history.py mutants 40 and 28, `<=` made `<` in tool_turn_entry's two fit tests, passed every
    property; test_a_call_too_long_for_r_... checks the first length that fits only below the budget)."""
    setup = init(config).setup
    made = tuple(ToolCall(f"call_{number}", name, json.dumps({"path": value[:8], "body": value}))
                 for number, (name, value) in enumerate(calls, 1))
    shown_calls = tuple(setup.shown_call(call) for call in made)
    text = setup.show(thought)
    whole = setup.message("assistant", text, shown_calls).tokens
    assert tool_turn_entry(setup, 1, thought, made, whole).message == setup.message("assistant", text, shown_calls)
    least_text = clipped(text, 0)
    lengths = halving_lengths(max(longest_string_value(call.arguments) for call in shown_calls))
    unclipped = min(setup.message("assistant", clipped(text, keep), shown_calls).tokens
                    for keep in halving_lengths(len(text)))  # the least any clip of the text alone costs
    for keep in lengths[1:]:
        cut = tuple(ToolCall(call.call_id, call.name, spec_clip(call.arguments, keep)) for call in shown_calls)
        budget = setup.message("assistant", least_text, cut).tokens
        if budget < unclipped:  # no clip of the text alone fits: the calls are clipped, at this length
            entry = tool_turn_entry(setup, 1, thought, made, budget)
            assert entry.message.tool_calls == cut and entry.message.content == least_text
            event("calls clipped at exactly the budget")
            return


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS), _LONG_VALUE, st.integers(0, 3))
@proves("A4")
def test_a_tool_result_at_exactly_its_share_or_its_least_room_is_shown_as_the_spec_states(
        config: Config, output: str, spare: int) -> None:
    """spec/rendering.md section 13, to the token: a result whose verbatim message costs exactly its share is
    shown verbatim; a stub that costs exactly the share is shown (the least room, however large, is not looked
    at); a stub over the share gives way to the verbatim message when that costs exactly the least room (h37
    sweep: history.py mutants 31, 32 and 48, tool_result_entry's `<=` made `<` and `>` made `>=`, passed every
    property in the sweep's set, tests/core and the vectors). A share of 1 token, too small to try the verbatim
    message in, still gives it when it fits the least room (mutants 47 and 54 of that branch). With the share one
    token below the stub and the least room exactly the stub's cost (the verbatim message over it), the stub
    z_j itself is shown: the first of the stub lines that costs <= the least room (h38 sweep: history.py mutant
    49, that loop's `<=` made `<`, a shorter line shown instead, passed h33's sweep set, the vectors and
    tests/core)."""
    setup = init(config).setup
    call = ToolCall("call_1", "read_file", '{"path": "a.txt"}')
    record = make_record(setup, 1, call.action(), output, 0, 0)
    show_id = setup.show(call.call_id)
    whole = setup.message("tool", verbatim_head(setup, record) + record.shown, (), show_id).tokens
    stub = setup.message("tool", stub_message_parts(setup, record)[0], (), show_id).tokens
    assert tool_result_entry(setup, 1, call.call_id, record, whole).verbatim
    if stub >= whole:
        event("the stub costs no less than the result")
        return
    at_share = tool_result_entry(setup, 1, call.call_id, record, stub, whole + spare)
    assert not at_share.verbatim and at_share.message.tokens == stub
    over = tool_result_entry(setup, 1, call.call_id, record, stub - 1, whole)
    assert over.verbatim and over.message.tokens == whole
    tiny = tool_result_entry(setup, 1, call.call_id, record, 1, whole)  # the share too small to try it in
    assert tiny.verbatim and tiny.message.tokens == whole
    # the verbatim message over the least room, z_j's stub message at exactly it: z_j, not a shorter line
    at_least = tool_result_entry(setup, 1, call.call_id, record, stub - 1, stub)
    assert not at_least.verbatim and at_least.message.tokens == stub
    assert at_least.message.content == stub_message_parts(setup, record)[0]


@given(template_configs("tools", tools=ENVIRONMENT_TOOLS), st.lists(_LONG_VALUE, min_size=1, max_size=3))
@proves("A4")
def test_arc_s_answer_at_exactly_its_budget_is_shown_whole(config: Config, notes: list[str]) -> None:
    """spec/rendering.md section 13, to the token: ARC's answer to a call of its tools is its notes, clipped as one
    text only when its message costs more than the budget; one of exactly the budget is shown whole, one token
    less clips it (h37 sweep: history.py mutant 45, tool_note_entry's `<=` made `<`, passed h33's sweep set, the
    vectors and tests/core)."""
    setup = init(config).setup
    joined = "\n".join(notes)
    whole = setup.message("tool", joined, (), setup.show("call_1"))
    assert tool_note_entry(setup, 1, "call_1", notes, whole.tokens).message == whole
    try:
        below = tool_note_entry(setup, 1, "call_1", notes, whole.tokens - 1)
    except BudgetViolation:
        return
    assert below.message.content != joined and below.message.tokens < whole.tokens
