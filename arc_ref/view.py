"""A4: the budgeted active view, Serialize(F, S, H, G, U), and the checks of Lemma 2.

Message order: F (system, goal), S (summary), G (catalog page), U (recall buffer), then the entries of
H, then the chat format's generation prompt. Every message's tokens were counted when it was built, so
assembling a view costs O(number of messages) plus joining O(K) characters, whatever N is. The total
is the sum of the message counts plus the generation prompt: exact when the tokenizer does not merge
across message boundaries (a property checks it for every adapter and chat format; `verify_tokens`,
the opt-in full recount, refuses a view whose parts disagree with its text).
"""

from __future__ import annotations

from typing import Sequence

from attrs import field, frozen

from arc_ref.chat import ChatFormat
from arc_ref.config import Setup
from arc_ref.errors import BudgetViolation
from arc_ref.history import LiveEntry
from arc_ref.message import Message


@frozen
class Components:
    """Token counts of the view's parts: B, tokens(S), tokens(H), tokens(G), tokens(U), eta_i."""

    prefix: int
    summary: int
    recent: int
    catalog: int
    recall: int
    overhead: int

    def as_dict(self) -> dict[str, int]:
        return {
            "prefix": self.prefix,
            "summary": self.summary,
            "recent": self.recent,
            "catalog": self.catalog,
            "recall": self.recall,
            "overhead": self.overhead,
        }


@frozen
class View:
    """transcript'_i: the messages sent to the model, with tokens(transcript'_i) <= K <= L."""

    messages: tuple[Message, ...]
    tokens: int
    budget: int  # K
    limit: int  # L
    components: Components
    chat: ChatFormat = field(repr=False)

    def text(self) -> str:
        """Exactly what would be sent: the serialized messages and the generation prompt."""
        return self.chat.render((message.role, message.content) for message in self.messages)

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages in OpenAI chat format (the server applies the same template)."""
        return [{"role": message.role, "content": message.content} for message in self.messages]


def within_budget(costs: tuple[int, ...], budgets: tuple[int, ...]) -> bool:
    """Lemma 2's arithmetic: when every component is within its budget, the total is within their sum.

    pre: len(costs) == len(budgets)
    post: (not __return__) or sum(costs) <= sum(budgets)
    """
    return all(cost <= budget for cost, budget in zip(costs, budgets))


def _cost(message: Message | None) -> int:
    return 0 if message is None else message.tokens


def build_view(
    setup: Setup,
    prefix: Sequence[Message],
    summary: Message | None,
    catalog: Message | None,
    recall: Message | None,
    recent: Sequence[LiveEntry],
) -> View:
    """Assemble the view and check every component budget and K <= L (Lemma 2); raise, never overflow."""
    config = setup.config
    recent_tokens = sum(entry.message.tokens for entry in recent)
    prefix_tokens = sum(message.tokens for message in prefix)
    names = ("prefix B", "summary_budget M", "recent_budget R", "page_budget P", "recall_budget Q", "overhead eta")
    costs = (prefix_tokens, _cost(summary), recent_tokens, _cost(catalog), _cost(recall), setup.generation_tokens)
    budgets = (setup.prefix_tokens, config.summary_budget, config.recent_budget, config.page_budget,
               config.recall_budget, config.overhead)
    if not within_budget(costs, budgets):
        over = [f"{name}: {cost} > {allowed}" for name, cost, allowed in zip(names, costs, budgets) if cost > allowed]
        raise BudgetViolation("component over budget: " + "; ".join(over))
    messages = tuple(prefix) + tuple(
        message for message in (summary, catalog, recall) if message is not None
    ) + tuple(entry.message for entry in recent)
    total = sum(message.tokens for message in messages) + setup.generation_tokens
    if total > setup.budget or setup.budget > setup.limit:
        raise BudgetViolation(f"view of {total} tokens exceeds K = {setup.budget} (L = {setup.limit})")
    components = Components(
        prefix=prefix_tokens,
        summary=_cost(summary),
        recent=recent_tokens,
        catalog=_cost(catalog),
        recall=_cost(recall),
        overhead=setup.generation_tokens,
    )
    return View(messages, total, setup.budget, setup.limit, components, setup.chat)


def verify_tokens(setup: Setup, view: View) -> int:
    """Count the serialized text itself (the opt-in full recount); returns the exact count.

    Raises BudgetViolation when the count differs from the sum of the parts the view reports (a
    tokenizer merging across a boundary its rule vouched for) or exceeds K.
    """
    exact = setup.tokenizer.count(view.text())
    if exact != view.tokens:
        raise BudgetViolation(
            f"serialized view counts {exact} tokens but its parts sum to {view.tokens};"
            f" tokenizer {setup.tokenizer.name!r} merges across a boundary of the chat format {setup.chat.name!r}"
        )
    if exact > view.budget:
        raise BudgetViolation(f"serialized view counts {exact} tokens > K = {view.budget}")
    return exact
