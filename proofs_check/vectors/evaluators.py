"""Evaluators: the reference computation of each vector file's ``result`` from a case's ``inputs``.

`tests/test_spec.py` re-evaluates every case with them, and a port evaluates the same inputs with its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from arc_ref import catalog, commands, ids, recall, text
from arc_ref.budgets import WindowTooSmall, window_budgets
from arc_ref.config import make_setup, preset
from arc_ref.errors import ArcError
from arc_ref.escape import ShownForm, unshow
from arc_ref.machine import AgentTurn, Observe, agent_turn, init, observe
from arc_ref.store import action_signature
from proofs_check.vectors.dsl import Json


def _error(problem: Exception) -> dict[str, str]:
    return {"error": type(problem).__name__}


def evaluate_id(inputs: Mapping[str, Json]) -> Json:
    """A1: the id of occurrence ``index`` of (action, observation) under (capacity, fingerprint_bits)."""
    try:
        scheme = ids.IdScheme(inputs["capacity"], inputs["fingerprint_bits"])
        signature = action_signature(inputs["action"])
        value = ids.fingerprint(signature, inputs["observation"], scheme.fingerprint_bits)
        obs_id = scheme.make(inputs["index"], signature, inputs["observation"])
    except ArcError as problem:
        return _error(problem)
    return {
        "bits": scheme.bits,
        "counter_width": scheme.counter_width,
        "fingerprint_width": scheme.fingerprint_width,
        "signature": signature,
        "fingerprint": value,
        "id": obs_id,
    }


def evaluate_id_parse(inputs: Mapping[str, Json]) -> Json:
    """A1: how a token typed by the agent is normalized and split into (counter, fingerprint digits)."""
    scheme = ids.IdScheme(inputs["capacity"], inputs["fingerprint_bits"])
    body = ids.normalize_token(inputs["token"])
    counter, fingerprint_digits = scheme.split(body)
    return {"body": body, "counter": counter, "fingerprint": fingerprint_digits}


def evaluate_chunks(inputs: Mapping[str, Json]) -> Json:
    """A5 / Lemma 4: token starts, cut positions and chunk texts of ``text`` under a tokenizer and q."""
    setup = make_setup(preset("minimal", tokenizer=inputs["tokenizer"], chunk_tokens=inputs["chunk_tokens"],
                              recall_budget=4000, context_limit=10**6))
    content = inputs["text"]
    starts = setup.tokenizer.token_starts(content)
    n_tokens = setup.tokenizer.count(content)
    chunks = recall.chunk_count(n_tokens, inputs["chunk_tokens"])
    return {
        "n_tokens": n_tokens,
        "token_starts": starts,
        "chunks": chunks,
        "bounds": [list(recall.chunk_bounds(n_tokens, inputs["chunk_tokens"], ell)) for ell in range(1, chunks + 1)],
        "cuts": recall.chunk_cuts(starts, len(content), inputs["chunk_tokens"]),
        "texts": recall.chunk_texts(setup, content),
    }


def evaluate_pages(inputs: Mapping[str, Json]) -> Json:
    """A3 / Lemma 3: page count, span of each page, page of each stub; the page a catalog-page argument picks."""
    stored, size = inputs["stored"], inputs["page_size"]
    pages = catalog.page_count(stored, size)
    result: dict[str, Json] = {
        "pages": pages,
        "spans": [list(catalog.page_span(page, size, stored)) for page in range(1, pages + 1)],
        "page_of": [catalog.page_of(index, size) for index in range(1, stored + 1)],
    }
    if "argument" in inputs:
        state = init(preset("minimal", page_size=size, page_budget=136 + 104 * size, context_limit=4000,
                            capacity=max(2, stored)))
        for index in range(stored):
            state, _ = observe(state, Observe("ls", str(index), 0))
        state, answer = agent_turn(state, AgentTurn("", f"catalog-page {inputs['argument']}".rstrip()))
        result["target"] = state.catalog_cursor if answer.notes[0].endswith("is shown in the catalog section") else None
        result["note"] = answer.notes[0]
    return result


def evaluate_text(inputs: Mapping[str, Json]) -> Json:
    """The text helpers every rendered component uses (`spec/rendering.md`, section Text helpers)."""
    function = inputs["function"]
    if function == "escape_line":
        return text.escape_line(inputs["text"])
    if function == "id_safe_cut":
        return text.id_safe_cut(inputs["text"], inputs["cut"])
    if function == "clipped":
        return text.clipped(inputs["text"], inputs["keep"])
    if function == "halving_lengths":
        return text.halving_lengths(inputs["length"])
    if function == "ascii_words":
        return text.ascii_words(inputs["text"])
    if function == "shown_form":
        return ShownForm(inputs["control_strings"]).show(inputs["text"])
    if function == "unshow":
        return unshow(inputs["text"])
    raise ValueError(f"unknown text function {function!r}")


def evaluate_commands(inputs: Mapping[str, Json]) -> Json:
    """How an action is parsed: null for a normal action, else one entry per non-empty line."""
    parsed = commands.parse_action(inputs["action"])
    if parsed is None:
        return None
    return [
        {"word": item.word, "argument": item.argument} if isinstance(item, commands.Command) else {"ignored": item.text}
        for item in parsed
    ]


def evaluate_tokens(inputs: Mapping[str, Json]) -> Json:
    """D1 / rendering.md §2: the token ids of a text under a tokenizer, and where each token starts."""
    tokenizer = make_setup(preset("minimal", tokenizer=inputs["tokenizer"], recall_budget=4000,
                                  context_limit=10**6)).tokenizer
    content = inputs["text"]
    tokens = tokenizer.encode(content)
    return {"tokens": tokens, "token_starts": tokenizer.token_starts(content), "n_tokens": len(tokens)}


def evaluate_window_budgets(inputs: Mapping[str, Json]) -> Json:
    """Budgets from a window and a prefix (spec/parameters.md): the paper preset with the case's tokenizer, chat
    format, system, goal (repeated ``repeat`` times), window and completion reserve, and the preferences Q*, q*."""
    base = preset("paper", tokenizer=inputs["tokenizer"], chat_format=inputs["chat_format"],
                  system=inputs["system"], goal=inputs["goal"] * inputs["repeat"],
                  context_limit=inputs["context_limit"], max_completion=inputs["max_completion"])
    try:
        derived = window_budgets(base, recall_budget=inputs["recall_budget"], chunk_tokens=inputs["chunk_tokens"])
    except WindowTooSmall as problem:
        return {"error": "WindowTooSmall", "needed": problem.needed, "smallest_window": problem.smallest_window}
    except ArcError as problem:
        return _error(problem)
    setup = make_setup(base.replace(**derived.fields()))
    return {"regime": derived.regime, "L": setup.limit, "B": setup.prefix_tokens, "K": setup.budget,
            **derived.fields()}
