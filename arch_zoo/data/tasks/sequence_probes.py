"""MAD's selective copying, compression and memorization probes (Poli et al. 2024, after the generators
of github.com/athms/mad-lab), for decoder models; defaults are MAD's baseline settings.

In MAD's selective copying and memorization the answers are not fed back: the model writes them at
positions whose input is a blank or an insert token. Here likewise: label i (predicted at position
i - 1) is the answer while token i stays the blank; the example's last token is one more blank or
insert, never read for a prediction."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Optional

from ...errors import ConfigError
from .base import TASKS
from .probes import Drawn, ProbeOptions, ProbeTask, at_least, below
from .recall import names


@dataclass(frozen=True)
class SelectiveCopyOptions(ProbeOptions):
    vocab_size: int = 16  # data symbols plus blank and copy
    seq_len: int = 256  # the model input: data and blanks, copy, then one blank per token to copy
    num_tokens_to_copy: int = 16  # data tokens scattered among the blanks, to be written out in order

    def __post_init__(self):
        super().__post_init__()
        at_least("vocab_size", self.vocab_size, 3, " (a data symbol, blank, copy)")
        at_least("num_tokens_to_copy", self.num_tokens_to_copy, 1)
        if self.seq_len <= 2 * self.num_tokens_to_copy + 1:
            raise ConfigError("seq_len", f"must exceed 2 x num_tokens_to_copy + 1 = {2 * self.num_tokens_to_copy + 1} "
                              f"(the tokens, copy and a blank per answer), got {self.seq_len}")


@TASKS.register("selective_copying", SelectiveCopyOptions, "MAD selective copying: write out the data tokens "
                "scattered among blanks, in order, after a copy token")
class SelectiveCopying(ProbeTask):
    """MAD's layout: num_tokens_to_copy data tokens with seq_len - 2 n - 1 blanks inserted before them at
    uniformly drawn places (none after the last), copy, then n blanks at which the model writes the
    data tokens in order. (MAD draws the places from numpy's global generator, unseeded; here from the
    task's seed.)"""

    @staticmethod
    def symbols(o) -> List[str]:
        return names("d", o.vocab_size - 2) + ["blank", "copy"]

    def draw(self, rng: random.Random, split: str) -> Drawn:
        o = self.options
        n, blank, copy = o.num_tokens_to_copy, o.vocab_size - 2, o.vocab_size - 1
        gen = self.numpy_rng(rng)
        data = gen.integers(o.vocab_size - 2, size=n).tolist()
        before = gen.multinomial(o.seq_len - 2 * n - 1, [1 / n] * n).tolist()  # each blank before a uniform token
        tokens = [t for b, d in zip(before, data) for t in [blank] * b + [d]] + [copy] + [blank] * (n + 1)
        answers: List[Optional[int]] = [None] * (o.seq_len - n + 1) + data
        return tokens, answers


@dataclass(frozen=True)
class CompressionOptions(ProbeOptions):
    vocab_size: int = 16  # data symbols plus the compression token
    seq_len: int = 32  # the sequence to compress, its compression token included

    def __post_init__(self):
        super().__post_init__()
        at_least("vocab_size", self.vocab_size, 2, " (a data symbol and the compression token)")
        at_least("seq_len", self.seq_len, 2)


@TASKS.register("compression", CompressionOptions, "MAD compression, decoder-only: reproduce a random sequence "
                "after a compression token")
class Compression(ProbeTask):
    """seq_len - 1 random data tokens and the compression token, then the data tokens again, each an
    answer (teacher-forced): 2 seq_len - 1 tokens.

    MAD's compression is an encoder task: an encoder reads the sequence, its last position's state
    alone is decoded into every token by a position-wise MLP, so the whole sequence must pass through
    one vector. A causal decoder cannot be held to that bottleneck (every reconstruction position may
    attend back to the originals) without a mask the task interface does not carry, so this version
    asks for the reconstruction in the decoder's own terms: after the compression token, each data
    token in turn. Symbols repeat (vocab_size - 1 of them over seq_len - 1 places), so the previous
    token does not say where to read next: the model has to track position, as the MAD decoder's
    position embeddings do. It measures sequence reproduction, not compression into one state; the
    MAD score of an attention model on it is not comparable."""

    @staticmethod
    def symbols(o) -> List[str]:
        return names("d", o.vocab_size - 1) + ["compress"]

    @staticmethod
    def length(o) -> int:
        return 2 * o.seq_len - 1

    def draw(self, rng: random.Random, split: str) -> Drawn:
        o = self.options
        data = [below(rng, o.vocab_size - 1) for _ in range(o.seq_len - 1)]
        return data + [o.vocab_size - 1] + data, [None] * o.seq_len + list(data)


@dataclass(frozen=True)
class MemorizationOptions(ProbeOptions):
    vocab_size: int = 256  # keys in the lower half, values in the upper, and the insert token
    seq_len: int = 32  # seq_len // 2 (key, insert) slots
    kv_map_seed: int = 12345  # the fixed key -> value map's seed (MAD's), the same for every run seed
    n_train: int = 256  # MAD's baseline: the same facts seen again and again

    def __post_init__(self):
        super().__post_init__()
        at_least("vocab_size", self.vocab_size, 3, " (a key, a value and the insert token)")
        at_least("seq_len", self.seq_len, 2)
        if isinstance(self.kv_map_seed, bool) or not isinstance(self.kv_map_seed, int):
            raise ConfigError("kv_map_seed", f"must be an integer, got {self.kv_map_seed!r}")


@TASKS.register("memorization", MemorizationOptions, "MAD memorization: recall the value of each key from a "
                "fixed key-value map learned in training")
class Memorization(ProbeTask):
    """MAD's layout: seq_len // 2 slots of (key, insert); at each insert the model writes the key's value
    under a map drawn once from kv_map_seed (keys and values shuffled and paired), shared by every
    split and run: nothing in the sequence tells the value, the weights must hold it."""

    @staticmethod
    def symbols(o) -> List[str]:
        keys = (o.vocab_size - 1) // 2
        return names("k", keys) + names("v", o.vocab_size - 1 - keys) + ["insert"]

    @staticmethod
    def value_map(o) -> Dict[int, int]:
        keys = (o.vocab_size - 1) // 2
        rng = random.Random(o.kv_map_seed)
        shuffled_keys, values = list(range(keys)), list(range(keys, o.vocab_size - 1))
        rng.shuffle(shuffled_keys)
        rng.shuffle(values)
        return dict(zip(shuffled_keys, values))

    def draw(self, rng: random.Random, split: str) -> Drawn:
        o = self.options
        if not hasattr(self, "_map"):
            self._map = self.value_map(o)
        insert = o.vocab_size - 1
        keys = [below(rng, len(self._map)) for _ in range(o.seq_len // 2)]
        tokens = [t for k in keys for t in (k, insert)]
        tokens += [insert] * (o.seq_len + 1 - len(tokens))
        answers: List[Optional[int]] = [None] * (o.seq_len + 1)
        for j, k in enumerate(keys):
            answers[2 * j + 2] = self._map[k]
        return tokens, answers
