"""The HTTP server set-up that `arc-ref proxy` and `arc-eval serve-scripted` share (DESIGN.md, layer "serving"):
the listening socket both hand to uvicorn. Both front ends may import it; it imports nothing of theirs."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for uvicorn (port 0: a free one; an address in use raises OSError), made with
    IPPROTO_TCP named so that asyncio sets TCP_NODELAY on its connections (without it Nagle's algorithm and
    delayed ACKs add ~40 ms to a small answer)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)
    return listener


__all__ = ["listening_socket"]
