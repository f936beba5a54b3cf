"""Multi-head attention (MHA, GQA, MQA) with pluggable score kernels and a key/value cache.

A kernel (``model.attention_kernel``) computes softmax(softcap(scale * q k^T) + mask) v and nothing
else, so switching kernels never changes the model's function. The scale and the logit soft-cap are
the model's (``model.attention_scale``, ``model.attn_logit_softcap``), handed to whichever kernel runs
it. Which keys a query may see, and what the cache keeps, is the attention pattern's
(``model.attention``, attention_patterns.py); QK-norm (``model.qk_norm``) normalises q and k before
positions rotate them, over each head's head_dim with one gain shared by the heads (``qk_norm_scope:
head``; Qwen3) or over the whole q and k projections, all heads at once (``projection``; OLMo 2).

Attention sinks (``sinks``; gpt-oss) give each head one learned logit that joins every query's softmax
as a key with a zero value: it takes probability mass and returns nothing, so a head may attend to
nothing. A kernel says whether it can take them (``takes_sinks``); the built-in ones both can.

An output gate (``gate``, Qiu et al. 2025; Qwen3-Next) multiplies each head's output by
sigmoid(x W_g) before the output projection: one gate per element of the head (``elementwise``) or one
per head (``head``).

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
from .state import KVCache, StaticKV, mask_keys  # noqa: F401  (KVCache: long imported from here)
from .parametrization import PARAMETRIZATIONS

# The q.k scale is the model's function, not the kernel's (configs saved before 0.2 had it here).
KERNELS = Registry("attention_kernel", "attention kernel", moved={"scale": "model.attention_scale instead"})


class Backend:
    """softmax(softcap(scale * q k^T) + mask) v for (B, H, L, D) inputs; kv heads may be fewer (GQA).
    ``scale`` None means 1/sqrt(head_dim); ``softcap`` None means none, else cap * tanh(s / cap) (Gemma 2)."""

    returns_weights = False
    takes_sinks = False  # whether __call__ accepts sinks= (H,) per-head sink logits

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
                       scale: Optional[float], softcap: Optional[float], sinks: Optional[Tensor] = None
                       ) -> Tuple[Tensor, Tensor]:
    if v.shape[1] != q.shape[1]:
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    logits = attention_logits(q, k, mask, scale, softcap)
    if sinks is None:
        weights = logits.softmax(dim=-1).to(q.dtype)
    else:  # the sink's column joins the softmax, then leaves: its mass multiplies a zero value
        sink = sinks.float().view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
        weights = torch.cat((logits, sink), dim=-1).softmax(dim=-1)[..., :-1].to(q.dtype)
    if dropout > 0:
        weights = F.dropout(weights, dropout)
    return weights @ v, weights


@KERNELS.register("sdpa", NoOptions, "torch scaled_dot_product_attention (fused kernels where available); "
                  "layers with a logit soft-cap run the explicit math, which no fused kernel computes")
class SDPABackend(Backend):
    takes_sinks = True

    def __call__(self, q, k, v, mask, dropout, sinks: Optional[Tensor] = None):
        if self.softcap is not None:  # tanh of the scores before the mask: no additive mask can express it
            return explicit_attention(q, k, v, mask, dropout, self.scale, self.softcap, sinks)[0], None
        if sinks is not None:
            q, k, v, mask = with_sink_key(q, k, v, mask, sinks)
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
    takes_sinks = True

    def __call__(self, q, k, v, mask, dropout, sinks: Optional[Tensor] = None):
        return explicit_attention(q, k, v, mask, dropout, self.scale, self.softcap, sinks)


def with_sink_key(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, sinks: Tensor
                  ) -> Tuple[Tensor, Tensor, Tensor, AttentionMask]:
    """Sinks as one more key for a kernel that takes an additive mask: a zero key (score 0 before the
    mask) and a zero value, whose mask entry is the head's sink logit."""
    b, h, q_len, _ = q.shape
    k_len = k.shape[-2]
    allowed = mask.materialize(q_len, k_len, q.device)
    bias = q.new_zeros(1, 1, q_len, k_len) if allowed is None else allowed
    if bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=q.dtype, device=q.device).masked_fill(~bias, float("-inf"))
    bias = bias.to(q.dtype).expand(bias.shape[0], h, q_len, k_len)
    sink = sinks.to(q.dtype).view(1, h, 1, 1).expand(bias.shape[0], h, q_len, 1)
    k = torch.cat((k, k.new_zeros(*k.shape[:-2], 1, k.shape[-1])), dim=-2)
    v = torch.cat((v, v.new_zeros(*v.shape[:-2], 1, v.shape[-1])), dim=-2)
    return q, k, v, AttentionMask(torch.cat((bias, sink), dim=-1), False, mask.keep)


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
    """Self-attention: a fused QKV projection of x (``MultiHeadCrossAttention``: keys from a memory).

    ``pattern`` (self-attention only) narrows the mask and trims the cache; ``qk_norm`` builds a
    norm of a given width, one for q and one for k: over head_dim, each shared by all heads
    (``qk_norm_scope`` "head", Qwen3), or over the heads' concatenation ("projection", OLMo 2)."""

    cross = False  # attention_diagnostics names a cross-attention ``layer_{i}.cross``

    def __new__(cls, shape=None, backend=None, cross: bool = False, *args, **kwargs):
        # ``MultiHeadAttention(..., cross=True)``, the older spelling, builds the cross-attention class
        return super().__new__(MultiHeadCrossAttention if cross and cls is MultiHeadAttention else cls)

    def __init__(self, shape: AttentionShape, backend, cross: bool = False,
                 pattern: Optional[AttentionPattern] = None, qk_norm: Optional[Callable[[int], nn.Module]] = None,
                 qk_norm_scope: str = "head", gate: Optional[str] = None, sinks: bool = False):
        super().__init__()
        self.shape = shape
        self.backend = backend
        self.pattern = GlobalAttention() if self.cross or pattern is None else pattern
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim
        self.projections(shape)
        self.out = nn.Linear(h * d, shape.d_model, bias=shape.bias)
        # after out: a gated layer's state dict keeps the ungated one's keys, in the same order
        self.gate = None if gate is None else nn.Linear(shape.d_model, h * d if gate == "elementwise" else h,
                                                        bias=shape.bias)
        self.sinks = nn.Parameter(torch.zeros(h)) if sinks else None  # one logit per head (gpt-oss)
        self.qk_norm_flat = qk_norm_scope == "projection"  # normed before the split into heads
        q_dim, k_dim = (h * d, kv * d) if self.qk_norm_flat else (d, d)
        self.q_norm = qk_norm(q_dim) if qk_norm is not None else None
        self.k_norm = qk_norm(k_dim) if qk_norm is not None else None
        self.last_weights: Optional[Tensor] = None
        self.recorder: Optional[Callable] = None  # attention_diagnostics.AttentionRecorder while it records

    def projections(self, shape: AttentionShape) -> None:
        """The input projections (registered before ``out``: the state dict's order)."""
        self.qkv = nn.Linear(shape.d_model, (shape.n_heads + 2 * shape.n_kv_heads) * shape.head_dim, bias=shape.bias)

    def value_and_output_weights(self) -> List[Tensor]:
        """The value rows of the fused projection and the output projection's weight (views, for
        in-place init scaling: DeepNorm's beta); q and k are left out."""
        shape = self.shape
        fused, before = (self.kv, shape.n_kv_heads) if hasattr(self, "kv") else (self.qkv, shape.n_heads + shape.n_kv_heads)
        return [fused.weight.data[before * shape.head_dim:], self.out.weight.data]

    @classmethod
    def from_config(cls, cfg, cross: bool = False) -> "MultiHeadAttention":
        """The attention sublayer a ModelConfig (one layer's) describes."""
        return cls(cross=cross, **attention_args(cfg))

    def static_kv(self, batch: int, slots: int, dtype, device, column: Optional[Tensor] = None,
                  columns: Optional[int] = None) -> StaticKV:
        """Preallocated K/V of ``slots`` positions (a ring when fewer than ``columns``)."""
        shape = (batch, self.shape.n_kv_heads, slots, self.shape.head_dim)
        return StaticKV(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device),
                        column=column, columns=columns)

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
        """(B, L, d_model) from x: its queries over the keys ``project`` gives (``memory`` is read by
        cross-attention only), under ``mask``; ``cache`` the layer's K/V state (None: not decoding)."""
        q, k, v, mask = self.project(x, mask, rotate, memory, cache)
        return self.attend(x, q, k, v, mask, need_weights)

    def project(self, x: Tensor, mask: AttentionMask, rotate: Optional[Rotate], memory: Optional[Tensor],
                cache: Optional[KVCache]) -> Tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """Self-attention's q, k, v (B, heads, L|keys, D), normed and rotated, over every key the query
        reads (the cache's included) and the mask over those keys."""
        h, kv, d = self.shape.n_heads, self.shape.n_kv_heads, self.shape.head_dim
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
            return q, k, v, mask
        return q, k, v, self.pattern.restrict(mask, q.shape[-2], mask_keys(mask, q.shape[-2]), q.device)

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, need_weights: bool) -> Tensor:
        """The kernel over (q, k, v) under ``mask``, then the gate and the output projection."""
        h = self.shape.n_heads
        if need_weights and not self.backend.returns_weights:
            raise ValueError("attention weights need the 'explicit' attention kernel")
        if self.recorder is not None:  # (None but while diagnostics record: nothing else in the hot path)
            self.recorder(self, q, k, mask)
        out, weights = self.combine(q, k, v, mask, self.shape.dropout if self.training else 0.0)
        self.last_weights = weights if need_weights else None
        if mask.keep is not None:
            out = out * mask.keep.to(out.dtype)
        out = out.transpose(1, 2)  # (B, L, H, D)
        if self.gate is not None:
            g = torch.sigmoid(self.gate(x)).unflatten(-1, (h, -1))  # (B, L, H, D or 1)
            out = out * g.to(out.dtype)
        return self.out(out.flatten(2))

    def combine(self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout: float
                ) -> Tuple[Tensor, Optional[Tensor]]:
        """The heads' outputs (B, H, Lq, Dv) from rotated q, k and v: the kernel's softmax attention
        (and the sinks); a variant that mixes maps otherwise (differential attention) overrides it."""
        if self.sinks is None:
            return self.backend(q, k, v, mask, dropout)
        return self.backend(q, k, v, mask, dropout, sinks=self.sinks)

class MultiHeadCrossAttention(MultiHeadAttention):
    """Cross-attention: q from x, a fused KV projection of the encoder memory, computed on the first
    call and then read from the cache (normed and rotated as they were cached)."""

    cross = True

    def projections(self, shape: AttentionShape) -> None:
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.head_dim
        self.q = nn.Linear(shape.d_model, h * d, bias=shape.bias)
        self.kv = nn.Linear(shape.d_model, 2 * kv * d, bias=shape.bias)

    def project(self, x, mask, rotate, memory, cache):
        h, kv, d = self.shape.n_heads, self.shape.n_kv_heads, self.shape.head_dim
        q = self.q(x)
        if cache is not None and len(cache):
            q = self._heads(self._norm_qk(q, None, True)[0], h)
            q, _ = self._norm_qk(q, None, False)
            if rotate is not None:
                q, _ = rotate(q, None)
            return q, cache.k, cache.v, mask
        k, v = self.kv(memory).split(kv * d, dim=-1)
        q, k = self._norm_qk(q, k, True)
        q, k, v = self._heads(q, h), self._heads(k, kv), self._heads(v, kv)
        q, k = self._norm_qk(q, k, False)
        if rotate is not None:
            q, k = rotate(q, k)
        if cache is not None:
            cache.append(k, v)
        return q, k, v, mask


def attention_args(cfg) -> dict:
    """MultiHeadAttention's arguments (but ``cross``) from a ModelConfig (one layer's): its flat keys."""
    shape = AttentionShape(cfg.d_model, cfg.n_heads, cfg.kv_heads, cfg.dim_per_head, cfg.bias,
                           cfg.rate("attention_dropout"))
    scale = cfg.attention_scale
    if scale is None:  # the parametrization's default (mup: 1/head_dim), else the kernel's 1/sqrt(head_dim)
        scale = PARAMETRIZATIONS.build(cfg.parametrization, cfg).attention_scale(cfg.dim_per_head)
    backend = KERNELS.build(cfg.attention_kernel, scale, cfg.attn_logit_softcap)
    qk_norm = (lambda dim: NORMS.build(cfg.qk_norm, dim)) if cfg.qk_norm is not None else None
    return dict(shape=shape, backend=backend, pattern=ATTENTION.build(cfg.attention), qk_norm=qk_norm,
                qk_norm_scope=cfg.qk_norm_scope)
