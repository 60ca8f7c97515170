"""When and how much to compact (spec/rendering.md section 11.1): a pure function of the state's token counts and
the configuration.

Layout "paper" keeps the paper's rule: H holds at most R tokens; an append that makes it exceed R folds it down to
R // 2. Layout "lean" bounds the sum (A4 needs only K = B + M + R + P + Q + eta <= L): with s, g, u, h the tokens of
S, G, U and H,

* each of S, G, U stays within its own budget (M, P, Q) and s + g + u + h <= W = M + R + P + Q, so H may use what
  S, G and U leave unused; one unit of H (an entry, or a tool turn with its results) costs at most R, as in the
  paper, so H is sure to fit once everything older is folded (S, G, U at their budgets);
* **bound**: an append that makes s + g + u + h exceed W folds H down to the low-water mark
  h_low = R * low_water // 100;
* **cost**: otherwise H folds down to h_low early when the roofline's terms say the fold pays. With k the tokens of
  H such a fold keeps (whole units, the newest always: at least h_low or the newest unit), folding X = h - k
  tokens makes the server prefill again what the fold changes, about Y = g + u + k tokens (a fold that only
  appends to S keeps S's earlier text cached, spec/rendering.md 11.3); when S may have to shrink (s + n * c > M,
  n the entries folded, c the stub cap, which bounds every item but an inline one) S sheds max(0, s - s_low) more
  (X grows by it) and min(s, s_low) is prefilled again (Y grows by it), s_low its low-water mark; at prefill_cost each (in
  KV reads of one context token by one generated token), and spares X such reads for each of the m tokens every
  later call generates. With H growing d = h / t tokens a call (t the agent turns in H), folding every time X
  reaches sqrt(2 * prefill_cost * Y * d / m) minimises the cost per call (the economic-order-quantity balance of
  one cache break against the reads it saves); in integers: m * t * X^2 >= 2 * prefill_cost * Y * h. m * t is
  expected_completion * max(1, t) when expected_completion > 0, else (the default, 0) the agent's own rate as the
  state knows it: a = the tokens of the agent turns in H (m = a / t, so m * t = a; at least 1). The machine then
  folds a copy and takes it only when the same inequality holds with X and Y measured on the two views (`pays`;
  X > 0: the fold makes the view smaller; Y: everything after F in the copy's view, less the old S when the copy's
  S only appended to it). prefill_cost = 0 folds only on the bound. The defaults (low_water 5,
  expected_completion 0) were chosen by measurement (benchmarks/bench_trajectories.py, sections tradeoff and
  long).
"""

from __future__ import annotations

from arc_ref.config import Config

KEEP = "keep"
BOUND = "bound"  # the view would exceed K (layout "paper": H would exceed R)
COST = "cost"  # the cost model says folding now pays


def low_water_mark(config: Config) -> int:
    """The tokens of H a fold leaves at most (the newest unit always stays): R // 2 ("paper"), or low_water percent
    of R ("lean")."""
    if config.layout == "paper":
        return config.recent_budget // 2
    return config.recent_budget * config.low_water // 100


def summary_low_water_mark(config: Config) -> int:
    """What S shrinks to once a fold's items do not fit M: M itself ("paper": S is re-fitted to just fit), or
    summary_low_water percent of M ("lean": until then a fold only appends to S; spec/rendering.md 11.3)."""
    if config.layout == "paper":
        return config.summary_budget
    return config.summary_budget * config.summary_low_water // 100


def decide(config: Config, summary: int, catalog: int, recall: int, recent: int, turns: int,
           agent: int, kept: int, folded: int = 0) -> str:
    """KEEP, BOUND or COST for a state whose S, G, U, H cost ``summary``, ``catalog``, ``recall``, ``recent`` tokens
    (each message at its largest cost over its places) with ``turns`` agent turns in H, costing ``agent`` tokens
    together, of which a fold to the low-water mark would keep ``kept`` (whole units, the newest always; module
    docstring), folding ``folded`` entries.

    pre: min(summary, catalog, recall, recent, turns, agent, kept, folded) >= 0
    post: __return__ in ("keep", "bound", "cost")
    """
    if config.layout == "paper":
        return BOUND if recent > config.recent_budget else KEEP
    room = config.summary_budget + config.recent_budget + config.page_budget + config.recall_budget
    if summary + catalog + recall + recent > room:
        return BOUND
    if config.prefill_cost == 0 or recent <= max(low_water_mark(config), kept):
        return KEEP
    removed, prefilled = recent - kept, catalog + recall + kept
    if summary + folded * config.stub_cap > config.summary_budget:  # S may have to shrink (to its low-water mark)
        low = summary_low_water_mark(config)
        removed, prefilled = removed + max(0, summary - low), prefilled + min(summary, low)
    if pays(config, removed, prefilled, recent, turns, agent):
        return COST
    return KEEP


def generated_reads(config: Config, turns: int, agent: int) -> int:
    """m * t of the cost model: the tokens the next t calls are expected to generate, from expected_completion
    when it is set (> 0), else from the agent's own turns in H (``agent`` tokens over ``turns`` turns: m = a / t)."""
    if config.expected_completion > 0:
        return config.expected_completion * max(1, turns)
    return max(1, agent)


def pays(config: Config, removed: int, prefilled: int, recent: int, turns: int, agent: int) -> bool:
    """The cost model's inequality: m * t * X^2 >= 2 * prefill_cost * Y * h (X removed, Y prefilled again,
    h = tokens(H), t the agent turns in H, m * t from `generated_reads`)."""
    return removed > 0 and (generated_reads(config, turns, agent) * removed * removed
                            >= 2 * config.prefill_cost * prefilled * recent)


def declines(config: Config, before: int, after_least: int, fixed_most: int, recent: int, turns: int,
             agent: int) -> bool:
    """Whether a fold copy's test, `pays` with X = before - after and Y = after - fixed, is false for every copy
    whose view costs ``after >= after_least`` with ``fixed <= fixed_most``: it is false at the largest X and the
    least Y these allow, and lower X (below 0 it never pays) or higher Y only make it false again
    (proofs_check.test_trigger)."""
    return not pays(config, before - after_least, after_least - fixed_most, recent, turns, agent)


__all__ = [
    "BOUND", "COST", "KEEP", "decide", "declines", "generated_reads", "low_water_mark", "pays",
    "summary_low_water_mark",
]
