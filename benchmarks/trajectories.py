"""Convert real agent runs (OpenHands, SWE-agent) into ARC event traces (`spec/trace.md`).

The files are read from `../shared/data/trajectories/` (or `$ARC_SHARED_DATA/trajectories`; see its SOURCES.md); nothing is copied into the
project. A trajectory becomes: the task goal, then for every tool call an agent turn (thought, action)
followed by the observation the tool returned.
"""

from __future__ import annotations

import ast
import contextlib
import json
from pathlib import Path
from typing import Any, Iterator

from attrs import frozen

from proofs_check.shared_data import shared_data_dir

DATA_DIR = shared_data_dir() / "trajectories"


@frozen
class Step:
    thought: str
    action: str
    observation: str
    returncode: int


@frozen
class Trajectory:
    name: str
    source: str
    goal: str
    steps: tuple[Step, ...]


def _maybe_mapping(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _openhands_action(event: dict[str, Any]) -> str:
    args = _maybe_mapping(event.get("args"))
    kind = event.get("action", "")
    if kind == "run":
        return str(args.get("command", event.get("message", "")))
    if kind in ("read", "edit"):
        path = args.get("path", "")
        extra = args.get("command") or ""
        return f"{kind} {path} {extra}".strip()
    return f"{kind} {event.get('message', '')}".strip()


def read_openhands(path: Path) -> Iterator[Trajectory]:
    """OpenHands evaluation output (JSON Lines; each line has a `history` of action/observation events)."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            history = record["history"]
            goal = next((e.get("message", "") for e in history if e.get("source") == "user"), record.get("instruction", ""))
            actions = {
                str(e["id"]): e for e in history
                if e.get("source") == "agent" and e.get("action") not in (None, "system", "message", "recall", "finish")
            }
            steps = []
            for event in history:
                cause = str(event.get("cause", ""))
                if "observation" not in event or cause not in actions:
                    continue
                action = actions[cause]
                args = _maybe_mapping(action.get("args"))
                extras = _maybe_mapping(event.get("extras"))
                metadata = _maybe_mapping(extras.get("metadata"))
                code = metadata.get("exit_code", 0)
                steps.append(Step(
                    thought=str(args.get("thought", "")),
                    action=_openhands_action(action),
                    observation=str(event.get("content", "")),
                    returncode=code if isinstance(code, int) and -(2**31) <= code < 2**31 else 0,
                ))
            yield Trajectory(str(record.get("instance_id", path.stem)), "openhands", goal, tuple(steps))


def read_sweagent(path: Path) -> Trajectory:
    """A SWE-agent `.traj` file: `trajectory` steps of thought / action / observation."""
    record = json.loads(path.read_text(encoding="utf-8"))
    history = record.get("history", [])
    goal = ""
    for message in history:
        if message.get("role") == "user":
            content = message.get("content", "")
            goal = content if isinstance(content, str) else json.dumps(content)
            break
    steps = tuple(
        Step(str(step.get("thought", "")), str(step.get("action", "")).strip(), str(step.get("observation", "")), 0)
        for step in record["trajectory"]
    )
    return Trajectory(path.stem, "swe-agent", goal, steps)


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read or is not of the shape its reader expects (the message names it)."""


def load_all(directory: Path = DATA_DIR) -> list[Trajectory]:
    trajectories: list[Trajectory] = []
    for path in sorted(directory.glob("*.jsonl")):
        with _named(path):
            trajectories.extend(read_openhands(path))
    for path in sorted(directory.glob("*.traj")):
        with _named(path):
            trajectories.append(read_sweagent(path))
    return trajectories


@contextlib.contextmanager
def _named(path: Path) -> Iterator[None]:
    try:
        yield
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as problem:
        raise TrajectoryError(f"cannot read the trajectory file {path}: {type(problem).__name__}: {problem}") from None


def to_trace(trajectory: Trajectory, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace: config (with the task goal), then per step a view, the agent turn and its observation."""
    lines: list[dict[str, Any]] = [{"op": "config", **config, "goal": trajectory.goal}]
    for step in trajectory.steps:
        lines.append({"op": "view"})
        lines.append({"op": "agent", "thought": step.thought, "action": step.action})
        lines.append({"op": "observe", "action": step.action, "observation": step.observation,
                      "returncode": step.returncode})
    lines.append({"op": "view"})
    return lines
