"""How much counting work each event of a replay costs: chat-template renders and tokenizer encodes per event.

    python benchmarks/bench_count_once.py [--mode tools|text] [--events 3000] [--profile 25]

Replays bench_replay.py's trace in this process (tool mode: Qwen3's template and tokenizer from
../shared/data/qwen3-tokenizer; text mode: the paper preset under o200k_base) and counts, per op of the trace:
- renders: calls of the chat template's Jinja code (`ChatTemplate.render_parts`, the split rendering the counts
  are read from, and `ChatTemplate.render`, the whole text of a view line);
- encodes: calls into the tokenizer library (`HuggingFaceTokenizer._encoding`, `TiktokenTokenizer._tokens`).
Prints them per event and per op, the encodes per new message (a tool turn, a tool result, a user message, an
observation, an agent turn: the floor is one), and with ``--profile N`` the N top lines of a cProfile of the
replay (cumulative time). The counts are deterministic; tests/core/test_count_once.py bounds them.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import MOST_EVENTS, qwen3_tokenizer, write_tool_trace, write_trace  # noqa: E402

from arc_ref.options import integer_parser  # noqa: E402

NEW_MESSAGE_OPS = ("observe", "agent", "tool_turn", "tool_result", "user")


class Counter:
    """Counts calls of wrapped methods, attributed to the op of the trace line being replayed."""

    def __init__(self) -> None:
        self.op = "config"
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()
        self.chars: collections.Counter[str] = collections.Counter()  # encoded, and new message texts
        self.lines: collections.Counter[str] = collections.Counter()

    def wrap(self, owner: Any, name: str, kind: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[(self.op, kind)] += 1
            if kind == "encodes" and len(args) > 1 and isinstance(args[1], str):
                self.chars["encoded"] += len(args[1])
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[kind] += time.process_time() - started

        setattr(owner, name, counted)

    def lines_of(self, path: Path) -> Iterator[bytes]:
        import json

        with path.open("rb") as lines:
            for line in lines:
                event = json.loads(line)
                self.op = event.get("op", "?")
                self.lines[self.op] += 1
                self.chars["new"] += new_text_chars(event)
                yield line


def new_text_chars(event: dict[str, Any]) -> int:
    """Characters of the new texts an event brings (what the floor encodes once): an observation, a tool
    result, a user message, a thought with its action or its calls' names and arguments."""
    op = event.get("op")
    if op in ("observe", "tool_result"):
        return len(event["observation"])
    if op == "user":
        return len(event["content"])
    if op == "agent":
        return len(event["thought"]) + len(event["action"])
    if op == "tool_turn":
        return len(event["thought"]) + sum(len(call["function"]["name"]) + len(call["function"]["arguments"])
                                           for call in event.get("calls", ()))
    return 0


def instrument() -> Counter:
    from arc_ref.templates import ChatTemplate
    from arc_ref.tokenizers import HuggingFaceTokenizer, TiktokenTokenizer

    counter = Counter()
    counter.wrap(ChatTemplate, "render_parts", "split renders")
    counter.wrap(ChatTemplate, "render", "whole renders")
    counter.wrap(HuggingFaceTokenizer, "_encoding", "encodes")
    counter.wrap(TiktokenTokenizer, "_tokens", "encodes")
    return counter


def replay(path: Path, counter: Counter) -> int:
    from arc_ref.trace import replay_text

    written = 0
    for output in replay_text(counter.lines_of(path)):
        written += len(output)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("text", "tools"), default="tools")
    parser.add_argument("--events", type=integer_parser(1, MOST_EVENTS), default=3000,
                        help=f"events of the trace (1 to {MOST_EVENTS:,})")
    parser.add_argument("--profile", type=integer_parser(0, 10_000), default=0, metavar="N",
                        help="print the N top lines of a cProfile (0: none)")
    arguments = parser.parse_args()
    tokenizer = None
    if arguments.mode == "tools":
        tokenizer = qwen3_tokenizer()
        if tokenizer is None:
            from proofs_check.shared_data import QWEN3_ABSENT

            print(f"bench_count_once: tool mode needs Qwen3's files: {QWEN3_ABSENT}", file=sys.stderr)
            return 2
    import arc_ref

    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace.jsonl"
        if tokenizer is None:
            write_trace(trace, arguments.events)
        else:
            write_tool_trace(trace, arguments.events, tokenizer)
        counter = instrument()
        profile = cProfile.Profile() if arguments.profile else None
        started = time.process_time()
        if profile is not None:
            profile.enable()
        replay(trace, counter)
        if profile is not None:
            profile.disable()
        seconds = time.process_time() - started
    events = sum(count for op, count in counter.lines.items() if op != "config")
    messages = sum(counter.lines[op] for op in NEW_MESSAGE_OPS)
    kinds = ("split renders", "whole renders", "encodes")
    after_config = {kind: sum(n for (op, k), n in counter.calls.items() if k == kind and op != "config")
                    for kind in kinds}
    print(f"{arguments.mode} mode, {arguments.events:,} events ({messages:,} new messages), arc_ref from"
          f" {Path(arc_ref.__file__).parent}, {seconds:.2f} s CPU{' (profiled)' if profile else ''}")
    print(f"{'op':<12} {'lines':>7} " + " ".join(f"{kind + ' /line':>20}" for kind in kinds))
    for op in sorted(counter.lines):
        lines = counter.lines[op]
        print(f"{op:<12} {lines:>7} " + " ".join(f"{counter.calls[(op, kind)] / lines:>20.2f}" for kind in kinds))
    renders = after_config["split renders"] + after_config["whole renders"]
    split = after_config["split renders"] / events
    print(f"per event (config line apart): renders {renders / events:.2f} (split {split:.2f},"
          f" whole {after_config['whole renders'] / events:.2f}), encodes {after_config['encodes'] / events:.2f};"
          f" per new message: encodes {sum(counter.calls[(op, 'encodes')] for op in NEW_MESSAGE_OPS) / messages:.2f},"
          f" split renders {sum(counter.calls[(op, 'split renders')] for op in NEW_MESSAGE_OPS) / messages:.2f}")
    print("CPU seconds inside: " + ", ".join(f"{kind} {counter.seconds[kind]:.2f}" for kind in kinds)
          + f" (of {seconds:.2f}; a render's time includes none of the encodes)")
    print(f"characters encoded {counter.chars['encoded']:,} for {counter.chars['new']:,} characters of new text"
          f" ({counter.chars['encoded'] / max(counter.chars['new'], 1):.2f} x; config line included)")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(arguments.profile)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(arguments.profile)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository, last: it shadows no other import
    from benchmarks.servers import SERVERS, run

    SERVERS.stop_on_signals()  # SIGTERM, SIGHUP, Ctrl-C: one line and exit 128 + the signal, as the servers' benches
    sys.exit(run(main, "bench_count_once"))
