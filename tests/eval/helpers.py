"""Small fakes shared by the tests of the evaluation layer (synthetic fixtures; no shared data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from arc_eval.types import Backend, ChatReply, ChatRequest, ContextOverflow, Message, Observation, Task
from tests.core.test_tokenizers import _train_tokenizer_json
from tests.core.test_tool_mode import TOOL_TEMPLATE


def tool_model_dir(directory: Path) -> str:
    """A model directory made here (a small trained tokenizer.json and a tool-capable chat template), for the
    template and tool-calling paths without ../shared/data."""
    directory.mkdir(parents=True, exist_ok=True)
    _train_tokenizer_json(directory / "tokenizer.json")
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOL_TEMPLATE}), encoding="utf-8")
    return str(directory)


def reply(text: str, prompt_tokens: int = 10) -> ChatReply:
    return ChatReply(
        content=text, prompt_tokens=prompt_tokens, completion_tokens=3, finish_reason="stop", latency_s=0.0
    )


class FakeBackend(Backend):
    """Answers with a function of the request; records every request it saw."""

    name = "fake"

    def __init__(self, answer: Callable[[ChatRequest], str | Exception]) -> None:
        self.answer = answer
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        result = self.answer(request)
        if isinstance(result, Exception):
            raise result
        return reply(result, prompt_tokens=len(request.messages))

    async def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        return len(messages)


class ScriptedReplies:
    """Agent replies in order (aux requests get 'summary text'); an Exception entry is raised."""

    def __init__(self, replies: Sequence[str | Exception]) -> None:
        self.replies = list(replies)
        self.index = 0

    def __call__(self, request: ChatRequest) -> str | Exception:
        if request.tags.get("purpose") != "agent":
            return "summary text"
        item = self.replies[min(self.index, len(self.replies) - 1)]
        self.index += 1
        return item


class FakeSandbox:
    """Files answer `cat NAME`; `submit X` is accepted when X is not empty."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.actions: list[str] = []

    def run(self, action: str) -> Observation:
        self.actions.append(action)
        word, _, rest = action.partition(" ")
        if word == "submit":
            if not rest.strip():
                return Observation("empty", 2)
            return Observation(f"submitted: {rest}", 0, submitted=rest.strip())
        if word == "cat" and rest in self.files:
            return Observation(self.files[rest], 0)
        return Observation(f"{word}: not found", 1)


def overflow() -> ContextOverflow:
    return ContextOverflow("This model's maximum context length is 100 tokens", prompt_tokens=120, limit=100)


def tiny_task(kind: str = "nih", files: dict[str, str] | None = None) -> Task:
    return Task(task_id="t-1", kind=kind, goal="Read a.txt then submit.", files=files or {"a.txt": "alpha"},
                answer="never-read", meta={"size": 1})


def exact_scorer(task: Task, submission: str, reply: str = "") -> tuple[bool, str | None]:
    return submission == "NEEDLE=OK", submission


def openai_backend(urls: str | Sequence[str], model: str = "scripted", *, context_limit: int,
                   max_tokens: int = 4096, temperature: float = 0.0, tools: Sequence[Any] | None = None,
                   counter: Any = None, transport: Any = None, **settings: Any) -> Any:
    """An OpenAIBackend from flat settings, as the tests write them: each goes to its owner (``OpenAIOptions``, the
    flags; ``TransportTuning``, what no flag sets); ``tools`` (ToolSpecs or OpenAI JSON) are the probe's, in tool
    mode; ``counter`` defaults to o200k_base over Qwen3's no-think ChatML."""
    import attrs

    from arc_ref.config import parse_tools
    from arc_ref.options import option_names
    from arc_eval.backends.openai_backend import OpenAIBackend, OpenAIOptions
    from arc_eval.backends.transport import TransportTuning
    from arc_eval.counting import DEFAULT_TOKENIZER, make_counter
    from arc_eval.registry import BackendRun

    flags = set(option_names(OpenAIOptions))
    tuned = {attribute.name for attribute in attrs.fields(TransportTuning)}
    unknown = sorted(set(settings) - flags - tuned)
    if unknown:
        raise TypeError(f"unknown OpenAIBackend setting(s) {unknown}")
    options = OpenAIOptions(base_urls=tuple([urls] if isinstance(urls, str) else urls),
                            **{name: value for name, value in settings.items() if name in flags})
    tuning = TransportTuning(**{name: value for name, value in settings.items() if name in tuned})
    counter = counter if counter is not None else make_counter(DEFAULT_TOKENIZER, "qwen3-nothink")
    offered = None if tools is None else tuple(
        tool for tool in (parse_tools([tool for tool in tools if isinstance(tool, dict)])
                          + tuple(tool for tool in tools if not isinstance(tool, dict))))
    run = BackendRun(model=model, context_limit=context_limit, max_tokens=max_tokens, temperature=temperature,
                     counter=counter, tool_calling=bool(offered))
    return OpenAIBackend(options, run, tuning=tuning, transport=transport, tools=offered)
