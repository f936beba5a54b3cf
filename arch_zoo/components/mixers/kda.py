"""Kimi Delta Attention (Kimi Linear, Moonshot AI 2025): Gated DeltaNet with a decay per key channel
rather than per head. q, k, v from a short causal convolution (silu), q and k L2-normalised per head (q
scaled by 1/sqrt(head_dim)), a write strength b = sigmoid(x W_b) per head and a fine-grained log-decay
g = -exp(A_log) softplus(x W_fa W_fb + dt_bias) per key channel (a low-rank projection of rank
head_dim); per head

    S_t = (I - b_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + b_t k_t v_t^T,      o_t = S_t^T q_t

(``dplr``: chunked for training and prefill, one position at a time for decoding), then a gated RMSNorm
per head, RMSNorm(o) * w * sigmoid(x W_ga W_gb), and the output projection. It equals transformers'
``KimiLinearDeltaAttention`` (``models/kimi_linear/modeling_kimi_linear.py``) on the weights
``from_hf_layer`` maps. A padded position writes nothing and decays nothing (b = 0, g = 0), so the
state skips it."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, Literal, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import GatedRMSNorm, ShortConv
from .dplr import dplr_scan, dplr_step
from .recurrent import RecurrentMixer, initialised, keep_mask, read, renamed, wide, write

HF_NAMES = {"conv1d": "conv.conv", "forget_gate": "", "forget_gate.f_a_proj": "f_a_proj",
            "forget_gate.f_b_proj": "f_b_proj", "o_proj": "out"}


@dataclass(frozen=True)
class KDAOptions:
    n_heads: Optional[int] = None  # null: model.n_heads
    head_dim: Optional[int] = None  # q, k and v width per head; null: model head_dim
    conv_size: int = 4  # taps of the short causal convolution
    chunk_size: int = 16  # positions per chunk of the parallel form (the function does not change)
    norm_eps: float = 1e-5  # the output norm's (Kimi Linear's rms_norm_eps)
    # q and k to unit length: rsqrt, q / sqrt(|q|^2 + 1e-6) (transformers' Kimi Linear, fla); clamp, q / max(|q|, 1e-6)
    l2norm: Literal["rsqrt", "clamp"] = "rsqrt"

    def __post_init__(self):
        for name in ("n_heads", "head_dim", "conv_size", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")

    def resolved(self, cfg) -> "KDAOptions":
        return dataclasses.replace(self, n_heads=self.n_heads or cfg.n_heads,
                                   head_dim=self.head_dim or cfg.dim_per_head)


def unit(x: Tensor, how: str) -> Tensor:
    """x / |x| per head, the two ways the delta-rule mixers' references write it (see ``l2norm``)."""
    if how == "rsqrt":
        return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)
    return F.normalize(x, dim=-1, eps=1e-6)


@MIXERS.register("kda", KDAOptions, "Kimi Delta Attention (Kimi Linear's linear layers): Gated DeltaNet with a "
                 "decay per key channel, a sigmoid-gated RMSNorm; causal only")
class KimiDeltaAttention(RecurrentMixer):
    example_options = {"conv_size": 3, "chunk_size": 4}
    reads_model_heads = False

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    def __init__(self, options: KDAOptions, cfg, ctx=None):
        super().__init__()
        resolved = options.resolved(cfg)
        self.h, self.dk = resolved.n_heads, resolved.head_dim
        self.chunk, self.l2norm = options.chunk_size, options.l2norm
        width, d = self.h * self.dk, cfg.d_model
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, width, bias=cfg.bias) for _ in range(3))
        self.conv = ShortConv(3 * width, options.conv_size, bias=False)
        self.f_a_proj, self.f_b_proj = nn.Linear(d, self.dk, bias=False), nn.Linear(self.dk, width, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(width))
        self.A_log = initialised(self.h, lambda: torch.empty(self.h, device="cpu").uniform_(1, 16).log())
        self.b_proj = nn.Linear(d, self.h, bias=cfg.bias)
        self.g_a_proj, self.g_b_proj = nn.Linear(d, self.dk, bias=False), nn.Linear(self.dk, width, bias=False)
        self.o_norm = GatedRMSNorm(self.dk, self.dk, options.norm_eps, gate_first=False, gate=torch.sigmoid)
        self.out = mark_residual_out(nn.Linear(width, d, bias=cfg.bias))

    def state_shapes(self, batch):
        return {"ssm": (batch, self.h, self.dk, self.dk),
                "conv": (batch, self.conv.conv.in_channels, self.conv.size - 1)}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        keep = keep_mask(inputs, x)
        qkv = torch.cat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), dim=-1)
        qkv, prefix = self.conv(qkv, keep, read(state, "conv"))
        write(state, "conv", prefix)
        q, k, v = (wide(t).unflatten(-1, (self.h, self.dk)).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        q, k = unit(q, self.l2norm) / math.sqrt(self.dk), unit(k, self.l2norm)
        beta = wide(self.b_proj(x)).sigmoid()  # (B, L, H)
        g = F.softplus(wide(self.f_b_proj(self.f_a_proj(x))) + wide(self.dt_bias))
        g = -wide(self.A_log).exp().repeat_interleave(self.dk) * g  # (B, L, H * Dk)
        if keep is not None:
            beta, g = beta * wide(keep), g * wide(keep)
        beta = beta.transpose(1, 2).unsqueeze(-1)  # (B, H, L, 1)
        g = g.unflatten(-1, (self.h, self.dk)).transpose(1, 2)  # (B, H, L, Dk)
        S = read(state, "ssm")
        scan = dplr_step if state is not None and x.shape[1] == 1 else dplr_scan
        o, S = scan(q, beta * k, v, -beta * k, g.exp() * k, g, None if S is None else wide(S),
                    **({} if scan is dplr_step else {"chunk": self.chunk}))
        write(state, "ssm", S)
        gate = self.g_b_proj(self.g_a_proj(x)).unflatten(-1, (self.h, self.dk))
        return self.out(self.o_norm(o.transpose(1, 2).to(x.dtype), gate).flatten(2))

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self._per_token()

    def step_mixing_flops(self, context: int) -> float:
        return self._per_token()

    def _per_token(self) -> float:
        """The short conv, and per head what the recurrent form does to its Dk x Dk state: the decay (a
        multiply per entry), then the read k^T S, the rank-one write and q^T S (a multiply-add per entry
        each): 7 Dk^2."""
        return self.conv.flops() + 7 * self.h * self.dk * self.dk


def from_hf_layer(hf: nn.Module) -> Dict[str, Tensor]:
    """This mixer's state dict from a transformers ``KimiLinearDeltaAttention``."""
    state = renamed(hf.state_dict(), HF_NAMES)
    state["A_log"] = state["A_log"].flatten()
    return state


def to_hf_layer(mixer: KimiDeltaAttention) -> Dict[str, Tensor]:
    """A ``KimiLinearDeltaAttention``'s state dict from this mixer."""
    state = renamed(mixer.state_dict(), {v: k for k, v in HF_NAMES.items() if v})
    state["forget_gate.A_log"] = state.pop("A_log").view(1, 1, -1, 1)
    state["forget_gate.dt_bias"] = state.pop("dt_bias")
    return state
