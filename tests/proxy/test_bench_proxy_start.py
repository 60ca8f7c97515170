"""benchmarks/bench_proxy.py: a contender that exits before it listens is named with the end of its log (its
scratch folder is removed when the run stops: LiteLLM's proxy missing uvloop said only 'exited with 1')."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_server_that_exits_before_listening_is_named_with_its_log(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "benchmarks"))
        module = importlib.import_module("bench_proxy")
    command = [sys.executable, "-c", "import sys; print('starting'); print('No module named uvloop'); sys.exit(1)"]
    with pytest.raises(RuntimeError) as raised:
        with module.server_process(command, module.free_port(), "litellm proxy", log=tmp_path / "litellm.log"):
            pass
    message = str(raised.value)
    assert message.startswith("litellm proxy exited with 1 before listening"), message
    assert "No module named uvloop" in message and "starting" in message, message
