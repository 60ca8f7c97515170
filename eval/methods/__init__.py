"""The context-management methods behind one interface (``arc_eval.methods.base.Method``).

Each method registers itself in its own module (``arc_eval.registry.register_method``: its name, report
label, place in tables, class and options); ``make_method(name, settings)`` builds a fresh method object
for one task.
"""

from __future__ import annotations

from arc_eval.methods.base import Method, MethodSettings
from arc_eval.registry import METHODS


def method_names() -> tuple[str, ...]:
    """Every registered method, in table order (what ``--methods all`` runs)."""
    return METHODS.names()


def make_method(name: str, settings: MethodSettings) -> Method:
    """A fresh method object for one task (a ConfigError naming the known methods for an unknown name)."""
    method: Method = METHODS.get(name).factory(settings)
    return method


__all__ = ["Method", "MethodSettings", "make_method", "method_names"]
