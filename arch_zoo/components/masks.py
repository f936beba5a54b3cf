"""The package's one mask convention.

A mask is a boolean "may attend" tensor (True = the query may look at the key), broadcastable to
(batch, heads, q_len, k_len), built once per forward and handed to every layer. Padding comes in
as Hugging Face's ``attention_mask``: (batch, length), 1/True for real tokens.

Query rows with nothing to attend to (a left-padded query under a causal mask, a padded query
in cross-attention to an empty source) would make softmax return NaN. We let such rows attend
everywhere (so the softmax is finite) and then zero their output via ``keep``: their attention
output is exactly 0, and nothing non-finite can reach the residual stream or the loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass(frozen=True)
class AttentionMask:
    allowed: Optional[Tensor] = None  # bool (B|1, 1, Lq, Lk), or float additive bias with -inf where masked
    is_causal: bool = False  # square causal mask with nothing else: backends may take a fused path
    keep: Optional[Tensor] = None  # (B, 1, Lq, 1) float: 0 for rows that may attend to nothing

    def with_bias(self, bias: Optional[Tensor], q_len: int, k_len: int) -> "AttentionMask":
        """Fold an additive score bias (ALiBi, T5) into a float mask, once for all layers."""
        if bias is None:
            return self
        allowed = self.materialize(q_len, k_len, bias.device)
        if allowed is not None:
            bias = bias.masked_fill(~allowed, float("-inf"))
        return AttentionMask(bias, False, self.keep)

    def restrict(self, band: Tensor) -> "AttentionMask":
        """This mask and a (q_len, k_len) bool ``band`` (an attention pattern's; (B, 1, q_len, k_len): the
        document mask's). A query row left with nothing to attend attends everywhere and is zeroed through
        ``keep``, as in ``_finish``. Without padding (``keep`` None) no row can empty: every band here
        includes the query's own key."""
        q_len, k_len = band.shape[-2:]
        band = band.view(-1, 1, q_len, k_len)  # (q_len, k_len), or one per batch row (B, 1, q_len, k_len)
        allowed = self.materialize(q_len, k_len, band.device)
        if allowed is None:
            return AttentionMask(band, False, None)
        if allowed.dtype == torch.bool:
            allowed = allowed & band
            nonempty = allowed.any(-1, keepdim=True)
            allowed = allowed | ~nonempty if self.keep is not None else allowed
        else:
            allowed = allowed.masked_fill(~band, float("-inf"))
            nonempty = (allowed > float("-inf")).any(-1, keepdim=True)
            allowed = allowed.masked_fill(~nonempty, 0.0) if self.keep is not None else allowed
        keep = None if self.keep is None else self.keep * nonempty.to(self.keep.dtype)
        return AttentionMask(allowed, False, keep)

    def last_keys(self, n: int) -> "AttentionMask":
        """The mask over the newest ``n`` keys only (a cache that kept just those)."""
        if self.allowed is None or self.allowed.shape[-1] <= n:
            return self
        return AttentionMask(self.allowed[..., -n:], self.is_causal, self.keep)

    def materialize(self, q_len: int, k_len: int, device) -> Optional[Tensor]:
        """The boolean form, building the causal triangle if it was left implicit."""
        if self.is_causal:
            return causal(q_len, k_len, k_len - q_len, device).view(1, 1, q_len, k_len)
        return self.allowed


def causal(q_len: int, k_len: int, past: int, device=None) -> Tensor:
    """(q_len, k_len) bool: query i (absolute index past + i) may see keys 0..past + i."""
    q_idx = torch.arange(q_len, device=device).unsqueeze(1) + past
    return torch.arange(k_len, device=device).unsqueeze(0) <= q_idx


def padding(attention_mask: Tensor) -> Tensor:
    """(B, Lk) real-token mask -> (B, 1, 1, Lk) bool."""
    return attention_mask.bool()[:, None, None, :]


def _finish(allowed: Tensor) -> AttentionMask:
    nonempty = allowed.any(-1, keepdim=True)
    return AttentionMask(allowed | ~nonempty, False, nonempty.to(torch.float32))


def self_attention_mask(attention_mask: Optional[Tensor], q_len: int, past: int, is_causal: bool,
                        device=None) -> AttentionMask:
    """Mask for self-attention over ``past`` cached keys plus ``q_len`` new ones.

    ``attention_mask`` covers all past + q_len keys."""
    k_len = past + q_len
    if attention_mask is None:
        if not is_causal:
            return AttentionMask()
        if past == 0:
            return AttentionMask(is_causal=True)
        return AttentionMask(causal(q_len, k_len, past, device).view(1, 1, q_len, k_len))
    if attention_mask.shape[-1] != k_len:
        raise ValueError(f"attention_mask covers {attention_mask.shape[-1]} positions, expected {k_len}")
    allowed = padding(attention_mask)
    if is_causal:
        allowed = allowed & causal(q_len, k_len, past, attention_mask.device)
    else:
        allowed = allowed.expand(-1, 1, q_len, -1)
    return _finish(allowed)


def cross_attention_mask(source_mask: Optional[Tensor], q_len: int) -> AttentionMask:
    """Decoder queries over encoder memory: only the source's padding matters."""
    if source_mask is None:
        return AttentionMask()
    return _finish(padding(source_mask).expand(-1, 1, q_len, -1))


def document_starts(document_ids: Tensor) -> Tensor:
    """(B, L) bool: True where a document starts (the row's first token, and every token whose
    document id differs from the one before it)."""
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    return starts


def within_documents(mask: AttentionMask, document_ids: Tensor) -> AttentionMask:
    """``mask`` (over L new keys, nothing cached) and block-diagonal by document: a query reads only the
    keys of its own document (Llama 3's document mask). Every query may read its own key, so only a
    padded query (padding is a document of its own) can be left with nothing: ``restrict`` zeroes it."""
    return mask.restrict((document_ids[:, :, None] == document_ids[:, None, :]).unsqueeze(1))
