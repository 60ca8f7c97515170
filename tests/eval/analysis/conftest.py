from __future__ import annotations

from pathlib import Path

import pytest

from proofs_check.shared_data import shared_data_dir

from .synthetic_runs import RunSpec, write_run


@pytest.fixture
def nih_run(tmp_path: Path) -> Path:
    run = tmp_path / "nih"
    write_run(run, RunSpec(tasks_per_seed=4))
    return run


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` relative to the repository root, or `$ARC_SHARED_DATA` (real material, never copied in)."""
    return shared_data_dir()
