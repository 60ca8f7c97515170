"""Review findings on arc_ref.session (H9): silent misuse turned into clear errors, a tool-mode default prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arc_ref.errors import ConfigError
from arc_ref.session import Session, SessionError
from tests.core.test_tool_mode import ENVIRONMENT
from tests.session.test_session import BUDGETS, model_dir, new_session  # noqa: F401  (model_dir: a fixture)


def test_the_default_system_prompt_speaks_of_tool_calls_not_text_actions(model_dir: str) -> None:
    session = Session(f"hf-dir:{model_dir}", tools=ENVIRONMENT, preset_name="minimal", **BUDGETS)
    session.add_user("Find the value of line 77.")
    system = session.messages()[0]
    assert system["role"] == "system"
    assert "Action:" not in system["content"], "the text-action protocol is ignored in tool mode"
    assert "_recall" in system["content"] and "tool" in system["content"]
    given = Session(f"hf-dir:{model_dir}", system="Mine.", tools=ENVIRONMENT, preset_name="minimal", **BUDGETS)
    given.add_user("Find the value of line 77.")
    assert given.messages()[0]["content"] == "Mine."


@pytest.mark.parametrize("message", [42, ["hello"], {"role": "user", "content": "hi"}, object()])
def test_an_assistant_turn_that_is_not_an_assistant_message_is_refused(model_dir: str, message: Any) -> None:
    session = new_session(model_dir)
    with pytest.raises(SessionError, match="assistant message"):
        session.add_assistant(message)
    assert session.state.turn == 0, "nothing was added"


@pytest.mark.parametrize("override", [{"chat_format": "chatml"}, {"action_mode": "text"}])
def test_overriding_what_the_tokenizer_fixes_is_refused(model_dir: str, override: dict[str, str]) -> None:
    with pytest.raises(SessionError, match="fixed by the session"):
        Session(f"hf-dir:{model_dir}", goal="g", preset_name="minimal", **{**BUDGETS, **override})


def test_a_relative_model_directory_is_kept_absolute(model_dir: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A durable session stores its configuration: a relative directory would not reopen from another folder."""
    monkeypatch.chdir(Path(model_dir).parent)
    session = Session(f"hf-dir:{Path(model_dir).name}", goal="g", tools=ENVIRONMENT, path=tmp_path / "t.arc",
                      preset_name="minimal", **BUDGETS)
    session.messages()
    session.close()
    monkeypatch.chdir(tmp_path)
    with Session.open(tmp_path / "t.arc") as reopened:
        assert reopened.state.config.tokenizer == f"hf-dir:{Path(model_dir).resolve()}"
        assert reopened.messages()[1]["content"] == "g"


def test_opening_a_store_that_is_not_a_tool_mode_session_is_refused(tmp_path: Path) -> None:
    """A store of `arc-ref mcp` or of DurableStore with a text-mode preset: tools() ended in an AssertionError."""
    from arc_ref.config import preset
    from arc_ref.machine import Observe
    from arc_ref.persist import DurableStore

    with DurableStore.create(tmp_path / "text.arc", preset("minimal", goal="g")) as store:
        store.append(Observe("ls", "a b c", 0))
    with pytest.raises(SessionError, match="action_mode 'text'.*not a session's"):
        Session.open(tmp_path / "text.arc")
    with DurableStore.open(tmp_path / "text.arc") as store:  # the refusal released the writer's lock
        assert store.state.stored == 1


def test_handle_after_reopening_says_why_the_answer_is_not_here(model_dir: str, tmp_path: Path) -> None:
    session = new_session(model_dir, path=tmp_path / "t.arc")
    session.add_assistant("", [{"id": "call_a", "type": "function", "function": {"name": "read_file",
                                                                                 "arguments": "{}"}},
                               {"id": "call_b", "type": "function", "function": {"name": "_recall_meta",
                                                                                 "arguments": '{"id": "§1"}'}}])
    session.close()
    with Session.open(tmp_path / "t.arc") as reopened:
        # call_b comes after read_file's call: its answer waits for that result (spec/rendering.md 13), so it is
        # not in the view yet (review h36: the message said it was)
        with pytest.raises(SessionError, match="reopened after that turn.*waits for the result of call_a"):
            reopened.handle({"id": "call_b", "type": "function", "function": {"name": "_recall_meta",
                                                                             "arguments": '{"id": "§1"}'}})
        reopened.add_tool_result("call_a", "x")
        with pytest.raises(SessionError, match="reopened after that turn.*already in the view"):
            reopened.handle({"id": "call_b", "type": "function", "function": {"name": "_recall_meta",
                                                                             "arguments": '{"id": "§1"}'}})


@pytest.mark.parametrize("setter", ["add_user", "set_goal", "set_system"])
@pytest.mark.parametrize("value", [42, None, b"task"])
def test_a_prefix_text_that_is_not_text_is_refused_at_once_and_the_session_goes_on(
        model_dir: str, setter: str, value: Any) -> None:
    """Review h61: a first add_user(42) was taken as the goal and refused only at the first messages() (a
    ConfigError), after which add_user could no longer set it (the goal was already given): the session was
    stuck. set_system(None) fell back to the core's text-action prompt. Now refused at once, nothing kept."""
    session = Session(f"hf-dir:{model_dir}", tools=ENVIRONMENT, preset_name="minimal", **BUDGETS)
    with pytest.raises(SessionError, match="must be text"):
        getattr(session, setter)(value)
    session.add_user("Find the value of line 77.")
    messages = session.messages()
    assert messages[1] == {"role": "user", "content": "Find the value of line 77."}
    assert "_recall" in messages[0]["content"], "the tool-mode system prompt is kept"


@pytest.mark.parametrize("field", ["system", "goal"])
def test_a_constructor_prefix_that_is_not_text_is_refused_at_once(model_dir: str, field: str) -> None:
    with pytest.raises(SessionError, match="must be text"):
        Session(f"hf-dir:{model_dir}", tools=ENVIRONMENT, preset_name="minimal", **{field: 42}, **BUDGETS)


@pytest.mark.parametrize(("mistake", "message"), [
    ({"context_limt": 9000}, "unknown config keys"),
    ({"context_limit": "9000"}, "must be an integer"),
    ({"recent_budget": -5}, "recent_budget must be >= 1"),
    ({"template_kwargs": {"enable_thinking": object()}}, "template_kwargs"),
    ({"tools": [{"type": "function", "function": {"name": "_recall", "parameters": {"type": "object"}}}]},
     "names of ARC's own tools"),
    ({"tools": [ENVIRONMENT[0], ENVIRONMENT[0]]}, "tool names must be distinct"),
    ({"tools": [{"type": "function", "name": "read_file"}]}, "tool 1 must be"),
    ({"tokenizer": "hf-dir:/nonexistent/arc-model"}, "is not a directory"),
])
def test_a_configuration_mistake_is_refused_by_the_constructor(model_dir: str, mistake: dict[str, Any],
                                                               message: str) -> None:
    """Review h61 F6: each of these was refused only by the first messages() (or audit()), when the session could
    no longer be fixed (no setter for budgets or tools); now by the line that made it, as a ConfigError."""
    arguments: dict[str, Any] = {"tools": ENVIRONMENT, "preset_name": "minimal", **BUDGETS}
    tokenizer = mistake.pop("tokenizer", f"hf-dir:{model_dir}")
    arguments.update(mistake)
    with pytest.raises(ConfigError, match=message):
        Session(tokenizer, **arguments)


def test_a_tokenizer_that_is_not_a_model_directory_is_refused_by_the_constructor(model_dir: str) -> None:
    with pytest.raises(ConfigError, match="needs the tokenizer 'hf-dir:DIR'"):
        Session(f"hf:{model_dir}/tokenizer.json", tools=ENVIRONMENT, preset_name="minimal", **BUDGETS)
