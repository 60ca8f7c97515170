"""The scripted agent's documented rules, and its in-process backend."""

from __future__ import annotations

import asyncio
import json

import pytest

from arc_ref import render
from arc_ref.errors import ConfigError
from arc_eval.counting import make_counter
from arc_eval.methods.rag_memory import RagOptions
from arc_eval.agent.condense import MAX_VALUE_LINES
from arc_eval.agent.scripted import Plan, ScriptedBackend, ScriptedPolicy, first_last_lines
from arc_eval.loop import run_task
from arc_eval.methods import make_method
from arc_eval.methods.base import MethodSettings, Turn, assistant_text, observation_text
from arc_eval.methods.llm_summary import SUMMARY_INSTRUCTIONS, SUMMARY_REQUEST, render_turn
from arc_eval.methods.structured_state import STATE_INSTRUCTIONS, STATE_REQUEST
from arc_eval.protocol import parse_reply, system_prompt
from arc_eval.tasks.longbench import make_longbench_task
from arc_eval.tasks.nih import make_nih_tasks
from arc_eval.types import ChatRequest, ContextOverflow, Message, Observation, Task

NIH = make_nih_tasks(42, 2, distractor_files=3, layout="paper")[0]
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
        Message("assistant", assistant_text("t", action)),
        Message("user", observation_text(action, Observation(text, rc))),
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
    thought, action = agent(messages, variant="floor")
    assert action == "submit" and "give up" in thought
    thought, action = agent(messages)  # fair: one recovery step that states the need first
    assert action == "ls" and Plan(NIH.goal).need in thought
    thought, action = agent(messages + turn("ls", "notes_01.txt\nsecrets.txt"))
    assert action == "submit" and "give up" in thought


def test_best_candidate_when_the_banner_is_gone() -> None:
    messages = start(NIH) + [Message("user", "Summary:\n- kept: NEEDLE=ABCDEFGH\n- NOISE line NEEDLE=ZZZ")] + turn(
        "cat notes_03.txt", NIH.files["notes_03.txt"])
    assert agent(messages, variant="floor")[1] == "submit NEEDLE=ABCDEFGH"
    assert agent(messages)[1] == "ls"  # fair: the recovery step first
    assert agent(messages + turn("ls", "secrets.txt"))[1] == "submit NEEDLE=ABCDEFGH"


def stub(obs_id: str, action: str, head: str, tail: str) -> str:
    return render.stub(obs_id, 0, 4512, 1100, action, head, tail)


def test_recalls_the_citation_that_may_hold_the_needle() -> None:
    catalog = render.catalog_content(render.catalog_header(1, 1, 1, 3, 3), [
        stub("§0001-aa", "cat notes_01.txt", "# notes_01.txt: distractor file 1 of 3; it holds no needle.", "w"),
        stub("§0002-bb", "cat secrets.txt", "# secrets.txt for task x", "NOISE below (not the needle)"),
        stub("§0003-cc", "cat notes_02.txt", "# notes_02.txt: distractor", "w"),
    ])
    messages = start(NIH) + [Message("user", catalog)] + turn("cat notes_03.txt", NIH.files["notes_03.txt"])
    assert agent(messages)[1] == "_recall §0002-bb"
    half = NEEDLE_FILE.index("NEEDLE=")
    first = render.recall_response("§0002-bb", 1, 2, NEEDLE_FILE[: half - 200])
    recalled = messages + [Message("assistant", render.agent_message("t", "_recall §0002-bb")),
                           Message("user", render.recall_content([first]))]
    assert agent(recalled)[1] == "_recall-next §0002-bb"
    second = render.recall_response("§0002-bb", 2, 2, NEEDLE_FILE[half - 200 :])
    both = recalled + [Message("assistant", render.agent_message("t", "_recall-next §0002-bb")),
                       Message("user", render.recall_content([first, second]))]
    assert agent(both)[1] == f"submit NEEDLE={NIH.answer}"


def test_banner_split_across_recall_chunks_is_still_read() -> None:
    lines = NEEDLE_FILE.split("\n")
    at = next(index for index, line in enumerate(lines) if line.startswith("NEEDLE="))
    text = render.recall_content([render.recall_response("§1", 1, 2, "\n".join(lines[:at])),
                                  render.recall_response("§1", 2, 2, "\n".join(lines[at:]))])
    messages = start(NIH) + turn("cat notes_03.txt", "x") + [Message("user", text)]
    assert agent(messages)[1] == f"submit NEEDLE={NIH.answer}"


@pytest.mark.parametrize("variant", ["floor", "fair"])
def test_reexecution_only_when_allowed(variant: str) -> None:
    messages = start(NIH) + turn("cat notes_03.txt", NIH.files["notes_03.txt"])
    if variant == "fair":  # the recovery step comes first, once
        messages += turn("ls", "notes_01.txt\nsecrets.txt")
    assert agent(messages, variant=variant)[1] == "submit"
    assert agent(messages, variant=variant, allow_reexecution=True)[1] == "cat secrets.txt"
    again = messages + turn("cat secrets.txt", "the file changed and holds nothing")
    assert agent(again, variant=variant, allow_reexecution=True)[1] == "submit"  # never the same re-run twice


@pytest.mark.parametrize("variant", ["floor", "fair"])
def test_longbench_reads_pages_then_answers_by_overlap(variant: str) -> None:
    context = ("The harbor lantern keeper has a loyal dog that guards the lantern.\n" * 80) + ("filler words\n" * 400)
    task = longbench_task(context)
    messages = start(task)
    assert agent(messages, variant=variant)[1] == "read context.txt 1"
    for page in range(1, task.meta["pages"] + 1):
        messages += turn(f"read context.txt {page}", context[(page - 1) * 4000 : page * 4000])
    if variant == "fair":
        reply = ScriptedPolicy(variant=variant)(messages)
        thought, action = parse_reply(reply)
        assert action == "ls" and "Which animal guards the harbor lantern?" in thought  # the need, stated once
        # its own statement names every choice: the answer must come from what it read, not from it
        messages += [Message("assistant", reply), Message("user", observation_text("ls", Observation("context.txt", 0)))]
    assert agent(messages, variant=variant)[1] == "submit The correct answer is (B)"


def folded(action: str, text: str, rc: int = 0, thought: str = "t") -> Turn:
    observation = Observation(text, rc)
    return Turn(Message("assistant", assistant_text(thought, action)),
                Message("user", observation_text(action, observation)), action, text, rc)


def summary_request(current: str, turns: list[Turn]) -> list[Message]:
    body = "\n".join(render_turn(turn) for turn in turns)
    return [Message("system", SUMMARY_INSTRUCTIONS),
            Message("user", SUMMARY_REQUEST.render(goal="GOAL", current=current, body=body))]


def state_request(current: str, turns: list[Turn]) -> list[Message]:
    body = "\n".join(render_turn(turn) for turn in turns)
    return [Message("system", STATE_INSTRUCTIONS),
            Message("user", STATE_REQUEST.render(goal="GOAL", current=current, body=body))]


def test_summary_rule_keeps_first_and_last_lines() -> None:
    request = summary_request("- earlier line", [folded("cat a.txt", "first line\nmiddle SECRET=42\nlast line")])
    summary = ScriptedPolicy(variant="floor")(request)
    assert summary == "- earlier line\n- `cat a.txt` (rc=0, 3 lines) first: first line | last: last line"
    assert first_last_lines("\n\nonly\n\n") == ("only", "only", 1)


def test_fair_summary_copies_exact_value_lines_with_their_heading() -> None:
    text = "header\n== BANNER ==\nKEY=A1B2\nNOISE line KEY=ZZ99 (noise)\nplain words only\nrun 2024-05-01 ok"
    request = summary_request("(none yet)", [folded("cat a.txt", text)])
    assert ScriptedPolicy()(request).split("\n") == [
        "- `cat a.txt` (rc=0, 6 lines) first: header | last: run 2024-05-01 ok",
        "    == BANNER ==", "    KEY=A1B2",  # the value and the line that introduces it, verbatim
        "    plain words only", "    run 2024-05-01 ok",  # a dated line: its heading holds no value
    ]
    lines = [f"id {number:04d}" for number in range(9)]
    summary = ScriptedPolicy()(summary_request("(none yet)", [folded("cat b.txt", "\n".join(lines))]))
    assert summary.count("    id ") == MAX_VALUE_LINES  # at most that many per observation


def test_fair_state_fills_facts_from_exact_value_lines() -> None:
    current = json.dumps({"task": "T", "done": [], "facts": {"old": "x"}, "sources": {}})
    text = "# file\n==== BEGIN THE NEEDLE FOR THIS TASK ====\nNEEDLE=ABC234\nNOISE above (not the needle) NEEDLE=QQ"
    state = json.loads(ScriptedPolicy()(state_request(current, [folded("cat s.txt", text)])))
    assert state["facts"] == {"old": "x", "==== BEGIN THE NEEDLE FOR THIS TASK ====": "NEEDLE=ABC234"}
    floor = json.loads(ScriptedPolicy(variant="floor")(state_request(current, [folded("cat s.txt", text)])))
    assert floor["facts"] == {"old": "x"}


def test_state_rule_updates_the_json() -> None:
    current = json.dumps({"task": "T", "done": ["`ls` -> rc=0, 1 lines"], "facts": {}, "sources": {}})
    state = json.loads(ScriptedPolicy()(state_request(current, [folded("cat b.txt", "missing", rc=1, thought="")])))
    assert state["done"] == ["`ls` -> rc=0, 1 lines", "`cat b.txt` -> rc=1, 1 lines"]
    assert state["sources"]["cat b.txt"] == "first: missing | last: missing" and state["task"] == "T"


@pytest.mark.parametrize("variant", ["fair", "floor"])
@pytest.mark.parametrize("method", ["sliding_window", "llm_summary", "structured_state", "rag_memory", "arc"])
def test_the_policy_never_depends_on_the_answer(method: str, variant: str) -> None:
    settings = MethodSettings(context_limit=16384, method_options={"rag_memory": RagOptions(rag_retriever="bm25")})
    task = make_nih_tasks(42, 1)[0]

    def trajectory(task: Task) -> list[tuple[object, ...]]:
        backend = ScriptedBackend(ScriptedPolicy(variant=variant))
        calls, _ = asyncio.run(run_task(task, make_method(method, settings), backend, settings=settings,
                                        max_steps=40, seed=1))
        return [(call.action, call.prompt_tokens) for call in calls]

    other = Task(task.task_id, task.kind, task.goal, task.files, answer="SOMETHING-ELSE", meta=task.meta,
                 required_actions=task.required_actions)
    assert trajectory(task) == trajectory(other)


def test_scripted_backend_enforces_the_usable_budget() -> None:
    backend = ScriptedBackend(context_limit=600, counter=make_counter("bytes"))
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


def arc_turn(obs_id: str, action: str, text: str) -> list[Message]:
    return [Message("assistant", render.agent_message("t", action)),
            Message("user", render.observation_message(obs_id, 0, action, text))]


DISTRACTOR_HEAD = "# notes_01.txt: distractor file 1 of 3; it holds no needle."


def test_fair_reads_a_bare_id_by_the_turn_it_follows_in_the_summary() -> None:
    summary = render.summary_content(0, [
        render.thought_item(1, "step 1", "cat secrets.txt"), "§00001-aa",  # collapsed to its bare id
        render.thought_item(2, "step 2", "cat notes_01.txt"),
        stub("§00002-bb", "cat notes_01.txt", DISTRACTOR_HEAD, "w"),
    ])
    messages = start(NIH) + [Message("user", summary)] + arc_turn("§00004-dd", "cat notes_03.txt", "words")
    assert agent(messages)[1] == "_recall §00001-aa"
    assert agent(messages, variant="floor")[1] == "_recall §00002-bb"  # floor reads stubs only


def test_fair_browses_the_catalog_when_no_citation_fits_and_skips_what_it_can_read() -> None:
    distractor = stub("§00003-cc", "cat notes_02.txt", DISTRACTOR_HEAD, "w")
    summary = render.summary_content(3, [render.thought_item(4, "step 4", "cat notes_03.txt"), distractor])
    last_page = render.catalog_content(render.catalog_header(3, 3, 5, 5, 5),
                                       [stub("§00005-ee", "cat notes_03.txt", DISTRACTOR_HEAD, "w")])
    base = start(NIH) + [Message("user", summary)]
    seen = base + [Message("user", last_page)] + arc_turn("§00005-ee", "cat notes_03.txt", "words")
    assert agent(seen)[1] == "catalog-first"  # §00005-ee is shown in full; §00003-cc is not about secrets.txt
    first_page = render.catalog_content(render.catalog_header(1, 3, 1, 2, 5), [
        stub("§00001-aa", "cat notes_01.txt", DISTRACTOR_HEAD, "w"), distractor])
    browsed = base + [Message("user", first_page)] + arc_turn("§00005-ee", "cat notes_03.txt", "words") + [
        Message("assistant", render.agent_message("t", "catalog-first")),
        Message("user", render.command_message([render.note_catalog_page("catalog-first", 1, 3)]))]
    assert agent(browsed)[1] == "catalog-next"
    second_page = render.catalog_content(render.catalog_header(2, 3, 3, 4, 5), [
        distractor, stub("§00004-dd", "cat secrets.txt", "# secrets.txt for task x", "NOISE below")])
    browsed[2] = Message("user", second_page)
    assert agent(browsed)[1] == "_recall §00004-dd"


def test_unknown_agent_variant_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown scripted agent 'clever'; choose one of fair, floor"):
        ScriptedPolicy(variant="clever")


def test_fair_reads_a_line_cut_at_a_chunk_boundary_only_once_it_is_whole() -> None:
    cut = NEEDLE_FILE.index("NEEDLE=") + 12  # chunk 1 ends inside the needle's line
    first = render.recall_response("§0002-bb", 1, 2, NEEDLE_FILE[:cut])
    history = start(NIH) + turn("cat notes_03.txt", "x") + [
        Message("assistant", render.agent_message("t", "_recall §0002-bb")),
        Message("user", render.recall_content([first]))]
    assert agent(history)[1] == "_recall-next §0002-bb"
    assert agent(history, variant="floor")[1] == f"submit NEEDLE={NIH.answer[:5]}"  # floor reads the cut token
    second = render.recall_response("§0002-bb", 2, 2, NEEDLE_FILE[cut:])
    history[-1] = Message("user", render.recall_content([first, second]))
    assert agent(history)[1] == f"submit NEEDLE={NIH.answer}"


def test_serve_scripted_can_serve_either_agent() -> None:
    from arc_eval.backends.scripted_server import DEFAULT_POLICY, load_policy

    fair, floor = load_policy(DEFAULT_POLICY), load_policy("arc_eval.agent.scripted:FloorPolicy")
    assert isinstance(fair, ScriptedPolicy) and isinstance(floor, ScriptedPolicy)
    assert (fair.variant, floor.variant) == ("fair", "floor")
