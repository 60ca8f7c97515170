"""Deliberately broken variants of the contracted arithmetic, each with the counterexample it must yield.

CrossHair must report a counterexample for every function here (and none for the real ones in arc_ref):
that is the evidence that the contracts can fail. Each entry of BROKEN also records a counterexample we
know, which `python -m proofs_check` re-checks by plain evaluation.
"""

from __future__ import annotations

from typing import Any, Callable


def chunk_count_floor(n_tokens: int, chunk_tokens: int) -> int:
    """Bug: floor instead of ceiling (a partial last chunk is lost).

    pre: n_tokens >= 0
    pre: chunk_tokens >= 1
    post: (__return__ - 1) * chunk_tokens < n_tokens <= __return__ * chunk_tokens or (n_tokens == 0 and __return__ == 0)
    """
    return n_tokens // chunk_tokens


def chunk_bounds_unclamped(n_tokens: int, chunk_tokens: int, chunk: int) -> tuple[int, int]:
    """Bug: the last chunk is not clamped to n.

    pre: chunk_tokens >= 1
    pre: 1 <= chunk <= -(-n_tokens // chunk_tokens)
    post: 0 <= __return__[0] < __return__[1] <= n_tokens
    post: __return__[1] - __return__[0] <= chunk_tokens
    """
    return (chunk - 1) * chunk_tokens, chunk * chunk_tokens


def page_of_off_by_one(index: int, page_size: int) -> int:
    """Bug: j // p + 1 puts the last stub of a page on the next page.

    pre: index >= 1
    pre: page_size >= 1
    post: (__return__ - 1) * page_size + 1 <= index <= __return__ * page_size
    """
    return index // page_size + 1


def page_span_unclamped(page: int, page_size: int, stored: int) -> tuple[int, int]:
    """Bug: the last page is not clamped to N.

    pre: page_size >= 1
    pre: 1 <= page <= -(-stored // page_size)
    post: __return__[0] <= __return__[1] <= stored
    """
    return (page - 1) * page_size + 1, page * page_size


def encode_counter_hex(index: int, bits: int) -> str:
    """Bug: hex digits where the spec says decimal.

    pre: 1 <= bits <= 200
    pre: 1 <= index < 2 ** bits
    post: __return__.isdigit() and int(__return__) == index
    """
    return format(index, f"0{len(str(2 ** bits - 1))}x")


def within_budget_forgets_overhead(costs: tuple[int, ...], budgets: tuple[int, ...]) -> bool:
    """Bug: the last component (eta) is not checked, so the sum can exceed K.

    pre: len(costs) == len(budgets)
    post: (not __return__) or sum(costs) <= sum(budgets)
    """
    return all(cost <= budget for cost, budget in zip(costs[:-1], budgets[:-1]))


def _post_chunk_count(args: tuple[int, int], result: int) -> bool:
    n, q = args
    return (result - 1) * q < n <= result * q or (n == 0 and result == 0)


def _post_chunk_bounds(args: tuple[int, int, int], result: tuple[int, int]) -> bool:
    n, q, _ = args
    return 0 <= result[0] < result[1] <= n and result[1] - result[0] <= q


def _post_page_of(args: tuple[int, int], result: int) -> bool:
    j, p = args
    return (result - 1) * p + 1 <= j <= result * p


def _post_page_span(args: tuple[int, int, int], result: tuple[int, int]) -> bool:
    return result[0] <= result[1] <= args[2]


def _post_encode_counter(args: tuple[int, int], result: str) -> bool:
    return result.isdigit() and int(result) == args[0]


def _post_within_budget(args: tuple[tuple[int, ...], tuple[int, ...]], result: bool) -> bool:
    return (not result) or sum(args[0]) <= sum(args[1])


# name -> (function, a known counterexample, the postcondition it violates)
BROKEN: dict[str, tuple[Callable[..., Any], tuple[Any, ...], Callable[[Any, Any], bool]]] = {
    "chunk_count_floor": (chunk_count_floor, (1, 2), _post_chunk_count),
    "chunk_bounds_unclamped": (chunk_bounds_unclamped, (3, 2, 2), _post_chunk_bounds),
    "page_of_off_by_one": (page_of_off_by_one, (2, 2), _post_page_of),
    "page_span_unclamped": (page_span_unclamped, (1, 2, 1), _post_page_span),
    "encode_counter_hex": (encode_counter_hex, (10, 4), _post_encode_counter),
    "within_budget_forgets_overhead": (within_budget_forgets_overhead, ((0, 1), (0, 0)), _post_within_budget),
}

# The contracted functions of the core that CrossHair must find no counterexample for.
CONTRACTED = (
    "arc_ref.ids.counter_bits",
    "arc_ref.ids.decimal_width",
    "arc_ref.ids.encode_counter",
    "arc_ref.ids.decode_counter",
    "arc_ref.catalog.page_count",
    "arc_ref.catalog.page_of",
    "arc_ref.catalog.page_span",
    "arc_ref.recall.chunk_count",
    "arc_ref.recall.chunk_bounds",
    "arc_ref.recall.chunk_cuts",
    "arc_ref.view.within_budget",
)

# Which statement each contracted function supports.
CONTRACT_STATEMENTS = {
    "arc_ref.ids.counter_bits": ("A1", "L1"),
    "arc_ref.ids.decimal_width": ("A1",),
    "arc_ref.ids.encode_counter": ("A1", "L1"),
    "arc_ref.ids.decode_counter": ("A1", "L1"),
    "arc_ref.catalog.page_count": ("A3", "L3"),
    "arc_ref.catalog.page_of": ("L3", "T3"),
    "arc_ref.catalog.page_span": ("A3", "L3"),
    "arc_ref.recall.chunk_count": ("A5", "L4", "C1"),
    "arc_ref.recall.chunk_bounds": ("A5", "L4"),
    "arc_ref.recall.chunk_cuts": ("L4", "T4"),
    "arc_ref.view.within_budget": ("L2", "T1"),
}
