"""Features: predicates over a trace's output lines, each naming something the trace exists to show.

Generation fails when a trace no longer shows one of its features, so a change in the core cannot
silently turn a vector into a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arc_ref import text
from arc_ref.recall import reassemble
from proofs_check.vectors.dsl import Outputs


def ops(outputs: Outputs, name: str) -> Outputs:
    return [output for output in outputs if output["op"] == name]


def has_error(fragment: str) -> Callable[[Outputs], bool]:
    return lambda outputs: any(fragment in output["message"] for output in ops(outputs, "error"))


def response_has(fragment: str) -> Callable[[Outputs], bool]:
    return lambda outputs: any(fragment in (output.get("response") or "") for output in ops(outputs, "agent"))


def view_has(fragment: str) -> Callable[[Outputs], bool]:
    return lambda outputs: any(fragment in output["text"] for output in ops(outputs, "view"))


def errors_on(*numbers: int) -> Callable[[Outputs], bool]:
    """Exactly these 1-based input lines give error lines."""
    return lambda outputs: sorted(output["line"] for output in ops(outputs, "error")) == sorted(numbers)


def fingerprint_collision(outputs: Outputs) -> bool:
    fingerprints = [output["id"].partition("-")[2] for output in ops(outputs, "observe")]
    return len(set(fingerprints)) < len(fingerprints)


def not_verbatim(outputs: Outputs) -> bool:
    return any(not output["verbatim"] for output in ops(outputs, "observe"))


def folded_by(op_name: str) -> Callable[[Outputs], bool]:
    return lambda outputs: any(output["folded"] > 0 for output in ops(outputs, op_name))


def recall_chunks(outputs: Outputs) -> list[dict[str, Any]]:
    """Every recalled chunk, of agent turns and of tool turns (tool mode)."""
    return [recalled for output in outputs if output["op"] in ("agent", "tool_turn")
            for recalled in output.get("recalls", [])]


def answered_has(fragment: str) -> Callable[[Outputs], bool]:
    """A tool turn's answer to a call of ARC's tools (or of no offered tool) contains ``fragment``."""
    return lambda outputs: any(fragment in answer["content"] for output in ops(outputs, "tool_turn")
                               for answer in output["answered"])


def empty_chunk_text(outputs: Outputs) -> bool:
    return any(r["chunk"] > 0 and r["payload"] == "" for r in recall_chunks(outputs))


def split_character_moved(outputs: Outputs) -> bool:
    """Some non-empty chunk starts with a multi-byte character (its first token began inside it)."""
    return any(r["payload"] and len(r["payload"][0].encode("utf-8")) > 1 for r in recall_chunks(outputs))


def reassembles(observation: str) -> Callable[[Outputs], bool]:
    """The payloads of the recalled chunks of ``observation``, concatenated with S^-1 applied (the decoder D of
    Theorem claim 5, spec/rendering.md 7.1), are it exactly."""

    def check(outputs: Outputs) -> bool:
        chunks = recall_chunks(outputs)
        for output in ops(outputs, "observe") + ops(outputs, "tool_result") + ops(outputs, "user"):
            pieces = {r["chunk"]: r["payload"] for r in chunks if r["id"] == output["id"] and r["chunk"] > 0}
            complete = bool(output["chunks"]) and sorted(pieces) == list(range(1, output["chunks"] + 1))
            if complete and reassemble([pieces[index] for index in sorted(pieces)]) == observation:
                return True
        return False

    return check


def buffer_evicted(outputs: Outputs) -> bool:
    """A recalled chunk that was in the buffer is missing from a later view's buffer section."""
    recalled: list[str] = []
    for output in outputs:
        if output["op"] == "agent":
            recalled += [f"[recall {r['id']} chunk {r['chunk']}/{r['chunks']}]" for r in output.get("recalls", [])
                         if r["chunk"] > 0]
        if output["op"] == "view" and any(opening not in output["text"] for opening in recalled):
            return True
    return False


def summary_section(text_: str) -> str:
    start = text_.find("[ARC summary of earlier turns")
    return "" if start < 0 else text_[start : text_.find("<|im_end|>", start)]


def bare_id_in_summary(outputs: Outputs) -> bool:
    for output in ops(outputs, "view"):
        lines = summary_section(output["text"]).split("\n")
        if any(text.ID_PATTERN.fullmatch(line_) for line_ in lines):
            return True
    return False


def items_omitted(outputs: Outputs) -> bool:
    return any("earlier items omitted" in summary_section(output["text"]) for output in ops(outputs, "view"))


def inline_in_summary(outputs: Outputs) -> bool:
    return any(") of `" in summary_section(output["text"]) for output in ops(outputs, "view"))


def no_injected_turns(outputs: Outputs) -> bool:
    """Every view opens one more turn than it closes (the generation prompt) and has one system turn, at its
    start: no observation's text made a turn of its own (rendering.md 7.1). At least one view is taken."""
    views = ops(outputs, "view")
    return bool(views) and all(
        output["text"].count("<|im_start|>") == output["text"].count("<|im_end|>") + 1
        and output["text"].count("<|im_start|>system") == 1
        and output["text"].startswith("<|im_start|>system")
        for output in views
    )
