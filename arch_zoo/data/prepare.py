"""``prepare``: a corpus task's options -> its token store, built once and shared by every run.

The store's directory name is a hash of what determines its ids (the resolved inputs, text_field,
max_chars, split_by, dtype, the tokenizer spec and a pretrained tokenizer file's sha256); seq_len,
eval_lengths and masking are read-time choices, so the variants of a sweep share one store. It is
built in a temporary directory and renamed into place under a file lock (``lock.py``): concurrent
workers build it once, and a killed prepare leaves only a temporary directory, removed by the next
prepare (``arch-zoo cache clean`` too). A source whose bytes changed since (size or mtime moved and
the sha256 differs) triggers a rebuild.

``max_chars: auto`` (the default) reads a user's files whole and the default corpus (the standard
library) up to ``STDLIB_CHARS``; a cut is counted: the manifest records the characters it left out."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from ..errors import ConfigError
from .encode import BATCH, FRACTIONS, ShardWriter, batches, encoded, scan, segments
from ..locks import acquire
from . import progress as lines
from .pretrained import tokenizer_file
from .progress import Heartbeat, Progress, counted, interactive, quiet
from .sources import Input, resolve, stdlib_inputs, stdlib_origin, stdlib_root
from .store import MANIFEST, SPLITS, VERSION, TokenStore, cache_root, fingerprint, file_sha256, lock_path
from .tokenizers import TOKENIZERS, Tokenizer, parse_tokenizer

DTYPES = ("auto", "uint16", "uint32")
AUTO = "auto"  # max_chars: a user's files whole, the default corpus up to STDLIB_CHARS
STDLIB_CHARS = 2_000_000  # the default corpus's cut, as it always was (the same recipe, the same ids)
Log = Callable[[str], None]


@dataclass
class Recipe:
    inputs: List[Input]
    origin: str
    options: object  # the task's CorpusOptions
    tokenizer: dict  # the spec, as a plain dict

    @property
    def by_documents(self) -> bool:
        return self.options.split_by == "documents"

    @property
    def fields(self):
        """What a record holds (sources.Fields): its text field, or (prompt, completion) with scored: completion."""
        o = self.options
        if getattr(o, "scored", "all") == "completion":
            return (o.prompt_field, o.completion_field)
        return o.text_field

    @property
    def max_chars(self) -> Optional[int]:
        """The cut in characters (None: none), with ``auto`` resolved."""
        limit = self.options.max_chars
        if limit == AUTO:
            return None if self.options.files else STDLIB_CHARS
        return limit

    def identity(self) -> dict:
        o = self.options
        tok = dict(self.tokenizer)
        if tok.get("name") == "pretrained":  # the file's content, not only its name
            tok["sha256"] = file_sha256(tokenizer_file(tok["path"]))
        inputs = json.dumps([[str(i.path), i.kind] for i in self.inputs])
        out = {"version": VERSION, "inputs_sha256": hashlib.sha256(inputs.encode()).hexdigest(),
               "n_inputs": len(self.inputs), "corpus": self.origin,
               "text_field": o.text_field, "max_chars": self.max_chars, "split_by": o.split_by, "dtype": o.dtype,
               "fractions": list(FRACTIONS), "tokenizer": tok}
        if not isinstance(self.fields, str):  # only such stores: every other key stays what it was
            out["fields"] = list(self.fields)
        return out

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:20]


def recipe(options) -> Recipe:
    spec = TOKENIZERS.parse(options.tokenizer, "task.tokenizer")
    if options.files:
        return Recipe(resolve(list(options.files)), "files", options, spec.to_dict())
    return Recipe(stdlib_inputs(), stdlib_origin(), options, spec.to_dict())


def prepare(options, cache_dir: Optional[str] = None, log: Optional[Log] = None,
            progress: bool = False) -> TokenStore:
    """The store for a corpus task's options: opened when it exists and its sources are unchanged (its
    ``built_seconds`` None: cached), else built under the store's lock, so that only one process builds
    it. ``progress``: a bar on a terminal, else a line every few seconds, through ``log``."""
    log = log or quiet
    r = recipe(options)
    root = cache_root(cache_dir)
    key = r.key()
    final = root / key
    store = _open(final, log)
    if store is not None:
        return store
    made_root = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("--cache-dir", f"cannot create the token cache {root}: {exc.strerror}") from None
    try:
        return _locked_build(r, root, key, log, progress)
    except BaseException:
        if made_root and not any(root.iterdir()):  # nothing half-written: not even the cache directory
            root.rmdir()
        raise


def _locked_build(r: Recipe, root: Path, key: str, log: Log, progress: bool) -> TokenStore:
    final = root / key
    lock = acquire(lock_path(root, key), blocking=False)
    if lock is None:
        log(f"waiting for another process preparing {final}")
        lock = acquire(lock_path(root, key))
    with lock:
        store = _open(final, quiet)  # another process may have built it while this one waited (said once above)
        if store is not None:
            log(f"cached {final} (prepared by another process meanwhile)")
            return store
        for stale in root.glob(f".tmp-{key}-*"):  # left by a killed prepare: the lock says nobody builds now
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        began = time.perf_counter()
        with _cleanup(tmp, root):
            _build(r, key, tmp, progress, log)
            old = None
            if final.exists():
                old = root / f".tmp-{key}-old-{uuid.uuid4().hex[:8]}"
                os.rename(final, old)
            os.rename(tmp, final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        seconds = time.perf_counter() - began
        if progress and (interactive() or seconds >= lines.EVERY):  # off a terminal, only a build long enough to watch
            log(f"prepared {final} in {seconds:.1f}s")
        _record_build(root, key, seconds)
    store = TokenStore(final)
    store.built_seconds = seconds
    return store


def _record_build(root: Path, key: str, seconds: float) -> None:
    """One line per build in the cache's builds.jsonl: how often a corpus was tokenized, and by whom."""
    line = {"key": key, "pid": os.getpid(), "seconds": round(seconds, 3),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(root / "builds.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def _open(final: Path, log: Log) -> Optional[TokenStore]:
    if not (final / MANIFEST).is_file():
        return None
    store = TokenStore(final)
    changed = store.changed_source()
    if changed:
        log(f"token store {final}: {changed} since it was prepared; preparing it again")
        return None
    return store


@contextmanager
def _cleanup(tmp: Path, root: Path):
    """Whatever stops a build (an error, a full disk, Ctrl-C) removes its temporary directory."""
    try:
        yield
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, ConfigError):
            raise ConfigError("task", f"cannot write the token store in {root}: {exc.strerror or exc}") from None
        raise


def _fit_sample(r: Recipe, sc, tok):
    budget = tok.fit_chars if tok.fit_chars is not None else float("inf")
    for split, text, *_ in segments(r.inputs, r.fields, r.max_chars, sc, r.by_documents, tok.context_free):
        if budget <= 0:
            return
        if split == 0:
            yield text[: int(min(len(text), budget))]
            budget -= len(text)


def _fit(r: Recipe, sc, progress: bool, log: Log):
    """The tokenizer, fitted on the training text (streamed; a line now and then while it reads, then
    while it learns, for those that learn from the text: BPE's merges can take minutes)."""
    tok = TOKENIZERS.build(parse_tokenizer(r.options.tokenizer))
    learns = type(tok).fit is not Tokenizer.fit  # (byte and pretrained tokenizers read nothing)
    total = sc.bounds()[0] if tok.fit_chars is None else min(sc.bounds()[0], tok.fit_chars)
    bar = Progress(progress and learns, total, f"fit {tok.name}", log, unit=" chars")
    with Heartbeat(progress and learns, f"fit {tok.name}: learning from what it read", log) as beat:
        tok.fit(counted(_fit_sample(r, sc, tok), bar, beat.start))
    return tok


def _build(r: Recipe, key: str, tmp: Path, progress: bool, log: Log) -> None:
    o = r.options
    tmp.mkdir(parents=True)
    total = sum(f.stat().st_size for i in r.inputs for f in i.files())
    clock = [(time.perf_counter(), time.process_time())]
    cpu = {}  # CPU seconds per phase (all threads): what the phase cost, whatever else the machine ran

    def lap() -> float:
        clock.append((time.perf_counter(), time.process_time()))
        cpu[len(clock) - 2] = round(clock[-1][1] - clock[-2][1], 3)
        return round(clock[-1][0] - clock[-2][0], 3)

    bar = Progress(progress, total, "scan", log)
    sc = scan(r.inputs, r.fields, r.max_chars, r.by_documents, bar.tick)
    bar.close()
    if sc.chars == 0:
        what = f"the files {list(o.files)}" if o.files else f"the default corpus ({r.origin})"
        raise ConfigError("task.files", f"the corpus is empty: {what} hold no text")
    seconds = {"scan": lap()}
    tok = _fit(r, sc, progress, log)
    seconds["fit"] = lap()
    dtype = _dtype(o.dtype, tok)
    scores = not isinstance(r.fields, str)
    writers = [ShardWriter(tmp, s, dtype, tok.unk_id, tok.vocab_size, scores) for s in SPLITS]
    chars = [0, 0, 0]
    bar = Progress(progress, total, "tokenize", log)
    segs = segments(r.inputs, r.fields, r.max_chars, sc, r.by_documents, tok.context_free, bar.tick)
    with closing(encoded(tok.encode_batch, batches(segs, BATCH))) as pipeline:  # closed now on an error
        for batch, ids_of in pipeline:
            for (split, text, starts, ends, scored), ids in zip(batch, ids_of):
                if starts and ends and not text:  # an empty document (a blank dataset row): no eos of its own
                    continue
                writers[split].write(ids, starts and r.by_documents, scored)
                chars[split] += len(text)
                if ends and r.by_documents:  # (scored with the completion it ends: the model learns to stop)
                    writers[split].write(np.asarray([tok.eos_id]), scored=scored)
                bar.add_tokens(len(ids))
    bar.close()
    seconds["encode"] = lap()
    splits = {s: {**w.close(), "chars": c} for s, w, c in zip(SPLITS, writers, chars)}
    _check_sizes(splits, r)
    tok.save(tmp)
    used = [r.inputs[i] for i in sc.used]
    manifest = {
        "version": VERSION, "key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "recipe": r.identity(), "corpus": r.origin, "chars": sc.chars, "total_chars": sc.chars + sc.left_out,
        "unigram_loss": splits["train"]["unigram_loss"], "text_sha256": sc.sha.hexdigest(),
        "files": [str(i.path.relative_to(stdlib_root())) if i.kind == "stdlib" else str(i.path.resolve())
                  for i in used],
        "sources": [fingerprint(f) for i in used for f in i.files()],
        "tokenizer": {"name": tok.name, "vocab_size": tok.vocab_size, "sha256": file_sha256(tmp / "tokenizer.json")},
        "dtype": np.dtype(dtype).name, "splits": splits, "seconds": seconds,
        "cpu_seconds": dict(zip(seconds, cpu.values())),
    }
    if not o.files:
        manifest["stdlib_root"] = str(stdlib_root())
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))


def _dtype(choice: str, tok) -> np.dtype:
    if choice == "uint16" and tok.vocab_size > 2 ** 16:
        raise ConfigError("task.dtype", f"uint16 holds ids below 65536, but the {tok.name} tokenizer has "
                          f"{tok.vocab_size} tokens; use uint32 or auto")
    return np.dtype(np.uint16 if choice == "uint16" or (choice == "auto" and tok.vocab_size <= 2 ** 16)
                    else np.uint32)


def _check_sizes(splits: dict, r: Recipe) -> None:
    for name, s in splits.items():
        if s["tokens"] < 2:
            how = (" (splits are by document: more documents, or split_by: text)" if r.by_documents else "")
            raise ConfigError("task.files", f"the corpus is too small: its {name} part ({s['chars']} characters) "
                              f"gives {s['tokens']} tokens; use more text{how}")
