"""The README opens with the two commands, and CI runs the second one verbatim."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2
    assert "arc-eval nih" in commands[0] and "pip install" in commands[0]
    assert "pytest" in commands[1]


def test_the_readme_test_command_installs_no_pytorch() -> None:
    """Issue 19: from PyPI, torch resolves to the CUDA build (gigabytes of nvidia packages): the test command
    installs neither torch nor the embeddings extra; CI runs the embeddings tests in a step of their own."""
    test_command = _readme_commands()[1]
    assert "torch" not in test_command and "embeddings" not in test_command
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    installed = test_command.split("-e '.[", 1)[1].split("]'", 1)[0].split(",")
    pending, seen = list(installed), set()
    while pending:  # the extras the command installs, with those they name (dev names hf, eval, ...)
        extra = pending.pop()
        seen.add(extra)
        for requirement in extras[extra]:
            assert not requirement.startswith(("torch", "sentence-transformers", "vllm")), (extra, requirement)
            if requirement.startswith("arc-ref["):
                pending += [name for name in requirement[8:].split("]")[0].split(",") if name not in seen]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "ARC_REQUIRE_EMBEDDINGS=1 .venv/bin/python -m pytest -m embeddings" in ci.splitlines()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _readme_commands()[1] in ci.splitlines()


def test_every_path_of_arc_ref_named_by_the_docs_exists() -> None:
    """A reader follows `arc_ref/...` paths from the README, DESIGN.md and spec/: each names a file or package
    that is there (the front ends moved to arc_ref/frontends/ and the Session to arc_ref/session/, issue 29)."""
    import re

    named = re.compile(r"arc_ref/[A-Za-z0-9_/]*[A-Za-z0-9_](?:\.py)?")
    documents = [ROOT / "README.md", ROOT / "DESIGN.md", *sorted((ROOT / "spec").glob("*.md"))]
    missing = sorted({(document.name, path) for document in documents
                      for path in named.findall(document.read_text(encoding="utf-8"))
                      if not (ROOT / path).exists()})
    assert not missing, f"paths the docs name that are not in the repository: {missing}"


def test_every_pip_install_of_the_readme_installs_this_checkout() -> None:
    """arc-ref is not published on a package index: a README command that installs it names the checkout
    (`pip install -e '.[EXTRAS]'`), never `arc-ref[...]`, which pip looks for on the index and does not find."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    installs = [line for block in blocks for line in block.splitlines() if "pip install" in line]
    assert installs
    by_name = [line for line in installs if re.search(r"pip install[^#]*['\"]?arc-ref\[", line)]
    assert not by_name, f"README commands that look arc-ref up on the index: {by_name}"


def test_the_proxy_extra_runs_the_proxy() -> None:
    """Review h54: the README's `pip install -e '.[proxy,postgres]'` (and "extra `proxy`") gave an `arc-ref proxy`
    that refused to start: its `--tokenizer hf-dir:DIR`, the only kind it takes, reads tokenizer.json with the
    package `tokenizers`, which only the extras hf and eval brought."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = [requirement.split(">")[0].split("=")[0].split("<")[0] for requirement in extras["proxy"]]
    assert "tokenizers" in names


def test_the_readme_says_mini_swe_agent_retries_the_proxys_refusals() -> None:
    """Review h54: the README said a typed 400 keeps a client from retrying; mini-swe-agent (the agents extra's pin)
    retries every exception but a few, a 400 included, 10 times with waits of 4 to 60 s (a refused prefix: 4 min
    17 s before it gave up). The README now says so and names the variable that stops it at once."""
    import pytest

    litellm_model = pytest.importorskip("minisweagent.models.litellm_model",
                                        reason="mini-swe-agent is not installed (the extra 'agents')")
    import litellm

    retried = not any(issubclass(litellm.exceptions.BadRequestError, aborting)
                      for aborting in litellm_model.LitellmModel.abort_exceptions)
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    if retried:
        assert "mini-swe-agent still retries every 400" in text and "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1" in text


def _extras_installed(extras: list[str]) -> set[str]:
    """The extras named, with those they name in turn (dev names hf, eval, proxy...)."""
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        seen.add(extra)
        for requirement in table[extra]:
            if requirement.startswith("arc-ref["):
                pending += [name for name in requirement[8:].split("]")[0].split(",") if name not in seen]
    return seen


def test_the_recipe_without_a_gpu_installs_what_its_commands_run() -> None:
    """Review h72: the recipe without a GPU said to install the extra `agents` for mini-swe-agent; on the first
    command's venv (`eval`) its `arc-ref proxy` line then stopped: "arc-ref proxy needs the extra 'proxy'"."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = text.split("**Without a GPU**", 1)[1].split("```bash\n", 1)[0]
    named = re.findall(r"pip install -e '\.\[([a-z,]+)\]'", recipe)
    assert len(named) == 1, recipe
    first = re.search(r"pip install -e '\.\[([a-z,]+)\]'", _readme_commands()[0])
    assert first is not None
    installed = _extras_installed([*first.group(1).split(","), *named[0].split(",")])
    commands = text.split("**Without a GPU**", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    needs = {"arc-eval serve-scripted": "eval", "arc-ref proxy": "proxy", "mini ": "agents"}
    missing = [f"{command.strip()} needs {extra}" for command, extra in needs.items()
               if command in commands and extra not in installed]
    assert not missing, missing
