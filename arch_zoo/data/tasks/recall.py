"""In-context recall probes: MAD's in-context, noisy and fuzzy recall (Poli et al. 2024, after the
generators of github.com/athms/mad-lab) and Zoology's multi-query associative recall (Arora et al.
2023, github.com/HazyResearch/zoology). Defaults are the papers' baseline settings.

Keys and values come from disjoint halves of the vocabulary (``k*`` and ``v*`` symbols). With
``multi_query`` (MAD's baseline) every value whose key appeared earlier in the sequence is an
answer, and the sequence ends with one more such pair; without it only that final pair is asked,
after a ``copy`` token."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...errors import ConfigError
from .base import TASKS
from .probes import Drawn, ProbeOptions, ProbeTask, at_least, below, fraction


def names(prefix: str, n: int) -> List[str]:
    return [f"{prefix}{i}" for i in range(n)]


@dataclass(frozen=True)
class RecallOptions(ProbeOptions):
    vocab_size: int = 16  # the task's symbols: keys, values, noise, and copy when not multi_query
    seq_len: int = 128  # the papers' model input length (even); its seq_len // 2 slots are pairs or noise
    multi_query: bool = True  # every repeated key's value is asked (MAD's baseline); false: only the last
    noise_vocab_size: int = 0  # symbols kept for noise, taken from vocab_size
    frac_noise: float = 0.0  # chance that a slot holds two noise tokens instead of a pair

    def special(self) -> int:
        return 0 if self.multi_query else 1  # the copy token

    def __post_init__(self):
        super().__post_init__()
        at_least("seq_len", self.seq_len, 4)
        if self.seq_len % 2:
            raise ConfigError("seq_len", f"must be even (pairs of tokens), got {self.seq_len}")
        at_least("noise_vocab_size", self.noise_vocab_size, 0)
        fraction("frac_noise", self.frac_noise)
        if self.frac_noise > 0 and self.noise_vocab_size == 0:
            raise ConfigError("noise_vocab_size", f"frac_noise {self.frac_noise} needs noise symbols: set it >= 1")
        need = 2 + self.special() + self.noise_vocab_size
        at_least("vocab_size", self.vocab_size, need, f" (a key, a value, {self.noise_vocab_size} noise and "
                 f"{self.special()} special symbols)")

    def halves(self) -> Tuple[int, int]:
        """(keys, values): MAD's split of what the special and noise symbols leave."""
        rest = self.vocab_size - self.special() - self.noise_vocab_size
        return rest // 2, rest - rest // 2


@dataclass(frozen=True)
class NoisyRecallOptions(RecallOptions):
    vocab_size: int = 32  # MAD's baseline: 16 of them noise
    noise_vocab_size: int = 16
    frac_noise: float = 0.2


class _RecallBase(ProbeTask):
    @staticmethod
    def extras(o) -> List[str]:
        """The symbols after the keys, values and noise."""
        return [] if o.multi_query else ["copy"]

    @classmethod
    def symbols(cls, o) -> List[str]:
        keys, values = o.halves()
        return names("k", keys) + names("v", values) + names("n", o.noise_vocab_size) + cls.extras(o)

    @classmethod
    def ids(cls, o) -> Dict[str, int]:
        keys, values = o.halves()
        first = keys + values + o.noise_vocab_size
        return {"value": keys, "noise": keys + values, **{s: first + i for i, s in enumerate(cls.extras(o))}}


@TASKS.register("in_context_recall", RecallOptions, "MAD in-context recall: values of keys seen earlier in the "
                "sequence (Poli et al. 2024)")
class InContextRecall(_RecallBase):
    """MAD's layout: seq_len // 2 - 1 slots, each a (key, value) pair (a key keeps its value within a
    sequence) or, with probability frac_noise, two noise tokens (one slot is always a pair), then
    [copy] key value for a key already shown. Examples hold seq_len tokens with multi_query and
    seq_len + 1 without (the copy token), as MAD's sequences do before its input/target shift."""

    @staticmethod
    def length(o) -> int:
        return o.seq_len + (0 if o.multi_query else 1)

    def draw(self, rng: random.Random, split: str) -> Drawn:
        o, at = self.options, self.ids(self.options)
        n_keys, n_values = o.halves()
        slots = o.seq_len // 2 - 1
        kept = below(rng, slots)  # MAD keeps one slot a pair, so a key is always there to ask
        tokens: List[int] = []
        answers: List[Optional[int]] = []
        value_of: Dict[int, int] = {}
        for i in range(slots):
            if i != kept and o.frac_noise > 0 and rng.random() < o.frac_noise:
                tokens += [at["noise"] + below(rng, o.noise_vocab_size) for _ in range(2)]
                answers += [None, None]
                continue
            key = below(rng, n_keys)
            seen = key in value_of
            value = value_of.setdefault(key, at["value"] + below(rng, n_values))
            tokens += [key, value]
            answers += [None, value if seen and o.multi_query else None]
        key = rng.choice(list(value_of))
        head = [] if o.multi_query else [at["copy"]]
        tokens += head + [key, value_of[key]]
        answers += [None] * len(head) + [None, value_of[key]]
        return tokens, answers


TASKS.register("noisy_in_context_recall", NoisyRecallOptions, "MAD noisy in-context recall: in-context recall "
               "with noise tokens between the pairs")(InContextRecall)


@dataclass(frozen=True)
class FuzzyRecallOptions(RecallOptions):
    k_motif_size: int = 3  # a key is 1..k_motif_size distinct key symbols (always k_motif_size in val/test)
    v_motif_size: int = 3  # a value is 1..v_motif_size distinct value symbols

    def special(self) -> int:
        return 1 + super().special()  # a pad symbol fills the left; copy as in in_context_recall

    def __post_init__(self):
        super().__post_init__()
        keys, values = self.halves()
        at_least("k_motif_size", self.k_motif_size, 1)
        at_least("v_motif_size", self.v_motif_size, 1)
        if self.k_motif_size > keys or self.v_motif_size > values:
            raise ConfigError("k_motif_size" if self.k_motif_size > keys else "v_motif_size",
                              f"motifs are distinct symbols: {keys} key and {values} value symbols (from vocab_size "
                              f"{self.vocab_size}) hold keys up to {keys} and values up to {values} long")
        longest = self.k_motif_size + self.v_motif_size
        if self.seq_len < 3 * longest + 1:
            raise ConfigError("seq_len", f"{self.seq_len} cannot hold two pairs of {longest} tokens and the query; "
                              f"need at least {3 * longest + 1}")


@TASKS.register("fuzzy_in_context_recall", FuzzyRecallOptions, "MAD fuzzy in-context recall: keys and values "
                "are runs of 1..k/v_motif_size symbols")
class FuzzyInContextRecall(_RecallBase):
    """MAD's layout: pairs whose keys and values are motifs (tuples of distinct symbols, sizes drawn per
    pair; val and test keys are always k_motif_size long, as MAD's test set), noise chunks with
    probability frac_noise, a probe pair placed uniformly in the context, then [copy] probe key and
    value; pad symbols fill the left to seq_len + 1 tokens. A value is an answer (every one of its
    symbols) when its key appeared before. MAD can draw the probe's place past the context's end, so
    that the final query asks a key never shown; here the probe is always in the context."""

    @staticmethod
    def extras(o) -> List[str]:
        return ["pad"] + _RecallBase.extras(o)

    def draw(self, rng: random.Random, split: str) -> Drawn:
        o, at = self.options, self.ids(self.options)
        n_keys, n_values = o.halves()
        key_sizes = list(range(1, o.k_motif_size + 1)) if split == "train" else [o.k_motif_size]
        self._motifs = getattr(self, "_motifs", {})

        def motif(size: int, n: int, first: int) -> Tuple[int, ...]:
            """A uniform ordered tuple of ``size`` distinct symbols (MAD draws from all permutations)."""
            every = self._motifs.get((size, n, first))
            if every is None:
                every = self._motifs[(size, n, first)] = [tuple(first + s for s in p)
                                                          for p in itertools.permutations(range(n), size)]
            return every[below(rng, len(every))]

        def sizes() -> Tuple[int, int]:
            return key_sizes[below(rng, len(key_sizes))], 1 + below(rng, o.v_motif_size)

        probe_sizes = sizes()
        probe = (motif(probe_sizes[0], n_keys, 0), motif(probe_sizes[1], n_values, at["value"]))
        limit = o.seq_len - len(probe[0]) - len(probe[1]) - o.k_motif_size - o.v_motif_size
        place, placed = below(rng, max(1, limit)), False
        tokens: List[int] = []
        answers: List[Optional[int]] = []
        value_of: Dict[Tuple[int, ...], Tuple[int, ...]] = {}

        def pair(key, value):
            seen = key in value_of
            value_of[key] = value
            tokens.extend(key + value)
            answers.extend([None] * len(key) + (list(value) if seen and o.multi_query else [None] * len(value)))

        while len(tokens) < limit:
            k_size, v_size = sizes()
            if not placed and (len(tokens) >= place or len(tokens) + o.k_motif_size + o.v_motif_size >= limit):
                pair(*probe)
                placed = True
            elif o.frac_noise > 0 and rng.random() < o.frac_noise:
                tokens.extend(at["noise"] + below(rng, o.noise_vocab_size) for _ in range(k_size + v_size))
                answers.extend([None] * (k_size + v_size))
            else:
                key = motif(k_size, n_keys, 0)
                pair(key, probe[1] if key == probe[0] else value_of.get(key) or motif(v_size, n_values, at["value"]))
        head = [at["copy"]] if not o.multi_query else []
        tokens.extend(head + list(probe[0]) + list(probe[1]))
        answers.extend([None] * (len(head) + len(probe[0])) + list(probe[1]))
        pad = self.length(o) - len(tokens)
        return [at["pad"]] * pad + tokens, [None] * pad + answers


@dataclass(frozen=True)
class MQAROptions(ProbeOptions):
    vocab_size: int = 8192  # keys from the lower half, values from the upper (Zoology: large vocabularies matter)
    seq_len: int = 64  # the model input length (even): the pairs, then the query region
    num_kv_pairs: int = 4  # distinct key-value pairs, each queried once; 4 x num_kv_pairs <= seq_len
    power_a: float = 0.01  # query gaps follow p(g) ~ g^(power_a - 1): most queries come soon after the pairs
    random_non_queries: bool = True  # fill the query region between queries with random tokens (else token 0)
    n_train: int = 100000  # Zoology's training set for seq_len 64
    n_val: int = 1000
    n_test: int = 1000

    def __post_init__(self):
        super().__post_init__()
        at_least("seq_len", self.seq_len, 4)
        if self.seq_len % 2:
            raise ConfigError("seq_len", f"must be even, got {self.seq_len}")
        at_least("num_kv_pairs", self.num_kv_pairs, 1)
        if 4 * self.num_kv_pairs > self.seq_len:
            raise ConfigError("num_kv_pairs", f"{self.num_kv_pairs} key-value pairs need 4 x {self.num_kv_pairs} = "
                              f"{4 * self.num_kv_pairs} tokens (each pair, and a query slot of two), more than "
                              f"seq_len {self.seq_len} holds")
        if self.vocab_size <= self.seq_len or self.vocab_size // 2 - 1 < self.num_kv_pairs:
            raise ConfigError("vocab_size", f"must exceed seq_len ({self.seq_len}) and hold {self.num_kv_pairs} "
                              f"distinct keys in its lower half, got {self.vocab_size}")
        if not 0 < self.power_a <= 1:
            raise ConfigError("power_a", f"must be in (0, 1] (1: uniform gaps), got {self.power_a}")


@TASKS.register("mqar", MQAROptions, "Zoology multi-query associative recall: key-value pairs, then each key "
                "queried once (Arora et al. 2023)")
class MultiQueryAssociativeRecall(ProbeTask):
    """Zoology's layout: num_kv_pairs pairs of distinct keys (symbols 1 .. vocab_size/2 - 1) and distinct
    values (the upper half), then a query region where each key recurs once, at even offsets 2g whose
    gaps g are drawn without replacement with weights g^(power_a - 1); the answer is the key's value,
    predicted at the query token (the token after it is filler, not the value). Filler is token 0, or
    with random_non_queries a uniformly random symbol, as Zoology's (which may repeat a key)."""

    @staticmethod
    def symbols(o) -> List[str]:
        half = o.vocab_size // 2
        return ["_"] + names("k", half - 1) + names("v", o.vocab_size - half)

    def draw_many(self, rng: random.Random, split: str, count: int):
        o, gen = self.options, self.numpy_rng(rng)
        half, n = o.vocab_size // 2, o.num_kv_pairs
        keys = distinct_rows(gen, 1, half, count, n)
        values = distinct_rows(gen, half, o.vocab_size, count, n)
        space = (o.seq_len - 2 * n) // 2
        # gaps without replacement, weights g^(power_a - 1): Gumbel top-k, the same law as sequential draws
        log_w = (o.power_a - 1) * np.log(np.arange(1, space + 1, dtype=np.float64))
        gaps = np.argsort(-(log_w + gen.gumbel(size=(count, space))), axis=1)[:, :n]
        region = o.seq_len - 2 * n + 1
        fill = gen.integers(o.vocab_size, size=(count, region)) if o.random_non_queries else np.zeros((count, region))
        seqs = np.concatenate([np.stack([keys, values], axis=2).reshape(count, 2 * n), fill], axis=1).astype(np.int32)
        answers = np.full(seqs.shape, -1, dtype=np.int32)
        rows = np.arange(count)[:, None]
        seqs[rows, 2 * n + 2 * gaps] = keys
        answers[rows, 2 * n + 2 * gaps + 1] = values
        return seqs, answers


def distinct_rows(gen: np.random.Generator, low: int, high: int, count: int, n: int) -> np.ndarray:
    """(count, n) integers in [low, high), distinct within each row (uniform: redraw rows with repeats)."""
    out = gen.integers(low, high, size=(count, n))
    while True:
        s = np.sort(out, axis=1)
        bad = (s[:, 1:] == s[:, :-1]).any(axis=1)
        if not bad.any():
            return out
        out[bad] = gen.integers(low, high, size=(int(bad.sum()), n))
