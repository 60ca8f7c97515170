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
    assert "pytest" in commands[1] and "torch==2.13.0" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _readme_commands()[1] in ci.splitlines()
