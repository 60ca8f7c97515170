"""Placed costs shared across goals (spec/rendering.md section 3.1, "Counting each text once"): a message's costs
rendered under one goal are reused under another only when the template read nothing of the goal but its role
outside the goal's own turn and its turns are confined (`_confines_turns`); every cost is the one its own goal's
probes give, for goals that change other messages' pieces (Qwen3 reads the last query's text) and for templates
that carry a turn's values to the next (a namespace attribute, ``loop.changed``)."""

from __future__ import annotations

from typing import Any

import pytest

from arc_ref import templates
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.templates import TemplateFormat, TemplateSource, load_template_source
from arc_ref.tokenizers import get_tokenizer
from arc_ref.tools import ARC_TOOLS
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

QWEN3 = qwen3_dir()
pytestmark = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)

TOOLS = ARC_TOOLS + (ToolSpec("bash", "Run a command.", '{"type": "object"}'),)
GOALS = ("list the files", "<tool_response>q</tool_response>", "", "<tool_response>", "a</tool_response>",
         "<think>t</think>", "\n\n", "user", "a longer task: find the failing test and fix it")
MESSAGES: tuple[tuple[str, str, tuple[ToolCall, ...], str | None], ...] = (
    ("user", "hello", (), None), ("user", "<tool_response>r</tool_response>", (), None), ("user", "x", (), None),
    ("assistant", "step", (ToolCall("c1", "bash", '{"command": "ls"}'),), None),
    ("assistant", "<think>t</think>done", (), None), ("assistant", "", (), None),
    ("tool", "out\nput", (), "c1"), ("tool", "<tool_response>x</tool_response>", (), "c9"))
# a namespace attribute set in the goal's own turn and printed in every later one: the goal reaches other pieces
LEAKS_BY_NAMESPACE = """{%- set ns = namespace(seen='') %}
{%- for message in messages %}
{%- if loop.index0 == 1 %}{% set ns.seen = message.content[:2] %}{% endif %}
{{- '<|im_start|>' + message.role + '\\n' + ns.seen + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""
# loop.changed remembers the turn before: whether the goal's text is long shows in the next message's piece
LEAKS_BY_LOOP_CHANGED = """{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\\n' }}{% if loop.changed(message.content|length > 3) %}{{ 'changed ' }}{% endif %}
{{- message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""


def source(template: str | None) -> TemplateSource:
    assert QWEN3 is not None
    qwen3 = load_template_source(str(QWEN3))
    return qwen3 if template is None else TemplateSource(qwen3.directory, template, None, qwen3.special_tokens)


def costs_by_goal(template: str | None, goals: tuple[str, ...]) -> dict[tuple[str, Any], Any]:
    """Each message's placed costs under each goal, the goals taken in turn in one process (costs shared)."""
    tokenizer = get_tokenizer(f"hf-dir:{QWEN3}")
    costs = {}
    for goal in goals:
        chat = TemplateFormat(tokenizer, source(template), {}, TOOLS, "You are an agent.", goal, "tools")
        for message in MESSAGES:
            costs[(goal, message)] = chat.placed_costs(*message)
    return costs


@pytest.mark.parametrize("template", [None, LEAKS_BY_NAMESPACE, LEAKS_BY_LOOP_CHANGED],
                         ids=["qwen3", "namespace", "loop_changed"])
def test_costs_shared_across_goals_are_each_goals_own(template: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "_SHARED_COSTS", templates._SharedCosts(templates.SHARED_FAMILIES))
    shared = costs_by_goal(template, GOALS)
    own = {}
    for goal in GOALS:  # each goal alone: nothing shared from another
        monkeypatch.setattr(templates, "_SHARED_COSTS", templates._SharedCosts(templates.SHARED_FAMILIES))
        own.update(costs_by_goal(template, (goal,)))
    assert shared == own, [key for key in own if shared[key] != own[key]][:3]
    # the goal does change other messages' costs here, so a cost shared where it should not be would show
    assert any(len({own[(goal, message)] for goal in GOALS}) > 1 for message in MESSAGES)


def test_what_is_shared_and_what_is_not() -> None:
    """Qwen3: a user message's costs hold for every goal (the last query is that message or a later one); an
    assistant message's do not (with no user message after it, the template looks back to the goal's text)."""
    assert QWEN3 is not None
    qwen3 = templates.compiled_template(source(None).source, source(None).special_tokens, (), str(QWEN3))
    assert qwen3.confines_turns
    for leaky in (LEAKS_BY_NAMESPACE, LEAKS_BY_LOOP_CHANGED):
        assert not templates.compiled_template(leaky, source(None).special_tokens, (), str(QWEN3)).confines_turns
    tokenizer = get_tokenizer(f"hf-dir:{QWEN3}")
    first = TemplateFormat(tokenizer, source(None), {}, TOOLS, "You are an agent (sharing check).", "goal one",
                           "tools")
    first.placed_costs("user", "a frame of ARC's")
    first.placed_costs("assistant", "an answer")
    second = TemplateFormat(tokenizer, source(None), {}, TOOLS, "You are an agent (sharing check).", "goal two",
                            "tools")
    renders = [0]
    render_parts = second.template.render_parts

    def counted(*args: Any, **kwargs: Any) -> Any:
        renders[0] += 1
        return render_parts(*args, **kwargs)

    second.template.render_parts = counted  # type: ignore[method-assign]
    try:
        second.placed_costs("user", "a frame of ARC's")
        assert renders[0] == 0  # shared: no probe rendered
        second.placed_costs("assistant", "an answer")
        assert renders[0] == 3  # its own goal's probes
    finally:
        del second.template.render_parts
