"""Whether a dashboard's destination takes writes, asked before anything is written: a store that
cannot be written fails in one line at once, not after minutes of a library's retries or halfway
through an export. Permission bits cannot tell (root passes every check on a read-only mount such
as /sys), so the probe creates a file and removes it."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ConfigError


def _nearest(path: Path) -> Path:
    """``path`` or the closest of its parents that exists."""
    for p in (path, *path.parents):
        try:
            if p.exists():
                return p
        except OSError:  # e.g. a parent we may not read
            continue
    return Path(path.anchor or ".")


def check_dir(path: Path, key: str, what: str) -> None:
    """``path`` is a directory this process can write in, or one it can create (``what`` names the
    writer in the error: 'tensorboard writes its logs')."""
    path = Path(path)
    here = _nearest(path)
    if not here.is_dir():
        raise ConfigError(key, f"{what} in {path}, but {here} is a file, not a directory")
    before = here.stat()
    try:
        fd, probe = tempfile.mkstemp(prefix=".arch_zoo-probe-", dir=here)
    except OSError as exc:
        raise ConfigError(key, f"{what} in {path}, which cannot be {'written' if here == path else 'created'}: "
                               f"{exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    try:  # no trace, not even a newer mtime: a later check may still stop the command
        os.utime(here, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:
        pass


def check_file(path: Path, key: str, what: str) -> None:
    """``path`` is a file this process can open for writing, or can create in an existing directory."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(key, f"{what} {path}, but it is a directory")
    if not path.parent.is_dir():
        raise ConfigError(key, f"{what} {path}, but directory {path.parent} does not exist")
    if path.exists():
        try:
            with path.open("r+b"):
                pass
        except OSError as exc:
            raise ConfigError(key, f"{what} {path}, which cannot be written: {exc.strerror or exc}") from None
        return
    check_dir(path.parent, key, f"{what} {path.name}")
