"""A chat message of the active view together with its exact token cost (role markers included)."""

from __future__ import annotations

from attrs import frozen


@frozen
class Message:
    """One serialized message; ``tokens`` is counted once, when the message is built."""

    role: str
    content: str
    tokens: int
