"""Differential attention (Ye et al., ICLR 2025; Hugging Face's DiffLlama): the heads pair up, head i
with head i + H/2, and each pair's output is the difference of its two softmax maps applied to the
pair's values side by side (width 2 * head_dim):

    out_i = (1 - lambda_init) * RMSNorm(softmax(q_i k_i^T) [v_i, v_j] - lambda * softmax(q_j k_j^T) [v_i, v_j])

with lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init learned (four head_dim vectors per layer)
and lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) at depth l = 1, 2, ... unless set. The RMSNorm, one per
pair over its 2 * head_dim outputs, has no gain. Its projections, cache, pattern, kernel, positions
and GQA are softmax attention's: only how the heads' maps combine differs, so it is a mixer of its own
(a head here is half of a differential head, its value twice as wide) built on attention's pieces."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ..attention import MultiHeadAttention, attention_args
from ..init import mark_residual_out
from ..masks import AttentionMask
from .attention import Attention
from .base import MIXERS


@dataclass(frozen=True)
class DifferentialOptions:
    lambda_init: Optional[float] = None  # null: 0.8 - 0.6 exp(-0.3 (l - 1)) at depth l (the paper's)
    lambda_std: float = 0.1  # std of the normal init of the four lambda vectors
    norm_eps: float = 1e-5  # of the per-head RMSNorm

    def __post_init__(self):
        if self.lambda_init is not None and not 0.0 <= self.lambda_init < 1.0:
            raise ConfigError("lambda_init", f"must be in [0, 1), got {self.lambda_init}")
        if self.lambda_std < 0:
            raise ConfigError("lambda_std", f"must be >= 0, got {self.lambda_std}")


def depth_lambda_init(index: int) -> float:
    """lambda_init of the layer at 0-based ``index`` (the paper's l - 1)."""
    return 0.8 - 0.6 * math.exp(-0.3 * index)


@MIXERS.register("differential_attention", DifferentialOptions, "differential attention (Ye et al. 2025): "
                 "the difference of two softmax maps per head pair, per-head RMSNorm, (1 - lambda_init) scale")
class DifferentialAttention(Attention):
    example_options: dict = {}

    def __init__(self, options: DifferentialOptions, cfg, ctx=None):
        MultiHeadAttention.__init__(self, cross=False, **attention_args(cfg))
        mark_residual_out(self.out)
        self.lambda_init = (options.lambda_init if options.lambda_init is not None
                            else depth_lambda_init(ctx.index if ctx is not None else 0))
        d = self.shape.head_dim
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(d) * options.lambda_std) for _ in range(4))
        self.norm_eps = options.norm_eps

    @classmethod
    def check(cls, options, cfg, key: str) -> None:
        if cfg.n_heads % 2:
            raise ConfigError(f"{key}.n_heads", f"differential attention pairs the heads: n_heads must be even, "
                              f"got {cfg.n_heads}")

    def lambda_full(self) -> Tensor:
        one = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dtype=torch.float32))
        two = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dtype=torch.float32))
        return one - two + self.lambda_init

    def combine(self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout: float
                ) -> Tuple[Tensor, Optional[Tensor]]:
        h = q.shape[1]
        half = h // 2
        if k.shape[1] != h:  # the pairs cross kv groups: every head its own k, v
            k, v = k.repeat_interleave(h // k.shape[1], dim=1), v.repeat_interleave(h // v.shape[1], dim=1)
        pair_v = torch.cat((v[:, :half], v[:, half:]), dim=-1).repeat(1, 2, 1, 1)  # (B, H, L, 2D)
        out, _ = self.backend(q, k, pair_v, mask, dropout)
        out = out[:, :half] - self.lambda_full().to(out.dtype) * out[:, half:]
        out = (1 - self.lambda_init) * F.rms_norm(out, (out.shape[-1],), eps=self.norm_eps)
        return torch.cat(out.chunk(2, dim=-1), dim=1), None  # back to (B, H, L, D) for the output projection

    def _per_key(self) -> int:
        return 2 * self.shape.n_heads * self.shape.head_dim * 3  # q.k at head_dim, weights.v at 2 head_dim
