"""The standard streams of the `arc-ref` commands, shared by `cli` and `store_cli` (so neither imports the other)."""

from __future__ import annotations

import os
import sys


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
