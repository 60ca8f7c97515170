"""Configuration, presets, and the budget checks of A3-A5 (K <= L among them), done once per task.

`Config` holds the user's numbers (paper symbol in each comment); `make_setup` resolves the tokenizer,
measures every fixed cost with it (B, frames, the recall wrapper rho) and refuses a configuration
under which the appendix' assumptions could fail, naming the budgets involved.
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import attrs
from attrs import field, frozen

from arc_ref import render
from arc_ref.chat import DEFAULT_CHAT_FORMAT, ChatFormat, get_chat_format, parse_template_kwargs
from arc_ref.counting import Part, joined_tokens
from arc_ref.errors import ConfigError
from arc_ref.escape import ShownForm, control_strings
from arc_ref.ids import IdScheme
from arc_ref.json_limits import MAX_NESTING, nesting, value_nesting
from arc_ref.message import Message, ToolCall, ToolSpec, shared_context
from arc_ref.openai_wire import TOOL_SHAPE, ShapeError, read_tool, read_tool_flags
from arc_ref.text import ELLIPSIS, shown_signature
from arc_ref.tokenizers import HF_DIR_PREFIX, HuggingFaceTokenizer, Tokenizer, get_tokenizer
from arc_ref.tools import ARC_TOOL_NAMES, ARC_TOOLS

if TYPE_CHECKING:
    from arc_ref.templates import TemplateFormat

TEMPLATE_FORMAT = "template"  # chat_format: the chat template of the hf-dir tokenizer's model directory
ACTION_MODES = ("text", "tools")
# The view's presentation (spec/rendering.md section 14): "lean" (default) costs what the plain transcript costs
# until something is compacted and extends the previous view between compactions; "paper" is the layout of the
# paper's experiments (a catalog page from the first observation, signatures in observation headers).
LAYOUTS = ("lean", "paper")
DEFAULT_TEMPLATE_KWARGS: tuple[tuple[str, Any], ...] = (("enable_thinking", False),)
NO_TOOLS: tuple[ToolSpec, ...] = ()


# The cost model's defaults (spec/rendering.md section 11.1), from the roofline of arc_eval.analysis at the paper's
# 16k setting, Qwen3-8B on one H200: prefilling a token costs 2 x 6.95e9 FLOPs / 989e12 FLOP/s = 14.0 us; one
# generated token reads each context token's KV (147,456 bytes) and its share of the weights (M_w / free HBM =
# 0.148 of it) at 4.8e12 B/s = 35.3 ns: prefill_cost = 14.0 us / 35.3 ns = 398 (Qwen3-32B on two H200: 857).
# low_water 5 and expected_completion 0 (the agent's own tokens per turn in H, not a constant) were chosen by
# measurement (benchmarks/bench_trajectories.py, sections tradeoff and long: the least roofline time with prefix
# caching over five real trajectories and a 500-step one at 16k and 32k, o200k and Qwen3; the issue-26 rules tried
# are listed in benchmarks/PERFORMANCE.md).
DEFAULT_LOW_WATER = 5
DEFAULT_PREFILL_COST = 398
DEFAULT_EXPECTED_COMPLETION = 0
# summary_low_water: once a fold's items do not fit M, S shrinks to this percent of M (layout "lean"; until then
# folds only append to S); chosen by measurement (benchmarks/bench_trajectories.py, issue 26's third round).
DEFAULT_SUMMARY_LOW_WATER = 50
MAX_COST_FIELD = 2**20  # prefill_cost and expected_completion at most this: the rule's products fit 128 bits


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
    chat_format: str = DEFAULT_CHAT_FORMAT
    action_mode: str = "text"  # "tools": actions are OpenAI tool calls (needs chat_format "template")
    tools: tuple[ToolSpec, ...] = NO_TOOLS  # the environment's tools, sent after ARC's own (tool mode)
    template_kwargs: tuple[tuple[str, Any], ...] = DEFAULT_TEMPLATE_KWARGS  # chat_template_kwargs of each request
    preview_head_chars: int = 96  # fixed-size previews kept in each record and stub
    preview_tail_chars: int = 64
    signature_chars: int = 160  # action signature shown in stubs and headers
    thought_chars: int = 96  # summary: older thoughts truncated to this
    action_chars: int = 128  # summary: older actions truncated to this
    layout: str = "lean"  # the view's presentation, one of LAYOUTS
    # When and how much layout "lean" compacts (spec/rendering.md section 11.1; layout "paper" keeps the paper's
    # rule): H folds down to low_water percent of what it may hold; it folds early when the roofline's terms say
    # a fold pays: prefill_cost is the prefill of one token in KV reads of one context token per generated token
    # (0: fold only when the view would exceed K), expected_completion the tokens a call generates (0: the agent's
    # own tokens per turn, measured on the turns in H).
    low_water: int = DEFAULT_LOW_WATER
    prefill_cost: int = DEFAULT_PREFILL_COST
    expected_completion: int = DEFAULT_EXPECTED_COMPLETION
    # S (layout "lean", spec/rendering.md 11.3): a fold appends its items to S while they fit M; when they do not,
    # S shrinks down to summary_low_water percent of M, so that one rewrite of S buys many appending folds.
    summary_low_water: int = DEFAULT_SUMMARY_LOW_WATER

    def replace(self, **changes: Any) -> "Config":
        return attrs.evolve(self, **changes)


INTEGER_FIELDS = tuple(
    a.name for a in attrs.fields(Config) if a.type in ("int", int)
)
STRING_FIELDS = ("tokenizer", "system", "goal", "chat_format", "action_mode", "layout")
JSON_FIELDS = ("tools", "template_kwargs")  # given as JSON values (an array of tools, an object)
# Fields that were added after the first traces: echoed on the config line only when not at their default,
# so that every earlier trace replays byte-identically (spec/trace.md section 4).
LATER_FIELDS = ("action_mode", "tools", "template_kwargs", "layout", "low_water", "prefill_cost",
                "expected_completion", "summary_low_water")
# The replay trace's override keys (the issue fixes these names; the last nine are extensions).
OVERRIDE_KEYS = (
    "context_limit", "max_completion", "summary_budget", "recent_budget", "page_budget", "page_size",
    "stub_cap", "recall_budget", "chunk_tokens", "overhead", "capacity", "fingerprint_bits",
    "keep_verbatim_chars", "recalls_per_step", "tokenizer", "system", "goal",
    "chat_format", "preview_head_chars", "preview_tail_chars", "signature_chars", "thought_chars",
    "action_chars", "action_mode", "tools", "template_kwargs", "layout", "low_water", "prefill_cost",
    "expected_completion", "summary_low_water",
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
    converted: dict[str, Any] = {}
    for key, value in overrides.items():
        if key == "tools":
            converted[key] = parse_tools(value)
        elif key == "template_kwargs":
            converted[key] = parse_template_kwargs(value)
        elif key in STRING_FIELDS:
            if not isinstance(value, str):
                raise ConfigError(f"config key {key!r} must be a string, got {value!r}")
            converted[key] = value
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key {key!r} must be an integer, got {value!r}")
        else:
            converted[key] = value
    return PRESETS[name].replace(**converted)


TOOL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def parse_tools(value: Any) -> tuple[ToolSpec, ...]:
    """The ``tools`` override: ToolSpec values, or OpenAI tool objects ``{"type": "function", "function": {...}}``."""
    if isinstance(value, tuple) and all(isinstance(item, ToolSpec) for item in value):
        tools = value
    elif isinstance(value, list):
        parsed = []
        for number, item in enumerate(value, start=1):
            try:
                function = read_tool(item, number - 1)
            except ShapeError:
                raise ConfigError(f"config key 'tools': tool {number} must be {TOOL_SHAPE}") from None
            unknown = sorted(set(function) - FUNCTION_KEYS)
            if unknown:
                raise ConfigError(f"config key 'tools': tool {number} has unknown function key(s) {', '.join(unknown)}")
            description = function.get("description")
            parameters = function.get("parameters")
            if description is not None and not isinstance(description, str):
                raise ConfigError(f"config key 'tools': tool {number}'s description must be a string")
            if parameters is not None and not isinstance(parameters, dict):
                raise ConfigError(f"config key 'tools': tool {number}'s parameters must be a JSON object")
            if parameters is not None:
                _check_parameters_nesting(number, value_nesting(parameters))
            try:
                strict, deferred, listed = read_tool_flags(item, function, number - 1)
            except ShapeError as bad:
                raise ConfigError(f"config key 'tools': tool {number}'s {bad.rule} must be true, false or null,"
                                  f" got {json.dumps(bad.value)[:40]}") from None
            text = None if parameters is None else json.dumps(parameters, ensure_ascii=False)
            parsed.append(ToolSpec(function["name"], description, text, strict,
                                   listed if deferred is None else deferred, listed))
        tools = tuple(parsed)
    else:
        raise ConfigError(f"config key 'tools' must be an array of tools, got {json.dumps(value)[:40]}")
    if tools is value:
        for number, tool in enumerate(tools, start=1):
            if tool.parameters is not None:
                _check_parameters_nesting(number, nesting(tool.parameters))
    names = [tool.name for tool in tools]
    for tool_name in names:
        if not 1 <= len(tool_name) <= 64 or not set(tool_name) <= TOOL_NAME_CHARS:
            raise ConfigError(f"config key 'tools': tool name {tool_name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'tools': tool names must be distinct, got {names}")
    return tools


FUNCTION_KEYS = frozenset(("name", "description", "parameters", "strict", "defer_loading"))
"""The keys of a tool's function that the core reads (vLLM 0.32's `FunctionDefinition`); any other is refused."""


# A tool's parameters stand 4 levels down in the config line ({"tools": [{"function": {"parameters": ...}}]}), as
# in a request body: they nest at most 124 levels, so that the line nests at most MAX_NESTING (spec/trace.md §8).
TOOL_PARAMETERS_NESTING = MAX_NESTING - 4


def _check_parameters_nesting(number: int, depth: int) -> None:
    if depth > TOOL_PARAMETERS_NESTING:
        raise ConfigError(f"config key 'tools': tool {number}'s parameters are nested {depth} levels deep (at most"
                          f" {TOOL_PARAMETERS_NESTING}, so that the config line nests at most {MAX_NESTING})")


def config_json(config: Config) -> dict[str, Any]:
    """The resolved configuration as the config output line echoes it (fields of LATER_FIELDS only when set)."""
    echoed: dict[str, Any] = {}
    defaults = Config.__attrs_attrs__
    for attribute in defaults:
        value = getattr(config, attribute.name)
        if attribute.name in LATER_FIELDS and value == attribute.default:
            continue
        if attribute.name == "tools":
            echoed["tools"] = [tool.openai() for tool in value]
        elif attribute.name == "template_kwargs":
            echoed["template_kwargs"] = dict(value)
        else:
            echoed[attribute.name] = value
    return echoed


@frozen
class Setup:
    """A validated Config with its tokenizer and every fixed cost measured (B, frames, rho, K, L)."""

    config: Config
    tokenizer: Tokenizer = field(eq=False, repr=False)
    chat: Union[ChatFormat, "TemplateFormat"] = field(eq=False)
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
    tool_reserve: int = 0  # tool mode: what a pending call's result may cost in H (its stub message, widest)
    tool_unit_floor: int = 0  # tool mode: the smallest tool turn (one call) with the reserve for its result
    # tokens of each role's message frame (before, after the content), counted once when first needed
    _frame_tokens: dict[str, tuple[int, int]] = field(factory=dict, init=False, eq=False, repr=False)
    # S of spec/rendering.md 7.1 for this chat format and tokenizer, built when first needed
    _shown_forms: dict[None, ShownForm] = field(factory=dict, init=False, eq=False, repr=False)
    # counts of texts ARC writes again and again (S's head per omitted count), remembered (bounded by its user)
    remembered_counts: dict[str, int] = field(factory=dict, init=False, eq=False, repr=False)

    @property
    def shown_form(self) -> ShownForm:
        """S: how an observation is shown with no control string of this setup in it (spec/rendering.md 7.1)."""
        form = self._shown_forms.get(None)
        if form is None:
            form = self._shown_forms[None] = _shown_form(control_strings(self.chat, self.tokenizer))
        return form

    def show(self, text: str) -> str:
        """S(text): a text of the model's or a tool's, as a text ARC writes shows it (spec/rendering.md 7.1)."""
        return self.shown_form.show(text)

    def shown_signature(self, signature: str) -> str:
        """An action signature as stubs, summary items and observation headers show it: S, escaped, clipped."""
        return shown_signature(self.show(signature), self.config.signature_chars)

    def shown_call(self, call: ToolCall) -> ToolCall:
        """A tool call of the model's as an assistant message of the view shows it: S on its id and name, and on
        every string its arguments hold (`ShownForm.show_arguments`); the call itself when nothing changes."""
        form = self.shown_form
        shown = ToolCall(form.show(call.call_id), form.show(call.name), form.show_arguments(call.arguments))
        return call if shown == call else shown

    def message_tokens(self, role: str, content: str) -> int:
        """Tokens of one serialized message, role markers included (the largest over its places, A4)."""
        if isinstance(self.chat, ChatFormat):
            return self.tokenizer.count(self.chat.render_message(role, content))
        return max(cost for _, cost in self.chat.placed_costs(role, content))

    def message(self, role: str, content: str, tool_calls: tuple[ToolCall, ...] = (),
                tool_call_id: str | None = None, parts: Sequence[Part] | None = None) -> Message:
        """A message of the view with its cost counted once: the one way every component builds its messages.

        ``parts``, when given, are the content as a concatenation, each text with its token count where it is
        already known (a record's n_j, a summary item's line, a recall body). A chat format that embeds the
        content verbatim in a frame of its own (``ChatFormat.frame``) sums the cost from the frame and the
        parts (`arc_ref.counting`): exactly the count of the rendered message, no known part counted again. A
        served template's piece may depend on its place and may rewrite the content, so it is counted in
        every place the view can give it (`TemplateFormat.placed_costs`; spec/rendering.md section 3.1),
        the parts reused where the piece holds the content verbatim.
        """
        if isinstance(self.chat, ChatFormat):
            if tool_calls or tool_call_id is not None:
                raise ConfigError(f"chat format {self.chat.name!r} has no tool calls; use chat_format 'template'")
            if parts is None:
                return Message(role, content, self.tokenizer.count(self.chat.render_message(role, content)))
            return Message(role, content, self._framed_tokens(role, parts))
        placed = self.chat.placed_costs(role, content, tool_calls, tool_call_id, parts)
        return Message(role, content, max(cost for _, cost in placed), tool_calls, tool_call_id, placed)

    def _framed_tokens(self, role: str, parts: Sequence[Part]) -> int:
        """Tokens of the message of a ChatFormat whose content is the concatenation of ``parts``, known counts
        reused where the tokenizer's boundary rule allows (`arc_ref.counting`); exactly ``message_tokens``."""
        assert isinstance(self.chat, ChatFormat)
        frame = self.chat.frame(role)
        if frame is None:
            return self.message_tokens(role, "".join(text for text, _ in parts))
        before, after = frame
        counts = self._frame_tokens.get(role)
        if counts is None:
            counts = self._frame_tokens[role] = (self.tokenizer.count(before), self.tokenizer.count(after))
        return joined_tokens(self.tokenizer, [(before, counts[0]), *parts, (after, counts[1])])

    def prefix(self) -> tuple[Message, ...]:
        """F = [system, goal] as messages; their costs add up to B (the head of a served template included)."""
        (system_role, system), (goal_role, goal) = self.prefix_messages
        if isinstance(self.chat, ChatFormat):
            return tuple(self.message(role, content) for role, content in self.prefix_messages)
        chat = self.chat
        system_tokens = chat.head_tokens + chat.system_piece_tokens
        system_placed = ((SYSTEM_CONTEXT, system_tokens),)
        goal_tokens = max(cost for _, cost in chat.goal_costs)
        return (
            Message(system_role, system, system_tokens, placed=system_placed),
            Message(goal_role, goal, goal_tokens, placed=chat.goal_costs),
        )

    def result_reserve(self, call_id: str) -> int:
        """Tool mode: the most a pending call's result may cost in H, its stub message at the widest (A4), under the
        call's id as the view shows it."""
        return self.bare_result_reserve(call_id) + self.config.stub_cap

    def bare_result_reserve(self, call_id: str) -> int:
        """Tool mode: the least a pending call's result is sure of when its turn's calls cannot all have
        `result_reserve` (spec/rendering.md section 13): its stub message at the widest with an empty stub line."""
        return tool_result_reserve(self.chat, self.ids.widest(), self.show(call_id))

    def line_tokens(self, line: str) -> int:
        """Tokens a line costs inside a component: the line with the newline that precedes it."""
        return self.tokenizer.count("\n" + line)


def _check_integers(config: Config) -> None:
    for name in INTEGER_FIELDS:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
    _check_range_and_text(config)
    at_least_one = (
        "context_limit", "max_completion", "summary_budget", "recent_budget", "page_budget",
        "page_size", "stub_cap", "recall_budget", "chunk_tokens", "recalls_per_step", "low_water",
        "summary_low_water",
    )
    for name in at_least_one:
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {shown_integer(getattr(config, name))}")
    non_negative = (
        "overhead", "keep_verbatim_chars", "preview_head_chars", "preview_tail_chars",
        "signature_chars", "thought_chars", "action_chars", "prefill_cost", "expected_completion",
    )
    for name in non_negative:
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {shown_integer(getattr(config, name))}")
    for name in ("low_water", "summary_low_water"):
        if getattr(config, name) > 100:
            raise ConfigError(f"{name} must be a percentage from 1 to 100, got"
                              f" {shown_integer(getattr(config, name))}")
    for name in ("prefill_cost", "expected_completion"):
        if getattr(config, name) > MAX_COST_FIELD:
            raise ConfigError(f"{name} must be at most {MAX_COST_FIELD} (2^20), got"
                              f" {shown_integer(getattr(config, name))}")
    for name in STRING_FIELDS:
        if not isinstance(getattr(config, name), str):
            raise ConfigError(f"{name} must be a string, got {getattr(config, name)!r}")


# Every integer field is at most 2^31 - 1 (spec/parameters.md, check 1): sums and products of the checks fit
# in 64 bits, every count stays below render.WIDEST_NUMBER, and a port needs no arbitrary precision.
MAX_CONFIG_INTEGER = 2**31 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown_integer(value: int) -> str:
    """An integer for a message: itself up to 64 bits, else its number of digits (or of bits, past 4,300 digits)."""
    if value.bit_length() <= 64:
        return str(value)
    try:
        return f"an integer of {len(str(abs(value)))} digits"
    except ValueError:  # more digits than Python converts to text
        return f"an integer of {value.bit_length()} bits"


def first_lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate (U+D800..U+DFFF) of ``text``, or None: such a string is not text."""
    if text.isascii():  # O(1) in CPython: most texts are done here
        return None
    found = _SURROGATE.search(text)
    return None if found is None else found.start()


def _check_range_and_text(config: Config) -> None:
    """Integer fields at most MAX_CONFIG_INTEGER, string fields Unicode text (no lone surrogate)."""
    for name in INTEGER_FIELDS:
        value = getattr(config, name)
        if value > MAX_CONFIG_INTEGER:
            raise ConfigError(f"{name} must be at most {MAX_CONFIG_INTEGER} (2^31 - 1), got {shown_integer(value)}")
        if value < -MAX_CONFIG_INTEGER - 1:  # refused below with its own minimum; too long to print there
            raise ConfigError(
                f"{name} must be between its minimum and {MAX_CONFIG_INTEGER}, got {shown_integer(value)}"
            )
    for name in STRING_FIELDS:
        value = getattr(config, name)
        index = first_lone_surrogate(value) if isinstance(value, str) else None
        if index is not None:
            raise ConfigError(f"{name} is not valid Unicode text (lone surrogate at index {index})")


SYSTEM_CONTEXT = shared_context(None, "user", True)  # the system prompt: first, the goal after it
TOOL_RESERVE_CALL_ID = "call_0"  # the call id the reserve of Setup is measured with (per call at run time)


def tool_result_reserve(chat: Union[ChatFormat, "TemplateFormat"], widest_id: str, call_id: str) -> int:
    """Tokens of a tool result showing the stub frame of the widest id (largest over its places), without the stub."""
    if isinstance(chat, ChatFormat):
        return 0
    content = render.observation_stub_message(widest_id, render.WIDEST_RETURNCODE, render.WIDEST_NUMBER, "")
    return max(cost for _, cost in chat.placed_costs(render.TOOL, content, (), call_id))


def _template_format(config: Config, tokenizer: Tokenizer) -> "TemplateFormat":
    """The chat format "template": the model directory of an hf-dir tokenizer gives its own chat template (the
    tokenizer and tools checked by `checked_fields`)."""
    from arc_ref.templates import template_format

    assert isinstance(tokenizer, HuggingFaceTokenizer)  # checked_fields: an hf-dir tokenizer
    tools = ARC_TOOLS + config.tools if config.action_mode == "tools" else ()
    directory = config.tokenizer[len(HF_DIR_PREFIX):]
    return template_format(tokenizer, directory, config.template_kwargs, tools, config.system, config.goal,
                           config.action_mode)


def make_setup(config: Config) -> Setup:
    """Resolve and validate a Config: every inequality of A3-A5 that can be checked up front is.

    Raises ConfigError naming the budgets when K = B + M + R + P + Q + eta exceeds L = L_ctx - G_max,
    or when a component budget cannot hold its smallest possible content.
    """
    tokenizer, chat = _checked_format(config)
    ids = IdScheme(config.capacity, config.fingerprint_bits)
    costs = _fixed_costs(config, tokenizer, chat, ids.widest())
    limit = config.context_limit - config.max_completion
    budget = (costs.prefix_tokens + config.summary_budget + config.recent_budget + config.page_budget
              + config.recall_budget + config.overhead)
    problems = _budget_problems(config, costs, limit, budget)
    if problems:
        raise ConfigError("invalid ARC configuration:\n  - " + "\n  - ".join(problems))
    return Setup(
        config=config,
        tokenizer=tokenizer,
        chat=chat,
        ids=ids,
        prefix_messages=costs.prefix_messages,
        prefix_tokens=costs.prefix_tokens,
        generation_tokens=costs.generation_tokens,
        wrapper_cost=costs.wrapper_cost,
        stub_floor=costs.stub_floor,
        page_frame=costs.page_frame,
        summary_frame=costs.summary_frame,
        summary_base=costs.summary_base,
        recall_frame=costs.recall_frame,
        observation_stub_frame=costs.observation_stub_frame,
        agent_floor=costs.agent_floor,
        command_floor=costs.command_floor,
        tool_reserve=costs.tool_reserve,
        tool_unit_floor=costs.tool_unit_floor,
        limit=limit,
        budget=budget,
    )


def checked_fields(config: Config) -> Tokenizer:
    """What `make_setup` checks of ``config`` before its chat template is built and its budgets are counted: each
    field's type and range, the action mode and layout, the tools and template kwargs, the tokenizer (loaded, so
    a missing model directory is named here) and, for chat format "template", an hf-dir tokenizer and no tool
    named as one of ARC's. Returns the tokenizer; ConfigError naming the first problem. A caller that learns the
    goal later (the Session) runs it when it is built, so a mistake is told at the line that made it."""
    _check_integers(config)
    if config.action_mode not in ACTION_MODES:
        raise ConfigError(f"action_mode must be one of {', '.join(ACTION_MODES)}, got {config.action_mode!r}")
    if config.layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {config.layout!r}")
    if config.action_mode == "tools" and config.chat_format != TEMPLATE_FORMAT:
        raise ConfigError(
            f"action_mode 'tools' needs chat_format {TEMPLATE_FORMAT!r}: tool calls and results are rendered by"
            f" the served model's own chat template, got chat format {config.chat_format!r}"
        )
    if config.tools and config.action_mode != "tools":
        raise ConfigError("config key 'tools' lists the environment's tools of action_mode 'tools'")
    parse_tools(config.tools)
    parse_template_kwargs(config.template_kwargs)
    tokenizer = get_tokenizer(config.tokenizer)
    if config.chat_format == TEMPLATE_FORMAT:
        if not (isinstance(tokenizer, HuggingFaceTokenizer) and config.tokenizer.startswith(HF_DIR_PREFIX)):
            raise ConfigError(
                f"chat format {TEMPLATE_FORMAT!r} renders the model directory's own chat template; it needs the"
                f" tokenizer 'hf-dir:DIR' of that directory, got tokenizer {config.tokenizer!r}"
            )
        if config.action_mode == "tools":
            clash = sorted(ARC_TOOL_NAMES & {tool.name for tool in config.tools})
            if clash:
                raise ConfigError(f"config key 'tools': {clash} are names of ARC's own tools")
    else:
        get_chat_format(config.chat_format)
    return tokenizer


def _checked_format(config: Config) -> tuple[Tokenizer, Union[ChatFormat, "TemplateFormat"]]:
    """The config's fields checked (`checked_fields`), then its chat format (a served template is built here: a
    template the core cannot split fails here)."""
    tokenizer = checked_fields(config)
    chat: ChatFormat | TemplateFormat
    chat = _template_format(config, tokenizer) if config.chat_format == TEMPLATE_FORMAT else get_chat_format(
        config.chat_format
    )
    return tokenizer, chat


@frozen
class _FixedCosts:
    """What ``make_setup`` measures before it checks the budgets: B, the generation prompt, every frame and floor
    at the widest numbers (the fields of ``Setup`` of the same names), and what the checks print."""

    prefix_messages: tuple[tuple[str, str], ...]
    prefix_tokens: int
    prefix_apart: tuple[int, ...]  # a ChatFormat's F counted as its two messages apart (check 4); () for a template
    generation_tokens: int
    generation_prompt: str
    stub_floor: int
    page_frame: int
    summary_frame: int
    summary_base: int
    recall_frame: int
    wrapper_cost: int
    observation_stub_frame: int
    agent_floor: int
    command_floor: int
    tool_reserve: int  # tool mode (else 0): what a pending call's result may cost in H
    unit_floor: int  # tool mode (else 0): the smallest tool turn (one call)
    tool_unit_floor: int  # tool mode (else 0): unit_floor + tool_reserve


@functools.lru_cache(maxsize=16)
def _shown_form(control: tuple[str, ...]) -> ShownForm:
    """S for a setup's control strings, built once per set of them (its patterns are built from a trie of the
    strings: ~0.2 ms for Qwen3's 26; a ShownForm is not changed after it is built, so setups share it)."""
    return ShownForm(control)


_FIXED_TEXT_TOKENS: dict[tuple[Tokenizer, str], int] = {}  # bounded: see _fixed_text_tokens


def _fixed_text_tokens(tokenizer: Tokenizer, text: str) -> int:
    """tokens(text) of a line `_fixed_costs` writes from numbers alone (the widest stub, the recall wrapper at the
    widest id): the same text for every setup of the same capacity, counted once per tokenizer (a new conversation
    of the proxy makes two setups, each conversation the same texts). At most 256 remembered."""
    key = (tokenizer, text)
    tokens = _FIXED_TEXT_TOKENS.get(key)
    if tokens is None:
        if len(_FIXED_TEXT_TOKENS) >= 256:
            _FIXED_TEXT_TOKENS.clear()
        tokens = _FIXED_TEXT_TOKENS[key] = tokenizer.count(text)
    return tokens


def _fixed_costs(config: Config, tokenizer: Tokenizer, chat: Union[ChatFormat, "TemplateFormat"],
                 widest_id: str) -> _FixedCosts:
    """B, the generation prompt and every frame and floor of the view at the widest numbers (A3-A5)."""
    number = render.WIDEST_NUMBER
    prefix = ((render.SYSTEM, config.system), (render.USER, config.goal))
    if isinstance(chat, ChatFormat):
        marker = chat

        def message(role: str, content: str) -> int:
            return tokenizer.count(marker.render_message(role, content))

        prefix_tokens = tokenizer.count("".join(chat.render_message(r, c) for r, c in prefix))
        generation_tokens = tokenizer.count(chat.generation_prompt)
        generation_prompt = chat.generation_prompt
    else:
        template = chat

        def message(role: str, content: str) -> int:
            return max(cost for _, cost in template.placed_costs(role, content))

        prefix_tokens = (template.head_tokens + template.system_piece_tokens
                         + max(cost for _, cost in template.goal_costs))
        generation_tokens = template.tail_tokens
        generation_prompt = template.tail
    widest_stub = render.stub(widest_id, render.WIDEST_RETURNCODE, number, number, ELLIPSIS, "", "")
    stub_floor = _fixed_text_tokens(tokenizer, "\n" + widest_stub)
    unknown_stub = render.stub(widest_id, None, number, number, ELLIPSIS, "", "")
    if _fixed_text_tokens(tokenizer, "\n" + unknown_stub) > stub_floor:  # (never for the tokenizers shipped)
        raise ConfigError(
            f"tokenizer {config.tokenizer!r} spends more tokens on an unknown return code"
            f" ({render.UNKNOWN_RETURNCODE!r}) than on the widest known one ({render.WIDEST_RETURNCODE}): the budget"
            " checks, which show every return code at the widest, would not bound it"
        )
    widest_pages = -(-config.capacity // config.page_size)
    page_frame = message(
        render.USER,
        render.catalog_header(widest_pages, widest_pages, config.capacity, config.capacity, config.capacity),
    )
    summary_frame = message(render.USER, render.summary_content(number, ()))
    summary_base = message(render.USER, render.summary_content(0, ()))
    recall_frame = message(render.USER, render.recall_content(()))
    wrapper = render.recall_response(widest_id, number, number, "")
    wrapper_cost = _fixed_text_tokens(tokenizer, "\n" + wrapper) + tokenizer.chunk_overrun
    observation_stub_frame = message(
        render.USER, render.observation_stub_message(widest_id, render.WIDEST_RETURNCODE, number, "")
    )
    agent_floor = message(render.ASSISTANT, render.agent_message(ELLIPSIS, ELLIPSIS))
    command_floor = message(render.USER, render.command_message((ELLIPSIS,)))
    tool_reserve = unit_floor = tool_unit_floor = 0
    if config.action_mode == "tools":
        tool_reserve = tool_result_reserve(chat, widest_id, TOOL_RESERVE_CALL_ID) + config.stub_cap
        shortest = min((tool.name for tool in (*ARC_TOOLS, *config.tools)), key=len)
        unit_floor = message(render.ASSISTANT, "") if isinstance(chat, ChatFormat) else max(
            cost for _, cost in chat.placed_costs(render.ASSISTANT, "", (ToolCall(TOOL_RESERVE_CALL_ID, shortest, "{}"),))
        )
        tool_unit_floor = unit_floor + tool_reserve
    apart = tuple(message(role, content) for role, content in prefix) if isinstance(chat, ChatFormat) else ()
    return _FixedCosts(
        prefix_messages=prefix, prefix_tokens=prefix_tokens, prefix_apart=apart, generation_tokens=generation_tokens,
        generation_prompt=generation_prompt, stub_floor=stub_floor, page_frame=page_frame,
        summary_frame=summary_frame, summary_base=summary_base, recall_frame=recall_frame, wrapper_cost=wrapper_cost,
        observation_stub_frame=observation_stub_frame, agent_floor=agent_floor, command_floor=command_floor,
        tool_reserve=tool_reserve, unit_floor=unit_floor, tool_unit_floor=tool_unit_floor,
    )


def _budget_problems(config: Config, costs: _FixedCosts, limit: int, budget: int) -> list[str]:
    """Every inequality of A3-A5 the config breaks, in words (none: the budgets hold): each component at least its
    floor (``component_floors``), K = B + M + R + P + Q + eta <= L, and F's count the sum of its messages."""
    m = config
    recent_floor = max(costs.observation_stub_frame + m.stub_cap, costs.agent_floor, costs.command_floor)
    floors = component_floors(
        stub_cap=m.stub_cap, page_size=m.page_size, chunk_tokens=m.chunk_tokens, stub_floor=costs.stub_floor,
        page_frame=costs.page_frame, recall_frame=costs.recall_frame, wrapper_cost=costs.wrapper_cost,
        summary_frame=costs.summary_frame, recent_floor=recent_floor, tool_unit_floor=costs.tool_unit_floor,
        generation_tokens=costs.generation_tokens,
    )
    problems: list[str] = []
    if limit < 1:
        problems.append(
            f"L = L_ctx - G_max = context_limit {m.context_limit} - max_completion {m.max_completion}"
            f" = {limit} leaves no room for a prompt"
        )
    if floors["overhead"] > m.overhead:
        problems.append(
            f"overhead eta = {m.overhead} < {costs.generation_tokens} tokens of the generation prompt"
            f" {costs.generation_prompt!r}"
        )
    if floors["stub_cap"] > m.stub_cap:
        problems.append(
            f"stub_cap c = {m.stub_cap} < {costs.stub_floor}, the smallest stub (id, widest metadata, empty previews)"
        )
    if floors["page_budget"] > m.page_budget:
        problems.append(
            f"page_budget P = {m.page_budget} < page frame {costs.page_frame} + page_size p {m.page_size}"
            f" x stub_cap c {m.stub_cap} = {costs.page_frame + m.page_size * m.stub_cap} (A3: p*c <= P)"
        )
    if floors["recall_budget"] > m.recall_budget:
        problems.append(
            f"recall_budget Q = {m.recall_budget} < buffer frame {costs.recall_frame} + chunk_tokens q"
            f" {m.chunk_tokens} + wrapper rho {costs.wrapper_cost}"
            f" = {costs.recall_frame + m.chunk_tokens + costs.wrapper_cost} (A5: q + rho <= Q)"
        )
    if floors["summary_budget"] > m.summary_budget:
        problems.append(
            f"summary_budget M = {m.summary_budget} < summary frame {costs.summary_frame} + stub_cap c"
            f" {m.stub_cap} = {costs.summary_frame + m.stub_cap}"
        )
    if config.action_mode == "tools":
        if floors["tool_unit"] > m.recent_budget:
            problems.append(
                f"recent_budget R = {m.recent_budget} < {costs.unit_floor + costs.tool_reserve}, the smallest tool"
                f" turn (one call: {costs.unit_floor}) and the reserve for its result (tool_reserve"
                f" {costs.tool_reserve})"
            )
    if floors["recent_budget"] > m.recent_budget:
        problems.append(
            f"recent_budget R = {m.recent_budget} < {recent_floor}, the largest of: a too-large observation"
            f" shown as its stub ({costs.observation_stub_frame} + c {m.stub_cap}), the smallest agent message"
            f" ({costs.agent_floor}), the smallest command result ({costs.command_floor})"
        )
    if budget > limit:
        problems.append(
            f"K = B + M + R + P + Q + eta = {costs.prefix_tokens} + {m.summary_budget} + {m.recent_budget}"
            f" + {m.page_budget} + {m.recall_budget} + {m.overhead} = {budget} exceeds L = L_ctx - G_max"
            f" = {m.context_limit} - {m.max_completion} = {limit} (A4: K <= L); lower summary_budget,"
            " recent_budget, page_budget, recall_budget or overhead, shorten system/goal, or raise context_limit"
        )
    if costs.prefix_apart and sum(costs.prefix_apart) != costs.prefix_tokens:  # check 4: B counted whole vs apart
        apart = costs.prefix_apart
        problems.append(
            f"the task prefix F costs {costs.prefix_tokens} tokens counted whole but {apart[0]} + {apart[1]} ="
            f" {sum(apart)} as its two messages: tokenizer {config.tokenizer!r} merges across their boundary,"
            " so the view's total would not be the sum of its messages"
        )
    return problems


def minimum_budgets(config: Config) -> Mapping[str, int]:
    """Smallest c, P, Q, M, R, eta that `make_setup` accepts for the other fields of ``config``.

    The page, summary and recent floors use ``max(config.stub_cap, smallest stub cap)``. Used to draw
    random valid budgets in the executable proofs; K <= L still has to be arranged by the caller.
    """
    loose = config.replace(  # K = B + 1.6e9 + 1e6 stays within L = MAX_CONFIG_INTEGER - 1
        stub_cap=10**6, page_budget=4 * 10**8, recall_budget=4 * 10**8, summary_budget=4 * 10**8,
        recent_budget=4 * 10**8, overhead=10**6, context_limit=MAX_CONFIG_INTEGER, max_completion=1,
    )
    setup = make_setup(loose)
    stub_cap = max(config.stub_cap, setup.stub_floor)
    floors = component_floors(
        stub_cap=stub_cap, page_size=config.page_size, chunk_tokens=config.chunk_tokens, stub_floor=setup.stub_floor,
        page_frame=setup.page_frame, recall_frame=setup.recall_frame, wrapper_cost=setup.wrapper_cost,
        summary_frame=setup.summary_frame,
        recent_floor=max(setup.observation_stub_frame + stub_cap, setup.agent_floor, setup.command_floor),
        tool_unit_floor=setup.tool_unit_floor - setup.config.stub_cap + stub_cap if setup.tool_unit_floor else 0,
        generation_tokens=setup.generation_tokens,
    )
    tool_unit = floors.pop("tool_unit")
    return {**floors, "recent_budget": max(floors["recent_budget"], tool_unit), "prefix_tokens": setup.prefix_tokens}


def component_floors(*, stub_cap: int, page_size: int, chunk_tokens: int, stub_floor: int, page_frame: int,
                     recall_frame: int, wrapper_cost: int, summary_frame: int, recent_floor: int,
                     tool_unit_floor: int, generation_tokens: int) -> dict[str, int]:
    """The smallest value of each budget component, the one statement of the floors ``make_setup`` checks and
    ``minimum_budgets`` reports: c holds the widest stub; P one page of p stubs of cap c (A3: p*c <= P); Q a
    chunk and its wrapper (A5: q + rho <= Q); M the summary frame and one stub; R the largest of a stubbed
    observation, the smallest agent message and command result (``recent_floor``), and in tool mode the
    smallest tool turn with its result's reserve (``tool_unit``); eta the generation prompt."""
    return {
        "stub_cap": stub_floor,
        "page_budget": page_frame + page_size * stub_cap,
        "recall_budget": recall_frame + chunk_tokens + wrapper_cost,
        "summary_budget": summary_frame + stub_cap,
        "recent_budget": recent_floor,
        "tool_unit": tool_unit_floor,
        "overhead": generation_tokens,
    }
