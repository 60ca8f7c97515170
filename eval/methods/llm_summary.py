"""``llm_summary``: the model condenses older turns into a running summary (paper, Related Works).

On a compaction the recent suffix of turns stays verbatim (``recent_fraction`` x L); the older
turns are folded into a running natural-language summary written by the model itself, through
``aux(messages, "summary")``: the loop sends that request to the same backend and records it like
any other call (purpose ``"summary"``, its tokens and latency). Older observations shorter than the
keep-verbatim threshold (500 characters) are kept verbatim next to the summary (as long as they
fit half of the memory budget; beyond that the oldest are summarized too).

The summary is lossy by construction: whatever the model leaves out or paraphrases is gone. It is
capped at the memory budget (``memory_fraction`` x L, default a quarter); a longer reply is cut at
a line boundary. When one summary request would not fit the context, the turns are folded in
several requests, and an observation too long for a request on its own is shown as head and tail.

``ModelCondensedMethod`` is the machinery shared with ``structured_state``.
"""

from __future__ import annotations

from attrs import frozen

from arc_ref.counting import joined_tokens
from arc_ref.render import TEXT, Template
from arc_eval.methods.base import (
    CLIP_ACTION_CHARS,
    CLIP_THOUGHT_CHARS,
    OBSERVATION,
    AuxCaller,
    MethodSettings,
    TranscriptMethod,
    Turn,
)
from arc_eval.protocol import SUMMARY_REQUEST_HEADER, strip_reasoning
from arc_eval.types import ContextOverflow, Message
from arc_eval.registry import MethodEntry, register_method

TURN_HEADER = "### Turn"
TURNS_HEADER = "Turns to fold in (oldest first):"
SUMMARY_REQUEST = Template(
    "Task:\n{goal}\n\nCurrent summary:\n{current}\n\n" + TURNS_HEADER + "\n{body}\n\nWrite the updated summary.",
    goal=TEXT, current=TEXT, body=TEXT,
)
NO_SUMMARY_YET = "(none yet)"
# Part of a request's budget left free for the server's own count differing from ours.
REQUEST_SAFETY_FRACTION = 0.05
MAX_REQUEST_ATTEMPTS = 3


def render_turn(turn: Turn, max_chars: int | None = None, assistant: str | None = None) -> str:
    """One turn as shown inside a condensing request; the observation cut to head/tail if needed; ``assistant``:
    the agent's message shown instead of the turn's own (its text clipped: ``ModelCondensedMethod._batches``)."""
    thought = turn.assistant.content if assistant is None else assistant
    text = turn.observation_text
    if max_chars is not None and len(text) > max_chars:
        half = max(0, max_chars // 2)
        hidden = len(text) - 2 * half
        text = f"{text[:half]}\n[... {hidden} characters not shown ...]\n{text[len(text) - half:]}"
    lines = [TURN_HEADER, thought]
    if turn.observation is not None:
        lines.append(OBSERVATION.render(returncode=turn.returncode, action=turn.action, text=text))
    return "\n".join(lines)


@frozen
class FoldedTurn:
    """One turn of a condensing request, read back: the agent's message and the observation it produced."""

    assistant: str
    action: str | None  # None when the turn had no observation
    returncode: int = 0
    text: str = ""


def parse_turns(body: str) -> list[FoldedTurn]:
    """The turns of a request body written by ``render_turn`` (joined by newlines), in order."""
    turns: list[FoldedTurn] = []
    opening = f"{TURN_HEADER}\n"
    if not body.startswith(opening):
        return turns
    for block in body[len(opening) :].split(f"\n{opening}"):
        lines = block.split("\n")
        for start, line in enumerate(lines):
            if OBSERVATION.parse(line + "\n") is None:  # not the observation's header line
                continue
            observation = OBSERVATION.parse("\n".join(lines[start:]))
            assert observation is not None
            assistant = "\n".join(lines[:start])
            turns.append(FoldedTurn(assistant, str(observation["action"]), int(observation["returncode"]),
                                    str(observation["text"])))
            break
        else:
            turns.append(FoldedTurn(block, None))
    return turns


class ModelCondensedMethod(TranscriptMethod):
    """A baseline whose older turns are folded by the model into a memory (summary or JSON state)."""

    purpose = "condense"

    def __init__(self, settings: MethodSettings):
        super().__init__(settings)
        self.kept_short: list[Turn] = []
        self.lost_batches = 0  # folding requests that still overflowed after clipping

    # -- what a subclass defines -----------------------------------------------------------
    def _request(self, body: str) -> tuple[Message, ...]:
        """The condensing request for the rendered turns ``body``."""
        raise NotImplementedError

    def _absorb(self, reply: str) -> None:
        """Take the model's reply into the memory."""
        raise NotImplementedError

    def _memory_text(self) -> str:
        """The memory as shown to the agent ("" when empty)."""
        raise NotImplementedError

    # -- shared machinery ------------------------------------------------------------------
    @property
    def goal(self) -> str:
        return self.prefix[1].content if len(self.prefix) > 1 else ""

    async def _memory_messages(self, aux: AuxCaller) -> tuple[Message, ...]:
        messages: list[Message] = []
        memory = self._memory_text()
        if memory:
            messages.append(Message("user", memory))
        if self.kept_short:
            messages.append(self._short_observations(self.kept_short))
        return tuple(messages)

    async def _condense(self, older: list[Turn], aux: AuxCaller) -> None:
        keep, fold = self._split_short([*self.kept_short, *older])
        self.kept_short = keep
        if fold:
            await self._fold(fold, aux)

    def _split_short(self, turns: list[Turn]) -> tuple[list[Turn], list[Turn]]:
        """Short observations (< keep_verbatim_chars) kept verbatim, newest first, within half the memory budget."""
        budget = self.memory_budget // 2
        used = 0
        keep_index: set[int] = set()
        for index in range(len(turns) - 1, -1, -1):
            turn = turns[index]
            if turn.observation is None or len(turn.observation_text) >= self.settings.keep_verbatim_chars:
                continue
            assert turn.observation is not None
            cost = self.counter.message_tokens(turn.observation)
            if used + cost > budget:
                break
            used += cost
            keep_index.add(index)
        keep = [turn for index, turn in enumerate(turns) if index in keep_index]
        fold = [turn for index, turn in enumerate(turns) if index not in keep_index]
        return keep, fold

    def _turn_tokens_in_request(self, turn: Turn, text: str) -> int:
        """Tokens of ``render_turn(turn)``: it ends with the observation's message content, whose count the message's
        gives (``content_tokens``), so only the head (header, thought) is counted where the junction is vouched
        (``arc_ref.counting.joined_tokens``); the whole text otherwise."""
        observation = turn.observation
        known = self.counter.content_tokens(observation) if observation is not None else None
        if observation is None or known is None or not text.endswith(observation.content):
            return self.counter.text_tokens(text)
        head = text[: len(text) - len(observation.content)]
        return joined_tokens(self.counter.tokenizer, ((head, None), (observation.content, known)))

    def _request_budget(self) -> int:
        """Tokens the rendered turns of one request may take."""
        empty = self.counter.count(self._request(""))
        usable = int(self.settings.usable_tokens * (1.0 - REQUEST_SAFETY_FRACTION))
        return max(0, usable - empty)

    def _batches(self, turns: list[Turn], budget: int) -> list[tuple[str, int]]:
        """(rendered turns, how many) per request, each fitting ``budget``; a too-long turn is clipped: first the
        agent's own text, as a kept turn older than the newest is clipped (``Turn.clipped`` to ARC's limits,
        ``CLIP_THOUGHT_CHARS`` / ``CLIP_ACTION_CHARS``: what is condensed is the observation, and a short thought
        and action are shown whole), then, while it is still over ``budget``, its observation cut to head and tail,
        halving."""
        batches: list[tuple[str, int]] = []
        current: list[str] = []
        used = 0
        tool_mode = self.settings.action_mode == "tools"
        for turn in turns:
            text = render_turn(turn)
            cost = self._turn_tokens_in_request(turn, text) + 1
            if cost > budget:
                clipped = turn.clipped(CLIP_THOUGHT_CHARS, CLIP_ACTION_CHARS, tool_mode)
                shown = clipped.messages()[0].content if clipped.shown is not None else None
                if shown is not None:
                    text = render_turn(turn, None, shown)
                    cost = self._turn_tokens_in_request(turn, text) + 1
                text, cost = self._cut_observation(turn, budget, shown, text, cost)
            if current and used + cost > budget:
                batches.append(("\n".join(current), len(current)))
                current, used = [], 0
            current.append(text)
            used += cost
        if current:
            batches.append(("\n".join(current), len(current)))
        return batches

    def _cut_observation(self, turn: Turn, budget: int, assistant: str | None, text: str,
                         cost: int) -> tuple[str, int]:
        """``text`` (the turn rendered whole) and its ``cost`` (with its separator) when within ``budget``; else
        ``render_turn`` with the observation cut to head and tail, halving its length, until it costs at most
        ``budget`` or nothing of the observation is left. The text and its cost."""
        max_chars = len(turn.observation_text)
        while cost > budget and max_chars > 0:
            max_chars //= 2
            text = render_turn(turn, max_chars, assistant)
            cost = self.counter.text_tokens(text) + 1
        return text, cost

    async def _fold(self, turns: list[Turn], aux: AuxCaller) -> None:
        shrink = 1.0
        pending = list(turns)
        attempts = 0
        while pending:
            budget = int(self._request_budget() * shrink)
            batches = self._batches(pending, budget)
            first, taken = batches[0]
            try:
                reply = await aux(self._request(first), self.purpose)
            except ContextOverflow:
                attempts += 1
                if attempts >= MAX_REQUEST_ATTEMPTS:
                    # The server still refuses the request: these turns are lost (counted).
                    self.lost_batches += 1
                    pending = pending[max(1, taken) :]
                    attempts, shrink = 0, 1.0
                else:
                    shrink /= 2
                continue
            self._absorb(strip_reasoning(reply.content).strip())
            pending = pending[max(1, taken) :]
            attempts, shrink = 0, 1.0


SUMMARY_INSTRUCTIONS = f"""\
{SUMMARY_REQUEST_HEADER}
You maintain the running summary of an agent's work on a task. Fold the turns below into the \
current summary. Keep what the agent will need later to finish the task: what it did, what it \
found, and exact values (names, numbers, identifiers, tokens) copied verbatim. Reply with the \
new summary only, as plain text."""


class LlmSummaryMethod(ModelCondensedMethod):
    """Prefix + a model-written summary of older turns + short older observations + recent turns."""

    name = "llm_summary"
    purpose = "summary"

    def __init__(self, settings: MethodSettings):
        super().__init__(settings)
        self.summary = ""

    def _request(self, body: str) -> tuple[Message, ...]:
        user = SUMMARY_REQUEST.render(goal=self.goal, current=self.summary or NO_SUMMARY_YET, body=body)
        return (Message("system", SUMMARY_INSTRUCTIONS), Message("user", user))

    def _absorb(self, reply: str) -> None:
        self.summary = self.clip_to_tokens(reply, self.memory_budget)

    def _memory_text(self) -> str:
        return f"Summary of earlier turns (written by the model):\n{self.summary}" if self.summary else ""


register_method(MethodEntry(name=LlmSummaryMethod.name, label="LLM_summary", order=3, factory=LlmSummaryMethod))
