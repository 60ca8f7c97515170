"""Views under a served model's chat template, checked against the server's own count, and their cost.

    python benchmarks/bench_templates.py [--traces 50] [--events 40] [--seed 1] [--data ../shared/data]

Needs ../shared/data/qwen3-tokenizer (Qwen3's tokenizer.json and chat template) and ``transformers`` (the dev
extra). Prints, measured in one run:
- for N random replay traces in text mode and N in tool mode (Qwen3's template, random budgets around the
  paper preset's, observations of 0-6,000 characters, thoughts holding </think>, recalls and catalog commands,
  a view after every event): the number of views, the largest |view tokens - the server's count| (the
  view's OpenAI messages and tools rendered by transformers' apply_chat_template after vLLM's preprocessing,
  then encoded by transformers' tokenizer; must be 0), the largest |replay's `tokens` - that count| for the
  text-mode traces replayed through `arc-ref replay`'s contract, and the largest view in server tokens vs L;
- the cost of building a view (arc_ref.machine.view: summing per-message counts, O(messages)) under the
  template vs under ChatML on the same events, and of rendering its text (template: a Jinja render).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import timeit
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from arc_ref.config import Config, preset  # noqa: E402
from arc_ref.errors import CapacityExceeded, InvalidEvent  # noqa: E402
from arc_ref.machine import (  # noqa: E402
    AgentTurn,
    ArcState,
    Observe,
    ToolResult,
    ToolTurn,
    init,
    step,
    view,
)
from arc_ref.message import ToolCall  # noqa: E402
from arc_ref.options import integer_parser  # noqa: E402
from arc_ref.trace import replay  # noqa: E402
from proofs_check.shared_data import shared_data_dir, transformers_prompt  # noqa: E402

WORDS = ("def", "return", "self", "import", "the", "file", "line", "error", "0", "1", "None", "é", "中文", "😀",
         "<|im_end|>", "</think>", "<tool_response>", "\n", "\n\n", "  ")


def text(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(size // 5))


def random_config(rng: random.Random, directory: Path, mode: str) -> Config:
    page_size = rng.randint(2, 8)
    budgets = {
        "summary_budget": rng.randint(700, 2048), "recent_budget": rng.randint(1500, 4096),
        "page_budget": rng.randint(page_size * 112 + 100, 1400), "recall_budget": rng.randint(900, 4096),
        "chunk_tokens": rng.randint(64, 700), "page_size": page_size, "capacity": 4000,
    }
    fixed: dict[str, Any] = {"tokenizer": f"hf-dir:{directory}", "chat_format": "template", "action_mode": mode}
    if mode == "tools":
        fixed["tools"] = [{"type": "function", "function": {
            "name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
    return preset("paper", context_limit=20000, **budgets, **fixed)


def text_events(rng: random.Random, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    stored = 0
    for _ in range(count):
        kind = rng.choice(("observe", "observe", "agent", "recall", "catalog"))
        thought = text(rng, rng.randint(0, 200)) + rng.choice(("", "</think>", " done"))
        if kind == "observe":
            stored += 1
            events.append({"op": "observe", "action": f"cat f{stored}.txt", "observation": text(rng, rng.randint(0, 6000))})
        elif kind == "agent":
            events.append({"op": "agent", "thought": thought, "action": rng.choice(("ls", "grep key f.txt"))})
        elif kind == "recall":
            word = rng.choice(("_recall", "_recall-next", "_recall-start", "_recall_meta"))
            events.append({"op": "agent", "thought": thought, "action": f"{word} @stored{rng.randint(1, stored + 1)}"})
        else:
            events.append({"op": "agent", "thought": thought, "action": rng.choice(("catalog-first", "catalog-next"))})
    return events


def resolve(state: ArcState, action: str) -> str:
    if "@stored" not in action:
        return action
    word, _, index = action.partition(" @stored")
    number = int(index)
    return f"{word} {state.records[number - 1].obs_id if number <= state.stored else '§00099-1'}"


def to_event(state: ArcState, event: dict[str, Any]) -> Any:
    if event["op"] == "observe":
        return Observe(event["action"], event["observation"])
    return AgentTurn(event["thought"], resolve(state, event["action"]))


def server_count(directory: Path, state: ArcState) -> tuple[int, int, str]:
    shown = view(state)
    rendered, count = transformers_prompt(directory, shown.chat_messages(), shown.tools(), enable_thinking=False)
    assert rendered == shown.text(), "the view's text differs from transformers' rendering"
    return shown.tokens, count, rendered


def run_text(directory: Path, rng: random.Random, events: int) -> tuple[int, int, int, int, int, int]:
    """(views, max |ours - server|, max |replay - server|, largest view, L, K) of one text-mode trace."""
    config = random_config(rng, directory, "text")
    state = init(config)
    trace = text_events(rng, events)
    overrides = {name: getattr(config, name) for name in (
        "tokenizer", "chat_format", "context_limit", "summary_budget", "recent_budget", "page_budget",
        "recall_budget", "chunk_tokens", "page_size", "capacity")}
    lines = [json.dumps({"op": "config", "preset": "paper", **overrides})]
    views, worst, worst_replay, largest = 0, 0, 0, 0
    server_counts: list[int] = []
    for event in [None, *trace]:
        if event is not None:
            concrete = to_event(state, event)
            state, _ = step(state, concrete)
            lines.append(json.dumps({"op": "observe", "action": concrete.action, "observation": concrete.observation}
                                    if isinstance(concrete, Observe) else
                                    {"op": "agent", "thought": concrete.thought, "action": concrete.action}))
        ours, count, _ = server_count(directory, state)
        lines.append(json.dumps({"op": "view"}))
        server_counts.append(count)
        views += 1
        worst = max(worst, abs(ours - count))
        largest = max(largest, count)
    replayed = [output for output in replay(lines) if output["op"] in ("view", "error")]
    assert all(output["op"] == "view" for output in replayed), replayed[:1]
    for output, count in zip(replayed, server_counts):
        worst_replay = max(worst_replay, abs(output["tokens"] - count))
    return views, worst, worst_replay, largest, state.setup.limit, state.setup.budget


def run_tools(directory: Path, rng: random.Random, turns: int) -> tuple[int, int, int, int, int]:
    """(views, max |ours - server|, largest view, L, K) of one tool-mode trace."""
    config = random_config(rng, directory, "tools")
    state = init(config)
    views, worst, largest = 0, 0, 0
    number = 0
    for _ in range(turns):
        calls = []
        for _ in range(rng.randint(0, 3)):
            number += 1
            kind = rng.choice(("read_file", "read_file", "_recall", "catalog-next", "nope"))
            if kind == "_recall" and state.stored:
                arguments = json.dumps({"id": state.records[rng.randrange(state.stored)].obs_id})
            else:
                arguments = json.dumps({"path": f"f{number}.txt", "page": "2"}, ensure_ascii=rng.random() < 0.5)
            calls.append(ToolCall(f"call_{number}", kind, arguments))
        try:
            state, turn = step(state, ToolTurn(text(rng, rng.randint(0, 200)) + rng.choice(("", "</think>")), tuple(calls)))
        except InvalidEvent:
            continue
        for call in turn.environment_calls:  # type: ignore[union-attr]
            try:
                state, _ = step(state, ToolResult(call.call_id, text(rng, rng.randint(0, 6000))))
            except CapacityExceeded:
                return views, worst, largest, state.setup.limit, state.setup.budget
            ours, count, _ = server_count(directory, state)
            views += 1
            worst, largest = max(worst, abs(ours - count)), max(largest, count)
        ours, count, _ = server_count(directory, state)
        views += 1
        worst, largest = max(worst, abs(ours - count)), max(largest, count)
    return views, worst, largest, state.setup.limit, state.setup.budget


def view_costs(directory: Path, seed: int, events: int, repeats: int = 500) -> dict[str, float]:
    """Microseconds per view build and per text render, template vs ChatML, on the same events."""
    costs: dict[str, float] = {}
    rng = random.Random(seed)
    trace = text_events(rng, events)
    base = dict(context_limit=20000, capacity=4000)
    for label, config in (
        ("chatml o200k_base", preset("paper", **base)),
        ("chatml qwen3 tokenizer", preset("paper", tokenizer=f"hf-dir:{directory}", **base)),
        ("template qwen3", preset("paper", tokenizer=f"hf-dir:{directory}", chat_format="template", **base)),
    ):
        state = init(config)
        for event in trace:
            state, _ = step(state, to_event(state, event))
        shown = view(state)
        # the fastest of several rounds: the machine may be shared, the fastest round is the least disturbed
        costs[f"{label}: view build"] = min(timeit.repeat(lambda: view(state), number=repeats, repeat=7)) / repeats * 1e6
        costs[f"{label}: text render"] = min(timeit.repeat(shown.text, number=20, repeat=5)) / 20 * 1e6
        costs[f"{label}: messages in the view"] = len(shown.messages)
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=integer_parser(1, 100_000), default=50, help="1 to 100000")
    parser.add_argument("--events", type=integer_parser(1, 100_000), default=40,
                        help="events per text-mode trace, a third of them per tool-mode trace (1 to 100000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", type=Path, default=shared_data_dir())
    arguments = parser.parse_args(argv)
    directory = (arguments.data / "qwen3-tokenizer").resolve()
    if not (directory / "tokenizer.json").is_file():
        print(f"needs {directory} (Qwen3's tokenizer.json and chat template); pass --data", file=sys.stderr)
        return 2
    rng = random.Random(arguments.seed)
    started = time.perf_counter()
    text_rows = [run_text(directory, rng, arguments.events) for _ in range(arguments.traces)]
    tool_rows = [run_tools(directory, rng, arguments.events // 3) for _ in range(arguments.traces)]
    elapsed = time.perf_counter() - started
    print(f"text mode: {arguments.traces} replay traces, {sum(r[0] for r in text_rows)} views;"
          f" max |view tokens - server render-and-encode| = {max(r[1] for r in text_rows)};"
          f" max |replay tokens - server| = {max(r[2] for r in text_rows)};"
          f" largest view {max(r[3] for r in text_rows)} server tokens vs L = {text_rows[0][4]};"
          f" largest view / its K = {max(r[3] / r[5] for r in text_rows):.3f}, K <= L in every trace:"
          f" {all(r[5] <= r[4] for r in text_rows)}")
    print(f"tool mode: {arguments.traces} traces, {sum(r[0] for r in tool_rows)} views;"
          f" max |view tokens - server render-and-encode| = {max(r[1] for r in tool_rows)};"
          f" largest view {max(r[2] for r in tool_rows)} server tokens vs L = {tool_rows[0][3]};"
          f" largest view / its K = {max(r[2] / r[4] for r in tool_rows):.3f}")
    print(f"(checked in {elapsed:.0f} s)")
    costs = view_costs(directory, arguments.seed, arguments.events)
    for label, value in costs.items():
        print(f"{label}: {value:.0f}" + ("" if label.endswith("view") else " us"))
    ratio = costs["template qwen3: view build"] / costs["chatml qwen3 tokenizer: view build"]
    print(f"view build, template / chatml (same tokenizer): {ratio:.2f}x")
    return 0 if max(r[1] for r in text_rows) == max(r[2] for r in text_rows) == max(r[1] for r in tool_rows) == 0 else 1


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_templates"))
