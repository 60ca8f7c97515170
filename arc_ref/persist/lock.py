"""The SQLite store's writer lock: one writer per database FILE.

A writer holds an exclusive flock on the database file itself (so a symlink or another name reaches the same
lock) for as long as it is open; a second writer gets `StoreLocked` naming the holder's pid (from /proc/locks).
A file with several names (hard links) is refused for writing: SQLite keeps a WAL per name. The lock goes with
the process, so a killed writer leaves no stale lock; no lock file is created. Readers take no lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from pathlib import Path

from arc_ref.persist.errors import StoreError, StoreLocked, StoreNotFound

_held_locks: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) of the stores this process holds for writing
_held_guard = threading.Lock()


def process_exists(pid: int) -> bool:
    """Whether a process with this PID runs on this machine (another user's counts): a file named after a dead one
    was left by a process killed before it could remove it."""
    if pid <= 0 or pid == os.getpid():
        return pid > 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process
        return True
    return True


def lock_holder(device: int, inode: int) -> str:
    """The pid holding a flock on the file, from /proc/locks (Linux), or "" when it cannot be told."""
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            for entry in listing:
                fields = entry.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4].isdigit():
                    return fields[4]
    except OSError:
        pass
    return ""


class WriterLock:
    """An exclusive flock on the database file itself, held while the writer is open (one writer per FILE,
    whatever name, symlink or hard link it is reached by); released by the kernel when the process dies.

    Nothing is created or written to take it. The descriptor is opened read-only, without O_CREAT, on the
    database (a FIFO or device at the store's path is refused by its type, never opened for writing)."""

    def __init__(self, path: Path, shown: Path) -> None:
        try:
            self.descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as problem:
            raise StoreError(f"cannot open {str(shown)!r} to lock it: {problem.strerror}") from None
        self.key = (0, 0)
        try:
            status = os.fstat(self.descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise StoreError(f"{str(shown)!r} is not a regular file; an ARC store is one SQLite file")
            if status.st_nlink != 1:
                raise StoreError(
                    f"{str(shown)!r} has {status.st_nlink} names (hard links): SQLite keeps a write-ahead log per"
                    " NAME, so two names of one store would lose or mix rows; open it for writing by one name"
                    " only (remove the other links, or copy the store)")
            self.key = (status.st_dev, status.st_ino)
            with _held_guard:
                if self.key in _held_locks:  # this process: closing a second descriptor would drop SQLite's locks
                    self.key = (0, 0)
                    raise StoreLocked(f"{str(shown)!r} is open for writing by process {os.getpid()} (this one);"
                                      " one writer at a time (readers: arc-ref inspect / export)")
                try:
                    fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as problem:
                    if problem.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        holder = lock_holder(*self.key)
                        self.key = (0, 0)
                        who = f"process {holder}" if holder else "another process"
                        raise StoreLocked(
                            f"{str(shown)!r} is open for writing by {who}; one writer at a time"
                            " (readers: arc-ref inspect / export)"
                        ) from None
                    self.key = (0, 0)
                    raise StoreError(f"cannot lock {str(shown)!r}: {problem.strerror}") from None
                if os.fstat(self.descriptor).st_nlink == 0:  # removed while the lock was taken (arc-ref forget)
                    fcntl.flock(self.descriptor, fcntl.LOCK_UN)
                    self.key = (0, 0)
                    raise StoreNotFound(f"{str(shown)!r} was removed while it was being opened")
                _held_locks[self.key] = self.descriptor
        except BaseException:
            os.close(self.descriptor)
            self.descriptor = -1
            raise

    def still_named(self, path: Path) -> bool:
        """Whether ``path`` still names the locked file (a rename or a removal while it is open: no longer)."""
        try:
            status = os.stat(path)
        except OSError:
            return False
        return (status.st_dev, status.st_ino) == self.key

    def release(self) -> None:
        if self.descriptor >= 0:
            with _held_guard:
                _held_locks.pop(self.key, None)
            os.close(self.descriptor)  # closing the descriptor drops the flock
            self.descriptor = -1
