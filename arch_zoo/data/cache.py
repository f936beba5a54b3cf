"""The token cache's contents (``arch-zoo cache list``) and their removal (``arch-zoo cache clean``).

The cache root holds, per store key, the store directory, ``KEY.lock`` while (or, from older
versions, after) a process builds it, and ``.tmp-KEY-*`` directories a killed build left; other
files (``builds.jsonl``, other tools' files) are never touched. A store is removed only under its
lock (``lock.py``), so one another process is building is never removed: it is reported as busy. A
run already reading a store keeps its open files; a later run prepares it again."""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from ..errors import ConfigError
from ..locks import acquire, is_held
from .store import MANIFEST, VERSION, read_manifest

KEY = re.compile(r"^[0-9a-f]{20}$")
TMP = re.compile(r"^\.tmp-([0-9a-f]{20})-")


@dataclass
class Key:
    """What the cache holds for one store key."""

    key: str
    store: Optional[Path] = None
    manifest: Optional[dict] = None
    temps: List[Path] = field(default_factory=list)
    lock: Optional[Path] = None
    busy: bool = False  # another process holds the lock: building it now

    @property
    def size(self) -> int:
        return sum(f.stat().st_size for d in ([self.store] if self.store else []) + self.temps
                   for f in d.rglob("*") if f.is_file())

    @property
    def current(self) -> bool:
        return bool(self.manifest) and self.manifest.get("version") == VERSION


def contents(root: Path) -> Dict[str, Key]:
    """Every store key the cache root mentions, with its store, temporary dirs and lock."""
    keys: Dict[str, Key] = {}
    if not root.is_dir():
        return keys
    for entry in sorted(root.iterdir()):
        name = entry.name
        if KEY.match(name) and entry.is_dir():
            k = keys.setdefault(name, Key(name))
            k.store, k.manifest = entry, read_manifest(entry / MANIFEST)
        elif TMP.match(name) and entry.is_dir():
            keys.setdefault(TMP.match(name).group(1), Key(TMP.match(name).group(1))).temps.append(entry)
        elif name.endswith(".lock") and KEY.match(name[:-5]) and entry.is_file():
            keys.setdefault(name[:-5], Key(name[:-5])).lock = entry
    for k in keys.values():
        k.busy = k.lock is not None and is_held(k.lock)
    return keys


@dataclass
class Cleaned:
    removed: List[str] = field(default_factory=list)  # one phrase per thing removed
    busy: List[str] = field(default_factory=list)  # keys another process is building: left alone
    freed: int = 0  # bytes


def clean(root: Path, keys: Optional[Iterable[str]] = None, stale_only: bool = False) -> Cleaned:
    """Remove the stores ``keys`` names (default: all), with their temporary dirs and lock files; with
    ``stale_only``, only temporary dirs and lock files nobody holds. Each key is handled under its lock,
    taken without waiting: a key whose lock another process holds is left as it is (``busy``)."""
    found = contents(root)
    keys = list(found) if keys is None else list(keys)
    unknown = [k for k in keys if k not in found]
    if unknown:  # checked before anything is removed
        raise ConfigError("KEY", f"no store {unknown[0]!r} in the token cache {root} (`arch-zoo cache list` shows "
                          f"its stores)")
    out = Cleaned()
    for key in keys:
        k = found[key]
        lock = acquire(root / f"{key}.lock", blocking=False)
        if lock is None:
            out.busy.append(key)
            continue
        with lock:  # releasing removes the lock file: stale ones go too
            for tmp in k.temps:
                out.freed += sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
                shutil.rmtree(tmp, ignore_errors=True)
                out.removed.append(f"temporary directory {tmp.name} (a build that did not finish)")
            if k.store is not None and not stale_only:
                out.freed += sum(f.stat().st_size for f in k.store.rglob("*") if f.is_file())
                shutil.rmtree(k.store, ignore_errors=True)
                out.removed.append(f"store {key}")
            if k.lock is not None:
                out.removed.append(f"stale lock {k.lock.name} (no process held it)")
    return out
