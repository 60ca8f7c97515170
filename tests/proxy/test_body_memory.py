"""`arc-ref proxy --body-memory-mb`: the memory for the request bodies decoded last (`proxy_app.RecentBodies`), so
that a body resending its history is decoded from its new messages on; 0 keeps none. Either way the upstream gets
the same requests: the bodies kept change what a request costs, never what it means."""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.harness import QWEN3, needs_qwen3, serve_app

import httpx  # noqa: E402  (after the harness, which skips without the proxy extra)

from arc_ref.config import ConfigError  # noqa: E402
from arc_ref.frontends.proxy import ProxySettings  # noqa: E402
from arc_ref.frontends.proxy_app import build_app  # noqa: E402
from arc_ref.frontends.proxy_options import DEFAULT_BODY_MEMORY_MB, ProxyOptions  # noqa: E402
from benchmarks.proxy_cases import fake_upstream  # noqa: E402

pytestmark = needs_qwen3


def one_conversation(**settings: Any) -> tuple[list[dict[str, Any]], int]:
    """Four requests of one conversation (a system prompt over the 4 KiB a body is looked up by): what the upstream
    received, and how many bodies were decoded from a kept one's messages on."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You answer briefly. " * 300},
                                      {"role": "user", "content": "Task 1: list the files."}]
    with fake_upstream() as upstream:
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=16384,
                                      **settings))
        with serve_app(app) as base_url:
            for turn in range(4):
                reply = httpx.post(f"{base_url}/chat/completions", json={"model": "fake", "messages": messages},
                                   timeout=120)
                assert reply.status_code == 200, reply.text
                messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"Again, {turn}."}]
            continued = app.state.proxy.known.bodies.continued
        return upstream.requests, continued


def test_no_body_memory_keeps_no_body_and_changes_no_request() -> None:
    kept, continued = one_conversation()
    none, none_continued = one_conversation(body_memory_bytes=0)
    assert continued >= 2  # the default keeps bodies: later ones continue them
    assert none_continued == 0
    assert none == kept


def test_the_flag_is_read_and_bounded() -> None:
    assert ProxyOptions().body_memory_mb == DEFAULT_BODY_MEMORY_MB
    assert ProxyOptions(body_memory_mb=0).body_memory_mb == 0
    with pytest.raises((ConfigError, ValueError)):
        ProxyOptions(body_memory_mb=-1)


@pytest.mark.parametrize("stream", [False, True])
def test_a_refused_request_leaves_no_cycle_holding_its_body(stream: bool) -> None:
    """Review h30 F1: the request's task held the refusal, whose traceback held the handler's frame, which held the
    task and the body: a cycle only a full collection freed (30 MB bodies refused one after another: 204 -> 620
    MiB; 8 clients x 3: 1,738 MiB; now 260 and 230). With the collector off, a refused request now leaves nothing
    for it to find that holds a frame of the proxy."""
    import gc
    import types

    body = {"model": "fake", "messages": [{"role": "user", "content": "z" * (1 << 20)}], "stream": stream}
    with fake_upstream() as upstream:
        app = build_app(ProxySettings(upstream=upstream.url, tokenizer=f"hf-dir:{QWEN3}", context_limit=4096))
        with serve_app(app) as base_url:
            httpx.post(f"{base_url}/chat/completions", json=body, timeout=120)  # the process warmed up
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                refused = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120)
                gc.collect()
                frames = [found.f_code.co_name for found in gc.garbage if isinstance(found, types.FrameType)
                          and "arc_ref" in found.f_code.co_filename]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
    assert refused.status_code == 400 and "cannot hold this conversation" in refused.text, refused.text
    assert frames == [], frames
