"""RWKV-7 "Goose" time mixing (Peng et al. 2025): a generalised delta rule with a vector-valued decay
and an in-context learning rate. Per token, from the token-shifted inputs x_c = x + mu_c (x_{t-1} - x)
(one learned mu per branch c in r, w, k, v, a, g):

    r, k, v = x_r W_r, x_k W_k, x_v W_v
    w = exp(-e^-0.5 sigmoid(w_0 + tanh(x_w A_w) B_w))      decay per key channel, in (0.545, 1)
    a = sigmoid(a_0 + x_a A_a B_a)                          in-context learning rate per key channel
    g = sigmoid(x_g A_g) B_g                                output gate (low-rank, as the LoRAs above)
    kappa = normalise(k * xi) per head,   k~ = k * (1 + (a - 1) alpha)
    wkv_t = wkv_{t-1} (diag(w_t) - kappa^T (a * kappa)) + v^T k~,      o_t = wkv_t r_t

then a group norm per head, plus the bonus ((r * k~ * rho) summed per head) v, times g, and the output
projection. The recurrence runs as ``dplr`` (S = wkv^T: a = -(a * kappa), b = kappa): chunked for
training and prefill, one position at a time for decoding. A padded position decays nothing, removes
nothing and writes nothing, and enters the token shift as zeros (as before a sequence's start).

Simplifications against the paper's layer: no value residual (the paper mixes each layer's v with the
first layer's through a fourth low-rank gate; a mixer here sees only its own layer), and the
parameters start from plain initial values rather than the paper's layer-dependent schedule."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .dplr import dplr_scan, dplr_step
from .recurrent import RecurrentMixer, keep_mask, read, wide, write

BRANCHES = ("r", "w", "k", "v", "a", "g")
LOG_DECAY_FLOOR = -math.exp(-0.5)  # the largest log-decay's magnitude: w >= exp(-e^-0.5)


@dataclass(frozen=True)
class RWKV7Options:
    n_heads: Optional[int] = None  # null: model.n_heads
    head_dim: Optional[int] = None  # key and value width per head; null: model head_dim
    decay_rank: int = 16  # ranks of the low-rank projections of w, a and g
    icl_rank: int = 16
    gate_rank: int = 32
    chunk_size: int = 16  # positions per chunk of the parallel form (the function does not change)
    norm_eps: Optional[float] = None  # the group norm's; null: head_dim x 1e-5 (the paper's)

    def __post_init__(self):
        for name in ("n_heads", "head_dim", "decay_rank", "icl_rank", "gate_rank", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")

    def resolved(self, cfg) -> "RWKV7Options":
        dk = self.head_dim or cfg.dim_per_head
        return dataclasses.replace(self, n_heads=self.n_heads or cfg.n_heads, head_dim=dk,
                                   norm_eps=dk * 1e-5 if self.norm_eps is None else self.norm_eps)


def _lora(d: int, rank: int, out: int, bias: bool) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, rank, bias=False), nn.Linear(rank, out, bias=bias))


@MIXERS.register("rwkv7", RWKV7Options, "RWKV-7 time mixing (Peng et al. 2025): token shift, generalised delta rule "
                 "with vector decay and in-context learning rate; causal only")
class RWKV7(RecurrentMixer):
    example_options = {"chunk_size": 4, "decay_rank": 4, "icl_rank": 4, "gate_rank": 4}
    reads_model_heads = False

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    def __init__(self, options: RWKV7Options, cfg, ctx=None):
        super().__init__()
        o = options.resolved(cfg)
        self.h, self.dk, self.chunk, self.eps = o.n_heads, o.head_dim, o.chunk_size, o.norm_eps
        d, width = cfg.d_model, o.n_heads * o.head_dim
        self.mu = nn.Parameter(torch.full((len(BRANCHES), d), 0.5))  # the token shift's mix per branch
        self.r_proj, self.k_proj, self.v_proj = (nn.Linear(d, width, bias=False) for _ in range(3))
        self.w_lora = _lora(d, o.decay_rank, width, bias=True)  # its bias is w_0
        self.a_lora = _lora(d, o.icl_rank, width, bias=True)  # a_0
        self.g_lora = _lora(d, o.gate_rank, width, bias=False)
        self.k_k = nn.Parameter(torch.full((width,), 0.85))  # xi: the removal key's scale
        self.k_a = nn.Parameter(torch.ones(width))  # alpha: how far a scales the written key
        self.r_k = nn.Parameter(torch.zeros(self.h, self.dk))  # rho: the bonus's weights
        self.ln_x = nn.GroupNorm(self.h, width, eps=self.eps)
        self.out = mark_residual_out(nn.Linear(width, d, bias=False))

    def state_shapes(self, batch):
        return {"wkv": (batch, self.h, self.dk, self.dk), "shift": (batch, 1, self.mu.shape[-1])}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        keep = keep_mask(inputs, x)
        if keep is not None:
            x = x * keep
        past = read(state, "shift")
        past = x.new_zeros(x.shape[0], 1, x.shape[-1]) if past is None else past.to(x.dtype)
        shifted = torch.cat((past, x[:, :-1]), dim=1)
        write(state, "shift", x[:, -1:])  # after reading: a static state is written in place
        xr, xw, xk, xv, xa, xg = (x + mu * (shifted - x) for mu in self.mu)
        heads = lambda t: wide(t).unflatten(-1, (self.h, self.dk)).transpose(1, 2)  # noqa: E731
        r, k, v = heads(self.r_proj(xr)), heads(self.k_proj(xk)), heads(self.v_proj(xv))
        w_in = self.w_lora[1](torch.tanh(self.w_lora[0](xw)))
        log_w = heads(LOG_DECAY_FLOOR * torch.sigmoid(w_in))
        a = heads(torch.sigmoid(self.a_lora(xa)))
        per_head = lambda p: wide(p).view(self.h, 1, self.dk)  # noqa: E731  (a vector over all heads' channels)
        kappa = F.normalize(k * per_head(self.k_k), dim=-1, eps=1e-12)
        k = k * (1 + (a - 1) * per_head(self.k_a))
        if keep is not None:
            k, a, log_w = (t * heads(keep.expand(-1, -1, self.h * self.dk)) for t in (k, a, log_w))
        S = read(state, "wkv")
        scan = dplr_step if state is not None and x.shape[1] == 1 else dplr_scan
        o, S = scan(r, k, v, -a * kappa, kappa, log_w, None if S is None else wide(S),
                    **({} if scan is dplr_step else {"chunk": self.chunk, "decay_floor": LOG_DECAY_FLOOR}))
        write(state, "wkv", S)
        o = self.ln_x(o.transpose(1, 2).flatten(0, 1).flatten(1).to(x.dtype)).unflatten(0, x.shape[:2])
        bonus = ((r * k * wide(self.r_k).unsqueeze(1)).sum(-1, keepdim=True) * v).transpose(1, 2).flatten(2)
        gate = self.g_lora[1](torch.sigmoid(self.g_lora[0](xg)))
        return self.out(((o + bonus) * gate).to(x.dtype))

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self._per_token()

    def step_mixing_flops(self, context: int) -> float:
        return self._per_token()

    def _per_token(self) -> float:
        """Per head what the recurrent form does to its Dk x Dk state: the read kappa^T S, the decay, the
        rank-one removal and the write (a multiply-add per entry each, the decay a multiply), the read
        r^T S: 9 Dk^2; and the token shift's six mixes (2 d each)."""
        return 9 * self.h * self.dk * self.dk + 2 * len(BRANCHES) * self.mu.shape[-1]
