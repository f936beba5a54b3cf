"""An output directory written whole or not at all: checked before any work (exists and not empty
without ``force``, cannot be written), filled under a temporary name beside it, renamed at the end."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import ConfigError
from ..writable import check_dir


def check_out(out, force: bool = False, key: str = "--out", what: str = "the output is written") -> Path:
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(key, f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(key, f"{out} exists and is not empty; give --force to replace it")
    check_dir(out, key, what)
    return out


@contextmanager
def atomic_dir(out, force: bool = False, key: str = "--out") -> Iterator[Path]:
    """Yields the temporary directory to fill; on success it replaces ``out`` (``force``: whatever
    ``out`` held), on failure it is removed and ``out`` is untouched."""
    out = check_out(out, force, key)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            out.replace(old / out.name)
            tmp.replace(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.replace(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
