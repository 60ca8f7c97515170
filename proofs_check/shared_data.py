"""Where the real material lives: ``../shared/data`` beside the repository (never copied in).

``ARC_SHARED_DATA`` overrides the location (for a checkout whose parent has no ``shared/``, e.g. a git
worktree). Checks that need the material skip with a message naming the path when it is absent.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA_ENV = "ARC_SHARED_DATA"
QWEN3_NAME = "qwen3-tokenizer"
# How the trace vectors name the Qwen3 directory: relative to the repository root, where replay runs.
QWEN3_VECTOR_PATH = f"../shared/data/{QWEN3_NAME}"


def shared_data_dir() -> Path:
    override = os.environ.get(SHARED_DATA_ENV)
    return Path(override).resolve() if override else (REPO.parent / "shared" / "data").resolve()


def qwen3_dir() -> Path | None:
    """The Qwen3 tokenizer directory (tokenizer.json, tokenizer_config.json, chat_template.jinja), if present."""
    path = shared_data_dir() / QWEN3_NAME
    return path if (path / "tokenizer.json").is_file() else None


def json_strings(value: object) -> Iterator[str]:
    """Every string value inside a decoded JSON value (objects' values, arrays' items), in order; keys left out."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


QWEN3_ABSENT = (
    f"the Qwen3 tokenizer directory is absent: {shared_data_dir() / QWEN3_NAME} (real material lives in"
    f" ../shared/data beside the repository; set {SHARED_DATA_ENV} to point elsewhere)"
)


@functools.lru_cache(maxsize=None)
def qwen3_with_template(template: str, prefix: str) -> str:
    """A model folder made once per template: Qwen3's tokenizer.json beside a tokenizer_config.json whose chat
    template is ``template``, in a temporary folder named ``prefix...``, removed when the process ends."""
    qwen3 = qwen3_dir()
    assert qwen3 is not None
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, directory, True)
    (directory / "tokenizer.json").write_bytes((qwen3 / "tokenizer.json").read_bytes())
    config = json.loads((qwen3 / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = template
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(directory)


@functools.lru_cache(maxsize=2)
def transformers_tokenizer(directory: str) -> Any:
    """transformers' own tokenizer of a model directory (the independent oracle of the template tests)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(directory)


def vllm_conversation(messages: Sequence[Mapping[str, Any]], text_parts: bool = False) -> list[dict[str, Any]]:
    """The oracle's own reading of vLLM's preprocessing (written here, apart from arc_ref.templates):
    content None -> "", a call's arguments JSON-decoded ({} when not valid JSON or not a JSON object: vLLM 0.32
    coerces "[]", "42", '"text"' to {} too), tool_call_id kept. ``text_parts`` (a template vLLM finds looping over
    a message's content): every content but a tool result's as ``[{"type": "text", "text": ...}]``, null as ``[]``."""
    conversation = []
    for message in messages:
        text = message.get("content")
        shown: Any = text or ""
        if text_parts and message["role"] != "tool":
            shown = [] if text is None else [{"type": "text", "text": text}]
        converted: dict[str, Any] = {"role": message["role"], "content": shown}
        if message.get("tool_calls"):
            converted["tool_calls"] = []
            for call in message["tool_calls"]:
                try:
                    arguments = json.loads(call["function"]["arguments"])
                except json.JSONDecodeError:
                    arguments = {}
                if not isinstance(arguments, dict):
                    arguments = {}
                converted["tool_calls"].append({**call, "function": {**call["function"], "arguments": arguments}})
        if "tool_call_id" in message:
            converted["tool_call_id"] = message["tool_call_id"]
        conversation.append(converted)
    return conversation


def vllm_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """vLLM 0.32's pydantic dump of OpenAI tools, step by step: the tool's ``defer_loading`` copied into its
    function's when that is unset (`ChatCompletionToolsParam._propagate_defer_loading`), then every field dumped,
    a missing description or parameters as None, ``strict`` and ``defer_loading`` dropped where None (both
    serializers)."""
    if not tools:
        return None
    dumped = []
    for tool in tools:
        given = tool["function"]
        function: dict[str, Any] = {"name": given["name"], "description": given.get("description"),
                                    "parameters": given.get("parameters"), "strict": given.get("strict"),
                                    "defer_loading": given.get("defer_loading")}
        if tool.get("defer_loading") is not None and function["defer_loading"] is None:
            function["defer_loading"] = tool["defer_loading"]
        for flag in ("strict", "defer_loading"):
            if function[flag] is None:
                del function[flag]
        entry: dict[str, Any] = {"type": "function", "function": function, "defer_loading": tool.get("defer_loading")}
        if entry["defer_loading"] is None:
            del entry["defer_loading"]
        dumped.append(entry)
    return dumped


def transformers_prompt(directory: Path, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]] | None, text_parts: bool = False,
                        **template_kwargs: Any) -> tuple[str, int]:
    """What vLLM renders for an OpenAI request and how many tokens it counts, by transformers' own code
    (``text_parts``: `vllm_conversation`)."""
    tokenizer = transformers_tokenizer(str(directory))
    text = tokenizer.apply_chat_template(
        vllm_conversation(messages, text_parts), tools=vllm_tools(tools), tokenize=False, add_generation_prompt=True,
        **template_kwargs,
    )
    return str(text), len(tokenizer.encode(text, add_special_tokens=False))


@contextlib.contextmanager
def replay_directory(needs: Sequence[str]) -> Iterator[str | None]:
    """A working directory in which the paths a trace vector needs resolve, or None (the reason in the caller).

    The repository root when ``../shared`` is beside it; else, with ``ARC_SHARED_DATA`` set, a temporary
    directory whose ``../shared/data`` points there. The previous working directory is restored afterwards.
    """
    previous = os.getcwd()
    try:
        os.chdir(REPO)
        if all(Path(path).exists() for path in needs):
            yield str(REPO)
            return
        override = os.environ.get(SHARED_DATA_ENV)
        if not override:
            yield None
            return
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "shared").mkdir()
            (Path(scratch) / "shared" / "data").symlink_to(Path(override).resolve())
            (Path(scratch) / "repo").mkdir()
            os.chdir(Path(scratch) / "repo")
            yield str(Path(scratch) / "repo") if all(Path(path).exists() for path in needs) else None
    finally:
        os.chdir(previous)
