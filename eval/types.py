"""Shared value types of the evaluation layer.

Every part of `eval/` talks through these: the agent loop hands a `ChatRequest` to a `Backend`
and gets a `ChatReply` back (or a `ContextOverflow`), the loop runs actions in a task's
`Sandbox`, and every model call becomes one `CallRecord` line (see `eval/RECORDS.md`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from attrs import field, frozen

ROLES = ("system", "user", "assistant", "tool")


@frozen
class Message:
    """One chat message as sent to an OpenAI-compatible server."""

    role: str
    content: str

    def as_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@frozen
class ChatRequest:
    """What the agent loop asks a backend for: one completion of `messages`."""

    messages: tuple[Message, ...]
    max_tokens: int = 4096
    temperature: float = 0.0
    seed: int | None = None
    # Free-form tags that identify the call in logs (method, task id, call index...).
    tags: Mapping[str, Any] = field(factory=dict)


@frozen
class ChatReply:
    """A completion and the accounting the server reported for it."""

    content: str
    prompt_tokens: int  # the server's usage.prompt_tokens when it reports one, else the harness's count
    completion_tokens: int
    finish_reason: str  # "stop" | "length" | ...
    latency_s: float
    # The harness's own count of the same prompt, made before the request was sent (None when the
    # backend does not count before sending, as the in-process scripted backend).
    counted_prompt_tokens: int | None = None


class ContextOverflow(Exception):
    """The server (or the harness' own L_ctx - G_max check) rejected an over-long prompt.

    Raised by backends on an HTTP 400 whose message says "maximum context length" (vLLM), and
    by the harness when prompt_tokens > context_limit - max_tokens. Triggers reactive compaction.
    """

    def __init__(self, message: str, prompt_tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.message = message
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class BackendError(Exception):
    """The backend failed, not the task: never scored; the run stops with this message and resumes later.

    Subclasses: ``BackendUnavailable`` (retries exhausted), ``BackendRequestError`` (the server
    refuses a request for a reason retrying cannot fix: its message names the cause and the fix),
    ``BackendReplyError`` (a reply that breaks the API). The loop lets every BackendError through and
    the runner stops the run: the task in flight is not recorded, so the same command, rerun after the
    fix, redoes it.
    """


class BackendUnavailable(BackendError):
    """Retries exhausted on 5xx / timeouts / dropped connections. Never scored as a wrong answer."""


class BackendRequestError(BackendError):
    """The server refused a request for a reason retrying cannot fix (a wrong model name, a missing
    API key, tool calling switched off, a window smaller than the run's...); the message names the
    cause and the fix."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BackendReplyError(BackendError):
    """The server answered something the API does not promise (a missing field, a wrong type)."""


class Backend(Protocol):
    """An LLM server seen through the OpenAI chat-completions API (or an embedded stand-in)."""

    name: str

    async def complete(self, request: ChatRequest) -> ChatReply:
        """One chat completion; raises ContextOverflow or a BackendError."""
        ...

    async def count_prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens the server will charge for `messages` with the generation prompt appended."""
        ...


@frozen
class Observation:
    """What the sandbox returns for one normal action."""

    text: str
    returncode: int
    submitted: str | None = None  # the submitted answer when the action was `submit ...`


class Sandbox(Protocol):
    """A deterministic task environment: a virtual file system, no real shell."""

    def run(self, action: str) -> Observation: ...


@frozen
class Task:
    """One task instance. `answer` is read only by the scorer, never by methods or agents."""

    task_id: str
    kind: str  # "nih" | "longbench"
    goal: str
    files: Mapping[str, str]
    answer: str
    meta: Mapping[str, Any] = field(factory=dict)
    # The task's protocol: actions that must have run before a submission counts (paper, "Evaluation
    # metrics": a premature submission is a failure). Compared by action signature; empty: none.
    required_actions: tuple[str, ...] = ()
