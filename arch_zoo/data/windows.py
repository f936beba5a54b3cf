"""Windows of a token store's split, read by offset: a lazy sequence of Examples.

Window ``i`` is ``ids[offset + i * length : offset + (i + 1) * length]``, read from the memmap
when asked for, so a run's memory and start-up do not depend on the corpus size. The training
order stays the sampler's: a permutation of window indices that is a function of (seed, step)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, List

import numpy as np

from .store import TokenArray
from .example import Example


class Windows(Sequence):
    """Non-overlapping windows of ``length`` tokens from ``offset``; with ``keep_tail`` a last,
    shorter window (>= 2 tokens: one prediction) too. ``make(i, ids)`` turns window i into an
    Example (it must be picklable for DataLoader workers: a module-level class, not a lambda)."""

    def __init__(self, ids: TokenArray, length: int, make: Callable[[int, List[int]], Example],
                 offset: int = 0, keep_tail: bool = False):
        self.ids, self.length, self.make, self.offset = ids, length, make, offset
        span = max(len(ids) - offset, 0)
        self.full, tail = divmod(span, length)
        self.tail = tail if keep_tail and tail >= 2 else 0

    def __len__(self) -> int:
        return self.full + (1 if self.tail else 0)

    def window(self, i: int) -> np.ndarray:
        start = self.offset + i * self.length
        return self.ids.read(start, start + (self.length if i < self.full else self.tail))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.make(i, self.window(i).tolist())

    def __eq__(self, other) -> bool:
        if not isinstance(other, (Sequence, list)) or len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Windows({len(self)} x {self.length} tokens from {self.offset})"


class LMExample:
    """char_lm: the labels are the inputs (the module shifts them)."""

    def __call__(self, i: int, ids: List[int]) -> Example:
        return Example(ids, ids)
