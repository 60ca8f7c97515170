"""A4: the budgeted active view, Serialize(F, S, H, G, U), and the checks of Lemma 2.

Message order: F (system, goal), S (summary), G (catalog page), U (recall buffer), then the entries of
H, then the chat format's generation prompt. Every message's tokens were counted when it was built, so
assembling a view costs O(number of messages) plus joining O(K) characters, whatever N is. The total
is the sum of the message counts plus the generation prompt: exact when the tokenizer does not merge
across message boundaries (a property checks it for every adapter and chat format; `verify_tokens`,
the opt-in full recount, refuses a view whose parts disagree with its text).

Under a served model's chat template (chat format ``template``) a message's count depends on where it sits
(its Context: the roles around it, a user message after it); each message carries its exact count for every
place the view can give it, and the view sums the counts of the places it actually gives (`placed_costs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

from attrs import field, frozen

from arc_ref.chat import ChatFormat
from arc_ref.config import Setup
from arc_ref.errors import BudgetViolation
from arc_ref.history import LiveEntry
from arc_ref.message import Context, Message, shared_context

if TYPE_CHECKING:
    from arc_ref.templates import TemplateFormat


@frozen
class ViewComponent:
    """One part of the view: its name (``Components``' field), what a reader is shown, its budget's symbol and
    the ``Config`` field of that budget (None: the prefix's B is its own count)."""

    name: str
    label: str
    budget_symbol: str
    budget_field: str | None


# The one table of the view's parts, in order (A4: K = B + M + R + P + Q + eta): the view, the session's audit
# (arc_ref.session.Audit) and the store's audit (arc-ref inspect) name them from here.
VIEW_COMPONENTS = (
    ViewComponent("prefix", "prefix F (system, goal)", "B", None),
    ViewComponent("summary", "summary S", "M", "summary_budget"),
    ViewComponent("recent", "recent H", "R", "recent_budget"),
    ViewComponent("catalog", "catalog page G", "P", "page_budget"),
    ViewComponent("recall", "recall buffer U", "Q", "recall_budget"),
    ViewComponent("overhead", "overhead (generation prompt, joins)", "eta", "overhead"),
)


@frozen
class Components:
    """Token counts of the view's parts (``VIEW_COMPONENTS``): B, tokens(S), tokens(H), tokens(G), tokens(U), eta_i."""

    prefix: int
    summary: int
    recent: int
    catalog: int
    recall: int
    overhead: int

    def as_dict(self) -> dict[str, int]:
        return {component.name: getattr(self, component.name) for component in VIEW_COMPONENTS}


@frozen
class View:
    """transcript'_i: the messages sent to the model, with tokens(transcript'_i) <= K <= L."""

    messages: tuple[Message, ...]
    tokens: int
    budget: int  # K
    limit: int  # L
    components: Components
    chat: Union[ChatFormat, "TemplateFormat"] = field(repr=False, eq=False)

    def text(self) -> str:
        """Exactly what would be sent: the serialized messages and the generation prompt."""
        if isinstance(self.chat, ChatFormat):
            return self.chat.render((message.role, message.content) for message in self.messages)
        return self.chat.render(self.chat_messages())

    def chat_messages(self) -> list[dict[str, Any]]:
        """The messages in OpenAI chat format (the server applies the same template)."""
        return [message.openai() for message in self.messages]

    def tools(self) -> list[dict[str, Any]] | None:
        """The ``tools`` to send with the messages (OpenAI JSON): ARC's and the environment's; None in text mode."""
        return None if isinstance(self.chat, ChatFormat) else self.chat.openai_tools()


def within_budget(costs: tuple[int, ...], budgets: tuple[int, ...]) -> bool:
    """Lemma 2's arithmetic: when every component is within its budget, the total is within their sum.

    pre: len(costs) == len(budgets)
    post: (not __return__) or sum(costs) <= sum(budgets)
    """
    return all(cost <= budget for cost, budget in zip(costs, budgets))


def placed_costs(messages: Sequence[Message]) -> list[int]:
    """Each message's exact count where the view places it (O(number of messages))."""
    costs = [0] * len(messages)
    user_after = False
    last = len(messages) - 1
    for position in range(last, -1, -1):
        message = messages[position]
        if message.placed:
            context = shared_context(
                messages[position - 1].role if position > 0 else None,
                messages[position + 1].role if position < last else None,
                user_after,
            )
            cost = message.tokens_at(context)
            if cost is None:
                raise BudgetViolation(f"a {message.role} message has no count for its place {context} in the view")
            costs[position] = cost
        else:
            costs[position] = message.tokens
        user_after = user_after or message.role == "user"
    return costs


def context_at(messages: Sequence[Message], position: int) -> Context:
    """Where the view places ``messages[position]``: the roles before and after it, a user message later."""
    last = len(messages) - 1
    return shared_context(messages[position - 1].role if position > 0 else None,
                          messages[position + 1].role if position < last else None,
                          any(message.role == "user" for message in messages[position + 1:]))


def view_messages(prefix: Sequence[Message], summary: Message | None, catalog: Message | None,
                  recall: Message | None, recent: Sequence[LiveEntry]) -> tuple[Message, ...]:
    """The view's messages in order: F, then S, G and U where present, then the entries of H."""
    middle = tuple(message for message in (summary, catalog, recall) if message is not None)
    return tuple(prefix) + middle + tuple(entry.message for entry in recent)


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
    middle = tuple(message for message in (summary, catalog, recall) if message is not None)
    messages = view_messages(prefix, summary, catalog, recall, recent)
    placed = placed_costs(messages)
    cut = len(prefix)
    prefix_tokens = sum(placed[:cut])
    middle_costs = iter(placed[cut : cut + len(middle)])
    summary_tokens, catalog_tokens, recall_tokens = (
        0 if message is None else next(middle_costs) for message in (summary, catalog, recall)
    )
    recent_tokens = sum(placed[cut + len(middle) :])
    costs = (prefix_tokens, summary_tokens, recent_tokens, catalog_tokens, recall_tokens, setup.generation_tokens)
    recent_budget = config.recent_budget
    recent_name = "recent_budget R"
    if config.layout == "lean":  # H may use what S, G and U leave unused: the bound is on the sum (section 11.1)
        unused = (config.summary_budget - summary_tokens) + (config.page_budget - catalog_tokens) + (
            config.recall_budget - recall_tokens)
        recent_budget += max(0, unused)
        recent_name = "recent H: R + what S, G and U leave unused"
    names = ("prefix B", "summary_budget M", recent_name, "page_budget P", "recall_budget Q", "overhead eta")
    budgets = (setup.prefix_tokens, config.summary_budget, recent_budget, config.page_budget,
               config.recall_budget, config.overhead)
    if not within_budget(costs, budgets):
        over = [f"{name}: {cost} > {allowed}" for name, cost, allowed in zip(names, costs, budgets) if cost > allowed]
        raise BudgetViolation("component over budget: " + "; ".join(over))
    total = sum(placed) + setup.generation_tokens
    if total > setup.budget or setup.budget > setup.limit:
        raise BudgetViolation(f"view of {total} tokens exceeds K = {setup.budget} (L = {setup.limit})")
    components = Components(
        prefix=prefix_tokens,
        summary=summary_tokens,
        recent=recent_tokens,
        catalog=catalog_tokens,
        recall=recall_tokens,
        overhead=setup.generation_tokens,
    )
    return View(messages, total, setup.budget, setup.limit, components, setup.chat)


def verify_tokens(setup: Setup, view: View) -> int:
    """Count the serialized text itself (the opt-in full recount); returns the exact count.

    Raises BudgetViolation when the count differs from the sum of the parts the view reports (a
    tokenizer merging across a boundary its rule vouched for) or exceeds K.
    """
    exact = setup.tokenizer.count(view.text())
    if setup.chat.positional and exact != view.tokens:
        raise BudgetViolation(
            f"serialized view counts {exact} tokens but its parts add up to {view.tokens}: the chat template of"
            f" {setup.chat.name!r} is not local as the count per place assumes (spec/rendering.md section 3.1)"
        )
    if exact != view.tokens:
        raise BudgetViolation(
            f"serialized view counts {exact} tokens but its parts sum to {view.tokens};"
            f" tokenizer {setup.tokenizer.name!r} merges across a boundary of the chat format {setup.chat.name!r}"
        )
    if exact > view.budget:
        raise BudgetViolation(f"serialized view counts {exact} tokens > K = {view.budget}")
    return exact
