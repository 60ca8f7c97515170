"""Hypothesis profiles: ``ci`` (bounded, the default), ``thorough`` (long local runs), ``dev`` (quick).

Select with the environment variable ARC_PROOFS_PROFILE or ``python -m proofs_check --profile NAME``.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

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
    """Activate a profile (argument, else $ARC_PROOFS_PROFILE, else ``ci``) and return its name; the local modules
    imported first (`import_local_modules`), so that a derandomized property draws the same examples however it
    is run."""
    chosen = name or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    settings.load_profile(chosen)
    import_local_modules()
    return chosen


def import_local_modules() -> None:
    """Import every module of arc_ref and proofs_check now (test files, conftest and __main__ aside).

    Hypothesis (6.1xx) draws some values from the constants of the project's own modules loaded when it draws,
    so a derandomized property's examples depended on which modules the tests run before it had imported: view.py
    mutant 39 was killed by the property written for it run alone and not when its file ran whole (review h33
    F1). With every module loaded before the first property, each draws the same examples in any selection or
    order. A module whose optional dependency is absent is left out (the same in every run of that
    environment)."""
    import arc_ref
    import proofs_check

    for package in (arc_ref, proofs_check):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            leaf = module.name.rpartition(".")[2]
            if leaf.startswith("test_") or leaf in ("conftest", "__main__"):
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:
                continue
