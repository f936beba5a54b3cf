"""Multi-head attention (MHA, GQA, MQA) with pluggable score kernels and a key/value cache.

A kernel (``model.attention_kernel``) computes softmax(softcap(scale * q k^T) + mask) v and nothing
else, so switching kernels never changes the model's function. The scale and the logit soft-cap are
the model's (``model.attention_scale``, ``model.attn_logit_softcap``), handed to whichever kernel runs
it. Which keys a query may see, and what the cache keeps, is the attention pattern's
(``model.attention``, attention_patterns.py); QK-norm (``model.qk_norm``) normalises q and k before
positions rotate them, over each head's head_dim with one gain shared by the heads (``qk_norm_scope:
head``; Qwen3) or over the whole q and k projections, all heads at once (``projection``; OLMo 2).

Tensors inside attention are (batch, heads, length, head_dim); scores are (batch, heads, q_len, k_len).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import NoOptions, Registry
from .attention_patterns import ATTENTION, AttentionPattern, GlobalAttention
from .masks import AttentionMask
from .norms import NORMS
from .parametrization import PARAMETRIZATIONS

# The q.k scale is the model's function, not the kernel's (configs saved before 0.2 had it here).
KERNELS = Registry("attention_kernel", "attention kernel", moved={"scale": "model.attention_scale instead"})


class Backend:
    """softmax(softcap(scale * q k^T) + mask) v for (B, H, L, D) inputs; kv heads may be fewer (GQA).
    ``scale`` None means 1/sqrt(head_dim); ``softcap`` None means none, else cap * tanh(s / cap) (Gemma 2)."""

    returns_weights = False

    def __init__(self, options: NoOptions = NoOptions(), scale: Optional[float] = None,
                 softcap: Optional[float] = None):
        self.scale = scale
        self.softcap = softcap

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout: float
                 ) -> Tuple[Tensor, Optional[Tensor]]:
        raise TypeError("Backend is abstract; use a registered backend")


def attention_logits(q: Tensor, k: Tensor, mask: AttentionMask, scale: Optional[float],
                     softcap: Optional[float]) -> Tensor:
    """The float32 pre-softmax scores as the model applies them: scale, soft-cap, score biases, and
    -inf where a query may not attend (the explicit kernel's, and the attention diagnostics')."""
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)).float() * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    allowed = mask.materialize(q.shape[-2], k.shape[-2], q.device)
    if allowed is not None:
        if allowed.dtype == torch.bool:
            scores = scores.masked_fill(~allowed, float("-inf"))
        else:
            scores = scores + allowed.float()
    return scores


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout: float,
                       scale: Optional[float], softcap: Optional[float]) -> Tuple[Tensor, Tensor]:
    if v.shape[1] != q.shape[1]:
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    weights = attention_logits(q, k, mask, scale, softcap).softmax(dim=-1).to(q.dtype)
    if dropout > 0:
        weights = F.dropout(weights, dropout)
    return weights @ v, weights


@KERNELS.register("sdpa", NoOptions, "torch scaled_dot_product_attention (fused kernels where available); "
                  "layers with a logit soft-cap run the explicit math, which no fused kernel computes")
class SDPABackend(Backend):
    def __call__(self, q, k, v, mask, dropout):
        if self.softcap is not None:  # tanh of the scores before the mask: no additive mask can express it
            return explicit_attention(q, k, v, mask, dropout, self.scale, self.softcap)[0], None
        attn_mask = mask.allowed
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.to(q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=mask.is_causal, scale=self.scale,
            enable_gqa=k.shape[1] != q.shape[1],
        )
        return out, None


@KERNELS.register("explicit", NoOptions, "softmax(QK^T/sqrt(d_k))V written out; can return the weights")
class ExplicitBackend(Backend):
    returns_weights = True

    def __call__(self, q, k, v, mask, dropout):
        return explicit_attention(q, k, v, mask, dropout, self.scale, self.softcap)


class KVCache:
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

    def append(self, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        if self._k is None or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)):
            if self._k is not None:
                k, v = torch.cat((self.k, k), dim=-2), torch.cat((self.v, v), dim=-2)
            self._k, self._v, self._start, self._len = k, v, 0, k.shape[-2]  # full: the next append moves it
            return k, v
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

    def attend(self, k: Tensor, v: Tensor, mask: AttentionMask, pattern: AttentionPattern
               ) -> Tuple[Tensor, Tensor, AttentionMask]:
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
    """Self-attention (fused QKV projection) or cross-attention (Q from x, fused KV from memory).

    ``pattern`` (self-attention only) narrows the mask and trims the cache; ``qk_norm`` builds a
    norm of a given width, one for q and one for k: over head_dim, each shared by all heads
    (``qk_norm_scope`` "head", Qwen3), or over the heads' concatenation ("projection", OLMo 2)."""

    def __init__(self, shape: AttentionShape, backend, cross: bool = False,
                 pattern: Optional[AttentionPattern] = None, qk_norm: Optional[Callable[[int], nn.Module]] = None,
                 qk_norm_scope: str = "head"):
        super().__init__()
        self.shape = shape
        self.cross = cross
        self.backend = backend
        self.pattern = GlobalAttention() if cross or pattern is None else pattern
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim
        if cross:
            self.q = nn.Linear(shape.d_model, h * d, bias=shape.bias)
            self.kv = nn.Linear(shape.d_model, 2 * kv * d, bias=shape.bias)
        else:
            self.qkv = nn.Linear(shape.d_model, (h + 2 * kv) * d, bias=shape.bias)
        self.out = nn.Linear(h * d, shape.d_model, bias=shape.bias)
        self.qk_norm_flat = qk_norm_scope == "projection"  # normed before the split into heads
        q_dim, k_dim = (h * d, kv * d) if self.qk_norm_flat else (d, d)
        self.q_norm = qk_norm(q_dim) if qk_norm is not None else None
        self.k_norm = qk_norm(k_dim) if qk_norm is not None else None
        self.last_weights: Optional[Tensor] = None
        self.recorder: Optional[Callable] = None  # attention_diagnostics.AttentionRecorder while it records

    def value_and_output_weights(self) -> List[Tensor]:
        """The value rows of the fused projection and the output projection's weight (views, for
        in-place init scaling: DeepNorm's beta); q and k are left out."""
        shape = self.shape
        fused, before = (self.kv, shape.n_kv_heads) if hasattr(self, "kv") else (self.qkv, shape.n_heads + shape.n_kv_heads)
        return [fused.weight.data[before * shape.head_dim:], self.out.weight.data]

    @classmethod
    def from_config(cls, cfg, cross: bool) -> "MultiHeadAttention":
        """The attention sublayer a ModelConfig (one layer's) describes."""
        shape = AttentionShape(cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.dim_per_head, cfg.bias,
                               cfg.rate("attention_dropout"))
        scale = cfg.attention_scale
        if scale is None:  # the parametrization's default (mup: 1/head_dim), else the kernel's 1/sqrt(head_dim)
            scale = PARAMETRIZATIONS.build(cfg.parametrization, cfg).attention_scale(cfg.dim_per_head)
        backend = KERNELS.build(cfg.attention_kernel, scale, cfg.attn_logit_softcap)
        qk_norm = (lambda dim: NORMS.build(cfg.qk_norm, dim)) if cfg.qk_norm is not None else None
        return cls(shape, backend, cross=cross, pattern=ATTENTION.build(cfg.attention), qk_norm=qk_norm,
                   qk_norm_scope=cfg.qk_norm_scope)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        return x.unflatten(-1, (n, self.shape.head_dim)).transpose(1, 2)  # (B, n, L, D)

    def _norm_qk(self, q: Tensor, k: Optional[Tensor], flat: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """The QK-norm, if its scope is where the caller stands: ``flat`` (B, L, heads * D) or per head."""
        if self.q_norm is None or flat != self.qk_norm_flat:
            return q, k
        return self.q_norm(q), (None if k is None else self.k_norm(k))

    def forward(self, x: Tensor, mask: AttentionMask, rotate: Optional[Rotate] = None,
                memory: Optional[Tensor] = None, cache: Optional[KVCache] = None,
                need_weights: bool = False) -> Tensor:
        h, kv, d = self.shape.n_heads, self.shape.n_kv_heads, self.shape.head_dim
        if self.cross:
            q = self.q(x)
            if cache is not None and len(cache):
                k, v = cache.k, cache.v
                q = self._heads(self._norm_qk(q, None, True)[0], h)
                q, _ = self._norm_qk(q, None, False)  # memory keys were normed and rotated when cached
                if rotate is not None:
                    q, _ = rotate(q, None)
            else:
                k, v = self.kv(memory).split(kv * d, dim=-1)
                q, k = self._norm_qk(q, k, True)
                q, k, v = self._heads(q, h), self._heads(k, kv), self._heads(v, kv)
                q, k = self._norm_qk(q, k, False)
                if rotate is not None:
                    q, k = rotate(q, k)
                if cache is not None:
                    cache.append(k, v)
        else:
            q, k, v = self.qkv(x).split((h * d, kv * d, kv * d), dim=-1)
            q, k = self._norm_qk(q, k, True)
            q, k, v = self._heads(q, h), self._heads(k, kv), self._heads(v, kv)
            q, k = self._norm_qk(q, k, False)
            if rotate is not None:
                q, k = rotate(q, k)
                # q and k are fresh tensors now, but v is still a view of the fused qkv output: kept for
                # backward (or in the cache) it would keep all of it alive. Its own copy frees the rest.
                v = v.contiguous()
            if cache is not None:  # the cache's policy: an eager KVCache or a static one (static_cache.py)
                k, v, mask = cache.attend(k, v, mask, self.pattern)
            else:
                mask = self.pattern.restrict(mask, q.shape[-2], mask_keys(mask, q.shape[-2]), q.device)
        if need_weights and not self.backend.returns_weights:
            raise ValueError("attention weights need the 'explicit' attention kernel")
        if self.recorder is not None:  # (None but while diagnostics record: nothing else in the hot path)
            self.recorder(self, q, k, mask)
        out, weights = self.backend(q, k, v, mask, self.shape.dropout if self.training else 0.0)
        self.last_weights = weights if need_weights else None
        if mask.keep is not None:
            out = out * mask.keep.to(out.dtype)
        return self.out(out.transpose(1, 2).flatten(2))


def mask_keys(mask: AttentionMask, at_least: int) -> int:
    """How many keys the stack's mask spans: its last dimension, else (implicit causal, or none) ``at_least``."""
    if mask.allowed is not None and mask.allowed.shape[-1] > 1:
        return mask.allowed.shape[-1]
    return at_least
