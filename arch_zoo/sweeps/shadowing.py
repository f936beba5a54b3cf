"""Whether local sweep workers would import another arch_zoo than the one this command runs.

The local launcher's forkserver imports the training stack once, before it forks the workers. Until
CPython fixed it (gh-117378: 3.12.8, 3.13.1; never in 3.10 or 3.11) that server ignored the parent's
``sys.path`` and started, as ``python -c`` does, with the current directory first: an ``arch_zoo/``
folder there (a clone, an old or partial copy) was what every worker imported, so each run died with
the copy's traceback, or trained that copy's code. Checked in the parent before anything is planned
or written; a user who runs from their own clone with an editable install imports that same folder
in both, and hears nothing."""
from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import ConfigError

RUNNING = Path(__file__).resolve().parents[1]  # the arch_zoo package this process imported


def forkserver_takes_parent_path(version: Sequence[int] = tuple(sys.version_info)) -> bool:
    return tuple(version[:3]) >= (3, 13, 1) or (3, 12, 8) <= tuple(version[:3]) < (3, 13)


def shadowing_copy(cwd: Path, path: Sequence[str]) -> Optional[Path]:
    """The arch_zoo a process with ``cwd`` first on its ``path`` imports, where that is not the running one.
    (A folder without ``__init__.py`` is a namespace package: it shadows unless a later entry holds a
    regular package, as Python's own path search decides.)"""
    spec = importlib.machinery.PathFinder.find_spec("arch_zoo", [str(cwd), *path])
    if spec is None:  # not on the path at all: found by the installer's own finder, as here
        return None
    found = [Path(p) for p in spec.submodule_search_locations or []] or [Path(spec.origin)]
    return None if any(p.resolve() == RUNNING for p in found) else found[0]


def check_worker_imports(start_method: str, cwd: Optional[Path] = None,
                         version: Sequence[int] = tuple(sys.version_info)) -> None:
    """One ConfigError when workers started by ``start_method`` from ``cwd`` would import another arch_zoo."""
    if start_method != "forkserver" or forkserver_takes_parent_path(version):
        return  # spawned workers (and a fixed forkserver) take this process's path, and import what it imports
    cwd = Path.cwd() if cwd is None else Path(cwd)
    copy = shadowing_copy(cwd, sys.path[1:])  # sys.path[0] is this command's own script's (or cwd)
    if copy is not None:
        raise ConfigError("", f"{copy} shadows the arch_zoo this command runs ({RUNNING}) in sweep workers, which on Python "
                              f"{'.'.join(map(str, version[:3]))} start with the current directory first on their "
                              f"path: run the sweep from another directory, or install that copy (pip install -e "
                              f"{copy.parent})")
