"""LFM2's gated short convolution (Liquid AI 2025): one projection gives B, C and x (d_model each);
B * x passes a causal depthwise convolution of ``conv_size`` taps (no activation), C gates its output,
and an output projection follows. It equals transformers' ``Lfm2ShortConv``
(``models/lfm2/modeling_lfm2.py``) on the weights ``from_hf_layer`` maps.

Its decoding state is the convolution's window: the last conv_size - 1 inputs B * x. A padded
position's input is zeroed (``ShortConv``), so a left-padded row convolves as if it began at its first
real token (transformers zeroes the layer's input there instead, which is the same without biases)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional

from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import ShortConv
from .recurrent import RecurrentMixer, keep_mask, read, renamed, write

# this mixer's parameter names -> transformers' in Lfm2ShortConv
HF_NAMES = {"in_proj": "in_proj", "conv.conv": "conv", "out": "out_proj"}


@dataclass(frozen=True)
class ShortConvOptions:
    conv_size: int = 3  # taps of the causal convolution (LFM2's conv_L_cache)
    bias: Optional[bool] = None  # biases of the projections and the convolution (LFM2's conv_bias); null: model.bias

    def __post_init__(self):
        if self.conv_size < 1:
            raise ValueError(f"conv_size must be positive, got {self.conv_size}")

    def resolved(self, cfg) -> "ShortConvOptions":
        """These options with each null filled in from the layer's ModelConfig."""
        return dataclasses.replace(self, bias=cfg.bias if self.bias is None else self.bias)


@MIXERS.register("short_conv", ShortConvOptions, "LFM2's gated short convolution: C * conv(B * x), a causal "
                 "depthwise convolution of a few taps between two gates; causal only")
class GatedShortConv(RecurrentMixer):
    example_options = {"conv_size": 3}

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    def __init__(self, options: ShortConvOptions, cfg, ctx=None):
        super().__init__()
        bias = options.resolved(cfg).bias
        self.d = cfg.d_model
        self.in_proj = nn.Linear(self.d, 3 * self.d, bias=bias)  # B, C, x
        self.conv = ShortConv(self.d, options.conv_size, bias=bias, silu=False)
        self.out = mark_residual_out(nn.Linear(self.d, self.d, bias=bias))

    def state_shapes(self, batch):
        return {"conv": (batch, self.d, self.conv.size - 1)}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        b, c, h = self.in_proj(x).chunk(3, dim=-1)
        y, window = self.conv(b * h, keep_mask(inputs, x), read(state, "conv"))
        write(state, "conv", window.clone())  # a slice of this call's inputs: keep its few columns only
        return self.out(c * y)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """The convolution, and the two gates B * x and C * y (a multiply per channel each)."""
        return self.conv.flops() + 2 * self.d


def from_hf_layer(hf: nn.Module) -> Dict[str, Tensor]:
    """This mixer's state dict from a transformers ``Lfm2ShortConv``."""
    return renamed(hf.state_dict(), {v: k for k, v in HF_NAMES.items()})


def to_hf_layer(mixer: GatedShortConv) -> Dict[str, Tensor]:
    """An ``Lfm2ShortConv``'s state dict from this mixer."""
    return renamed(mixer.state_dict(), HF_NAMES)

