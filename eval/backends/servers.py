"""Which server is behind a base URL, read from its `GET /v1/models`, and what it offers for counting.

Two servers are told apart by their model cards (both sources read; see SERVING.md):

- vLLM (and `arc-eval serve-scripted`, which answers like it): a card with ``max_model_len``
  (vLLM's `ModelCard`, 0.6.0 on); ``owned_by`` is "vllm". Counting: ``POST /tokenize`` with the
  chat ``messages`` (and ``tools`` from 0.9.0 on) answers ``count`` and ``max_model_len``.
- llama.cpp's `llama-server`: ``owned_by`` "llamacpp" and the window of one slot as
  ``meta.n_ctx`` (tools/server/server-context.cpp, `get_res_model_info`). Counting: ``POST
  /apply-template`` with the chat body answers ``{"prompt": text}`` rendered with the served
  template, and ``POST /tokenize`` with ``{"content": text, "add_special": true}`` answers
  ``{"tokens": [...]}``, the same tokenization the chat endpoint applies to its prompt. (It answers
  a vLLM-style ``{"messages": ...}`` with ``{"tokens": []}``: no count.)
- anything else ("openai"): no server-side count; the harness counts locally.

Every field read is checked: a card of the wrong shape is a `BackendReplyError` naming the field.
"""

from __future__ import annotations

from typing import Any, Mapping

from attrs import frozen

from arc_eval.types import BackendReplyError

VLLM = "vllm"
LLAMA_CPP = "llama.cpp"
OPENAI = "openai"  # an OpenAI-compatible server of unknown make
SERVER_KINDS = (VLLM, LLAMA_CPP, OPENAI)
SCRIPTED_OWNER = "arc-eval"  # the `owned_by` of `arc-eval serve-scripted`'s cards (it answers as vLLM does)


@frozen
class ServerInfo:
    """What one replica's `GET /v1/models` says."""

    url: str  # the /v1/models URL asked
    kind: str  # one of SERVER_KINDS
    model_ids: tuple[str, ...]  # served names (llama.cpp: ids and aliases)
    window: int | None  # tokens of prompt + completion one request may use; None if not said
    window_field: str | None  # where the window was read ("max_model_len", "meta.n_ctx")
    owned_by: str | None = None  # the first card's `owned_by`

    @property
    def label(self) -> str:
        """What a reader is told the server is: its kind, or serve-scripted (which answers as vLLM, kind vllm)."""
        return "arc-eval serve-scripted (answers as vLLM)" if self.owned_by == SCRIPTED_OWNER else self.kind


def _int_field(value: Any, where: str, url: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BackendReplyError(f"{url}: {where} must be a positive integer, got {value!r}")
    return value


def parse_models(body: Any, url: str) -> ServerInfo:
    """The `ServerInfo` of a `/v1/models` answer; `BackendReplyError` when it is not a model list."""
    if not isinstance(body, Mapping) or not isinstance(body.get("data"), list):
        raise BackendReplyError(
            f"{url}: expected an OpenAI model list {{\"data\": [...]}}, got {str(body)[:200]!r}"
        )
    cards = body["data"]
    ids: list[str] = []
    kind = OPENAI
    owned_by = next((card.get("owned_by") for card in cards if isinstance(card, Mapping)), None)
    window: int | None = None
    window_field: str | None = None
    for index, card in enumerate(cards):
        if not isinstance(card, Mapping) or not isinstance(card.get("id"), str):
            raise BackendReplyError(f"{url}: data[{index}] has no string id: {str(card)[:200]!r}")
        ids.append(card["id"])
        aliases = card.get("aliases")
        if isinstance(aliases, list):
            ids.extend(alias for alias in aliases if isinstance(alias, str) and alias not in ids)
        meta = card.get("meta")
        if "max_model_len" in card or card.get("owned_by") == "vllm":
            kind = VLLM
            length = _int_field(card.get("max_model_len"), f"data[{index}].max_model_len", url)
            if length is not None:
                window, window_field = length, "max_model_len"
        elif card.get("owned_by") == "llamacpp" or (isinstance(meta, Mapping) and "n_ctx" in meta):
            kind = LLAMA_CPP
            if isinstance(meta, Mapping):
                length = _int_field(meta.get("n_ctx"), f"data[{index}].meta.n_ctx", url)
                if length is not None:
                    window, window_field = length, "meta.n_ctx"
    return ServerInfo(url, kind, tuple(ids), window, window_field, owned_by if isinstance(owned_by, str) else None)


def tokenize_count(body: Any, url: str) -> int:
    """``count`` of a vLLM `/tokenize` answer, checked."""
    if not isinstance(body, Mapping):
        raise BackendReplyError(f"{url}: expected a JSON object, got {str(body)[:200]!r}")
    count = body.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        if "tokens" in body and "count" not in body:
            raise BackendReplyError(
                f"{url}: the answer has no `count` (it looks like llama.cpp's /tokenize, which takes "
                "{\"content\": ...}); if the server is llama-server, its /v1/models did not say so: "
                "use --count-with local"
            )
        raise BackendReplyError(f"{url}: `count` must be a non-negative integer, got {count!r}")
    return count


def tokens_list_length(body: Any, url: str) -> int:
    """How many tokens a llama.cpp `/tokenize` answer ``{"tokens": [int, ...]}`` holds, checked."""
    tokens = body.get("tokens") if isinstance(body, Mapping) else None
    if not isinstance(tokens, list) or not all(
        isinstance(token, int) and not isinstance(token, bool) for token in tokens
    ):
        raise BackendReplyError(
            f"{url}: expected {{\"tokens\": [integers]}}, got {str(body)[:200]!r}"
        )
    return len(tokens)


def template_prompt(body: Any, url: str) -> str:
    """The ``prompt`` text of a llama.cpp `/apply-template` answer, checked."""
    prompt = body.get("prompt") if isinstance(body, Mapping) else None
    if not isinstance(prompt, str):
        raise BackendReplyError(f"{url}: expected {{\"prompt\": text}}, got {str(body)[:200]!r}")
    return prompt
