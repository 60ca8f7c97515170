"""D2, A4, Lemma 2 and Theorem claim 1: every view is within K <= L, counted on the text itself."""

from __future__ import annotations

import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_ref.chat import CHATML, QWEN3_NOTHINK, ChatFormat
from arc_ref.config import Config, make_setup, preset
from arc_ref.counting import joined_tokens
from arc_ref.errors import CapacityExceeded, ConfigError, InvalidEvent
from arc_ref.machine import (
    ArcState, Observe, ToolResult, ToolTurn, UserMessage, init, observe, tool_result, tool_turn, user_message, view,
)
from arc_ref.message import ToolCall
from arc_ref.tokenizers import get_tokenizer
from arc_ref.view import verify_tokens, within_budget
from proofs_check.harness import apply, event_lists, exact_view, resolve_stored, recent_allowance
from proofs_check.registry import proves
from proofs_check.shared_data import QWEN3_ABSENT, QWEN3_NAME, qwen3_dir, shared_data_dir
from proofs_check.strategies import ENVIRONMENT_TOOLS, configs, texts, tool_steps, unicode_texts


@given(configs(), event_lists())
@proves("L2", "T1", "A4")
def test_lemma2_every_view_is_within_k_and_l(config: Config, events: list[object]) -> None:
    """Lemma 2 / claim 1: tokens(transcript'_i) <= K <= L before every call, whatever the history."""
    state = init(config)
    setup = state.setup
    for event in [*events, None]:
        shown, exact = exact_view(state)
        assert exact == shown.tokens  # the parts add up to the text actually sent
        assert exact <= setup.budget <= setup.limit
        parts = shown.components
        assert parts.summary <= config.summary_budget
        assert parts.recent <= recent_allowance(config, parts)
        assert parts.catalog <= config.page_budget
        assert parts.recall <= config.recall_budget
        assert 0 <= parts.overhead <= config.overhead
        assert parts.prefix == setup.prefix_tokens
        if event is not None:
            state = apply(state, event)  # type: ignore[arg-type]


@given(configs())
@proves("D2", "A4", "T1")
def test_d2_budget_arithmetic(config: Config) -> None:
    """D2: L = L_ctx - G_max; A4: K = B + M + R + P + Q + eta; claim 1: K + G_max <= L_ctx."""
    setup = make_setup(config)
    assert setup.limit == config.context_limit - config.max_completion
    assert setup.budget == (
        setup.prefix_tokens + config.summary_budget + config.recent_budget + config.page_budget
        + config.recall_budget + config.overhead
    )
    assert setup.budget + config.max_completion <= config.context_limit


@given(configs(), st.integers(1, 5000))
@proves("A4")
def test_a4_configuration_over_l_is_refused_naming_budgets(config: Config, excess: int) -> None:
    """A configuration with K > L is a ConfigError that names K, L and the budgets."""
    setup = make_setup(config)
    too_small = config.replace(context_limit=setup.budget + config.max_completion - 1 - excess % 10)
    with pytest.raises(ConfigError) as refused:
        make_setup(too_small)
    message = str(refused.value)
    assert "K = B + M + R + P + Q + eta" in message and "exceeds L" in message


@given(configs(), st.integers(2, 8))
@proves("A4")
def test_a4_observation_too_big_for_h_is_stored_first_and_shown_as_stub(config: Config, factor: int) -> None:
    """A4: an observation larger than R is stored verbatim and represented in H by its bounded stub."""
    state = init(config)
    content = "x中😀 " * (factor * config.recent_budget)
    state, result = observe(state, Observe("cat big.txt", content, 0))
    record = state.records[-1]
    assert record.content == content  # stored first, verbatim
    assert not result.verbatim
    last = state.live[-1].message.content
    assert record.stub in last and content not in last
    shown, exact = exact_view(state)
    assert exact <= state.setup.budget


@given(st.sampled_from(("bytes", "o200k_base", "cl100k_base")), st.sampled_from((CHATML, QWEN3_NOTHINK)),
       st.lists(st.tuples(st.sampled_from(("system", "user", "assistant")), unicode_texts(60)), min_size=1, max_size=4))
@proves("A4", "L2")
def test_a4_message_counts_add_up_at_message_boundaries(tokenizer_name: str, chat: object, messages: list[tuple[str, str]]) -> None:
    """The view's total is the sum of per-message counts: no tokenizer adapter merges across a message boundary."""
    tokenizer = get_tokenizer(tokenizer_name)
    fmt = chat  # ChatFormat
    rendered = [fmt.render_message(role, content) for role, content in messages]  # type: ignore[attr-defined]
    whole = "".join(rendered) + fmt.generation_prompt  # type: ignore[attr-defined]
    assert tokenizer.count(whole) == sum(tokenizer.count(part) for part in rendered) + tokenizer.count(
        fmt.generation_prompt  # type: ignore[attr-defined]
    )


@given(st.lists(st.integers(0, 10**6), min_size=6, max_size=6), st.lists(st.integers(0, 10**6), min_size=6, max_size=6))
@proves("L2")
def test_lemma2_componentwise_budgets_bound_the_sum(costs: list[int], budgets: list[int]) -> None:
    """Lemma 2's arithmetic: component-wise cost <= budget implies total cost <= K."""
    if within_budget(tuple(costs), tuple(budgets)):
        assert sum(costs) <= sum(budgets)
    else:
        assert any(cost > budget for cost, budget in zip(costs, budgets))


@given(texts(80))
@proves("A4")
def test_a4_prefix_tokens_b_is_tokens_of_f(goal: str) -> None:
    """B is the token count of F = [system, goal] as serialized."""
    config = preset("minimal", goal=goal, context_limit=4000)
    setup = make_setup(config)
    assert isinstance(setup.chat, ChatFormat)
    rendered = "".join(setup.chat.render_message(role, text) for role, text in setup.prefix_messages)
    assert setup.prefix_tokens == setup.tokenizer.count(rendered)


# --- the view's count is the sum of its parts, for every tokenizer and chat format (issue 12) ------

# Characters that make a tokenizer merge across a junction, or not: line ends and other white space
# (U+001C is space to Python only, U+00A0 and U+2028 to both), letters of both cases and other
# scripts, a combining mark, ASCII and other numbers, the apostrophe of "'s", "/" (o200k_base takes it
# into a newline run), brackets, the section sign and the "<" that opens "<|im_end|>".
EDGE_CHARS = "aZé中\u0301\u02b009²Ⅷ٣'/<>[]§.:-_| \t\n\r\x0b\x1c\u00a0\u2028😀\u0958\ufb1f"
CONTEXTS = ("", "x", "ab'", "12", " ", ".", "]", "\n", "a \n", "word\r\n", "<|im_end|>\n", "§0001-7")
CHAT_FORMATS = (CHATML, QWEN3_NOTHINK)


def _trained_tokenizer_json(directory: Path) -> Path:
    """A small byte-level BPE tokenizer.json trained here (no download): the hf:PATH adapter's stand-in."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = RustTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["cat notes.txt Observation turn thought action " * 20, "héllo 中文 😀 § " * 10],
                                  trainer)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def _tokenizer_names() -> list[str]:
    """Every tokenizer the core supports: bytes, both tiktoken encodings, a tokenizer.json (one trained
    here, and Qwen3's own when ../shared/data is beside the repository)."""
    names = ["bytes", "o200k_base", "cl100k_base"]
    try:
        names.append(f"hf:{_trained_tokenizer_json(Path(_SCRATCH.name))}")
    except ImportError:  # the optional 'tokenizers' package (arc-ref[hf]) is not installed
        return names
    if QWEN3_TOKENIZER.is_file():
        names.append(f"hf:{QWEN3_TOKENIZER}")
    return names


QWEN3_TOKENIZER = shared_data_dir() / QWEN3_NAME / "tokenizer.json"  # ARC_SHARED_DATA honoured, as elsewhere
_SCRATCH = tempfile.TemporaryDirectory(prefix="arc-tokenizer-")  # removed when the interpreter exits
TOKENIZER_NAMES = _tokenizer_names()


def edge_texts(max_size: int = 40) -> st.SearchStrategy[str]:
    """Observation-like text opening and closing with characters that test the boundary rules."""
    edges = st.text(alphabet=EDGE_CHARS, max_size=3)
    return st.builds(lambda first, middle, last: first + middle + last, edges, texts(max_size), edges)


# The tokenizers whose boundary rule vouches for some junction: bytes, the tiktoken encodings, and Qwen3's file
# (Qwen2's shape: after a line end); the tokenizer trained here has an arbitrary shape and never vouches.
VOUCHING_NAMES = TOKENIZER_NAMES[:3] + [name for name in TOKENIZER_NAMES if name == f"hf:{QWEN3_TOKENIZER}"]


@given(st.sampled_from(VOUCHING_NAMES), st.sampled_from(CONTEXTS), st.sampled_from(CONTEXTS))
@proves("A4", "L2")
def test_a4_boundary_rule_holds_for_every_pair_of_edge_characters(name: str, head: str, tail: str) -> None:
    """`splits_between(a, b)` promises tokens(X + Y) = tokens(X) + tokens(Y) for every X ending in a
    and every Y starting with b: checked for every pair of edge characters inside the drawn contexts."""
    tokenizer = get_tokenizer(name)
    vouched = 0
    for before in EDGE_CHARS:
        left = head + before
        left_tokens = tokenizer.encode(left)
        for after in EDGE_CHARS:
            if tokenizer.splits_between(before, after):
                vouched += 1
                right = after + tail
                assert tokenizer.encode(left + right) == left_tokens + tokenizer.encode(right), (left, right)
    assert vouched > 0  # the rule vouches for some junctions: the check is not vacuous


@pytest.mark.parametrize("name", VOUCHING_NAMES)
@proves("A4", "L2")
def test_a4_boundary_rule_holds_inside_control_tokens(name: str) -> None:
    """A junction inside the text of one of the tokenizer's control tokens (an added token such as "<think>" or
    "<|im_end|>", a special token of tiktoken) that the rule vouches for adds up, whatever surrounds it: a
    tokenizer that matches such a token in the text would otherwise see it only in the whole."""
    tokenizer = get_tokenizer(name)
    controls = [text for text in getattr(tokenizer, "control_tokens", tuple)() if len(text) > 1]
    for token in controls:
        for cut in range(1, len(token)):
            if tokenizer.splits_between(token[cut - 1], token[cut]):
                for left, right in (("", ""), ("x ", " y"), ("\n", "\n")):
                    whole = left + token + right
                    assert tokenizer.count(whole) == tokenizer.count(left + token[:cut]) + tokenizer.count(
                        token[cut:] + right), (token, cut)


# Every character NFC changes (1,120 up to U+2FFFF under Python's tables; 88 end in a mark once normalized: the 59
# letters NFC decomposes, U+0958 DEVANAGARI LETTER QA and U+FB1F HEBREW LIGATURE YIDDISH YOD YOD PATAH among them)
NFC_CHANGED = tuple(chr(point) for point in range(0x80, 0x30000) if not 0xD800 <= point <= 0xDFFF
                    and unicodedata.normalize("NFC", chr(point)) != chr(point))
NFC_NEIGHBOURS = "-._ a7\n'"


@pytest.mark.skipif(not QWEN3_TOKENIZER.is_file(), reason=QWEN3_ABSENT)
@proves("A4", "L2")
def test_a4_boundary_rule_holds_beside_every_character_nfc_changes() -> None:
    """Qwen3's file normalizes with NFC before it splits: beside a character NFC changes (U+0958 becomes U+0915
    U+093C, and the pattern reads the mark with the punctuation after it), a vouched junction must still add up,
    with that character before the junction and after it."""
    tokenizer = get_tokenizer(f"hf:{QWEN3_TOKENIZER}")
    for changed in NFC_CHANGED:
        for neighbour in NFC_NEIGHBOURS:
            for left, right in ((changed, neighbour), (neighbour, changed)):
                if tokenizer.splits_between(left, right):
                    whole_left, whole_right = "xx" + left, right + "yy"
                    assert tokenizer.encode(whole_left + whole_right) == (
                        tokenizer.encode(whole_left) + tokenizer.encode(whole_right)), (hex(ord(changed)), left, right)


@given(st.sampled_from(TOKENIZER_NAMES), edge_texts(60), edge_texts(60))
@proves("A4", "L2")
def test_a4_boundary_rule_holds_on_adversarial_texts(name: str, left: str, right: str) -> None:
    """The boundary rule on random texts whose ends are drawn from the edge characters."""
    tokenizer = get_tokenizer(name)
    if left and right and tokenizer.splits_between(left[-1], right[0]):
        assert tokenizer.encode(left + right) == tokenizer.encode(left) + tokenizer.encode(right)


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
@given(data=st.data())
@proves("A4", "L2", "T1")
def test_l2_view_tokens_are_the_count_of_the_serialized_text(name: str, data: st.DataObject) -> None:
    """Lemma 2 without the recount: on random traces, for every tokenizer and chat format, the count a
    view reports (summed from its parts: records' n_j, summary lines, recall bodies, message frames)
    equals the count of the text actually sent, message by message and in total."""
    chat = data.draw(st.sampled_from(CHAT_FORMATS))
    config = data.draw(configs(fixed={"tokenizer": name, "chat_format": chat.name}))
    events = data.draw(event_lists(contents=edge_texts(120), reasoning=edge_texts(30)))
    state = init(config)
    setup = state.setup
    for event in [*events, None]:
        shown = view(state)
        for message in shown.messages:
            assert message.tokens == setup.message_tokens(message.role, message.content), message
        assert shown.tokens == setup.tokenizer.count(shown.text())
        assert verify_tokens(setup, shown) == shown.tokens
        if event is not None:
            state = apply(state, event)


@given(st.sampled_from(TOKENIZER_NAMES), st.lists(st.tuples(edge_texts(80), st.booleans()), max_size=6))
@proves("A4", "L2")
def test_a4_joined_count_is_the_count_of_the_concatenation(name: str, drawn: list[tuple[str, bool]]) -> None:
    """`joined_tokens` (known counts reused, unvouched edges split off and counted with their
    neighbours) gives exactly the count of the concatenated text."""
    tokenizer = get_tokenizer(name)
    parts = [(text, tokenizer.count(text) if known else None) for text, known in drawn]
    assert joined_tokens(tokenizer, parts) == tokenizer.count("".join(text for text, _ in drawn))


# --- the same under a served model's chat template (chat format "template", issue 8) -----------------

QWEN3_DIR = qwen3_dir()


def _check_summed_count(state: ArcState) -> None:
    """The view's count (each message's count at its place, summed, plus the generation prompt) equals the
    count of its serialized text, and the components add up to it."""
    shown = view(state)
    serialized = state.setup.tokenizer.count(shown.text())
    assert shown.tokens == serialized
    assert sum(shown.components.as_dict().values()) == serialized
    assert verify_tokens(state.setup, shown) == serialized


@pytest.mark.skipif(QWEN3_DIR is None, reason=QWEN3_ABSENT)
@given(data=st.data())
@proves("A4", "L2", "T1")
def test_l2_template_view_tokens_are_the_count_of_the_serialized_text(data: st.DataObject) -> None:
    """Lemma 2 under Qwen3's served template, text mode: on random traces whose observations and thoughts
    open and close with boundary-testing characters, the summed count is the serialized count."""
    config = data.draw(configs(fixed={"tokenizer": f"hf-dir:{QWEN3_DIR}", "chat_format": "template",
                                      "action_mode": "text"}))
    events = data.draw(event_lists(contents=edge_texts(120), reasoning=edge_texts(30)))
    state = init(config)
    for event in [*events, None]:
        _check_summed_count(state)
        if event is not None:
            state = apply(state, event)


@pytest.mark.skipif(QWEN3_DIR is None, reason=QWEN3_ABSENT)
@given(data=st.data())
@proves("A4", "L2", "T1")
def test_l2_tool_mode_view_tokens_are_the_count_of_the_serialized_text(data: st.DataObject) -> None:
    """Lemma 2 under Qwen3's served template, tool-calling mode: tool listing, assistant tool calls, results
    with boundary-testing edges, views while a call is pending; the summed count is the serialized count."""
    config = data.draw(configs(fixed={"tokenizer": f"hf-dir:{QWEN3_DIR}", "chat_format": "template",
                                      "action_mode": "tools", "tools": ENVIRONMENT_TOOLS}))
    steps = data.draw(tool_steps(contents=edge_texts(40), reasoning=edge_texts(30)))
    state = init(config)
    _check_summed_count(state)
    number = 0
    for thought, calls, results, view_while_pending, user in steps:
        made = []
        for name, arguments in calls:
            number += 1
            made.append(ToolCall(f"call_{number}", name, resolve_stored(state, arguments)))
        try:
            state, turn = tool_turn(state, ToolTurn(thought, tuple(made)))
        except InvalidEvent:
            continue  # a turn too big for R is refused whole (test_templates checks the message)
        _check_summed_count(state)
        for call, result in zip(turn.environment_calls, results):
            if view_while_pending:
                _check_summed_count(state)
            try:
                state, _ = tool_result(state, ToolResult(call.call_id, result))
            except CapacityExceeded:
                return
        _check_summed_count(state)
        if user is not None:  # a user message after the goal (stored; verbatim or its stub)
            try:
                state, _ = user_message(state, UserMessage(user))
            except CapacityExceeded:
                return
            _check_summed_count(state)
