"""Shared value types of the evaluation layer.

Every part of `eval/` talks through these: the agent loop hands a `ChatRequest` to a `Backend`
and gets a `ChatReply` back (or a `ContextOverflow`), the loop runs actions in a task's
`Sandbox`, and every model call becomes one `CallRecord` line (see `eval/RECORDS.md`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, TextIO

from attrs import field, frozen

from arc_eval.errors import SERVER_STOPPED, EvalError
from arc_ref.config import PRESETS
from arc_ref.message import ToolCall, ToolSpec, openai_message
from arc_ref.openai_wire import ShapeError, WireToolCall, arguments_text, field_of, read_tool_call

ROLES = ("system", "user", "assistant", "tool")


@frozen
class Message:
    """One chat message exactly as sent to an OpenAI-compatible server.

    In tool-calling mode an assistant message carries the ``tool_calls`` the model made (the core's
    `arc_ref.message.ToolCall`: id, name, the arguments' JSON text as the model produced it) and a
    ``tool`` message the ``tool_call_id`` it answers. A method builds these; a backend sends them
    verbatim (``as_json``) and the run's counter counts exactly them.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @classmethod
    def from_json(cls, message: Mapping[str, Any]) -> Message:
        """An OpenAI chat message (a server's view of a request): null content is "", arguments kept as text."""
        calls = []
        for number, call in enumerate(message.get("tool_calls") or ()):
            try:
                read = read_tool_call(call, number)
            except ShapeError:  # a call without a function: an empty name, no arguments
                read = WireToolCall(field_of(call, "id"), None, None)
            name = "" if read.name is None else str(read.name)
            arguments = arguments_text(read.arguments, ensure_ascii=False)
            calls.append(ToolCall(str(read.call_id or f"call_{number}"), name, arguments))
        call_id = message.get("tool_call_id")
        return cls(str(message["role"]), str(message.get("content") or ""), tuple(calls),
                   None if call_id is None else str(call_id))

    def as_json(self) -> dict[str, Any]:
        """The message in OpenAI chat format: the core's wire shape (``arc_ref.message.openai_message``)."""
        return openai_message(self.role, self.content, self.tool_calls, self.tool_call_id)


@frozen
class ChatRequest:
    """What the agent loop asks a backend for: one completion of `messages`, with `tools` offered."""

    messages: tuple[Message, ...]
    max_tokens: int = PRESETS["paper"].max_completion
    temperature: float = 0.0
    seed: int | None = None
    # Free-form tags that identify the call in logs (method, task id, call index...).
    tags: Mapping[str, Any] = field(factory=dict)
    # Tool-calling mode: the function tools offered with this request (empty: none, text mode).
    tools: tuple[ToolSpec, ...] = ()


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
    # Tool-calling mode: the calls the model made, as the server returned them (id, name, arguments).
    tool_calls: tuple[ToolCall, ...] = ()
    # The prompt tokens the server served from its prefix cache (usage.prompt_tokens_details.cached_tokens: vLLM
    # with --enable-prompt-tokens-details), None when it does not say.
    cached_prompt_tokens: int | None = None


class ContextOverflow(EvalError):
    """The server (or the harness' own L_ctx - G_max check) rejected an over-long prompt.

    Raised by backends on an HTTP 400 whose message says "maximum context length" (vLLM), and
    by the harness when prompt_tokens > context_limit - max_tokens. Triggers reactive compaction.
    """

    exit_status = SERVER_STOPPED  # handled by the loop (reactive compaction); never ends a run by itself

    def __init__(self, message: str, prompt_tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.message = message
        self.prompt_tokens = prompt_tokens
        self.limit = limit


class BackendError(EvalError):
    """The backend failed, not the task: never scored; the run stops with this message and resumes later.

    Subclasses: ``BackendUnavailable`` (retries exhausted), ``BackendRequestError`` (the server
    refuses a request for a reason retrying cannot fix: its message names the cause and the fix),
    ``BackendReplyError`` (a reply that breaks the API). The loop lets every BackendError through and
    the runner stops the run: the task in flight is not recorded, so the same command, rerun after the
    fix, redoes it.
    """

    exit_status = SERVER_STOPPED


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

    async def count_prompt_tokens(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens the server will charge for `messages` (offered `tools`) with the generation prompt appended."""
        ...

    async def preflight(self, out: TextIO) -> None:
        """Check, before a run's first task, that the backend can serve the run, saying on ``out`` what it found; a
        BackendError naming the fix otherwise. Default: nothing to check (an in-process backend)."""
        return None

    async def aclose(self) -> None:
        """Release what the backend holds (HTTP clients); it may be used again after. Default: nothing held."""
        return None

    def servers_checked(self) -> list[dict[str, Any]]:
        """What ``preflight`` found of each server (its kind, models, window), for the run's record. Default: none
        (an in-process backend)."""
        return []


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
