"""Algorithmic sequence tasks: copy, reverse and sort random strings over a small alphabet.

Sequences are drawn without repetition from the seed and dealt into train, val and test, so no
val or test source appears in train. Symbols are the letters a, b, c, ...; with the ``word``
tokenizer they are written space-separated so that each symbol is still one token."""
from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from ...registry import component_field
from .base import TASKS
from .common import check_lengths_and_sizes, deal, positive, sample_distinct, split_counts, validate_tokenizer
from .pairs import Pairs, PairTask

SYMBOLS = string.ascii_lowercase


@dataclass(frozen=True)
class SequenceOptions:
    n_symbols: int = 10  # alphabet size: the first n letters a, b, c, ...
    min_len: int = 1  # sequence length range, in symbols (inclusive)
    max_len: int = 10
    n_train: int = 10000  # distinct sequences per split
    n_val: int = 500
    n_test: int = 500
    tokenizer: Any = component_field("tokenizers", "char")  # a tokenizer name, or {name: bpe, vocab_size: N}

    def __post_init__(self):
        positive("n_symbols", self.n_symbols, 2)
        if self.n_symbols > len(SYMBOLS):
            raise ValueError(f"n_symbols must be at most {len(SYMBOLS)}, got {self.n_symbols}")
        check_lengths_and_sizes(self)
        total = self.n_train + self.n_val + self.n_test
        space = sum(self.n_symbols ** n for n in range(self.min_len, self.max_len + 1))
        if total > space:
            raise ValueError(f"n_train + n_val + n_test = {total} exceeds the {space} distinct sequences of "
                             f"lengths {self.min_len}..{self.max_len} over {self.n_symbols} symbols")
        validate_tokenizer(self.tokenizer)


class SequenceTask(PairTask):
    """Source: a random sequence; target: ``transform(source)``."""

    @staticmethod
    def transform(seq: Sequence[int]) -> Sequence[int]:
        raise TypeError("abstract")

    @classmethod
    def text_lengths(cls, options: SequenceOptions, tokenizer) -> Optional[Tuple[int, int]]:
        n = tokenizer.count_tokens(tokenizer.joiner.join(SYMBOLS[:1] * options.max_len))
        return None if n is None else (n, n)

    def pairs(self) -> Pairs:
        o = self.options
        rng = random.Random(self.seed)

        def draw():
            return tuple(rng.randrange(o.n_symbols) for _ in range(rng.randint(o.min_len, o.max_len)))

        pool = sample_distinct(rng, draw, o.n_train + o.n_val + o.n_test, "sequences")
        rng.shuffle(pool)  # distinct draws favour short lengths early; shuffle so splits are alike
        joiner = self.tokenizer_class().joiner  # e.g. spaces for a word tokenizer: one token per symbol

        def text(seq):
            return joiner.join(SYMBOLS[i] for i in seq)

        return {split: [(text(seq), text(self.transform(seq))) for seq in rows]
                for split, rows in deal(pool, split_counts(o)).items()}


@TASKS.register("copy", SequenceOptions, "reproduce a random symbol sequence")
class CopyTask(SequenceTask):
    @staticmethod
    def transform(seq):
        return seq


@TASKS.register("reverse", SequenceOptions, "reverse a random symbol sequence")
class ReverseTask(SequenceTask):
    @staticmethod
    def transform(seq):
        return seq[::-1]


@TASKS.register("sort", SequenceOptions, "sort a random symbol sequence alphabetically")
class SortTask(SequenceTask):
    @staticmethod
    def transform(seq):
        return tuple(sorted(seq))
