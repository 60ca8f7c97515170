"""The README's proxy recipe without a GPU runs as written (issue 25 item 6): serve-scripted with the policy that
recalls, `arc-ref proxy` with no budget given, mini-swe-agent with the variables it needs, then /arc/rounds. Only
the ports (free ones) and the path of Qwen3's files are changed. Slow (a real mini-swe-agent run); needs the extra
'agents' and ../shared/data, skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proxy.harness import QWEN3, needs_qwen3

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIRST_LINE = "arc-eval serve-scripted --port 8000 --max-model-len 8192"
pytestmark = [
    pytest.mark.slow,
    needs_qwen3,
    pytest.mark.skipif(not (BIN / "mini").exists() or shutil.which("curl") is None,
                       reason="mini-swe-agent (pip install 'arc-ref[agents]') or curl is not installed"),
]


def recipe() -> list[str]:
    """The lines of the README's bash block that starts with serve-scripted on a window of 8192."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if lines and lines[0].startswith(FIRST_LINE):
            return lines
    raise AssertionError("the README has no recipe without a GPU")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-2000:]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listened on port {port}")


def test_the_readme_recipe_without_a_gpu_runs_as_written(tmp_path: Path) -> None:
    upstream_port, proxy_port = free_port(), free_port()
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                   "PYTHONPATH": str(REPO), "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mini-config")}

    def adapted(line: str) -> str:
        return (line.replace("../shared/data/qwen3-tokenizer", str(QWEN3))
                .replace("--port 8000", f"--port {upstream_port}")
                .replace("localhost:8000", f"localhost:{upstream_port}")
                .replace("arc-ref proxy ", f"arc-ref proxy --port {proxy_port} ")
                .replace("localhost:8100", f"localhost:{proxy_port}"))

    servers: list[subprocess.Popen[str]] = []
    outputs: list[str] = []
    errors: list[str] = []
    try:
        for line, port in zip(recipe(), (upstream_port, proxy_port, None, None, None)):
            if line.endswith("&"):
                assert port is not None
                server = subprocess.Popen(["bash", "-c", adapted(line.removesuffix("&").strip())], cwd=tmp_path,
                                          env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, start_new_session=True)
                servers.append(server)
                wait_port(port, server)
                continue
            done = subprocess.run(["bash", "-c", adapted(line)], cwd=tmp_path, env=environment, capture_output=True,
                                  text=True, timeout=300)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            outputs.append(done.stdout)
            errors.append(done.stderr)
    finally:
        for server in servers:
            os.killpg(server.pid, signal.SIGTERM)
            server.communicate(timeout=30)
    assert "NEEDLE_KEY=violet-42" in outputs[1]
    # review h54: litellm fetched its price list from GitHub at each start (offline: retries, warnings, seconds)
    assert "cost map" not in errors[1], errors[1][-2000:]
    trajectory = json.loads((tmp_path / "traj.json").read_text(encoding="utf-8"))
    assert trajectory["info"]["exit_status"] == "Submitted"
    rounds = json.loads(outputs[2])
    # what the README says of them: 4 upstream requests, 2 hidden recall rounds, every count exact
    assert len(rounds) == 4 and sum(record["hidden"] for record in rounds) == 2, rounds
    assert all(record["view_tokens"] == record["upstream_prompt_tokens"] <= record["budget"] for record in rounds)
