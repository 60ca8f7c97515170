"""The six context-management methods behind one interface (``arc_eval.methods.base.Method``).

``make_method(name, settings)`` builds a fresh method object for one task. ``arc`` is the lead's
``arc_eval.methods.arc.ArcMethod`` (imported lazily); the five baselines live beside this file.
"""

from __future__ import annotations

import importlib
from typing import Callable

from arc_ref.errors import ConfigError
from arc_eval.methods.base import Method, MethodSettings

METHOD_NAMES = ("full_context", "sliding_window", "llm_summary", "structured_state", "rag_memory", "arc")
BASELINE_NAMES = METHOD_NAMES[:5]

_BASELINES: dict[str, tuple[str, str]] = {
    "full_context": ("arc_eval.methods.full_context", "FullContextMethod"),
    "sliding_window": ("arc_eval.methods.sliding_window", "SlidingWindowMethod"),
    "llm_summary": ("arc_eval.methods.llm_summary", "LlmSummaryMethod"),
    "structured_state": ("arc_eval.methods.structured_state", "StructuredStateMethod"),
    "rag_memory": ("arc_eval.methods.rag_memory", "RagMemoryMethod"),
    "arc": ("arc_eval.methods.arc", "ArcMethod"),
}


def method_class(name: str) -> Callable[[MethodSettings], Method]:
    """The class implementing ``name`` (a clear ConfigError for an unknown or missing method)."""
    if name not in _BASELINES:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(METHOD_NAMES)}")
    module_name, class_name = _BASELINES[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name != module_name:
            raise
        raise ConfigError(f"method {name!r} is not available: module {module_name} is not installed yet") from None
    factory: Callable[[MethodSettings], Method] = getattr(module, class_name)
    return factory


def make_method(name: str, settings: MethodSettings) -> Method:
    """A fresh method object for one task."""
    return method_class(name)(settings)


def method_available(name: str) -> bool:
    try:
        method_class(name)
    except ConfigError:
        return False
    return True


__all__ = [
    "BASELINE_NAMES",
    "METHOD_NAMES",
    "Method",
    "MethodSettings",
    "make_method",
    "method_available",
    "method_class",
]
