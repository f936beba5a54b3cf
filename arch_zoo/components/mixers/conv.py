"""Parts the recurrent mixers share: a short causal depthwise convolution that carries its last inputs
as decoding state, and the gated RMSNorm on their output."""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConv(nn.Module):
    """silu(causal depthwise conv1d(x)) over (B, L, C); ``prefix`` (B, C, size - 1) is the inputs before
    x (None: zeros, a sequence's start). Padded inputs are zeroed first (``keep`` (B, L, 1)), so a
    left-padded row convolves as if it began at its first real token. ``silu=False``: the convolution
    alone (LFM2's gated short convolution, Griffin's recurrent block)."""

    def __init__(self, channels: int, size: int, bias: bool, silu: bool = True):
        super().__init__()
        self.size, self.silu = size, silu
        self.conv = nn.Conv1d(channels, channels, size, groups=channels, bias=bias)

    def forward(self, x: Tensor, keep: Optional[Tensor], prefix: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """(output (B, L, C), the last size - 1 inputs: the next call's prefix)."""
        if keep is not None:
            x = x * keep
        x = x.transpose(1, 2)
        if prefix is None:
            prefix = x.new_zeros(x.shape[0], x.shape[1], self.size - 1)
        x = torch.cat((prefix.to(x.dtype), x), dim=-1)
        out = self.conv(x)
        return (F.silu(out) if self.silu else out).transpose(1, 2), x[..., x.shape[-1] - (self.size - 1):]

    def flops(self) -> int:
        """Per token: a multiply-add per channel and tap."""
        return 2 * self.conv.in_channels * self.size


class GatedRMSNorm(nn.Module):
    """RMSNorm(x) * weight * silu(z) over groups of ``group`` features (Gated DeltaNet, Mamba-2);
    ``gate_first``: silu(z) multiplies x before the norm (Mamba-2) rather than after (Gated DeltaNet);
    ``gate``: the gate's activation (Kimi Delta Attention's is a sigmoid)."""

    def __init__(self, dim: int, group: int, eps: float, gate_first: bool, gate: Callable[[Tensor], Tensor] = F.silu):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group, self.eps, self.gate_first, self.gate = group, eps, gate_first, gate

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        dtype = x.dtype
        wide = torch.promote_types(dtype, torch.float32)  # float32 at least, float64 kept
        x, z = x.to(wide), z.to(wide)
        if self.gate_first:
            x = x * self.gate(z)
        h = x.unflatten(-1, (-1, self.group))
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        h = h * self.weight.to(wide)
        if not self.gate_first:
            h = h * self.gate(z)
        return h.to(dtype)
