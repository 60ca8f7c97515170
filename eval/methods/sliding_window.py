"""``sliding_window``: keep the most recent turns that fit, drop older ones (paper, Related Works).

On a compaction (proactive when its estimate exceeds L = L_ctx - G_max, reactive after an
overflow, or forced) it keeps the longest suffix of whole turns within the recent budget
(``recent_fraction`` x L, default a quarter; at least the last turn) and discards everything older
for good. Nothing is summarized or stored: a value that leaves the window is lost. The
keep-verbatim threshold does not apply (a pure window keeps no older observation, short or long).
"""

from __future__ import annotations

from arc_eval.methods.base import AuxCaller, TranscriptMethod, Turn
from arc_eval.registry import MethodEntry, register_method


class SlidingWindowMethod(TranscriptMethod):
    """Prefix + the most recent turns; older turns are dropped."""

    name = "sliding_window"

    async def _condense(self, older: list[Turn], aux: AuxCaller) -> None:
        """Nothing is kept of the older turns."""


register_method(MethodEntry(name=SlidingWindowMethod.name, label="Sliding_window", order=2, factory=SlidingWindowMethod))
