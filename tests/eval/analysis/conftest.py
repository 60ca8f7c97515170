from __future__ import annotations

from pathlib import Path

import pytest

from .synthetic_runs import RunSpec, write_run


@pytest.fixture
def nih_run(tmp_path: Path) -> Path:
    run = tmp_path / "nih"
    write_run(run, RunSpec(tasks_per_seed=4))
    return run


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


@pytest.fixture
def shared_data(repo_root: Path) -> Path:
    """`../shared/data` relative to the repository root (real material, never copied in)."""
    return (repo_root / ".." / "shared" / "data").resolve()
