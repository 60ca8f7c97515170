"""Value types for the command lines of `arc-eval` and its subcommands: each checks one argument and says
what it expected (argparse turns the ArgumentTypeError into a usage error naming the option).
"""

from __future__ import annotations

import argparse
import urllib.parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port: an integer from 0 to 65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return value


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host (and, if any, a port from 0 to 65535), e.g. http://localhost:8000/v1."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL such as http://localhost:8000/v1, got {text!r}"
        )
    if not parts.hostname:
        raise argparse.ArgumentTypeError(f"the URL {text!r} names no host")
    try:
        parts.port
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        raise argparse.ArgumentTypeError(f"the URL {text!r}: port {port} is outside 0-65535") from None
    return text.strip()
