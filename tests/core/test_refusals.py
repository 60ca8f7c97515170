"""The core's refusals, word for word: every error names the budget, field or line it is about.

These are the paths the theorem's properties never reach because valid configurations and events
avoid them (an over-budget component, a malformed field, an internal violation). Found by mutation
testing: a message that can be blanked or a comparison that can be loosened without any test failing
is a refusal nobody has checked.
"""

from __future__ import annotations

import json
from typing import Callable

import attrs
import pytest

from arc_ref import render, trace
from arc_ref.catalog import render_page
from arc_ref.chat import get_chat_format
from arc_ref.config import (
    INTEGER_FIELDS,
    OVERRIDE_KEYS,
    STRING_FIELDS,
    Config,
    make_setup,
    minimum_budgets,
    preset,
)
from arc_ref.ids import normalize_token
from arc_ref.errors import BudgetViolation, ConfigError, InvalidEvent
from arc_ref.machine import AgentTurn, ArcState, Observe, RequestView, agent_turn, init, observe, step, view
from arc_ref.message import Message
from arc_ref.store import make_record
from arc_ref.view import build_view, verify_tokens

PRESETS = ("minimal", "paper")
TOKENIZERS = ("bytes", "o200k_base")


# --- configuration ------------------------------------------------------------------------------


def test_unknown_preset_and_keys_list_what_is_known() -> None:
    with pytest.raises(ConfigError) as unknown_preset:
        preset("huge")
    assert str(unknown_preset.value) == "unknown preset 'huge'; known: minimal, paper"
    with pytest.raises(ConfigError) as unknown_keys:
        preset("minimal", colour=1, budget=2)
    assert str(unknown_keys.value) == (
        f"unknown config keys ['budget', 'colour']; known: {', '.join(OVERRIDE_KEYS)}"
    )
    with pytest.raises(ConfigError) as not_string:
        preset("minimal", tokenizer=3)
    assert str(not_string.value) == "config key 'tokenizer' must be a string, got 3"
    with pytest.raises(ConfigError) as not_integer:
        preset("minimal", page_size=True)
    assert str(not_integer.value) == "config key 'page_size' must be an integer, got True"


def test_unknown_chat_format_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as refused:
        get_chat_format("llama")
    assert str(refused.value) == "unknown chat format 'llama'; known: chatml, qwen3-nothink"


AT_LEAST_ONE = (
    "context_limit", "max_completion", "summary_budget", "recent_budget", "page_budget",
    "page_size", "stub_cap", "recall_budget", "chunk_tokens", "recalls_per_step",
)
NON_NEGATIVE = (
    "overhead", "keep_verbatim_chars", "preview_head_chars", "preview_tail_chars",
    "signature_chars", "thought_chars", "action_chars",
)


@pytest.mark.parametrize("name", AT_LEAST_ONE)
def test_field_below_one_is_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_setup(preset("minimal").replace(**{name: 0}))
    assert str(refused.value) == f"{name} must be >= 1, got 0"


@pytest.mark.parametrize("name", NON_NEGATIVE)
def test_negative_field_is_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_setup(preset("minimal").replace(**{name: -1}))
    assert str(refused.value) == f"{name} must be >= 0, got -1"


@pytest.mark.parametrize("name", STRING_FIELDS)
def test_non_string_field_is_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_setup(preset("minimal").replace(**{name: 7}))
    assert str(refused.value) == f"{name} must be a string, got 7"


@pytest.mark.parametrize("value", [True, 2.0, "3", None])
def test_non_integer_field_is_refused(value: object) -> None:
    for name in INTEGER_FIELDS:
        with pytest.raises(ConfigError) as refused:
            make_setup(preset("minimal").replace(**{name: value}))
        assert str(refused.value) == f"{name} must be an integer, got {value!r}"


def _at_minimum(name: str, tokenizer: str) -> Config:
    """A preset whose c, P, Q, M, R and eta sit exactly on `minimum_budgets`, with L far above K."""
    base = preset(name, tokenizer=tokenizer, stub_cap=1)
    floors = minimum_budgets(base)
    budgets = {key: floors[key] for key in ("stub_cap", "page_budget", "recall_budget", "summary_budget",
                                           "recent_budget", "overhead")}
    staged = base.replace(**budgets)
    floors = minimum_budgets(staged)  # the page, summary and recent floors depend on c
    budgets.update({key: floors[key] for key in ("page_budget", "summary_budget", "recent_budget")})
    return base.replace(context_limit=10**7, max_completion=10, **budgets)


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
@pytest.mark.parametrize("name", PRESETS)
def test_minimum_budgets_are_tight_and_one_less_is_refused_by_name(name: str, tokenizer: str) -> None:
    """make_setup accepts every floor of `minimum_budgets` and refuses each one lowered by one token."""
    config = _at_minimum(name, tokenizer)
    setup = make_setup(config)
    c, p, q = config.stub_cap, config.page_size, config.chunk_tokens
    assert c == setup.stub_floor
    assert config.page_budget == setup.page_frame + p * c
    assert config.recall_budget == setup.recall_frame + q + setup.wrapper_cost
    assert config.summary_budget == setup.summary_frame + c
    assert config.overhead == setup.generation_tokens
    recent = config.recent_budget
    expected = {
        "stub_cap": f"stub_cap c = {c - 1} < {c}, the smallest stub (id, widest metadata, empty previews)",
        "page_budget": (
            f"page_budget P = {config.page_budget - 1} < page frame {setup.page_frame} + page_size p {p}"
            f" x stub_cap c {c} = {config.page_budget} (A3: p*c <= P)"
        ),
        "recall_budget": (
            f"recall_budget Q = {config.recall_budget - 1} < buffer frame {setup.recall_frame} + chunk_tokens q"
            f" {q} + wrapper rho {setup.wrapper_cost} = {config.recall_budget} (A5: q + rho <= Q)"
        ),
        "summary_budget": (
            f"summary_budget M = {config.summary_budget - 1} < summary frame {setup.summary_frame} + stub_cap c"
            f" {c} = {config.summary_budget}"
        ),
        "recent_budget": (
            f"recent_budget R = {recent - 1} < {recent}, the largest of: a too-large observation shown as its"
            f" stub ({setup.observation_stub_frame} + c {c}), the smallest agent message ({setup.agent_floor}),"
            f" the smallest command result ({setup.command_floor})"
        ),
        "overhead": (
            f"overhead eta = {config.overhead - 1} < {config.overhead} tokens of the generation prompt"
            f" {setup.chat.generation_prompt!r}"
        ),
    }
    for key, problem in expected.items():
        lowered = config.replace(**{key: getattr(config, key) - 1})
        with pytest.raises(ConfigError) as refused:
            make_setup(lowered)
        problems = str(refused.value).split("\n  - ")
        assert problems[0] == "invalid ARC configuration:"
        assert problems[1:] == [problem]  # only the lowered budget is named


@pytest.mark.parametrize("name", PRESETS)
def test_recent_floor_is_the_too_large_observation_stub(name: str) -> None:
    """R's floor is the largest of three messages; with the shipped formats it is the stub message."""
    setup = make_setup(preset(name))
    floors = minimum_budgets(preset(name))
    stub_message = setup.observation_stub_frame + max(setup.config.stub_cap, setup.stub_floor)
    assert floors["recent_budget"] == stub_message
    assert stub_message > max(setup.agent_floor, setup.command_floor)


def test_no_room_for_a_prompt_and_k_over_l_are_both_named() -> None:
    config = preset("minimal")
    with pytest.raises(ConfigError) as refused:
        make_setup(config.replace(context_limit=64, max_completion=64))
    problems = str(refused.value).split("\n  - ")[1:]
    assert problems[0] == "L = L_ctx - G_max = context_limit 64 - max_completion 64 = 0 leaves no room for a prompt"
    assert problems[1].startswith("K = B + M + R + P + Q + eta = ")
    assert problems[1].endswith(
        "exceeds L = L_ctx - G_max = 64 - 64 = 0 (A4: K <= L); lower summary_budget, recent_budget,"
        " page_budget, recall_budget or overhead, shorten system/goal, or raise context_limit"
    )
    with pytest.raises(ConfigError) as one_left:
        make_setup(config.replace(context_limit=65, max_completion=64))
    assert "leaves no room" not in str(one_left.value)


def test_k_equal_to_l_is_accepted() -> None:
    setup = make_setup(preset("minimal"))
    config = setup.config.replace(context_limit=setup.budget + setup.config.max_completion)
    assert make_setup(config).budget == make_setup(config).limit
    with pytest.raises(ConfigError):
        make_setup(config.replace(context_limit=config.context_limit - 1))


# --- the view: Lemma 2's checks raise, never overflow -------------------------------------------


def _message(tokens: int) -> Message:
    return Message(render.USER, "x", tokens)


@pytest.mark.parametrize(
    ("component", "name"),
    [("summary", "summary_budget M"), ("catalog", "page_budget P"), ("recall", "recall_budget Q")],
)
def test_build_view_names_the_component_over_budget(component: str, name: str) -> None:
    state = init(preset("minimal"))
    setup = state.setup
    allowed = {"summary": setup.config.summary_budget, "catalog": setup.config.page_budget,
               "recall": setup.config.recall_budget}[component]
    parts: dict[str, Message | None] = {"summary": None, "catalog": None, "recall": None}
    parts[component] = _message(allowed)
    build_view(setup, state.prefix, recent=(), **parts)  # exactly at the budget: accepted
    parts[component] = _message(allowed + 1)
    with pytest.raises(BudgetViolation) as refused:
        build_view(setup, state.prefix, recent=(), **parts)
    assert str(refused.value) == f"component over budget: {name}: {allowed + 1} > {allowed}"


def test_build_view_lists_every_component_over_budget() -> None:
    state = init(preset("minimal"))
    setup = state.setup
    config = setup.config
    prefix = (Message(render.SYSTEM, "s", setup.prefix_tokens + 1),)
    with pytest.raises(BudgetViolation) as refused:
        build_view(setup, prefix, _message(config.summary_budget + 2), None, _message(config.recall_budget + 3), ())
    assert str(refused.value) == (
        f"component over budget: prefix B: {setup.prefix_tokens + 1} > {setup.prefix_tokens};"
        f" summary_budget M: {config.summary_budget + 2} > {config.summary_budget};"
        f" recall_budget Q: {config.recall_budget + 3} > {config.recall_budget}"
    )
    wide_prompt = attrs.evolve(setup, generation_tokens=config.overhead + 1)
    with pytest.raises(BudgetViolation) as overhead:
        build_view(wide_prompt, state.prefix, None, None, None, ())
    assert str(overhead.value) == f"component over budget: overhead eta: {config.overhead + 1} > {config.overhead}"


def test_build_view_refuses_a_setup_whose_k_exceeds_l() -> None:
    state = init(preset("minimal"))
    broken = attrs.evolve(state.setup, limit=state.setup.budget - 1)
    total = state.setup.prefix_tokens + state.setup.generation_tokens
    with pytest.raises(BudgetViolation) as refused:
        build_view(broken, state.prefix, None, None, None, ())
    assert str(refused.value) == f"view of {total} tokens exceeds K = {broken.budget} (L = {broken.limit})"


def test_verify_tokens_accepts_exactly_k_and_refuses_one_more() -> None:
    state, _ = observe(init(preset("minimal")), Observe("ls", "a.txt b.txt", 0))
    shown = view(state)
    exact = verify_tokens(state.setup, shown)
    assert verify_tokens(state.setup, attrs.evolve(shown, budget=exact)) == exact
    with pytest.raises(BudgetViolation) as refused:
        verify_tokens(state.setup, attrs.evolve(shown, budget=exact - 1))
    assert str(refused.value) == f"serialized view counts {exact} tokens > K = {exact - 1}"


def test_verify_tokens_refuses_a_view_whose_parts_disagree_with_its_text() -> None:
    """The opt-in recount refuses a view whose reported sum of parts is not the count of its text."""
    state, _ = observe(init(preset("minimal")), Observe("ls", "a.txt b.txt", 0))
    shown = view(state)
    exact = verify_tokens(state.setup, shown)
    for reported in (exact - 1, exact + 1):
        with pytest.raises(BudgetViolation) as refused:
            verify_tokens(state.setup, attrs.evolve(shown, tokens=reported))
        assert str(refused.value) == (
            f"serialized view counts {exact} tokens but its parts sum to {reported};"
            " tokenizer 'bytes' merges across a boundary of the chat format 'chatml'"
        )


def test_chat_messages_are_openai_role_content_pairs() -> None:
    state, _ = observe(init(preset("minimal")), Observe("ls", "a.txt", 0))
    shown = view(state)
    assert shown.chat_messages() == [{"role": m.role, "content": m.content} for m in shown.messages]
    assert [m["role"] for m in shown.chat_messages()][:2] == ["system", "user"]


def test_catalog_page_over_p_raises_and_exactly_p_is_accepted() -> None:
    state, _ = observe(init(preset("minimal")), Observe("ls", "a.txt", 0))
    page = render_page(state.setup, state.records, 1)
    exact = attrs.evolve(state.setup, config=state.setup.config.replace(page_budget=page.tokens))
    assert render_page(exact, state.records, 1) == page
    tight = attrs.evolve(state.setup, config=state.setup.config.replace(page_budget=page.tokens - 1))
    with pytest.raises(BudgetViolation) as refused:
        render_page(tight, state.records, 1)
    assert str(refused.value) == f"catalog page 1 costs {page.tokens} tokens > page_budget P = {page.tokens - 1}"


# --- events ------------------------------------------------------------------------------------


def test_events_with_wrong_types_name_the_field() -> None:
    state = init(preset("minimal"))
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: observe(state, Observe(5, "x", 0)), "action must be a string, got int"),  # type: ignore[arg-type]
        (lambda: observe(state, Observe("ls", b"x", 0)), "observation must be a string, got bytes"),  # type: ignore[arg-type]
        (lambda: observe(state, Observe("ls", "x", True)), "returncode must be an integer or None, got True"),
        (lambda: observe(state, Observe("ls", "x", 1.0)), "returncode must be an integer or None, got 1.0"),  # type: ignore[arg-type]
        (lambda: agent_turn(state, AgentTurn(None, "ls")), "thought must be a string, got NoneType"),  # type: ignore[arg-type]
        (lambda: agent_turn(state, AgentTurn("t", ["ls"])), "action must be a string, got list"),  # type: ignore[arg-type]
        (lambda: observe(state, Observe("ls", "a\ud800", 0)),
         "observation is not valid Unicode text (lone surrogate at index 1)"),
        (lambda: step(state, "observe"), "unknown event 'observe'"),  # type: ignore[arg-type]
    ]
    for call, message in cases:
        with pytest.raises(InvalidEvent) as refused:
            call()
        assert str(refused.value) == message


def test_step_dispatches_every_event_kind() -> None:
    state = init(preset("minimal"))
    state, observed = step(state, Observe("ls", "a.txt", 0))
    assert observed.obs_id == state.records[0].obs_id  # type: ignore[union-attr]
    same, shown = step(state, RequestView())
    assert same is state and shown == view(state)


def test_record_keeps_its_creation_step_and_previews() -> None:
    state = init(preset("minimal"))
    state, _ = agent_turn(state, AgentTurn("look", "ls"))
    state, _ = agent_turn(state, AgentTurn("look again", "ls -a"))
    state, _ = observe(state, Observe("ls -a", "0123456789abcdefghij", 3))
    record = state.records[0]
    config = state.config
    assert record.step == 2
    assert record.head == "0123456789abcdefghij"[: config.preview_head_chars]
    assert record.tail == "0123456789abcdefghij"[-config.preview_tail_chars :]
    assert record.n_bytes == 20 and record.returncode == 3


def test_record_longer_than_the_widest_number_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    setup = make_setup(preset("minimal"))
    monkeypatch.setattr(render, "WIDEST_NUMBER", 8)  # the store reads it from render
    assert make_record(setup, 1, "ls", "12345678", 0, 0).n_chars == 8
    with pytest.raises(InvalidEvent) as refused:
        make_record(setup, 1, "ls", "123456789", 0, 0)
    assert str(refused.value) == "observation longer than 9,999,999,999 characters or tokens"


# --- id suggestions (A1: never a silent failure) ------------------------------------------------


def _stored(count: int, fingerprint_bits: int) -> tuple[ArcState, list[str]]:
    state = init(preset("minimal", capacity=999, fingerprint_bits=fingerprint_bits))
    ids = []
    for number in range(count):
        state, observed = observe(state, Observe("ls", f"observation {number}", 0))
        ids.append(observed.obs_id)
    return state, ids


def _levenshtein(left: str, right: str) -> int:
    """Test oracle: the textbook dynamic programme over the full table."""
    table = [[row + column if row == 0 or column == 0 else 0 for column in range(len(right) + 1)]
             for row in range(len(left) + 1)]
    for row in range(1, len(left) + 1):
        for column in range(1, len(right) + 1):
            table[row][column] = min(
                table[row - 1][column] + 1,
                table[row][column - 1] + 1,
                table[row - 1][column - 1] + (left[row - 1] != right[column - 1]),
            )
    return table[len(left)][len(right)]


def _single_edits(text: str, alphabet: str) -> set[str]:
    substituted = {text[:i] + c + text[i + 1:] for i in range(len(text)) for c in alphabet}
    deleted = {text[:i] + text[i + 1:] for i in range(len(text))}
    inserted = {text[:i] + c + text[i:] for i in range(len(text) + 1) for c in alphabet}
    return (substituted | deleted | inserted) - {text}


@pytest.mark.parametrize(("count", "fingerprint_bits"), [(30, 0), (12, 12)])
def test_every_single_typo_of_a_stored_id_gets_a_nearest_stored_id(count: int, fingerprint_bits: int) -> None:
    """A1: one substituted, deleted or inserted character (digit or separator) never goes unanswered,
    and the suggestion is as close to the typo as any stored id is."""
    state, ids = _stored(count, fingerprint_bits)
    bodies = [obs_id[1:] for obs_id in ids]
    for body in bodies:
        for typo in _single_edits(body, "0123456789-_"):
            suggestion = state.nearest(typo)
            assert suggestion is not None, (body, typo)
            read = normalize_token(typo)  # punctuation around an id is not part of it
            nearest = min(_levenshtein(read, other) for other in bodies)
            assert _levenshtein(read, suggestion[1:]) == nearest, (body, typo, suggestion)


def test_suggestion_examples() -> None:
    state, ids = _stored(30, fingerprint_bits=0)
    assert [obs_id[1:] for obs_id in ids[:2]] == ["0001", "0002"]  # width of 2**10 - 1
    assert state.nearest("0013") == ids[12]  # a substitution that lands on another stored id
    assert state.nearest("0012x") == ids[11]
    assert state.nearest("§0012.") == ids[11]  # punctuation around it
    assert state.nearest("00-12") == ids[11]  # a separator where an id without fingerprint has none
    assert state.nearest("9999") is None and state.nearest("abc") is None  # the note then names the range
    state, ids = _stored(12, fingerprint_bits=16)
    counter, _, fingerprint = ids[6][1:].partition("-")
    assert state.nearest(f"{counter}_{fingerprint}") == ids[6]  # mistyped separator
    assert state.nearest(f"{counter}{fingerprint}") == ids[6]  # separator left out
    assert state.nearest(f"0999-{fingerprint}") == ids[6]  # wrong counter, right fingerprint


def test_a_bare_counter_is_answered_with_the_id_of_that_counter() -> None:
    """Review h72 F8: with the paper's ids (5-digit counter, 32-bit fingerprint) `_recall §00002` was answered
    'did you mean §00001-...?': '00002' also aligns inside the first id's fingerprint, the distances tie, and the
    lower index won. The counter the token names wins a tie now (spec/rendering.md 6.2); a model that dropped the
    fingerprint is pointed at the observation it asked for, not the one before it."""
    state = init(preset("paper"))
    ids = []
    for number in range(3):
        state, observed = observe(state, Observe("ls", f"observation {number}", 0))
        ids.append(observed.obs_id)
    for index, obs_id in enumerate(ids):
        counter = obs_id.partition("-")[0]
        assert state.nearest(counter) == obs_id, (index, counter, state.nearest(counter))
        assert state.nearest(f"{counter}-0") == obs_id  # a wrong fingerprint too


# --- the trace replayer -------------------------------------------------------------------------


CONFIG = json.dumps({"op": "config", "preset": "minimal"})


def _errors(*lines: str | bytes) -> list[str]:
    return [out["message"] for out in trace.replay([CONFIG, *lines], verify=True) if out["op"] == "error"]


def test_trace_messages_cut_long_values_at_forty_characters() -> None:
    long_value = "v" * 100
    quoted = json.dumps(long_value)[:40]
    assert _errors(json.dumps({"op": long_value})) == [
        f"\"op\" must be one of {', '.join(trace.TEXT_MODE_OPS)}, got {quoted}"
    ]
    assert _errors(json.dumps({"op": "observe", "action": ["x" * 100], "observation": "o"})) == [
        f"'action' must be a string, got {json.dumps(['x' * 100])[:40]}"
    ]
    assert _errors(json.dumps({"op": "observe", "action": "ls", "observation": "o", "returncode": long_value})) == [
        f"'returncode' must be an integer, got {quoted}"
    ]


def test_trace_messages_list_several_keys_with_commas() -> None:
    assert _errors(json.dumps({"op": "observe"})) == ["missing key(s) action, observation for op 'observe'"]
    assert _errors(json.dumps({"op": "view", "b": 1, "a": 2})) == ["unknown key(s) a, b for op 'view'"]
    outputs = list(trace.replay([json.dumps({"op": "config", "preset": "minimal", "zz": 1, "aa": 2})], verify=True))
    assert outputs == [{
        "op": "error", "line": 1,
        "message": f"unknown config key(s) aa, zz; known: {', '.join(OVERRIDE_KEYS)}",
    }]


def test_bytes_lines_are_decoded_as_utf8_and_line_ends_stripped() -> None:
    observation = {"op": "observe", "action": "ls", "observation": "ü 😀 中"}
    as_text = list(trace.replay([CONFIG, json.dumps(observation, ensure_ascii=False)], verify=True))
    as_bytes = list(trace.replay([CONFIG.encode(), json.dumps(observation, ensure_ascii=False).encode("utf-8")], verify=True))
    assert as_bytes == as_text and as_text[1]["op"] == "observe"
    with_ends = list(trace.replay_text([CONFIG + "\r\n", json.dumps(observation).encode() + b"\r\n"], verify=True))
    assert with_ends == [trace.encode(out) for out in as_text]
    bad = b'{"op": "view", "x": "\xff"}'
    assert _errors(bad) == [f"not UTF-8 text (invalid byte at offset {bad.index(0xFF)})"]
    assert _errors('{"n": ' + "9" * 5000 + "}") == ["not valid JSON: an integer literal of more than 4300 digits"]


def test_output_lines_keep_non_ascii_characters() -> None:
    assert trace.encode({"b": "ü", "a": 1}) == '{"a":1,"b":"ü"}'


def test_an_internal_violation_becomes_an_error_line_and_the_replay_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real_apply = trace._apply
    calls = []

    def failing_once(state, obj, *rest):  # type: ignore[no-untyped-def]
        calls.append(obj["op"])
        if len(calls) == 1:
            raise BudgetViolation("H costs 9 > R = 8")
        return real_apply(state, obj, *rest)

    monkeypatch.setattr(trace, "_apply", failing_once)
    outputs = list(trace.replay([CONFIG, json.dumps({"op": "view"}), json.dumps({"op": "view"})], verify=True))
    assert outputs[1] == {"op": "error", "line": 2, "message": "internal budget violation: H costs 9 > R = 8"}
    assert outputs[2]["op"] == "view"


def test_unknown_id_notes_name_the_stored_range_or_an_empty_store() -> None:
    state = init(preset("minimal"))
    _, answered = agent_turn(state, AgentTurn("r", "_recall §9"))
    assert answered.response == "_recall §9: no stored observation has this id; nothing is stored yet"
    state, first = observe(state, Observe("ls", "a.txt", 0))
    state, last = observe(state, Observe("ls", "b.txt", 0))
    _, answered = agent_turn(state, AgentTurn("r", "_recall §zz"))
    assert answered.response is not None and answered.response.endswith(
        f"_recall §zz: no stored observation has this id; ids run from {first.obs_id} to {last.obs_id};"
        " catalog-first lists them"
    )


class _MergingAcrossMessages:
    """The bytes tokenizer, except that a message end followed by a message start costs one token less:
    a tokenizer that merges across the boundary between two messages (parameters.md, check 4)."""

    def __init__(self) -> None:
        from arc_ref.tokenizers import get_tokenizer
        self._bytes = get_tokenizer("bytes")

    def count(self, text: str) -> int:
        return int(self._bytes.count(text)) - text.count("<|im_end|>\n<|im_start|>")

    def __getattr__(self, name: str) -> object:
        return getattr(self._bytes, name)


def test_a_tokenizer_merging_across_the_two_prefix_messages_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check 4 of parameters.md: F's two messages counted apart must add up to B counted whole (it was stated
    but not made: such a tokenizer was accepted and the view's total was not the sum of its parts)."""
    monkeypatch.setattr("arc_ref.config.get_tokenizer", lambda name: _MergingAcrossMessages())
    with pytest.raises(ConfigError) as refused:
        make_setup(preset("minimal"))
    assert str(refused.value) == (
        "invalid ARC configuration:\n  - the task prefix F costs 72 tokens counted whole but 36 + 37 = 73 as its two"
        " messages: tokenizer 'bytes' merges across their boundary, so the view's total would not be the sum of"
        " its messages"
    )
