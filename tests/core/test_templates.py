"""The served model's tokenizer and chat template as a format of the core (chat format ``template``).

Checked against the real Qwen3 files in ../shared/data/qwen3-tokenizer (skipped when absent) and against
``transformers``' own ``apply_chat_template`` as an independent oracle; refusals (lossy tokenizers, files that
are not regular, templates the core cannot split exactly) on small files made here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arc_ref import templates, tokenizers
from arc_ref.config import config_json, make_setup, preset
from arc_ref.errors import ConfigError
from arc_ref.message import ToolCall, ToolSpec
from arc_ref.templates import (
    _AddedTokens,
    TemplateFormat,
    added_tokens_cut_safe,
    load_template_source,
    possible_contexts,
    probe_plans,
    server_arguments,
    server_conversation,
)
from arc_ref.tokenizers import HuggingFaceTokenizer, get_tokenizer
from arc_ref.trace import replay
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, transformers_prompt, transformers_tokenizer
from tests.core.test_tokenizers import _train_tokenizer_json

QWEN3 = qwen3_dir()
needs_qwen3 = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)


def qwen3_tokenizer() -> HuggingFaceTokenizer:
    assert QWEN3 is not None
    tokenizer = get_tokenizer(f"hf-dir:{QWEN3}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    return tokenizer


# --- the tokenizer: Qwen's real vocabulary ------------------------------------------------------------


@needs_qwen3
def test_hf_dir_tokenizer_passes_all_47_vocabulary_cases() -> None:
    """llama.cpp's 47 Qwen2 vocabulary cases (inputs and expected ids), through the hf-dir adapter."""
    assert QWEN3 is not None
    inputs = (QWEN3 / "vocab-test.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    expected = (QWEN3 / "vocab-test.out").read_text(encoding="utf-8").split("\n")
    assert len(inputs) == len(expected) == 47
    tokenizer = qwen3_tokenizer()
    for text, ids in zip(inputs, expected):
        assert tokenizer.encode(text) == [int(token) for token in ids.split()], text
        assert tokenizer.count(text) == len(ids.split())
        assert tokenizer.decode(tokenizer.encode(text)) == __import__("unicodedata").normalize("NFC", text)


@needs_qwen3
def test_hf_dir_tokenizer_matches_special_tokens_as_the_server_does() -> None:
    tokenizer = qwen3_tokenizer()
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert tokenizer.encode(prompt) == [151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]
    assert tokenizer.name == f"hf-dir:{QWEN3}" and tokenizer.normalizer_kind() == "NFC"
    # token starts map onto the original (not NFC-normalized) text: a decomposed character stays whole
    text = "ae\u0301b " * 3
    starts = tokenizer.token_starts(text)
    assert len(starts) == tokenizer.count(text) and starts == sorted(starts) and starts[0] == 0


# --- lossless tokenizers only (A5) --------------------------------------------------------------------


def _save(tokenizer: Any, path: Path) -> str:
    tokenizer.save(str(path))
    return str(path)


def _byte_level(path: Path, normalizer: Any = None) -> str:
    _train_tokenizer_json(path)
    if normalizer is None:
        return str(path)
    from tokenizers import Tokenizer

    loaded = Tokenizer.from_file(str(path))
    loaded.normalizer = normalizer
    return _save(loaded, path)


def test_a_tokenizer_that_drops_characters_is_refused(tmp_path: Path) -> None:
    """A BPE without byte fallback and without an unknown token silently drops characters it cannot encode."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {char: index for index, char in enumerate("abcdefghijklmnopqrstuvwxyz ")}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", "isolated")
    tokenizer.decoder = decoders.Fuse()
    path = _save(tokenizer, tmp_path / "drops.json")
    with pytest.raises(ConfigError, match="is lossy: decoding its tokens does not give back the text"):
        get_tokenizer(f"hf:{path}")


def test_a_tokenizer_with_an_unknown_token_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{char: index + 1 for index, char in enumerate("abcdefghijklmnopqrstuvwxyz")}}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()
    path = _save(tokenizer, tmp_path / "unk.json")
    with pytest.raises(ConfigError, match="lossy"):
        get_tokenizer(f"hf:{path}")


@pytest.mark.parametrize("kind", ["NFKC", "NFKD", "Lowercase"])
def test_a_normalizer_that_maps_characters_is_refused(tmp_path: Path, kind: str) -> None:
    from tokenizers import normalizers

    path = _byte_level(tmp_path / f"{kind}.json", getattr(normalizers, kind)())
    with pytest.raises(ConfigError, match=f"normalizer \\({'other' if kind == 'Lowercase' else kind}\\)"):
        get_tokenizer(f"hf:{path}")


def test_an_nfc_normalizer_is_accepted_and_offsets_map_onto_the_original(tmp_path: Path) -> None:
    from tokenizers import normalizers

    path = _byte_level(tmp_path / "nfc.json", normalizers.NFC())
    tokenizer = get_tokenizer(f"hf:{path}")
    text = "cafe\u0301 \u212b"  # NFC composes both
    starts = tokenizer.token_starts(text)
    assert starts == sorted(starts) and all(0 <= start <= len(text) for start in starts)
    assert tokenizer.decode(tokenizer.encode(text)) == "caf\u00e9 \u00c5"


def test_a_tokenizer_file_that_is_not_regular_or_too_large_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        get_tokenizer(f"hf:{tmp_path}")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):  # would block forever if it were opened
        get_tokenizer(f"hf:{fifo}")
    big = tmp_path / "big.json"
    _train_tokenizer_json(big)
    monkeypatch.setattr(tokenizers, "TOKENIZER_FILE_LIMIT", 1000)

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the file was opened")

    monkeypatch.setattr("builtins.open", no_read)
    with pytest.raises(ConfigError, match="more than the limit of 1000"):
        get_tokenizer(f"hf:{big}")
    with pytest.raises(ConfigError, match="is not a directory"):
        get_tokenizer(f"hf-dir:{tmp_path / 'nowhere'}")


# --- templates: refusals on small model directories made here -----------------------------------------

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _model_dir(tmp_path: Path, template: str | None, **config: Any) -> str:
    directory = tmp_path / "model"
    directory.mkdir(exist_ok=True)
    _train_tokenizer_json(directory / "tokenizer.json")
    entries = dict(config)
    if template is not None:
        entries["chat_template"] = template
    (directory / "tokenizer_config.json").write_text(json.dumps(entries), encoding="utf-8")
    return str(directory)


def _template_config(directory: str, **overrides: Any) -> Any:
    return preset("minimal", tokenizer=f"hf-dir:{directory}", chat_format="template", context_limit=6000,
                  recent_budget=600, summary_budget=600, page_budget=600, recall_budget=300, **overrides)


def test_a_chatml_template_with_its_own_tokenizer_drives_a_task(tmp_path: Path) -> None:
    directory = _model_dir(tmp_path, CHATML, eos_token="<|im_end|>")
    setup = make_setup(_template_config(directory))
    outputs = list(replay([
        json.dumps({"op": "config", "preset": "minimal", "tokenizer": f"hf-dir:{directory}", "chat_format": "template",
                    "context_limit": 6000, "recent_budget": 600, "summary_budget": 600, "page_budget": 600,
                    "recall_budget": 300}),
        json.dumps({"op": "observe", "action": "cat a", "observation": "hello world " * 5}),
        json.dumps({"op": "view"}),
    ]))
    assert [o["op"] for o in outputs] == ["config", "observe", "view"]
    view = outputs[2]
    assert view["text"].startswith("<|im_start|>system\nAgent.<|im_end|>\n<|im_start|>user\nSolve it.<|im_end|>\n")
    assert view["text"].endswith("<|im_start|>assistant\n")
    assert view["tokens"] == setup.tokenizer.count(view["text"]) <= view["budget"]
    assert view["components"]["overhead"] == setup.generation_tokens  # the parts add up to the whole count


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (None, "has no chat template"),
        ("{{ messages[0].content }}", "found 0 such loop"),
        (CHATML + CHATML, "found 2 such loop"),
        ("{% set messages = messages[1:] %}" + CHATML, "an assignment to messages"),
        ("{% for message in messages if message.role != 'system' %}x{% endfor %}", "found 1 such loop"),
        ("{% for message in messages %}{% if loop.index0 % 2 == 1 and message.role != 'user' %}"
         "{{ raise_exception('roles must alternate') }}{% endif %}<|im_start|>{{ message.content }}<|im_end|>"
         "{% endfor %}", "roles must alternate"),
        ("{{ strftime_now('%d %b %Y') }}" + CHATML, "date_string"),
        ("{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}",
         "without an added token between them"),
        ("{{ messages|length }}" + CHATML, "depends on messages after the first"),
        ("{% for message in messages %}", "does not compile"),
    ],
)
def test_a_template_the_core_cannot_split_exactly_is_refused(tmp_path: Path, template: str | None, message: str) -> None:
    directory = _model_dir(tmp_path, template)
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_setup(_template_config(directory))


def test_template_resolution_follows_transformers(tmp_path: Path) -> None:
    """chat_template.jinja wins over tokenizer_config.json; named templates pick "default" (or "tool_use" with tools)."""
    directory = Path(_model_dir(tmp_path, [{"name": "default", "template": CHATML},  # type: ignore[arg-type]
                                           {"name": "tool_use", "template": "T" + CHATML}], eos_token={"content": "E"}))
    source = load_template_source(str(directory))
    assert source.source == CHATML and source.tool_source == "T" + CHATML and ("eos_token", "E") in source.special_tokens
    (directory / "chat_template.jinja").write_text("J" + CHATML, encoding="utf-8")
    assert load_template_source(str(directory)).source == "J" + CHATML


def test_template_configuration_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs the tokenizer 'hf-dir:DIR'"):
        make_setup(preset("minimal", chat_format="template"))
    with pytest.raises(ConfigError, match="action_mode 'tools' needs chat_format 'template'"):
        make_setup(preset("minimal", action_mode="tools"))
    with pytest.raises(ConfigError, match="action_mode must be one of text, tools"):
        make_setup(preset("minimal", action_mode="mcp"))
    with pytest.raises(ConfigError, match="lists the environment's tools of action_mode 'tools'"):
        make_setup(preset("minimal", tools=[{"type": "function", "function": {"name": "ls"}}]))
    with pytest.raises(ConfigError, match="tool 1 must be"):
        preset("minimal", tools=[{"name": "ls"}])
    with pytest.raises(ConfigError, match="must match"):
        preset("minimal", tools=[{"type": "function", "function": {"name": "l s"}}])
    with pytest.raises(ConfigError, match="must be distinct"):
        preset("minimal", tools=[{"type": "function", "function": {"name": "ls"}}] * 2)
    with pytest.raises(ConfigError, match="'template_kwargs' must be an object"):
        preset("minimal", template_kwargs=[1])
    with pytest.raises(ConfigError, match="is set by the request itself"):
        preset("minimal", template_kwargs={"tools": None})
    with pytest.raises(ConfigError, match="must be a string, number, boolean or null"):
        preset("minimal", template_kwargs={"x": [1]})
    directory = _model_dir(tmp_path, CHATML)
    with pytest.raises(ConfigError, match="are names of ARC's own tools"):
        make_setup(_template_config(directory, action_mode="tools",
                                    tools=[{"type": "function", "function": {"name": "_recall"}}]))
    (tmp_path / "model" / "special_tokens_map.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(ConfigError, match="special tokens map .*special_tokens_map.json' must hold a JSON object"):
        load_template_source(directory)  # read in the legacy layout (no added_tokens_decoder) only
    odd = tmp_path / "odd"
    (odd / "tokenizer_config.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot load tokenizer_config.json from .*: not a regular file"):
        load_template_source(str(odd))


def test_the_config_line_echoes_later_fields_only_when_set() -> None:
    assert "action_mode" not in config_json(preset("minimal"))
    assert "tools" not in config_json(preset("minimal")) and "template_kwargs" not in config_json(preset("minimal"))
    echoed = config_json(preset("minimal", action_mode="tools", template_kwargs={"enable_thinking": True},
                                tools=[{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]))
    assert echoed["action_mode"] == "tools" and echoed["template_kwargs"] == {"enable_thinking": True}
    assert echoed["tools"] == [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("tokens", "overlap"),
    [
        (["<|im_start|>", "<|im_end|>", "<think>", "</think>"], False),
        (["<a>", "<a>b"], True),  # one token inside another
        (["ab", "bc"], True),  # a suffix of one is a prefix of the other
    ],
)
def test_overlapping_added_tokens_are_found(tokens: list[str], overlap: bool) -> None:
    assert (added_tokens_cut_safe(tokens) is not None) == overlap


@given(st.lists(st.text(alphabet="<|>ab", min_size=1, max_size=4), max_size=5), st.text(alphabet="<|>ab", max_size=8),
       st.text(alphabet="<|>ab", max_size=8))
def test_a_cut_is_safe_where_an_added_token_ends_or_starts_it(tokens: list[str], left: str, right: str) -> None:
    """The boundary check of every probe: an added token ends ``left`` or starts ``right`` (as a search for one at
    the end of ``left`` and a match at the start of ``right`` find it)."""
    pattern = "|".join(re.escape(token) for token in sorted(tokens, key=len, reverse=True)) or "(?!)"
    expected = bool(re.search(f"(?:{pattern})\\Z", left)) or bool(re.match(f"(?:{pattern})", right))
    assert _AddedTokens(tokens).cut_safe(left, right) == expected


class _UnreadEnd(str):
    """A piece whose end may not be read (`_check_pieces` tests the right side of a cut first)."""

    def endswith(self, *args: Any) -> bool:
        raise AssertionError(f"the end of {str(self)!r} was read")


@needs_qwen3
def test_a_cut_opened_by_an_added_token_is_decided_without_reading_the_left_side_s_end() -> None:
    """The check of every probe's cuts tests the right side first: a piece opening with an added token (94% of a new
    conversation's ~1,600 cuts, Qwen3's <|im_start|>) decides its cut alone (issue 28: the check 0.29 -> 0.16 ms a
    conversation); the two tests are pure, so the outcome is the same (the property above)."""
    chat = _qwen3_format(())
    pieces: list[str] = [_UnreadEnd("<|im_start|>user\nx<|im_end|>\n"), _UnreadEnd("<|im_start|>assistant\nx<|im_end|>\n")]
    chat._check_pieces([], pieces)
    assert chat._added.cut_safe(pieces[0], pieces[1])


def test_probe_plans_realise_every_context_once() -> None:
    for mode in ("text", "tools"):
        for role in ("user", "assistant", "tool") if mode == "tools" else ("user", "assistant"):
            contexts = possible_contexts(role, mode)
            plans = probe_plans(contexts, role)
            realised = []
            for plan in plans:
                roles = ["system", "user"] + [item if isinstance(item, str) else role for item in plan]
                for position, item in enumerate(plan, start=2):
                    if not isinstance(item, str):
                        before = roles[position - 1]
                        after = roles[position + 1] if position + 1 < len(roles) else None
                        assert (before, after, "user" in roles[position + 1:]) == (
                            item.before, item.after, item.user_after), (role, mode, plan)
                        realised.append(item)
            assert sorted(realised, key=repr) == sorted(contexts, key=repr)


def test_server_arguments_follow_vllm() -> None:
    assert server_arguments('{"id": "§1"}') == {"id": "§1"}
    assert server_arguments("not json") == {} and server_arguments("") == {} and server_arguments(None) == {}
    # a JSON value that is not an object is {} too (vLLM 0.32 coerces it: "Chat templates require a mapping")
    for value in ('""', '"ls -la"', "[1, 2]", "42", "true", "false", "null", "{}"):
        assert server_arguments(value) == {}, value
    assert server_arguments([1, 2]) == {} and server_arguments(7) == {} and server_arguments({"a": 1}) == {"a": 1}


# --- rendering: byte-equal to transformers' apply_chat_template (Qwen3's real template) --------------

_TEXT = st.one_of(
    st.text(alphabet="ab \n\t§é中😀{}\":,", max_size=30),
    st.sampled_from(["", "\n", "\n\nx", "x\n", "<think>r</think>c", "</think>", "a</think>\n\nb", "<tool_response>x</tool_response>",
                     "<|im_end|>", "<tool_call>", "  \n y"]),
)
_ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(["id", "page", "path", "é"]), st.one_of(st.text(max_size=8), st.integers(), st.none()),
                    max_size=3).map(lambda d: json.dumps(d, ensure_ascii=False)),
    st.sampled_from(["", "not json", "[1, 2]", '"s"', "{\"a\":1,\"a\":2}", "null", "3.50"]),
)
TOOL_SETS: tuple[tuple[ToolSpec, ...], ...] = (
    (),
    (ToolSpec("read_file", "Read a file.", '{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}'),
     ToolSpec("bare"), ToolSpec("ü_ok", None, '{"b": 1, "a": [true, null]}')),
    # the flags vLLM keeps in a tool's dump where set: the OpenAI Agents SDK sends strict on every tool
    (ToolSpec("read_file", "Read a file.", '{"type": "object"}', strict=True),
     ToolSpec("bare", strict=False, defer_loading=True, listed_defer_loading=False),
     ToolSpec("later", None, None, None, True, True)),
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(_TEXT)}]
    call_number = 0
    for _ in range(draw(st.integers(1, 7))):
        role = draw(st.sampled_from(["user", "assistant", "assistant", "tool"]))
        message: dict[str, Any] = {"role": role, "content": draw(_TEXT)}
        if role == "assistant" and draw(st.booleans()):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_number += 1
                calls.append(ToolCall(f"call_{call_number}", draw(st.sampled_from(["read_file", "bare", "_recall"])),
                                      draw(_ARGUMENTS)).openai())
            message["tool_calls"] = calls
        if role == "tool":
            message["tool_call_id"] = f"call_{call_number}"
        messages.append(message)
    return messages


def _transformers_text(directory: Path, messages: list[dict[str, Any]], tools: tuple[ToolSpec, ...]) -> str:
    """The oracle (proofs_check.shared_data): vLLM's preprocessing, then transformers' own apply_chat_template."""
    text, _ = transformers_prompt(directory, messages, [tool.openai() for tool in tools] or None,
                                  enable_thinking=False)
    return text


def _qwen3_format(tools: tuple[ToolSpec, ...], system: str = "S") -> TemplateFormat:
    assert QWEN3 is not None
    return TemplateFormat(qwen3_tokenizer(), load_template_source(str(QWEN3)), {"enable_thinking": False}, tools,
                          system, "G", "tools" if tools else "text")


@needs_qwen3
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.sampled_from(range(len(TOOL_SETS))))
def test_rendering_is_byte_equal_to_transformers(messages: list[dict[str, Any]], tool_set: int) -> None:
    assert QWEN3 is not None
    tools = TOOL_SETS[tool_set]
    fmt = _qwen3_format(tools)
    ours = fmt.render(messages)
    assert ours == _transformers_text(QWEN3, messages, tools)
    from arc_ref.templates import server_conversation, server_tools

    head, pieces, tail = fmt.template.render_parts(server_conversation(messages), server_tools(tools))
    assert head + "".join(pieces) + tail == ours
    # the parts are counted separately and add up to the server's count of the whole prompt
    oracle_count = len(transformers_tokenizer(str(QWEN3)).encode(ours, add_special_tokens=False))
    assert fmt.tokenizer.count(head) + sum(fmt.tokenizer.count(p) for p in pieces) + fmt.tokenizer.count(tail) == oracle_count


@needs_qwen3
def test_tool_listing_and_calls_render_as_vllm_sends_them() -> None:
    """vLLM json-loads a call's arguments and the template prints them with tojson: spaces after , and :."""
    fmt = _qwen3_format(TOOL_SETS[1])
    call = ToolCall("c1", "read_file", '{"path":"a.txt","n":2}')
    text = fmt.render([{"role": "system", "content": "S"}, {"role": "user", "content": "go"},
                       {"role": "assistant", "content": "", "tool_calls": [call.openai()]},
                       {"role": "tool", "tool_call_id": "c1", "content": "data"}])
    assert '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt", "n": 2}}\n</tool_call>' in text
    assert '{"type": "function", "function": {"name": "bare", "description": null, "parameters": null}}' in text
    assert "<|im_start|>user\n<tool_response>\ndata\n</tool_response><|im_end|>\n" in text
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n") and text.endswith("<think>\n\n</think>\n\n")


# --- issue 12: where a message's count is its content's count plus a fixed frame ----------------------


@needs_qwen3
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=12), st.text(alphabet=" \t\n\r\u2028\u0085ab1.'", max_size=8)))
def test_role_line_and_content_merge_only_after_a_line_break(content: str) -> None:
    """Qwen's pre-tokenizer joins the role line's LF with a content that starts with whitespace reaching a line
    break (``\\s*[\\r\\n]``); any other content costs exactly its own count inside the role line."""
    tokenizer = qwen3_tokenizer()
    joined = tokenizer.count("user\n" + content)
    apart = tokenizer.count("user\n") + tokenizer.count(content)
    if not re.match(r"\s*[\r\n]", content):
        assert joined == apart
    else:
        assert joined <= apart


@needs_qwen3
def test_a_content_that_starts_with_a_line_break_does_merge() -> None:
    tokenizer = qwen3_tokenizer()
    assert tokenizer.count("user\n" + "\nx") < tokenizer.count("user\n") + tokenizer.count("\nx")


TOOL_ECHO = (  # writes each call's arguments through tojson (the memoized text and the keyword forms), a key named
    # like an attribute of a class read as an attribute (the server's plain dict has none: it reads the item), and
    # whether a message's calls or arguments are the very objects of the last message with calls (an occurrence is new)
    "{% set ns = namespace(calls=none, arguments=none) %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}<tool_call>{{ call.function.arguments | tojson }}"
    "{{ call.function.arguments | tojson(indent=1) }}{{ call.function.arguments | tojson(ensure_ascii=true) }}"
    "{{ call.function.arguments | tojson(separators=(',', ':')) }}{{ call.function.arguments | tojson(sort_keys=true) }}"
    "{{ call.function.arguments | length }}({{ call.function.arguments._text }}|{{ call.function.arguments.__slots__ }}"
    "|{{ call.function.arguments | attr('_text') }})"
    "{% if call.function.arguments is sameas ns.arguments %} SAME{% endif %}"
    "{% set ns.arguments = call.function.arguments %}</tool_call>{% endfor %}"
    "{% if message.tool_calls is defined %}{% if message.tool_calls is sameas ns.calls %} SAME{% endif %}"
    "{% set ns.calls = message.tool_calls %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("arguments", ['{"command": "ls -la é", "n": [1, {"k": null}]}', "not json", "[1, 2]",
                                       '{"_text": "HIDDEN", "__slots__": "S", "z": 1, "a": "é"}'])
def test_a_probed_tool_call_is_counted_as_the_server_renders_it(tmp_path: Path, arguments: str) -> None:
    """Each occurrence of a probed assistant message is built once more from its parsed form (new dicts and lists,
    its arguments parsed anew, their tojson text known for the rendering): every placed cost equals the count of the
    piece that the template writes for the conversation as the server hands it over (`server_conversation`)."""
    directory = _model_dir(tmp_path, TOOL_ECHO)
    tokenizer = get_tokenizer(f"hf-dir:{directory}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    tools = (ToolSpec("bash", "Run it.", "{\"type\": \"object\"}"),)
    chat = TemplateFormat(tokenizer, load_template_source(directory), {}, tools, "Agent.", "Solve it.", "tools")
    calls = (ToolCall("c1", "bash", arguments), ToolCall("c2", "bash", '{"command": "pwd"}'))
    costs = dict(chat.placed_costs("assistant", "Next.", calls))
    message = {"role": "assistant", "content": "Next.", "tool_calls": [
        {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in calls]}
    for plan in probe_plans(possible_contexts("assistant", "tools"), "assistant"):
        conversation = [{"role": "system", "content": "Agent."}, {"role": "user", "content": "Solve it."}]
        where = []
        for item in plan:
            if isinstance(item, str):
                conversation.append({"role": item, "content": "x"})
            else:
                where.append((len(conversation), item))
                conversation.append(message)
        _, pieces, _ = chat.template.render_parts(server_conversation(conversation), chat._server_tools)
        assert all(" SAME" not in piece for piece in pieces)
        for position, ctx in where:
            assert costs[ctx] == tokenizer.count(pieces[position]), (ctx, pieces[position])


def test_a_probed_tool_calls_arguments_are_serialized_once_per_message(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The arguments' tojson text is known for every occurrence of the probed message (18 places here): json.dumps
    runs once per call of the message, not once per occurrence."""
    directory = _model_dir(tmp_path, CHATML.replace(
        "{{ message.content }}", "{{ message.content }}{% for call in message.tool_calls or [] %}<tool_call>"
        "{{ call.function.arguments | tojson }}</tool_call>{% endfor %}"))
    tokenizer = get_tokenizer(f"hf-dir:{directory}")
    assert isinstance(tokenizer, HuggingFaceTokenizer)
    chat = TemplateFormat(tokenizer, load_template_source(directory), {}, (ToolSpec("bash"),), "Agent.", "Solve it.",
                          "tools")
    dumped: list[Any] = []
    dumps = json.dumps

    def counted_dumps(value: Any, **kwargs: Any) -> str:
        dumped.append(value)
        return dumps(value, **kwargs)

    monkeypatch.setattr(templates.json, "dumps", counted_dumps)
    calls = (ToolCall("c1", "bash", '{"command": "ls"}'), ToolCall("c2", "bash", '{"command": "pwd"}'))
    places = chat.placed_costs("assistant", "Next.", calls)
    assert len(places) == 18 and dumped == [{"command": "ls"}, {"command": "pwd"}], dumped


def test_a_known_tojson_text_serves_only_the_default_form_of_that_very_object() -> None:
    """`_KnownJSON`: the text noted for an object is its tojson with the default keywords; any other keyword, or
    another object (an equal one, or one under a stale id), is serialized by json.dumps."""
    known = {"b": "é", "a": [1, 2]}
    text = '{"b": "é", "a": [1, 2]}'
    equal_but_other = dict(known)
    # the second entry stands for an object gone whose id a new one has taken: its text is not the new one's
    outer, templates._KNOWN_JSON.texts = templates._KNOWN_JSON.texts, {id(known): (known, text),
                                                                       id(equal_but_other): (known, "stale")}
    try:
        assert templates._tojson(known) is text
        assert templates._tojson(equal_but_other) == text and templates._tojson(equal_but_other) is not text
        for keywords in ({"sort_keys": True}, {"ensure_ascii": True}, {"indent": 1}, {"separators": (",", ":")}):
            assert templates._tojson(known, **keywords) == json.dumps(known, **{"ensure_ascii": False, **keywords})
    finally:
        templates._KNOWN_JSON.texts = outer


def _sandbox_outcome(env: Any, obj: Any, attribute: str) -> Any:
    """What ``env.getattr`` gives, comparable across environments: a value, a wrapped ``str.format`` by what it
    writes, an undefined by its class, hint, name, object and the error it raises."""
    import types

    import jinja2

    value = env.getattr(obj, attribute)
    if isinstance(value, jinja2.Undefined):
        return ("undefined", type(value), value._undefined_hint, value._undefined_name,
                value._undefined_obj is obj, value._undefined_exception)
    if isinstance(value, types.FunctionType):  # wrap_str_format's formatter, by what it writes
        return ("format", value({"x": "b"}) if value.__name__ == "format_map" else value("a", x="b"))
    return ("value", value)


def test_the_sandbox_reads_every_attribute_as_jinjas_own_sandbox() -> None:
    """`_Sandbox.getattr`'s short cuts (a plain dict's absent key, a namespace's own dict, wrap_str_format only on
    a bound method, builtin or Python (Markup's format), the loop's counters) give what jinja's ImmutableSandboxedEnvironment gives, value, undefined
    and its error alike, on every kind of object a template reaches."""
    import jinja2.runtime
    import jinja2.sandbox
    import markupsafe

    ours, theirs = templates._environment(), jinja2.sandbox.ImmutableSandboxedEnvironment()
    loop = jinja2.runtime.LoopContext(iter([1, 2]), theirs.undefined)
    next(iter(loop))
    namespace = templates._TemplateNamespace(count=1, text="{0}-{x}", fmt="{0}-{x}".format, mapper="{x}".format_map,
                                             starts="abc".startswith, items=[1], mro=2,
                                             markup=markupsafe.Markup("<{0}>").format)  # a Python bound method
    objects = [
        {"role": "user", "content": "x", "items": 3, "format": "y"},
        templates.SerializedTool({"type": "function", "function": {"name": "f"}}),
        templates._WatchedMessage({"role": "tool", "content": "x"}, set()),
        namespace, loop, "abc{0}", markupsafe.Markup("<{0}-{x}>"), [1, 2], 7, None, theirs.undefined(name="u"),
    ]
    attributes = ["role", "content", "absent", "items", "keys", "get", "format", "format_map", "count", "text", "fmt",
                  "mapper", "markup", "starts", "mro", "startswith", "append", "pop", "index0", "last", "length", "cycle",
                  "_Namespace__attrs", "__class__", "__init__", "_reads", "_text", "_x", "__dict__"]
    for obj in objects:
        for attribute in attributes:
            outcomes = []
            for env in (ours, theirs):
                try:
                    outcomes.append(_sandbox_outcome(env, obj, attribute))
                except Exception as error:  # the same error class and message from both
                    outcomes.append(("raised", type(error), str(error)))
            assert outcomes[0] == outcomes[1], (type(obj).__name__, attribute, outcomes)


def test_the_sandbox_calls_every_callable_as_jinjas_own_sandbox() -> None:
    """`_Sandbox.call`'s short cut (a plain string's methods but format/format_map, and namespace(...)) gives what
    jinja's ImmutableSandboxedEnvironment gives: the same value, or the same error, for the same arguments."""
    import jinja2.sandbox
    import jinja2.utils

    ours, theirs = templates._environment(), jinja2.sandbox.ImmutableSandboxedEnvironment()

    class Text(str):
        pass

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        ("<a>x".startswith, ("<a>",), {"_loop_vars": {}}), ("a,b".split, (",",), {"_block_vars": {}}),
        ("\nx\n".strip, ("\n",), {}), ("x".endswith, (), {}), ("x".startswith, ("x",), {"start": 0}),
        ("{0}".format, ("a",), {}), ("{x}".format_map, ({"x": 1},), {}), (Text("ab").upper, (), {}),
        (templates._TemplateNamespace, (), {"a": 1, "_loop_vars": {"k": 2}}),
        (templates._TemplateNamespace, (), {"_bad": 1}), (templates._TemplateNamespace, ({"b": 2},), {}),
        (ours.globals["dict"], (), {"a": 1}), (ours.globals["raise_exception"], ("no",), {}), (len, ([1],), {}),
        ([1].append, (2,), {}), ({}.update, ({"a": 1},), {}),
    ]
    for function, args, kwargs in calls:
        outcomes = []
        for env in (ours, theirs):
            context = env.from_string("").new_context({})
            try:
                value = env.call(context, function, *args, **dict(kwargs))
                outcomes.append(("value", type(value), repr(value) if isinstance(value, jinja2.utils.Namespace) else value))
            except Exception as error:
                outcomes.append(("raised", type(error), str(error)))
        assert outcomes[0] == outcomes[1], (function, outcomes)


_READ_TEMPLATES = [
    "{{ o.role }}|{{ o.absent }}|{{ o.items }}|{{ o.index }}|{{ o.last }}|{{ o.get('role') }}|{{ o.content.role }}",
    "{{ o._x }}",
    "{% for x in o %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}"
    "{{ x.index }}{{ x.role }}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{{ o[0] }}|{{ o[-1] }}|{{ o[-3] }}|{{ o[2] }}|{{ o[true] }}|{{ o['role'] }}|{{ o[i] }}|{{ o[i].role }}",
    "{{ o[1:] }}|{{ o[o|length - 1] }}",
    "{{ o.startswith('a') }}|{{ o.split(sep) }}|{{ o.strip() }}|{{ o.upper() }}|{{ o.count(o) }}|{{ o.endswith(i) }}",
    "{{ o.format('x') }}|{{ o.format_map(o) }}",
    "{{ o.startswith(*xs) }}|{{ o.split(sep=sep) }}|{{ o.replace(o.strip(), sep) }}",
    "{{ o.append(1) }}",
    "{{ u.role }}",
    "{{ u.startswith('a') }}",
    "{{ u[0] }}",
    "{% set ns = namespace(k=o) %}{{ ns.k }}{{ ns.absent }}{% set ns.k = 2 %}{{ ns.k }}",
    "{% macro m(a) %}{{ a.role }}{{ a[0] }}{{ a.strip() }}{% endmacro %}{{ m(o) }}",
    "{% for x in o if x.role %}{{ x.role }}{{ loop.index }}{% endfor %}{% set b %}{{ o.role }}{{ o[0] }}{% endset %}"
    "{{ b }}{% filter upper %}{{ o.role }}{% endfilter %}{{ o | selectattr('role') | list }}",
    "{% macro c() %}{{ caller(o) }}{% endmacro %}{% call(v) c() %}{{ v.role }}{{ v[i] }}{% endcall %}"
    "{{ (o.role if o.role else o.content).strip() }}{{ (o or 'a b').split(' ')[0] }}",
    "{% for x in o recursive %}{{ loop.depth }}{{ x.role }}{% if x.content is iterable and x.content is not string %}"
    "{{ loop(x.content) }}{% endif %}{% endfor %}",
]


def test_templates_compiled_with_inline_reads_render_as_with_jinjas_own_code_generator() -> None:
    """`_InlineReads` (a plain dict's item by name, the loop's counters, a plain list's item by an int index, a plain
    str's method with constant or named arguments, written inline behind a type test) renders every template as the
    same sandbox compiled by jinja's own code generator does: the same text, or the same error, for every kind of
    object a template reaches (subclasses of dict, str and list, an undefined, a namespace, a loop)."""
    import jinja2.compiler

    if templates._Sandbox.code_generator_class is not templates._InlineReads:
        pytest.skip(f"jinja {jinja2.__version__}: the inline reads are written for {templates.INLINE_READS_JINJA}x only")
    import markupsafe

    class Plain(templates._Sandbox):
        code_generator_class = jinja2.compiler.CodeGenerator

    class Text(str):
        pass

    ours = templates._environment()
    theirs = Plain(trim_blocks=True, lstrip_blocks=True,
                   extensions=[templates._GenerationTag, "jinja2.ext.loopcontrols"])
    theirs.filters, theirs.globals, theirs.tests = ours.filters, ours.globals, ours.tests
    message = {"role": "user", "content": "a b", "index": 4, "items": 5, "last": "l"}
    objects: list[Any] = [
        message, {"content": {"role": "inner"}}, templates.SerializedTool({"type": "function", "role": "t"}),
        templates._WatchedMessage({"role": "tool", "content": "x"}, set()), [message, {"role": "a"}, "s"], [], ["x"],
        ("t", "u"), "abc a", "", Text("ab c"), markupsafe.Markup("<b>{0}</b>"), 7, True, None,
        templates._TemplateNamespace(role="n", index=1), {1: "one", "role": None},
    ]
    indexes: list[Any] = [0, 1, -1, 5, True, "role", None, 1.0]
    for source in _READ_TEMPLATES:
        compiled = (ours.from_string(source), theirs.from_string(source))
        assert ("_arc_" in ours.compile(source, raw=True)) == (source != "{{ o._x }}")  # inline reads are exercised
        for obj in objects:
            for index in indexes:
                variables = {"o": obj, "i": index, "sep": " ", "xs": ["a"]}
                outcomes = []
                for template in compiled:
                    try:
                        outcomes.append(("value", template.render(**variables)))
                    except Exception as error:  # the same error class and message from both
                        outcomes.append(("raised", type(error), str(error)))
                assert outcomes[0] == outcomes[1], (source, obj, index, outcomes)


@needs_qwen3
def test_a_chat_templates_reads_of_plain_messages_do_not_call_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3's template compiled with `_InlineReads`: reading a plain message's role and content, the loop's counters
    and the messages by index take no call of the sandbox (issue 28: a new conversation's renders 8% faster); the
    namespace's values and a message's absent keys still do."""
    if templates._Sandbox.code_generator_class is not templates._InlineReads:
        pytest.skip(f"jinja {jinja2.__version__}: the inline reads are written for {templates.INLINE_READS_JINJA}x only")
    assert QWEN3 is not None
    source = load_template_source(str(QWEN3))
    assert source.source is not None
    template = templates.ChatTemplate(source.source, dict(source.special_tokens), {"enable_thinking": False}, "qwen3")
    read: list[tuple[str, str]] = []
    getattr_ = templates._Sandbox.getattr

    def counted(self: Any, obj: Any, attribute: str) -> Any:
        read.append((type(obj).__name__, attribute))
        return getattr_(self, obj, attribute)

    monkeypatch.setattr(templates._Sandbox, "getattr", counted)
    conversation = [{"role": "system", "content": "S"}, {"role": "user", "content": "G"},
                    {"role": "assistant", "content": "a"}, {"role": "user", "content": "<tool_response>x</tool_response>"}]
    text = template.render(conversation, None)
    assert text.startswith("<|im_start|>system\nS<|im_end|>")
    sandboxed = {(kind, attribute) for kind, attribute in read}
    # what is left to the sandbox: the namespace's values, and keys the messages do not hold (undefined)
    assert sandboxed <= {("_TemplateNamespace", "multi_step_tool"), ("_TemplateNamespace", "last_query_index"),
                         ("dict", "reasoning_content"), ("dict", "tool_calls")}, sandboxed


def test_a_keyword_set_to_null_or_auto_is_undefined_to_the_template() -> None:
    """vLLM 0.32 merges a request's chat_template_kwargs with ``merge_kwargs``, which leaves out the values None and
    "auto": a template that tells an undefined keyword from null renders the undefined branch (review s10 r6 F1)."""
    from arc_ref.templates import ChatTemplate

    source = ("{% if enable_thinking is not defined %}UNDEFINED{% elif enable_thinking is none %}NULL"
              "{% else %}{{ enable_thinking }}{% endif %}|{{ bos_token }}"
              "{% for message in messages %}{{ message.content }}{% endfor %}")
    shown = {}
    for value in (None, "auto", False, "none", 0, ""):
        template = ChatTemplate(source, {"bos_token": "<s>"}, {"enable_thinking": value}, "t")
        shown[repr(value)] = template.render([{"role": "user", "content": "x"}], None, True)
    assert shown == {"None": "UNDEFINED|<s>x", "'auto'": "UNDEFINED|<s>x", "False": "False|<s>x",
                     "'none'": "none|<s>x", "0": "0|<s>x", "''": "|<s>x"}
    # a special token's name given as null keeps the special token (the keyword is left out, not set to null)
    template = ChatTemplate(source, {"bos_token": "<s>"}, {"bos_token": None}, "t")
    assert template.render([{"role": "user", "content": "x"}], None, True) == "UNDEFINED|<s>x"


@needs_qwen3
def test_a_template_sees_the_special_tokens_transformers_passes(tmp_path: Path) -> None:
    """transformers 5 (vLLM 0.32's renderer) passes a template only the seven named special tokens:
    ``additional_special_tokens`` (a list in Qwen3's tokenizer_config.json) and ``extra_special_tokens`` are
    undefined to it, so a template that prints them when defined renders nothing there, as the server does."""
    assert QWEN3 is not None
    directory = tmp_path / "qwen3-special"
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes((QWEN3 / "tokenizer.json").read_bytes())
    config = json.loads((QWEN3 / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["additional_special_tokens"]  # the real file has the list: the case is not vacuous
    config.update(sep_token=None, cls_token=None, mask_token=None)  # named by the template: set (a left-out one refuses)
    names = (*templates.SPECIAL_TOKEN_KEYS, "additional_special_tokens", "extra_special_tokens")
    config["chat_template"] = "".join(
        f"{{% if {name} is defined %}}[{name}={{{{ {name} }}}}]{{% endif %}}" for name in names
    ) + CHATML
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    fmt = TemplateFormat(qwen3_tokenizer(), load_template_source(str(directory)), {}, (), "S", "G", "text")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "G"}]
    expected, _ = transformers_prompt(directory, messages, None)
    assert fmt.render(messages) == expected
    assert expected.startswith("[eos_token=<|im_end|>][pad_token=<|endoftext|>]<|im_start|>system\nS")


def _qwen3_variant(tmp_path: Path, name: str, config: dict[str, Any], files: dict[str, str] | None = None) -> Path:
    """Qwen3's real tokenizer.json beside an edited tokenizer_config.json (and other files)."""
    assert QWEN3 is not None
    directory = tmp_path / name
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes((QWEN3 / "tokenizer.json").read_bytes())
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    for relative, text in (files or {}).items():
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        (directory / relative).write_text(text, encoding="utf-8")
    return directory


def _shows(names: Sequence[str]) -> str:
    """A template that prints each named variable when it is defined, then ChatML."""
    return "".join(f"{{% if {name} is defined %}}[{name}={{{{ {name} }}}}]{{% endif %}}" for name in names) + CHATML


def _arc_and_transformers(directory: Path, tools: tuple[ToolSpec, ...] = ()) -> tuple[str, str]:
    fmt = TemplateFormat(qwen3_tokenizer(), load_template_source(str(directory)), {}, tools, "S", "G",
                         "tools" if tools else "text")
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "G"}]
    expected, _ = transformers_prompt(directory, messages, [tool.openai() for tool in tools] or None)
    return fmt.render(messages), expected


_NAMES = (*templates.SPECIAL_TOKEN_KEYS, "image_token", "boi_token", "audio_token", "add_bos_token")
_NULLS = dict.fromkeys(templates.SPECIAL_TOKEN_KEYS)  # every named token set, to null (a left-out one the template
# names is refused)


@needs_qwen3
def test_model_specific_special_tokens_are_template_variables_as_in_transformers(tmp_path: Path) -> None:
    """Top-level ``*_token`` keys holding a string or an AddedToken, and the entries of an ``extra_special_tokens``
    object (over them), are template variables in transformers 5 (Gemma 3's boi_token, image_token); a key holding
    anything else (``add_bos_token``: a boolean) is not."""
    config = {**_NULLS, "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "image_token": "<|image_pad|>", "add_bos_token": False,
              "boi_token": {"__type": "AddedToken", "content": "<|vision_start|>", "special": True},
              "audio_token": "<|box_start|>", "extra_special_tokens": {"audio_token": "<|box_end|>"},
              "chat_template": _shows(_NAMES)}
    ours, expected = _arc_and_transformers(_qwen3_variant(tmp_path, "specific", config))
    assert ours == expected
    assert expected.startswith("[eos_token=<|im_end|>][image_token=<|image_pad|>][boi_token=<|vision_start|>]"
                               "[audio_token=<|box_end|>]<|im_start|>")


@needs_qwen3
def test_a_named_token_the_config_leaves_out_is_refused_where_the_template_names_it(tmp_path: Path) -> None:
    """transformers 5 gives a template the resolved tokenizer class's default for a named token tokenizer_config.json
    leaves out (Qwen2Tokenizer: <|endoftext|> for eos, unk and pad; the class may come from config.json's
    model_type), none for one set to null: the core does not guess it and refuses a template that names such a
    key (a whole word: ``add_bos_token`` does not name ``bos_token``); one that names none is served (review s11
    h3 F1: a defaults table keyed by tokenizer_class over-counted mistral and phi3 directories)."""
    from transformers import AutoTokenizer  # the class named in the config, as vLLM loads it

    config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "chat_template": _shows(_NAMES)}
    directory = _qwen3_variant(tmp_path, "qwen2", config)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "G"}]
    served = AutoTokenizer.from_pretrained(str(directory)).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)
    assert served.startswith("[eos_token=<|endoftext|>][unk_token=<|endoftext|>][pad_token=<|endoftext|>]<|im")
    with pytest.raises(ConfigError, match="reads eos_token, which .* does not set.* does not guess"):
        load_template_source(str(directory))
    named = {**config, "eos_token": "<|im_end|>", "unk_token": None, "pad_token": "<|endoftext|>",
             "sep_token": None, "cls_token": None, "mask_token": None}
    ours, expected = _arc_and_transformers(_qwen3_variant(tmp_path, "named", named))
    assert ours == expected and expected.startswith("[eos_token=<|im_end|>][pad_token=<|endoftext|>]<|im")
    quiet = _qwen3_variant(tmp_path, "quiet", {"tokenizer_class": "Qwen2Tokenizer",  # no named token set
                                               "chat_template": "{{ add_bos_token }}" + CHATML})
    assert load_template_source(str(quiet)).special_tokens == ()  # names no named token: served


@needs_qwen3
def test_template_files_replace_the_configs_templates_as_in_transformers(tmp_path: Path) -> None:
    """With chat_template.jinja or additional_chat_templates/ present, transformers ignores tokenizer_config.json's
    chat_template (a named tool_use there included); a directory with only a tool_use template serves requests with
    tools only."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "chat_template": [{"name": "default", "template": "CONFIG" + CHATML},
                                {"name": "tool_use", "template": "CONFIG-TOOLS" + CHATML}]}
    tools = (ToolSpec("read_file", "Read a file."),)
    directory = _qwen3_variant(tmp_path, "files", config, {"chat_template.jinja": "FILE" + CHATML})
    ours, expected = _arc_and_transformers(directory, tools)
    assert ours == expected and expected.startswith("FILE<|im_start|>")
    only_tools = _qwen3_variant(tmp_path, "only_tools", config,
                                {"additional_chat_templates/tool_use.jinja": "EXTRA" + CHATML})
    ours, expected = _arc_and_transformers(only_tools, tools)
    assert ours == expected and expected.startswith("EXTRA<|im_start|>")
    with pytest.raises(ConfigError, match="only a 'tool_use' chat template"):
        TemplateFormat(qwen3_tokenizer(), load_template_source(str(only_tools)), {}, (), "S", "G", "text")


@needs_qwen3
def test_the_legacy_special_tokens_map_is_read_as_transformers_reads_it(tmp_path: Path) -> None:
    """Without ``added_tokens_decoder`` in tokenizer_config.json, transformers takes special_tokens_map.json's
    entries over the config's (its objects as AddedTokens); with it, the file is ignored."""
    config = {**_NULLS, "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "chat_template": _shows(_NAMES)}
    token_map = json.dumps({"bos_token": {"content": "<|endoftext|>", "lstrip": False},
                            "eos_token": "<|endoftext|>", "image_token": "<|image_pad|>"})
    legacy = _qwen3_variant(tmp_path, "legacy", config, {"special_tokens_map.json": token_map})
    ours, expected = _arc_and_transformers(legacy)
    assert ours == expected
    assert expected.startswith("[bos_token=<|endoftext|>][eos_token=<|endoftext|>][image_token=<|image_pad|>]<|im")
    assert QWEN3 is not None
    decoder = json.loads((QWEN3 / "tokenizer_config.json").read_text(encoding="utf-8"))["added_tokens_decoder"]
    modern = _qwen3_variant(tmp_path, "modern", {**config, "added_tokens_decoder": decoder},
                            {"special_tokens_map.json": token_map})
    ours, expected = _arc_and_transformers(modern)
    assert ours == expected and expected.startswith("[eos_token=<|im_end|>]<|im_start|>")
    # a list of extra_special_tokens in the map leaves the config's object of them (review s11 h3 F2)
    listed = _qwen3_variant(tmp_path, "listed", {**config, "extra_special_tokens": {"audio_token": "<|box_end|>"}},
                            {"special_tokens_map.json": json.dumps({"extra_special_tokens": ["<|video_pad|>"]})})
    ours, expected = _arc_and_transformers(listed)
    assert ours == expected and "[audio_token=<|box_end|>]" in expected


def test_split_special_tokens_and_apply_chat_template_parameters_are_refused(tmp_path: Path) -> None:
    directory = _model_dir(tmp_path, CHATML, eos_token="<|im_end|>", split_special_tokens=True)
    with pytest.raises(ConfigError, match="sets split_special_tokens"):
        load_template_source(directory)
    for name in ("continue_final_message", "return_dict", "padding", "max_length", "truncation",
                 "return_assistant_tokens_mask", "tokenizer_kwargs"):
        with pytest.raises(ConfigError, match=f"'{name}' is a parameter of the server's apply_chat_template"):
            templates.request_template_kwargs({"chat_template_kwargs": {name: True}})


@pytest.mark.parametrize(("template", "expected"), [
    (CHATML, "string"),
    ("{% for message in messages %}{% for part in message.content %}{{ part.text }}{% endfor %}{% endfor %}",
     "openai"),
    ("{% for m in messages[1:] %}{% for part in m['content']|selectattr('type', 'equalto', 'text') %}x{% endfor %}"
     "{% endfor %}", "openai"),
    ("{% set rest = messages|reverse %}{% for m in rest %}{% for p in m.content %}{% endfor %}{% endfor %}", "openai"),
    ("{% macro show(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
     "{% for message in messages %}{{ show(message.content) }}{% endfor %}", "openai"),
    ("{% macro show(c) %}{% for p in c %}{{ p }}{% endfor %}{% endmacro %}"
     "{% for message in messages %}{{ show(message.role) }}{% endfor %}", "string"),
    ("{% for message in messages %}{% set content = message.content %}{% for p in content %}{% endfor %}{% endfor %}",
     "openai"),
    ("{% for message in messages %}{% for p in message.tool_calls %}{% endfor %}{% endfor %}", "string"),
    ("{% for i, message in messages|batch(1) %}{% for p in message.content %}{% endfor %}{% endfor %}", "string"),
])
def test_the_content_format_is_detected_as_vllm_detects_it(template: str, expected: str) -> None:
    """vLLM 0.32 hands text parts to a template that loops over a message's content (directly, through an alias of
    the message list, a macro's parameter or a variable named content) and strings otherwise; a target it cannot
    read (a tuple over the message list) leaves its default, strings. Checked against vLLM's own
    ``_detect_content_format`` on 523 templates (review s11): 0 differences."""
    tree = templates._environment().parse(template)
    assert templates.content_format(tree) == expected


@needs_qwen3
def test_qwen3s_template_gets_strings() -> None:
    assert QWEN3 is not None
    source = load_template_source(str(QWEN3)).source
    assert source is not None
    assert templates.content_format(templates._environment().parse(source)) == "string"


def _split_as_before(text: str, mark: str, messages: int) -> tuple[str, list[str], str] | int:
    """`ChatTemplate.render_parts`' split before `templates.split_rendering` (issue 28): the reference."""
    piece_mark, end_mark = mark + "P" + mark, mark + "E" + mark
    body, ends, tail = text.rpartition(end_mark)
    parts = body.split(piece_mark)
    if not ends or end_mark in body or len(parts) != messages + 1:
        return len(parts) - 1
    return parts[0], parts[1:], tail


def test_split_rendering_is_the_split_at_three_character_marks_on_every_short_text() -> None:
    """Every text of up to 7 characters over the mark, "P", "E" and a letter, and every text of up to 6 of the
    pieces mark, "P", "E", "a", piece mark and end mark (stray marks, "E" alone between two piece marks, marks cut
    or overlapping), for 0-4 messages: the same pieces, or the same refusal count, as splitting at the whole marks
    (also for the marks "P" and "E", and a two-character mark, which takes the old way)."""
    import itertools

    checked = 0
    for mark in ("\x00", "\ufdd0", "P", "E", "\x00\x01"):
        texts: set[str] = set()
        for length in range(8 if mark in ("\x00", "\ufdd0") else 6):
            texts.update("".join(letters) for letters in itertools.product((mark, "P", "E", "a"), repeat=length))
        pieces = (mark, "P", "E", "a", mark + "P" + mark, mark + "E" + mark)
        for length in range(7 if mark in ("\x00", "\ufdd0") else 5):
            texts.update("".join(chosen) for chosen in itertools.product(pieces, repeat=length))
        for text in texts:
            for messages in range(5):
                assert templates.split_rendering(text, mark, messages) == _split_as_before(text, mark, messages), (
                    text, mark, messages)
                checked += 1
    assert checked > 600_000
