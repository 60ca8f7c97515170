"""The README's "Put ARC in front of your agent" Session snippet runs as written, against `serve-scripted` and the
example's stand-in model (only the server address, the tokenizer directory and the model name are replaced), in a
directory holding the `server.log` its `read_file` tool reads. The server counts with Qwen3's template, as vLLM
does, so the usage the snippet hands back matches the session's count on every reply."""

from __future__ import annotations

import importlib.util
import io
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from proofs_check.shared_data import QWEN3_ABSENT, qwen3_dir

REPO = Path(__file__).resolve().parents[2]
QWEN3 = qwen3_dir()


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Put ARC in front of your agent\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_snippet_is_short_and_defines_what_it_uses() -> None:
    lines = [line for line in readme_snippet().splitlines() if line.strip()]
    assert len(lines) <= 30 and "from arc_ref.session import Session" in lines
    assert "READ_FILE = {" in readme_snippet() and "def run_tool(" in readme_snippet()  # issue 19: were undefined


@pytest.mark.skipif(QWEN3 is None, reason=QWEN3_ABSENT)
def test_the_readme_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai", reason="the openai package (pip install -e '.[examples]') is absent")
    from arc_eval.backends.scripted_server import build_app, serve_in_thread

    spec = importlib.util.spec_from_file_location("session_openai", REPO / "examples" / "session_openai.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    code = readme_snippet()
    from arc_ref.session import CountsDifferWarning

    app = build_app(example.DemoModel(), max_model_len=16384, tokenizer=f"hf-dir:{QWEN3}")
    with serve_in_thread(app) as url, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replaced = (code.replace("http://localhost:8000/v1", url).replace("hf-dir:/models/Qwen3-8B", f"hf-dir:{QWEN3}")
                    .replace('model="Qwen/Qwen3-8B"', 'model="scripted"'))
        assert replaced.count(url) == 1 and replaced.count(str(QWEN3)) == 1 and 'model="scripted"' in replaced
        # the log twice: larger than the paper preset's recent window R, so H shows its stub and the model recalls
        (tmp_path / "server.log").write_text(example.FILES["server.log"] * 2, encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        namespace: dict[str, Any] = {}
        printed = io.StringIO()
        with redirect_stdout(printed):
            exec(compile(replaced, "README.md", "exec"), namespace)
    session = namespace["session"]
    assert namespace["message"].content.startswith("The row with status LATE is: row 070")
    assert session.state.stored == 1 and session.state.records[0].content == example.FILES["server.log"] * 2
    assert session.audit().recalled[0][:2] == (session.state.records[0].obs_id, 1)
    assert "tokens <= K =" in printed.getvalue()
    assert not [warning for warning in caught if issubclass(warning.category, CountsDifferWarning)]
    audit = session.audit()
    assert audit.usage_checked >= 2 and audit.counts_differing == 0 and audit.server_tokens == audit.sent_tokens
