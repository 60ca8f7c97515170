"""A message's placed costs add up to the served count of the whole conversation (chat format ``template``).

`TemplateFormat.placed_costs` / `placed_cost_at` count a message's piece in every context from probe conversations,
with caches (per format, per message, the last long content, a tool message's costs kept for every call id) and a
content split counted once. Here each conversation's sum (head, system piece, goal in its context, every later
message's cost in its context, tail) is compared with the whole conversation rendered at once (`TemplateFormat.render`,
the template not split) and encoded by the tokenizer: under Qwen3's own template and under small templates made here
that read a tool message's keys in each way `_WatchedMessage` notes (review h55, a mutation sweep of templates.py).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arc_ref.errors import BudgetViolation
from arc_ref.message import ToolCall, ToolSpec, shared_context
from arc_ref.templates import (
    MEMO_TEXT_CHARS, ChatTemplate, TemplateFormat, TemplateRefused, load_template_source, possible_contexts,
    probe_plans,
)
from arc_ref.tokenizers import HuggingFaceTokenizer, get_tokenizer
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, qwen3_with_template
from tests.core.test_tokenizers import _train_tokenizer_json

QWEN3 = qwen3_dir()
pytestmark = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
SYSTEM, GOAL = "You are an agent.", "Fix the bug."
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BASH = ToolSpec("bash", "Run a shell command.", '{"type": "object", "properties": {"command": {"type": "string"}}}')


def qwen3_format(directory: str, action_mode: str, tools: Sequence[ToolSpec] = (),
                 system: str = SYSTEM) -> TemplateFormat:
    tokenizer = get_tokenizer(f"hf-dir:{directory}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    return TemplateFormat(tokenizer, load_template_source(directory), {"enable_thinking": False}, tuple(tools),
                          system, GOAL, action_mode)


def message(role: str, content: str, calls: tuple[ToolCall, ...] = (), call_id: str | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, "calls": calls, "call_id": call_id}


def engine_count(chat: TemplateFormat, messages: Sequence[dict[str, Any]], one_place: bool = False) -> int:
    """The conversation [system, goal, *messages] counted from placed costs (``one_place``: `placed_cost_at`)."""
    roles = ["system", "user", *(m["role"] for m in messages)]
    total = chat.head_tokens + chat.system_piece_tokens + chat.tail_tokens
    goal_after = roles[2] if len(roles) > 2 else None
    total += dict(chat.goal_costs)[shared_context("system", goal_after, "user" in roles[2:])]
    for position, m in enumerate(messages, start=2):
        after = roles[position + 1] if position + 1 < len(roles) else None
        context = shared_context(roles[position - 1], after, "user" in roles[position + 1:])
        assert context in possible_contexts(m["role"], chat.action_mode)
        if one_place:
            total += chat.placed_cost_at(context, m["role"], m["content"], m["calls"], m["call_id"], m.get("parts"))
        else:
            total += dict(chat.placed_costs(m["role"], m["content"], m["calls"], m["call_id"], m.get("parts")))[context]
    return total


def served_count(chat: TemplateFormat, messages: Sequence[dict[str, Any]], system: str = SYSTEM) -> int:
    """The whole conversation rendered at once and encoded: what the server counts."""
    openai = [{"role": "system", "content": system}, {"role": "user", "content": GOAL}]
    for m in messages:
        shown: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m["calls"]:
            shown["tool_calls"] = [call.openai() for call in m["calls"]]
        if m["call_id"] is not None:
            shown["tool_call_id"] = m["call_id"]
        openai.append(shown)
    return chat.tokenizer.count(chat.render(openai))


def assert_adds_up(chat: TemplateFormat, messages: Sequence[dict[str, Any]], system: str = SYSTEM) -> None:
    served = served_count(chat, messages, system)
    assert engine_count(chat, messages) == served
    assert engine_count(chat, messages, one_place=True) == served


# --- a tool message's costs kept for every call id only when the template never read it ----------------------

READS = {  # ways a template reads a tool message's call id (or the whole message): each is noted by _WatchedMessage
    "attribute": "{{ message.tool_call_id }}",
    "item": "{{ message['tool_call_id'] }}",
    "get": "{{ message.get('tool_call_id') }}",
    "tojson": "{{ message | tojson }}",
    "items": "{% for key, value in message.items() %}{{ value }}{% endfor %}",
    "values": "{{ message.values() | join(',') }}",
    "dictsort": "{% for key, value in message | dictsort %}{{ value }}{% endfor %}",
    "string": "{{ message | string }}",
    "iterated": "{% for key in message %}{{ key }}={{ message[key] }} {% endfor %}",
}


def tool_reading_template(read: str) -> str:
    return (
        "{% for message in messages %}<|im_start|>{{ message.role }}\n"
        "{% if message.role == 'tool' %}" + read + "\n{% endif %}{{ message.content }}"
        "{% for call in message.tool_calls or [] %}<tool_call>{{ call.id }} {{ call.function.arguments | tojson }}"
        "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


@pytest.mark.parametrize("read", sorted(READS))
def test_a_tool_result_costs_what_the_server_counts_for_each_call_id_the_template_reads(read: str) -> None:
    """A template that writes a tool message's call id: the same result under a short and a long id costs what the
    whole rendering counts for each (its costs are not kept for every call id; with Qwen3's template they are)."""
    directory = qwen3_with_template(tool_reading_template(READS[read]), f"h55-read-{read}-")
    chat = qwen3_format(directory, "tools", (BASH,))
    for call_id in ("c", "call_with_a_much_longer_id_0001", "c"):
        call = ToolCall(call_id, "bash", '{"command": "ls"}')
        assert_adds_up(chat, [message("assistant", "Look.", (call,)),
                              message("tool", "a.py b.py", call_id=call_id)])


# --- a content over MEMO_TEXT_CHARS: its costs kept only for the last such message, under its whole key ---------

LONG = ("line of output é 中 " * 400)[: MEMO_TEXT_CHARS + 500]


def test_a_long_content_in_another_role_or_with_other_calls_costs_what_the_server_counts() -> None:
    """The last long message's costs are kept apart from the LRU (`TemplateFormat._cached`): the same long text as a
    user message then as an agent turn (Qwen3 gives the last one its empty think block), or as two agent turns
    with other calls, is counted as the whole rendering counts each."""
    assert QWEN3 is not None and len(LONG) > MEMO_TEXT_CHARS
    text_mode = qwen3_format(str(QWEN3), "text")
    assert_adds_up(text_mode, [message("user", LONG)])
    assert_adds_up(text_mode, [message("user", "go on"), message("assistant", LONG)])
    tool_mode = qwen3_format(str(QWEN3), "tools", (BASH,))
    short = ToolCall("c1", "bash", '{"command": "ls"}')
    longer = ToolCall("c1", "bash", '{"command": "cat a_file_with_a_long_name.py | head -n 40"}')
    for calls in ((short,), (longer,), (short, longer), ()):
        answers = [message("tool", "ok", call_id=call.call_id) for call in calls]
        assert_adds_up(tool_mode, [message("assistant", LONG, calls), *answers])
    assert_adds_up(tool_mode, [message("assistant", "run", (short,)), message("tool", LONG, call_id="c1")])
    assert_adds_up(tool_mode, [message("user", LONG)])


# --- every cut between two pieces is checked, an empty piece between them too ------------------------------------

# The user's turn is closed only when no agent turn follows; an agent turn writes nothing; the generation prompt is
# plain text: a user message followed by an agent turn meets the prompt without an added token between them.
EMPTY_AGENT_TURN = (
    "{% for message in messages %}{% if message.role != 'assistant' %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}{% if loop.last or messages[loop.index0 + 1].role != 'assistant' %}<|im_end|>{% endif %}"
    "{% endif %}{% endfor %}Answer:"
)


def test_a_cut_across_an_empty_piece_that_meets_without_an_added_token_is_refused() -> None:
    """`TemplateFormat._check_pieces` skips empty pieces and checks the cut between the pieces on either side: here
    "...x" + "" + "Answer:", which tokenizes across the cut, so the format is refused (its counts would not add up)."""
    directory = qwen3_with_template(EMPTY_AGENT_TURN, "h55-empty-piece-")
    with pytest.raises(TemplateRefused, match="meet without an added token"):
        qwen3_format(directory, "text")


# --- random conversations under Qwen3's template: long contents split, known parts, every cache ----------------

ATOMS = ("a", "word", " ", "  ", "\n", "\n\n", "\r\n", "\t", "1", "2024", ".", ",", "<", "|", ">", "/", "_", "'s",
         "é", "\u0301", "中文", "😀", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
         "</tool_response>", "{\"k\": 1}", "def f():", "    return",
         "\n" * 300, " " * 300, "a" * 300,  # runs longer than the split's window, with no junction vouched inside
         "\n" * 100, "b" * 100)  # and shorter ones: the last vouched junction far from the content's end


@st.composite
def contents(draw: st.DrawFn) -> tuple[str, tuple[tuple[str, int | None], ...] | None]:
    """A content (short, past the split's 2 * EDGE_WINDOW, or past MEMO_TEXT_CHARS) and, sometimes, the parts it is
    made of with their counts known (a stored observation's n_j) or not."""
    atoms = st.lists(st.sampled_from(ATOMS), max_size=8).map("".join)
    block = draw(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=6).map("".join))
    content = draw(atoms) + block * draw(st.sampled_from((0, 1, 12, 60, 700))) + draw(atoms)
    if not content or not draw(st.booleans()):
        return content, None
    size = len(content)
    near_an_edge = st.one_of(st.integers(0, min(size, 300)), st.integers(max(0, size - 300), size))
    cuts = sorted(draw(st.lists(st.one_of(st.integers(0, len(content)), near_an_edge), max_size=3)))
    bounds = [0, *cuts, len(content)]
    texts = [content[a:b] for a, b in zip(bounds, bounds[1:])]
    assert QWEN3 is not None
    tokenizer = get_tokenizer(f"hf-dir:{QWEN3}")
    known = draw(st.lists(st.booleans(), min_size=len(texts), max_size=len(texts)))
    return content, tuple((text, tokenizer.count(text) if k else None) for text, k in zip(texts, known))


@st.composite
def conversations(draw: st.DrawFn, action_mode: str) -> list[dict[str, Any]]:
    """Messages after [system, goal] in the shapes a view gives (tool mode: a turn's calls answered in order)."""
    messages: list[dict[str, Any]] = []
    for unit in range(draw(st.integers(0, 4))):
        role = draw(st.sampled_from(("user", "assistant")))
        content, parts = draw(contents())
        if action_mode == "text" or role == "user":
            messages.append({**message(role, content), "parts": parts})
            continue
        calls = tuple(ToolCall(f"call_{unit}_{k}", "bash", draw(st.sampled_from(
            ('{"command": "ls"}', '{"command": "cat é.py", "n": [1, null]}', "not json", "[]"))))
            for k in range(draw(st.integers(0, 2))))
        messages.append({**message("assistant", content, calls), "parts": parts})
        for call in calls:
            result, result_parts = draw(contents())
            messages.append({**message("tool", result, call_id=call.call_id), "parts": result_parts})
    return messages


@functools.lru_cache(maxsize=2)
def qwen3_chat(action_mode: str) -> TemplateFormat:
    assert QWEN3 is not None
    return qwen3_format(str(QWEN3), action_mode, (BASH,) if action_mode == "tools" else ())


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                                     HealthCheck.data_too_large])
@given(st.sampled_from(("text", "tools")), st.booleans(), st.data())
def test_random_conversations_cost_what_the_whole_rendering_counts(action_mode: str, one_place_first: bool,
                                                                   data: st.DataObject) -> None:
    """A conversation's placed costs sum to the whole rendering's count: in a new format, by `placed_cost_at` or by
    `placed_costs` first (with the parts' known counts) and then the other way (from what the first left in the
    caches), and in a format that has counted every earlier example's messages."""
    messages = data.draw(conversations(action_mode))
    chat = qwen3_chat(action_mode)
    served = served_count(chat, messages)
    fresh = qwen3_format(str(QWEN3), action_mode, chat.tools)
    assert engine_count(fresh, messages, one_place_first) == served
    assert engine_count(fresh, messages, not one_place_first) == served
    assert engine_count(chat, messages, one_place_first) == served


def test_a_call_id_read_in_probes_rendered_one_place_at_a_time_is_not_forgotten() -> None:
    """A tool message counted place by place (`placed_cost_at`, every probe conversation of it) and then everywhere
    (`placed_costs`, which renders nothing more): the template's read of its call id, noted while the places were
    rendered, still keeps its costs from serving another call id."""
    directory = qwen3_with_template(tool_reading_template(READS["attribute"]), "h55-read-attribute-")
    chat = qwen3_format(directory, "tools", (BASH,))
    for context in possible_contexts("tool", "tools"):
        chat.placed_cost_at(context, "tool", "a.py b.py", (), "c")
    chat.placed_costs("tool", "a.py b.py", (), "c")
    call = ToolCall("call_with_a_much_longer_id_0001", "bash", '{"command": "ls"}')
    assert_adds_up(chat, [message("assistant", "Look.", (call,)), message("tool", "a.py b.py", call_id=call.call_id)])


# Writes " SAME" where a message is the very object of an earlier one: the server hands over a new dict for each.
IDENTITY = (
    "{% set ns = namespace(seen=[]) %}{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{{ message.content }}{% for seen in ns.seen %}{% if message is sameas seen %} SAME{% endif %}{% endfor %}"
    "{% set ns.seen = ns.seen + [message] %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("action_mode", ["text", "tools"])
def test_each_occurrence_of_a_probed_message_is_a_new_object_as_the_server_passes_it(action_mode: str) -> None:
    """A probe conversation holds the probed message several times; each occurrence is a new dict (as the server
    builds one per message), so a template comparing identities writes what it writes for the real conversation."""
    directory = qwen3_with_template(IDENTITY, "h55-identity-")
    chat = qwen3_format(directory, action_mode, (BASH,) if action_mode == "tools" else ())
    for role in ("user", "assistant"):
        assert_adds_up(chat, [message(role, "Next."), message("user", "ok")])
        assert_adds_up(chat, [message("user", "ok"), message(role, "Then.")])


def test_split_marks_in_the_system_prompt_do_not_split_a_probe() -> None:
    """The split mark of a probe conversation is a character none of its texts holds, the prefix's included: a
    system prompt holding NUL marks (the first candidate) is rendered whole in its piece."""
    assert QWEN3 is not None
    system = "Agent \x00P\x00 and \x00E\x00."
    chat = qwen3_format(str(QWEN3), "text", (), system)
    assert_adds_up(chat, [message("assistant", "Next."), message("user", "ok")], system)


# The last message's turn is left open and the generation prompt is plain text: they meet without an added token.
OPEN_LAST_TURN = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% if not loop.last %}<|im_end|>\n{% endif %}{% endfor %}Answer:"
)
# The text before the loop ends in plain text; a user turn followed by an agent turn opens without an added token
# (after another turn it follows that turn's closing token: only the cut after the head is unsafe).
OPEN_AFTER_HEAD = (
    "System notes.{% for message in messages %}{% if message.role != 'system' %}"
    "{% if not loop.last and messages[loop.index0 + 1].role == 'assistant' %}{{ message.role }}: "
    "{% else %}<|im_start|>{{ message.role }}\n{% endif %}{{ message.content }}<|im_end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# The system turn is left open; a user message that ends the conversation opens without an added token: only the goal
# alone after the system turn (the first request of a task) has an unsafe cut.
OPEN_LAST_GOAL = (
    "{% for message in messages %}{% if message.role == 'system' %}<|im_start|>system\n{{ message.content }}"
    "{% elif loop.last and message.role == 'user' %}user: {{ message.content }}<|im_end|>"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("template", [OPEN_LAST_TURN, OPEN_AFTER_HEAD, OPEN_LAST_GOAL],
                         ids=["last-piece-and-tail", "head-and-goal", "system-and-last-goal"])
def test_a_cut_at_the_head_or_the_tail_that_meets_without_an_added_token_is_refused(template: str) -> None:
    """`TemplateFormat._check_pieces` checks the cut between the head and the first piece and between the last piece
    and the tail in every probe conversation, the goal's own too (here: the goal's text meets "Answer:";
    "System notes." meets the goal opened as "user: " when an agent turn follows it; the system prompt's "agent."
    meets "user: " when the goal ends the conversation)."""
    directory = qwen3_with_template(template, "h55-open-")
    with pytest.raises(TemplateRefused, match="meet without an added token"):
        qwen3_format(directory, "text")


def test_a_place_a_role_cannot_have_is_refused_by_name() -> None:
    """`placed_cost_at` for a context outside the role's possible ones (a tool result after a user message; a user
    message before a tool result) is a BudgetViolation naming the place, not a count of some other place."""
    chat = qwen3_chat("tools")
    places = (("tool", shared_context("user", None, False)), ("user", shared_context("user", "tool", False)))
    for role, context in places:
        assert context not in possible_contexts(role, "tools")
        with pytest.raises(BudgetViolation, match="has no count for its place"):
            chat.placed_cost_at(context, role, "ok", (), "c" if role == "tool" else None)


@pytest.mark.parametrize("size", [MEMO_TEXT_CHARS, len(LONG)])
def test_a_long_message_asked_again_is_not_rendered_again(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """A message's costs are kept (`TemplateFormat._cached`: in the LRU up to MEMO_TEXT_CHARS characters of content,
    the last longer one apart): asked again, by `placed_costs` or for one place, it renders nothing; another message
    then renders its probes."""
    chat = qwen3_format(str(QWEN3), "tools", (BASH,))
    content = LONG[:size]
    renders: list[int] = []
    original = ChatTemplate.render_parts

    def counted(self: ChatTemplate, *args: Any, **kwargs: Any) -> Any:
        renders.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ChatTemplate, "render_parts", counted)
    first = chat.placed_costs("tool", content, (), "c1")
    probes = len(renders)
    assert probes == len(probe_plans(possible_contexts("tool", "tools"), "tool"))
    assert chat.placed_costs("tool", content, (), "c1") == first
    assert chat.placed_cost_at(first[0][0], "tool", content, (), "c1") == first[0][1]
    assert len(renders) == probes
    chat.placed_costs("user", content)
    assert len(renders) > probes


# Marks the last user message (as Qwen3's template finds its last query) and names the role that follows each message:
# a user message's piece depends on its whole context, the goal's too.
LAST_USER_MARKED = (
    "{% set ns = namespace(last=-1) %}{% for message in messages[::-1] %}"
    "{% if ns.last < 0 and message.role == 'user' %}{% set ns.last = messages | length - 1 - loop.index0 %}{% endif %}"
    "{% endfor %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% if loop.index0 == ns.last %} (latest){% endif %}"
    "{% if not loop.last %} (then {{ messages[loop.index0 + 1].role }}){% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("action_mode", ["text", "tools"])
def test_the_goal_costs_what_the_server_counts_with_and_without_a_user_message_after_it(action_mode: str) -> None:
    """The goal's cost in each of its contexts (`TemplateFormat.goal_costs`) comes from a conversation that gives it
    that context: the role after it, and whether a user message comes later (after an agent turn)."""
    directory = qwen3_with_template(LAST_USER_MARKED, "h55-last-user-")
    chat = qwen3_format(directory, action_mode, (BASH,) if action_mode == "tools" else ())
    for messages in ([], [message("assistant", "Next.")], [message("user", "ok")],
                     [message("assistant", "Next."), message("user", "ok")]):
        assert_adds_up(chat, messages)


# The system turn with the tools listing before the loop, or without tools inside it (test_tool_mode's layout).
LISTING_BEFORE_THE_LOOP = (
    "{% if tools %}<|im_start|>system\n{{ messages[0].content }}\nTools:{% for tool in tools %}\n"
    "{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}{% for message in messages %}"
    "{% if message.role != 'system' or not tools %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("layout", ["qwen3", "listing-before-the-loop"])
def test_the_tool_listing_costs_the_difference_the_tools_make_to_the_served_prompt(layout: str) -> None:
    """`tool_listing_tokens` (the audit's share of B for the tools): the prompt of [system, goal] with the tools
    less the same prompt without them, as the server counts both (Qwen3 writes the system turn before its loop in
    both; the other template writes it inside the loop without tools)."""
    assert QWEN3 is not None
    directory = str(QWEN3) if layout == "qwen3" else qwen3_with_template(LISTING_BEFORE_THE_LOOP, "h55-listing-")
    chat = qwen3_format(directory, "tools", (BASH,))
    plain = qwen3_format(directory, "text")
    prefix = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}]
    listing = chat.tokenizer.count(chat.render(prefix)) - chat.tokenizer.count(plain.render(prefix))
    assert listing > 0 and chat.tool_listing_tokens() == listing
    assert plain.tool_listing_tokens() == 0


def test_a_tokenizer_whose_added_token_matches_as_a_single_word_is_counted_on_whole_texts(tmp_path: Path) -> None:
    """An added token marked ``single_word`` is matched only between word boundaries: "a<x>b" holds no such token
    for the server's tokenizer, so the format counts each text whole rather than split at the token's text."""
    _train_tokenizer_json(tmp_path / "tokenizer.json")
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"].append({"id": len(data["model"]["vocab"]), "content": "<x>", "single_word": True,
                                 "lstrip": False, "rstrip": False, "normalized": False, "special": False})
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}), encoding="utf-8")
    tokenizer = get_tokenizer(f"hf-dir:{tmp_path}")
    assert isinstance(tokenizer, HuggingFaceTokenizer) and not tokenizer.added_tokens_match_as_written()
    assert tokenizer.count("a<x>b") > tokenizer.count("a") + 1 + tokenizer.count("b")
    chat = TemplateFormat(tokenizer, load_template_source(str(tmp_path)), {}, (), SYSTEM, GOAL, "text")
    assert_adds_up(chat, [message("user", "hello<x>world <x> x"), message("assistant", "a<x>b")])
