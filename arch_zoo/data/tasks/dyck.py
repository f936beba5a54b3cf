"""Bracket languages for encoders: ``dyck`` (is the string balanced?) and ``dyck_depth`` (the nesting
depth after every bracket).

``dyck`` draws balanced strings of even length and, for the negatives, corrupts other balanced
strings of the same lengths in one place: a bracket swapped with a different one elsewhere
(every bracket count unchanged, so counting does not help), a bracket flipped (same type, other
direction) or retyped (same direction, other type). Length and parity tell nothing; classes are
balanced (half each, per split). Inputs start with <bos>, the position a 'cls' pooling head reads.

``dyck_depth`` draws valid prefixes of Dyck words (depth never below 0, closing brackets match)
and labels every bracket with the depth after it, capped at ``max_depth``.

All strings are distinct across train, val and test."""
from __future__ import annotations

import random
from dataclasses import dataclass
from math import comb
from typing import Any, Dict, List, Tuple

from ...errors import ConfigError
from ...registry import component_field
from ..tokenizers import BOS
from .base import TASKS, Example, Task, TaskData
from .common import (SPLITS, check_lengths_and_sizes, check_fits, check_tokenizer, deal, fit_tokenizer, positive, sample_distinct,
                     split_counts, validate_tokenizer)

PAIRS = ("()", "[]", "{}", "<>")
ONE_TOKEN_PER_BRACKET = " (labels need one token per bracket)"


def one_token_per_bracket(tokenizer) -> bool:
    brackets = "".join(PAIRS)
    return tokenizer.count_tokens(brackets) == len(brackets)


def is_balanced(s: str, n_types: int = len(PAIRS)) -> bool:
    closer = {p[0]: p[1] for p in PAIRS[:n_types]}
    stack: List[str] = []
    for c in s:
        if c in closer:
            stack.append(closer[c])
        elif not stack or stack.pop() != c:
            return False
    return not stack


def depths(s: str) -> List[int]:
    """Nesting depth after each bracket."""
    out, depth = [], 0
    for c in s:
        depth += 1 if any(c == p[0] for p in PAIRS) else -1
        out.append(depth)
    return out


def random_walk(rng: random.Random, length: int, n_types: int, balanced: bool) -> str:
    """A valid Dyck prefix of ``length`` brackets; a complete Dyck word when ``balanced``."""
    stack: List[int] = []
    out = []
    for i in range(length):
        left = length - i
        must_close = balanced and len(stack) >= left
        if stack and (must_close or rng.random() < 0.5):
            out.append(PAIRS[stack.pop()][1])
        else:
            stack.append(rng.randrange(n_types))
            out.append(PAIRS[stack[-1]][0])
    return "".join(out)


def corrupt(rng: random.Random, s: str, n_types: int) -> Tuple[str, str]:
    """One local edit of a balanced string that leaves it unbalanced: (string, kind of edit)."""
    chars = list(s)
    kinds = ["swap", "swap", "flip"] + (["retype"] if n_types > 1 else ["flip"])  # half are swaps
    while True:
        kind = rng.choice(kinds)
        out = chars[:]
        i = rng.randrange(len(s))
        pair = next(p for p in PAIRS if s[i] in p)
        side = pair.index(s[i])
        if kind == "swap":
            others = [j for j in range(len(s)) if s[j] != s[i]]
            if not others:
                continue
            j = rng.choice(others)
            out[i], out[j] = out[j], out[i]
        elif kind == "flip":
            out[i] = pair[1 - side]
        else:
            out[i] = rng.choice([p for p in PAIRS[:n_types] if p != pair])[side]
        text = "".join(out)
        if not is_balanced(text, n_types):
            return text, kind


@dataclass(frozen=True)
class DyckOptions:
    n_types: int = 2  # bracket pairs used, from () [] {} <>
    min_len: int = 2  # string length range in brackets (dyck uses the even lengths in it)
    max_len: int = 32
    n_train: int = 10000  # examples per split
    n_val: int = 1000
    n_test: int = 1000
    tokenizer: Any = component_field("tokenizers", "char")  # char or byte (one token per bracket)

    def __post_init__(self):
        positive("n_types", self.n_types)
        if self.n_types > len(PAIRS):
            raise ValueError(f"n_types must be at most {len(PAIRS)}, got {self.n_types}")
        check_lengths_and_sizes(self)
        validate_tokenizer(self.tokenizer, one_token_per_bracket, ONE_TOKEN_PER_BRACKET)


class _BracketTask(Task):
    kinds = ("encoder",)
    prefix: List[int] = []  # tokens put before the brackets

    @classmethod
    def check(cls, options: DyckOptions, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        check_tokenizer(options.tokenizer, key, one_token_per_bracket, ONE_TOKEN_PER_BRACKET)
        check_fits(options.max_len + len(cls.prefix), max_seq_len, f"{key}.max_len", "the longest strings")

    def build(self) -> TaskData:
        self.check(self.options, self.model_kind, self.max_seq_len)
        rng = random.Random(self.seed)
        rows, info = self.strings(rng)
        alphabet = "".join(PAIRS[: self.options.n_types])  # so a tiny train split still knows every bracket
        tok = fit_tokenizer(self.options.tokenizer, [s for s, _ in rows["train"]] + [alphabet])
        splits = {name: [self.example(self.prefix + tok.encode(s), s, label) for s, label in rows[name]]
                  for name in SPLITS}
        info.update(sizes={k: len(v) for k, v in splits.items()}, tokenizer=tok.name, vocab_size=tok.vocab_size)
        return self.task_data(tok, splits, info)


@TASKS.register("dyck", DyckOptions, "classify bracket strings as balanced or not (hard, same-length negatives)")
class DyckTask(_BracketTask):
    prefix = [BOS]

    @staticmethod
    def lengths(o: DyckOptions) -> List[int]:
        return [n for n in range(max(2, o.min_len), o.max_len + 1) if n % 2 == 0]

    @staticmethod
    def positives(counts: Dict[str, int]) -> Dict[str, int]:
        return {k: n - n // 2 for k, n in counts.items()}

    @classmethod
    def check(cls, options: DyckOptions, model_kind: str, max_seq_len: int, key: str = "task") -> None:
        super().check(options, model_kind, max_seq_len, key)
        lengths = cls.lengths(options)
        if not lengths:
            raise ConfigError(f"{key}.max_len", f"dyck needs an even length in min_len..max_len "
                              f"({options.min_len}..{options.max_len})")
        # balanced strings of length 2m: Catalan(m) shapes times n_types^m bracket choices
        available = sum(comb(n, n // 2) // (n // 2 + 1) * options.n_types ** (n // 2) for n in lengths)
        wanted = sum(cls.positives(split_counts(options)).values())
        if wanted > available:
            raise ConfigError(key, f"{wanted} distinct balanced strings wanted, but only {available} exist for "
                              f"lengths {options.min_len}..{options.max_len}; raise max_len or lower n_train")

    def strings(self, rng: random.Random):
        o = self.options
        lengths = self.lengths(o)
        counts = split_counts(o)
        n_pos = self.positives(counts)
        n_neg = {k: n - n_pos[k] for k, n in counts.items()}
        pos = sample_distinct(rng, lambda: random_walk(rng, rng.choice(lengths), o.n_types, True),
                              sum(n_pos.values()), "balanced strings")
        rng.shuffle(pos)  # distinct draws exhaust short lengths first; shuffle so splits are alike
        pos_split = deal(pos, n_pos)
        seen, edits, rows = set(pos), [], {}
        for name in SPLITS:  # each negative takes the length of a positive: lengths tell nothing
            neg = []
            for length in [len(p) for p in pos_split[name]][: n_neg[name]]:
                for _ in range(1000):
                    text, kind = corrupt(rng, random_walk(rng, length, o.n_types, True), o.n_types)
                    if text not in seen:
                        break
                else:
                    raise ConfigError("task", f"could not draw enough distinct unbalanced strings of length {length}")
                seen.add(text)
                neg.append(text)
                edits.append(kind)
            rows[name] = [(p, 1) for p in pos_split[name]] + [(q, 0) for q in neg]
            rng.shuffle(rows[name])
        return rows, {"negatives": {k: edits.count(k) for k in sorted(set(edits))}, "labels": "1 balanced, 0 not"}

    def example(self, ids, text, label):
        return Example(ids, label)

    def task_data(self, tok, splits, info):
        return TaskData(tok, "classification", splits, n_classes=2, metrics=("accuracy",), info=info)


@dataclass(frozen=True)
class DyckDepthOptions(DyckOptions):
    max_depth: int = 8  # depths above are labelled max_depth; n_classes = max_depth + 1

    def __post_init__(self):
        super().__post_init__()
        positive("max_depth", self.max_depth)


@TASKS.register("dyck_depth", DyckDepthOptions, "label each bracket with the nesting depth after it")
class DyckDepthTask(_BracketTask):
    prefix = []

    def strings(self, rng: random.Random):
        o = self.options
        total = o.n_train + o.n_val + o.n_test
        pool = sample_distinct(rng, lambda: random_walk(rng, rng.randint(o.min_len, o.max_len), o.n_types, False),
                               total, "bracket strings")
        rng.shuffle(pool)
        return {k: [(s, None) for s in v] for k, v in deal(pool, split_counts(o)).items()}, {}

    def example(self, ids, text, label):
        return Example(ids, [min(d, self.options.max_depth) for d in depths(text)])

    def task_data(self, tok, splits, info):
        return TaskData(tok, "token_classification", splits, n_classes=self.options.max_depth + 1,
                        metrics=("accuracy",), info=info)
