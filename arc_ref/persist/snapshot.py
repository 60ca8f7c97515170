"""Snapshots of a store's state: a cache that spares the reopen the fold of every event.

The events are the store's truth (state = fold of the events over init(config)); a snapshot is the state
after event ``seq``, kept so that reopening folds only the events after it. It is used only when it is
certainly the fold of exactly those events under exactly this code:

- its ``chain`` equals the event log's chained checksum at ``seq`` (the same events, byte for byte);
- its ``key`` equals `snapshot_key` now: a digest of the snapshot format, the Python version, the versions
  of the libraries whose objects it holds, every source file of `arc_ref` (a change to the core's code may
  change the fold), the configuration line, the measured fixed costs and the configured tokenizer's tokens
  for a probe text (a tokenizer file changed in place);
- its ``digest`` (SHA-256 of the bytes) matches, and it loads with `load`, which accepts only the core's
  own attrs classes and the two persistent containers (pickle of anything else is refused, so a snapshot
  cannot run code).

Otherwise the store folds every event and says why (`OpenReport.snapshot_note`). The `Setup` (tokenizer,
chat format, ...) is not in the bytes: it is rebuilt from the configuration line and put back by identity.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import pickle
import sys
from pathlib import Path
from typing import Any

import attrs
import immutables
import pyrsistent

import arc_ref
from arc_ref.config import Setup
from arc_ref.errors import ArcError
from arc_ref.machine import ArcState

SNAPSHOT_FORMAT = "arc-ref snapshot 1 (pickle protocol 5, restricted loader)"
PICKLE_PROTOCOL = 5
# A probe for the tokenizer's identity: several scripts, digits, whitespace runs, the id sign.
TOKENIZER_PROBE = "ARC probe §0123-4567 _recall\n\tdef f(x): return x  # é 中文 😀 ёж ∑ <|im_end|>"


class SnapshotRefused(ArcError):
    """A snapshot that cannot be used (the store then folds every event instead: it never leaves the store)."""

    code = "snapshot_refused"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 over every source file of the `arc_ref` package (path and bytes), in path order."""
    root = Path(arc_ref.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode("utf-8") + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def snapshot_key(setup: Setup, config_line: bytes) -> str:
    """The key a snapshot must carry to be used with ``setup`` under the running code (see the module doc)."""
    parts = [
        SNAPSHOT_FORMAT,
        f"python {sys.version_info[0]}.{sys.version_info[1]}",
        f"pyrsistent {_version('pyrsistent')} immutables {_version('immutables')} attrs {_version('attrs')}",
        code_digest(),
        config_line.decode("utf-8"),
        f"B={setup.prefix_tokens} K={setup.budget} L={setup.limit} rho={setup.wrapper_cost}"
        f" gen={setup.generation_tokens} stub_floor={setup.stub_floor}",
        f"{setup.tokenizer.name} {setup.tokenizer.encode(TOKENIZER_PROBE)}",
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def _setup_parts(setup: Setup) -> dict[str, object]:
    """The setup and its non-plain attributes, by name: written as references, never as bytes."""
    parts: dict[str, object] = {"setup": setup}
    for field in attrs.fields(Setup):
        value = getattr(setup, field.name)
        if not isinstance(value, (int, str, bool, tuple, type(None))):
            parts[field.name] = value
    return parts


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, setup: Setup) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        self._references = {id(value): name for name, value in _setup_parts(setup).items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._references.get(id(obj))


def dump(state: ArcState) -> bytes:
    """The state's bytes, with its Setup (and the Setup's objects) written as references."""
    buffer = io.BytesIO()
    _Pickler(buffer, state.setup).dump(state)
    return buffer.getvalue()


def _allowed(module: str, name: str, found: object) -> bool:
    if module.split(".")[0] == "arc_ref":
        return isinstance(found, type) and attrs.has(found)
    return found is pyrsistent.pvector or found is immutables.Map


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, setup: Setup) -> None:
        super().__init__(file)
        self._parts = _setup_parts(setup)

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, str) or pid not in self._parts:
            raise SnapshotRefused(f"the snapshot refers to an unknown part of the setup: {pid!r}")
        return self._parts[pid]

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in ("arc_ref", "pyrsistent", "pvectorc", "immutables"):
            found = super().find_class(module, name)
            if _allowed(module, name, found):
                return found
        raise SnapshotRefused(f"the snapshot refers to {module}.{name}, which a snapshot may not hold")


def load(data: bytes, setup: Setup) -> ArcState:
    """The state in ``data`` with ``setup`` put back (SnapshotRefused when it is not a valid snapshot)."""
    try:
        state = _Unpickler(io.BytesIO(data), setup).load()
    except SnapshotRefused:
        raise
    except Exception as problem:  # any damage to the bytes: the snapshot is unusable, the events are not
        raise SnapshotRefused(f"the snapshot does not load ({type(problem).__name__}: {problem})") from None
    if not isinstance(state, ArcState) or state.setup is not setup:
        raise SnapshotRefused("the snapshot does not hold an ARC state")
    return state
