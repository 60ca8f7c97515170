"""`arc-ref`: the command line around the pure core (the only module here that does I/O).

    arc-ref replay TRACE.jsonl|- [--verify]   one JSON line out per line in (spec/trace.md)
    arc-ref budgets [--preset NAME] [--set KEY=VALUE ...]   the budget table of a configuration
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from arc_ref.config import OVERRIDE_KEYS, PRESETS, STRING_FIELDS, make_setup, preset
from arc_ref.errors import ArcError
from arc_ref.trace import replay_text


def _replay(path: str, verify: bool) -> int:
    """Lines are split at LF bytes only (a CR before it is dropped), from a file or standard input alike;
    each line is decoded as UTF-8 on its own, so an undecodable line is one error line, not a stop.
    ``verify`` recounts every view's serialized text (the same output, or an error line for a view
    whose parts disagree with its text)."""
    out = sys.stdout.buffer
    if path == "-":
        for line in replay_text(sys.stdin.buffer, verify):
            out.write((line + "\n").encode("utf-8"))
            out.flush()
        return 0
    try:
        handle = open(path, "rb")
    except OSError as problem:
        print(f"arc-ref replay: cannot read {path!r}: {problem.strerror}", file=sys.stderr)
        return 2
    with handle:
        for line in replay_text(handle, verify):
            out.write((line + "\n").encode("utf-8"))
    return 0


def _parse_setting(text: str) -> tuple[str, object]:
    key, separator, value = text.partition("=")
    if not separator or key not in OVERRIDE_KEYS:
        raise ValueError(f"--set needs KEY=VALUE with KEY one of {', '.join(OVERRIDE_KEYS)}: {text!r}")
    if key in STRING_FIELDS:
        return key, value
    try:
        return key, int(value)
    except ValueError:
        raise ValueError(f"--set {key} needs an integer, got {value!r}") from None


def _budgets(preset_name: str, settings: Sequence[str]) -> int:
    try:
        overrides = dict(_parse_setting(text) for text in settings)
        setup = make_setup(preset(preset_name, **overrides))
    except (ValueError, ArcError) as problem:
        print(f"arc-ref budgets: {problem}", file=sys.stderr)
        return 2
    config = setup.config
    rows = [
        ("L_ctx", "context_limit", config.context_limit),
        ("G_max", "max_completion", config.max_completion),
        ("L = L_ctx - G_max", "limit", setup.limit),
        ("B = tokens(F)", "prefix_tokens", setup.prefix_tokens),
        ("M", "summary_budget", config.summary_budget),
        ("R", "recent_budget", config.recent_budget),
        ("P", "page_budget", config.page_budget),
        ("p", "page_size", config.page_size),
        ("c", "stub_cap", config.stub_cap),
        ("Q", "recall_budget", config.recall_budget),
        ("q", "chunk_tokens", config.chunk_tokens),
        ("rho", "wrapper_tokens", setup.wrapper_cost),
        ("eta", "overhead", config.overhead),
        ("K = B+M+R+P+Q+eta", "budget", setup.budget),
        ("N_max", "capacity", config.capacity),
        ("d", "fingerprint_bits", config.fingerprint_bits),
        ("r", "recalls_per_step", config.recalls_per_step),
    ]
    width = max(len(row[0]) for row in rows)
    print(f"preset {preset_name}, tokenizer {config.tokenizer}, chat format {config.chat_format}")
    for symbol, name, value in rows:
        print(f"  {symbol:<{width}}  {name:<16} {value}")
    print(json.dumps({"budget": setup.budget, "limit": setup.limit, "fits": setup.budget <= setup.limit}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="arc-ref", description="ARC reference core")
    commands = parser.add_subparsers(dest="command", required=True)
    replay_parser = commands.add_parser("replay", help="replay an event trace (JSON Lines)")
    replay_parser.add_argument("trace", help="path of the trace, or - for standard input")
    replay_parser.add_argument("--verify", action="store_true",
                               help="also count each view's serialized text whole and refuse a view whose parts disagree")
    budget_parser = commands.add_parser("budgets", help="show and check the budgets of a configuration")
    budget_parser.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    budget_parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "replay":
            return _replay(arguments.trace, arguments.verify)
        return _budgets(arguments.preset, arguments.set)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
