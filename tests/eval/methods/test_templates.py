"""The baselines' templates read back with their own parsers: parse(render(x)) == x (issue 13, templates)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from arc_eval.methods.base import OBSERVATION, Turn, assistant_text, observation_text
from arc_eval.methods.llm_summary import SUMMARY_REQUEST, FoldedTurn, parse_turns, render_turn
from arc_eval.methods.structured_state import STATE_REQUEST
from arc_eval.types import Message, Observation

# Free text without the templates' separators (no backtick, no "### Turn", no blank-line runs).
lines = st.text(st.sampled_from("abc xyz019_.-=é§"), max_size=20)
texts = st.lists(lines, max_size=4).map("\n".join)
actions = st.text(st.sampled_from("abcxyz019_. -"), min_size=1, max_size=16).map(str.strip).filter(bool)


@given(st.integers(-3, 300), actions, texts)
def test_observation_reads_back(returncode: int, action: str, text: str) -> None:
    shown = observation_text(action, Observation(text, returncode))
    assert OBSERVATION.parse(shown) == {"returncode": returncode, "action": action, "text": text}


@given(st.lists(st.tuples(lines, actions, texts, st.integers(-1, 2), st.booleans()), max_size=5))
def test_condensing_request_turns_read_back(specs: list[tuple[str, str, str, int, bool]]) -> None:
    turns: list[Turn] = []
    expected: list[FoldedTurn] = []
    for thought, action, text, returncode, observed in specs:
        assistant = Message("assistant", assistant_text(thought, action))
        observation = Message("user", observation_text(action, Observation(text, returncode))) if observed else None
        turns.append(Turn(assistant, observation, action, text if observed else "", returncode if observed else 0))
        expected.append(FoldedTurn(assistant.content, action, returncode, text) if observed
                        else FoldedTurn(assistant.content, None))
    body = "\n".join(render_turn(turn) for turn in turns)
    assert parse_turns(body) == expected
    for template in (SUMMARY_REQUEST, STATE_REQUEST):
        request = template.render(goal="GOAL\nline two", current="- a\n- b", body=body)
        assert template.parse(request) == {"goal": "GOAL\nline two", "current": "- a\n- b", "body": body}
