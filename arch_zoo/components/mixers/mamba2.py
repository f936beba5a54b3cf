"""Mamba-2 (Dao & Gu 2024): the SSD layer. One projection gives the gate z, the conv input (x, B, C)
and a step size per head; x, B, C pass a short causal convolution (silu); per head h the state
(head_dim x state_size) follows h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T and the output is
y_t = h_t C_t + D x_t (``scan.decay_scan``, chunked for training and prefill; ``decay_step`` for
decoding), with dt = softplus(raw + dt_bias) and A = -exp(A_log); B and C are shared by the heads of
a group. Then RMSNorm(y * silu(z)) per group and the output projection (``norm``: Falcon-H1 may norm
before the gate, or not at all); ``projection_multipliers`` scale the input projection's z, x, B, C
and dt parts (Falcon-H1's muP vector, ``ssm_multipliers``).

A padded position has dt = 0: its state neither decays nor takes a write."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import GatedRMSNorm, ShortConv
from .recurrent import RecurrentMixer, check_kernel, initialised, keep_mask, read, wide, write
from .scan import decay_scan, decay_step


@dataclass(frozen=True)
class Mamba2Options:
    n_heads: Optional[int] = None  # SSM heads; null: model.n_heads
    head_dim: Optional[int] = None  # channels per head; null: 2 * d_model / n_heads (expand 2)
    state_size: int = 16  # N: the state's width per channel
    n_groups: int = 1  # groups of heads sharing B and C (and one norm group each)
    conv_size: int = 4  # taps of the short causal convolution
    conv_bias: bool = True
    chunk_size: int = 64  # positions per chunk of the parallel form (the function does not change)
    dt_min: float = 0.001  # the initial step sizes are log-uniform in [dt_min, dt_max]
    dt_max: float = 0.1
    norm_eps: float = 1e-5
    # where the gated RMSNorm's norm sits: after the gate (Mamba-2: RMSNorm(y * silu(z))), before it
    # (RMSNorm(y) * silu(z)), or none (y * silu(z), no norm weights; Falcon-H1's mamba_rms_norm: false)
    norm: Literal["after_gate", "before_gate", "none"] = "after_gate"
    projection_multipliers: Optional[Tuple[float, ...]] = None  # z, x, B, C, dt parts of in_proj scaled; null: 1
    kernel: Literal["torch", "mamba_ssm"] = "torch"  # mamba_ssm: the mamba-ssm package's GPU kernels (optional)

    def __post_init__(self):
        check_kernel(self.kernel, "mamba_ssm", "mamba-ssm")
        for name in ("n_heads", "head_dim", "state_size", "n_groups", "conv_size", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if not 0 < self.dt_min <= self.dt_max:
            raise ValueError(f"expected 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}")
        if self.projection_multipliers is not None and len(self.projection_multipliers) != 5:
            raise ValueError(f"projection_multipliers takes 5 (z, x, B, C, dt), got {len(self.projection_multipliers)}")

    def resolved(self, cfg) -> "Mamba2Options":
        """These options with each null filled in from the layer's ModelConfig."""
        h = self.n_heads or cfg.n_heads
        ones = self.projection_multipliers is not None and all(m == 1.0 for m in self.projection_multipliers)
        return dataclasses.replace(self, n_heads=h, head_dim=self.head_dim or max(1, 2 * cfg.d_model // h),
                                   projection_multipliers=None if ones else self.projection_multipliers)


@MIXERS.register("mamba2", Mamba2Options, "Mamba-2's SSD layer (Dao & Gu 2024): short conv, a scalar-decay state "
                 "space per head, gated RMSNorm; causal only")
class Mamba2(RecurrentMixer):
    example_options = {"state_size": 4, "conv_size": 3, "chunk_size": 4}
    reads_model_heads = False  # its options hold its heads (``resolved``)

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    def __init__(self, options: Mamba2Options, cfg, ctx=None):
        super().__init__()
        resolved = options.resolved(cfg)
        self.h, self.p = resolved.n_heads, resolved.head_dim
        self.n, self.groups, self.chunk = options.state_size, options.n_groups, options.chunk_size
        if self.h % self.groups:
            raise ValueError(f"n_heads ({self.h}) must be a multiple of n_groups ({self.groups})")
        inner = self.h * self.p
        self.conv_dim = inner + 2 * self.groups * self.n
        self.in_proj = nn.Linear(cfg.d_model, inner + self.conv_dim + self.h, bias=cfg.bias)  # z, xBC, dt
        self.conv = ShortConv(self.conv_dim, options.conv_size, bias=options.conv_bias)
        def dt_bias():  # softplus(dt_bias) = dt, dt log-uniform in [dt_min, dt_max]
            dt = torch.empty(self.h, device="cpu").uniform_(math.log(options.dt_min), math.log(options.dt_max)).exp()
            return dt + torch.log(-torch.expm1(-dt))

        self.dt_bias = initialised(self.h, dt_bias)
        self.A_log = initialised(self.h, lambda: torch.arange(1, self.h + 1, dtype=torch.float32, device="cpu").log())
        self.D = nn.Parameter(torch.ones(self.h))
        self.norm = None if options.norm == "none" else GatedRMSNorm(
            inner, inner // self.groups, options.norm_eps, gate_first=options.norm == "after_gate")
        self.multipliers = options.projection_multipliers
        self.out = mark_residual_out(nn.Linear(inner, cfg.d_model, bias=cfg.bias))

    def state_shapes(self, batch):
        return {"ssm": (batch, self.h, self.n, self.p), "conv": (batch, self.conv_dim, self.conv.size - 1)}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        inner = self.h * self.p
        projected = self.in_proj(x)
        if self.multipliers is not None:
            parts = (inner, inner, self.groups * self.n, self.groups * self.n, self.h)
            projected = projected * torch.cat([projected.new_full((n,), m) for n, m in zip(parts, self.multipliers)])
        z, xbc, dt = projected.split((inner, self.conv_dim, self.h), dim=-1)
        keep = keep_mask(inputs, x)
        xbc, prefix = self.conv(xbc, keep, read(state, "conv"))
        write(state, "conv", prefix)
        xs, B, C = xbc.split((inner, self.groups * self.n, self.groups * self.n), dim=-1)
        xs = wide(xs.unflatten(-1, (self.h, self.p)).transpose(1, 2))  # (B, H, L, P)
        B, C = (wide(t.unflatten(-1, (self.groups, self.n)).transpose(1, 2))
                .repeat_interleave(self.h // self.groups, dim=1) for t in (B, C))  # (B, H, L, N)
        dt = F.softplus(wide(dt) + wide(self.dt_bias))
        if keep is not None:
            dt = dt * wide(keep)
        dt = dt.transpose(1, 2)  # (B, H, L)
        g = dt * -wide(self.A_log).exp().unsqueeze(-1)
        S = read(state, "ssm")
        scan = decay_step if state is not None and x.shape[1] == 1 else decay_scan
        y, S = scan(C, B, xs * dt.unsqueeze(-1), g, None if S is None else wide(S),
                    **({} if scan is decay_step else {"chunk": self.chunk}))
        write(state, "ssm", S)
        y = y + wide(self.D)[:, None, None] * xs
        y = y.transpose(1, 2).flatten(2)
        y = (y * F.silu(wide(z))).to(x.dtype) if self.norm is None else self.norm(y.to(x.dtype), z)
        return self.out(y)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self._per_token()

    def step_mixing_flops(self, context: int) -> float:
        return self._per_token()

    def _per_token(self) -> float:
        """The short conv, and per head what the recurrent form does to its N x P state: the decay (a
        multiply per entry), the write dt x B^T and the read C^T h (a multiply-add per entry each):
        5 N P; then D x (a multiply-add per channel)."""
        return self.conv.flops() + 5 * self.h * self.n * self.p + 2 * self.h * self.p
