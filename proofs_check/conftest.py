"""pytest hooks for the executable proofs: load the Hypothesis profile, count examples per property."""

from __future__ import annotations

from proofs_check.profiles import load_profile

load_profile()
