"""Multi-head attention (MHA, GQA, MQA) with pluggable score backends and a key/value cache.

A backend is a kernel: it computes softmax(scale * q k^T + mask) v and nothing else, so switching
backends never changes the model's function. The scale is the model's (``model.attention_scale``),
handed to whichever backend runs it.

Tensors inside attention are (batch, heads, length, head_dim); scores are (batch, heads, q_len, k_len).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import NoOptions, Registry
from .masks import AttentionMask

# The q.k scale is the model's function, not the kernel's (configs saved before 0.2 had it here).
ATTENTION = Registry("attention", "attention backend", moved={"scale": "model.attention_scale instead"})


class Backend:
    """softmax(scale * q k^T + mask) v for (B, H, L, D) inputs; kv heads may be fewer (GQA).
    ``scale`` None means 1/sqrt(head_dim)."""

    returns_weights = False

    def __init__(self, options: NoOptions = NoOptions(), scale: Optional[float] = None):
        self.scale = scale

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout: float
                 ) -> Tuple[Tensor, Optional[Tensor]]:
        raise TypeError("Backend is abstract; use a registered backend")


@ATTENTION.register("sdpa", NoOptions, "torch scaled_dot_product_attention (fused kernels where available)")
class SDPABackend(Backend):
    def __call__(self, q, k, v, mask, dropout):
        attn_mask = mask.allowed
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.to(q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=mask.is_causal, scale=self.scale,
            enable_gqa=k.shape[1] != q.shape[1],
        )
        return out, None


@ATTENTION.register("explicit", NoOptions, "softmax(QK^T/sqrt(d_k))V written out; can return the weights")
class ExplicitBackend(Backend):
    returns_weights = True

    def __call__(self, q, k, v, mask, dropout):
        if k.shape[1] != q.shape[1]:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(q.shape[-1])
        scores = (q @ k.transpose(-2, -1)).float() * scale
        allowed = mask.materialize(q.shape[-2], k.shape[-2], q.device)
        if allowed is not None:
            if allowed.dtype == torch.bool:
                scores = scores.masked_fill(~allowed, float("-inf"))
            else:
                scores = scores + allowed.float()
        weights = scores.softmax(dim=-1).to(q.dtype)
        if dropout > 0:
            weights = F.dropout(weights, dropout)
        return weights @ v, weights


class KVCache:
    """One attention layer's keys and values. Self-attention appends the new positions each step;
    cross-attention fills it once from the encoder memory and then only reads it.

    Keys and values live in buffers that double when full, so appending a position copies that
    position rather than the whole cache (as torch.cat would); ``k`` and ``v`` are views of the
    filled part. While autograd records, appends use torch.cat instead: writing into a buffer
    would overwrite tensors saved for the backward pass."""

    def __init__(self):
        self._k: Optional[Tensor] = None  # (B, kv_heads, capacity, head_dim)
        self._v: Optional[Tensor] = None
        self._len = 0

    @property
    def k(self) -> Optional[Tensor]:
        return None if self._k is None else self._k[:, :, : self._len]

    @property
    def v(self) -> Optional[Tensor]:
        return None if self._v is None else self._v[:, :, : self._len]

    def __len__(self) -> int:
        return self._len

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        if self._k is None or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)):
            if self._k is not None:
                k, v = torch.cat((self.k, k), dim=-2), torch.cat((self.v, v), dim=-2)
            self._k, self._v, self._len = k, v, k.shape[-2]  # full to capacity: the next append copies
            return k, v
        end = self._len + k.shape[-2]
        if end > self._k.shape[-2]:
            self._k, self._v = self._grow(self._k, end), self._grow(self._v, end)
        self._k[:, :, self._len: end] = k
        self._v[:, :, self._len: end] = v
        self._len = end
        return self.k, self.v

    def _grow(self, buffer: Tensor, needed: int) -> Tensor:
        shape = list(buffer.shape)
        shape[-2] = max(needed, 2 * shape[-2])
        grown = buffer.new_empty(shape)
        grown[:, :, : self._len] = buffer[:, :, : self._len]
        return grown

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search)."""
        if self._k is not None:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)


@dataclass(frozen=True)
class AttentionShape:
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    bias: bool
    dropout: float  # on attention weights


Rotate = Callable[[Tensor, Tensor], Tuple[Tensor, Tensor]]


class MultiHeadAttention(nn.Module):
    """Self-attention (fused QKV projection) or cross-attention (Q from x, fused KV from memory)."""

    def __init__(self, shape: AttentionShape, backend, cross: bool = False):
        super().__init__()
        self.shape = shape
        self.cross = cross
        self.backend = backend
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim
        if cross:
            self.q = nn.Linear(shape.d_model, h * d, bias=shape.bias)
            self.kv = nn.Linear(shape.d_model, 2 * kv * d, bias=shape.bias)
        else:
            self.qkv = nn.Linear(shape.d_model, (h + 2 * kv) * d, bias=shape.bias)
        self.out = nn.Linear(h * d, shape.d_model, bias=shape.bias)
        self.last_weights: Optional[Tensor] = None

    def _heads(self, x: Tensor, n: int) -> Tensor:
        return x.unflatten(-1, (n, self.shape.head_dim)).transpose(1, 2)  # (B, n, L, D)

    def forward(self, x: Tensor, mask: AttentionMask, rotate: Optional[Rotate] = None,
                memory: Optional[Tensor] = None, cache: Optional[KVCache] = None,
                need_weights: bool = False) -> Tensor:
        h, kv, d = self.shape.n_heads, self.shape.n_kv_heads, self.shape.head_dim
        if self.cross:
            q = self._heads(self.q(x), h)
            if cache is not None and len(cache):
                k, v = cache.k, cache.v
                if rotate is not None:  # memory keys were rotated when cached
                    q, _ = rotate(q, None)
            else:
                k, v = (self._heads(t, kv) for t in self.kv(memory).split(kv * d, dim=-1))
                if rotate is not None:
                    q, k = rotate(q, k)
                if cache is not None:
                    cache.append(k, v)
        else:
            q, k, v = self.qkv(x).split((h * d, kv * d, kv * d), dim=-1)
            q, k, v = self._heads(q, h), self._heads(k, kv), self._heads(v, kv)
            if rotate is not None:
                q, k = rotate(q, k)
                # q and k are fresh tensors now, but v is still a view of the fused qkv output: kept for
                # backward (or in the cache) it would keep all of it alive. Its own copy frees the rest.
                v = v.contiguous()
            if cache is not None:
                k, v = cache.append(k, v)
        if need_weights and not self.backend.returns_weights:
            raise ValueError("attention weights need the 'explicit' attention backend")
        out, weights = self.backend(q, k, v, mask, self.shape.dropout if self.training else 0.0)
        self.last_weights = weights if need_weights else None
        if mask.keep is not None:
            out = out * mask.keep.to(out.dtype)
        return self.out(out.transpose(1, 2).flatten(2))
