"""ARC in front of an agent with the OpenAI Python client, against any OpenAI-compatible server.

The session (`arc_ref.session.Session`) keeps the conversation: each request sends `session.messages()` (the
bounded view, counted with the served model's own tokenizer and chat template) and `session.tools()` (ARC's
recall and catalog tools, then the environment's `read_file`). The environment's results are stored under ids
the store mints; the model's calls to `_recall` / `_recall-next` are answered by the session, exactly, without
running anything again. Before every request the budget audit is printed. Each reply's usage goes back to the
session (`add_assistant(message, usage=reply.usage)`): where the server's `prompt_tokens` is not the session's
count of the messages sent (a tokenizer or template that is not the served model's) it warns, once
(`CountsDifferWarning`), and the audit counts the replies that differed.

Here, without a GPU or a model, against `arc-eval serve-scripted` and its stand-in model `DemoModel` below
(it reads the log, recalls it chunk by chunk through ARC's tools, and answers), from the repository root:

    pip install -e '.[eval,hf,examples]'
    PYTHONPATH=examples arc-eval serve-scripted --port 8011 --policy session_openai:DemoModel \\
        --tokenizer hf-dir:../shared/data/qwen3-tokenizer &
    python examples/session_openai.py --base-url http://127.0.0.1:8011/v1 --model scripted \\
        --tokenizer hf-dir:../shared/data/qwen3-tokenizer
    kill %1

Against a real model, e.g. vLLM serving Qwen3-8B (the tokenizer directory holds the model's tokenizer.json and
tokenizer_config.json, so the session counts each request exactly as vLLM does):

    vllm serve Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes
    python examples/session_openai.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \\
        --tokenizer hf-dir:/path/to/Qwen3-8B

The session's window is the one vLLM lists for the model (its --max-model-len, in /v1/models), or --context-limit.

tests/session/test_example.py runs the first recipe end to end.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Sequence

from openai import OpenAI

from arc_ref.session import Session

SYSTEM = "You are a careful operations agent. Read what you need; recall stored outputs by their id."
GOAL = "Which row of server.log has status LATE? Answer with that row."
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
FILES = {
    "server.log": "\n".join(
        f"row {number:03d}: latency={number * 37 % 211:3d}ms status={'LATE' if number == 70 else 'ok'}"
        for number in range(1, 201)
    )
}


def run_tool(name: str, arguments: str) -> tuple[str, int]:
    """The environment: read_file over a small in-memory workspace (output, return code)."""
    try:
        path = json.loads(arguments or "{}").get("path", "")
    except (json.JSONDecodeError, AttributeError):
        return f"{name}: arguments must be a JSON object", 2
    if name == "read_file" and path in FILES:
        return FILES[path], 0
    return f"{name}: no such file: {path}", 1


def short(text: str, width: int = 96) -> str:
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= width else flat[: width - 3] + "..."


MAX_TOKENS = 512  # each reply's max_tokens, the session's G_max


def served_window(client: OpenAI, model: str) -> int | None:
    """The window the server lists for ``model`` (vLLM's /v1/models gives each model's max_model_len); None when it
    does not say (review h61 F4: a session budgeted for a larger window than the server's met a 400 at step 8)."""
    try:
        listed = client.models.list().data
    except Exception:  # a server without /v1/models: the window is then the option's or the default
        return None
    for entry in listed:
        window = getattr(entry, "max_model_len", None)
        if entry.id == model and isinstance(window, int) and window > 0:
            return window
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--base-url", required=True, help="the server's OpenAI base URL, e.g. http://host:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--tokenizer", required=True, help="hf-dir:DIR of the served model (tokenizer + template)")
    parser.add_argument("--api-key", default="EMPTY")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--context-limit", type=int, default=None,
                        help="the server's window (default: the max_model_len the server lists for --model, as vLLM"
                             " does, else 16384)")
    args = parser.parse_args(argv)

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    window = args.context_limit or served_window(client, args.model) or 16384
    print(f"=== window {window} tokens, {MAX_TOKENS} of them kept for each reply")
    # K <= L = window - MAX_TOKENS: every request fits the server's window with the reply it asks for
    session = Session(args.tokenizer, system=SYSTEM, tools=[READ_FILE], context_limit=window,
                      max_completion=MAX_TOKENS, recent_budget=1536, chunk_tokens=640)
    session.add_user(GOAL)
    for step in range(1, args.max_steps + 1):
        messages = session.messages()
        print(f"=== request {step}: {len(messages)} messages, {len(session.tools())} tools")
        for message in messages:
            calls = "".join(f" -> {call['function']['name']}({call['function']['arguments']})"
                            for call in message.get("tool_calls", ()))
            print(f"  {message['role']:9} {short(message['content'] or '')}{calls}")
        print("  audit: " + session.audit().text().replace("\n", "\n         "))
        reply = client.chat.completions.create(
            model=args.model, messages=messages, tools=session.tools(), max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        message = reply.choices[0].message
        # ARC's calls are answered here, the environment's wait for their result; the usage checks the count
        session.add_assistant(message, usage=reply.usage)
        if not message.tool_calls:
            print(f"=== answer: {message.content}")
            break
        for call in message.tool_calls:
            function = getattr(call, "function", None)
            if function is None:
                continue
            if session.is_arc_call(call):
                answer = session.handle(call)
                print(f"  model called {function.name}({function.arguments}); answered by ARC: {short(answer['content'])}")
            else:
                output, returncode = run_tool(function.name, function.arguments)
                stored = session.add_tool_result(call.id, output, returncode)
                print(f"  model called {function.name}({function.arguments}); ran it: {len(output)} characters"
                      f" stored as {stored}")
    else:
        print(f"=== no answer after {args.max_steps} requests")
        return 1
    print("=== final audit: " + session.audit().text().replace("\n", "\n    "))
    return 0


# --- the stand-in model for `arc-eval serve-scripted --policy session_openai:DemoModel` -------------------------

_ID = re.compile(r"§[0-9]+(?:-[0-9]+)?")
_CHUNK = re.compile(r"\[recall (§[0-9]+(?:-[0-9]+)?) chunk ([0-9]+)/([0-9]+)\]")


class DemoModel:
    """A deterministic stand-in for a model (messages as serve-scripted hands them: role and text; its tool calls
    come back as ``Action: NAME ARGUMENTS``): read the log, then recall it chunk by chunk until a LATE row shows."""

    def __call__(self, messages: Sequence[Any]) -> str:
        text = "\n".join(str(message.content) for message in messages)
        late = [line for line in text.split("\n") if "status=LATE" in line and line.startswith("row ")]
        if late:
            return f"The row with status LATE is: {late[0]}"
        tool_outputs = [str(message.content) for message in messages if message.role == "tool"]
        stored = [match.group(0) for output in tool_outputs for match in _ID.finditer(output)]
        if not stored:
            return "Thought: I need the log first.\nAction: read_file server.log"
        chunks = {(obs_id, int(chunk), int(total)) for obs_id, chunk, total in _CHUNK.findall(text)}
        target = stored[0]
        seen = sorted(chunk for obs_id, chunk, _ in chunks if obs_id == target)
        if not seen:
            return f"Thought: The log is stored as {target}; I recall it exactly.\nAction: _recall {target}"
        return f"Thought: Not in chunk {seen[-1]} yet; the next chunk.\nAction: _recall-next {target}"


if __name__ == "__main__":
    sys.exit(main())
