"""Gated DeltaNet (Yang et al. 2025), in the form Qwen3-Next uses: q, k, v from a short causal
convolution (silu), q and k L2-normalised per head (q scaled by 1/sqrt(head_dim)), a per-head write
strength b = sigmoid(x W_b) and decay g = -exp(A_log) softplus(x W_a + dt_bias); the gated delta rule
(``scan.delta_scan``: chunked for training and prefill, ``delta_step`` per position for decoding); then
a gated RMSNorm per value head, RMSNorm(o) * w * silu(x W_z), and the output projection.

Query/key heads may be fewer than value heads (each shared by n_v_heads / n_heads value heads). A
padded position writes nothing and decays nothing (b = 0, g = 0), so the state skips it."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import GatedRMSNorm, ShortConv
from .recurrent import RecurrentMixer, check_kernel, initialised, keep_mask, read, wide, write
from .scan import delta_scan, delta_step


@dataclass(frozen=True)
class GatedDeltaNetOptions:
    n_heads: Optional[int] = None  # query/key heads; null: model.n_heads
    n_v_heads: Optional[int] = None  # value heads, a multiple of n_heads; null: n_heads
    head_dim: Optional[int] = None  # query/key width per head; null: model head_dim
    v_head_dim: Optional[int] = None  # value width per head; null: head_dim
    conv_size: int = 4  # taps of the short causal convolution
    chunk_size: int = 64  # positions per chunk of the parallel form (the function does not change)
    norm_eps: float = 1e-6
    # q and k to unit length: clamp, q / max(|q|, 1e-6) (torch's F.normalize); rsqrt, q * rsqrt(|q|^2 + 1e-6)
    # (Hugging Face's Qwen3-Next, fla): the same but for vectors near zero (padding, a dead head)
    l2norm: Literal["clamp", "rsqrt"] = "clamp"
    kernel: Literal["torch", "fla"] = "torch"  # fla: flash-linear-attention's GPU kernels (optional package)

    def __post_init__(self):
        check_kernel(self.kernel, "fla", "flash-linear-attention")
        for name in ("n_heads", "n_v_heads", "head_dim", "v_head_dim", "conv_size", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.n_heads and self.n_v_heads and self.n_v_heads % self.n_heads:
            raise ValueError(f"n_v_heads ({self.n_v_heads}) must be a multiple of n_heads ({self.n_heads})")

    def resolved(self, cfg) -> "GatedDeltaNetOptions":
        """These options with each null filled in from the layer's ModelConfig."""
        h, dk = self.n_heads or cfg.n_heads, self.head_dim or cfg.dim_per_head
        return dataclasses.replace(self, n_heads=h, n_v_heads=self.n_v_heads or h, head_dim=dk,
                                   v_head_dim=self.v_head_dim or dk)


@MIXERS.register("gated_deltanet", GatedDeltaNetOptions, "Gated DeltaNet (Yang et al. 2025; Qwen3-Next's linear "
                 "layers): short conv, L2-normed q/k, gated delta rule, gated RMSNorm; causal only")
class GatedDeltaNet(RecurrentMixer):
    example_options = {"conv_size": 3, "chunk_size": 4}  # chunks shorter than the grid's sequences
    reads_model_heads = False  # its options hold its heads (``resolved``)

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    def __init__(self, options: GatedDeltaNetOptions, cfg, ctx=None):
        super().__init__()
        resolved = options.resolved(cfg)
        self.h, self.hv, self.dk, self.dv = resolved.n_heads, resolved.n_v_heads, resolved.head_dim, resolved.v_head_dim
        if self.hv % self.h:
            raise ValueError(f"n_v_heads ({self.hv}) must be a multiple of n_heads ({self.h})")
        self.chunk, self.l2norm = options.chunk_size, options.l2norm
        # Gated DeltaProduct's delta steps per token (its options add n_householder); one here
        n = self.n = getattr(options, "n_householder", 1)
        key, value = self.h * self.dk, self.hv * self.dv
        self.in_proj = nn.Linear(cfg.d_model, (1 + n) * key + (n + 1) * value, bias=cfg.bias)  # q, n k, n v, z
        self.ba_proj = nn.Linear(cfg.d_model, (n + 1) * self.hv, bias=cfg.bias)  # n b, a
        self.conv = ShortConv((1 + n) * key + n * value, options.conv_size, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = initialised(self.hv, lambda: torch.empty(self.hv, device="cpu").uniform_(1e-4, 16).log())
        self.norm = GatedRMSNorm(self.dv, self.dv, options.norm_eps, gate_first=False)
        self.out = mark_residual_out(nn.Linear(value, cfg.d_model, bias=cfg.bias))

    def state_shapes(self, batch):
        return {"ssm": (batch, self.hv, self.dk, self.dv), "conv": (batch, self.conv.conv.in_channels, self.conv.size - 1)}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        key, value, n = self.h * self.dk, self.hv * self.dv, self.n
        qkv, z = self.in_proj(x).split(((1 + n) * key + n * value, value), dim=-1)
        keep = keep_mask(inputs, x)
        qkv, prefix = self.conv(qkv, keep, read(state, "conv"))
        write(state, "conv", prefix)
        q, k, v = qkv.split((key, n * key, n * value), dim=-1)
        q = q.unflatten(-1, (self.h, self.dk)).transpose(1, 2)
        k, v = _steps(k, n, self.h), _steps(v, n, self.hv)  # (B, H, L n, D): step j of token t at t n + j
        q, k = _last_step(self.unit(q) / math.sqrt(self.dk), n), self.unit(k)
        if self.hv != self.h:
            q, k = (t.repeat_interleave(self.hv // self.h, dim=1) for t in (q, k))
        b, a = wide(self.ba_proj(x)).split((n * self.hv, self.hv), dim=-1)
        beta, g = b.sigmoid(), -wide(self.A_log).exp() * F.softplus(a + wide(self.dt_bias))
        if keep is not None:
            beta, g = beta * wide(keep), g * wide(keep)
        beta = _steps(beta, n, self.hv).squeeze(-1)  # (B, Hv, L n)
        g = F.pad(g.transpose(1, 2).unsqueeze(-1), (0, n - 1)).flatten(-2)  # decays before a token's first step
        S = read(state, "ssm")
        scan = delta_step if state is not None and x.shape[1] == 1 else delta_scan
        o, S = scan(wide(q), wide(k), wide(v), g, beta, None if S is None else wide(S),
                    **({} if scan is delta_step else {"chunk": self.chunk}))
        write(state, "ssm", S)
        o = o[..., n - 1::n, :]  # each token reads the state after its last step
        o = self.norm(o.transpose(1, 2).to(x.dtype), z.unflatten(-1, (self.hv, self.dv)))
        return self.out(o.flatten(2))

    def unit(self, x: Tensor) -> Tensor:
        if self.l2norm == "rsqrt":
            return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)
        return F.normalize(x, dim=-1, eps=1e-6)

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self._per_token()

    def step_mixing_flops(self, context: int) -> float:
        return self._per_token()

    def _per_token(self) -> float:
        """The short conv, and per value head what the recurrent form does to its Dk x Dv state: the
        decay (a multiply per entry), then k^T S, the rank-one write and q^T S (a multiply-add per entry
        each, 2 FLOPs): 7 Dk Dv; each further delta step of a token (Gated DeltaProduct) reads and writes
        again: 4 Dk Dv."""
        return self.conv.flops() + (7 + 4 * (self.n - 1)) * self.hv * self.dk * self.dv


def _steps(t: Tensor, n: int, heads: int) -> Tensor:
    """(B, L, n heads D), step-major, -> (B, heads, L n, D), step j of token t at position t n + j."""
    return t.unflatten(-1, (n, heads, -1)).permute(0, 3, 1, 2, 4).flatten(2, 3)


def _last_step(q: Tensor, n: int) -> Tensor:
    """(B, H, L, D) -> (B, H, L n, D): each token's query at its last step, zeros before (read nowhere)."""
    return q if n == 1 else F.pad(q.unsqueeze(-2), (0, 0, n - 1, 0)).flatten(2, 3)
