"""Backends: an OpenAI-compatible HTTP client (vLLM is the target) and the scripted server.

The in-process scripted backend lives with the scripted agent (`arc_eval.agent.scripted`).
"""

from arc_eval.backends.openai_backend import OpenAIBackend
from arc_eval.types import BackendRequestError
from arc_eval.backends.overflow import is_context_overflow
from arc_eval.backends.scripted_server import ScriptedServer, build_app, serve_in_thread, serve_main

__all__ = [
    "BackendRequestError",
    "OpenAIBackend",
    "ScriptedServer",
    "build_app",
    "is_context_overflow",
    "serve_in_thread",
    "serve_main",
]
