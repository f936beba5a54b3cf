"""Weight initialisation schemes, applied once to a freshly built model."""
from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from ..registry import NoOptions, Registry

INITS = Registry("init", "init scheme")

RESIDUAL_OUT = "residual_out"  # attribute set on projections that write into the residual stream


def mark_residual_out(linear: nn.Linear) -> nn.Linear:
    setattr(linear, RESIDUAL_OUT, True)
    return linear


def _reset_norms_and_biases(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif not isinstance(module, (nn.Linear, nn.Embedding)) and hasattr(module, "weight") \
                and isinstance(module.weight, nn.Parameter) and module.weight.dim() == 1:
            nn.init.ones_(module.weight)  # norm gains
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


@INITS.register("xavier", NoOptions, "Xavier-uniform matrices, zero biases (Vaswani et al. 2017, torch.nn.Transformer)")
class XavierInit:
    def __init__(self, options, n_layers: int):
        pass

    def __call__(self, model: nn.Module) -> None:
        _reset_norms_and_biases(model)
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)


@dataclass(frozen=True)
class NormalInitOptions:
    std: float = 0.02
    scaled_residual: bool = True  # GPT-2: residual output projections get std / sqrt(2 * n_layers)

    def __post_init__(self):
        if self.std <= 0:
            raise ValueError(f"std must be positive, got {self.std}")


@INITS.register("normal", NormalInitOptions, "N(0, std) matrices and embeddings, GPT-2-style scaled residual outputs")
class NormalInit:
    def __init__(self, options: NormalInitOptions, n_layers: int):
        self.options = options
        self.n_layers = n_layers

    def __call__(self, model: nn.Module) -> None:
        _reset_norms_and_biases(model)
        std = self.options.std
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scaled = self.options.scaled_residual and getattr(module, RESIDUAL_OUT, False)
                nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * self.n_layers) if scaled else std)
