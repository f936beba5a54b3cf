"""Position-wise feed-forward networks: plain two-layer MLPs, gated (GLU-family) variants, and
``none`` (no feed-forward sublayer: attention-only models, as mechanistic studies use)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..errors import ConfigError
from ..registry import ComponentSpec, NoOptions, Registry
from .init import mark_residual_out

FEEDFORWARD = Registry("feedforward", "feed-forward")


def is_gated(spec: ComponentSpec) -> bool:
    """Whether a feed-forward has three d_model x d_ff matrices (sets d_ff's default); a component whose
    answer depends on its options (an MoE, by its expert) says so through ``gated_for(options)``."""
    factory = FEEDFORWARD.get(spec.name).factory
    return factory.gated_for(spec.options) if hasattr(factory, "gated_for") else factory.gated


def has_sublayer(spec: Union[ComponentSpec, str]) -> bool:
    """Whether the choice (a spec or a name) puts a sublayer in the layer at all; ``none`` does not, so
    the layer builds no slot for it: no residual branch, no norm, no parameters, no FLOPs."""
    return getattr(FEEDFORWARD.get(getattr(spec, "name", spec)).factory, "sublayer", True)


@dataclass(frozen=True)
class FFNContext:
    d_model: int
    d_ff: int
    bias: bool
    dropout: float


class MLP(nn.Module):
    """act(x W1 + b1) W2 + b2."""

    gated = False  # two matrices; the default d_ff follows from this (validation.default_d_ff)

    @staticmethod
    def act(x: Tensor) -> Tensor:
        raise TypeError("MLP is abstract; use a registered subclass")

    def __init__(self, options, ctx: FFNContext):
        super().__init__()
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.down = mark_residual_out(nn.Linear(ctx.d_ff, ctx.d_model, bias=ctx.bias))
        self.dropout = nn.Dropout(ctx.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(self.act(self.up(x))))


class _GatedProduct(torch.autograd.Function):
    """act(g) * u with a hand-written backward that saves only g and u (autograd would also keep
    act(g)) and writes results into buffers it already owns. Each large temporary it avoids is a
    fresh allocation, which on CPU means page faults as well as memory traffic: measured 2% of a
    whole Llama-style training step (benchmarks/train_step.py shape). Gradients are bit-identical
    to autograd's."""

    @staticmethod
    def forward(ctx, g: Tensor, u: Tensor, act: Callable, act_backward: Callable) -> Tensor:
        ctx.save_for_backward(g, u)
        ctx.act, ctx.act_backward = act, act_backward
        return act(g).mul_(u)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        g, u = ctx.saved_tensors
        grad_u = ctx.act(g).mul_(grad) if ctx.needs_input_grad[1] else None
        grad_g = ctx.act_backward(grad * u, g) if ctx.needs_input_grad[0] else None
        return grad_g, grad_u, None, None


class GatedMLP(nn.Module):
    """(act(x W) * x V) W2 (Shazeer 2020): ``gate`` is W, ``up`` is V, as in Hugging Face's Llama.

    Two projections rather than one fused [W; V]: splitting a fused output costs a concatenation of
    the two gradient halves in backward, which measured slower on CPU than two matmuls.
    ``act_backward(buffer, g)`` is act'(g) * buffer, written over ``buffer`` (aten's own kernel)."""

    gated = True  # three d_model x d_ff matrices

    @staticmethod
    def act(x: Tensor) -> Tensor:
        raise TypeError("GatedMLP is abstract; use a registered subclass")

    @staticmethod
    def act_backward(buffer: Tensor, g: Tensor) -> Tensor:
        raise TypeError("GatedMLP is abstract; use a registered subclass")

    def __init__(self, options, ctx: FFNContext):
        super().__init__()
        self.gate = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.down = mark_residual_out(nn.Linear(ctx.d_ff, ctx.d_model, bias=ctx.bias))
        self.dropout = nn.Dropout(ctx.dropout)

    def forward(self, x: Tensor) -> Tensor:
        hidden = _GatedProduct.apply(self.gate(x), self.up(x), self.act, self.act_backward)
        return self.down(self.dropout(hidden))


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


    @staticmethod
    def act_backward(buffer: Tensor, g: Tensor) -> Tensor:
        return torch.ops.aten.silu_backward.grad_input(buffer, g, grad_input=buffer)


@dataclass(frozen=True)
class ScaledSwiGLUOptions:
    gate_multiplier: float = 1.0  # silu(gate_multiplier * x W) * x V
    out_multiplier: float = 1.0  # the down projection's output times this


@FEEDFORWARD.register("scaled_swiglu", ScaledSwiGLUOptions, "swiglu with muP multipliers held apart from the "
                      "weights (Falcon-H1's mlp_multipliers): on the gate's input and on the output")
class ScaledSwiGLU(SwiGLU):
    """Its own entry, not options of ``swiglu``: a plain swiglu stays a bare name wherever one is
    written (MoE experts, the families that read it as SiLU)."""

    example_options = {"gate_multiplier": 0.5, "out_multiplier": 2.0}

    def __init__(self, options: ScaledSwiGLUOptions, ctx: FFNContext):
        super().__init__(options, ctx)
        self.gate_multiplier, self.out_multiplier = options.gate_multiplier, options.out_multiplier

    def forward(self, x: Tensor) -> Tensor:
        g = self.gate(x) * self.gate_multiplier
        return self.down(self.dropout(_GatedProduct.apply(g, self.up(x), self.act, self.act_backward))) * self.out_multiplier


@FEEDFORWARD.register("geglu", NoOptions, "gated MLP with GELU gate")
class GeGLU(GatedMLP):
    act = staticmethod(F.gelu)

    @staticmethod
    def act_backward(buffer: Tensor, g: Tensor) -> Tensor:
        return torch.ops.aten.gelu_backward.grad_input(buffer, g, grad_input=buffer)


@FEEDFORWARD.register("geglu_tanh", NoOptions, "gated MLP with tanh-approximated GELU gate (T5 v1.1, Gemma)")
class GeGLUTanh(GatedMLP):
    @staticmethod
    def act(x: Tensor) -> Tensor:
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def act_backward(buffer: Tensor, g: Tensor) -> Tensor:
        return torch.ops.aten.gelu_backward.grad_input(buffer, g, approximate="tanh", grad_input=buffer)


@FEEDFORWARD.register("reglu", NoOptions, "gated MLP with ReLU gate")
class ReGLU(GatedMLP):
    act = staticmethod(F.relu)

    @staticmethod
    def act_backward(buffer: Tensor, g: Tensor) -> Tensor:
        return torch.ops.aten.threshold_backward.grad_input(buffer, g, 0, grad_input=buffer)


@dataclass(frozen=True)
class ClampedSwiGLUOptions:
    alpha: float = 1.702  # the gate's activation: g * sigmoid(alpha * g), a sigmoid-approximated GELU
    limit: float = 7.0  # the gate is clamped from above at limit, the up projection to [-limit, limit]

    def __post_init__(self):
        if self.limit <= 0:
            raise ConfigError("limit", f"must be positive, got {self.limit}")


@FEEDFORWARD.register("clamped_swiglu", ClampedSwiGLUOptions, "gpt-oss's gated MLP: g * sigmoid(alpha g) * (u + 1), "
                                                              "its gate g clamped above and up u both ways at limit")
class ClampedSwiGLU(nn.Module):
    """The clamp bounds what one expert can add to the residual (gpt-oss's experts); the up
    projection's + 1 lets a zero-initialised up pass the gate's activation through. Not a GatedMLP,
    whose fused backward assumes act(g) * u: autograd differentiates this one (zero where a clamp cuts)."""

    gated = True  # three d_model x d_ff matrices, as GatedMLP's
    example_options = {"limit": 1.0}  # acting on the grid's randomised weights, whose g and u reach past 1

    def __init__(self, options: ClampedSwiGLUOptions, ctx: FFNContext):
        super().__init__()
        self.gate = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.up = nn.Linear(ctx.d_model, ctx.d_ff, bias=ctx.bias)
        self.down = mark_residual_out(nn.Linear(ctx.d_ff, ctx.d_model, bias=ctx.bias))
        self.dropout = nn.Dropout(ctx.dropout)
        self.alpha, self.limit = options.alpha, options.limit

    def forward(self, x: Tensor) -> Tensor:
        g = self.gate(x).clamp(max=self.limit)
        u = self.up(x).clamp(-self.limit, self.limit)
        return self.down(self.dropout(g * torch.sigmoid(self.alpha * g) * (u + 1)))


@FEEDFORWARD.register("none", NoOptions, "no feed-forward sublayer: attention-only layers (no parameters, "
                                         "no residual branch or norm for it)")
class NoFeedForward(nn.Module):
    """Declares ``sublayer = False``: the layer asks ``has_sublayer`` and builds no slot, so a
    placement never sees a branch for it. Called directly it adds nothing to the residual."""

    sublayer = False
    gated = False  # d_ff's default is computed but unused

    def __init__(self, options, ctx: FFNContext):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return torch.zeros_like(x)
