"""`arc-ref`: the command line around the pure core (replay, budgets, and the table of subcommands).

    arc-ref replay TRACE.jsonl|- [--verify]   one JSON line out per line in (spec/trace.md)
    arc-ref budgets [--preset NAME] [--set KEY=VALUE ...]   the budget table of a configuration
    arc-ref inspect | export | copy | mcp | forget STORE ...   a durable store (arc_ref.frontends.store_cli)
    arc-ref proxy --upstream URL --tokenizer hf-dir:DIR [--store DIR]   ARC in front of any agent (arc_ref.frontends.proxy)

No input ends in a traceback: a bad line is an error line, a refused input or a failed read or write is one
line on standard error and an exit status of ``arc_ref.frontends.exit_status`` (the one table; spec/trace.md §8).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, BinaryIO, Callable, Iterator, Sequence

from arc_ref.frontends import store_cli
from arc_ref.config import JSON_FIELDS, OVERRIDE_KEYS, PRESETS, STRING_FIELDS, make_setup, preset
from arc_ref.frontends import exit_status
from arc_ref.errors import ArcError
from arc_ref.frontends.exit_status import MAX_LINE_BYTES as MAX_LINE_BYTES
from arc_ref.frontends.exit_status import CommandFailed
from arc_ref.frontends.proxy_options import add_proxy_flags, proxy_options
from arc_ref.frontends.streams import silence_stdout
from arc_ref.options import OneLineParser, once_each, undecodable_argument, unique_settings
from arc_ref.trace import TraceError, encode, replay_bytes, strict_json

# The exit statuses' numbers, from the one table (arc_ref.frontends.exit_status)
EXIT_OK = exit_status.OK.code
EXIT_USAGE = exit_status.USAGE.code
EXIT_LINE_TOO_LONG = exit_status.LINE_TOO_LONG.code
EXIT_IO = exit_status.IO.code
EXIT_INTERNAL = exit_status.INTERNAL.code
EXIT_INTERRUPTED = exit_status.INTERRUPTED.code
EXIT_CODES = exit_status.exit_codes_help()


class LineTooLong(ArcError):
    """Input line ``number`` has more than ``limit`` bytes before its LF (or the input never ends)."""

    code = "line_too_long"
    exit_status_hint = exit_status.LINE_TOO_LONG.code

    def __init__(self, number: int, limit: int) -> None:
        super().__init__(f"line {number} is longer than {limit} bytes, the longest line arc-ref replay reads")
        self.number = number
        self.limit = limit


def _say(message: str) -> None:
    """One line on standard error; nothing when standard error is closed (print(file=None) would use stdout)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(message + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def read_lines(stream: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of ``stream`` (each with its LF, when it has one), never holding more than ``limit`` + 1 bytes.

    Raises LineTooLong for a line of more than ``limit`` bytes before its LF: an input that never ends
    (/dev/zero) is refused after ``limit`` + 1 bytes instead of filling memory.
    """
    number = 0
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            raise LineTooLong(number, limit)
        yield line


def _input_lines(stream: BinaryIO, source: str) -> Iterator[bytes]:
    try:
        yield from read_lines(stream)
    except OSError as problem:
        raise CommandFailed(exit_status.IO, f"arc-ref replay: cannot read {source}: {problem.strerror or problem}") from None


def _standard_output() -> BinaryIO:
    if sys.stdout is None:
        raise CommandFailed(exit_status.IO, "arc-ref: standard output is closed; nothing can be written")
    return sys.stdout.buffer


def _write(out: BinaryIO, text: str | bytes, flush: bool) -> None:
    try:
        out.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        if flush:
            out.flush()
    except BrokenPipeError:
        raise  # the reader went away: main() ends quietly
    except OSError as problem:
        silence_stdout()
        raise CommandFailed(exit_status.IO, f"arc-ref: cannot write standard output: {problem.strerror or problem}") from None


def _replay(path: str, verify: bool = False) -> int:
    """Lines are split at LF bytes only (a CR before it is dropped), from a file or standard input alike;
    each line is decoded as UTF-8 on its own, so an undecodable line is one error line, not a stop.
    ``verify`` recounts every view's serialized text (the same output, or an error line for a view
    whose parts disagree with its text)."""
    out = _standard_output()
    interactive = path == "-"
    if interactive:
        if sys.stdin is None:
            raise CommandFailed(exit_status.IO, "arc-ref replay: standard input is closed; give a trace file or pipe one in")
        return _replay_stream(sys.stdin.buffer, "standard input", out, interactive, verify)
    try:
        handle = open(path, "rb")
    except OSError as problem:
        raise CommandFailed(exit_status.USAGE, f"arc-ref replay: cannot read {path!r}: {problem.strerror}") from None
    with handle:
        return _replay_stream(handle, repr(path), out, interactive, verify)


def _replay_stream(stream: BinaryIO, source: str, out: BinaryIO, interactive: bool, verify: bool) -> int:
    try:
        for line in replay_bytes(_input_lines(stream, source), verify):
            _write(out, line, flush=False)
            _write(out, b"\n", flush=interactive)  # apart: a view's line is not copied to add it
    except LineTooLong as refused:
        error = {"op": "error", "line": refused.number, "message": f"{refused}: the replay stops here"}
        _write(out, encode(error) + "\n", flush=True)
        raise CommandFailed(exit_status.status_of(refused), f"arc-ref replay: {refused}; stopped there") from None
    _write(out, "", flush=True)
    return EXIT_OK


# An integer given to --set is written as in JSON: ASCII digits, an optional leading '-', no leading zero.
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_MOST_DIGITS = 19  # more digits than this is out of range whatever they are (config integers < 2^31)


def _parse_setting(text: str) -> tuple[str, object]:
    key, separator, value = text.partition("=")
    if not separator or key not in OVERRIDE_KEYS:
        raise ValueError(f"--set needs KEY=VALUE with KEY one of {', '.join(OVERRIDE_KEYS)}: {text[:60]!r}")
    if key in STRING_FIELDS:
        return key, value
    if key in JSON_FIELDS:
        try:
            return key, strict_json(value)
        except TraceError as problem:
            raise ValueError(f"--set {key} needs a JSON value: {problem}") from None
    if not _JSON_INTEGER.fullmatch(value):
        raise ValueError(
            f"--set {key} needs an integer written as in JSON (ASCII digits, no sign but '-', no '_',"
            f" no spaces, no leading zero), got {value[:40]!r}"
        )
    if len(value.lstrip("-")) > _MOST_DIGITS:
        raise ValueError(f"--set {key}: a {len(value.lstrip('-'))}-digit number is out of range (at most 2147483647)")
    return key, int(value)


def _budgets(preset_name: str, settings: Sequence[str]) -> int:
    try:
        overrides = unique_settings(_parse_setting(text) for text in settings)
        setup = make_setup(preset(preset_name, **overrides))
    except (ValueError, ArcError) as problem:
        raise CommandFailed(exit_status.USAGE, f"arc-ref budgets: {problem}") from None
    out = _standard_output()
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
    lines = [f"preset {preset_name}, tokenizer {config.tokenizer}, chat format {config.chat_format}"]
    lines += [f"  {symbol:<{width}}  {name:<16} {value}" for symbol, name, value in rows]
    lines.append(json.dumps({"budget": setup.budget, "limit": setup.limit, "fits": setup.budget <= setup.limit}))
    _write(out, "".join(line + "\n" for line in lines), flush=True)
    return EXIT_OK


def _proxy(arguments: argparse.Namespace) -> int:
    try:
        from arc_ref.frontends.proxy_app import serve
    except ImportError as missing:
        raise CommandFailed(exit_status.USAGE, f"arc-ref proxy needs the extra 'proxy' (pip install 'arc-ref[proxy]'): {missing}")
    try:
        options = proxy_options(arguments)
    except ArcError as refused:
        raise CommandFailed(exit_status.USAGE, f"arc-ref proxy: {refused}") from None
    return serve(options, _parse_setting)


class _RefusesExtras(argparse.ArgumentParser):
    """A command's parser that refuses the arguments it does not take as its own usage error: `arc-ref proxy --bogus`
    said `arc-ref: unrecognized arguments: --bogus (see arc-ref --help)`, naming no command (argparse hands a
    command's unknown arguments to the top parser; review h43 NIT 3, there of arc-eval). First in a command's
    classes: after the command's own parse (forget's words after its options are more keys)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def main(argv: Sequence[str] | None = None) -> int:
    help_format = argparse.RawDescriptionHelpFormatter
    parser = OneLineParser(prog="arc-ref", description="ARC reference core", epilog=EXIT_CODES,
                           formatter_class=help_format)
    commands = parser.add_subparsers(dest="command", required=True)
    replay_parser = commands.add_parser(
        "replay", help="replay an event trace (JSON Lines)", epilog=EXIT_CODES, formatter_class=help_format,
        description="Write one JSON line per input line (spec/trace.md); lines of at most"
                    f" {MAX_LINE_BYTES} bytes.",
    )
    replay_parser.add_argument("trace", help="path of the trace, or - for standard input")
    replay_parser.add_argument("--verify", action="store_true",
                               help="also count each view's serialized text whole and refuse a view whose parts disagree")
    budget_parser = commands.add_parser("budgets", help="show and check the budgets of a configuration",
                                        epilog=EXIT_CODES, formatter_class=help_format)
    budget_parser.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    budget_parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    store_cli.add_commands(commands, _parse_setting)
    proxy_parser = commands.add_parser(
        "proxy", help="ARC in front of an agent: an OpenAI-compatible /v1/chat/completions proxy",
        description="Serve /v1/chat/completions: each conversation kept by ARC, the upstream sent ARC's view"
                    " (K <= L in the served model's tokens), every tool output recoverable by id (arc_ref.frontends.proxy).")
    add_proxy_flags(proxy_parser)
    unreadable = undecodable_argument(sys.argv[1:] if argv is None else argv)
    if unreadable is not None:  # before anything prints it (a UnicodeEncodeError otherwise)
        _say(f"arc-ref: {unreadable}")
        return EXIT_USAGE
    for command in set(commands.choices.values()):  # each refuses what it does not take, naming itself
        command.__class__ = type(type(command).__name__, (_RefusesExtras, type(command)), {})
    arguments = once_each(parser).parse_args(argv)  # a flag given twice is refused, but --set (repeatable)
    if arguments.command == "proxy":
        return _run(lambda: _proxy(arguments))
    if arguments.command in store_cli.STORE_COMMANDS:
        return _run(lambda: store_cli.run(arguments))
    return _run(lambda: _replay(arguments.trace, arguments.verify) if arguments.command == "replay"
                else _budgets(arguments.preset, arguments.set))


def _run(command: Callable[[], int]) -> int:
    """Run a subcommand; every way it can end becomes an exit status of EXIT_CODES and at most one stderr line."""
    try:
        return command()
    except CommandFailed as stop:
        _say(str(stop))
        return stop.status.code
    except BrokenPipeError:
        silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as bug:  # never input's fault: the replay answers every bad line with an error line
        _say(f"arc-ref: internal error (a bug in arc-ref, please report it): {type(bug).__name__}: {str(bug)[:200]}")
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
