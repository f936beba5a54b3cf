"""Weight initialisation schemes, applied once to a freshly built model.

A scheme is built with its options and the model's total number of layers (``n_layers``, all
stacks together: GPT-2's residual scaling counts them so). ``__call__(model)`` initialises the whole
model; then ``init_layer(layer, ctx)`` runs on each layer of each stack, in order, with its
``LayerContext`` (index, depth, stack, kind), so a depth-scaled scheme (Zhang et al. 2019's DS-Init,
OLMo's per-layer std) adjusts what ``__call__`` drew. The layer's placement then finishes its own
part (``Placement.after_init``: DeepNorm's beta).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from torch import nn

from ..registry import NoOptions, Registry
from .context import LayerContext

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
            # norm gains: their identity, 0 for a gain stored as w and applied as 1 + w
            (nn.init.zeros_ if getattr(module, "zero_centred", False) else nn.init.ones_)(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


class InitScheme:
    """What the model calls: ``__call__`` on the whole model, then ``init_layer`` per layer."""

    std_follows_fan = False  # True: the std drawn shrinks with fan-in + fan-out (parametrizations rescale by it)

    def __init__(self, options, n_layers: int):
        self.options = options
        self.n_layers = n_layers

    def __call__(self, model: nn.Module) -> None:
        raise NotImplementedError

    def init_layer(self, layer: nn.Module, ctx: LayerContext) -> None:
        """Adjust one layer (``ctx.index`` of ``ctx.depth`` in ``ctx.stack``) after ``__call__``."""

    def embedding_std(self, rows: int, cols: int) -> Optional[float]:
        """The std ``__call__`` gives an embedding table of this shape (token embeddings, a learned
        position table): what a position signal is set against. None: undeclared (then measured)."""
        return None


@INITS.register("xavier", NoOptions, "Xavier-uniform matrices, zero biases (Vaswani et al. 2017, torch.nn.Transformer)")
class XavierInit(InitScheme):
    std_follows_fan = True

    def __call__(self, model: nn.Module) -> None:
        _reset_norms_and_biases(model)
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def embedding_std(self, rows, cols):
        return math.sqrt(2.0 / (rows + cols))  # U(-a, a) with a = sqrt(6 / (fan_in + fan_out))


@dataclass(frozen=True)
class NormalInitOptions:
    std: float = 0.02
    scaled_residual: bool = True  # GPT-2: residual output projections get std / sqrt(2 * n_layers)

    def __post_init__(self):
        if self.std <= 0:
            raise ValueError(f"std must be positive, got {self.std}")


@INITS.register("normal", NormalInitOptions, "N(0, std) matrices and embeddings, GPT-2-style scaled residual outputs")
class NormalInit(InitScheme):
    def __call__(self, model: nn.Module) -> None:
        _reset_norms_and_biases(model)
        std = self.options.std
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scaled = self.options.scaled_residual and getattr(module, RESIDUAL_OUT, False)
                nn.init.normal_(module.weight, 0.0, std / math.sqrt(2 * self.n_layers) if scaled else std)

    def embedding_std(self, rows, cols):
        return self.options.std
