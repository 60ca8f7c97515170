"""The fair scripted agent's one relevance ranking: Okapi BM25 of what it may recall against what it needs.

The same query (what the task asks to answer) ranks ARC's citations for ``_recall`` and, for every other
method, is the text of the agent's recovery step, which the RAG retriever ranks its chunks against
(``eval/METHODS.md``, "The fair scripted agent"). BM25 here is Lucene's Okapi BM25 (the IDF
ln(1 + (N - df + 0.5) / (df + 0.5)), term weight tf / (tf + k1 (1 - b + b |d| / avgdl))), with bm25s'
defaults (k1 = 1.5, b = 0.75) and the RAG BM25 retriever's tokens (lowercase
runs of 2+ word characters minus bm25s' English stop words), so the agent ranks citations exactly as
the ``bm25`` retriever would rank chunks holding the same text.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections import Counter
from typing import Sequence

K1 = 1.5
B = 0.75
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s' default token pattern


@functools.lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    try:
        return frozenset(importlib.import_module("bm25s.stopwords").STOPWORDS_EN)
    except ImportError:  # pragma: no cover - bm25s is part of the eval extra
        return frozenset()


@functools.lru_cache(maxsize=8192)
def tokens(text: str) -> tuple[str, ...]:
    stop = _stop_words()
    return tuple(token for token in _TOKEN.findall(text.lower()) if token not in stop)


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """Okapi BM25 score of each document for ``query`` (a query term counts once per occurrence)."""
    if not documents:
        return []
    bags = [Counter(tokens(document)) for document in documents]
    lengths = [sum(bag.values()) for bag in bags]
    average = sum(lengths) / len(lengths) or 1.0
    count = len(documents)
    scores = [0.0] * count
    for term in tokens(query):
        frequency = sum(1 for bag in bags if term in bag)
        if frequency == 0:
            continue
        idf = math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
        for index, bag in enumerate(bags):
            occurrences = bag.get(term, 0)
            if occurrences:
                norm = occurrences + K1 * (1 - B + B * lengths[index] / average)
                scores[index] += idf * occurrences / norm  # Lucene drops the constant (k1 + 1)
    return scores


def ranked(query: str, documents: Sequence[str]) -> list[int]:
    """Indexes of ``documents``, best first; ties keep the documents' order (the older first)."""
    scores = bm25_scores(query, documents)
    return sorted(range(len(documents)), key=lambda index: (-scores[index], index))


FILE_NAME_RE = re.compile(r"(?<![\w.-])[\w-]+\.[A-Za-z0-9]{1,8}(?!\w)(?!\.\w)")  # a sentence's full stop may follow


def named_sources(instruction: str) -> tuple[str, ...]:
    """File names an answer instruction names (``... from the banner in secrets.txt``), lowercased."""
    return tuple(dict.fromkeys(name.lower() for name in FILE_NAME_RE.findall(instruction)))
