"""ArcMethod: the core behind the evaluation layer's Method interface."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from arc_ref.config import make_setup
from arc_ref.errors import ConfigError
from arc_ref.message import ToolCall
from arc_ref.tools import ARC_TOOLS
from arc_eval.counting import make_counter
from arc_eval.methods import make_method
from arc_eval.methods.arc import ArcMethod, ArcOptions, arc_config
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import TASK_TOOL_SPECS
from arc_eval.types import ChatReply, Message, Observation
from tests.eval.helpers import tool_model_dir


async def _no_aux(messages: object, purpose: str) -> ChatReply:  # ARC never makes auxiliary calls
    raise AssertionError("ArcMethod must not call the model to compact")


@pytest.mark.parametrize(
    ("context", "budget_chars", "max_chars"),
    [(16384, 16000, 8000), (16384, 4000, 2000), (16384, 32000, 16000), (32768, 16000, 8000), (32768, 32000, 16000)],
)
def test_budgets_fit_l_for_the_papers_settings(context: int, budget_chars: int, max_chars: int) -> None:
    settings = MethodSettings(context_limit=context, method_options={"arc": ArcOptions(recall_budget_chars=budget_chars, recall_max_chars=max_chars)})
    config = arc_config(settings, "system", "goal")
    setup = make_setup(config)
    assert setup.budget <= setup.limit == context - settings.max_tokens
    assert config.recall_budget >= budget_chars // 4
    assert config.chunk_tokens == max_chars // 4 - 80
    assert config.keep_verbatim_chars == 500


def test_budgets_that_cannot_fit_are_a_clear_error() -> None:
    settings = MethodSettings(context_limit=8192, max_tokens=4096, method_options={"arc": ArcOptions(recall_budget_chars=32000, recall_max_chars=16000)})
    with pytest.raises(ConfigError, match="below its minimum"):
        arc_config(settings, "system", "goal")


def test_prompt_stays_within_l_and_recall_is_intercepted() -> None:
    settings = MethodSettings(context_limit=16384)
    method = make_method("arc", settings)
    assert isinstance(method, ArcMethod)
    method.begin("You are an agent.", "Find the needle.")
    counter = settings.counter
    secret = "noise line\n" * 200 + "THE NEEDLE FOR THIS TASK\nNEEDLE=ABCDEFGHJKLMNPQRSTUVWXYZ\n" + "noise line\n" * 200
    assert method.record_agent("read it", "cat secrets.txt") is None
    method.record_observation("cat secrets.txt", Observation(secret, 0))
    for step in range(40):
        assert method.record_agent("next", f"cat notes_{step:02d}.txt") is None
        method.record_observation(f"cat notes_{step:02d}.txt", Observation("distractor text. " * 300, 0))
        messages = asyncio.run(method.prompt(_no_aux))
        assert counter.count(messages) <= settings.usable_tokens
    first_id = method.arc.records[0].obs_id
    visible = "\n".join(message.content for message in asyncio.run(method.prompt(_no_aux)))
    assert "NEEDLE=ABCDEFGHJKLMNPQRSTUVWXYZ" not in visible  # folded into a citation, nothing recalled yet
    if f"_recall {first_id}" not in visible:  # its stub left the summary: the catalog still holds it (claim 3)
        browsed = method.record_agent("find the secrets file", "catalog-first")
        assert browsed is not None and f"_recall {first_id}" in browsed.response
        visible = "\n".join(message.content for message in asyncio.run(method.prompt(_no_aux)))
        assert f"_recall {first_id}" in visible
    intercepted = method.record_agent("recall the secrets", f"_recall {first_id}")
    assert intercepted is not None and intercepted.recalls[0]["id"] == first_id
    payloads = [intercepted.response]
    while intercepted is not None and intercepted.recalls and intercepted.recalls[0]["chunk"] < intercepted.recalls[0]["chunks"]:
        intercepted = method.record_agent("more", f"_recall-next {first_id}")
        assert intercepted is not None
        payloads.append(intercepted.response)
    assert "NEEDLE=ABCDEFGHJKLMNPQRSTUVWXYZ" in "".join(payloads)
    events = method.drain_events()
    assert "proactive" in events.compactions and events.recalls and method.drain_events().recalls == ()


def test_compaction_reasons_are_recorded_and_report_progress() -> None:
    method = ArcMethod(MethodSettings(context_limit=16384))
    method.begin("system", "goal")
    assert asyncio.run(method.compact("forced", _no_aux)) is False  # nothing to fold yet
    for step in range(6):
        method.record_agent("t", f"cat f{step}")
        method.record_observation(f"cat f{step}", Observation("word " * 400, 0))
    # the forced one folded nothing; 6 x ~440 tokens stay within what H may hold, and the cost model keeps them
    # (spec/rendering.md 11.1: at the defaults it first folds at ~4,000 tokens of H here)
    assert method.drain_events().compactions == ()
    assert asyncio.run(method.compact("reactive", _no_aux)) is True
    assert method.drain_events().compactions == ("reactive",)


def test_tool_calling_mode_drives_the_cores_tool_turns(tmp_path: Path) -> None:
    """In tool mode the agent's turn is the core's ToolTurn: ARC's own calls are answered by the core, a task call
    is returned for the environment and its result stored; the messages carry the calls and the ids they answer."""
    model = tool_model_dir(tmp_path / "model")
    settings = MethodSettings(context_limit=16384, counter=make_counter(f"hf-dir:{model}", "template"),
                              action_mode="tools")
    method = ArcMethod(settings)
    method.begin("system", "goal")
    assert [tool.name for tool in method.tools()] == [tool.name for tool in ARC_TOOLS + TASK_TOOL_SPECS]
    read = ToolCall("c1", "cat", '{"file": "a.txt"}')
    outcome = method.record_tool_turn("look", (read,))
    assert outcome.environment_calls == (read,) and outcome.recalls == ()
    method.record_tool_result(read, Observation("alpha", 0))
    obs_id = method.arc.records[0].obs_id
    recall = ToolCall("c2", "_recall", json.dumps({"id": obs_id}, ensure_ascii=False))
    outcome = method.record_tool_turn("again", (recall,))
    assert outcome.environment_calls == () and outcome.recalls == ({"id": obs_id, "chunk": 1, "chunks": 1},)
    messages = asyncio.run(method.prompt(_no_aux))
    assert [message.role for message in messages[-4:]] == ["assistant", "tool", "assistant", "tool"]
    assert messages[-4].tool_calls == (read,) and messages[-3].tool_call_id == "c1"
    assert messages[-3].content.endswith("alpha") and messages[-2].tool_calls == (recall,)
    assert messages[-1].tool_call_id == "c2"
    counter = settings.counter
    assert method.prompt_tokens() == counter.count(messages, method.tools())
    assert counter.tokenizer.count(counter.render(messages, method.tools())) == method.prompt_tokens()
    with pytest.raises(ValueError):
        asyncio.run(method.compact("sometimes", _no_aux))


def test_tool_calling_needs_the_template() -> None:
    with pytest.raises(ConfigError, match="needs chat_format 'template'"):
        MethodSettings(context_limit=16384, action_mode="tools")


def test_messages_are_the_cores_view() -> None:
    method = ArcMethod(MethodSettings(context_limit=16384))
    method.begin("system", "goal")
    messages = asyncio.run(method.prompt(_no_aux))
    assert messages[0] == Message("system", messages[0].content) and messages[1] == Message("user", "goal")
    assert method.prompt_tokens() == MethodSettings(context_limit=16384).counter.count(messages)
