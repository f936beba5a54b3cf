"""Decoding state: what one layer keeps between decoding steps, behind one protocol.

Every mixer's state is a ``DecodingState``: generation never looks inside it, it only

* ``reorder(index)``: keeps batch rows ``index`` (beam search expands and reorders rows);
* ``tensors()``: the buffers a compiled decode step reads and writes (their addresses are fixed for
  CUDA graphs);
* ``load(eager, seen)``: a *static* state (preallocated, storage fixed from step to step, so one
  compiled step serves every position) takes over an eager state after the prompt's eager pass, which
  fed it ``seen`` columns (None: a cross-attention memory, filled once from column 0);
* ``nbytes``: what it holds in memory now: the bytes its tensors keep alive, since each stored tensor
  holds its own storage (``owned``; a view of a prefill's buffer would keep the whole buffer).

Two forms cover the built-in mixers. A state that grows with the context, the key/value cache
(``KVCache`` eager, ``StaticKV`` preallocated, a ring for a sliding window), and a state of fixed
size, ``RecurrentState`` (named tensors: an SSM or delta-rule matrix, a convolution's last inputs, an
LSTM's (h, c)), whose static form only has to write in place. A mixer makes its own (``new_state``
and ``static_state``); ``LayerState`` pairs a layer's mixer state with its cross-attention cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .masks import AttentionMask


def owned(t: Tensor) -> Tensor:
    """``t`` if its storage holds just it, else a copy that does: a slice of a prefill's convolution
    input or a head split of a fused qkv projection would otherwise keep the whole buffer alive."""
    if t.untyped_storage().nbytes() == t.numel() * t.element_size():
        return t
    return t.clone(memory_format=torch.contiguous_format)


class DecodingState:
    """The protocol; the defaults are those of a state with nothing in it."""

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (repeats allowed)."""

    def tensors(self) -> List[Tensor]:
        return []

    def load(self, eager: "DecodingState", seen: Optional[int]) -> None:
        """Take over ``eager``'s content (a static form only), after ``seen`` columns were fed to it."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())


class KVCache(DecodingState):
    """One attention layer's keys and values. Self-attention appends the new positions each step;
    cross-attention fills it once from the encoder memory and then only reads it.

    Keys and values live in buffers that double when full, so appending a position copies that
    position rather than the whole cache (as torch.cat would); ``k`` and ``v`` are views of the
    live part, ``[start, len)``. ``trim(n)`` drops all but the newest n keys (a sliding window's
    cache): the dropped ones are only skipped until the buffer is next full, when the live part moves
    to a fresh buffer of twice its size, so a trimmed cache's memory stays bounded and each step
    copies O(1) positions on average. While autograd records, appends use torch.cat instead: writing
    into a buffer would overwrite tensors saved for the backward pass."""

    def __init__(self):
        self._k: Optional[Tensor] = None  # (B, kv_heads, capacity, head_dim)
        self._v: Optional[Tensor] = None
        self._start = 0
        self._len = 0

    @property
    def k(self) -> Optional[Tensor]:
        return None if self._k is None else self._k[:, :, self._start: self._len]

    @property
    def v(self) -> Optional[Tensor]:
        return None if self._v is None else self._v[:, :, self._start: self._len]

    @property
    def capacity(self) -> int:
        """Positions the buffers hold room for (live or not): what the cache costs in memory."""
        return 0 if self._k is None else self._k.shape[-2]

    def __len__(self) -> int:
        return self._len - self._start

    def tensors(self) -> List[Tensor]:
        return [] if self._k is None else [self._k, self._v]

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        if self._k is None or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)):
            if self._k is not None:
                k, v = torch.cat((self.k, k), dim=-2), torch.cat((self.v, v), dim=-2)
            self._k, self._v, self._start, self._len = owned(k), owned(v), 0, k.shape[-2]  # full: the next append moves it
            return self._k, self._v
        end = self._len + k.shape[-2]
        if end > self._k.shape[-2]:
            self._k, self._v = self._moved(self._k, k.shape[-2]), self._moved(self._v, k.shape[-2])
            self._len, self._start = len(self), 0
            end = self._len + k.shape[-2]
        self._k[:, :, self._len: end] = k
        self._v[:, :, self._len: end] = v
        self._len = end
        return self.k, self.v

    def _moved(self, buffer: Tensor, incoming: int) -> Tensor:
        live = len(self)
        shape = list(buffer.shape)
        shape[-2] = max(live + incoming, 2 * live)
        moved = buffer.new_empty(shape)
        moved[:, :, :live] = buffer[:, :, self._start: self._len]
        return moved

    def attend(self, k: Tensor, v: Tensor, mask: AttentionMask, pattern) -> Tuple[Tensor, Tensor, AttentionMask]:
        """Append a step's k, v; every key the layer attends to comes back with the pattern's mask over
        them (the stack's mask spans every key it has seen, a trimmed cache holds the newest only).
        The cache is then trimmed to what the pattern keeps for the next step."""
        mask = pattern.restrict(mask, k.shape[-2], mask_keys(mask, len(self) + k.shape[-2]), k.device)
        k, v = self.append(k, v)
        if (keep := pattern.cache_keep()) is not None:
            self.trim(keep)  # k, v above are views already taken: the trim only moves where the next begins
        return k, v, mask.last_keys(k.shape[-2])

    def trim(self, keep: int) -> None:
        """Keep only the newest ``keep`` keys."""
        self._start = max(self._start, self._len - keep)

    def reorder(self, index: Tensor) -> None:
        if self._k is not None:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)


def mask_keys(mask: AttentionMask, at_least: int) -> int:
    """How many keys the stack's mask spans: its last dimension, else (implicit causal, or none) ``at_least``."""
    if mask.allowed is not None and mask.allowed.shape[-1] > 1:
        return mask.allowed.shape[-1]
    return at_least


def keys_at(mask: AttentionMask, columns: Tensor) -> AttentionMask:
    """The mask at the key ``columns`` (S,) a ring's slots hold; slots not yet written (column < 0) masked."""
    unwritten = columns < 0
    allowed = mask.allowed.index_select(-1, columns.clamp(min=0))  # a static step's mask is always explicit
    allowed = allowed.masked_fill(unwritten, False if allowed.dtype == torch.bool else float("-inf"))
    return AttentionMask(allowed, False, mask.keep)


class StaticKV(DecodingState):
    """The static form of ``KVCache``: the same ``attend``, ``k``, ``v``, ``len``, ``reorder``, but every
    tensor keeps its shape and storage from step to step. The step writes the new key at the cache's
    current *column* (a shared one-element tensor, not a Python int, so the step is not re-traced per
    position) and attends over the whole buffer under a mask the model builds over every column.

    A layer whose pattern keeps only the newest ``keep`` keys (a sliding window) gets a ring buffer of
    ``keep + 1`` slots: slot ``column % size`` is overwritten, which holds exactly the window after the
    write, and the column mask is gathered at the columns the slots hold. A global layer's buffer has
    one slot per column. Cross-attention buffers hold the encoder memory's K/V, filled once."""

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

    def tensors(self) -> List[Tensor]:
        return [self._k, self._v]

    def attend(self, k: Tensor, v: Tensor, mask: AttentionMask, pattern) -> Tuple[Tensor, Tensor, AttentionMask]:
        """Write one step's k, v (B, kv, 1, D) at the column; all slots and their mask come back."""
        slot = self.column % self.size if self.ring else self.column
        self._k.index_copy_(2, slot, k.to(self._k.dtype))
        self._v.index_copy_(2, slot, v.to(self._v.dtype))
        if self.ring:  # the column each slot holds: the newest one at or before the step's with that remainder
            mask = keys_at(mask, self.column - (self.column - self.slots) % self.size)
        return self._k, self._v, mask

    def load(self, eager: DecodingState, seen: Optional[int]) -> None:
        """Copy an eager cache's live keys (the newest of ``seen`` columns; a trimmed cache holds fewer)
        into their slots."""
        if not isinstance(eager, KVCache) or eager.k is None:
            return
        k, v = eager.k, eager.v
        first_column = 0 if seen is None else seen - k.shape[-2]
        cols = torch.arange(first_column, first_column + k.shape[-2], device=k.device)
        slots = cols % self.size if self.ring else cols
        self._k.index_copy_(2, slots, k.to(self._k.dtype))
        self._v.index_copy_(2, slots, v.to(self._v.dtype))

    def reorder(self, index: Tensor) -> None:
        """In place: the buffers' storage is what a compiled step reads."""
        self._k.copy_(self._k.index_select(0, index))
        self._v.copy_(self._v.index_select(0, index))


class RecurrentState(DecodingState):
    """A fixed-size state of named tensors, each (batch, ...). Eager: ``write`` rebinds the name (safe
    under autograd); static (``shapes`` given): the tensors are preallocated zeros and ``write`` copies
    into them, so their storage never changes. ``read`` of a name never written is None (a mixer
    starts from zeros)."""

    def __init__(self, shapes: Optional[Dict[str, Tuple[int, ...]]] = None, dtype=None, device=None):
        self.static = shapes is not None
        self._t: Dict[str, Tensor] = {name: torch.zeros(shape, dtype=dtype, device=device)
                                      for name, shape in (shapes or {}).items()}

    def read(self, name: str) -> Optional[Tensor]:
        return self._t.get(name)

    def write(self, name: str, value: Tensor) -> None:
        if self.static:
            self._t[name].copy_(value)
        else:
            self._t[name] = owned(value)

    def tensors(self) -> List[Tensor]:
        return list(self._t.values())

    def load(self, eager: DecodingState, seen: Optional[int]) -> None:
        for name, t in self._t.items():
            value = eager.read(name) if isinstance(eager, RecurrentState) else None
            if value is None:
                t.zero_()
            else:
                t.copy_(value.expand_as(t))

    def reorder(self, index: Tensor) -> None:
        for name, t in list(self._t.items()):
            if self.static:
                t.copy_(t.index_select(0, index))
            else:
                self._t[name] = t.index_select(0, index)


@dataclass
class LayerState:
    """One layer's decoding state: its mixer's, and its cross-attention's K/V (filled once)."""

    mixer: DecodingState = field(default_factory=KVCache)
    cross: DecodingState = field(default_factory=KVCache)

    def reorder(self, index: Tensor) -> None:
        self.mixer.reorder(index)
        self.cross.reorder(index)

    def tensors(self) -> List[Tensor]:
        return self.mixer.tensors() + self.cross.tensors()
