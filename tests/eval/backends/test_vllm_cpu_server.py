"""benchmarks/vllm_cpu/real_vllm.py's server wrapper without vLLM: a stand-in for the vLLM environment's Python
that binds a socket and writes a file in its temporary folder (as vLLM does: its ZMQ sockets and ``vllm_dist_*``
file, left behind on every start) and answers ``/health``."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

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
