"""The decoding state of a stack, behind the one protocol the stack calls: ``StackState``.

A stack asks its state three things, the same way whether it decodes eagerly (``Cache``), through
the compiled step's preallocated buffers (``static_cache.StaticCache``) or not at all (the base,
``StackState()``, which holds nothing):

* ``keys(positions, attention_mask, length, causal, device)``: the new positions (given ones kept,
  else counted after those already seen), every key's position and the self-attention mask over
  the keys (those seen and the new);
* ``layer(i)``: layer i's ``LayerState`` (None: nothing to read or extend);
* ``advance(positions)``: after the pass, the new positions are seen.

``reorder(index)`` keeps batch rows ``index`` (beam search). Each layer's state is its mixers' own
(``components.state``); the stack never looks inside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..components.masks import AttentionMask, self_attention_mask
from ..components.state import LayerState


def default_positions(attention_mask: Optional[Tensor], length: int, past: int, device) -> Tensor:
    """Positions of the last ``length`` tokens: counted over real tokens only when a padding
    mask is given (so left-padded prompts start at 0), else ``past .. past+length-1``."""
    if attention_mask is None:
        return torch.arange(past, past + length, device=device).unsqueeze(0)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]


class StackState:
    """The protocol, and the state of a pass that keeps nothing (a training or encoder forward)."""

    positions: Optional[Tensor] = None  # (B|1, past): the positions of the keys already seen

    @property
    def length(self) -> int:
        return 0 if self.positions is None else self.positions.shape[-1]

    def layer(self, index: int) -> Optional[LayerState]:
        return None

    def keys(self, positions: Optional[Tensor], attention_mask: Optional[Tensor], length: int, causal: bool,
             device) -> Tuple[Tensor, Tensor, AttentionMask]:
        """(new positions (B|1, L), key positions (B|1, past + L), mask over those keys)."""
        past = self.length
        if positions is None:
            positions = default_positions(attention_mask, length, past, device)
        k_pos = positions
        if self.positions is not None:
            b = max(self.positions.shape[0], positions.shape[0])
            k_pos = torch.cat((self.positions.expand(b, -1), positions.expand(b, -1)), dim=-1)
        return positions, k_pos, self_attention_mask(attention_mask, length, past, causal, device)

    def advance(self, positions: Tensor) -> None:
        """The pass over ``positions`` is done: they join the keys seen."""

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search)."""


@dataclass
class Cache(StackState):
    """The eager decoding state of a decoder stack: one LayerState per layer (each mixer's own, and
    the cross-attention's K/V) plus the positions decoded so far."""

    layers: List[LayerState]
    positions: Optional[Tensor] = None  # (B|1, past)

    def layer(self, index: int) -> LayerState:
        return self.layers[index]

    def advance(self, positions: Tensor) -> None:
        self.extend(positions)

    def extend(self, positions: Tensor) -> None:
        if self.positions is None:
            self.positions = positions
        else:
            b = max(self.positions.shape[0], positions.shape[0])
            self.positions = torch.cat((self.positions.expand(b, -1), positions.expand(b, -1)), dim=-1)

    def reorder(self, index: Tensor) -> None:
        for layer in self.layers:
            layer.reorder(index)
        if self.positions is not None and self.positions.shape[0] > 1:
            self.positions = self.positions.index_select(0, index)
