"""Value types for the command lines of `arc-eval` and its subcommands: each checks one argument and says
what it expected (argparse turns the ArgumentTypeError into a usage error naming the option).

Numbers are parsed by their bounds (``arc_ref.options``: ``integer_parser``, ``number_parser``, ASCII digits
only, re-exported here for the layers that do not import the core), and every parser refuses a flag given twice
(``once_each``).
"""

from __future__ import annotations

import argparse
import urllib.parse

from arc_ref.options import OneLineParser, integer_parser, number_parser, once_each

__all__ = ["OneLineParser", "http_url", "integer_parser", "number_parser", "once_each"]


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
