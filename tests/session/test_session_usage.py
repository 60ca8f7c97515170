"""The server's usage handed back to the session (review h61 F3): `add_assistant(message, usage=reply.usage)`
compares the server's ``usage.prompt_tokens`` with the session's count of the messages the last `messages()`
returned (tools listing and generation prompt included), warns once per session when they differ
(`CountsDifferWarning`) and keeps the comparison in `audit()`, as `arc-ref proxy` does for its calls.

On Qwen3's real tokenizer (../shared/data/qwen3-tokenizer): the server stands in as transformers' own rendering
and count of the request (what vLLM counts), and as a fake usage (a dict, the openai client's object).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import pytest

from arc_ref.session import CountsDifferWarning, Session, SessionError
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, qwen3_with_template, transformers_prompt
from tests.core.test_tool_mode import ENVIRONMENT

QWEN3 = qwen3_dir()
pytestmark = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
LOG = "\n".join(f"line {number}: value={number * 7 % 101}" for number in range(1, 120))


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def new_session(directory: Path | str | None = None, path: Path | None = None) -> Session:
    session = Session(f"hf-dir:{directory or QWEN3}", system="You are an agent.", tools=ENVIRONMENT, path=path,
                      chunk_tokens=64, context_limit=4000, max_completion=256)
    session.add_user("What is the value of line 77?")
    return session


def served_count(session: Session) -> dict[str, int]:
    """The usage a server with Qwen3's real template returns for the request `session.messages()` makes."""
    assert QWEN3 is not None
    _, count = transformers_prompt(QWEN3, session.messages(), session.tools(), enable_thinking=False)
    return {"prompt_tokens": count, "completion_tokens": 7, "total_tokens": count + 7}


@pytest.fixture
def no_warning() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    assert not [warning for warning in caught if issubclass(warning.category, CountsDifferWarning)]


def test_the_served_models_count_is_not_reported_and_is_in_the_audit(no_warning: Any) -> None:
    """Every reply's usage equal to the served template's count (tools listing, generation prompt included): no
    warning; the audit shows the server's count beside the session's."""
    session = new_session()
    for turn in range(4):
        usage = served_count(session)
        sent = session.audit().tokens
        session.add_assistant({"role": "assistant", "content": f"turn {turn}",
                               "tool_calls": [call(f"c{turn}", "read_file", {"path": f"{turn}.txt"})]}, usage=usage)
        audit = session.audit()
        assert (audit.server_tokens, audit.sent_tokens) == (usage["prompt_tokens"], sent)
        assert (audit.usage_checked, audit.counts_differing) == (2 * turn + 1, 0)
        obs_id = session.add_tool_result(f"c{turn}", LOG[: 300 * (turn + 1)])
        session.add_assistant("", [call(f"r{turn}", "_recall", {"id": obs_id})], usage=served_count(session))
    audit = session.audit()
    assert (audit.usage_checked, audit.counts_differing) == (8, 0)
    assert "server counted" in audit.text() and "0 of 8" in audit.text()


def test_the_openai_clients_usage_object_is_read() -> None:
    openai_types = pytest.importorskip("openai.types", reason="the openai package is absent")
    session = new_session()
    count = served_count(session)["prompt_tokens"]
    usage = openai_types.CompletionUsage(prompt_tokens=count + 3, completion_tokens=1, total_tokens=count + 4)
    with pytest.warns(CountsDifferWarning, match=f"the server counted {count + 3} prompt tokens where the session"
                                                 f" counted {count}"):
        session.add_assistant({"role": "assistant", "content": "done"}, usage=usage)
    audit = session.audit()
    assert (audit.server_tokens, audit.sent_tokens, audit.usage_checked, audit.counts_differing) == (
        count + 3, count, 1, 1)


def test_a_wrong_template_is_reported_once_per_session_and_every_difference_counted() -> None:
    """The session counts with a template that is not the served one (review h61 F3: 'You can call any' for 'You
    may call'); the server's usage differs on every call: one warning, each counted."""
    assert QWEN3 is not None
    template = (QWEN3 / "chat_template.jinja").read_text(encoding="utf-8")
    wrong = template.replace("You may call", "You can call any")
    assert wrong != template
    session = new_session(qwen3_with_template(wrong, "arc-wrong-template-"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for turn in range(3):
            session.add_assistant("", [call(f"c{turn}", "read_file", {"path": f"{turn}.txt"})],
                                  usage=served_count(session))
            session.add_tool_result(f"c{turn}", LOG[: 200 * (turn + 1)])
    differing = [warning for warning in caught if issubclass(warning.category, CountsDifferWarning)]
    assert len(differing) == 1, [str(warning.message) for warning in caught]
    assert "is hf-dir:" in str(differing[0].message) and differing[0].filename == __file__
    audit = session.audit()
    assert (audit.usage_checked, audit.counts_differing) == (3, 3)
    assert audit.sent_tokens is not None and audit.server_tokens != audit.sent_tokens
    assert "3 of 3" in audit.text()
    # another session warns again: once per session, not once per process
    other = new_session(qwen3_with_template(wrong, "arc-wrong-template-"))
    with pytest.warns(CountsDifferWarning):
        other.add_assistant("done", usage=served_count(other))


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": None}, {"completion_tokens": 3},
                                   {"prompt_tokens": "721"}, {"prompt_tokens": True}, {"prompt_tokens": 7.0}])
def test_a_usage_without_prompt_tokens_is_not_compared(usage: Any, no_warning: Any) -> None:
    session = new_session()
    session.messages()
    session.add_assistant("done", usage=usage)
    audit = session.audit()
    assert (audit.usage_checked, audit.counts_differing, audit.server_tokens, audit.sent_tokens) == (0, 0, None, None)
    assert "server counted" not in audit.text()


def test_a_reply_to_messages_the_session_did_not_return_is_not_compared(tmp_path: Path, no_warning: Any) -> None:
    """Compared only with the messages the last `messages()` returned since the previous assistant turn: none
    (the caller sent messages of its own, or the session was reopened since) is not compared."""
    session = new_session(path=tmp_path / "s.arc")
    session.add_assistant("", [call("c0", "read_file", {"path": "a"})], usage={"prompt_tokens": 1})  # none yet
    session.add_tool_result("c0", LOG[:500])
    session.add_assistant("", [call("c1", "read_file", {"path": "b"})], usage={"prompt_tokens": 2})
    session.add_tool_result("c1", LOG[:600])
    assert session.audit().usage_checked == 0
    usage = served_count(session)
    session.add_assistant("", [call("c2", "read_file", {"path": "c"})], usage=usage)
    session.add_tool_result("c2", LOG[:700])
    session.add_assistant("", [call("c3", "read_file", {"path": "d"})], usage=usage)  # that request's again
    assert (session.audit().usage_checked, session.audit().counts_differing) == (1, 0)
    session.close()
    reopened = Session.open(tmp_path / "s.arc")
    reopened.add_tool_result("c3", "d")
    reopened.add_assistant("reopened", usage={"prompt_tokens": 3})  # the messages were the old session object's
    assert (reopened.audit().usage_checked, reopened.audit().server_tokens) == (0, None)
    reopened.close()


def test_the_last_messages_count_is_the_one_compared(no_warning: Any) -> None:
    """messages(), then a user message, then messages() again: the reply answers the second request."""
    session = new_session()
    session.messages()
    session.add_user("Also: line 78.")
    usage = served_count(session)
    session.add_assistant("both", usage=usage)
    assert (session.audit().server_tokens, session.audit().counts_differing) == (usage["prompt_tokens"], 0)


@pytest.mark.parametrize("usage", [42, "prompt_tokens=5", [5], b"5"])
def test_a_usage_that_is_not_a_usage_is_refused_and_the_session_is_unchanged(usage: Any) -> None:
    session = new_session()
    before = session.messages()
    with pytest.raises(SessionError, match="usage must be the reply's usage"):
        session.add_assistant("done", usage=usage)
    assert session.messages() == before and session.state.turn == 0


def test_a_refused_turn_records_no_usage() -> None:
    session = new_session()
    session.messages()
    session.add_assistant("", [call("c0", "read_file", {"path": "a"})])
    with pytest.raises(SessionError, match="await their result"):
        session.add_assistant("again", usage={"prompt_tokens": 5})
    assert session.audit().usage_checked == 0


def test_as_an_error_the_warning_comes_after_the_turn_is_added() -> None:
    """Where a warnings filter makes CountsDifferWarning an error, the turn is added first: ARC's answer is there."""
    session = new_session()
    stored = session.add_assistant("", [call("c0", "read_file", {"path": "a"})])
    assert stored == []
    obs_id = session.add_tool_result("c0", LOG)
    count = served_count(session)["prompt_tokens"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CountsDifferWarning)
        with pytest.raises(CountsDifferWarning):
            session.add_assistant("", [call("r0", "_recall", {"id": obs_id})], usage={"prompt_tokens": count + 1})
    assert session.state.turn == 2 and session.handle(call("r0", "_recall", {"id": obs_id}))["content"].startswith(
        f"_recall {obs_id}: chunk 1/")
    assert (session.audit().usage_checked, session.audit().counts_differing) == (1, 1)
