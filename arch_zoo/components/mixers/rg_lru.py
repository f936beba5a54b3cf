"""Griffin's recurrent block (De et al. 2024; RecurrentGemma): two branches of the input, y = gelu(x W_y)
and x W_x through a causal depthwise convolution (with bias, no activation) and the RG-LRU, multiplied,
then the output projection. The RG-LRU, per channel, with block-diagonal gates (one block per head):

    r_t = sigmoid(x_t W_a + b_a),  i_t = sigmoid(x_t W_x + b_x),  log a_t = -c r_t softplus(Lambda)  (c = 8)
    h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t x_t)

except at a row's first real position, where h = i x (the recurrence resets there, unnormalised). It
equals transformers' ``RecurrentGemmaRecurrentBlock`` with its ``RecurrentGemmaRglru``
(``models/recurrent_gemma/modeling_recurrent_gemma.py``) on the weights ``from_hf_layer`` maps.
Training and prefill run the linear recurrence chunked (``scan.linear_scan``).

Decoding state: the convolution's last conv_size - 1 inputs, h, and one number a row, whether a real
token has come yet (a left-padded row resets at its first real token, not at the padding). A padded
position decays nothing (a = 1) and writes nothing."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, Literal, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import ShortConv
from .recurrent import RecurrentMixer, initialised, keep_mask, read, renamed, wide, write
from .scan import linear_scan

C = 8.0  # Griffin's fixed scale of the log-decay
HF_NAMES = {"conv.conv": "conv_1d", "out": "linear_out", "": "rg_lru"}  # "": the RG-LRU's own parameters
ACTIVATIONS = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu}


@dataclass(frozen=True)
class RGLRUOptions:
    width: Optional[int] = None  # the recurrence's channels (RecurrentGemma's lru_width); null: d_model
    n_heads: Optional[int] = None  # blocks of the block-diagonal gates; null: model.n_heads
    conv_size: int = 4  # taps of the causal convolution (conv1d_width)
    activation: Literal["gelu_tanh", "gelu"] = "gelu_tanh"  # of the y branch (gelu_pytorch_tanh)
    chunk_size: int = 64  # positions per chunk of the parallel form (the function does not change)

    def __post_init__(self):
        for name in ("width", "n_heads", "conv_size", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")

    def resolved(self, cfg) -> "RGLRUOptions":
        """These options with each null filled in from the layer's ModelConfig."""
        return dataclasses.replace(self, width=self.width or cfg.d_model, n_heads=self.n_heads or cfg.n_heads)


@MIXERS.register("rg_lru", RGLRUOptions, "Griffin's recurrent block (De et al. 2024; RecurrentGemma): gelu(x W_y) "
                 "times the RG-LRU of a causal conv of x W_x; causal only")
class RGLRU(RecurrentMixer):
    example_options = {"conv_size": 3, "chunk_size": 4}

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    @classmethod
    def check(cls, options, cfg, key):
        resolved = options.resolved(cfg)
        if resolved.width % resolved.n_heads:
            raise ConfigError(f"{key}.mixer.width",
                              f"{resolved.width} must be a multiple of n_heads ({resolved.n_heads})")

    def __init__(self, options: RGLRUOptions, cfg, ctx=None):
        super().__init__()
        resolved = options.resolved(cfg)
        self.w, self.h, self.chunk = resolved.width, resolved.n_heads, options.chunk_size
        if self.w % self.h:
            raise ValueError(f"width ({self.w}) must be a multiple of n_heads ({self.h})")
        block = self.w // self.h
        self.act = ACTIVATIONS[options.activation]
        self.linear_y = nn.Linear(cfg.d_model, self.w)
        self.linear_x = nn.Linear(cfg.d_model, self.w)
        self.conv = ShortConv(self.w, options.conv_size, bias=True, silu=False)
        bound = 1 / math.sqrt(block)
        self.input_gate_weight = nn.Parameter(torch.empty(self.h, block, block).uniform_(-bound, bound))
        self.input_gate_bias = nn.Parameter(torch.zeros(self.h, block))
        self.recurrent_gate_weight = nn.Parameter(torch.empty(self.h, block, block).uniform_(-bound, bound))
        self.recurrent_gate_bias = nn.Parameter(torch.zeros(self.h, block))

        def recurrent_param():  # Griffin's init: a^c uniform in [0.9, 0.999] (softplus inverted)
            a = torch.empty(self.w, device="cpu").uniform_(0.9 ** 2 + 1e-8, 0.999 ** 2 + 1e-8)
            return a.log().mul(0.5).neg().exp().sub(1.0).log()

        self.recurrent_param = initialised(self.w, recurrent_param)
        self.out = mark_residual_out(nn.Linear(self.w, cfg.d_model))

    def state_shapes(self, batch):
        return {"conv": (batch, self.w, self.conv.size - 1), "h": (batch, self.w), "started": (batch, 1)}

    def gate(self, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """sigmoid(x W + b) with W block-diagonal: each head's block of channels its own matrix."""
        blocks = x.unflatten(-1, (self.h, -1))
        return torch.sigmoid(torch.einsum("...hi,hij->...hj", blocks, weight) + bias).flatten(-2)

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        y = self.act(self.linear_y(x))
        keep = keep_mask(inputs, x)
        u, window = self.conv(self.linear_x(x), keep, read(state, "conv"))
        write(state, "conv", window.clone())  # a slice of this call's inputs: keep its few columns only
        u = wide(u)
        real = torch.ones_like(u[..., :1]) if keep is None else wide(keep)
        log_a = -C * self.gate(u, wide(self.recurrent_gate_weight), wide(self.recurrent_gate_bias)) \
            * F.softplus(wide(self.recurrent_param))
        started = read(state, "started")
        before = real.new_zeros(real.shape[0], 1) if started is None else wide(started)
        # a row's first real token: the one where the count of real tokens so far reaches 1
        first = real * ((before.unsqueeze(1) + real.cumsum(1)) == 1)
        scale = first + (1 - first) * bounded_sqrt(-torch.expm1(2 * log_a))  # sqrt(1 - a^2), 1 at a reset
        b = u * self.gate(u, wide(self.input_gate_weight), wide(self.input_gate_bias)) * scale * real
        log_a = log_a * real
        h = read(state, "h")
        h = None if h is None else wide(h)
        if state is not None and x.shape[1] == 1 and h is not None:
            h = log_a[:, 0].exp() * h + b[:, 0]  # decoding: the recurrence's one step
            out = h.unsqueeze(1)
        else:  # the recurrence, chunked over (B, W, L)
            out, h = linear_scan(log_a.exp().transpose(1, 2), b.transpose(1, 2), h, chunk=self.chunk)
            out = out.transpose(1, 2)
        write(state, "h", h)
        write(state, "started", torch.maximum(before, real.amax(1)))
        return self.out(out.to(x.dtype) * y)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """The convolution; the two block-diagonal gates (a multiply-add per entry of each head's
        block, 2 W W / H each); and the recurrence, a multiply-add per channel."""
        return self.conv.flops() + 2 * 2 * self.w * self.w // self.h + 2 * self.w


def bounded_sqrt(x: Tensor, max_gradient: float = 1000.0) -> Tensor:
    """sqrt(x) whose gradient is capped at ``max_gradient`` (Griffin's, so a -> 1 gives no inf)."""
    root = torch.sqrt(x)
    return root.detach() + (x - x.detach()) / torch.sqrt((4 * x).clamp(min=max_gradient ** -2)).detach()


def from_hf_layer(hf: nn.Module) -> Dict[str, Tensor]:
    """This mixer's state dict from a transformers ``RecurrentGemmaRecurrentBlock``."""
    return renamed(hf.state_dict(), {v: k for k, v in HF_NAMES.items()})


def to_hf_layer(mixer: RGLRU) -> Dict[str, Tensor]:
    """A ``RecurrentGemmaRecurrentBlock``'s state dict from this mixer."""
    return renamed(mixer.state_dict(), HF_NAMES)
