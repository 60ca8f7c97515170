"""``full_context``: no compaction (paper, Related Works, "Full-Context (No Compaction)").

Every turn is appended and re-sent verbatim, as in ReAct. The view is exact while it fits; once
the prompt exceeds L = L_ctx - G_max the next call overflows, ``compact`` returns False, and the
task ends as no answer (``end="overflow"``). Forced compactions are no-ops, and the agent's text is never clipped
(the other baselines clip it when their kept turns alone are over L: ``TranscriptMethod._clip_agent_text``).
"""

from __future__ import annotations

from arc_eval.errors import InvalidInput
from arc_eval.methods.base import COMPACTION_REASONS, AuxCaller, TranscriptMethod
from arc_eval.registry import MethodEntry, register_method


class FullContextMethod(TranscriptMethod):
    """Keeps the whole transcript; never compacts."""

    name = "full_context"
    clips_agent_text = False  # its view is the whole transcript, exact: it never shrinks it (nor clips a turn)

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        if reason not in COMPACTION_REASONS:
            raise InvalidInput(f"unknown compaction reason {reason!r}; expected one of {COMPACTION_REASONS}")
        return False


register_method(MethodEntry(name=FullContextMethod.name, label="Full_context", order=1, factory=FullContextMethod,
                            compacts=False))
