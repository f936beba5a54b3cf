"""File locks between processes: a token store's build lock (``KEY.lock`` in the cache: one process
builds, others wait) and a sweep's run lock (``runs/<run id>/.lock``: held by the process training
the run, so a rerun waits for it and a report knows a "running" run whose holder died). A leaf
(standard library), so the store, the sweeps and the reports share one probe.

filelock keeps its file on release, since waiters must all lock the same inode; so every prepare,
failed ones too, left a 0-byte lock behind, and removing one by hand could let two processes build
at once. Here (Unix: ``flock``) the holder removes the file before it lets go, and a process that
won the lock of a file removed meanwhile (the path no longer names its inode) lets go and tries
again. Removing a lock file while holding it is therefore always safe, for ``cache clean`` too, and
a file nobody holds is stale. Where ``flock`` is missing, filelock, whose file stays."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


class Lock:
    """A held lock; ``release`` removes its file (while still holding it), then lets go."""

    def __init__(self, path: Path, fd: Optional[int] = None, fallback=None):
        self.path, self._fd, self._fallback = path, fd, fallback

    def release(self, remove: bool = True) -> None:
        if self._fallback is not None:
            self._fallback.release()
            return
        if self._fd is None:
            return
        try:
            if remove:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(path: Path, blocking: bool = True, create: bool = True) -> Optional[Lock]:
    """The lock at ``path``; None when ``blocking`` is false and another process holds it (or, with
    ``create`` false, when there is no such file)."""
    path = Path(path)
    if fcntl is None:
        from filelock import FileLock, Timeout

        if not create and not path.exists():
            return None
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=-1 if blocking else 0)
        except Timeout:
            return None
        return Lock(path, fallback=lock)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            mine = os.stat(path)
            ours = os.fstat(fd)
            same = (mine.st_dev, mine.st_ino) == (ours.st_dev, ours.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            return Lock(path, fd)
        os.close(fd)  # the holder before us removed this file: lock the one at the path now
        if not create:
            return None


def is_held(path: Path) -> bool:
    """Whether a process holds the lock file at ``path`` now (a file nobody holds is stale)."""
    got = acquire(path, blocking=False, create=False)
    if got is None:
        return Path(path).exists()
    got.release(remove=False)  # a look changes nothing
    return False
