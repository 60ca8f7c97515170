"""`arc-ref forget DIR KEY ...`: whole conversations removed from an `arc-ref proxy --store DIR` directory.

Each conversation is a store of its own, ``DIR/KEY/`` (its rows in ``task.arc``, its marks in ``marks.jsonl``),
named in the shared index ``DIR/hashes.sqlite`` (`arc_ref.persist.hash_index`). One is forgotten while holding its
store's writer lock (`arc_ref.persist.lock`: a proxy process holding it for a request makes it busy, left for a
later run): its directory renamed to ``DIR/.forgetting-KEY`` (at once no proxy finds it there), its index rows
deleted, the renamed directory removed, and only then the lock dropped, so that a process that opened the file just
before takes the lock of a file without a name and refuses it (`StoreNotFound`). A process that still finds the key
(an index lookup just before) cannot open the store and sets the key aside: its request starts a new conversation,
as the agent's next one does. A directory left renamed by a forget that was killed is removed by the next one.
A directory store records no creation time, so conversations are never chosen by age; ``--idle-for`` chooses them
by their last commit instead (`last_active`: the modification time of the files only a writer writes), checked
again under the store's lock, so a conversation a request committed to since it was chosen stays.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable, Sequence

import attrs

from arc_ref.persist.errors import StoreError, StoreLocked
from arc_ref.persist.hash_index import HASH_INDEX_FILE, HashIndex
from arc_ref.persist.lock import WriterLock
from arc_ref.persist.marks import INDEX_FILE, MarkFile

FORGETTING_PREFIX = ".forgetting-"  # a conversation's directory while it is removed
STORE_FILE = "task.arc"  # a conversation's durable store in its folder
# the files a commit writes and a reader never does (not the WAL: a reader may create an empty one)
WRITTEN_BY_A_COMMIT = (STORE_FILE + ".ack", STORE_FILE, INDEX_FILE)
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")  # a directory's name, never "." or "..", no leading dot


def is_conversation_directory(path: Path) -> bool:
    """Whether ``path`` is an `arc-ref proxy --store` directory (it holds the conversations' index)."""
    return (path / HASH_INDEX_FILE).is_file()


@attrs.frozen
class DirectoryForgotten:
    """What a forget in a store directory removed, and what it left."""

    conversations: tuple[str, ...] = ()
    busy: tuple[str, ...] = ()  # a proxy process held its store: left for a later run
    unknown: tuple[str, ...] = ()  # no conversation of this directory by that name
    index_rows: int = 0
    links: tuple[str, ...] = ()  # a symbolic link where a conversation's folder would be: never followed, left
    # (key, why): its store cannot be locked (not a regular file, hard links, ...): left, the others go on
    unlockable: tuple[tuple[str, str], ...] = ()


def last_active(folder: Path) -> float:
    """When a request last committed to the conversation in ``folder`` (POSIX time): the newest modification time
    of the files a commit writes (its acknowledgement record is rewritten by every one); 0.0 when none is there."""
    times = [0.0]
    for name in WRITTEN_BY_A_COMMIT:
        try:
            times.append(os.lstat(folder / name).st_mtime)
        except OSError:
            pass
    return max(times)


def idle_conversations(directory: Path, idle_before: float) -> list[str]:
    """Every conversation of ``directory`` no request committed to since ``idle_before`` (POSIX time), by name."""
    return sorted(entry.name for entry in os.scandir(directory)
                  if _KEY.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)
                  and MarkFile.holds_index(Path(entry.path)) and last_active(Path(entry.path)) < idle_before)


def forget_in_directory(directory: Path, keys: Sequence[str], dry_run: bool = False,
                        removed: Callable[[str], None] = lambda key: None,
                        idle_before: float | None = None) -> DirectoryForgotten:
    """Remove conversations ``keys`` from ``directory`` (see the module doc); with ``dry_run`` only sort them.
    ``removed`` is called with each key once it is gone. With ``idle_before`` (POSIX time), only conversations no
    request committed to since then, and with no keys, every such one."""
    chosen = idle_before is not None and not keys  # chosen here, not named: none of them is reported unknown
    if chosen:
        assert idle_before is not None
        keys = idle_conversations(directory, idle_before)
    named = list(dict.fromkeys(keys))
    # a link is no conversation folder of this store: refused before anything is touched, the dry run alike (review
    # h22 F4: it was renamed, its index rows deleted, then rmtree refused it, exit 2, and the link stayed for good)
    links = tuple(key for key in named if _KEY.fullmatch(key) and (directory / key).is_symlink())
    present = [key for key in named if key not in links
               and _KEY.fullmatch(key) and MarkFile.holds_index(directory / key) and (directory / key).is_dir()
               and (idle_before is None or chosen or last_active(directory / key) < idle_before)]
    # a key whose removal a forget interrupted or killed left half done: finished below, and counted as forgotten
    unfinished = [key for key in named if key not in present and key not in links and _KEY.fullmatch(key)
                  and os.path.lexists(directory / f"{FORGETTING_PREFIX}{key}")]
    unknown = tuple(key for key in named if key not in present and key not in links and key not in unfinished
                    and not chosen)
    if dry_run:
        return DirectoryForgotten(tuple(present + unfinished), (), unknown, 0, links)
    index = HashIndex(directory)
    forgotten: list[str] = []
    busy: list[str] = []
    unlockable: list[tuple[str, str]] = []
    rows = 0
    try:
        for leftover in directory.glob(FORGETTING_PREFIX + "*"):  # a forget killed meanwhile: finish its work,
            # the key's index rows included (review h22 F5: they stayed for good, and the key was no conversation)
            if leftover.is_symlink():
                leftover.unlink()
            else:
                shutil.rmtree(leftover, ignore_errors=True)
            rows += index.remove([leftover.name[len(FORGETTING_PREFIX):]])
        for key in unfinished:
            forgotten.append(key)
            removed(key)
        for key in present:
            store = directory / key / STORE_FILE
            try:  # (a conversation without its store, damaged, is removed without a lock: no process can hold it)
                lock = WriterLock(store, store) if os.path.lexists(store) else None
            except StoreLocked:
                busy.append(key)
                continue
            except StoreError as problem:  # (review h34 F4: it ended the run there, the keys after it never reached)
                unlockable.append((key, str(problem)))
                continue
            if idle_before is not None and last_active(directory / key) >= idle_before:
                if lock is not None:  # a request committed to it since it was chosen: it stays, not busy
                    lock.release()
                continue
            try:
                tomb = directory / f"{FORGETTING_PREFIX}{key}"
                os.rename(directory / key, tomb)
                rows += index.remove([key])
                shutil.rmtree(tomb)
            except OSError as problem:
                raise StoreError(f"cannot remove conversation {key} from {str(directory)!r}: {problem}") from None
            finally:
                if lock is not None:
                    lock.release()
            forgotten.append(key)
            removed(key)
    finally:
        index.close()
    return DirectoryForgotten(tuple(forgotten), tuple(busy), unknown, rows, links, tuple(unlockable))


__all__ = ["FORGETTING_PREFIX", "DirectoryForgotten", "forget_in_directory", "idle_conversations",
           "is_conversation_directory", "last_active"]
