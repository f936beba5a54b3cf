"""The static key/value cache of a decoder stack: preallocated buffers whose shapes and storage
never change, so that one compiled decode step (a CUDA graph on GPU) serves every position.

Columns are the eager cache's: the (left-padded) prompt's columns, then one per decoded token.
``valid`` says which columns hold a real key (the prompt's padding never does, columns not yet
decoded do not yet); ``positions`` holds each column's position for the schemes that bias scores
by distance. Each step reads the next position and the write column from here, writes the new
token's, and advances both, all inside the compiled step. Filled from the eager cache after the
prompt's pass (the prefill runs eagerly, at its own length). The stack calls it as it calls any
``StackState`` (models/cache.py); it ignores the positions and padding a caller passes, since it
keeps both.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..components.masks import AttentionMask
from ..components.state import LayerState
from .blocks import Stack
from .cache import StackState


class StaticCache(StackState):
    def __init__(self, stack: Stack, batch: int, columns: int, dtype, device, source_columns: Optional[int] = None):
        self.batch, self.columns = batch, columns
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # the column the next step writes
        self.positions = torch.zeros(batch, columns, dtype=torch.long, device=device)
        self.valid = torch.zeros(batch, columns, dtype=torch.bool, device=device)
        self.next_position = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.layers: List[LayerState] = [layer.static_state(batch, columns, source_columns, dtype, device, self.column)
                                         for layer in stack.layers]

    def layer(self, index: int) -> LayerState:
        return self.layers[index]

    def tensors(self) -> List[Tensor]:
        """Every buffer a compiled step reads and writes (CUDA graphs need their addresses fixed)."""
        return [self.column, self.positions, self.valid, self.next_position,
                *(t for layer in self.layers for t in layer.tensors())]

    def load(self, cache, prompt_mask: Optional[Tensor], next_position: Tensor) -> None:
        """Take over an eager ``Cache`` (models.transformer.Cache) after the prefill: its columns, their
        positions and padding (``prompt_mask`` (B, L), None: no padding) and every layer's state."""
        length = cache.length
        if length >= self.columns:
            raise ValueError(f"a static cache of {self.columns} columns cannot follow a {length}-column prefill")
        self.valid.zero_()
        self.valid[:, :length] = True if prompt_mask is None else prompt_mask.bool()
        self.positions.zero_()
        self.positions[:, :length] = cache.positions.expand(self.batch, -1)
        self.next_position.copy_(next_position.expand(self.batch, 1))
        self.column.fill_(length)
        for static, eager in zip(self.layers, cache.layers):
            static.mixer.load(eager.mixer, length)
            static.cross.load(eager.cross, None)

    def keys(self, positions, attention_mask, length, causal, device) -> Tuple[Tensor, Tensor, AttentionMask]:
        """One token a row: (its positions (B, 1), every column's position, the mask over the columns),
        the new token's column written."""
        positions = self.next_position.clone()
        self.positions.index_copy_(1, self.column, positions)
        self.valid.index_fill_(1, self.column, True)
        return positions, self.positions, AttentionMask(self.valid.view(self.batch, 1, 1, self.columns))

    def advance(self, positions: Tensor) -> None:
        self.next_position.add_(1)
        self.column.add_(1)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search), in place."""
        for t in (self.positions, self.valid, self.next_position):
            t.copy_(t.index_select(0, index))
        for layer in self.layers:
            layer.reorder(index)
