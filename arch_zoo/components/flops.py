"""FLOPs of the matmuls a token runs through: 2 per multiply-add, 2 * in * out per linear layer (only
the active experts of a mixture-of-experts layer). A leaf, shared by the mixers and models.flops."""
from __future__ import annotations

from torch import nn


def linear_flops(module: nn.Module) -> int:
    """2 * in * out per linear layer a token runs through (only the active experts of an MoE)."""
    if hasattr(module, "active_modules"):
        return sum(n * linear_flops(part) for part, n in module.active_modules())
    if isinstance(module, nn.Linear):
        return 2 * module.in_features * module.out_features
    return sum(linear_flops(child) for child in module.children())
