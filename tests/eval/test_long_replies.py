"""Long agent replies (review h27 F5): a baseline whose compaction leaves its kept turns over L clips the agent's
own text in them, as ARC's view does, instead of ending the task by overflow; with short turns nothing changes.

The backend is the embedded scripted agent with a long thought written into each of its replies: the model of
h27's run on vLLM, whose 4,096 generated tokens came back as turns of ~12,000 prompt tokens (its random text
re-counted), so that every compacting baseline ended ``end="overflow"`` right after its own compaction while ARC
ran on. The reply is reported as ``length`` at G_max, as the server reported it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from arc_eval.agent.scripted import ScriptedBackend, ScriptedPolicy
from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings, TranscriptMethod
from arc_eval.methods.rag_memory import RagOptions
from arc_eval.schema import CallRecord, TaskRecord
from arc_eval.tasks.nih import make_nih_tasks
from arc_eval.types import ChatReply, ChatRequest

COMPACTING_BASELINES = ("sliding_window", "llm_summary", "structured_state", "rag_memory")
SETTINGS = MethodSettings(context_limit=16384, method_options={"rag_memory": RagOptions(rag_retriever="bm25")})
# words of reasoning written into every thought: 5,200 (~10,400 tokens under the default counter): one turn with its
# observation leaves no room under L = 12,288 for a condensing baseline's memory, so llm_summary, structured_state
# and rag_memory overflowed right after their own compaction (h27 saw 12,747 and 13,086 tokens); 5,800: one turn
# alone is over L, and every baseline overflowed at its second call (nothing to compact)
PAD_WORDS = (5200, 5800)


class LongReplies(ScriptedBackend):
    """The scripted agent, each agent reply's thought lengthened by ``pad_words`` words of reasoning."""

    def __init__(self, pad_words: int, **kwargs: Any) -> None:
        super().__init__(ScriptedPolicy(), **kwargs)
        self.pad = " ".join(f"consider{index % 97}" for index in range(pad_words))

    async def complete(self, request: ChatRequest) -> ChatReply:
        reply = await super().complete(request)
        if request.tags.get("purpose") != "agent" or not reply.content.startswith("Thought: "):
            return reply
        content = reply.content.replace("Thought: ", f"Thought: {self.pad} ", 1)
        return ChatReply(content=content, prompt_tokens=reply.prompt_tokens, completion_tokens=request.max_tokens,
                         finish_reason="length", latency_s=0.0)


def run(method: str, pad_words: int) -> tuple[list[CallRecord], TaskRecord]:
    task = make_nih_tasks(42, 1)[0]
    backend = LongReplies(pad_words, counter=SETTINGS.counter)
    return asyncio.run(run_task(task, make_method(method, SETTINGS), backend, settings=SETTINGS, max_steps=40,
                                seed=42))


def test_arc_runs_on_with_long_replies() -> None:
    """The control: ARC clips the agent's text in its view and answers."""
    calls, outcome = run("arc", max(PAD_WORDS))
    assert outcome.end == "submitted" and outcome.correct
    assert not any(call.overflow for call in calls)


@pytest.mark.parametrize("pad_words", PAD_WORDS)
@pytest.mark.parametrize("method", COMPACTING_BASELINES)
def test_no_compacting_baseline_ends_by_overflow_with_long_replies(method: str, pad_words: int) -> None:
    calls, outcome = run(method, pad_words)
    assert not any(call.overflow for call in calls), [(c.call_index, c.prompt_tokens) for c in calls if c.overflow]
    assert outcome.end != "overflow"
    assert all(call.prompt_tokens <= SETTINGS.usable_tokens for call in calls if call.purpose == "agent")
    clipped = [call for call in calls if call.clips]
    if method != "sliding_window" or pad_words == max(PAD_WORDS):  # sliding_window's prompt fits at 5,200 words
        assert clipped, "the clip is recorded on the call it was made for"
    for call in clipped:
        (clip,) = call.clips
        assert clip.newest and clip.before > SETTINGS.usable_tokens >= clip.after == call.prompt_tokens
        assert call.to_json()["clips"] == [{"turns": clip.turns, "newest": True, "before": clip.before,
                                            "after": clip.after}]
    if method != "sliding_window":  # sliding_window keeps no memory: it fails NIH by its window, not by overflow
        assert outcome.end == "submitted" and outcome.correct


@pytest.mark.parametrize("agent", ["fair", "floor"])
@pytest.mark.parametrize("method", COMPACTING_BASELINES)
def test_short_turns_are_never_clipped(method: str, agent: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted agent's own short replies: no clip, and the records are those of the method with the clip
    switched off (what main wrote: the calls carry no ``clips`` key)."""
    tasks = make_nih_tasks(7, 3)

    def records() -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
        out = []
        for task in tasks:
            backend = ScriptedBackend(ScriptedPolicy(variant=agent), counter=SETTINGS.counter)
            calls, outcome = asyncio.run(run_task(task, make_method(method, SETTINGS), backend, settings=SETTINGS,
                                                  max_steps=40, seed=7))
            out.append(([{**call.to_json(), "latency_s": 0} for call in calls], outcome.to_json()))
        return out

    with_clip = records()
    assert all("clips" not in call for calls, _ in with_clip for call in calls)
    monkeypatch.setattr(TranscriptMethod, "clips_agent_text", False)
    assert records() == with_clip
