"""xLSTM's mLSTM layer in the form xLSTM-7B uses (Beck et al. 2025): per head a matrix memory C, a
normaliser n and a stabiliser m,

    i_t, f_t = soft-capped gate pre-activations (one each per head),  m_t = max(log sigmoid(f_t) + m_{t-1}, i_t)
    C_t = exp(log sigmoid(f_t) + m_{t-1} - m_t) C_{t-1} + exp(i_t - m_t) k_t v_t^T   (n_t: the same with k_t)
    h_t = C_t^T q_t / (max(|n_t . q_t|, exp(-m_t)) + eps),   q scaled by 1/sqrt(head width), m_0 = 0

then a layer norm per head, times sigmoid(x W_o), and the output projection. It equals transformers'
``xLSTMLayer`` (``models/xlstm/modeling_xlstm.py``, ``weight_mode: single``) run by its recurrent
kernel (``mlstm_recurrent_sequence_native``: the stabiliser exactly as above; its chunkwise kernel
stabilises per chunk, which moves eps's share of the denominator) on the weights ``from_hf_layer`` maps.

Training and prefill run it chunked (``mlstm_scan``): m_t = F_t + max(m_0, cummax_s(i_s - F_s)) with F
the cumulative log forget gate is a parallel max, so every chunk computes the recurrent form's m and
its weights exp(F_t - F_s + i_s - m_t) <= 1 exactly. A padded position has i = -inf and f = 1, so C,
n and m stay as they were."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .recurrent import RecurrentMixer, keep_mask, read, renamed, wide, write
from .scan import _chunks

HF_NAMES = {"out": "out_proj"}


@dataclass(frozen=True)
class MLSTMOptions:
    n_heads: Optional[int] = None  # null: model.n_heads
    qk_dim_factor: float = 0.5  # q and k widths (all heads) = int(d_model x this)
    v_dim_factor: float = 1.0  # v width (all heads) = int(d_model x this)
    gate_soft_cap: Optional[float] = 15.0  # the gates' pre-activations to cap tanh(x / cap); null: uncapped
    bias: Optional[bool] = None  # biases of q, k, v, the output gate, the norm and the projection; null: model.bias
    norm_eps: float = 1e-6
    eps: float = 1e-6  # added to the denominator of h
    chunk_size: int = 64  # positions per chunk of the parallel form (the function does not change)

    def __post_init__(self):
        for name in ("n_heads", "chunk_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.qk_dim_factor <= 0 or self.v_dim_factor <= 0:
            raise ValueError("qk_dim_factor and v_dim_factor must be positive")

    def resolved(self, cfg) -> "MLSTMOptions":
        """These options with each null filled in from the layer's ModelConfig."""
        return dataclasses.replace(self, n_heads=self.n_heads or cfg.n_heads,
                                   bias=cfg.bias if self.bias is None else self.bias)

    def widths(self, cfg) -> Tuple[int, int]:
        return int(cfg.d_model * self.qk_dim_factor), int(cfg.d_model * self.v_dim_factor)


@MIXERS.register("mlstm", MLSTMOptions, "xLSTM's mLSTM layer (Beck et al. 2024/2025; xLSTM-7B): a matrix memory per "
                 "head with exponential input and sigmoid forget gates, stabilised; causal only")
class MLSTM(RecurrentMixer):
    example_options = {"chunk_size": 4}

    @classmethod
    def resolved_options(cls, options, cfg):
        return options.resolved(cfg)

    @classmethod
    def check(cls, options, cfg, key):
        h = options.resolved(cfg).n_heads
        for name, width in zip(("qk_dim_factor", "v_dim_factor"), options.widths(cfg)):
            if width < h or width % h:
                raise ConfigError(f"{key}.mixer.{name}", f"gives a width of {width}, which n_heads ({h}) must divide")

    def __init__(self, options: MLSTMOptions, cfg, ctx=None):
        super().__init__()
        resolved = options.resolved(cfg)
        self.h, bias = resolved.n_heads, resolved.bias
        qk, v = options.widths(cfg)
        if qk % self.h or v % self.h:
            raise ValueError(f"q/k width {qk} and v width {v} must be multiples of n_heads ({self.h})")
        self.dk, self.dv = qk // self.h, v // self.h
        self.cap, self.eps, self.norm_eps = options.gate_soft_cap, options.eps, options.norm_eps
        self.chunk = options.chunk_size
        d = cfg.d_model
        self.q, self.k = nn.Linear(d, qk, bias=bias), nn.Linear(d, qk, bias=bias)
        self.v, self.ogate_preact = nn.Linear(d, v, bias=bias), nn.Linear(d, v, bias=bias)
        self.igate_preact, self.fgate_preact = nn.Linear(d, self.h), nn.Linear(d, self.h)
        self.multihead_norm = nn.Module()
        self.multihead_norm.weight = nn.Parameter(torch.ones(v))
        self.multihead_norm.bias = nn.Parameter(torch.zeros(v)) if bias else None
        self.out = mark_residual_out(nn.Linear(v, d, bias=bias))

    def state_shapes(self, batch):
        return {"C": (batch, self.h, self.dk, self.dv), "n": (batch, self.h, self.dk), "m": (batch, self.h, 1)}

    def capped(self, x: Tensor) -> Tensor:
        return x if self.cap is None else self.cap * torch.tanh(x / self.cap)

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        q, k, v = (wide(p(x)).unflatten(-1, (self.h, -1)).transpose(1, 2) for p in (self.q, self.k, self.v))
        i, f = (wide(self.capped(p(x))).transpose(1, 2) for p in (self.igate_preact, self.fgate_preact))  # (B, H, L)
        f = F.logsigmoid(f)
        keep = keep_mask(inputs, x)
        if keep is not None:
            real = keep[..., 0].unsqueeze(1).bool()
            i, f = i.masked_fill(~real, float("-inf")), f * real
        held = [read(state, n) for n in ("C", "n", "m")]
        held = None if held[0] is None else [wide(t) for t in held]
        h, (C, n, m) = mlstm_scan(q / math.sqrt(self.dk), k, v, i, f, held, self.chunk, self.eps)
        for name, t in zip(("C", "n", "m"), (C, n, m)):
            write(state, name, t)
        h = F.layer_norm(h.transpose(1, 2), (self.dv,), eps=self.norm_eps).flatten(2)  # per head
        norm = self.multihead_norm
        h = h * wide(norm.weight) + (0 if norm.bias is None else wide(norm.bias))
        return self.out((torch.sigmoid(wide(self.ogate_preact(x))) * h).to(x.dtype))

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """Per head, what the recurrent form does to C (Dk x Dv) and n (Dk): decay them (a multiply
        per entry), write k v^T and k (a multiply-add each), read q^T C and q . n (a multiply-add
        each): 5 Dk Dv + 5 Dk."""
        return self.h * (5 * self.dk * self.dv + 5 * self.dk)


def mlstm_scan(q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor, state, chunk: int, eps: float):
    """The stabilised mLSTM over (B, H, L, D) inputs, i and log f (B, H, L), from ``state`` [C, n, m]
    (None: zeros); chunked. (h (B, H, L, Dv), (C, n, m) after the last position)."""
    B, H, length, dk = q.shape
    if state is None:
        C, n, m = q.new_zeros(B, H, dk, v.shape[-1]), q.new_zeros(B, H, dk), q.new_zeros(B, H, 1)
    else:
        C, n, m = state
    chunk = min(chunk, length)
    pad = -length % chunk
    q, k, v = (_chunks(t, chunk) for t in (q, k, v))  # (B, H, N, c, D)
    i = F.pad(i, (0, pad), value=float("-inf")).unflatten(-1, (-1, chunk))  # chunk padding: writes nothing
    Fc = F.pad(f, (0, pad)).unflatten(-1, (-1, chunk)).cumsum(-1)  # log forget since the chunk began
    a = i - Fc
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    qk = q @ k.transpose(-1, -2)
    out = []
    for q_j, k_j, v_j, qk_j, F_j, a_j in zip(*(t.unbind(2) for t in (q, k, v, qk, Fc, a))):
        m_new = F_j + torch.maximum(m, a_j.cummax(-1).values)  # the recurrent form's m at each position
        inter = (F_j + m - m_new).exp()  # how much of the chunk's starting state each position keeps
        D = ((F_j - m_new).unsqueeze(-1) + a_j.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
        W = qk_j * D
        num = inter.unsqueeze(-1) * (q_j @ C) + W @ v_j
        qn = inter * (q_j @ n.unsqueeze(-1)).squeeze(-1) + W.sum(-1)
        out.append(num / (torch.maximum(qn.abs(), (-m_new).exp()) + eps).unsqueeze(-1))
        kw = k_j * D[..., -1, :].unsqueeze(-1)  # each position's weight in the chunk's last state
        C = inter[..., -1:, None] * C + kw.transpose(-1, -2) @ v_j
        n, m = inter[..., -1:] * n + kw.sum(-2), m_new[..., -1:]
    return torch.stack(out, dim=2).flatten(2, 3)[:, :, :length], (C, n, m.clone())  # m: a slice of m_new


def from_hf_layer(hf: nn.Module) -> Dict[str, Tensor]:
    """This mixer's state dict from a transformers ``xLSTMLayer`` (``weight_mode: single``)."""
    return renamed(hf.state_dict(), {v: k for k, v in HF_NAMES.items()})


def to_hf_layer(mixer: MLSTM) -> Dict[str, Tensor]:
    """An ``xLSTMLayer``'s state dict from this mixer."""
    return renamed(mixer.state_dict(), HF_NAMES)
