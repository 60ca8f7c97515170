"""The fair agent's relevance ranking is Okapi BM25 as the bm25s library computes it (the RAG retriever's)."""

from __future__ import annotations

import bm25s
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_eval.agent.ranking import bm25_scores, named_sources, ranked, tokens

VOCABULARY = ("needle", "secrets", "notes", "banner", "value", "txt", "river", "stone", "task", "noise", "24")
documents = st.lists(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12).map(" ".join), min_size=1,
                     max_size=6)


@given(documents, st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=6).map(" ".join))
def test_scores_equal_the_bm25s_library(corpus: list[str], query: str) -> None:
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index([list(tokens(document)) for document in corpus], show_progress=False)
    expected = [float(score) for score in model.get_scores(list(tokens(query)))]
    assert bm25_scores(query, corpus) == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_rarer_shared_words_rank_first_and_ties_keep_order() -> None:
    corpus = ["cat notes_01.txt distractor holds no needle", "cat secrets.txt holds the needle banner",
              "cat notes_02.txt distractor holds no needle"]
    assert ranked("the exact value from the banner in secrets.txt", corpus) == [1, 0, 2]
    assert ranked("nothing shared", corpus) == [0, 1, 2]


def test_named_sources_are_the_file_names_of_the_instruction() -> None:
    assert named_sources("with the exact 24-character value from the banner in secrets.txt.") == ("secrets.txt",)
    assert named_sources("compare notes_01.txt, Report.PDF and notes_01.txt") == ("notes_01.txt", "report.pdf")
    assert named_sources("submit The correct answer is (X)") == ()
