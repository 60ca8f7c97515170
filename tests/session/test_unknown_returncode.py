"""An observation whose environment gave no exit status (an OpenAI tool message; spec/rendering.md section 7):
shown ``rc=?``, never a made-up 0, kept so by a durable store, and refused under a tokenizer that would make it
wider than the budget checks' widest return code."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from arc_ref import render
from arc_ref.config import make_setup, preset
from arc_ref.errors import ConfigError
from arc_ref.session import Session
from tests.session.test_session import call, model_dir, new_session  # noqa: F401  (model_dir: a fixture)


def tool_contents(session: Session) -> list[str]:
    return [message["content"] for message in session.messages() if message["role"] == "tool"]


def test_a_result_without_an_exit_status_is_shown_rc_unknown_and_reopens_so(model_dir: str, tmp_path: Path) -> None:
    path = tmp_path / "task.arc"
    session = new_session(model_dir, path=path)
    session.add_assistant("Read both.", [call("call_a", "read_file", {"path": "a"}),
                                         call("call_b", "read_file", {"path": "b"})])
    session.add_tool_result("call_a", "alpha")
    session.add_tool_result("call_b", "beta", 2)
    assert tool_contents(session) == ["Observation (rc=?):\nalpha", "Observation (rc=2):\nbeta"]
    session.close()
    with sqlite3.connect(path) as database:  # the event row keeps null: no 0 is made up on the way to disk
        lines = [row[0] for row in database.execute("SELECT line FROM events ORDER BY seq")]
    assert any('"call_id":"call_a"' in line and '"returncode":null' in line for line in lines), lines
    with Session.open(path) as reopened:
        assert tool_contents(reopened) == ["Observation (rc=?):\nalpha", "Observation (rc=2):\nbeta"]


def test_a_tokenizer_that_would_show_an_unknown_return_code_wider_than_the_widest_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget checks show every return code at WIDEST_RETURNCODE: were the unknown one's text wider in
    tokens, a stub could outgrow them, so the configuration is refused (never for a shipped tokenizer's ``?``)."""
    make_setup(preset("minimal"))
    monkeypatch.setattr(render, "UNKNOWN_RETURNCODE", "no exit status was given for this observation")
    with pytest.raises(ConfigError, match="spends more tokens on an unknown return code"):
        make_setup(preset("minimal"))
