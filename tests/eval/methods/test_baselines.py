"""The shared method definitions and the five baselines (synthetic transcripts, fake aux calls)."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Sequence

import pytest

from arc_ref.chat import CHATML
from arc_ref.errors import ConfigError
from arc_ref.message import ToolCall
from arc_ref.text import halving_lengths
from arc_ref.tokenizers import get_tokenizer
from arc_eval.counting import PromptCounter, make_counter
from arc_eval.methods.rag_memory import RagOptions
from arc_eval.methods import make_method, method_names
from arc_eval.registry import highlighted_method
from arc_eval.methods.base import (
    Method,
    MethodEvents,
    MethodSettings,
    TranscriptMethod,
    short_observations_message,
)
from arc_eval.methods.llm_summary import LlmSummaryMethod
from arc_eval.methods.rag_memory import (
    BM25S_TOKEN_PATTERN,
    RETRIEVED_HEADER,
    Bm25Retriever,
    RagMemoryMethod,
    chunk_text,
    cuda_available,
    embeddings_available,
    resolve_retriever,
)
from arc_eval.methods.structured_state import STATE_KEYS, StructuredStateMethod, parse_state
from arc_eval.protocol import STATE_REQUEST_HEADER, SUMMARY_REQUEST_HEADER
from arc_eval.types import ChatReply, ContextOverflow, Message, Observation

from ..helpers import reply, tool_model_dir

BASELINES = tuple(name for name in method_names() if name != highlighted_method())  # the five baselines
SETTINGS = MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter("bytes"), method_options={"rag_memory": RagOptions(rag_retriever="bm25")})


class AuxRecorder:
    """An AuxCaller that answers summaries and states and remembers what it was asked."""

    def __init__(self, answer: str | None = None, overflow_over: int | None = None) -> None:
        self.requests: list[tuple[tuple[Message, ...], str]] = []
        self.answer = answer
        self.overflow_over = overflow_over

    async def __call__(self, messages: Sequence[Message], purpose: str) -> ChatReply:
        self.requests.append((tuple(messages), purpose))
        size = sum(len(message.content) for message in messages)
        if self.overflow_over is not None and size > self.overflow_over:
            raise ContextOverflow("maximum context length", prompt_tokens=size, limit=self.overflow_over)
        if self.answer is not None:
            return reply(self.answer)
        if purpose == "state":
            return reply(json.dumps({"task": "t", "done": [f"turn {len(self.requests)}"], "facts": {"K": "V"}}))
        return reply(f"summary #{len(self.requests)}")


def run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def feed(method: Method, turns: int, size: int = 600, start: int = 0) -> None:
    for index in range(start, start + turns):
        action = f"cat file_{index:02d}.txt"
        method.record_agent(f"reading file {index}", action)
        method.record_observation(action, Observation(f"line {index}\n" + "x" * size, 0))


def prompt(method: Method, aux: AuxRecorder | None = None) -> tuple[Message, ...]:
    return run(method.prompt(aux or AuxRecorder()))  # type: ignore[return-value]


def test_settings_validate_budgets() -> None:
    assert SETTINGS.usable_tokens == 3072
    with pytest.raises(ConfigError):
        MethodSettings(context_limit=4096, max_tokens=4096)
    with pytest.raises(ConfigError):
        MethodSettings(context_limit=0)
    with pytest.raises(ConfigError):
        settings = MethodSettings(context_limit=100, max_tokens=10, extra={"recent_fraction": 1.5})
        settings.fraction("recent_fraction", 0.2)


@pytest.mark.parametrize("tokenizer", ["bytes", "o200k_base"])
def test_prompt_counter_matches_the_whole_rendered_prompt(tokenizer: str) -> None:
    counter = PromptCounter(tokenizer, "chatml")
    rng = random.Random(7)
    alphabet = "abc xyz\n<|>:{}§é.-_"
    for _ in range(30):
        messages = [
            Message(rng.choice(["system", "user", "assistant"]),
                    "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))))
            for _ in range(rng.randint(1, 6))
        ]
        whole = CHATML.render([(message.role, message.content) for message in messages])
        assert counter.count(messages) == get_tokenizer(tokenizer).count(whole)
    assert counter.count(messages) == counter.count(messages)  # cached counts stay exact


def test_make_method_names() -> None:
    assert method_names() == ("full_context", "sliding_window", "llm_summary", "structured_state", "rag_memory", "arc")
    for name in method_names():
        method = make_method(name, SETTINGS)
        assert method.name == name
    with pytest.raises(ConfigError, match="unknown method"):
        make_method("nope", SETTINGS)


@pytest.mark.parametrize("name", BASELINES)
def test_prefix_is_kept_and_turns_are_never_split(name: str) -> None:
    method = make_method(name, SETTINGS)
    method.begin("SYSTEM", "GOAL")
    aux = AuxRecorder()
    for round_ in range(6):
        feed(method, 3, start=3 * round_)
        if round_ % 2:
            run(method.compact("forced", aux))
        messages = prompt(method, aux)
        assert messages[0] == Message("system", "SYSTEM") and messages[1] == Message("user", "GOAL")
        for index, message in enumerate(messages):
            if message.role == "assistant":  # every kept agent turn is followed by its own observation
                action = message.content.split("Action: ", 1)[1]
                assert messages[index + 1].content.startswith(f"Observation (rc=0) of `{action}`:")


@pytest.mark.parametrize("name", [name for name in BASELINES if name != "full_context"])
def test_compacting_baselines_stay_within_the_usable_budget(name: str) -> None:
    method = make_method(name, SETTINGS)
    method.begin("SYSTEM", "GOAL")
    counter = PromptCounter("bytes", "chatml")
    events: list[MethodEvents] = []
    for _ in range(12):
        feed(method, 1, size=900, start=len(events))
        messages = prompt(method)
        events.append(method.drain_events())
        assert counter.count(messages) <= SETTINGS.usable_tokens
    assert any("proactive" in event.compactions for event in events)


def test_full_context_never_compacts() -> None:
    method = make_method("full_context", SETTINGS)
    method.begin("S", "G")
    feed(method, 10, size=900)
    assert run(method.compact("forced", AuxRecorder())) is False
    assert run(method.compact("reactive", AuxRecorder())) is False
    messages = prompt(method)
    assert len(messages) == 2 + 2 * 10  # the whole transcript, over budget
    assert method.drain_events().compactions == ()
    with pytest.raises(ValueError):
        run(method.compact("sometimes", AuxRecorder()))


def test_sliding_window_drops_older_turns_for_good() -> None:
    method = make_method("sliding_window", SETTINGS)
    method.begin("S", "G")
    feed(method, 6)
    assert run(method.compact("forced", AuxRecorder())) is True
    text = "\n".join(message.content for message in prompt(method))
    assert "line 5\n" in text and "line 0\n" not in text
    assert method.drain_events().compactions == ("forced",)
    single = make_method("sliding_window", SETTINGS)
    single.begin("S", "G")
    feed(single, 1)
    assert run(single.compact("forced", AuxRecorder())) is False  # the last turn is always kept


def test_llm_summary_asks_the_model_and_keeps_short_observations_verbatim() -> None:
    method = make_method("llm_summary", SETTINGS)
    method.begin("S", "GOAL")
    method.record_agent("short one", "ls")
    method.record_observation("ls", Observation("a.txt\nb.txt", 0))
    feed(method, 6)
    aux = AuxRecorder()
    assert run(method.compact("forced", aux)) is True
    assert aux.requests and all(purpose == "summary" for _, purpose in aux.requests)
    request = aux.requests[0][0]
    assert request[0].content.startswith(SUMMARY_REQUEST_HEADER) and "GOAL" in request[1].content
    text = "\n".join(message.content for message in prompt(method, aux))
    assert "summary #" in text
    assert "a.txt\nb.txt" in text  # < 500 characters: kept verbatim
    assert "line 0\n" not in text  # a long older observation lives only in the summary


def test_llm_summary_splits_requests_that_do_not_fit() -> None:
    settings = MethodSettings(context_limit=2048, max_tokens=512, counter=make_counter("bytes"))
    method = LlmSummaryMethod(settings)
    method.begin("S", "GOAL")
    feed(method, 8, size=700)
    aux = AuxRecorder()
    assert run(method.compact("reactive", aux)) is True
    assert len(aux.requests) >= 2  # older turns folded in several requests
    counter = PromptCounter("bytes", "chatml")
    assert all(counter.count(messages) <= settings.usable_tokens for messages, _ in aux.requests)
    overflowing = LlmSummaryMethod(settings)
    overflowing.begin("S", "GOAL")
    feed(overflowing, 4, size=700)
    assert run(overflowing.compact("forced", AuxRecorder(overflow_over=10))) is True
    assert overflowing.lost_batches >= 1  # the server kept refusing: counted, not crashed


def test_structured_state_schema_and_invalid_replies() -> None:
    parsed = parse_state('```json\n{"task": "x", "done": "one", "facts": {"a": 1}, "extra": 2}\n```')
    assert parsed is not None and tuple(parsed) == STATE_KEYS
    assert parsed["done"] == ["one"] and parsed["facts"] == {"a": "1"}
    assert parse_state("no json here") is None and parse_state("[1, 2]") is None
    method = StructuredStateMethod(SETTINGS)
    method.begin("S", "GOAL")
    feed(method, 5)
    aux = AuxRecorder()
    run(method.compact("forced", aux))
    assert aux.requests[0][0][0].content.startswith(STATE_REQUEST_HEADER)
    assert aux.requests[0][1] == "state"
    text = "\n".join(message.content for message in prompt(method, aux))
    assert '"K": "V"' in text
    feed(method, 5, start=5)
    run(method.compact("forced", AuxRecorder(answer="I refuse to write JSON")))
    assert method.invalid_replies >= 1 and method.state is not None and method.state["facts"] == {"K": "V"}


def test_chunk_text_covers_the_text_within_the_size() -> None:
    rng = random.Random(3)
    for _ in range(50):
        text = "\n".join("w" * rng.randint(0, 40) for _ in range(rng.randint(1, 30)))
        chunks = chunk_text(text, 37)
        assert all(len(chunk) <= 37 for chunk in chunks)
        assert "".join(chunks).replace("\n", "") == text.replace("\n", "")


def test_bm25_retriever_finds_the_matching_chunk() -> None:
    retriever = Bm25Retriever()
    retriever.add(["apples and pears", "the harbor lantern", "zebra stripes"])
    assert retriever.search(["where is the lantern", ""], 2)[0] == 1
    assert retriever.search(["the of and"], 2) == [0, 1]  # no content word: oldest first
    assert Bm25Retriever().search(["x"], 3) == []


def test_bm25_retriever_grown_chunk_by_chunk_scores_as_bm25s_rebuilt() -> None:
    """The incremental index gives bm25s' own float32 scores, float for float, after every addition."""
    import bm25s
    import numpy

    rng = random.Random(5)
    words = "alpha beta gamma needle the file error value key secret code line data of".split()
    for _ in range(40):
        retriever = Bm25Retriever()
        chunks: list[str] = []
        for _ in range(rng.randint(1, 5)):
            added = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(rng.randint(1, 6))]
            retriever.add(added)
            chunks.extend(added)
            rebuilt = bm25s.BM25()
            rebuilt.index([retriever.tokenize(chunk) or ["<empty>"] for chunk in chunks], show_progress=False)
            query = retriever.tokenize(" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))))
            if query:
                expected = rebuilt.get_scores(query)
                scored = retriever.scores(query)
                assert scored.dtype == expected.dtype and numpy.array_equal(scored, expected)


def test_bm25_search_ranks_as_the_per_part_python_sum() -> None:
    """The vectorised search gives the ranking of the plain definition: per part, each float32 score as a
    Python float divided by the part's best, summed over the parts, best first, ties by position."""
    rng = random.Random(8)
    words = "alpha beta gamma needle the file error value key secret code line data of".split()
    for _ in range(60):
        retriever = Bm25Retriever()
        retriever.add([" ".join(rng.choice(words) for _ in range(rng.randint(0, 20)))
                       for _ in range(rng.randint(1, 25))])
        query = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(1, 3))]
        combined = [0.0] * len(retriever._lengths)
        for part in query:
            tokens = retriever.tokenize(part)
            if tokens:
                scores = [float(value) for value in retriever.scores(tokens)]
                if max(scores) > 0:
                    combined = [total + score / max(scores) for total, score in zip(combined, scores)]
        expected = sorted(range(len(combined)), key=lambda index: (-combined[index], index))
        k = rng.randint(1, 30)
        assert retriever.search(query, k) == expected[:k]


def test_bm25_words_are_those_of_bm25s_default_pattern() -> None:
    """The tokens found are those of bm25s' own default pattern, on texts dense in word edges of every kind."""
    import re

    pattern = re.compile(BM25S_TOKEN_PATTERN)
    rng = random.Random(17)
    alphabet = "ab_19 é\n.-'中\u0301\u00b2\t😀"
    retriever = Bm25Retriever()
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        expected = [word for word in pattern.findall(text.lower()) if word not in retriever._stopwords]
        assert retriever.tokenize(text) == expected, text


def test_bm25_search_with_kept_part_scores_ranks_as_a_fresh_index() -> None:
    """A query part's normalized scores are kept between searches and forgotten when chunks are added: every
    search, repeated parts and growing index alike, ranks as a fresh index holding the same chunks."""
    rng = random.Random(13)
    words = "alpha beta gamma needle the file error value key secret code line data of".split()
    for _ in range(30):
        retriever = Bm25Retriever()
        chunks: list[str] = []
        goal = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        for _ in range(rng.randint(1, 6)):
            added = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 20))) for _ in range(rng.randint(1, 6))]
            retriever.add(added)
            chunks.extend(added)
            for _ in range(rng.randint(1, 3)):
                query = [goal, " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))]
                fresh = Bm25Retriever()
                fresh.add(chunks)
                assert retriever.search(query, len(chunks)) == fresh.search(query, len(chunks))


def test_bm25_weighs_each_part_of_the_query_the_same() -> None:
    """A long first part (the goal) does not drown the second (the current step): each part's scores are
    divided by its best score before they are added, as the embedding retriever averages unit embeddings."""
    retriever = Bm25Retriever()
    retriever.add(["alpha beta gamma", "needle banner", "alpha"])
    goal = "alpha alpha alpha beta beta gamma"
    assert retriever.search([goal + " needle"], 3) == [0, 2, 1]  # one joined text: the goal's words win
    assert retriever.search([goal, "needle"], 3) == [0, 1, 2]  # two parts: the step's best chunk ties the goal's
    assert retriever.search([goal, ""], 3) == retriever.search([goal], 3)  # an empty part adds nothing


def test_rag_memory_reinjects_retrieved_chunks() -> None:
    method = RagMemoryMethod(SETTINGS)
    assert method.retriever.name == "bm25"
    method.begin("S", "Find the lantern colour.")
    for index, body in enumerate(["river stone " * 60, "the lantern is crimson\n" + "quiet " * 100, "meadow " * 100]):
        action = f"cat f{index}.txt"
        method.record_agent("reading", action)
        method.record_observation(action, Observation(body, 0))
    feed(method, 2, size=300, start=10)
    assert run(method.compact("forced", AuxRecorder())) is True
    text = "\n".join(message.content for message in prompt(method))
    assert "Retrieved memory" in text and "the lantern is crimson" in text
    assert "from `cat f1.txt`" in text


def _memory_built_anew(method: TranscriptMethod) -> list[Message]:
    """The memory messages a baseline shows, built from its current state with nothing kept between calls."""
    messages: list[Message] = []
    if isinstance(method, RagMemoryMethod):
        if method.chunks:
            hits = method.retriever.search(method.query(), method.options.rag_top_k)
            text = f"{RETRIEVED_HEADER}\n" + "\n".join(f"[{rank}] {method.chunks[index]}"
                                                      for rank, index in enumerate(hits, 1))
            messages.append(Message("user", method.clip_to_tokens(text, method.memory_budget)))
    elif isinstance(method, StructuredStateMethod):
        if method.state is not None:
            messages.append(Message("user", method._render(method.state)))
    elif isinstance(method, LlmSummaryMethod) and method.summary:
        messages.append(Message("user", method._memory_text()))
    kept = getattr(method, "kept_short", [])
    if kept:
        messages.append(short_observations_message(kept))
    return messages


@pytest.mark.parametrize("name", ["llm_summary", "structured_state", "rag_memory"])
def test_memory_messages_kept_between_calls_are_those_built_anew(name: str) -> None:
    """A baseline keeps its memory messages (the state's text, the retrieved chunks, the short observations)
    between calls; after every turn and compaction they are the messages its current state gives."""
    rng = random.Random(21)
    method = make_method(name, SETTINGS)
    assert isinstance(method, TranscriptMethod)
    method.begin("S", "Find the lantern colour.")
    aux = AuxRecorder()
    for step in range(40):
        read = rng.randint(0, step)  # files read again: the current step matches different chunks over time
        action = f"cat file_{read:02d}.txt"
        method.record_agent(f"reading file {read}", action)
        method.record_observation(action, Observation(f"topic{read} " * rng.choice([2, 8, 40, 120]), 0))
        if rng.random() < 0.25:
            run(method.compact("forced", aux))
        for _ in range(rng.randint(1, 2)):
            shown = prompt(method, aux)  # may compact first: the state it leaves is the one shown
            expected = _memory_built_anew(method)
            assert list(shown[2 : 2 + len(expected)]) == expected


@pytest.mark.parametrize("installed, cuda, expected", [(True, False, "bm25"), (True, True, "embeddings"),
                                                     (False, True, "bm25"), (False, False, "bm25")])
def test_auto_is_the_fast_retriever_on_cpu(installed: bool, cuda: bool, expected: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19: `--rag-retriever auto` with sentence-transformers installed but no CUDA device is bm25 (the
    embeddings cost seconds per task on CPU); the embeddings are the default only on a GPU."""
    import arc_eval.methods.rag_memory as rag_memory

    monkeypatch.setattr(rag_memory, "embeddings_available", lambda: installed)
    monkeypatch.setattr(rag_memory, "cuda_available", lambda: cuda)
    assert rag_memory.resolve_retriever("auto") == expected


def test_retriever_choice() -> None:
    assert resolve_retriever("bm25") == "bm25"
    assert resolve_retriever("auto") == ("embeddings" if embeddings_available() and cuda_available() else "bm25")
    with pytest.raises(ConfigError):
        resolve_retriever("tfidf")


@pytest.mark.slow
@pytest.mark.embeddings
@pytest.mark.skipif(not embeddings_available() and os.environ.get("ARC_REQUIRE_EMBEDDINGS") != "1",
                    reason="sentence-transformers is absent (pip install torch==2.13.0 -e '.[embeddings]'; "
                           ".ci/run's embeddings step sets ARC_REQUIRE_EMBEDDINGS=1, so there it fails instead)")
def test_embedding_retriever_ranks_by_meaning() -> None:
    from arc_eval.methods.rag_memory import EmbeddingRetriever

    retriever = EmbeddingRetriever()
    retriever.add(["The cat sat on the mat.", "Quarterly revenue grew by ten percent.", "A kitten naps on a rug."])
    assert retriever.search(["How did the company's sales change?"], 1) == [1]


def test_transcript_method_is_the_shared_machinery() -> None:
    assert all(issubclass(type(make_method(name, SETTINGS)), TranscriptMethod) for name in BASELINES)


# -- the agent's own text clipped when the kept turns alone are over L (review h27 F5) ---------------------------


def long_turns(method: Method, thoughts: Sequence[int], observation: int = 20) -> None:
    for index, length in enumerate(thoughts):
        action = f"cat file_{index:02d}.txt"
        method.record_agent(f"t{index}:" + "y" * (length - 3), action)
        method.record_observation(action, Observation("z" * observation, 0))


def clip_settings(**extra: float) -> MethodSettings:
    return MethodSettings(context_limit=4096, max_tokens=1024, counter=make_counter("bytes"),
                          method_options={"rag_memory": RagOptions(rag_retriever="bm25")}, extra=extra)


def test_kept_turns_over_l_clip_the_older_agent_text_first_then_the_newest() -> None:
    """A goal of 1,500 tokens and a recent suffix that may take all of L: compaction keeps every turn, the prompt
    stays over L, and the turns older than the newest are clipped to ARC's limits (96 / 128 characters, ``…``)."""
    settings = clip_settings(recent_fraction=1.0)
    method = make_method("sliding_window", settings)
    method.begin("S", "G" * 1500)
    long_turns(method, [1000, 1000, 50])
    messages = prompt(method)
    assert PromptCounter("bytes", "chatml").count(messages) <= settings.usable_tokens
    assistants = [message.content for message in messages if message.role == "assistant"]
    assert assistants[:2] == [f"Thought: t{index}:" + "y" * 93 + f"…\nAction: cat file_0{index}.txt" for index in (0, 1)]
    assert assistants[2] == "Thought: t2:" + "y" * 47 + "\nAction: cat file_02.txt"  # the newest: not needed
    events = method.drain_events()
    assert events.compactions == () and len(events.clips) == 1
    clip = events.clips[0]
    assert (clip["turns"], clip["newest"]) == (2, False) and clip["before"] > settings.usable_tokens >= clip["after"]
    # what the turns were is kept: a condensing request or a retrieval query reads it
    assert [turn.assistant.content for turn in method.turns][0].startswith("Thought: t0:" + "y" * 997)

    long_turns(method, [2000])  # the newest turn too long: its thought halved until the prompt fits
    messages = prompt(method)
    assert PromptCounter("bytes", "chatml").count(messages) <= settings.usable_tokens
    newest = [message.content for message in messages if message.role == "assistant"][-1]
    head, tail = "Thought: t0:", "…\nAction: cat file_00.txt"
    assert newest.startswith(head) and newest.endswith(tail)
    shown = len(newest) - len(head) - len(tail) + 3  # the thought's characters shown
    assert shown in halving_lengths(2000)[1:] and shown > 96  # as much of it as fits: more than an older turn's
    (clip,) = method.drain_events().clips
    assert (clip["turns"], clip["newest"]) == (1, True)  # the newest alone: the others are within the limits now


def test_a_clip_that_cannot_bring_the_prompt_within_l_changes_nothing() -> None:
    """An observation alone over L: no clip of the agent's text helps, so the prompt is left as it was (the call
    overflows as before) and nothing is recorded."""
    method = make_method("sliding_window", SETTINGS)
    method.begin("S", "G")
    long_turns(method, [500], observation=4000)
    before = [turn.messages() for turn in method.turns]
    prompt(method)
    assert [turn.messages() for turn in method.turns] == before and method.drain_events().clips == ()


def test_full_context_never_clips() -> None:
    method = make_method("full_context", SETTINGS)
    method.begin("S", "G")
    long_turns(method, [3000, 3000])
    messages = prompt(method)
    assert all("…" not in message.content for message in messages) and method.drain_events().clips == ()


@pytest.mark.parametrize("name", ["llm_summary", "structured_state"])
def test_condensing_request_clips_a_long_thought_before_the_observation(name: str) -> None:
    """A folded turn whose thought alone is over a request's budget: the request shows the agent's text clipped
    (ARC's limits) and the observation whole, where it cut the observation to nothing and still overflowed."""
    method = make_method(name, SETTINGS)
    method.begin("S", "G")
    action = "cat secrets.txt"
    method.record_agent("long reasoning " * 300, action)
    method.record_observation(action, Observation("header\n" + "x" * 600 + "\nNEEDLE=ABC234\nfooter", 0))
    long_turns(method, [10])
    aux = AuxRecorder(overflow_over=SETTINGS.usable_tokens)
    assert run(method.compact("forced", aux)) is True
    (request, _purpose), = aux.requests
    body = request[-1].content
    assert "NEEDLE=ABC234" in body and "Thought: " + ("long reasoning " * 7)[:96] + "…\nAction: cat secrets.txt" in body
    assert "long reasoning " * 7 not in body


def test_tool_mode_clips_the_turns_text_then_its_call_arguments(tmp_path: Path) -> None:
    """Tool-calling mode: the newest turn's text is clipped first; a call whose arguments alone are too long has
    its string arguments clipped (the core's ``clipped_arguments``), the call's id and name kept, its result whole."""
    model = tool_model_dir(tmp_path / "model")
    settings = MethodSettings(context_limit=4096, max_tokens=1024, action_mode="tools",
                              counter=make_counter(f"hf-dir:{model}", "template"))
    for thought, file in (("why " * 4000, "a.txt"), ("", "b" * 40000)):
        method = make_method("sliding_window", settings)
        method.begin("S", "G")
        call = ToolCall("c1", "cat", json.dumps({"file": file}))
        method.record_tool_turn(thought, (call,))
        method.record_tool_result(call, Observation("alpha", 0))
        messages = prompt(method)
        assert settings.counter.count(messages, method.tools()) <= settings.usable_tokens
        assistant, result = messages[-2:]
        assert (assistant.role, result.role, result.tool_call_id) == ("assistant", "tool", "c1")
        assert result.content.endswith("alpha")
        (shown,) = assistant.tool_calls
        assert (shown.call_id, shown.name) == ("c1", "cat")
        if thought:
            assert assistant.content.endswith("…") and len(assistant.content) < len(thought) and shown == call
        else:
            assert json.loads(shown.arguments)["file"].endswith("…") and len(shown.arguments) < len(call.arguments)
        (clip,) = method.drain_events().clips
        assert clip["newest"] and clip["after"] <= settings.usable_tokens < clip["before"]
