"""`arc-eval --out` given a directory it cannot use (issue 18, item 9): a clear refusal, exit 2, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from arc_eval.cli import main

NIH = ["nih", "--tasks", "1", "--seeds", "42", "--methods", "sliding_window", "--no-progress"]
NOBODY = 65534


def test_a_read_only_out_directory_is_refused_without_a_traceback() -> None:
    with tempfile.TemporaryDirectory(prefix="arc-read-only-") as directory:  # in /tmp: reachable by nobody
        scratch = Path(directory)
        scratch.chmod(0o755)
        _refused_read_only(scratch)


def _refused_read_only(scratch: Path) -> None:
    out = scratch / "read-only"
    out.mkdir()
    out.chmod(0o555)
    command = [sys.executable, "-c", "import sys; from arc_eval.cli import main; sys.exit(main(sys.argv[1:]))",
               *NIH, "--out", str(out)]
    # root writes anywhere: run the command as nobody so that the directory is read-only to it
    as_user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=scratch, **as_user)
    except PermissionError as failure:  # pragma: no cover - a container that forbids changing user
        pytest.skip(f"cannot run as an unprivileged user here: {failure}")
    assert done.returncode == 2, done.stderr
    assert "cannot write in run directory" in done.stderr and "Permission denied" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(out.iterdir()) == []


def test_an_empty_out_is_refused_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*NIH, "--out", ""]) == 2
    assert "--out names no directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no runs/... in the current directory


def test_refusing_an_unrelated_directory_leaves_no_lock_in_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"\xff\xd8")
    assert main([*NIH, "--out", str(out)]) == 2
    assert "is not empty (holiday.jpg)" in capsys.readouterr().err
    assert sorted(path.name for path in out.iterdir()) == ["holiday.jpg"]
