"""A preallocated key/value cache for one attention layer, for decoding compiled once per shape.

Same interface as ``attention.KVCache`` (``attend``, ``k``, ``v``, ``len``, ``reorder``), but every
tensor keeps its shape and its storage from step to step, so a compiled decode step (and a CUDA
graph) can be replayed: the step writes the new key at the cache's current *column* (a shared
one-element tensor, not a Python int, so the step is not re-traced per position) and attends over
the whole buffer under a mask that the model builds over every column of the static cache.

A layer whose pattern keeps only the newest ``keep`` keys (a sliding window) gets a ring buffer of
``keep + 1`` slots: slot ``column % size`` is overwritten, which holds exactly the window after the
write, and the model's column mask is gathered at the columns the slots hold. A global layer's buffer
has one slot per column. Cross-attention buffers hold the encoder memory's K/V, filled once.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .attention_patterns import AttentionPattern, SlidingWindowAttention
from .masks import AttentionMask


def ring_size(pattern: AttentionPattern, columns: int) -> int:
    """Slots a static self-attention cache of ``columns`` columns needs under ``pattern``."""
    keep = pattern.cache_keep()
    return columns if keep is None else min(columns, keep + 1)


def supports(pattern: AttentionPattern) -> bool:
    """A static cache reproduces patterns that restrict nothing or restrict to the window they keep
    (what the eager cache then trims to); a plugin's other band would need its own query column."""
    restrict = type(pattern).restrict
    return restrict is AttentionPattern.restrict or restrict is SlidingWindowAttention.restrict


def keys_at(mask: AttentionMask, columns: Tensor) -> AttentionMask:
    """The mask at the key ``columns`` (S,) a ring's slots hold; slots not yet written (column < 0) masked."""
    unwritten = columns < 0
    allowed = mask.allowed.index_select(-1, columns.clamp(min=0))  # a static step's mask is always explicit
    allowed = allowed.masked_fill(unwritten, False if allowed.dtype == torch.bool else float("-inf"))
    return AttentionMask(allowed, False, mask.keep)


class StaticKV:
    def __init__(self, k: Tensor, v: Tensor, column: Optional[Tensor] = None, columns: Optional[int] = None):
        """``k``, ``v``: (B, kv_heads, slots, head_dim) buffers, used as they are (not copied).
        ``column`` is the step's write position, shared by the layers; None for a cross-attention cache."""
        self._k, self._v, self.column = k, v, column
        self.size = k.shape[-2]
        self.ring = columns is not None and self.size < columns
        self.slots = torch.arange(self.size, device=k.device) if self.ring else None

    @property
    def k(self) -> Tensor:
        return self._k

    @property
    def v(self) -> Tensor:
        return self._v

    @property
    def capacity(self) -> int:
        return self.size

    def __len__(self) -> int:
        return self.size

    def attend(self, k: Tensor, v: Tensor, mask: AttentionMask, pattern: AttentionPattern
               ) -> Tuple[Tensor, Tensor, AttentionMask]:
        """Write one step's k, v (B, kv, 1, D) at the column; all slots and their mask come back."""
        slot = self.column % self.size if self.ring else self.column
        self._k.index_copy_(2, slot, k.to(self._k.dtype))
        self._v.index_copy_(2, slot, v.to(self._v.dtype))
        if self.ring:  # the column each slot holds: the newest one at or before the step's with that remainder
            mask = keys_at(mask, self.column - (self.column - self.slots) % self.size)
        return self._k, self._v, mask

    def load(self, k: Tensor, v: Tensor, first_column: int) -> None:
        """Copy keys of columns ``first_column ..`` (an eager cache's live part) into their slots."""
        n = k.shape[-2]
        cols = torch.arange(first_column, first_column + n, device=k.device)
        slots = cols % self.size if self.ring else cols
        self._k.index_copy_(2, slots, k.to(self._k.dtype))
        self._v.index_copy_(2, slots, v.to(self._v.dtype))

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in place: the buffers' storage is what a compiled step reads."""
        self._k.copy_(self._k.index_select(0, index))
        self._v.copy_(self._v.index_select(0, index))
