"""Which property checks which numbered statement of the appendix, and how many examples each ran.

A property is declared with ``@proves("L1", "T2")`` right under ``@given`` (or on a state machine's
rule), so the mapping statement -> property lives next to the property itself; `spec/` names the
same properties and a test keeps the two in agreement.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, Callable, TypeVar

from attrs import frozen

# The 21 numbered statements of the appendix "Formal Guarantees" (spec/ has one section each).
STATEMENTS: dict[str, str] = {
    "D1": "Token sequences and observation history",
    "D2": "Usable prompt budget L = L_ctx - G_max",
    "A1": "Injective fixed-width occurrence identifiers",
    "A2": "Append-only observation store",
    "A3": "Persistent external catalog with bounded pages",
    "A4": "Budgeted active view",
    "A5": "Exact chunked recall",
    "L1": "Identifier uniqueness",
    "L2": "Uniform active-view bound",
    "L3": "Bounded-page persistence and finite discoverability",
    "L4": "Exact non-overlapping chunk reconstruction",
    "C1": "Recall-action and serialization overhead",
    "C2": "First-order payload optimality of append-only ARC",
    "T1": "Theorem claim 1: prompt safety",
    "T2": "Theorem claim 2: stable archival fidelity",
    "T3": "Theorem claim 3: persistent finite discoverability",
    "T4": "Theorem claim 4: exact address-conditioned recall without re-execution",
    "T5": "Theorem claim 5: observational losslessness",
    "T6": "Theorem claim 6: separation of active and archival growth",
    "P1": "Proposition: impossibility of all-visible citation persistence",
    "P2": "Proposition: exact recovery requires linearly growing external memory",
}


@frozen
class PropertyInfo:
    name: str  # module-qualified test name, e.g. proofs_check.test_ids.test_lemma1_ids_distinct
    statements: tuple[str, ...]


PROPERTIES: dict[str, PropertyInfo] = {}
EXAMPLES: Counter[str] = Counter()

F = TypeVar("F", bound=Callable[..., Any])


def proves(*statements: str) -> Callable[[F], F]:
    """Declare the statements a property checks, and count every example it runs."""
    unknown = [key for key in statements if key not in STATEMENTS]
    if unknown or not statements:
        raise ValueError(f"unknown or missing statement keys {unknown}; known: {', '.join(STATEMENTS)}")

    def decorate(function: F) -> F:
        name = f"{function.__module__}.{function.__name__}"
        PROPERTIES[name] = PropertyInfo(name, tuple(statements))

        @functools.wraps(function)
        def counted(*args: Any, **kwargs: Any) -> Any:
            EXAMPLES[name] += 1
            return function(*args, **kwargs)

        return counted  # type: ignore[return-value]

    return decorate


def register(name: str, statements: tuple[str, ...]) -> None:
    """Declare a property that is not a plain function (a state machine) when it is defined."""
    PROPERTIES.setdefault(name, PropertyInfo(name, statements))


def tally(name: str, statements: tuple[str, ...]) -> None:
    """Count one example of a property that is not a plain function (a state machine run)."""
    PROPERTIES.setdefault(name, PropertyInfo(name, statements))
    EXAMPLES[name] += 1
