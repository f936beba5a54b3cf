"""Windows of a token store's split, read by offset: lazy sequences of Examples.

``Windows`` (``task.windows: stream``): window ``i`` is ``ids[offset + i * length : offset + (i + 1) *
length]``, running across documents. ``DocumentWindows`` (``windows: documents``): every window starts
at a document, so a corpus of one example per line is scored per example; the batch's collate pads
the shorter ones (labels IGNORE, attention_mask 0). Both read from the memmap when asked, and both
take the store's scored spans (``scored: completion``): a label outside them is IGNORE, and with
``task.documents: separate`` give each example the ``document_ids`` of its tokens. The training
order stays the sampler's: a permutation of window indices that is a function of (seed, step)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Callable, List, Optional

import numpy as np

from .example import IGNORE, Example
from .store import TokenArray


def document_ids(doc_starts: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The document (its index in ``doc_starts``) each token ``start .. stop - 1`` of a split is of."""
    return np.searchsorted(doc_starts, np.arange(start, stop), side="right") - 1


class ScoredSpans:
    """Which tokens of a split are scored: document d's from ``score_starts[d]`` to its end (its
    completion and eos), none before. ``doc_starts`` and ``score_starts`` are aligned, per document."""

    def __init__(self, doc_starts: np.ndarray, score_starts: np.ndarray):
        self.doc_starts = np.asarray(doc_starts, dtype=np.int64)
        self.score_starts = np.asarray(score_starts, dtype=np.int64)

    def mask(self, start: int, stop: int) -> np.ndarray:
        return np.arange(start, stop) >= self.score_starts[document_ids(self.doc_starts, start, stop)]


class _Windows(Sequence):
    """A window by index: ``bounds(i)`` -> (start, stop) token offsets, made into an Example."""

    make: Callable[[int, List[int]], Example]
    scored: Optional[ScoredSpans] = None
    separate: Optional[np.ndarray] = None  # task.documents: separate, the split's doc_starts: examples carry document_ids

    def bounds(self, i: int):
        raise TypeError("abstract")

    def window(self, i: int) -> np.ndarray:
        return self.ids.read(*self.bounds(i))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        start, stop = self.bounds(i)
        ex = self.make(i, self.ids.read(start, stop).tolist())
        if self.separate is not None:
            ex = dataclasses.replace(ex, document_ids=document_ids(self.separate, start, stop).tolist())
        if self.scored is None:
            return ex
        keep = self.scored.mask(start, stop)
        return dataclasses.replace(ex, labels=[y if k else IGNORE for y, k in zip(ex.labels, keep)])

    def __eq__(self, other) -> bool:
        if not isinstance(other, (Sequence, list)) or len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


class Windows(_Windows):
    """Non-overlapping windows of ``length`` tokens from ``offset``; with ``keep_tail`` a last,
    shorter window (>= 2 tokens: one prediction) too. ``make(i, ids)`` turns window i into an
    Example (it must be picklable for DataLoader workers: a module-level class, not a lambda)."""

    def __init__(self, ids: TokenArray, length: int, make: Callable[[int, List[int]], Example],
                 offset: int = 0, keep_tail: bool = False, scored: Optional[ScoredSpans] = None,
                 separate: Optional[np.ndarray] = None):
        self.ids, self.length, self.make, self.offset, self.scored = ids, length, make, offset, scored
        self.separate = separate
        span = max(len(ids) - offset, 0)
        self.full, tail = divmod(span, length)
        self.tail = tail if keep_tail and tail >= 2 else 0

    def __len__(self) -> int:
        return self.full + (1 if self.tail else 0)

    def bounds(self, i: int):
        start = self.offset + i * self.length
        return start, start + (self.length if i < self.full else self.tail)

    def __repr__(self) -> str:
        return f"Windows({len(self)} x {self.length} tokens from {self.offset})"


class DocumentWindows(_Windows):
    """One window per document from its first token (``doc_starts``: the store's). A document longer
    than ``length`` is truncated to its first ``length`` tokens, or with ``split`` cut into windows of
    ``length`` tokens (the last one shorter). A window shorter than 2 tokens (nothing to predict) is
    left out, and so is one with no scored prediction (a window of prompt only): a batch of such
    windows would have no loss at all. Keeps two int64 per window in memory."""

    def __init__(self, ids: TokenArray, doc_starts: np.ndarray, length: int,
                 make: Callable[[int, List[int]], Example], split: bool = False,
                 scored: Optional[ScoredSpans] = None, separate: Optional[np.ndarray] = None):
        self.ids, self.length, self.make, self.scored, self.separate = ids, length, make, scored, separate
        starts = np.asarray(doc_starts, dtype=np.int64)
        ends = np.append(starts[1:], len(ids)).astype(np.int64)
        self.documents = len(starts)
        self.long = int(np.count_nonzero(ends - starts > length))  # documents longer than a window
        doc = np.arange(len(starts))
        if split:
            parts = (ends - starts + length - 1) // length
            doc = np.repeat(doc, parts)
            within = np.arange(len(doc)) - (np.cumsum(parts) - parts)[doc]
            lo = starts[doc] + within * length
        else:
            lo = starts
        hi = np.minimum(lo + length, ends[doc])
        keep = hi - lo >= 2
        if scored is not None:  # labels[1:] are predicted: tokens lo + 1 .. hi - 1
            keep &= scored.score_starts[doc] <= hi - 1
        self.lo, self.hi = lo[keep], hi[keep]

    def __len__(self) -> int:
        return len(self.lo)

    def bounds(self, i: int):
        return int(self.lo[i]), int(self.hi[i])

    def __repr__(self) -> str:
        return f"DocumentWindows({len(self)} windows of <= {self.length} tokens from {self.documents} documents)"


class LMExample:
    """char_lm: the labels are the inputs (the module shifts them)."""

    def __call__(self, i: int, ids: List[int]) -> Example:
        return Example(ids, ids)
