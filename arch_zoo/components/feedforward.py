"""Position-wise feed-forward networks: plain two-layer MLPs and gated (GLU-family) variants."""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import NoOptions, Registry

FEEDFORWARD = Registry("feedforward", "feed-forward")


@dataclass(frozen=True)
class FFNContext:
    d_model: int
    d_ff: int
    bias: bool
    dropout: float


class MLP(nn.Module):
    """act(x W1 + b1) W2 + b2."""

    @staticmethod
    def act(x: Tensor) -> Tensor:
        raise TypeError("MLP is abstract; use a registered subclass")

    def __init__(self, options, ctx: FFNContext):
        super().__init__()
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=ctx.bias)
        self.dropout = nn.Dropout(ctx.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.up(x))))


class GatedMLP(nn.Module):
    """(act(x W) * x V) W2 (Shazeer 2020): ``gate`` is W, ``up`` is V, as in Hugging Face's Llama.

    Two projections rather than one fused [W; V]: splitting a fused output costs a concatenation of
    the two gradient halves in backward, which measured slower on CPU than two matmuls."""

    @staticmethod
    def act(x: Tensor) -> Tensor:
        raise TypeError("GatedMLP is abstract; use a registered subclass")

    def __init__(self, options, ctx: FFNContext):
        super().__init__()
        self.gate = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.down = nn.Linear(ctx.d_ff, ctx.d_model, bias=ctx.bias)
        self.dropout = nn.Dropout(ctx.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.gate(x)) * self.up(x)))


@FEEDFORWARD.register("relu", NoOptions, "ReLU MLP, the original max(0, xW1+b1)W2+b2")
class ReluMLP(MLP):
    act = staticmethod(F.relu)


@FEEDFORWARD.register("gelu", NoOptions, "GELU MLP (exact erf form)")
class GeluMLP(MLP):
    act = staticmethod(F.gelu)


@FEEDFORWARD.register("gelu_tanh", NoOptions, "GELU MLP, tanh approximation (GPT-2)")
class GeluTanhMLP(MLP):
    @staticmethod
    def act(x: Tensor) -> Tensor:
        return F.gelu(x, approximate="tanh")


@FEEDFORWARD.register("swiglu", NoOptions, "gated MLP with SiLU gate (LLaMA)")
class SwiGLU(GatedMLP):
    act = staticmethod(F.silu)


@FEEDFORWARD.register("geglu", NoOptions, "gated MLP with GELU gate")
class GeGLU(GatedMLP):
    act = staticmethod(F.gelu)


@FEEDFORWARD.register("reglu", NoOptions, "gated MLP with ReLU gate")
class ReGLU(GatedMLP):
    act = staticmethod(F.relu)
