"""Agents that stand in for a model: the deterministic scripted policy and its in-process backend."""

from arc_eval.agent.scripted import ScriptedBackend, ScriptedPolicy

__all__ = ["ScriptedBackend", "ScriptedPolicy"]
