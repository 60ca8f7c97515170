"""The cost rule's fold copy declined before S is built (issue 28; spec/rendering.md 11.1): the same decisions.

`arc_ref.machine._copy_cannot_pay` prices a fold copy with the new S at 0 tokens and the new G at its one place
(`TemplateFormat.placed_cost_at`: one probe conversation instead of S's and G's in every place) and declines it
when `arc_ref.trigger.declines` says no S could make it pay. Checked here: whole traces give equal states and
outputs with the shortcut and without it (Qwen3's template in tool mode, o200k in text mode), and both of its
outcomes occur; at every copy the floor is exactly the copy's view count less its new S's (on a template whose
pieces depend on their place too), and a copy declined on it does not pay when built whole; `placed_cost_at`
equals `placed_costs` in every place of every role, before and after either.
`trigger.declines` itself: proofs_check/test_trigger.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from arc_ref import machine, trigger
from arc_ref.config import Config, preset
from arc_ref.machine import ArcState, Event, compaction_target, fold_extent, init, step, view
from arc_ref.summary import extends
from arc_ref.message import ToolCall
from arc_ref.templates import TemplateFormat, clear_template_formats, possible_contexts
from tests.core.test_count_once import Calls, needs_qwen3, text_events, tool_config, tool_events
from tests.core.test_tokenizers import _train_tokenizer_json


def run(config: Config, events: list[Event], monkeypatch: pytest.MonkeyPatch, shortcut: bool) -> list[Any]:
    """Every state and output of the trace, with the shortcut or with every copy built whole."""
    with monkeypatch.context() as patched:
        if not shortcut:
            patched.setattr(machine, "_copy_cannot_pay", lambda *args: False)
        state = init(config)
        seen: list[Any] = []
        for event in events:
            state, output = step(state, event)
            seen.append((state, output, view(state).text()))
        return seen


def replay_with(config: Config, events: list[Event], monkeypatch: pytest.MonkeyPatch,
                copy_cannot_pay: Callable[..., bool]) -> None:
    """``events`` applied from the initial state of ``config`` with ``copy_cannot_pay`` in the machine's place."""
    with monkeypatch.context() as patched:
        patched.setattr(machine, "_copy_cannot_pay", copy_cannot_pay)
        state = init(config)
        for event in events:
            state, _ = step(state, event)


def outcomes(config: Config, events: list[Event], monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often the shortcut declined a copy, and how often it let one be built whole."""
    counted = {"declined unbuilt": 0, "built": 0}
    real = machine._copy_cannot_pay

    def counting(*args: Any) -> bool:
        declined = real(*args)
        counted["declined unbuilt" if declined else "built"] += 1
        return declined

    replay_with(config, events, monkeypatch, counting)
    return counted


def check_same(config: Config, events: list[Event], monkeypatch: pytest.MonkeyPatch) -> None:
    quick = run(config, events, monkeypatch, shortcut=True)
    whole = run(config, events, monkeypatch, shortcut=False)
    assert len(quick) == len(whole)
    for number, (with_it, without) in enumerate(zip(quick, whole)):
        assert with_it == without, f"event {number} ({events[number]!r}) differs with the shortcut"
    counted = outcomes(config, events, monkeypatch)
    assert counted["declined unbuilt"] > 0 and counted["built"] > 0, counted
    folds = sum(getattr(output, "folded", 0) > 0 for _, output, _ in quick)
    assert folds > 0


@needs_qwen3
@pytest.mark.parametrize("seed", [5, 11])
def test_the_shortcut_changes_no_state_in_tool_mode(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    check_same(tool_config(), list(tool_events(random.Random(seed), 120)), monkeypatch)


def test_the_shortcut_changes_no_state_in_text_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    check_same(preset("paper"), list(text_events(random.Random(7), 300)), monkeypatch)


LAST = ("{% for message in messages %}<|im_start|>{{ message.role }}\n{% if loop.last %}LAST {% endif %}"
        "{% if not loop.last and messages[loop.index0 + 1].role == 'user' %}NU {% endif %}{{ message.content }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def positional_toy(tmp_path: Path) -> Config:
    """A small served template whose pieces depend on their place (the last message, a user message next)."""
    directory = tmp_path / "model"
    directory.mkdir()
    _train_tokenizer_json(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": LAST, "eos_token": "<|im_end|>"}))
    return preset("minimal", tokenizer=f"hf-dir:{directory}", chat_format="template", context_limit=6000,
                  recent_budget=600, summary_budget=600, page_budget=600, recall_budget=300, capacity=400)


def check_floors(config: Config, events: list[Event], monkeypatch: pytest.MonkeyPatch) -> int:
    """At every copy the cost rule makes: the floor is the copy's view count less its S's count, exactly, the count
    with its S built and its G in its one place is the copy's view count, and a copy declined on its floor is one
    that does not pay when built whole. Returns the copies declined so."""
    real = machine._copy_cannot_pay
    declines = 0

    def checking(state: ArcState, count: int, before: int, fixed_most: int) -> bool:
        nonlocal declines
        declined = real(state, count, before, fixed_most)
        _, remaining = fold_extent(state.live, state.live_tokens, compaction_target(state))
        copy = machine._folded(state, count, remaining, *machine._fold_items(state, count))
        shown = view(copy)
        assert machine.copy_floor(state, count) + shown.components.summary == shown.tokens
        assert machine.copy_tokens(state, count, copy.summary.message) == shown.tokens  # G at its one place
        fixed = state.setup.prefix_tokens + state.setup.generation_tokens
        fixed += state.summary.tokens if extends(copy.summary, state.summary) else 0
        if declined:
            declines += 1
            assert not trigger.pays(state.config, before - shown.tokens, shown.tokens - fixed, state.live_tokens,
                                    state.live_turns, state.live_agent_tokens)
        return declined

    replay_with(config, events, monkeypatch, checking)
    return declines


def test_the_floor_is_the_copy_less_its_summary_on_a_positional_template(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = positional_toy(tmp_path)
    declines = 0
    for prefill_cost in (10, 398, 2000):
        for seed in (1, 2):
            declines += check_floors(config.replace(prefill_cost=prefill_cost),
                                     list(text_events(random.Random(seed), 200)), monkeypatch)
    assert declines > 0


@needs_qwen3
def test_the_floor_is_the_copy_less_its_summary_in_tool_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    declines = 0
    for prefill_cost in (10, 398, 2000):
        declines += check_floors(tool_config().replace(prefill_cost=prefill_cost),
                                 list(tool_events(random.Random(5), 120)), monkeypatch)
    assert declines > 0


def test_the_floor_is_the_copy_less_its_summary_in_text_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_floors(preset("paper"), list(text_events(random.Random(7), 300)), monkeypatch) > 0


@needs_qwen3
def test_a_declined_copy_renders_one_probe_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy the shortcut declines renders G's one probe conversation, not S's and G's six each."""
    state = init(tool_config())
    calls = Calls(monkeypatch)
    declined: list[int] = []
    real = machine._copy_cannot_pay

    def watched(*args: Any) -> bool:
        before = calls.counts["renders"]
        result = real(*args)
        if result:
            declined.append(calls.counts["renders"] - before)
        return result

    monkeypatch.setattr(machine, "_copy_cannot_pay", watched)
    for event in tool_events(random.Random(5), 60):
        state, _ = step(state, event)
    assert declined and set(declined) <= {0, 1}, declined  # 0: the same page priced by the copy before


def tool_messages() -> Iterator[tuple[str, str, tuple[ToolCall, ...], str | None]]:
    call = ToolCall("call_7", "bash", '{"command": "ls"}')
    for content in ("", "x", "(summary)\nturn 1: thought: a | action: ls", "line\n" * 400):
        yield "user", content, (), None
        yield "assistant", content, (call,), None
        yield "tool", content, (), "call_7"


@needs_qwen3
def test_one_place_costs_what_every_place_costs_there() -> None:
    """`placed_cost_at` gives `placed_costs`' count in each place, whichever of them runs first."""
    config = tool_config()
    for role, content, calls, call_id in tool_messages():
        clear_template_formats()
        whole = dict(chat_format(config).placed_costs(role, content, calls, call_id))
        for context in possible_contexts(role, "tools"):
            clear_template_formats()
            fresh = chat_format(config)
            assert fresh.placed_cost_at(context, role, content, calls, call_id) == whole[context], (role, context)
            assert dict(fresh.placed_costs(role, content, calls, call_id)) == whole, (role, context)
    clear_template_formats()


def chat_format(config: Config) -> TemplateFormat:
    chat = init(config).setup.chat
    assert isinstance(chat, TemplateFormat)
    return chat
