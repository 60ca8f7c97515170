"""A serve-scripted policy for agents run unchanged through `arc-ref proxy` (issue 20's acceptance test).

``arc-eval serve-scripted --policy arc_eval.agent.recall_then_submit:RecallThenSubmitPolicy`` answers a task
of the form "... the value of KEY in PATH ..." as a careful model would behind ARC: it reads the file with the
agent's bash tool; when the output comes back as ARC's stub (too long for the recent suffix) it calls ARC's
``_recall`` with the stub's id, then ``_recall-next`` chunk by chunk, until ``KEY=VALUE`` is in view; then it
submits in mini-swe-agent's way (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo KEY=VALUE``); an agent
that runs that command and asks again gets the plain answer ``KEY=VALUE``. It reads only the messages it is
given, never the file.
"""

from __future__ import annotations

import re
from typing import Sequence

from arc_eval.types import Message

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_TASK = re.compile(r"value of (?P<key>[A-Z][A-Z0-9_]+) in (?P<path>\S+?)[.,;]?(?:\s|$)")
_ID = re.compile(r"§[0-9]+(?:-[0-9]+)?")
_CHUNK = re.compile(r"\[recall (?P<id>§[0-9]+(?:-[0-9]+)?) chunk (?P<chunk>[0-9]+)/(?P<chunks>[0-9]+)\]")


class RecallThenSubmitPolicy:
    """Read the file, recall its stub chunk by chunk, submit the value (see the module docstring)."""

    def __call__(self, messages: Sequence[Message]) -> str:
        task = next((m.content for m in messages if m.role == "user" and _TASK.search(m.content)), None)
        if task is None:
            return "I cannot find a task of the form 'the value of KEY in PATH' in the conversation."
        found = _TASK.search(task)
        assert found is not None
        key, path = found.group("key"), found.group("path")
        later = [m for m in messages if m.content is not task]
        value = next((match.group(1) for m in later for match in re.finditer(rf"{key}=([A-Za-z0-9_-]+)", m.content)),
                     None)
        if value is not None:
            if any(m.role == "tool" and re.search(rf"^{SUBMIT}$", m.content, re.MULTILINE) for m in later):
                return f"{key}={value}"  # submitted and the agent kept going (it has no submit rule): the answer
            return f"Thought: {key} is {value}.\nAction: bash echo {SUBMIT} && echo {key}={value}"
        results = [m for m in later if m.role == "tool"]
        if not results:
            return f"Thought: I read {path} first.\nAction: bash cat {path}"
        chunks = [match for m in later for match in _CHUNK.finditer(m.content)]
        if chunks:
            last = chunks[-1]
            if int(last.group("chunk")) < int(last.group("chunks")):
                return f"Thought: {key} is not in this chunk; the next one.\nAction: _recall-next {last.group('id')}"
            return f"Thought: {key} is nowhere in {path}.\nAction: bash echo {SUBMIT} && echo {key}=missing"
        stub_ids = [match.group(0) for m in results for match in _ID.finditer(m.content)]
        if stub_ids:
            return f"Thought: the output is stored as {stub_ids[-1]}; I read it back.\nAction: _recall {stub_ids[-1]}"
        return f"Thought: {key} is not in the output.\nAction: bash echo {SUBMIT} && echo {key}=missing"


__all__ = ["RecallThenSubmitPolicy", "SUBMIT"]
