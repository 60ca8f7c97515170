"""Tool mode's view messages (spec/rendering.md section 13) read back with arc_ref.parse, like text mode's."""

from __future__ import annotations

import json

from arc_ref import parse
from arc_ref.machine import ToolResult, ToolTurn, init, tool_result, tool_turn, view
from arc_ref.message import ToolCall
from proofs_check.test_parse import rerender
from tests.core.test_tool_mode import model_dir, tool_config  # noqa: F401  (model_dir is a fixture)


def test_every_tool_mode_message_reads_back(model_dir: str) -> None:  # noqa: F811
    state = init(tool_config(model_dir, recent_budget=700))
    kinds: set[str] = set()
    for round_ in range(8):
        calls = (ToolCall(f"r{round_}", "read_file", json.dumps({"path": f"f{round_}"})),
                 ToolCall(f"u{round_}", "rm_rf", "{}"), ToolCall(f"c{round_}", "catalog-next", "{}"))
        state, turn = tool_turn(state, ToolTurn(f"round {round_}", calls))
        for call in turn.environment_calls:
            state, _ = tool_result(state, ToolResult(call.call_id, f"line of {call.call_id}\n" * (3 + 150 * (round_ % 3))))
        if state.records:
            recall = ToolCall(f"m{round_}", "_recall", json.dumps({"id": state.records[0].obs_id}))
            state, _ = tool_turn(state, ToolTurn("", (recall,)))
        for message in view(state).messages[2:]:
            component = parse.parse_view_message(message.role, message.content)
            assert component is not None and rerender(component) == message.content
            kinds.add(type(component).__name__)
    assert {"ToolTurnMessage", "ToolNotes", "LeanObservationMessage", "ObservationStubMessage", "Summary", "CatalogPage",
            "tuple"} <= kinds, kinds
