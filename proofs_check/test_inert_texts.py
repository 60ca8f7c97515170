"""rendering.md 7.2, A4, T5: a control string the model writes opens no turn through any text ARC writes.

The model's thoughts, its actions, a call's id, name and arguments (plain or written with JSON escapes) and the
words of its commands are drawn from pieces of the chat format's control strings; the observations hold them
too. Before every call the served prompt opens one turn per message of the view plus the generation prompt,
counted in token ids by the real tokenizer (Qwen3's, with transformers' own render as the oracle: the turns
its template opens, consecutive tool results sharing one), or in text for ChatML on o200k_base (whose
encoding has no id for ChatML's markers), where no other control string occurs either. The folds put the
thoughts and actions into the summary, stubs and catalog pages; the notes repeat the commands' words. After
the trace, the chunks of every record joined with S^-1 applied are its observation byte for byte (Theorem
claim 5): S on ARC's own texts leaves recall as it was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.chat import CHATML
from arc_ref.config import Config
from arc_ref.errors import CapacityExceeded, InvalidEvent
from arc_ref.escape import control_strings
from arc_ref.machine import (
    AgentTurn, ArcState, Observe, ToolResult, ToolTurn, agent_turn, init, observe, tool_result, tool_turn, view,
)
from arc_ref.message import ToolCall
from arc_ref.recall import chunk_count, reassemble, stored_chunk
from arc_ref.render import RECALL_FRAME_OPENINGS
from arc_ref.tokenizers import get_tokenizer
from proofs_check.harness import resolve_stored
from proofs_check.registry import proves
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, transformers_prompt, transformers_tokenizer
from proofs_check.strategies import ENVIRONMENT_TOOLS, configs, quoting, tool_steps

QWEN3 = qwen3_dir()
needs_qwen3 = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)

WIDE = {"thought_chars": 240, "action_chars": 240, "signature_chars": 240}  # long enough to keep whole quotes


@st.composite
def quoting_arguments(draw: st.DrawFn) -> str:
    """A call's arguments holding control strings: plain JSON, JSON with \\u003c and \\/ escapes, or not JSON."""
    value = {"path": draw(quoting(3)), draw(quoting(1)): [draw(quoting(2)), 1.5]}
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    form = draw(st.sampled_from(("plain", "escaped", "not json")))
    if form == "escaped":
        return text.replace("<", "\\u003c").replace("/", "\\/")
    if form == "not json":
        return "{" + text
    return text


def qwen3_ids(name: str) -> int:
    assert QWEN3 is not None
    return int(transformers_tokenizer(str(QWEN3)).convert_tokens_to_ids(name))


def turns_opened(messages: list[dict[str, Any]]) -> int:
    """The turns Qwen3's template opens for these messages: one each, but a tool result right after another
    shares its user turn."""
    return sum(1 for position, message in enumerate(messages)
               if not (message["role"] == "tool" and position and messages[position - 1]["role"] == "tool"))


def check_qwen3_prompt(state: ArcState) -> None:
    """The served prompt (transformers' render, Qwen3's encoder) opens exactly the view's turns, plus the
    generation prompt; its <tool_call> and <tool_response> ids are the listing's, the view's calls and results."""
    assert QWEN3 is not None
    shown = view(state)
    messages = shown.chat_messages()
    kwargs = dict(state.config.template_kwargs)
    text, count = transformers_prompt(QWEN3, messages, shown.tools(), **kwargs)
    assert shown.text() == text and shown.tokens == count
    ids = transformers_tokenizer(str(QWEN3)).encode(text, add_special_tokens=False)
    opened = turns_opened(messages)
    assert ids.count(qwen3_ids("<|im_start|>")) == opened + 1, "a text of the view opened a turn"
    assert ids.count(qwen3_ids("<|im_end|>")) == opened, "a text of the view ended a turn"
    assert ids.count(qwen3_ids("<|endoftext|>")) == 0
    results = sum(1 for message in messages if message["role"] == "tool")
    assert ids.count(qwen3_ids("<tool_response>")) == ids.count(qwen3_ids("</tool_response>")) == results
    listing, _ = transformers_prompt(QWEN3, messages[:1], shown.tools(), **kwargs)
    listed = transformers_tokenizer(str(QWEN3)).encode(listing, add_special_tokens=False).count(qwen3_ids("<tool_call>"))
    calls = sum(len(message.get("tool_calls") or ()) for message in messages)
    assert ids.count(qwen3_ids("<tool_call>")) == listed + calls, "a text of the view made a call"


def check_chatml_text(state: ArcState, controls: tuple[str, ...]) -> None:
    """ChatML on o200k_base: the prompt text holds ChatML's markers only where the view's messages are framed,
    ARC's recall frames only around the chunks in U, and no other control string at all."""
    shown = view(state)
    text = shown.text()
    messages = len(shown.chat_messages())
    assert text.count("<|im_start|>") == messages + 1 and text.count("<|im_end|>") == messages
    framed = ("<|im_start|>", "<|im_end|>", *RECALL_FRAME_OPENINGS)
    assert not [control for control in controls if control not in framed and control in text]
    opening, closing = RECALL_FRAME_OPENINGS
    assert text.count(opening) == text.count(closing) == len(state.recall_buffer), "a text of the view forged a frame"


def check_recall_exact(state: ArcState) -> None:
    """D: the chunks of S(O) of every record, joined with S^-1 applied, are O byte for byte (T5)."""
    setup = state.setup
    for record in state.records:
        chunks = chunk_count(record.n_tokens, setup.config.chunk_tokens)
        payloads = [stored_chunk(record.shown, record.inner_cuts, chunk) for chunk in range(1, chunks + 1)]
        assert reassemble(payloads).encode("utf-8") == record.content.encode("utf-8")


@st.composite
def text_steps(draw: st.DrawFn) -> list[tuple[str, str, str | None]]:
    """Text-mode turns: (thought, action, observation or None for a command action). Actions quote control
    strings; commands carry them as ids, page numbers and ignored lines, or name a stored id."""
    steps: list[tuple[str, str, str | None]] = []
    for _ in range(draw(st.integers(1, 10))):
        thought = draw(quoting())
        kind = draw(st.sampled_from(("normal", "normal", "command")))
        if kind == "normal":
            action = "grep -rn '" + draw(quoting(3)) + "' ."
            steps.append((thought, action, draw(st.one_of(quoting(), st.just("log line\n" * 60)))))
        else:
            lines = draw(st.lists(st.sampled_from((
                "_recall " + draw(quoting(2)), "_recall @stored1", "_recall-next @stored2", "_recall_meta @stored1",
                "catalog-page " + draw(quoting(1)), "catalog-first", "then " + draw(quoting(2)))), min_size=1,
                max_size=3))
            steps.append((thought, "\n".join(["catalog-next", *lines]), None))
    return steps


def run_text_mode(config: Config, steps: list[tuple[str, str, str | None]], check: Any) -> ArcState:
    state = init(config)
    check(state)
    for thought, action, observation in steps:
        action = resolve_stored(state, action)
        state, turn = agent_turn(state, AgentTurn(thought, action))
        if observation is not None:
            assert not turn.command
            try:
                state, _ = observe(state, Observe(action, observation, 0))
            except CapacityExceeded:
                break
        check(state)
    return state


O200K_CONTROLS = control_strings(CHATML, get_tokenizer("o200k_base"))


@given(configs("paper", fixed={"tokenizer": "o200k_base", "chat_format": "chatml", **WIDE}), text_steps())
@proves("A4", "T5")
def test_model_texts_open_no_turn_chatml_o200k(config: Config, steps: list[Any]) -> None:
    """Text mode, ChatML on o200k_base: thoughts, actions and command words holding control strings leave
    the prompt with ChatML's markers only where the view frames its messages; recall stays exact."""
    state = run_text_mode(config, steps, lambda state: check_chatml_text(state, O200K_CONTROLS))
    check_recall_exact(state)


@needs_qwen3
@given(configs(fixed={"tokenizer": f"hf-dir:{QWEN3}", "chat_format": "template", **WIDE}), text_steps())
@proves("A4", "T5")
def test_model_texts_open_no_turn_qwen3_text_mode(config: Config, steps: list[Any]) -> None:
    """Text mode on Qwen3's template and tokenizer: the served prompt holds one <|im_start|> id per message of
    the view plus the generation prompt, whatever the model's thoughts, actions and commands quote."""
    state = run_text_mode(config, steps, check_qwen3_prompt)
    check_recall_exact(state)


@needs_qwen3
@given(configs(fixed={"tokenizer": f"hf-dir:{QWEN3}", "chat_format": "template", "action_mode": "tools",
                      "tools": ENVIRONMENT_TOOLS, **WIDE}),
       tool_steps(max_turns=6, contents=st.one_of(quoting(), st.just("log line\n" * 80)), reasoning=quoting(),
                  arguments=quoting_arguments(), unknown_names=quoting(2)),
       st.booleans())
@proves("A4", "T5")
def test_model_texts_open_no_turn_qwen3_tool_mode(config: Config, steps: list[Any], quoted_ids: bool) -> None:
    """Tool mode on Qwen3: the model's text, its calls' ids, names and arguments (plain, JSON-escaped, not JSON)
    and ARC's answers to them, in H and folded into S and G, open no turn, end none and make no call: the
    served prompt's <|im_start|>, <|im_end|>, <tool_call> and <tool_response> ids are the view's own."""
    state = init(config)
    check_qwen3_prompt(state)
    number = 0
    for thought, calls, results, _, _ in steps:
        made = []
        for name, arguments in calls:
            number += 1
            call_id = f"call_{number}" + ("<|im_end|>" if quoted_ids and number % 2 else "")
            made.append(ToolCall(call_id, name, resolve_stored(state, arguments)))
        try:
            state, turn = tool_turn(state, ToolTurn(thought, tuple(made)))
        except InvalidEvent as refused:
            assert "cannot fit recent_budget R" in str(refused)
            continue
        check_qwen3_prompt(state)
        try:
            for call, result in zip(turn.environment_calls, results):
                state, _ = tool_result(state, ToolResult(call.call_id, result))
        except CapacityExceeded:
            break
        check_qwen3_prompt(state)
    check_recall_exact(state)


def test_escaping_and_clipping_cannot_make_a_control_string() -> None:
    """rendering.md 7.2's conditions for the shipped setups: every control string but ARC's recall frame openings
    starts with <, ends with > and holds no other <, >, no backslash and no ellipsis, and no literal text of ARC's
    templates holds < or >; so escape_line and clipping (which write only backslash, ASCII letters and digits, and
    the ellipsis) and the templates' literals cannot complete one around a field that S has made inert. The frame
    openings start with [, which escaping and clipping never write, and a template's literal ends with [recall or
    [end (or with [) only before the id of a recall frame."""
    import string

    from arc_ref import render

    setups = [("o200k_base", CHATML), ("cl100k_base", CHATML)]
    if QWEN3 is not None:
        setups.append((f"hf-dir:{QWEN3}", CHATML))
    for tokenizer, chat in setups:
        controls = control_strings(chat, get_tokenizer(tokenizer))
        assert set(RECALL_FRAME_OPENINGS) <= set(controls)
        for control in controls:
            if control in RECALL_FRAME_OPENINGS:
                continue
            inner = control[1:-1]
            assert control[0] == "<" and control[-1] == ">", control
            assert not set(inner) & {"<", ">", "\\", "\u2026"}, control
    templates = [value for value in vars(render).values() if isinstance(value, render.Template)]
    assert len(templates) > 20
    parsed = [(name, literal, field) for name, template in vars(render).items() if isinstance(template, render.Template)
              for literal, field, *_ in string.Formatter().parse(template.text)]
    literals = [literal for _, literal, _ in parsed]
    literals += [render.SUMMARY_HEADER, render.RECALL_HEADER, render.COMMAND_RESULT_HEADER]
    assert not [literal for literal in literals if "<" in literal or ">" in literal]
    for name, literal, field in parsed:  # a literal that could open a frame with the field after it
        tails = [literal[cut:] for cut, character in enumerate(literal) if character == "["]
        if field is not None and any(opening.startswith(tail) for tail in tails for opening in RECALL_FRAME_OPENINGS):
            assert name in ("RECALL_OPEN", "RECALL_CLOSE", "RECALL_BODY", "RECALL_RESPONSE") and field == "obs_id", (
                name, literal, field)
    assert not [literal for literal in literals for opening in RECALL_FRAME_OPENINGS if opening in literal]
