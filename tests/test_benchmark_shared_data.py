"""The benchmarks and the tests read the shared data (../shared/data beside the repository, or `$ARC_SHARED_DATA`, as
the README says) through one helper, proofs_check.shared_data, and name the path they looked at (review h47). Before, half of
them ignored ARC_SHARED_DATA (a hard-coded ../shared/data: bench_trajectories, bench_templates, bench_eval_templates,
bench_shown_form, bench_large_observation, refusal_cases, prefix_cache), and bench_replay, bench_count_once,
bench_proxy and bench_many_proxies said "../shared/data" where they had looked elsewhere.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from proofs_check.shared_data import QWEN3_NAME, SHARED_DATA_ENV, qwen3_dir
from tests.deployment import haproxy_absent, postgres_absent
from tests.test_benchmark_arguments import BENCHMARKS, run_script

SERVICES_ABSENT = postgres_absent() or haproxy_absent()

# (script, arguments, exit status, the file or folder of the shared data it names when ARC_SHARED_DATA is empty)
ABSENT: list[object] = [
    ("bench_replay.py", ["--mode", "tools", "--sizes", "1", "--repeat", "1"], 2, QWEN3_NAME),
    ("bench_count_once.py", ["--mode", "tools", "--events", "1"], 2, QWEN3_NAME),
    ("bench_fork_burst.py", [], 2, QWEN3_NAME),
    ("bench_large_observation.py", [], 0, QWEN3_NAME),
    ("bench_trajectories.py", [], 0, "trajectories"),
    ("bench_templates.py", [], 2, QWEN3_NAME),
    ("bench_eval_templates.py", [], 2, QWEN3_NAME),
    ("bench_proxy.py", ["--no-litellm"], 2, QWEN3_NAME),
    pytest.param(("bench_many_proxies.py", [], 2, QWEN3_NAME),
                 marks=pytest.mark.skipif(SERVICES_ABSENT is not None, reason=f"{SERVICES_ABSENT} (said first)")),
    ("proxy_cases.py", [], 2, QWEN3_NAME),
    ("refusal_cases.py", ["--no-fuzz", "--only", "port 99999"], 0, QWEN3_NAME),
    ("make_tiny_gguf.py", ["{tmp}/tiny.gguf"], 2, QWEN3_NAME),
    ("vllm_cpu/prefix_cache.py", ["--vllm-python", sys.executable, "--work", "{tmp}/work"], 0, "trajectories"),
]


@pytest.mark.parametrize("case", ABSENT, ids=lambda case: case[0])  # type: ignore[index]
def test_an_empty_shared_data_folder_is_named(case: tuple[str, list[str], int, str], tmp_path: Path) -> None:
    """ARC_SHARED_DATA names an empty folder: the script stops or skips as it documents, naming the path in that
    folder it looked for, never ../shared/data."""
    script, arguments, status, needed = case
    data = tmp_path / "data"
    data.mkdir()
    done = run_script(script, arguments, tmp_path, {SHARED_DATA_ENV: str(data)})
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said[-3000:]
    assert (done.returncode, f"{data}/{needed}" in said) == (status, True), said[-3000:]


OWN = re.compile(r"[\"']ARC_SHARED_DATA[\"']|[\"']shared[\"']\s*/\s*(?:[\"']data[\"']|$)")
# the README's commands name ../shared/data relative to the repository: its test runs them from there
READS_THE_README = {"test_readme_snippets.py"}


@pytest.mark.parametrize("folder", ["benchmarks", "tests"])
def test_no_script_or_test_finds_the_shared_data_itself(folder: str) -> None:
    """Every script of benchmarks/ and every test takes the folder from proofs_check.shared_data (shared_data_dir,
    qwen3_dir): none reads ARC_SHARED_DATA or builds the path ../shared/data itself."""
    root = BENCHMARKS.parent / folder
    found = [f"{path.relative_to(root)}:{number}: {line.strip()}"
             for path in sorted(root.rglob("*.py")) if path.name not in READS_THE_README
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if OWN.search(line.split("#")[0])]
    assert found == []


@pytest.mark.skipif(qwen3_dir() is None, reason="needs Qwen3's files")
def test_bench_shown_form_reads_qwen3_where_arc_shared_data_says(tmp_path: Path) -> None:
    """bench_shown_form fell back to o200k_base without a word where ../shared/data was absent, ARC_SHARED_DATA
    or not; it counts with the Qwen3 files the variable points at."""
    data = tmp_path / "data"
    data.mkdir()
    qwen3 = qwen3_dir()
    assert qwen3 is not None
    (data / QWEN3_NAME).symlink_to(qwen3)
    done = run_script("bench_shown_form.py", ["--mb", "0.001"], tmp_path, {SHARED_DATA_ENV: str(data)})
    first = done.stdout.splitlines()[:1]
    assert (done.returncode, first[0].startswith(f"tokenizer hf-dir:{data / QWEN3_NAME}: ")) == (0, True), (
        first, done.stderr)
