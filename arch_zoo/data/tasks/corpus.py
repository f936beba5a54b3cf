"""Language modelling on a real text corpus: ``char_lm`` (decoder) and ``mlm`` (encoder, BERT masking).

The corpus is the user's ``files``, or by default the Python standard library's own ``.py`` files
on this machine (nothing to download). Files are read in sorted order and cut at ``max_chars``;
the text is split contiguously 90/5/5 into train/val/test, the tokenizer is fitted on the train
part, and each split is cut into windows of ``seq_len`` tokens. ``TaskData.info`` records the
files, a sha256 of the text and each split's characters per token (bits per character =
loss / ln 2 / chars_per_token)."""
from __future__ import annotations

import hashlib
import os
import random
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ...errors import ConfigError
from ...registry import component_field
from ..tokenizers import MASK, SPECIALS
from .base import IGNORE, TASKS, Example, Task, TaskData
from .common import check_fits, check_tokenizer, fit_tokenizer, positive, validate_tokenizer

FRACTIONS = (0.9, 0.05)  # train, val; test gets the rest
KEEPS_EVERY_CHARACTER = " (it needs every character kept)"


def keeps_every_character(tokenizer) -> bool:  # a word tokenizer drops the whitespace
    return tokenizer.lossless
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
EVAL_MASK_SEED = 1234  # mlm: val/test masks are the same for every run, so runs evaluate alike


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _sorted_py_files(directory: Path):
    """.py files under ``directory`` in sorted path order, skipping test and third-party trees."""
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in SKIP_DIRS:
                yield from _sorted_py_files(Path(entry.path))
        elif entry.name.endswith(".py") and not entry.name.startswith("_sysconfigdata") and entry.is_file():
            yield Path(entry.path)  # (_sysconfigdata is generated per machine: skipped for portability)


def read_corpus(files: List[str], max_chars: Optional[int], key: str = "task") -> Tuple[str, Dict[str, Any]]:
    """The corpus text and its provenance."""
    limit = max_chars if max_chars is not None else float("inf")
    parts: List[str] = []
    used: List[str] = []
    total = 0
    if files:
        source = [(f"{key}.files[{i}]", Path(f).expanduser()) for i, f in enumerate(files)]
        origin = "files"
    else:
        root = stdlib_root()
        source = ((None, p) for p in _sorted_py_files(root))
        origin = f"python {sys.version.split()[0]} standard library at {root}"
    for where, path in source:
        if total >= limit:
            break
        if where is None:
            text = path.read_text(encoding="utf-8", errors="replace")
            used.append(str(path.relative_to(root)))
        else:
            if not path.is_file():
                raise ConfigError(where, f"file not found: {path}")
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(where, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
            used.append(str(path.resolve()))
        parts.append(text[: int(min(len(text), limit - total))])
        total += len(parts[-1])
    text = "".join(parts)
    if not text:
        what = f"the files {list(files)}" if files else f"the default corpus ({origin})"
        raise ConfigError(f"{key}.files", f"the corpus is empty: {what} hold no text")
    info = {"corpus": origin, "files": used, "chars": len(text), "max_chars": max_chars,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    if not files:
        info["stdlib_root"] = str(root)
    return text, info


def windows(ids: List[int], length: int, offset: int = 0, keep_tail: bool = False) -> List[List[int]]:
    """Non-overlapping windows of ``length`` tokens starting at ``offset``; a shorter tail (>= 2
    tokens, one prediction) only with ``keep_tail``."""
    out = [ids[i:i + length] for i in range(offset, len(ids), length)]
    if out and len(out[-1]) < length and not (keep_tail and len(out[-1]) >= 2):
        out.pop()
    return out


@dataclass(frozen=True)
class CorpusOptions:
    files: List[str] = field(default_factory=list)  # your own text files; empty: the stdlib corpus
    max_chars: Optional[int] = 2_000_000  # read at most this many characters (null: everything)
    seq_len: Optional[int] = None  # tokens per training window (null: the model's max_seq_len)
    tokenizer: Any = component_field("tokenizers", "char")  # char, byte, or {name: bpe, vocab_size: N}

    def __post_init__(self):
        if not isinstance(self.files, (list, tuple)) or not all(isinstance(f, str) for f in self.files):
            raise ValueError(f"files must be a list of paths, got {self.files!r}")
        if self.max_chars is not None:
            positive("max_chars", self.max_chars)
        if self.seq_len is not None:
            positive("seq_len", self.seq_len, 2)
        validate_tokenizer(self.tokenizer, keeps_every_character, KEEPS_EVERY_CHARACTER)


class CorpusTask(Task):
    """Reads, splits and tokenizes the corpus; subclasses turn token windows into examples."""

    objective = "?"
    metrics: Tuple[str, ...] = ()

    @classmethod
    def check(cls, options: CorpusOptions, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        check_tokenizer(options.tokenizer, key, keeps_every_character, KEEPS_EVERY_CHARACTER)
        for i, f in enumerate(options.files):
            path = Path(f).expanduser()
            if not path.exists():
                raise ConfigError(f"{key}.files[{i}]", f"file not found: {f}")
            if not path.is_file():
                raise ConfigError(f"{key}.files[{i}]", f"not a file: {f}")
        if options.seq_len is not None:
            check_fits(options.seq_len, max_seq_len, f"{key}.seq_len", "windows of seq_len tokens")

    @property
    def seq_len(self) -> int:
        return self.options.seq_len or self.max_seq_len

    def build(self) -> TaskData:
        self.check(self.options, self.model_kind, self.max_seq_len)
        text, info = read_corpus(self.options.files, self.options.max_chars)
        a, b = (int(len(text) * f) for f in (FRACTIONS[0], sum(FRACTIONS)))
        texts = {"train": text[:a], "val": text[a:b], "test": text[b:]}
        tok = fit_tokenizer(self.options.tokenizer, [texts["train"]])
        ids = {name: tok.encode(t) for name, t in texts.items()}
        for name, seq in ids.items():
            if len(seq) < 2:
                raise ConfigError("task.files", f"the corpus is too small: its {name} part ({len(texts[name])} "
                                  f"characters) gives {len(seq)} tokens; use more text")
        offset = random.Random(self.seed).randrange(self.seq_len) if len(ids["train"]) >= 2 * self.seq_len else 0
        splits = {"train": windows(ids["train"], self.seq_len, offset)}
        if not splits["train"]:
            raise ConfigError("task.files", f"the corpus is too small: its train part has {len(ids['train'])} "
                              f"tokens, less than one window of seq_len={self.seq_len}")
        for name in ("val", "test"):
            splits[name] = windows(ids[name], self.seq_len, keep_tail=True)
        splits.update(self.extra_splits(ids["val"]))
        examples = self.examples(splits, tok.vocab_size)
        info.update(
            tokenizer=tok.name, vocab_size=tok.vocab_size, seq_len=self.seq_len, train_offset=offset,
            tokens={name: len(seq) for name, seq in ids.items()},
            unk_tokens={name: sum(1 for t in seq if t == tok.unk_id) for name, seq in ids.items()},
            sizes={name: len(rows) for name, rows in examples.items()},
        )
        cpt = {name: len(texts[name]) / len(seq) for name, seq in ids.items()}
        info["chars_per_token"] = {name: cpt[name.split("@")[0]] for name in examples}
        return TaskData(tok, self.objective, examples, metrics=self.metrics, info=info)

    def extra_splits(self, val_ids: List[int]) -> Dict[str, List[List[int]]]:
        return {}

    def examples(self, splits: Dict[str, List[List[int]]], vocab_size: int) -> Dict[str, List[Example]]:
        raise TypeError("abstract")


@dataclass(frozen=True)
class CharLMOptions(CorpusOptions):
    eval_lengths: List[int] = field(default_factory=list)  # extra eval splits val@L: val text in L-token windows

    def __post_init__(self):
        super().__post_init__()
        for length in self.eval_lengths:
            positive("eval_lengths[]", length, 2)
        if len(set(self.eval_lengths)) != len(self.eval_lengths):
            raise ValueError(f"eval_lengths has duplicates: {list(self.eval_lengths)}")


@TASKS.register("char_lm", CharLMOptions, "next-token LM on a text corpus (default: the Python stdlib)")
class CharLMTask(CorpusTask):
    kinds = ("decoder",)
    objective = "lm"
    metrics = ("bpc",)

    def extra_splits(self, val_ids):
        out = {}
        for length in self.options.eval_lengths:
            rows = windows(val_ids, length)
            if not rows:
                raise ConfigError("task.eval_lengths", f"the val text has {len(val_ids)} tokens, fewer than one "
                                  f"window of {length}; use more text or shorter eval_lengths")
            out[f"val@{length}"] = rows
        return out

    def examples(self, splits, vocab_size):
        return {name: [Example(w, w) for w in rows] for name, rows in splits.items()}


@dataclass(frozen=True)
class MLMOptions(CorpusOptions):
    mask_prob: float = 0.15  # share of tokens predicted; of those 80% -> <mask>, 10% random, 10% kept

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")


def bert_mask(window: List[int], prob: float, rng: np.random.Generator, vocab_size: int) -> Example:
    """BERT's masking of one window: every window predicts at least one token."""
    ids = np.asarray(window)
    chosen = rng.random(len(ids)) < prob
    if not chosen.any():
        chosen[rng.integers(len(ids))] = True
    roll = rng.random(len(ids))
    random_ids = rng.integers(len(SPECIALS), max(vocab_size, len(SPECIALS) + 1), len(ids))
    inputs = np.where(chosen & (roll < 0.8), MASK, ids)
    inputs = np.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, inputs)
    labels = np.where(chosen, ids, IGNORE)
    return Example(inputs.tolist(), labels.tolist())


@TASKS.register("mlm", MLMOptions, "masked-LM (BERT 80/10/10 masking) on a text corpus (default: the Python stdlib)")
class MLMTask(CorpusTask):
    kinds = ("encoder",)
    objective = "mlm"  # (the training module reports token accuracy over the masked positions)

    def examples(self, splits, vocab_size):
        out = {}
        for i, (name, rows) in enumerate(splits.items()):
            rng = np.random.default_rng([self.seed % 2**32] if name == "train" else [EVAL_MASK_SEED, i])
            out[name] = [bert_mask(w, self.options.mask_prob, rng, vocab_size) for w in rows]
        return out
