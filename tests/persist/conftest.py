"""The Hypothesis profile of the executable proofs (ci by default) applies to the store's properties too."""

from __future__ import annotations

from proofs_check.profiles import load_profile

load_profile()
