"""Hypothesis profiles: ``ci`` (bounded, the default), ``thorough`` (long local runs), ``dev`` (quick).

Select with the environment variable ARC_PROOFS_PROFILE or ``python -m proofs_check --profile NAME``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_ENV = "ARC_PROOFS_PROFILE"
DEFAULT_PROFILE = "ci"

_BASE = settings(
    deadline=None,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
    print_blob=True,
)

settings.register_profile("ci", _BASE, max_examples=60, stateful_step_count=40, derandomize=True)
settings.register_profile("thorough", _BASE, max_examples=2000, stateful_step_count=120)
settings.register_profile("dev", _BASE, max_examples=15, stateful_step_count=20)


def load_profile(name: str | None = None) -> str:
    """Activate a profile (argument, else $ARC_PROOFS_PROFILE, else ``ci``) and return its name."""
    chosen = name or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    settings.load_profile(chosen)
    return chosen
