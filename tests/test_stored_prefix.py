"""ARC's own prefix text, counted: a guard for stored conversations (review h75 F1).

A stored conversation (`arc-ref proxy --store DIR` or PostgreSQL, a durable Session) keeps its window, G_max and
budgets in its first row, but not ARC's own texts: its instructions, its note and its tools listing are written by
the running code and counted in every view's prefix B. The budgets fill L to within a token or two, so an arc-ref
whose prefix counts more refuses every conversation stored before it (K > L): 57e22ce lengthened ARC's tool listing
by 16 tokens and did exactly that, unnoticed. These counts are pinned so that such a change is made on purpose:
when one fails, the change to ARC's texts is real, and README.md's "Upgrading with stored conversations" must name
the commit from which stored conversations are refused; then update the number here.
"""

from __future__ import annotations

from typing import Any

import pytest

from arc_ref.budgets import window_budgets
from arc_ref.config import preset
from arc_ref.frontends.proxy import ARC_NOTE
from arc_ref.session import TOOL_MODE_SYSTEM
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

QWEN3 = qwen3_dir()
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
AGENT_SYSTEM = "You are a careful software agent working in a shell."
GOAL = "Count the lines of notes.txt and submit the number."
REFUSED_FROM = ("a changed count means every conversation stored by an earlier arc-ref is refused by this one (K > L):"
                " say from which commit in README.md's 'Upgrading with stored conversations', then update the number")


def prefix_tokens(system: str, tools: list[dict[str, Any]]) -> int:
    assert QWEN3 is not None
    config = preset("paper", tokenizer=f"hf-dir:{QWEN3}", chat_format="template", action_mode="tools", tools=tools,
                    system=system, goal=GOAL)
    return window_budgets(config).prefix_tokens


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_the_proxys_prefix_for_a_fixed_agent_prefix_counts_as_pinned() -> None:
    """The system text as `arc-ref proxy` shows it (the agent's, then ARC's note), ARC's tools and the agent's."""
    assert prefix_tokens(f"{AGENT_SYSTEM}\n\n{ARC_NOTE}", [BASH]) == 819, REFUSED_FROM


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_the_sessions_default_prefix_counts_as_pinned() -> None:
    """A Session's default system text (`TOOL_MODE_SYSTEM`), ARC's tools and the agent's."""
    assert prefix_tokens(TOOL_MODE_SYSTEM, [BASH]) == 844, REFUSED_FROM
