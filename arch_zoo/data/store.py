"""A prepared token store: one directory per (corpus, tokenizer, split options), read by memmap.

Layout: ``manifest.json`` (sources with size, mtime and sha256; the tokenizer and its hash; per
split its token and character counts, document starts (and, for prompt-completion records, where
each document's completion starts) and shards), ``tokenizer.json``, and per
split one or more raw shards ``{split}.{n:03d}.bin`` of ``uint16`` or ``uint32`` ids. A store is
only ever complete: it is built elsewhere and renamed into place (see ``prepare``)."""
from __future__ import annotations

import bisect
import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from ..errors import ConfigError
from .tokenizers import Tokenizer, load_tokenizer

MANIFEST = "manifest.json"
VERSION = 2  # 2: the manifest counts the characters a cut left out and the train split's unigram loss
SPLITS = ("train", "val", "test")


def cache_root(explicit: Optional[str] = None) -> Path:
    """``--cache-dir``, else ``$ARCH_ZOO_CACHE``, else ``$XDG_CACHE_HOME/arch_zoo`` (``~/.cache/arch_zoo``)."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get("ARCH_ZOO_CACHE"):
        return Path(os.environ["ARCH_ZOO_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "arch_zoo"


def lock_path(root: Path, key: str) -> Path:
    """The file a store's builder holds (``lock.py``) while it builds ``root / key``."""
    return Path(root) / f"{key}.lock"


def read_manifest(path: Path) -> Optional[dict]:
    """A store's manifest, or None when it cannot be read (a store from a damaged disk, a stray dir)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(path: Path) -> Dict[str, object]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_sha256(path)}


class TokenArray:
    """One split's ids across its shards, read by offset; memmaps open on first use (and are not
    pickled: a DataLoader worker opens its own). A read checks the ids against the vocabulary, so
    corrupt bytes are an error naming the shard, not a silent index error in the embedding."""

    def __init__(self, root: Path, shards: List[Dict[str, object]], dtype: str, vocab_size: int):
        self.root, self.shards, self.dtype, self.vocab_size = root, shards, np.dtype(dtype), vocab_size
        self.starts = [0]
        for s in shards:
            self.starts.append(self.starts[-1] + int(s["tokens"]))
        self._maps: Dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.starts[-1]

    def __getstate__(self):
        return {**self.__dict__, "_maps": {}}

    def _map(self, i: int) -> np.ndarray:
        if i not in self._maps:
            self._maps[i] = np.memmap(self.root / self.shards[i]["file"], dtype=self.dtype, mode="r",
                                      shape=(int(self.shards[i]["tokens"]),))
        return self._maps[i]

    def read(self, start: int, stop: int) -> np.ndarray:
        parts, pos = [], start
        while pos < stop:
            i = bisect.bisect_right(self.starts, pos) - 1
            end = min(stop, self.starts[i + 1])
            part = np.asarray(self._map(i)[pos - self.starts[i]:end - self.starts[i]], dtype=np.int64)
            if part.size and int(part.max()) >= self.vocab_size:
                raise ConfigError("task", f"token store shard {self.root / self.shards[i]['file']} is corrupt "
                                  f"(id {int(part.max())} >= vocabulary {self.vocab_size}); delete {self.root} "
                                  "to prepare it again")
            parts.append(part)
            pos = end
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


class TokenStore:
    """An opened store. Opening checks every shard's size (a truncated shard names its file)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.built_seconds: Optional[float] = None  # set by the prepare that built it (None: opened, cached)
        try:
            self.manifest = json.loads((self.root / MANIFEST).read_text())
            self.tokenizer: Tokenizer = load_tokenizer(self.root)
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError("task", f"token store {self.root} cannot be read ({exc}); delete it to prepare "
                              "it again") from None
        itemsize = np.dtype(self.manifest["dtype"]).itemsize
        for split in SPLITS:
            for shard in self.manifest["splits"][split]["shards"]:
                path = self.root / shard["file"]
                want = int(shard["tokens"]) * itemsize
                have = path.stat().st_size if path.is_file() else None
                if have != want:
                    what = "is missing" if have is None else f"is truncated ({have} bytes, expected {want})"
                    raise ConfigError("task", f"token store shard {path} {what}; delete {self.root} to prepare "
                                      "it again")

    @property
    def key(self) -> str:
        return self.manifest["key"]

    def split(self, name: str) -> TokenArray:
        return TokenArray(self.root, self.manifest["splits"][name]["shards"], self.manifest["dtype"],
                          self.tokenizer.vocab_size)

    def doc_starts(self, name: str) -> Optional[np.ndarray]:
        """Token offsets where the split's documents start (split_by: documents), else None."""
        f = self.manifest["splits"][name].get("doc_starts")
        return np.load(self.root / f, mmap_mode="r") if f else None

    def score_starts(self, name: str) -> Optional[np.ndarray]:
        """Per document (aligned with ``doc_starts``), the token where its scored part starts: its
        completion, with ``scored: completion``; None for a store that scores every token."""
        f = self.manifest["splits"][name].get("score_starts")
        return np.load(self.root / f, mmap_mode="r") if f else None

    def changed_source(self) -> Optional[str]:
        """The first source whose bytes differ from when the store was prepared (size and mtime
        first: a source is hashed again only when one of them moved)."""
        for src in self.manifest["sources"]:
            path = Path(src["path"])
            if not path.is_file():
                return f"{path} is gone"
            st = path.stat()
            if (st.st_size, st.st_mtime_ns) == (src["size"], src["mtime_ns"]):
                continue
            if st.st_size != src["size"] or file_sha256(path) != src["sha256"]:
                return f"{path} changed"
        return None

    def verify(self) -> None:
        """Hash every shard against the manifest (``arch-zoo prepare --verify``)."""
        for split in SPLITS:
            for shard in self.manifest["splits"][split]["shards"]:
                if file_sha256(self.root / shard["file"]) != shard["sha256"]:
                    raise ConfigError("task", f"token store shard {self.root / shard['file']} is corrupt (its sha256 "
                                      f"differs from the manifest's); delete {self.root} to prepare it again")

    def info(self) -> Dict[str, object]:
        """What a run records about its data (the ``task`` section of summary.json)."""
        m = self.manifest
        out = {"corpus": m["corpus"], "files": m["files"], "chars": m["chars"], "total_chars": m["total_chars"],
               "max_chars": m["recipe"]["max_chars"], "unigram_loss": m["unigram_loss"],
               "sha256": m["text_sha256"], "store": str(self.root), "store_key": m["key"],
               "split_by": m["recipe"]["split_by"], "tokenizer_sha256": m["tokenizer"]["sha256"]}
        if "stdlib_root" in m:
            out["stdlib_root"] = m["stdlib_root"]
        return out

    def cut(self) -> Optional[str]:
        return cut_text(self.info())

    def counts(self, field: str) -> Dict[str, int]:
        return {s: self.manifest["splits"][s][field] for s in SPLITS}


def cut_text(info: Dict[str, object]) -> Optional[str]:
    """What a max_chars cut left out, from a store's (or a run's summary's ``task``) record: one phrase
    that prepare, train and the report all print; None when the corpus was read whole."""
    total, chars = info.get("total_chars"), info.get("chars")
    if not isinstance(total, int) or not isinstance(chars, int) or total <= chars:
        return None
    return f"read {chars:,} of {total:,} characters (max_chars: {info.get('max_chars'):,})"
