"""What a server's refusal means, and what the user must change: every message names the fix.

A refusal that is not a context overflow (`arc_eval.backends.overflow`) is a fault of the server
or of its configuration. Retrying cannot fix it, so the run stops (`BackendRequestError`), nothing
is recorded for the task in flight, and the same command resumes once the fix is made. The
patterns below are the servers' own words (vLLM's and llama.cpp's sources, the releases named in
`overflow`'s docstring):

- vLLM started with ``--api-key``: HTTP 401 ``{"error": "Unauthorized"}`` on every path under /v1
  (`AuthenticationMiddleware`); llama.cpp: 401 "Invalid API Key".
- a model name the server does not serve: vLLM 404 "The model `X` does not exist." (0.32 adds
  " Valid aliases: ..."); llama.cpp in single-model mode ignores the name.
- tool calling asked of a vLLM started without ``--enable-auto-tool-choice``: 400 '"auto" tool
  choice requires --enable-auto-tool-choice and --tool-call-parser to be set'; of a llama-server
  started with ``--no-jinja``: 500 "tools param requires --jinja flag".
- a completion cap above the window: vLLM 0.32 refuses ``max_tokens`` (or ``max_completion_tokens``) > L before
  counting the prompt, 400 "max_tokens=M cannot be greater than max_model_len=L. Please request fewer output
  tokens." (`renderers/params.py`, `TokenizeParams.__post_init__`). No prompt fits such a call, so it is no
  overflow: the run's ``--max-tokens`` or the server's ``--max-model-len`` must change.
- llama-server prefilling the assistant (its default, ``--prefill-assistant``): a request whose last
  message is the assistant's is continued instead of answered, and two assistant messages at the end
  are refused with 400 "Cannot have 2 or more assistant messages at the end of the list." (or
  "Cannot continue an assistant message that contains tool calls."). In tool-calling mode a reply
  without a tool call stays in the transcript as the assistant's message alone, so the next prompt
  ends with it: vLLM answers after it (``add_generation_prompt``), llama-server must be told to
  (``--no-prefill-assistant``).
- llama.cpp with several slots sharing one KV pool (``--kv-unified``, the default when the number
  of slots is automatic): long prompts at once get 500 "Context size has been exceeded.". That one
  is retried (it passes once other slots finish); if it persists, the message says how to give each
  slot its own window.
"""

from __future__ import annotations

API_KEY_FIX = (
    "pass the server's key with --api-key KEY (or set OPENAI_API_KEY); the server was started "
    "with --api-key"
)
TOOL_MODE_VLLM_FIX = (
    "restart vLLM with --enable-auto-tool-choice --tool-call-parser hermes (Qwen3's format), "
    "or run without --tool-calling"
)
TOOL_MODE_LLAMA_FIX = "restart llama-server with --jinja, or run without --tool-calling"
PREFILL_FIX = (
    "restart llama-server with --no-prefill-assistant (tool-calling mode: a reply without a tool call "
    "leaves the assistant's message last, which llama-server by default continues instead of answering "
    "after it as vLLM does), or run without --tool-calling"
)
MAX_TOKENS_FIX = (
    "pass --max-tokens below the server's window (the max_model_len in its message), or restart vLLM with "
    "--max-model-len equal to --context-limit"
)
SHARED_KV_FIX = (
    "give every llama-server slot its own window: --kv-unified-per-slot L (the pool is then "
    "sized n_parallel x L), or --no-kv-unified -np N -c N*L, or -np 1"
)


def configuration_fault(status: int, message: str) -> str | None:
    """The fix for a refusal caused by the server's configuration, or None when it is not one.

    Such refusals are never retried, even when the server answers them with a 5xx.
    """
    lowered = message.lower()
    if status in (401, 403) or "unauthorized" in lowered or "invalid api key" in lowered:
        return API_KEY_FIX
    if "tool choice requires" in lowered and "enable-auto-tool-choice" in lowered:
        return TOOL_MODE_VLLM_FIX
    if "requires --tool-call-parser" in lowered:
        return TOOL_MODE_VLLM_FIX
    if "cannot be greater than max_model_len" in lowered:
        return MAX_TOKENS_FIX
    if "requires --jinja" in lowered:
        return TOOL_MODE_LLAMA_FIX
    if "assistant messages at the end of the list" in lowered or "cannot continue an assistant message" in lowered:
        return PREFILL_FIX
    if status == 404 and "does not exist" in lowered:
        return (
            "pass --model with a name the server serves (GET /v1/models lists them; vLLM: the "
            "--served-model-name, else the model path given to `vllm serve`)"
        )
    return None


def retry_hint(message: str) -> str | None:
    """A hint for a retried error that did not pass (a 5xx whose cause is known), else None."""
    if "context size has been exceeded" in message.lower():
        return "llama-server's slots share one KV pool that long prompts at once overflow; " + SHARED_KV_FIX
    return None


def refusal_message(endpoint: str, status: int, message: str) -> str:
    """The run-stopping message of a refusal: what the server said, then what to change."""
    fix = configuration_fault(status, message)
    if fix is None:
        if status == 404:
            fix = (
                "check --base-url: it must be the server's root or its /v1 (e.g. "
                "http://localhost:8000/v1)"
            )
        elif status == 422 or status == 400:
            fix = (
                "the server refused the request's form; check that it is an OpenAI-compatible "
                "chat server (vLLM, llama-server) and read its log"
            )
        else:
            fix = "read the server's log"
    return f"{endpoint}: HTTP {status}: {message[:500].rstrip('.')}. Fix: {fix}."
