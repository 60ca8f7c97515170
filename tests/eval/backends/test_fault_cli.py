"""Each server fault tried as a new user would: `arc-eval serve-scripted` answering like a
misconfigured vLLM in one process, `arc-eval nih --backend openai` in another. Each run must stop
with exit code 3 and a message naming the cause and the fix: no traceback, and nothing scored (a
fault found before the first task leaves no run directory at all).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from arc_eval.cli import main
from tests.eval.helpers import tool_model_dir
from tests.waiting import http_ok, scaled_ceiling, wait_until

SERVE = "import sys; from arc_eval.cli import main; sys.exit(main(['serve-scripted', *sys.argv[1:]]))"
RUN = "import sys; from arc_eval.cli import main; sys.exit(main(sys.argv[1:]))"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE, "--port", str(self.port), "--max-model-len", "4096", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        wait_until(http_ok(f"http://127.0.0.1:{self.port}/health"), self.process, "serve-scripted")
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        os.kill(self.process.pid, signal.SIGTERM)
        self.process.communicate(timeout=scaled_ceiling(30))


@pytest.fixture
def serve() -> Iterator[type[Server]]:
    started: list[Server] = []

    class Tracked(Server):
        def __init__(self, *flags: str) -> None:
            super().__init__(*flags)
            started.append(self)

    yield Tracked
    for server in started:
        server.stop()


def arc_eval(url: str, out: Path, *extra: str, model: str = "scripted") -> subprocess.CompletedProcess[str]:
    defaults = {"--context-limit": "4096", "--max-tokens": "256", "--max-retries": "1"}  # unless extra gives them
    base = [part for flag, value in defaults.items() if flag not in extra for part in (flag, value)]
    command = [sys.executable, "-c", RUN, "nih", "--backend", "openai", "--base-url", url, "--model", model,
               *base, "--tasks", "1", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
               "--no-progress", *extra]
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    return subprocess.run(command, capture_output=True, text=True, timeout=scaled_ceiling(120), env=env)


def stopped_before_start(result: subprocess.CompletedProcess[str], out: Path) -> str:
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "arc-eval: stopped before the first task:" in result.stderr
    assert "Nothing was run or recorded; run the command again after the fix." in result.stderr
    assert not out.exists()  # nothing scored: no run directory at all
    return result.stderr


def test_a_wrong_model_name(serve: type[Server], tmp_path: Path) -> None:
    server = serve()
    err = stopped_before_start(arc_eval(server.url, tmp_path / "run", model="Qwen/Qwen3-8B"), tmp_path / "run")
    assert "serves scripted, not 'Qwen/Qwen3-8B'. Fix: pass --model scripted" in err


def test_a_server_started_with_an_api_key(serve: type[Server], tmp_path: Path) -> None:
    server = serve("--api-key", "sesame")
    err = stopped_before_start(arc_eval(server.url, tmp_path / "run"), tmp_path / "run")
    assert "/v1/models: HTTP 401: Unauthorized. Fix: pass the server's key with --api-key KEY" in err
    # the fix: the same command with the key runs, and the key is recorded nowhere
    fixed = arc_eval(server.url, tmp_path / "run", "--api-key", "sesame")
    assert fixed.returncode == 0, fixed.stderr
    manifest = (tmp_path / "run" / "manifest.json").read_text()
    assert "sesame" not in manifest and "--api-key" not in json.loads(manifest)["command"]


def test_tool_mode_switched_off_on_the_server(serve: type[Server], tmp_path: Path) -> None:
    server = serve("--no-auto-tool-choice")
    model = tool_model_dir(tmp_path / "model")
    err = stopped_before_start(arc_eval(server.url, tmp_path / "run", "--tool-calling", "--tokenizer", model), tmp_path / "run")
    assert '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set' in err
    assert "Fix: restart vLLM with --enable-auto-tool-choice --tool-call-parser hermes" in err


def test_a_server_that_refuses_every_request_as_too_long(serve: type[Server], tmp_path: Path) -> None:
    server = serve("--overflow-every-request")
    err = stopped_before_start(arc_eval(server.url, tmp_path / "run"), tmp_path / "run")
    assert "refused a 1-token probe of a one-line prompt as too long although it reports a window of 4096" in err


def test_a_server_that_never_answers(serve: type[Server], tmp_path: Path) -> None:
    server = serve("--never-answer")
    started = time.monotonic()
    err = stopped_before_start(arc_eval(server.url, tmp_path / "run", "--request-timeout", "1"), tmp_path / "run")
    assert "the server is unavailable:" in err and "gave up after 2 attempts; last error: no answer within 1" in err
    assert time.monotonic() - started < scaled_ceiling(60)


def test_a_window_smaller_than_the_context_limit(serve: type[Server], tmp_path: Path) -> None:
    server = serve()
    result = arc_eval(server.url, tmp_path / "run", "--context-limit", "8192")
    err = stopped_before_start(result, tmp_path / "run")
    assert "smaller than --context-limit 8192" in err and "Fix: pass --context-limit 4096" in err


def test_a_refusal_mid_run_records_nothing_for_the_task_in_flight_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import arc_eval.execute
    from arc_eval.agent.scripted import ScriptedBackend
    from arc_eval.types import BackendReplyError, ChatReply, ChatRequest

    class BreaksAfter(ScriptedBackend):
        async def complete(self, request: ChatRequest) -> ChatReply:
            if self.calls >= 40:
                raise BackendReplyError("http://h/v1/chat/completions: `usage` must be an object, got '12'")
            return await super().complete(request)

    monkeypatch.setattr(arc_eval.execute, "make_backend", lambda spec, method=None: BreaksAfter())
    out = tmp_path / "run"
    argv = ["nih", "--tasks", "6", "--seeds", "42", "--methods", "sliding_window", "--out", str(out),
            "--no-progress", "--concurrency", "1"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "the server's answer breaks the API: http://h/v1/chat/completions: `usage` must be an object" in err
    finished = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    assert 0 < len(finished) < 6 and not any("usage" in (task["error"] or "") for task in finished)
    assert len(calls) == sum(task["calls"] for task in finished)  # no call of the unfinished task
    monkeypatch.undo()
    assert main(argv) == 0
    assert len((out / "tasks.jsonl").read_text().splitlines()) == 6


def test_a_key_that_cannot_travel_in_a_header_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["nih", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--api-key", "clé"]
    assert main(argv) == 2
    assert "--api-key must be printable ASCII" in capsys.readouterr().err
