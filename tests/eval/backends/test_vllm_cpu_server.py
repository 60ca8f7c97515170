"""benchmarks/vllm_cpu/real_vllm.py's pieces without vLLM: its server wrapper, with a stand-in for the vLLM
environment's Python that binds a socket and writes a file in its temporary folder (as vLLM does: its ZMQ sockets
and ``vllm_dist_*`` file, left behind on every start) and answers ``/health``; its recorder of a proxy's upstream
calls, with a stand-in upstream."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]

STAND_IN = """#!{python}
import http.server, os, socket, sys, tempfile
port = int(sys.argv[sys.argv.index("--port") + 1])
folder = tempfile.gettempdir()
with open(os.path.join(folder, "vllm_dist_stand_in"), "w") as sink:
    sink.write("written by the stand-in")
socket.socket(socket.AF_UNIX).bind(os.path.join(folder, "stand-in-socket"))
with open(os.environ["STAND_IN_RECORD"], "w") as record:
    record.write(folder)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *arguments):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def load_real_vllm() -> ModuleType:
    spec = importlib.util.spec_from_file_location("real_vllm", REPO / "benchmarks" / "vllm_cpu" / "real_vllm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_vllm"] = module
    spec.loader.exec_module(module)
    return module


def test_the_server_s_temporary_files_go_to_its_own_folder_removed_when_it_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_vllm = load_real_vllm()
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    record = tmp_path / "record"
    monkeypatch.setenv("STAND_IN_RECORD", str(record))
    before = set(os.listdir(tempfile.gettempdir()))
    server = real_vllm.VllmServer(str(stand_in), tmp_path / "model", tmp_path / "vllm-text.log", 60)
    try:
        folder = Path(record.read_text())
        assert folder.parent == tmp_path, folder
        assert sorted(os.listdir(folder)) == ["stand-in-socket", "vllm_dist_stand_in"]
    finally:
        server.stop()
    assert not folder.exists()
    left = set(os.listdir(tempfile.gettempdir())) - before
    assert not {name for name in left if "stand" in name}, left


class StandInUpstream(http.server.BaseHTTPRequestHandler):
    """vLLM's two routes the proxy calls: GET /v1/models, and POST /v1/chat/completions answering with the prompt's
    length as usage (400 for a request without messages)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.answer(200, {"data": [{"id": "tiny-qwen3", "max_model_len": 8192}]})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if not request.get("messages"):
            self.answer(400, {"error": {"message": "no messages"}})
        else:
            self.answer(200, {"choices": [], "usage": {"prompt_tokens": len(json.dumps(request["messages"]))}})

    def answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *arguments: Any) -> None:
        pass


def test_the_upstream_recorder_passes_every_call_through_and_keeps_the_chat_calls() -> None:
    real_vllm = load_real_vllm()
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInUpstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    recorder = real_vllm.UpstreamRecorder(f"http://127.0.0.1:{upstream.server_address[1]}/v1")
    try:
        with httpx.Client(timeout=30) as client:  # one connection kept open, as the proxy's
            models = client.get(f"{recorder.url}/models")
            messages = [{"role": "user", "content": "écart → 🕒"}]
            answered = client.post(f"{recorder.url}/chat/completions", json={"messages": messages})
            refused = client.post(f"{recorder.url}/chat/completions", json={"messages": []})
        assert models.status_code == 200 and models.json()["data"][0]["max_model_len"] == 8192
        assert answered.status_code == 200 and refused.status_code == 400
        assert recorder.calls == [({"messages": messages}, 200, answered.json()),
                                  ({"messages": []}, 400, {"error": {"message": "no messages"}})]
    finally:
        recorder.stop()
        upstream.shutdown()
        upstream.server_close()


def test_the_recalled_payload_is_read_between_its_frame_lines_and_a_difference_is_located() -> None:
    real_vllm = load_real_vllm()
    stored = real_vllm.log_output(0)
    assert "écart → 3 ms 🕒" in stored and stored.endswith("\n")  # characters of 2, 3 and 4 bytes in UTF-8
    identifier = "§00001-0186530882"

    def buffer(payload: str) -> str:
        return f"[ARC recall buffer]\n[recall {identifier} chunk 1/1]\n{payload}\n[end {identifier} chunk 1/1]"

    assert real_vllm.recalled_payload(buffer(stored), identifier) == stored
    assert real_vllm.recalled_payload(buffer(stored), "§00002-0186530882") is None
    assert real_vllm.recalled_payload("[ARC recall buffer]", identifier) is None
    clipped = real_vllm.recalled_payload(buffer(stored[:-1]), identifier)
    assert clipped == stored[:-1]
    assert real_vllm.difference(clipped, stored) == (
        "584 characters where 585 are stored, the first difference at character 584: '' where the stored text has"
        " '\\n'")
