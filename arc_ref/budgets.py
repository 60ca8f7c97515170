"""Budgets from a window and a prefix: M, R, P, p, c, Q, q and eta derived so that K <= L (A4).

The one owner of this derivation (spec/parameters.md, "Budgets from a window and a prefix"): the Session and
`arc-ref proxy` call `fit_to_window`; arc-eval's ARC method calls `window_budgets` and accepts regime ``shares``
only (its recall knobs are the experiment's variable, honoured whole or refused). The caller gives the served window
``context_limit`` (L_ctx), the completion reserve ``max_completion`` (G_max), the tokenizer and chat format,
and the conversation's own prefix F (system text, tools listing, goal); everything else is derived:

1. eta = max(64, the generation prompt); c = max(112, the smallest stub c_min); B measured (parameters.md).
2. Regime ``shares`` (the evaluation's rule): Q = max(Q*, its floor with q*), q = q*; what is left of L after
   B, Q and eta is split M : R : P = 2 : 4 : 1 (floor division); p = (P - page frame) // c, at least 1.
   Used when each of M, R, P reaches its floor (parameters.md, check 3, with p = 1).
3. Regime ``floors`` otherwise: each of M, R, P, Q takes its floor (P with p = 1, Q with q = 1) and the surplus
   s = L - B - eta - (their floors) is split Q : M : R : P = 2 : 2 : 4 : 1 (floor division); Q is capped at
   max(Q*, its floor with q*), what the cap removes going to R; q = min(q*, Q - recall frame - rho).
4. s < 0: the prefix alone (with the smallest S, H, G, U and eta) cannot fit L: refused, naming the numbers.

Q* and q* (``recall_budget``, ``chunk_tokens``) are preferences: the paper's 16,000 and 8,000 recall characters
at 4 characters per token (q* less 80 for the response wrapper), honoured whole in the ``shares`` regime.
"""

from __future__ import annotations

from typing import Mapping

from attrs import frozen

from arc_ref.config import MAX_CONFIG_INTEGER, Config, make_setup, minimum_budgets
from arc_ref.errors import ConfigError

PREFERRED_RECALL_BUDGET = 4000  # Q*: 16,000 recall characters at 4 characters per token
PREFERRED_CHUNK_TOKENS = 1920  # q*: 8,000 characters per recall at 4 per token, less 80 for the wrapper
OVERHEAD = 64  # eta, unless the generation prompt costs more
STUB_CAP = 112  # c, unless the smallest stub costs more
MAX_PREFERENCE = 10**8  # Q* and q* at most this (the floors are measured with q* itself)
SHARES: tuple[tuple[str, int], ...] = (("summary_budget", 2), ("recent_budget", 4), ("page_budget", 1))
FLOOR_SHARES: tuple[tuple[str, int], ...] = (
    ("recall_budget", 2), ("summary_budget", 2), ("recent_budget", 4), ("page_budget", 1),
)
DERIVED_FIELDS = ("summary_budget", "recent_budget", "page_budget", "page_size", "stub_cap", "recall_budget",
                  "chunk_tokens", "overhead")
"""The Config fields `fit_to_window` sets; every other field is the caller's."""


class WindowTooSmall(ConfigError):
    """The prefix alone (with the smallest S, H, G, U and eta) needs more than L: ``needed`` tokens of prompt, a
    window of at least ``smallest_window`` tokens for the same completion reserve; ``shortfall`` says the first
    (the prefix's parts against L), the message adds the remedies (a caller whose completion reserve follows the
    window gives its own)."""

    def __init__(self, needed: int, smallest_window: int, message: str, shortfall: str = "") -> None:
        super().__init__(message)
        self.needed = needed
        self.smallest_window = smallest_window
        self.shortfall = shortfall or message


@frozen(kw_only=True)
class WindowBudgets:
    """The budgets derived for one window and one prefix, with the measured quantities they came from."""

    regime: str  # "shares" (the evaluation's split) or "floors" (every component at its floor, then the rest)
    # regime "floors": why the shares did not do: (budget field, its share, its floor), the first share below its
    # floor in the order M, R, P; and A = L - B - Q - eta of regime "shares", Q = max(Q*, its floor with q*)
    shortfall: tuple[str, int, int] | None
    shares_available: int
    limit: int  # L = L_ctx - G_max
    prefix_tokens: int  # B
    # the prompt of the smallest view the prefix allows: B + eta + the floors of M, R, P (one stub) and Q (one-token
    # chunks); K is at least this whatever the window (WindowTooSmall's ``needed`` when L is less)
    smallest_prompt: int
    summary_budget: int  # M
    recent_budget: int  # R
    page_budget: int  # P
    page_size: int  # p
    stub_cap: int  # c
    recall_budget: int  # Q
    chunk_tokens: int  # q
    overhead: int  # eta

    @property
    def budget(self) -> int:
        """K = B + M + R + P + Q + eta (<= L by construction)."""
        return (self.prefix_tokens + self.summary_budget + self.recent_budget + self.page_budget
                + self.recall_budget + self.overhead)

    def fields(self) -> dict[str, int]:
        """The Config fields of `DERIVED_FIELDS`."""
        return {name: getattr(self, name) for name in DERIVED_FIELDS}


def window_budgets(config: Config, *, recall_budget: int = PREFERRED_RECALL_BUDGET,
                   chunk_tokens: int = PREFERRED_CHUNK_TOKENS) -> WindowBudgets:
    """Derive every budget of ``config`` (module docstring) from its context_limit, max_completion, tokenizer,
    chat format, action mode, tools, system and goal; its own budget fields are ignored.

    Raises ConfigError when the prefix alone cannot fit (naming B, eta, each floor, L and the smallest window
    that would do), or when ``config`` is refused for another reason (its tokenizer, its template...)."""
    for name in ("context_limit", "max_completion"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONFIG_INTEGER:
            raise ConfigError(f"{name} must be an integer from 1 to {MAX_CONFIG_INTEGER}, got {value!r}")
    for name, value in (("recall budget Q*", recall_budget), ("chunk size q*", chunk_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PREFERENCE:
            raise ConfigError(f"the preferred {name} must be an integer from 1 to {MAX_PREFERENCE}, got {value!r}")
    probe = config.replace(stub_cap=STUB_CAP, chunk_tokens=chunk_tokens, page_size=1, overhead=OVERHEAD)
    floors = minimum_budgets(probe)
    stub_cap = max(STUB_CAP, floors["stub_cap"])
    if stub_cap != STUB_CAP:  # the floors of P, M and R grow with c
        floors = minimum_budgets(probe.replace(stub_cap=stub_cap))
    overhead = max(OVERHEAD, floors["overhead"])
    prefix_tokens = floors["prefix_tokens"]
    recall_frame = floors["recall_budget"] - chunk_tokens  # frame + rho: Q's floor is this + q
    page_frame = floors["page_budget"] - stub_cap  # the floor with one stub per page
    limit = config.context_limit - config.max_completion
    preferred_recall = max(recall_budget, recall_frame + chunk_tokens)

    smallest = {name: floors[name] for name, _ in FLOOR_SHARES if name != "recall_budget"}
    smallest["recall_budget"] = recall_frame + 1
    smallest_prompt = prefix_tokens + overhead + sum(smallest.values())

    available = limit - prefix_tokens - preferred_recall - overhead
    total_shares = sum(share for _, share in SHARES)
    split = {name: available * share // total_shares for name, share in SHARES}
    short = [(name, split[name], floors[name]) for name, _ in SHARES if split[name] < floors[name]]
    if not short:  # (every floor is positive, so a negative A leaves some share short)
        return WindowBudgets(
            regime="shares", shortfall=None, shares_available=available, limit=limit, prefix_tokens=prefix_tokens,
            smallest_prompt=smallest_prompt,
            page_size=page_size_of(split["page_budget"], page_frame, stub_cap), stub_cap=stub_cap,
            recall_budget=preferred_recall, chunk_tokens=chunk_tokens, overhead=overhead, **split,
        )

    surplus = limit - smallest_prompt
    if surplus < 0:
        shortfall = (
            f"the prefix cannot fit the window: B = {prefix_tokens} (the system text, tools listing and goal) +"
            f" eta {overhead} + the smallest summary M {smallest['summary_budget']}, recent suffix R"
            f" {smallest['recent_budget']}, catalog page P {smallest['page_budget']} (one stub of c {stub_cap})"
            f" and recall buffer Q {smallest['recall_budget']} (one-token chunks) ="
            f" {limit - surplus} tokens > L = L_ctx - G_max = {config.context_limit} - {config.max_completion}"
            f" = {limit}"
        )
        raise WindowTooSmall(
            limit - surplus, config.context_limit - surplus,
            f"{shortfall}; a window of at least {config.context_limit - surplus} tokens is needed, or a shorter"
            " system text, tools listing or goal, or a smaller completion reserve", shortfall,
        )
    floor_shares = sum(share for _, share in FLOOR_SHARES)
    grown = {name: smallest[name] + surplus * share // floor_shares for name, share in FLOOR_SHARES}
    capped = min(grown["recall_budget"], preferred_recall)
    grown["recent_budget"] += grown["recall_budget"] - capped
    grown["recall_budget"] = capped
    return WindowBudgets(
        regime="floors", shortfall=short[0], shares_available=available,
        limit=limit, prefix_tokens=prefix_tokens, smallest_prompt=smallest_prompt,
        page_size=page_size_of(grown["page_budget"], page_frame, stub_cap), stub_cap=stub_cap,
        chunk_tokens=min(chunk_tokens, capped - recall_frame), overhead=overhead, **grown,
    )


RESERVE_FLOOR = 256
"""The least completion reserve G_max `reserve_for_window` gives; a prefix that leaves less is refused."""


def completion_reserve(needed: int, window: int, cap: int) -> int | None:
    """G_max for a prefix whose smallest view needs ``needed`` tokens of prompt: min(``cap``, half of what that
    view leaves of ``window``), the other half growing the view's budgets (M, R, P, Q); None when that is less
    than `RESERVE_FLOOR`. Never smaller for a larger window, and K = L_ctx - G_max - (what fit_to_window leaves
    unused) grows with the window too; K <= L holds, and each request's ``max_tokens`` is capped at G_max."""
    reserve = min(cap, (window - needed) // 2)
    return reserve if reserve >= RESERVE_FLOOR else None


def reserve_for_window(config: Config, cap: int, *, reserver: str, setting: str) -> int:
    """`completion_reserve` for ``config``'s window and prefix (spec/parameters.md: G_max chosen from the window);
    WindowTooSmall naming the numbers when it is below `RESERVE_FLOOR`. ``reserver`` and ``setting`` name, in
    that refusal, who reserves and the option that sets G_max instead."""
    # the smallest view's prompt does not depend on the window: measured against the largest one
    smallest = window_budgets(config.replace(context_limit=MAX_CONFIG_INTEGER, max_completion=1))
    reserve = completion_reserve(smallest.smallest_prompt, config.context_limit, cap)
    if reserve is None:
        raise reserve_too_small(smallest, config.context_limit, cap, reserver=reserver, setting=setting)
    return reserve


def reserve_too_small(smallest: WindowBudgets, window: int, cap: int, *, reserver: str,
                      setting: str) -> WindowTooSmall:
    """The refusal of a prefix whose smallest view (``smallest``, measured on any window) leaves less than twice
    `RESERVE_FLOOR` of ``window``: the numbers, the smallest window `completion_reserve` serves it at, and the
    option that sets the reserve instead."""
    needed = smallest.smallest_prompt
    fits = needed + 2 * RESERVE_FLOOR
    room = window - needed
    fix = (f", or a completion reserve of at most {room} tokens: {setting} (N <= {room}; the view then"
           f" gets only what N leaves above its smallest budgets)" if room > 0 else "")
    shortfall = (f"the prefix cannot fit the window: its smallest view needs {needed} tokens of prompt (B ="
                 f" {smallest.prefix_tokens} for the system text, tools listing and goal, with eta and the smallest"
                 f" summary, recent suffix, catalog page and recall buffer), and L_ctx = {window} leaves {room}")
    return WindowTooSmall(needed, fits, f"{shortfall}; {reserver} reserves G_max = min({cap}, half of what the"
                          f" smallest view leaves) for the completion, at least {RESERVE_FLOOR}, so a window of at"
                          f" least {fits} tokens is needed{fix}, or a shorter system text, tools listing or goal",
                          shortfall)


def page_size_of(page_budget: int, page_frame: int, stub_cap: int) -> int:
    """p: as many stubs of cap c as P holds after its frame (A3: p*c <= P), at least one."""
    return max(1, (page_budget - page_frame) // stub_cap)


def fit_to_window(config: Config, *, recall_budget: int = PREFERRED_RECALL_BUDGET,
                  chunk_tokens: int = PREFERRED_CHUNK_TOKENS, keep: Mapping[str, int] | None = None,
                  check: bool = True) -> Config:
    """``config`` with every budget of `DERIVED_FIELDS` derived from its window and prefix (`window_budgets`).

    ``keep``: budget fields the caller sets itself, applied over the derived ones (the result may then be refused
    by `make_setup` when K > L). ``check``: validate the result with `make_setup` (K <= L, every floor)."""
    derived = config.replace(**window_budgets(config, recall_budget=recall_budget, chunk_tokens=chunk_tokens).fields())
    if keep:
        unknown = sorted(set(keep) - set(DERIVED_FIELDS))
        if unknown:
            raise ConfigError(f"fit_to_window keeps budget fields only ({', '.join(DERIVED_FIELDS)}), got {unknown}")
        derived = derived.replace(**keep)
    if check:
        make_setup(derived)
    return derived


__all__ = ["DERIVED_FIELDS", "WindowTooSmall", "OVERHEAD", "PREFERRED_CHUNK_TOKENS", "PREFERRED_RECALL_BUDGET", "STUB_CAP",
           "WindowBudgets", "fit_to_window", "page_size_of", "window_budgets"]
