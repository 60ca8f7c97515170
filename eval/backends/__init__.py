"""Backends: an OpenAI-compatible HTTP client (vLLM is the target) and the scripted server.

The in-process scripted backend lives with the scripted agent (`eval.agent.scripted`).
"""

from eval.backends.openai_backend import BackendRequestError, OpenAIBackend
from eval.backends.overflow import is_context_overflow
from eval.backends.scripted_server import ScriptedServer, build_app, serve_in_thread, serve_main

__all__ = [
    "BackendRequestError",
    "OpenAIBackend",
    "ScriptedServer",
    "build_app",
    "is_context_overflow",
    "serve_in_thread",
    "serve_main",
]
