"""examples/session_openai.py end to end, as its docstring says to run it: `arc-eval serve-scripted` with the
example's stand-in model, then the example with the OpenAI Python client (messages, a recall answered by ARC,
the audit before every request, each reply's usage checked: serve-scripted counts with Qwen3's template as vLLM
does, so no count differs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

REPO = Path(__file__).resolve().parents[2]
QWEN3 = qwen3_dir()


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_the_openai_example_runs_against_serve_scripted() -> None:
    pytest.importorskip("openai", reason="the openai package (pip install -e '.[examples]') is absent")
    # this checkout's arc_ref, not whichever one is installed
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "examples")))}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "arc-eval"), "serve-scripted", "--port", "0",
         "--policy", "session_openai:DemoModel", "--tokenizer", f"hf-dir:{QWEN3}", "--max-model-len", "12000"],
        cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        found = re.search(r"(http://\S+/v1)", banner)
        assert found, f"serve-scripted did not start: {banner!r} {server.stderr.read() if server.stderr else ''}"
        example = subprocess.run(
            [sys.executable, "examples/session_openai.py", "--base-url", found.group(1), "--model", "scripted",
             "--tokenizer", f"hf-dir:{QWEN3}"],
            cwd=REPO, env=environment, capture_output=True, text=True, timeout=300,
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    out = example.stdout
    assert example.returncode == 0, example.stderr
    # the window the server lists (/v1/models' max_model_len), less the replies' 512 (review h61 F4)
    assert out.startswith("=== window 12000 tokens, 512 of them kept for each reply\n"), out
    assert "=== request 1: 2 messages, 8 tools" in out
    stored = re.search(r"model called read_file\(\{\"path\": \"server.log\"\}\); ran it: \d+ characters stored as (§\S+)",
                       out)
    assert stored, out
    obs_id = stored.group(1)
    assert f'model called _recall({{"id": "{obs_id}"}}); answered by ARC: _recall {obs_id}: chunk 1/' in out
    assert f"tool      Observation {obs_id} (rc=0) is too large for the recent window" in out  # H shows its stub
    assert re.search(r"audit: \d+ tokens <= K = \d+ <= L = 11488: prefix \d+, tool_listing \d+, summary", out)
    assert f"recall buffer: {obs_id} chunk 1/" in out
    assert "=== answer: The row with status LATE is: row 070: latency=" in out
    assert "CountsDifferWarning" not in example.stderr, example.stderr  # the served template's count, each call
    assert re.search(r"server counted (\d+) prompt tokens for the last request, the session \1; 0 of 4 replies'"
                     " usage differed", out), out
