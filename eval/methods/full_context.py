"""``full_context``: no compaction (paper, Related Works, "Full-Context (No Compaction)").

Every turn is appended and re-sent verbatim, as in ReAct. The view is exact while it fits; once
the prompt exceeds L = L_ctx - G_max the next call overflows, ``compact`` returns False, and the
task ends as no answer (``end="overflow"``). Forced compactions are no-ops.
"""

from __future__ import annotations

from arc_eval.errors import InvalidInput
from arc_eval.methods.base import COMPACTION_REASONS, AuxCaller, TranscriptMethod
from arc_eval.registry import MethodEntry, register_method


class FullContextMethod(TranscriptMethod):
    """Keeps the whole transcript; never compacts."""

    name = "full_context"

    async def compact(self, reason: str, aux: AuxCaller) -> bool:
        if reason not in COMPACTION_REASONS:
            raise InvalidInput(f"unknown compaction reason {reason!r}; expected one of {COMPACTION_REASONS}")
        return False


register_method(MethodEntry(name=FullContextMethod.name, label="Full_context", order=1, factory=FullContextMethod,
                            compacts=False))
