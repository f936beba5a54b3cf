"""Normalization layers. Where they sit (pre/post) is the layer's business, not theirs."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..registry import Registry

NORMS = Registry("norms", "norm")


@dataclass(frozen=True)
class LayerNormOptions:
    eps: float = 1e-5
    bias: bool = True


@NORMS.register("layernorm", LayerNormOptions, "LayerNorm: centre, scale to unit variance, affine (Ba et al. 2016)")
class LayerNorm(nn.LayerNorm):
    def __init__(self, options: LayerNormOptions, dim: int):
        super().__init__(dim, eps=options.eps, bias=options.bias)


@dataclass(frozen=True)
class RMSNormOptions:
    eps: float = 1e-6


@NORMS.register("rmsnorm", RMSNormOptions, "RMSNorm: scale by root-mean-square, no centring or bias (Zhang & Sennrich 2019)")
class RMSNorm(nn.Module):
    def __init__(self, options: RMSNormOptions, dim: int):
        super().__init__()
        self.eps = options.eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        # Statistics in float32 so bf16/fp16 training matches the reference implementations.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


@NORMS.register("zero_centred_rmsnorm", RMSNormOptions, "RMSNorm whose gain is stored as w and applied as 1 + w, w "
                "starting at 0 (Gemma 2, Qwen3-Next): weight decay pulls the gain towards 1, not 0")
class ZeroCentredRMSNorm(RMSNorm):
    zero_centred = True  # the init resets the gain to its identity, 0 (components.init)

    def __init__(self, options: RMSNormOptions, dim: int):
        super().__init__(options, dim)
        nn.init.zeros_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)  # the gain in float32 before the cast, as HF's
