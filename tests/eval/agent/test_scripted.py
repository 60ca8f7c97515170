"""The scripted agent's documented rules, and its in-process backend."""

from __future__ import annotations

import asyncio
import json

import pytest

from arc_eval.agent.scripted import Plan, ScriptedBackend, ScriptedPolicy, first_last_lines
from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings
from arc_eval.protocol import STATE_REQUEST_HEADER, SUMMARY_REQUEST_HEADER, parse_reply, system_prompt
from arc_eval.tasks.longbench import make_longbench_task
from arc_eval.tasks.nih import make_nih_tasks
from arc_eval.types import ChatRequest, ContextOverflow, Message, Task

NIH = make_nih_tasks(42, 2, distractor_files=3)[0]
NEEDLE_FILE = NIH.files["secrets.txt"]


def longbench_task(context: str) -> Task:
    record = {
        "_id": "x1", "domain": "d", "sub_domain": "s", "difficulty": "hard", "length": "short",
        "question": "Which animal guards the harbor lantern?",
        "choice_A": "a purple elephant", "choice_B": "the harbor lantern keeper dog",
        "choice_C": "nobody at all", "choice_D": "a flying teapot",
        "answer": "B", "context": context,
    }
    return make_longbench_task(record, page_chars=4000)


def agent(messages: list[Message], **options: object) -> tuple[str, str]:
    return parse_reply(ScriptedPolicy(**options)(messages))  # type: ignore[arg-type]


def start(task: Task) -> list[Message]:
    return [Message("system", system_prompt()), Message("user", task.goal)]


def turn(action: str, text: str, rc: int = 0) -> list[Message]:
    return [
        Message("assistant", f"Thought: t\nAction: {action}"),
        Message("user", f"Observation (rc={rc}) of `{action}`:\n{text}"),
    ]


def test_plan_from_the_nih_goal() -> None:
    plan = Plan(NIH.goal)
    assert plan.actions == ["cat secrets.txt", "cat notes_01.txt", "cat notes_02.txt", "cat notes_03.txt"]
    assert plan.key == "NEEDLE" and plan.banner_label == "THE NEEDLE FOR THIS TASK"
    assert "submit NEEDLE=<value>" in plan.answer_instruction


def test_plan_from_the_longbench_goal() -> None:
    task = longbench_task("word " * 3000)
    plan = Plan(task.goal)
    assert plan.actions == [f"read context.txt {page}" for page in range(1, task.meta["pages"] + 1)]
    assert set(plan.choices) == {"A", "B", "C", "D"} and plan.question.startswith("Which animal")


def test_follows_the_plan_and_submits_a_visible_needle() -> None:
    messages = start(NIH)
    assert agent(messages)[1] == "cat secrets.txt"
    messages += turn("cat secrets.txt", NEEDLE_FILE)
    assert agent(messages)[1] == "cat notes_01.txt"
    for name in ("notes_01.txt", "notes_02.txt", "notes_03.txt"):
        messages += turn(f"cat {name}", NIH.files[name])
    assert agent(messages)[1] == f"submit NEEDLE={NIH.answer}"


def test_progress_survives_compaction_through_the_latest_turn() -> None:
    messages = start(NIH) + turn("cat notes_02.txt", NIH.files["notes_02.txt"])
    assert agent(messages)[1] == "cat notes_03.txt"  # secrets and notes_01 are no longer visible
    messages = start(NIH) + [Message("user", "Summary:\n- `cat notes_01.txt` (rc=0, 3 lines)")]
    assert agent(messages)[1] == "cat notes_02.txt"


def test_gives_up_without_the_needle_and_nothing_to_recall() -> None:
    messages = start(NIH) + turn("cat notes_03.txt", NIH.files["notes_03.txt"])
    thought, action = agent(messages)
    assert action == "submit" and "give up" in thought


def test_best_candidate_when_the_banner_is_gone() -> None:
    messages = start(NIH) + [Message("user", "Summary:\n- kept: NEEDLE=ABCDEFGH\n- NOISE line NEEDLE=ZZZ")] + turn(
        "cat notes_03.txt", NIH.files["notes_03.txt"])
    assert agent(messages)[1] == "submit NEEDLE=ABCDEFGH"


def stub(obs_id: str, action: str, head: str, tail: str) -> str:
    return f"{obs_id} rc=0 4512ch 1100tok $ {action} | head: {head} | tail: {tail} | _recall {obs_id}"


def test_recalls_the_citation_that_may_hold_the_needle() -> None:
    catalog = "\n".join([
        "[ARC catalog page 1/1: observations 1-3 of 3; catalog-first, catalog-next, catalog-page N]",
        stub("§0001-aa", "cat notes_01.txt", "# notes_01.txt: distractor file 1 of 3; it holds no needle.", "w"),
        stub("§0002-bb", "cat secrets.txt", "# secrets.txt for task x", "NOISE below (not the needle)"),
        stub("§0003-cc", "cat notes_02.txt", "# notes_02.txt: distractor", "w"),
    ])
    messages = start(NIH) + [Message("user", catalog)] + turn("cat notes_03.txt", NIH.files["notes_03.txt"])
    assert agent(messages)[1] == "_recall §0002-bb"
    half = NEEDLE_FILE.index("NEEDLE=")
    first = f"[ARC recall buffer]\n[recall §0002-bb chunk 1/2]\n{NEEDLE_FILE[:half - 200]}\n[end §0002-bb chunk 1/2]"
    recalled = messages + [Message("assistant", "Thought: t\nAction: _recall §0002-bb"), Message("user", first)]
    assert agent(recalled)[1] == "_recall-next §0002-bb"
    second = f"[recall §0002-bb chunk 2/2]\n{NEEDLE_FILE[half - 200:]}\n[end §0002-bb chunk 2/2]"
    both = recalled + [Message("assistant", "Action: _recall-next §0002-bb"), Message("user", f"{first}\n{second}")]
    assert agent(both)[1] == f"submit NEEDLE={NIH.answer}"


def test_banner_split_across_recall_chunks_is_still_read() -> None:
    lines = NEEDLE_FILE.split("\n")
    at = next(index for index, line in enumerate(lines) if line.startswith("NEEDLE="))
    text = ("[recall §1 chunk 1/2]\n" + "\n".join(lines[:at]) + "\n[end §1 chunk 1/2]\n[recall §1 chunk 2/2]\n"
            + "\n".join(lines[at:]) + "\n[end §1 chunk 2/2]")
    messages = start(NIH) + turn("cat notes_03.txt", "x") + [Message("user", text)]
    assert agent(messages)[1] == f"submit NEEDLE={NIH.answer}"


def test_reexecution_only_when_allowed() -> None:
    messages = start(NIH) + turn("cat notes_03.txt", NIH.files["notes_03.txt"])
    assert agent(messages)[1] == "submit"
    assert agent(messages, allow_reexecution=True)[1] == "cat secrets.txt"
    again = messages + turn("cat secrets.txt", "the file changed and holds nothing")
    assert agent(again, allow_reexecution=True)[1] == "submit"  # never the same re-run twice in a row


def test_longbench_reads_pages_then_answers_by_overlap() -> None:
    context = ("The harbor lantern keeper has a loyal dog that guards the lantern.\n" * 80) + ("filler words\n" * 400)
    task = longbench_task(context)
    messages = start(task)
    assert agent(messages)[1] == "read context.txt 1"
    for page in range(1, task.meta["pages"] + 1):
        messages += turn(f"read context.txt {page}", context[(page - 1) * 4000 : page * 4000])
    assert agent(messages)[1] == "submit The correct answer is (B)"


def test_summary_rule_keeps_first_and_last_lines() -> None:
    body = ("Task:\nGOAL\n\nCurrent summary:\n- earlier line\n\nTurns to fold in (oldest first):\n"
            "### Turn\nThought: t\nAction: cat a.txt\nObservation (rc=0) of `cat a.txt`:\n"
            "first line\nmiddle SECRET=42\nlast line\n\n"
            "Write the updated summary.")
    summary = ScriptedPolicy()([Message("system", f"{SUMMARY_REQUEST_HEADER}\n..."), Message("user", body)])
    assert summary.startswith("- earlier line\n- `cat a.txt` (rc=0, 3 lines) first: first line | last: last line")
    assert "SECRET" not in summary
    assert first_last_lines("\n\nonly\n\n") == ("only", "only", 1)


def test_state_rule_updates_the_json() -> None:
    current = json.dumps({"task": "T", "done": ["`ls` -> rc=0, 1 lines"], "facts": {}, "sources": {}})
    body = (f"Task:\nGOAL\n\nCurrent state:\n{current}\n\nTurns to fold in (oldest first):\n"
            "### Turn\nAction: cat b.txt\nObservation (rc=1) of `cat b.txt`:\nmissing\n\n"
            "Reply with the updated JSON state.")
    state = json.loads(ScriptedPolicy()([Message("system", f"{STATE_REQUEST_HEADER}\n..."), Message("user", body)]))
    assert state["done"] == ["`ls` -> rc=0, 1 lines", "`cat b.txt` -> rc=1, 1 lines"]
    assert state["sources"]["cat b.txt"] == "first: missing | last: missing" and state["task"] == "T"


def test_the_policy_never_depends_on_the_answer() -> None:
    settings = MethodSettings(context_limit=16384, extra={"rag_retriever": "bm25"})

    def trajectory(task: Task) -> list[tuple[object, ...]]:
        calls, _ = asyncio.run(run_task(task, make_method("sliding_window", settings), ScriptedBackend(),
                                        settings=settings, max_steps=20, seed=1))
        return [(call.action, call.prompt_tokens) for call in calls]

    other = Task(NIH.task_id, NIH.kind, NIH.goal, NIH.files, answer="SOMETHING-ELSE", meta=NIH.meta)
    assert trajectory(NIH) == trajectory(other)


def test_scripted_backend_enforces_the_usable_budget() -> None:
    backend = ScriptedBackend(context_limit=600, tokenizer="bytes")
    small = ChatRequest((Message("user", NIH.goal[:50]),), max_tokens=300)
    reply = asyncio.run(backend.complete(small))
    assert reply.prompt_tokens == asyncio.run(backend.count_prompt_tokens(small.messages))
    assert 0 < reply.completion_tokens <= 300 and reply.finish_reason == "stop"
    capped = asyncio.run(backend.complete(ChatRequest(small.messages, max_tokens=20)))
    assert capped.completion_tokens == 20 and capped.finish_reason == "length" and len(capped.content) == 20
    with pytest.raises(ContextOverflow) as raised:
        asyncio.run(backend.complete(ChatRequest((Message("user", "x" * 350),), max_tokens=300)))
    assert raised.value.limit == 300 and raised.value.prompt_tokens is not None and raised.value.prompt_tokens > 300
    assert "maximum context length" in raised.value.message
