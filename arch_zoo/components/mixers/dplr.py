"""The diagonal-plus-rank-one recurrence that Kimi Delta Attention and RWKV-7 share, in the two forms of
``scan.py`` (chunked for training and prefill, one position at a time for decoding), with one result:

    S_t = diag(exp(g_t)) S_{t-1} + a_t (b_t^T S_{t-1}) + k_t v_t^T,      o_t = S_t^T q_t

q, k, a, b, g (B, H, L, Dk); v (B, H, L, Dv); the state S (B, H, Dk, Dv); g <= 0 is a log-decay per key
channel (the fine-grained gate). The delta rule with a channel-wise gate is a = -beta k, b = exp(g) k,
writing beta k; RWKV-7 is a = -(icl rate * kappa), b = kappa.

Chunked: within a chunk, with G the cumulative log-decay (inclusive) and G' = G - g (exclusive), the
reads r_t = b_t^T S_{t-1} solve one unit-triangular system (I - P_ba) R = (b exp(G')) S_0 + P_bk V, where
P_xy[t, s] = sum_d x_td y_sd exp(G'_td - G_sd) for s < t (every exponent <= 0). Outputs and the next
state follow from R without another sequential step; only the state is carried from chunk to chunk.
The pairwise decays are held as (chunk, chunk, Dk) per chunk: keep chunks short (16)."""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .scan import _chunks, _zeros


def _decays(gx: Tensor, gy: Tensor, strict: bool) -> Tensor:
    """(..., c, c, D): exp(gx_td - gy_sd) where s < t (strict) or s <= t, else 0. The exponent is masked
    before exp, so nothing above the diagonal overflows (or sends a NaN back)."""
    c = gx.shape[-2]
    upper = torch.ones(c, c, dtype=torch.bool, device=gx.device).triu(0 if strict else 1)
    return (gx.unsqueeze(-2) - gy.unsqueeze(-3)).masked_fill(upper.unsqueeze(-1), float("-inf")).exp()


def _pairs(x: Tensor, y: Tensor, decays: Tensor) -> Tensor:
    """(..., c, c): sum_d x_td y_sd decays[t, s, d]."""
    return (x.unsqueeze(-2) * y.unsqueeze(-3) * decays).sum(-1)


def _factored(x: Tensor, gx: Tensor, y: Tensor, gy: Tensor, strict: bool) -> Tensor:
    """``_pairs(x, y, _decays(gx, gy, strict))`` as one matmul, exp(gx - gy) split as exp(gx) exp(-gy): no
    (c, c, D) tensor. exp(-gy) grows with the chunk's decay, so only for decays known to be bounded."""
    c = gx.shape[-2]
    upper = torch.ones(c, c, dtype=torch.bool, device=gx.device).triu(0 if strict else 1)
    return ((x * gx.exp()) @ (y * (-gy).exp()).transpose(-1, -2)).masked_fill(upper, 0.0)


MAX_FACTORED_DECAY = 20.0  # a chunk's log-decay the factored form may span: exp(20) ~ 5e8, far from overflow


def dplr_scan(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor, state: Optional[Tensor] = None,
              chunk: int = 16, decay_floor: Optional[float] = None) -> Tuple[Tensor, Tensor]:
    """Chunked: (outputs (B, H, L, Dv), final state). ``decay_floor``: a bound every g respects (g >=
    decay_floor, RWKV-7's); where a whole chunk's decay stays within MAX_FACTORED_DECAY the pairwise
    sums run as matmuls (``_factored``) rather than through (c, c, Dk) decay tensors, whose traffic made
    the chunked form no faster than a loop over positions at RWKV-7's 64-wide heads."""
    length = q.shape[-2]
    chunk = min(chunk, length)
    S = _zeros(q, v) if state is None else state
    q, k, v, a, b, g = (_chunks(t, chunk) for t in (q, k, v, a, b, g))  # (B, H, n, c, D)
    G = g.cumsum(-2)
    Gx = G - g
    last = G[..., -1:, :]
    if decay_floor is not None and -decay_floor * chunk <= MAX_FACTORED_DECAY:
        def pairs(x, y, strict):
            return _factored(x, Gx if strict else G, y, G, strict)
    else:
        before, upto = _decays(Gx, G, strict=True), _decays(G, G, strict=False)  # each shared by two pairs

        def pairs(x, y, strict):
            return _pairs(x, y, before if strict else upto)
    # I - P_ba: a unit-triangular solve reads only the strict lower triangle (see delta_scan)
    w, u = torch.linalg.solve_triangular(
        -pairs(b, a, True), torch.cat((b * Gx.exp(), pairs(b, k, True) @ v), dim=-1), upper=False,
        unitriangular=True).split((k.shape[-1], v.shape[-1]), dim=-1)
    qg, qa, qkv = q * G.exp(), pairs(q, a, False), pairs(q, k, False) @ v
    tail = (last - G).exp()
    adec, kv = (a * tail).transpose(-1, -2), (k * tail).transpose(-1, -2) @ v
    decay = last.exp().transpose(-1, -2)  # (..., Dk, 1)
    out = []
    for w_j, u_j, qg_j, qa_j, qkv_j, adec_j, kv_j, decay_j in zip(
            *(t.unbind(-3) for t in (w, u, qg, qa, qkv, adec, kv, decay))):
        r = w_j @ S + u_j  # each position's read b_t^T S_{t-1}
        out.append(qg_j @ S + qa_j @ r + qkv_j)
        S = decay_j * S + adec_j @ r + kv_j
    return torch.stack(out, dim=-3).flatten(-3, -2)[..., :length, :], S


def dplr_step(q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, g: Tensor, state: Optional[Tensor] = None
              ) -> Tuple[Tensor, Tensor]:
    """Recurrent: one position at a time."""
    S = _zeros(q, v) if state is None else state
    out = []
    for t in range(q.shape[-2]):
        read = (b[..., t, :].unsqueeze(-1) * S).sum(-2, keepdim=True)  # (B, H, 1, Dv)
        S = (g[..., t, :].exp().unsqueeze(-1) * S + a[..., t, :].unsqueeze(-1) * read
             + k[..., t, :].unsqueeze(-1) * v[..., t, :].unsqueeze(-2))
        out.append(q[..., t, :].unsqueeze(-2) @ S)
    return torch.cat(out, dim=-2), S
