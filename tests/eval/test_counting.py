"""The evaluation layer's one counting seam (arc_eval.counting) against an independent render-and-encode.

The oracle is transformers' own ``apply_chat_template`` over vLLM's reading of the request, then the model's
tokenizer (proofs_check.shared_data.transformers_prompt, written apart from arc_ref.templates). Every prompt shape
the eval sends is drawn: a baseline's transcript in text mode (prefix, memory messages, turns), in tool mode (calls
and the results answering them, a reply without a call, a call to a tool not offered), a condensing request, a
bare probe. On a model directory made here (always) and on Qwen3's real files (skipped when absent).
"""

from __future__ import annotations

import functools

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arc_ref.errors import ConfigError
from arc_ref.message import ToolCall
from arc_eval.counting import PromptCounter, TemplateCounter, make_counter
from arc_eval.loop import run_task
from arc_eval.methods import make_method, method_names
from arc_eval.protocol import TASK_TOOL_SPECS, system_prompt, tool_system_prompt
from arc_eval.execute import make_backend
from arc_eval.plan import RunPlan
from arc_eval.run_spec import RunSpec
from arc_eval.tasks.nih import make_nih_tasks
from arc_eval.types import ChatReply, ChatRequest, Message
from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir, transformers_prompt
from tests.eval.helpers import tool_model_dir

QWEN3 = qwen3_dir()
needs_qwen3 = pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tool_model_dir(tmp_path_factory.mktemp("tiny") / "model"))


def oracle(directory: Path, messages: list[Message], tools: tuple[Any, ...]) -> int:
    listing = [tool.openai() for tool in tools] or None
    return transformers_prompt(directory, [message.as_json() for message in messages], listing,
                               enable_thinking=False)[1]


_TEXT = st.one_of(
    st.text(alphabet="ab \n\t§é中😀{}\":,`=", max_size=40),
    st.sampled_from(["", "\n", "Observation (rc=0) of `cat a.txt`:\nNEEDLE=X", "Thought: t\nAction: ls",
                     "<think>r</think>c", "<tool_response>x</tool_response>", "  \n y"]),
)
_ARGUMENTS = st.one_of(
    st.dictionaries(st.sampled_from(["file", "page", "id", "é"]), st.text(max_size=8), max_size=2).map(
        lambda d: json.dumps(d, ensure_ascii=False)),
    st.sampled_from(["", "not json", '{"file":"a.txt"}', "null"]),
)


@st.composite
def transcripts(draw: st.DrawFn) -> tuple[list[Message], bool]:
    """A prompt as a baseline builds one: system, goal, memory messages (user), then turns; in tool mode a turn
    is an assistant message with at most one call and the tool result answering it."""
    tool_mode = draw(st.booleans())
    messages = [Message("system", draw(_TEXT)), Message("user", draw(_TEXT))]
    messages += [Message("user", draw(_TEXT)) for _ in range(draw(st.integers(0, 2)))]
    for number in range(draw(st.integers(0, 4))):
        if not tool_mode:
            messages.append(Message("assistant", draw(_TEXT)))
            if draw(st.booleans()):
                messages.append(Message("user", draw(_TEXT)))
            continue
        kind = draw(st.sampled_from(["call", "call", "none", "unknown"]))
        if kind == "none":
            messages.append(Message("assistant", draw(_TEXT)))
            continue
        name = draw(st.sampled_from([tool.name for tool in TASK_TOOL_SPECS])) if kind == "call" else "rm_rf"
        call = ToolCall(f"call_{number}", name, draw(_ARGUMENTS))
        messages.append(Message("assistant", draw(_TEXT), (call,)))
        if draw(st.integers(0, 5)):  # a last call may still wait for its result
            messages.append(Message("tool", draw(_TEXT), tool_call_id=call.call_id))
    return messages, tool_mode


@functools.lru_cache(maxsize=1)
def _qwen3_counter() -> TemplateCounter:
    """One counter of the Qwen3 directory for every example (the run builds one per run likewise)."""
    counter = make_counter(f"hf-dir:{QWEN3}", "template")
    assert isinstance(counter, TemplateCounter)
    return counter


def check_counts(counter: TemplateCounter, directory: Path, messages: list[Message], tool_mode: bool) -> None:
    tools = TASK_TOOL_SPECS if tool_mode else ()
    expected = oracle(directory, messages, tools)
    assert counter.count(messages, tools) == expected
    assert counter.tokenizer.count(counter.render(messages, tools)) == expected
    # the bound used for budgeting holds for every message wherever it sits
    whole = counter.count(messages, tools)
    for position in range(2, len(messages)):
        assert counter.message_tokens(messages[position], tools) <= whole


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts())
def test_counts_equal_an_independent_render_and_encode_on_a_model_made_here(
        tiny_model: Path, drawn: tuple[list[Message], bool]) -> None:
    counter = TemplateCounter(f"hf-dir:{tiny_model}")
    check_counts(counter, tiny_model, *drawn)


@needs_qwen3
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts())
def test_counts_equal_an_independent_render_and_encode_under_qwen3(drawn: tuple[list[Message], bool]) -> None:
    assert QWEN3 is not None
    check_counts(_qwen3_counter(), QWEN3, *drawn)  # type: ignore[arg-type]


def test_condensing_requests_and_probes_are_rendered_whole(tiny_model: Path) -> None:
    counter = TemplateCounter(f"hf-dir:{tiny_model}")
    for messages in ([Message("system", "SUMMARY REQUEST"), Message("user", "Task:\nfold these turns " * 30)],
                     [Message("user", "Reply with the word OK.")]):
        assert counter.count(messages) == oracle(tiny_model, messages, ())
    assert counter.generation_prompt_tokens == counter.tokenizer.count("<|im_start|>assistant\n")


def test_a_break_in_the_count_is_seen(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The property can fail: a counter that forgets the tool listing is caught by the oracle."""
    counter = TemplateCounter(f"hf-dir:{tiny_model}")
    messages = [Message("system", "s"), Message("user", "goal"), Message("user", "memory")]
    assert counter.count(messages, TASK_TOOL_SPECS) == oracle(tiny_model, messages, TASK_TOOL_SPECS)
    original = counter._format
    monkeypatch.setattr(counter, "_format", lambda system, goal, tools, mode: original(system, goal, (), mode))
    assert counter.count(messages, TASK_TOOL_SPECS) != oracle(tiny_model, messages, TASK_TOOL_SPECS)


def test_chatml_counts_text_mode_only() -> None:
    counter = PromptCounter("bytes", "chatml")
    call = ToolCall("c", "ls", "{}")
    with pytest.raises(ConfigError, match="tool-calling mode counts prompts with the served model's own chat"):
        counter.count([Message("user", "x")], TASK_TOOL_SPECS)
    with pytest.raises(ConfigError, match="--tokenizer DIR"):
        counter.message_tokens(Message("assistant", "x", (call,)))
    assert counter.render([Message("user", "x")]) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_a_non_directory_tokenizer_is_refused_for_the_template() -> None:
    with pytest.raises(ConfigError, match="needs the tokenizer 'hf-dir:DIR'"):
        TemplateCounter("o200k_base")


class Recording:
    """Wraps the run's backend; keeps every request and its reply (what was sent, and its count)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent: list[tuple[ChatRequest, ChatReply]] = []

    async def complete(self, request: ChatRequest) -> ChatReply:
        reply: ChatReply = await self.inner.complete(request)
        self.sent.append((request, reply))
        return reply

    async def count_prompt_tokens(self, messages: Any, tools: Any = ()) -> int:
        return int(await self.inner.count_prompt_tokens(messages, tools))


@pytest.mark.parametrize("tool_mode", [False, True])
def test_every_methods_prompt_is_counted_as_sent(tiny_model: Path, tool_mode: bool, tmp_path: Path) -> None:
    """All six methods through the loop with the scripted backend, counting with the model directory: each prompt
    sent (messages and tools) counts what the oracle counts, ARC's view counts the same, and no prompt exceeds L."""
    spec = RunSpec.build(task_kind="nih", methods=method_names(), seeds=(3,), out=tmp_path, tasks_per_seed=1,
                         tokenizer=str(tiny_model), tool_calling=tool_mode, context_limit=24000, max_tokens=4096,
                         rag_retriever="bm25")
    spec.validate()
    plan = RunPlan(spec)
    run_settings = plan.settings(spec)
    task = make_nih_tasks(3, 1)[0]
    for name in method_names():
        backend = Recording(make_backend(spec, plan.counter))
        method = make_method(name, run_settings)
        views: list[int] = []
        if name == "arc":
            original = method.prompt

            async def prompt(aux: Any) -> Any:
                messages = await original(aux)
                views.append(method.prompt_tokens())  # type: ignore[attr-defined]
                return messages

            method.prompt = prompt  # type: ignore[method-assign]
        asyncio.run(run_task(task, method, backend, settings=run_settings, max_steps=12, seed=3))
        assert backend.sent, name
        for request, reply in backend.sent:
            assert reply.prompt_tokens == oracle(tiny_model, list(request.messages), request.tools), name
            assert reply.prompt_tokens <= spec.context_limit - spec.max_tokens
            assert bool(request.tools) == (tool_mode and request.tags["purpose"] == "agent")
        agent = [reply.prompt_tokens for request, reply in backend.sent if request.tags["purpose"] == "agent"]
        if name == "arc":
            assert views == agent
        first = backend.sent[0][0]
        assert first.messages[0].content.startswith((tool_system_prompt() if tool_mode else system_prompt())[:60])
        if tool_mode:
            assert any(message.tool_calls for request, _ in backend.sent for message in request.messages)
            assert any(message.tool_call_id for request, _ in backend.sent for message in request.messages)


_EDGE_TEXT = st.text(alphabet="ab \n\t§é中😀<|>[]'s09.-", max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokenizer=st.sampled_from(["o200k_base", "cl100k_base", "bytes"]),
    chat_format=st.sampled_from(["chatml", "qwen3-nothink"]),
    role=st.sampled_from(["system", "user", "assistant"]),
    head=_EDGE_TEXT,
    middle=st.text(alphabet="ab \n§é中😀", max_size=600),
    tail=_EDGE_TEXT,
)
def test_a_message_counted_from_its_contents_count_is_its_rendered_count(
    tokenizer: str, chat_format: str, role: str, head: str, middle: str, tail: str
) -> None:
    """note_content_tokens derives a message's count from its content's (the frame summed where the boundary rule
    vouches, an edge recounted where it does not): it is the count of the rendered message, long content or short."""
    counter = PromptCounter(tokenizer, chat_format)
    content = head + middle + tail
    message = Message(role, content)
    counter.note_content_tokens(message, counter.tokenizer.count(content))
    expected = counter.tokenizer.count(counter.chat_format.render_message(role, content))
    assert counter.message_tokens(message) == expected
    assert counter.count([message]) == expected + counter.generation_prompt_tokens


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokenizer=st.sampled_from(["o200k_base", "cl100k_base", "bytes"]),
    chat_format=st.sampled_from(["chatml", "qwen3-nothink"]),
    role=st.sampled_from(["system", "user", "assistant"]),
    content=st.text(alphabet="ab \n\t§é中😀<|>[]'s09.-", max_size=40),
)
def test_a_contents_count_taken_from_its_messages_is_its_own(
    tokenizer: str, chat_format: str, role: str, content: str
) -> None:
    """content_tokens takes the frame's tokens off the message's count only where no token crosses the frame's
    junctions with the content: when it answers, it answers the content's own count."""
    counter = PromptCounter(tokenizer, chat_format)
    known = counter.content_tokens(Message(role, content))
    assert known is None or known == counter.tokenizer.count(content)
    observation = Message("user", "Observation (rc=0) of `cat a.txt`:\nNEEDLE=X\n")
    assert counter.content_tokens(observation) == counter.tokenizer.count(observation.content)  # the common case


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokenizer=st.sampled_from(["o200k_base", "cl100k_base", "bytes"]),
    thought=st.text(alphabet="ab \n§é中<>[]'s09.-`", max_size=20),
    action=st.text(alphabet="ab §é中<>[]'s09.-", max_size=12),
    text=st.text(alphabet="ab \n\t§é中😀<|>[]'s09.-", max_size=400),
    returncode=st.integers(-3, 300),
)
def test_a_folded_turn_counted_from_its_observations_count_is_its_rendered_count(
    tokenizer: str, thought: str, action: str, text: str, returncode: int
) -> None:
    """A condensing request counts each turn it folds from the observation message's count (its content's tokens)
    and the head's: the figure is the count of the rendered turn."""
    from arc_eval.methods.base import MethodSettings, Turn, assistant_text, observation_text
    from arc_eval.methods.llm_summary import LlmSummaryMethod, render_turn
    from arc_eval.types import Observation

    method = LlmSummaryMethod(MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter(tokenizer)))
    turn = Turn(Message("assistant", assistant_text(thought, action)),
                Message("user", observation_text(action, Observation(text, returncode))), action, text, returncode)
    assert turn.observation is not None
    method.counter.message_tokens(turn.observation)  # as the transcript counted it
    rendered = render_turn(turn)
    assert method._turn_tokens_in_request(turn, rendered) == method.counter.tokenizer.count(rendered)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tokenizer=st.sampled_from(["o200k_base", "cl100k_base", "bytes"]),
    chunks=st.lists(st.text(alphabet="ab \n\t§é中😀<|>[]'s09.-`", max_size=700), min_size=1, max_size=6),
    data=st.data(),
)
def test_retrieved_memory_counted_from_its_chunks_is_its_rendered_count(
    tokenizer: str, chunks: list[str], data: st.DataObject
) -> None:
    """rag_memory counts its retrieved-memory text from its parts, each chunk counted once whatever its rank:
    the figure is the count of the text, for every tokenizer, hits in any order, chunks repeated across calls."""
    from arc_eval.methods.base import MethodSettings
    from arc_eval.methods.rag_memory import RETRIEVED_HEADER, RagMemoryMethod, RagOptions

    method = RagMemoryMethod(MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter(tokenizer),
                                            method_options={"rag_memory": RagOptions(rag_retriever="bm25")}))
    method.chunks = chunks
    for _ in range(3):
        hits = data.draw(st.lists(st.integers(0, len(chunks) - 1), min_size=1, max_size=3, unique=True))
        text = f"{RETRIEVED_HEADER}\n" + "\n".join(f"[{rank}] {chunks[index]}" for rank, index in enumerate(hits, 1))
        assert method.retrieved_tokens(hits) == method.counter.tokenizer.count(text)
