"""What the proxy adds to the agent's own prompt before anything is folded: ARC's tools listing and its note on
them (README, "What it costs"), counted by transformers' own tokenizer and Qwen3's template (the oracle vLLM uses),
on the request the upstream receives against the request the agent sent."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.proxy.harness import BASH_TOOL, QWEN3, needs_qwen3, serve_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from benchmarks.proxy_cases import completion, fake_upstream, task  # noqa: E402
from proofs_check.shared_data import transformers_prompt  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_overhead() -> tuple[int, int, int, int]:
    """The figures the README states: the whole overhead, the tools listing's part, the note's part, and the
    tokens added to each tool output."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(r"([\d,]+) tokens on Qwen3's template \(([\d,]+) the tools listing, ([\d,]+) the note\),.*?"
                      r"plus those tokens and (\d+) per tool output", text)
    assert found is not None, "README: 'What it costs' no longer states the overhead in the tested form"
    whole, tools, note, per_output = (int(group.replace(",", "")) for group in found.groups())
    return whole, tools, note, per_output


@needs_qwen3
def test_before_a_fold_the_upstream_prompt_is_the_agent_s_own_plus_the_stated_overhead() -> None:
    seen: list[dict[str, Any]] = []

    def reply(body: Any) -> tuple[int, bytes]:
        seen.append(json.loads(body) if isinstance(body, (bytes, str)) else body)
        if len(seen) == 1:
            calls = [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
            return 200, json.dumps(completion("", calls)).encode()
        return 200, json.dumps(completion("done")).encode()

    def post(base_url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        response = httpx.post(f"{base_url}/chat/completions", timeout=120,
                              json={"model": "fake", "messages": messages, "tools": [BASH_TOOL]})
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    first_request = task(1)
    with fake_upstream() as upstream:
        settings = ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384)
        with serve_app(build_app(settings)) as base_url:
            upstream.reply = reply
            first = post(base_url, first_request)
            second_request = [*first_request, first["choices"][0]["message"],
                              {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.txt\nnotes.md"}]
            post(base_url, second_request)
    assert QWEN3 is not None
    whole, tools, note, per_output = readme_overhead()
    for sent, shown in zip((first_request, second_request), seen):
        own = transformers_prompt(Path(QWEN3), sent, [BASH_TOOL])[1]
        through = transformers_prompt(Path(QWEN3), shown["messages"], shown["tools"])[1]
        outputs = sum(message["role"] == "tool" for message in sent)
        assert through - own == whole + per_output * outputs, (through, own, outputs)
    first_shown = seen[0]
    without_note = [{**message, "content": first_request[0]["content"]} if message["role"] == "system" else message
                    for message in first_shown["messages"]]
    assert transformers_prompt(Path(QWEN3), without_note, first_shown["tools"])[1] \
        - transformers_prompt(Path(QWEN3), first_request, [BASH_TOOL])[1] == tools
    assert whole == tools + note
