"""What the mechanistic probe tasks share (MAD: Poli et al. 2024; Zoology's MQAR: Arora et al. 2023).

A probe draws token sequences from a seed, with no files and no tokenizer to fit: its vocabulary is
a fixed list of symbol names (``vocab_size`` of them, the papers' count; the model's vocabulary adds
the 6 reserved ids), written through the ``word`` tokenizer so that ``arch-zoo generate`` and decoded
samples read as symbols. Every example holds ``seq_len + 1`` tokens: the papers' model input is the
first ``seq_len`` of them and their last prediction is the token after, which the ``lm`` objective
reads as a label only.

**Scored positions are the answers.** A generator returns, beside its tokens, the answer at each
position (None elsewhere): label i is what position i - 1 must predict, so the ``lm`` objective's
shift lines it up, and every other label is IGNORE. Loss and ``token_accuracy`` therefore read the
answers alone, in training and evaluation alike (MAD trained its recall tasks on every next token and
scored only the answers; Zoology trained and scored MQAR on the answers).

Sequences are distinct across train, val and test (a fingerprint of each is kept, not the sequence).
The splits are stored as integer arrays and turned into Examples when read, so 100,000 MQAR
sequences cost a few megabytes, not a Python list each."""
from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from ...errors import ConfigError
from ..example import Example
from ..tokenizers import SPECIALS, WordTokenizer
from .base import IGNORE, Task, TaskData
from .common import SPLITS, check_fits, positive, split_counts

Drawn = Tuple[List[int], List[Optional[int]]]  # symbol indices; the answer each position's label holds


@dataclass(frozen=True)
class ProbeOptions:
    """The split sizes every probe has (MAD's 12,800 training and 1,280 test sequences); each task adds
    its difficulty knobs."""

    n_train: int = 12800  # distinct sequences per split
    n_val: int = 1280
    n_test: int = 1280

    def __post_init__(self):
        for name in ("n_train", "n_val", "n_test"):
            positive(name, getattr(self, name))


def at_least(key: str, value, minimum, why: str = "") -> None:
    """ConfigError at ``key`` (relative to the task) unless ``value`` is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}{why}, got {value!r}")


def fraction(key: str, value: float, top_open: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 <= value < 1 if top_open else 0 <= value <= 1):
        raise ConfigError(key, f"must be a number in [0, 1{')' if top_open else ']'}, got {value!r}")


def below(rng: random.Random, n: int) -> int:
    """A uniform integer in [0, n): ``randrange``'s draw at a third of its cost (the generators' hot
    path); the bias of flooring a 53-bit float is far below anything a probe can show."""
    return int(rng.random() * n)


class ProbeExamples(Sequence):
    """A split as two (n, length) arrays of token ids and labels; Examples are made when read."""

    def __init__(self, tokens: np.ndarray, labels: np.ndarray):
        self.tokens, self.labels = tokens, labels

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Example(self.tokens[i].tolist(), self.labels[i].tolist())

    def __repr__(self) -> str:
        return f"ProbeExamples({self.tokens.shape[0]} x {self.tokens.shape[1]} tokens)"


class ProbeTask(Task):
    """Subclasses implement ``symbols`` (the vocabulary's names), ``length`` and ``draw``."""

    kinds = ("decoder",)

    @staticmethod
    def symbols(options) -> List[str]:
        raise TypeError("abstract")

    @staticmethod
    def length(options) -> int:
        """Tokens in every example (by default ``seq_len + 1``: the papers' input and the last token predicted)."""
        return options.seq_len + 1

    def draw(self, rng: random.Random, split: str) -> Drawn:
        raise TypeError("abstract")

    def draw_many(self, rng: random.Random, split: str, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """``n`` draws as (n, length) arrays of symbols and answers (-1: none); a task may draw them at once."""
        length = self.length(self.options)
        seqs, answers = np.empty((n, length), dtype=np.int32), np.full((n, length), -1, dtype=np.int32)
        for i in range(n):
            seq, ans = self.draw(rng, split)
            assert len(seq) == length and len(ans) == length, (len(seq), len(ans), length)
            seqs[i], answers[i] = seq, [-1 if a is None else a for a in ans]
        return seqs, answers

    def numpy_rng(self, rng: random.Random) -> np.random.Generator:
        """A numpy generator seeded once from ``rng`` (so still a function of the task's seed), for draws
        of many numbers at once."""
        if getattr(self, "_numpy_rng", None) is None:
            self._numpy_rng = np.random.default_rng(rng.getrandbits(64))
        return self._numpy_rng

    @classmethod
    def check(cls, options, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        check_fits(cls.length(options), max_seq_len, f"{key}.seq_len", f"the examples (seq_len {options.seq_len})")

    @classmethod
    def tokenizer(cls, options) -> WordTokenizer:
        return WordTokenizer(symbols=cls.symbols(options))

    def build(self) -> TaskData:
        self.check(self.options, self.model_kind, self.max_seq_len)
        rng = random.Random(self.seed)
        offset, length = len(SPECIALS), self.length(self.options)
        seen, splits = set(), {}
        for split, n in split_counts(self.options).items():
            tokens = np.empty((n, length), dtype=np.int32)
            labels = np.full((n, length), IGNORE, dtype=np.int32)
            row, budget = 0, 20
            while row < n:
                if budget == 0:
                    raise ConfigError("task", f"could not draw {n} distinct {split} sequences (found {row}); the "
                                      "options leave too few: raise vocab_size or seq_len, or lower n_train")
                budget -= 1
                seqs, answers = self.draw_many(rng, split, n - row)
                for seq, ans in zip(seqs + offset, answers):
                    fingerprint = hashlib.blake2b(seq.tobytes(), digest_size=8).digest()
                    if fingerprint not in seen:
                        seen.add(fingerprint)
                        tokens[row], labels[row] = seq, np.where(ans < 0, IGNORE, ans + offset)
                        row += 1
            splits[split] = ProbeExamples(tokens, labels)
        tok = self.tokenizer(self.options)
        scored = {k: int((v.labels != IGNORE).sum()) for k, v in splits.items()}
        info = {"sizes": {k: len(v) for k, v in splits.items()}, "tokenizer": tok.name, "vocab_size": tok.vocab_size,
                "sequence_tokens": length, "scored_positions": scored}
        return TaskData(tok, "lm", {k: splits[k] for k in SPLITS}, info=info)
