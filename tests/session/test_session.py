"""arc_ref.session: OpenAI messages and tool calls over the core's tool mode, in memory and durable.

Most checks run on a small tool-capable template and tokenizer made here (fast); one runs on Qwen3's real files
(../shared/data/qwen3-tokenizer, skipped when absent) against transformers' own rendering and count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from arc_ref.view import VIEW_COMPONENTS
from arc_ref.errors import ConfigError
from arc_ref.machine import view
from arc_ref.budgets import RESERVE_FLOOR, WindowTooSmall, window_budgets
from arc_ref.config import MAX_CONFIG_INTEGER
from arc_ref.session import Session, SessionError
from arc_ref.tools import ARC_TOOLS
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, transformers_prompt
from tests.core.test_tokenizers import _train_tokenizer_json
from tests.core.test_tool_mode import ENVIRONMENT, TOOL_TEMPLATE

BUDGETS: dict[str, Any] = {
    "context_limit": 9000, "recent_budget": 1200, "summary_budget": 900, "page_budget": 900,
    "recall_budget": 400, "chunk_tokens": 64, "overhead": 40, "signature_chars": 160, "capacity": 400,
}
LOG = "\n".join(f"line {number}: value={number * 7 % 101}" for number in range(1, 120))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("sessionmodel")
    _train_tokenizer_json(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOL_TEMPLATE}), encoding="utf-8")
    return str(directory)


def new_session(model_dir: str, path: Path | None = None, **budgets: Any) -> Session:
    session = Session(f"hf-dir:{model_dir}", system="You are an agent.", tools=ENVIRONMENT, path=path,
                      preset_name="minimal", **{**BUDGETS, **budgets})
    session.add_user("Find the value of line 77.")
    return session


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def assert_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool message follows the assistant turn that made its call; every call in view has its result."""
    made: dict[str, int] = {}
    for position, message in enumerate(messages):
        for made_call in message.get("tool_calls", ()):
            made[made_call["id"]] = position
        if message["role"] == "tool":
            assert message["tool_call_id"] in made, "a tool result whose call was compacted away"
    answered = {message["tool_call_id"] for message in messages if message["role"] == "tool"}
    assert set(made) == answered, "a call in the view without its result"


def test_messages_and_tools_are_the_core_view_in_openai_format(model_dir: str) -> None:
    session = new_session(model_dir)
    messages = session.messages()
    assert messages == [{"role": "system", "content": "You are an agent."},
                        {"role": "user", "content": "Find the value of line 77."}]
    assert [tool["function"]["name"] for tool in session.tools()] == [*(t.name for t in ARC_TOOLS), "read_file"]
    assert session.tools() == view(session.state).tools()
    audit = session.audit()
    assert audit.tool_listing > 0 and audit.prefix > 0
    assert sum(audit.components().values()) == audit.tokens == view(session.state).tokens <= audit.budget
    assert audit.prefix + audit.tool_listing == session.state.setup.prefix_tokens
    names = [component.name for component in VIEW_COMPONENTS]  # the one table of the view's parts
    assert list(audit.components()) == [names[0], "tool_listing", *names[1:]]
    assert list(view(session.state).components.as_dict()) == names
    assert all(f"{name} " in audit.text() for name in names)


def test_a_tool_round_trip_stores_under_a_minted_id_and_answers_recall_here(model_dir: str) -> None:
    session = new_session(model_dir)
    answered = session.add_assistant({"role": "assistant", "content": "Reading the log.",
                                      "tool_calls": [call("call_a", "read_file", {"path": "log.txt"})]})
    assert answered == []
    with pytest.raises(SessionError, match="call_a await their result"):
        session.messages()
    obs_id = session.add_tool_result("call_a", LOG, 0)
    record = session.state.records[-1]
    assert obs_id == record.obs_id and record.content == LOG and obs_id.startswith("§") and "call_a" not in obs_id
    answered = session.add_assistant("Recall it.", [call("call_b", "_recall", {"id": obs_id}),
                                                    call("call_c", "catalog-first", {})])
    assert [message["tool_call_id"] for message in answered] == ["call_b", "call_c"]
    assert session.handle(call("call_b", "_recall", {"id": obs_id})) == answered[0]
    assert f"_recall {obs_id}: chunk 1/" in answered[0]["content"]
    messages = session.messages()
    assert messages == view(session.state).chat_messages()
    assert_pairs(messages)
    audit = session.audit()
    assert audit.recalled_last_turn[0][:2] == (obs_id, 1) and audit.recalled[-1][0] == obs_id
    chunk = session.state.recall_buffer[-1].response
    assert LOG.startswith(chunk.split("\n", 1)[1][:30])  # the recalled chunk is the log's first, exactly
    assert chunk in "".join(message["content"] for message in messages)  # and is in U
    assert sum(audit.components().values()) == audit.tokens <= audit.budget


def test_misuse_gets_clear_errors(model_dir: str) -> None:
    session = new_session(model_dir)
    with pytest.raises(SessionError, match="no assistant turn yet"):
        session.add_tool_result("call_a", "x")
    with pytest.raises(SessionError, match="add the assistant message first"):
        session.handle(call("call_z", "_recall", {"id": "§1"}))
    with pytest.raises(SessionError, match="cannot change once the session has started"):
        session.set_system("other")
    session.add_assistant("", [call("call_a", "read_file", {"path": "a"}), call("call_b", "_recall_meta", {})])
    with pytest.raises(SessionError, match="await their result .add_tool_result. before the next assistant turn"):
        session.add_assistant("again")
    with pytest.raises(SessionError, match="no call of the last assistant turn waits for a result under id 'nope'"):
        session.add_tool_result("nope", "x")
    with pytest.raises(SessionError, match="is to ARC's tool '_recall_meta' and was answered by the session"):
        session.add_tool_result("call_b", "x")
    with pytest.raises(SessionError, match="is to the environment's tool 'read_file': run it"):
        session.handle(call("call_a", "read_file", {"path": "a"}))
    first = session.add_tool_result("call_a", "alpha")
    with pytest.raises(SessionError, match=f"already has its result .stored as {first}"):
        session.add_tool_result("call_a", "alpha")
    with pytest.raises(SessionError, match="must be text"):
        session.add_tool_result("call_a", 42)  # type: ignore[arg-type]
    with pytest.raises(SessionError, match="string id and name"):
        session.add_assistant("", [{"function": {"name": "ls"}}])
    with pytest.raises(SessionError, match="needs the served model's tokenizer"):
        Session()
    unstarted = Session(f"hf-dir:{model_dir}", tools=ENVIRONMENT, preset_name="minimal", **BUDGETS)
    with pytest.raises(SessionError, match="no task yet: add the user's message first"):
        unstarted.messages()
    assert unstarted.add_user("one") is None  # the goal
    assert unstarted.add_user("two") == unstarted.state.records[-1].obs_id  # stored, shown after the goal
    with pytest.raises(ConfigError, match="ARC's own tools"):
        Session(f"hf-dir:{model_dir}", goal="g", tools=[{"type": "function", "function": {"name": "_recall"}}],
                preset_name="minimal", **BUDGETS).messages()


def test_compaction_never_separates_a_call_from_its_result(model_dir: str) -> None:
    """With a small R, many turns fold H into S (by units: machine.fold); every view keeps calls with results."""
    session = new_session(model_dir, recent_budget=700, summary_budget=600)
    for turn in range(30):
        calls = [call(f"call_{turn}_env", "read_file", {"path": f"f{turn}.txt"})]
        if turn % 3 == 2:
            calls.append(call(f"call_{turn}_arc", "_recall_meta", {"id": session.state.records[-1].obs_id}))
        thought = f"step {turn}: " + "thinking it over " * (7 * turn % 20)  # long and short turns and results
        session.add_assistant(thought, calls)
        session.add_tool_result(f"call_{turn}_env", LOG[: 60 * (5 * turn % 11 + 1)], turn % 2)
        messages = session.messages()
        assert_pairs(messages)
        assert session.audit().tokens <= session.state.setup.budget
    audit = session.audit()
    assert session.folded > 0 and audit.compacted and audit.summary > 0
    assert {obs_id for obs_id, _ in audit.compacted} <= {record.obs_id for record in session.state.records}


def test_a_durable_session_resumes_with_a_call_pending(model_dir: str, tmp_path: Path) -> None:
    path = tmp_path / "agent.arc"
    session = new_session(model_dir, path=path)
    session.add_assistant("read", [call("call_a", "read_file", {"path": "log.txt"})])
    first = session.add_tool_result("call_a", LOG)
    session.add_assistant("again", [call("call_b", "read_file", {"path": "b.txt"})])
    state = session.state
    session.close()
    resumed = Session.open(path)
    assert resumed.state == state
    with pytest.raises(SessionError, match="call_b await their result"):
        resumed.messages()
    second = resumed.add_tool_result("call_b", "beta")
    assert second != first and resumed.state.records[0].content == LOG
    messages = resumed.messages()
    resumed.close()
    with Session.open(path) as again:
        assert again.messages() == messages


def test_the_openai_client_types_are_accepted(model_dir: str) -> None:
    types = pytest.importorskip("openai.types.chat", reason="the openai package (extra 'examples') is absent")
    reply = types.ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None,
        "tool_calls": [call("call_1", "read_file", {"path": "x"}), call("call_2", "catalog-first", "")],
    })
    session = new_session(model_dir)
    answered = session.add_assistant(reply)
    assert [message["tool_call_id"] for message in answered] == ["call_2"]
    assert [session.is_arc_call(made) for made in reply.tool_calls or []] == [False, True]
    assert session.handle((reply.tool_calls or [])[1]) == answered[0]
    session.add_tool_result("call_1", "x content")
    assistant = next(message for message in session.messages() if message["role"] == "assistant")
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == '{"path": "x"}'


QWEN3 = qwen3_dir()


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_qwen3_messages_count_as_the_server_counts() -> None:
    """Under Qwen3's own chat template, each request's count (the audit) equals transformers' render-and-encode."""
    assert QWEN3 is not None
    read_file = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                                  "parameters": {"type": "object",
                                                                 "properties": {"path": {"type": "string"}},
                                                                 "required": ["path"]}}}
    session = Session(f"hf-dir:{QWEN3}", system="You are a careful agent.", tools=[read_file],
                      recent_budget=600, summary_budget=400, page_budget=400, recall_budget=400,
                      chunk_tokens=64, page_size=2, context_limit=4000, max_completion=256)
    session.add_user("What is the value of line 77?")
    for turn in range(4):
        text, count = transformers_prompt(QWEN3, session.messages(), session.tools(), enable_thinking=False)
        audit = session.audit()
        assert audit.tokens == count <= audit.budget and sum(audit.components().values()) == count
        session.add_assistant(f"turn {turn}", [call(f"c{turn}", "read_file", {"path": f"{turn}.txt"})])
        obs_id = session.add_tool_result(f"c{turn}", LOG[: 300 * (turn + 1)])
        session.add_assistant("", [call(f"r{turn}", "_recall", {"id": obs_id})])
        assert_pairs(session.messages())
    text, count = transformers_prompt(QWEN3, session.messages(), session.tools(), enable_thinking=False)
    assert session.audit().tokens == count and "<tool_response>" in text


def test_add_user_works_at_any_time_and_is_stored(model_dir: str, tmp_path: Path) -> None:
    """add_user after the start is a UserMessage: stored under a minted id (A1, A2), shown as a user message after
    the tool results, refused while a call awaits its result; a durable session reopens with it."""
    session = new_session(model_dir, path=tmp_path / "s.arc")
    session.add_assistant("reading", [call("call_a", "read_file", {"path": "a"})])
    with pytest.raises(SessionError, match="await their result .add_tool_result. before a user message"):
        session.add_user("wait")
    session.add_tool_result("call_a", "alpha")
    obs_id = session.add_user("Your last reply had no tool call; call one.")
    assert obs_id is not None and session.state.lookup(obs_id) is not None
    messages = session.messages()
    assert messages[-1] == {"role": "user", "content": "Your last reply had no tool call; call one."}
    assert_pairs(messages)
    session.close()
    reopened = Session.open(tmp_path / "s.arc")
    assert reopened.messages() == messages and reopened.add_user("more") is not None
    reopened.close()


def test_a_session_in_postgresql_resumes_in_another_process_with_the_same_state(model_dir: str, pg_url: str) -> None:
    """`Session(path="postgresql://.../DB#KEY")` (issue 30): the same events, the same state, reopened anywhere."""
    location = f"{pg_url}#agent-1"
    session = new_session(model_dir, path=location)  # type: ignore[arg-type]
    session.add_assistant("read", [call("call_a", "read_file", {"path": "log.txt"})])
    stored_id = session.add_tool_result("call_a", LOG)
    state, messages = session.state, session.messages()
    session.close()
    with Session.open(location) as resumed:
        assert resumed.state == state and resumed.messages() == messages
    local = new_session(model_dir)
    local.add_assistant("read", [call("call_a", "read_file", {"path": "log.txt"})])
    assert local.add_tool_result("call_a", LOG) == stored_id and local.state == state


MINI_SIZED_SYSTEM = "You are a helpful assistant that can interact with a computer shell. " * 110  # ~1.5k tokens


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
@pytest.mark.parametrize("window", [4096, 8192, 12288, 16384])
def test_a_session_given_only_its_window_derives_its_budgets(window: int) -> None:
    """Budgets from a window and a prefix (spec/parameters.md): a ~1.5k-token system text (mini-swe-agent's size)
    and only the window given; the session starts with K <= L = L_ctx - G_max, G_max (`max_tokens`) chosen as
    arc-ref proxy chooses it, and its requests count as the server counts them. At 4096 the session was refused
    while its G_max was fixed at 4096 (review h54 F6, the Session's side)."""
    assert QWEN3 is not None
    session = Session(f"hf-dir:{QWEN3}", system=MINI_SIZED_SYSTEM, tools=ENVIRONMENT, context_limit=window)
    session.add_user("What is the value of line 77?")
    audit = session.audit()
    smallest = window_budgets(session.state.config.replace(context_limit=MAX_CONFIG_INTEGER, max_completion=1))
    assert session.max_tokens == min(4096, (window - smallest.smallest_prompt) // 2) >= RESERVE_FLOOR
    assert audit.prefix + audit.tool_listing > 1500 and audit.budget <= audit.limit == window - session.max_tokens
    for turn in range(6):
        session.add_assistant(f"turn {turn}", [call(f"c{turn}", "read_file", {"path": f"{turn}.txt"})])
        session.add_tool_result(f"c{turn}", LOG[: 900 * (turn + 1)])
        text, count = transformers_prompt(QWEN3, session.messages(), session.tools(), enable_thinking=False)
        assert session.audit().tokens == count <= session.audit().budget


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_a_larger_window_never_gives_a_session_a_smaller_reserve_or_view() -> None:
    """G_max and K do not decrease as the window grows (the rule of review h70 F1, now the Session's too), from the
    smallest window the session serves to where G_max reaches 4096."""
    assert QWEN3 is not None
    seen: list[tuple[int, int, int]] = []
    for window in (3400, 3500, 3700, 4096, 4500, 5000, 6000, 8192, 9000, 10000, 12288, 16384):
        session = Session(f"hf-dir:{QWEN3}", system=MINI_SIZED_SYSTEM, tools=ENVIRONMENT, context_limit=window)
        session.add_user("Go.")
        seen.append((window, session.max_tokens, session.audit().budget))
    for (_, reserve, budget), (window, next_reserve, next_budget) in zip(seen, seen[1:]):
        assert next_reserve >= reserve and next_budget >= budget, (window, seen)
    assert seen[-1][1] == 4096 and seen[0][1] < 4096


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_a_given_completion_reserve_is_kept() -> None:
    assert QWEN3 is not None
    session = Session(f"hf-dir:{QWEN3}", system=MINI_SIZED_SYSTEM, tools=ENVIRONMENT, context_limit=8192,
                      max_completion=1000)
    session.add_user("Go.")
    assert session.max_tokens == 1000 and session.audit().limit == 8192 - 1000


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_a_prefix_that_cannot_fit_the_window_is_refused_naming_the_numbers() -> None:
    assert QWEN3 is not None
    session = Session(f"hf-dir:{QWEN3}", system="Be careful. " * 3000, tools=ENVIRONMENT, context_limit=8192)
    session.add_user("Go.")
    with pytest.raises(WindowTooSmall) as refused:
        session.start()
    message = str(refused.value)
    assert f"its smallest view needs {refused.value.needed} tokens of prompt" in message
    assert refused.value.smallest_window == refused.value.needed + 2 * RESERVE_FLOOR
    assert f"a window of at least {refused.value.smallest_window} tokens is needed" in message
    assert "the session reserves G_max = min(4096, half of what the smallest view leaves)" in message
    # one token less than the window it names is refused, that window is served
    for window, served in ((refused.value.smallest_window - 1, False), (refused.value.smallest_window, True)):
        again = Session(f"hf-dir:{QWEN3}", system="Be careful. " * 3000, tools=ENVIRONMENT, context_limit=window)
        again.add_user("Go.")
        if served:
            assert again.max_tokens == RESERVE_FLOOR and again.audit().budget <= window - RESERVE_FLOOR
        else:
            with pytest.raises(WindowTooSmall):
                again.start()


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_a_given_reserve_that_leaves_no_room_is_refused_as_before() -> None:
    assert QWEN3 is not None
    session = Session(f"hf-dir:{QWEN3}", system="Be careful. " * 2000, tools=ENVIRONMENT, context_limit=8192,
                      max_completion=4096)
    session.add_user("Go.")
    with pytest.raises(WindowTooSmall, match=r"B = \d+ .* > L = L_ctx - G_max = 8192 - 4096 = 4096; a window of at"
                                             r" least \d+ tokens is needed"):
        session.start()
