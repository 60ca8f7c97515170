"""Configuration, presets, and the budget checks of A3-A5 (K <= L among them), done once per task.

`Config` holds the user's numbers (paper symbol in each comment); `make_setup` resolves the tokenizer,
measures every fixed cost with it (B, frames, the recall wrapper rho) and refuses a configuration
under which the appendix' assumptions could fail, naming the budgets involved.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import attrs
from attrs import field, frozen

from arc_ref import render
from arc_ref.chat import ChatFormat, get_chat_format
from arc_ref.counting import Part, joined_tokens
from arc_ref.errors import ConfigError
from arc_ref.ids import IdScheme
from arc_ref.text import ELLIPSIS
from arc_ref.tokenizers import Tokenizer, get_tokenizer


@frozen(kw_only=True)
class Config:
    """Every knob of one ARC task. Field names are the replay trace's override keys."""

    context_limit: int  # L_ctx: the model's total context
    max_completion: int  # G_max: completion tokens reserved per call; L = L_ctx - G_max
    summary_budget: int  # M: tokens of S
    recent_budget: int  # R: tokens of H
    page_budget: int  # P: tokens of one catalog page G
    page_size: int  # p: stubs per page
    stub_cap: int  # c: tokens of one stub z_j
    recall_budget: int  # Q: tokens of the recall buffer U
    chunk_tokens: int  # q: payload tokens per recall chunk
    overhead: int  # eta: serialization overhead outside the five components
    capacity: int  # N_max: declared number of observations
    fingerprint_bits: int  # d: fingerprint width of the id
    keep_verbatim_chars: int  # summary keeps observations shorter than this inline (paper: 500)
    recalls_per_step: int  # r: recalls answered per agent turn
    tokenizer: str
    system: str
    goal: str
    chat_format: str = "chatml"
    preview_head_chars: int = 96  # fixed-size previews kept in each record and stub
    preview_tail_chars: int = 64
    signature_chars: int = 160  # action signature shown in stubs and headers
    thought_chars: int = 96  # summary: older thoughts truncated to this
    action_chars: int = 128  # summary: older actions truncated to this

    def replace(self, **changes: Any) -> "Config":
        return attrs.evolve(self, **changes)


INTEGER_FIELDS = tuple(
    a.name for a in attrs.fields(Config) if a.type in ("int", int)
)
STRING_FIELDS = ("tokenizer", "system", "goal", "chat_format")
# The replay trace's override keys (the issue fixes these names; the last six are extensions).
OVERRIDE_KEYS = (
    "context_limit", "max_completion", "summary_budget", "recent_budget", "page_budget", "page_size",
    "stub_cap", "recall_budget", "chunk_tokens", "overhead", "capacity", "fingerprint_bits",
    "keep_verbatim_chars", "recalls_per_step", "tokenizer", "system", "goal",
    "chat_format", "preview_head_chars", "preview_tail_chars", "signature_chars", "thought_chars",
    "action_chars",
)

PRESETS: dict[str, Config] = {
    # Tiny budgets in bytes: pages of 2 stubs, 8-byte chunks, 24 ids, 3-bit fingerprints (collisions
    # are common), so compaction, eviction, paging and split characters happen on every run.
    "minimal": Config(
        context_limit=1600,
        max_completion=128,
        summary_budget=320,
        recent_budget=416,
        page_budget=336,
        page_size=2,
        stub_cap=104,
        recall_budget=176,
        chunk_tokens=8,
        overhead=24,
        capacity=24,
        fingerprint_bits=3,
        keep_verbatim_chars=24,
        recalls_per_step=2,
        tokenizer="bytes",
        system="Agent.",
        goal="Solve it.",
        preview_head_chars=12,
        preview_tail_chars=8,
        signature_chars=16,
        thought_chars=12,
        action_chars=16,
    ),
    # The paper's setting: Qwen3-8B at a 16k window with a 4096-token completion cap (L = 12288);
    # recall budget 16000 / per-recall 8000 characters mapped to Q = 4096 / q = 1920 tokens.
    "paper": Config(
        context_limit=16384,
        max_completion=4096,
        summary_budget=2048,
        recent_budget=4096,
        page_budget=1024,
        page_size=8,
        stub_cap=112,
        recall_budget=4096,
        chunk_tokens=1920,
        overhead=64,
        capacity=65535,
        fingerprint_bits=32,
        keep_verbatim_chars=500,
        recalls_per_step=2,
        tokenizer="o200k_base",
        system=render.DEFAULT_SYSTEM,
        goal="Solve the task.",
    ),
}


def preset(name: str, **overrides: Any) -> Config:
    """A preset with some fields replaced; unknown names are a ConfigError."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}; known: {', '.join(OVERRIDE_KEYS)}")
    for key, value in overrides.items():
        if key in STRING_FIELDS:
            if not isinstance(value, str):
                raise ConfigError(f"config key {key!r} must be a string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key {key!r} must be an integer, got {value!r}")
    return PRESETS[name].replace(**overrides)


@frozen
class Setup:
    """A validated Config with its tokenizer and every fixed cost measured (B, frames, rho, K, L)."""

    config: Config
    tokenizer: Tokenizer = field(eq=False, repr=False)
    chat: ChatFormat
    ids: IdScheme
    prefix_messages: tuple[tuple[str, str], ...]
    prefix_tokens: int  # B = tokens(F)
    generation_tokens: int  # the generation prompt after the last message (part of eta)
    wrapper_cost: int  # rho: recall wrapper with the widest numbers + chunk overrun
    stub_floor: int  # smallest possible stub cost (empty signature and previews, widest numbers)
    page_frame: int  # catalog message without its stubs (widest header)
    summary_frame: int  # summary message without items (with the widest omitted-count line)
    summary_base: int  # summary message without items and without an omitted-count line
    recall_frame: int  # recall-buffer message without responses
    observation_stub_frame: int  # too-large-observation message without its stub
    agent_floor: int  # smallest agent message (thought and action both clipped to nothing)
    command_floor: int  # smallest command-result message (notes clipped to nothing)
    limit: int  # L = L_ctx - G_max
    budget: int  # K = B + M + R + P + Q + eta
    # tokens of each role's message frame (before, after the content), counted once when first needed
    _frame_tokens: dict[str, tuple[int, int]] = field(factory=dict, init=False, eq=False, repr=False)

    def message_tokens(self, role: str, content: str) -> int:
        """Tokens of one serialized message, role markers included."""
        return self.tokenizer.count(self.chat.render_message(role, content))

    def line_tokens(self, line: str) -> int:
        """Tokens a line costs inside a component: the line with the newline that precedes it."""
        return self.tokenizer.count("\n" + line)

    def message_tokens_of(self, role: str, parts: Sequence[Part]) -> int:
        """Tokens of the message whose content is the concatenation of ``parts``, known counts reused
        where the tokenizer's boundary rule allows (`arc_ref.counting`); exactly ``message_tokens``."""
        frame = self.chat.frame(role)
        if frame is None:
            return self.message_tokens(role, "".join(text for text, _ in parts))
        before, after = frame
        counts = self._frame_tokens.get(role)
        if counts is None:
            counts = self._frame_tokens[role] = (self.tokenizer.count(before), self.tokenizer.count(after))
        return joined_tokens(self.tokenizer, [(before, counts[0]), *parts, (after, counts[1])])


def _check_integers(config: Config) -> None:
    for name in INTEGER_FIELDS:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
    at_least_one = (
        "context_limit", "max_completion", "summary_budget", "recent_budget", "page_budget",
        "page_size", "stub_cap", "recall_budget", "chunk_tokens", "recalls_per_step",
    )
    for name in at_least_one:
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(config, name)}")
    non_negative = (
        "overhead", "keep_verbatim_chars", "preview_head_chars", "preview_tail_chars",
        "signature_chars", "thought_chars", "action_chars",
    )
    for name in non_negative:
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {getattr(config, name)}")
    for name in STRING_FIELDS:
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{name} must be a string, got {getattr(config, name)!r}")


def make_setup(config: Config) -> Setup:
    """Resolve and validate a Config: every inequality of A3-A5 that can be checked up front is.

    Raises ConfigError naming the budgets when K = B + M + R + P + Q + eta exceeds L = L_ctx - G_max,
    or when a component budget cannot hold its smallest possible content.
    """
    _check_integers(config)
    tokenizer = get_tokenizer(config.tokenizer)
    chat = get_chat_format(config.chat_format)
    ids = IdScheme(config.capacity, config.fingerprint_bits)
    widest_id = ids.widest()
    number = render.WIDEST_NUMBER

    def message(role: str, content: str) -> int:
        return tokenizer.count(chat.render_message(role, content))

    prefix = ((render.SYSTEM, config.system), (render.USER, config.goal))
    prefix_tokens = tokenizer.count("".join(chat.render_message(r, c) for r, c in prefix))
    generation_tokens = tokenizer.count(chat.generation_prompt)
    widest_stub = render.stub(widest_id, render.WIDEST_RETURNCODE, number, number, ELLIPSIS, "", "")
    stub_floor = tokenizer.count("\n" + widest_stub)
    widest_pages = -(-config.capacity // config.page_size)
    page_frame = message(
        render.USER,
        render.catalog_header(widest_pages, widest_pages, config.capacity, config.capacity, config.capacity),
    )
    summary_frame = message(render.USER, render.summary_content(number, ()))
    summary_base = message(render.USER, render.summary_content(0, ()))
    recall_frame = message(render.USER, render.recall_content(()))
    wrapper = render.recall_response(widest_id, number, number, "")
    wrapper_cost = tokenizer.count("\n" + wrapper) + tokenizer.chunk_overrun
    observation_stub_frame = message(
        render.USER, render.observation_stub_message(widest_id, render.WIDEST_RETURNCODE, number, "")
    )
    agent_floor = message(render.ASSISTANT, render.agent_message(ELLIPSIS, ELLIPSIS))
    command_floor = message(render.USER, render.command_message((ELLIPSIS,)))

    m = config
    limit = m.context_limit - m.max_completion
    budget = prefix_tokens + m.summary_budget + m.recent_budget + m.page_budget + m.recall_budget + m.overhead

    problems: list[str] = []
    if limit < 1:
        problems.append(
            f"L = L_ctx - G_max = context_limit {m.context_limit} - max_completion {m.max_completion}"
            f" = {limit} leaves no room for a prompt"
        )
    if generation_tokens > m.overhead:
        problems.append(
            f"overhead eta = {m.overhead} < {generation_tokens} tokens of the generation prompt"
            f" {chat.generation_prompt!r}"
        )
    if stub_floor > m.stub_cap:
        problems.append(
            f"stub_cap c = {m.stub_cap} < {stub_floor}, the smallest stub (id, widest metadata, empty previews)"
        )
    if page_frame + m.page_size * m.stub_cap > m.page_budget:
        problems.append(
            f"page_budget P = {m.page_budget} < page frame {page_frame} + page_size p {m.page_size}"
            f" x stub_cap c {m.stub_cap} = {page_frame + m.page_size * m.stub_cap} (A3: p*c <= P)"
        )
    if recall_frame + m.chunk_tokens + wrapper_cost > m.recall_budget:
        problems.append(
            f"recall_budget Q = {m.recall_budget} < buffer frame {recall_frame} + chunk_tokens q"
            f" {m.chunk_tokens} + wrapper rho {wrapper_cost} = {recall_frame + m.chunk_tokens + wrapper_cost}"
            " (A5: q + rho <= Q)"
        )
    if summary_frame + m.stub_cap > m.summary_budget:
        problems.append(
            f"summary_budget M = {m.summary_budget} < summary frame {summary_frame} + stub_cap c"
            f" {m.stub_cap} = {summary_frame + m.stub_cap}"
        )
    recent_floor = max(observation_stub_frame + m.stub_cap, agent_floor, command_floor)
    if recent_floor > m.recent_budget:
        problems.append(
            f"recent_budget R = {m.recent_budget} < {recent_floor}, the largest of: a too-large observation"
            f" shown as its stub ({observation_stub_frame} + c {m.stub_cap}), the smallest agent message"
            f" ({agent_floor}), the smallest command result ({command_floor})"
        )
    if budget > limit:
        problems.append(
            f"K = B + M + R + P + Q + eta = {prefix_tokens} + {m.summary_budget} + {m.recent_budget}"
            f" + {m.page_budget} + {m.recall_budget} + {m.overhead} = {budget} exceeds L = L_ctx - G_max"
            f" = {m.context_limit} - {m.max_completion} = {limit} (A4: K <= L); lower summary_budget,"
            " recent_budget, page_budget, recall_budget or overhead, shorten system/goal, or raise context_limit"
        )
    if problems:
        raise ConfigError("invalid ARC configuration:\n  - " + "\n  - ".join(problems))
    return Setup(
        config=config,
        tokenizer=tokenizer,
        chat=chat,
        ids=ids,
        prefix_messages=prefix,
        prefix_tokens=prefix_tokens,
        generation_tokens=generation_tokens,
        wrapper_cost=wrapper_cost,
        stub_floor=stub_floor,
        page_frame=page_frame,
        summary_frame=summary_frame,
        summary_base=summary_base,
        recall_frame=recall_frame,
        observation_stub_frame=observation_stub_frame,
        agent_floor=agent_floor,
        command_floor=command_floor,
        limit=limit,
        budget=budget,
    )


def minimum_budgets(config: Config) -> Mapping[str, int]:
    """Smallest c, P, Q, M, R, eta that `make_setup` accepts for the other fields of ``config``.

    The page, summary and recent floors use ``max(config.stub_cap, smallest stub cap)``. Used to draw
    random valid budgets in the executable proofs; K <= L still has to be arranged by the caller.
    """
    loose = config.replace(
        stub_cap=10**6, page_budget=10**9, recall_budget=10**9, summary_budget=10**9,
        recent_budget=10**9, overhead=10**6, context_limit=10**12, max_completion=1,
    )
    setup = make_setup(loose)
    stub_cap = max(config.stub_cap, setup.stub_floor)
    return {
        "stub_cap": setup.stub_floor,
        "page_budget": setup.page_frame + config.page_size * stub_cap,
        "recall_budget": setup.recall_frame + config.chunk_tokens + setup.wrapper_cost,
        "summary_budget": setup.summary_frame + stub_cap,
        "recent_budget": max(setup.observation_stub_frame + stub_cap, setup.agent_floor, setup.command_floor),
        "overhead": setup.generation_tokens,
        "prefix_tokens": setup.prefix_tokens,
    }
