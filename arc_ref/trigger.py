"""When and how much to compact (spec/rendering.md section 11.1): a pure function of the state's token counts and
the configuration.

Layout "paper" keeps the paper's rule: H holds at most R tokens; an append that makes it exceed R folds it down to
R // 2. Layout "lean" bounds the sum (A4 needs only K = B + M + R + P + Q + eta <= L): with s, g, u, h the tokens of
S, G, U and H,

* each of S, G, U stays within its own budget (M, P, Q) and s + g + u + h <= W = M + R + P + Q, so H may use what
  S, G and U leave unused; one unit of H (an entry, or a tool turn with its results) costs at most
  R + Q - u, what H is sure to have once everything older is folded (S and G at their budgets);
* **bound**: an append that makes s + g + u + h exceed W folds H down to the low-water mark
  h_low = (R + Q - u) * low_water // 100;
* **cost**: otherwise H folds down to h_low early when the roofline's terms say the fold pays. Folding X = h - h_low
  tokens makes the server prefill again what follows F, about Y = s + g + u + h_low tokens, at prefill_cost each (in
  KV reads of one context token by one generated token), and spares X such reads for each of the
  expected_completion tokens of every later call. With H growing d = h / t tokens a call (t the agent turns in H),
  folding every time X reaches sqrt(2 * prefill_cost * Y * d / expected_completion) minimises the cost per call
  (the economic-order-quantity balance of one cache break against the reads it saves); in integers:
  expected_completion * X^2 * t >= 2 * prefill_cost * Y * h. The machine takes such a fold only when the view it
  gives costs fewer tokens than the view without it. prefill_cost = 0 folds only on the bound.
"""

from __future__ import annotations

from arc_ref.config import Config

KEEP = "keep"
BOUND = "bound"  # the view would exceed K (layout "paper": H would exceed R)
COST = "cost"  # the cost model says folding now pays


def unit_budget(config: Config, recall_tokens: int) -> int:
    """The most one unit of H may cost: R ("paper"), or R + Q - tokens(U) ("lean")."""
    if config.layout == "paper":
        return config.recent_budget
    return config.recent_budget + config.recall_budget - recall_tokens


def low_water_mark(config: Config, recall_tokens: int) -> int:
    """The tokens of H a fold leaves at most (the newest unit always stays): R // 2 ("paper"), or low_water percent
    of the unit budget ("lean")."""
    if config.layout == "paper":
        return config.recent_budget // 2
    return unit_budget(config, recall_tokens) * config.low_water // 100


def decide(config: Config, summary: int, catalog: int, recall: int, recent: int, turns: int) -> str:
    """KEEP, BOUND or COST for a state whose S, G, U, H cost ``summary``, ``catalog``, ``recall``, ``recent`` tokens
    (each message at its largest cost over its places) with ``turns`` agent turns in H (module docstring).

    pre: min(summary, catalog, recall, recent, turns) >= 0
    post: __return__ in ("keep", "bound", "cost")
    """
    if config.layout == "paper":
        return BOUND if recent > config.recent_budget else KEEP
    room = config.summary_budget + config.recent_budget + config.page_budget + config.recall_budget
    if summary + catalog + recall + recent > room:
        return BOUND
    low = low_water_mark(config, recall)
    if config.prefill_cost == 0 or recent <= low:
        return KEEP
    removed = recent - low
    prefilled = summary + catalog + recall + low
    if config.expected_completion * removed * removed * max(1, turns) >= 2 * config.prefill_cost * prefilled * recent:
        return COST
    return KEEP


__all__ = ["BOUND", "COST", "KEEP", "decide", "low_water_mark", "unit_budget"]
