"""Feeding a model one token at a time, with or without the key/value cache.

``Stepper`` is the only code that knows the model kind: decoder-only models continue their
(left-padded) prompt; encoder-decoder models encode the prompt once and continue a decoder
sequence that begins with a start token. Every per-row state lives here so that beam search can
reorder all of it with one call.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..models.transformer import EncoderDecoderModel


class Stepper:
    def __init__(self, model, ids: Tensor, mask: Tensor, max_new_tokens: int, use_cache: bool,
                 pad_token_id: int, start_token_id: int):
        self.model = model
        self.encoder_decoder = isinstance(model, EncoderDecoderModel)
        padded = not bool(mask.all())
        batch = ids.shape[0]
        if self.encoder_decoder:
            self.memory = model.encode(ids, mask if padded else None)
            self.source_mask = mask if padded else None
            prefix, padded = ids.new_full((batch, 1), start_token_id), False
        else:
            prefix = ids
        self.length = prefix.shape[1]
        # Preallocated: the uncached path re-reads the whole sequence each step without a torch.cat.
        self.tokens = prefix.new_full((batch, self.length + max_new_tokens), pad_token_id)
        self.tokens[:, : self.length] = prefix
        self.mask: Optional[Tensor] = None  # None when no row is padded: the model then skips padding masks
        if padded:
            self.mask = torch.ones_like(self.tokens)
            self.mask[:, : self.length] = mask
        # Position of the next token fed: real tokens so far (left padding does not count).
        self.next_position = (mask.sum(-1, keepdim=True) if padded else
                              torch.full((batch, 1), self.length, dtype=torch.long, device=ids.device))
        self.cache = model.new_cache() if use_cache else None

    def _logits(self, ids: Tensor, positions: Optional[Tensor]) -> Tensor:
        mask = self.mask[:, : self.length] if self.mask is not None else None
        if self.encoder_decoder:
            out = self.model.decode(ids, self.memory, self.source_mask, mask, positions, cache=self.cache,
                                    logits_to_keep=1)
        else:
            out = self.model(ids, mask, positions, cache=self.cache, logits_to_keep=1)
        return out.logits[:, -1]

    def first(self) -> Tensor:
        """Run the prompt (or the start token); logits (B, V) for the first new token."""
        return self._logits(self.tokens[:, : self.length], None)

    def step(self, token: Tensor) -> Tensor:
        """Append ``token`` (B,) to every row; logits (B, V) for the token after it."""
        self.tokens[:, self.length] = token
        self.length += 1
        if self.cache is None:
            return self._logits(self.tokens[:, : self.length], None)
        positions = self.next_position
        self.next_position = positions + 1
        return self._logits(token.unsqueeze(1), positions)

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` (repeats allowed: beam search expands each prompt to its beams)."""
        self.tokens = self.tokens.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)
        if self.mask is not None:
            self.mask = self.mask.index_select(0, index)
        if self.encoder_decoder:
            self.memory = self.memory.index_select(0, index)
            if self.source_mask is not None:
                self.source_mask = self.source_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)
