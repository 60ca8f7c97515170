"""The context-management methods behind one interface (``arc_eval.methods.base.Method``).

Each method registers itself in its own module (``arc_eval.registry.register_method``: its name, report
label, place in tables, class and options); ``make_method(name, settings)`` builds a fresh method object
for one task.
"""

from __future__ import annotations

import argparse

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


def parse_methods(text: str) -> tuple[str, ...]:
    """``all`` or a comma-separated list of method names, each once (an argparse ``type``)."""
    known = method_names()
    if text.strip() == "all":
        return known
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(unknown) or text!r}; use 'all' or a comma-separated "
            f"subset of {', '.join(known)}"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"lists {', '.join(repeated)} more than once; give each once")
    return names
