"""The recurrences of the recurrent mixers, each in two forms with one result: a chunked parallel form
for training and prefill (matmuls within a chunk of positions, a Python loop only over chunks) and a
recurrent form, one position at a time, for decoding.

Shapes: q, k (B, H, L, Dk); v (B, H, L, Dv); a log-decay g (B, H, L) (<= 0, 0 where nothing decays);
the state S (B, H, Dk, Dv); outputs (B, H, L, Dv).

* ``decay_scan``: S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t (linear attention: g = 0; Mamba-2's
  SSD: k = B, q = C, v = dt x, g = dt A).
* ``delta_scan``: the gated delta rule (Yang et al. 2025): S_t = exp(g_t) (I - b_t k_t k_t^T) S_{t-1}
  + b_t k_t v_t^T, o_t = S_t^T q_t. Within a chunk it writes u_t = b_t (v_t - exp(g_t) S_{t-1}^T k_t),
  which solve (I + A) U = b V - (b gamma K) S_0 with A[t, s] = b_t (gamma_t / gamma_s) k_t.k_s (s < t),
  gamma the decay since the chunk began (the WY form of DeltaNet, Yang et al. 2024).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor


def _decays(g: Tensor) -> Tuple[Tensor, Tensor]:
    """(cumulative log-decay G (B, H, c), the lower-triangular ratio gamma_t / gamma_s = exp(G_t - G_s),
    0 above the diagonal (B, H, c, c))."""
    G = g.cumsum(-1)
    c = g.shape[-1]
    diff = G.unsqueeze(-1) - G.unsqueeze(-2)
    upper = torch.ones(c, c, dtype=torch.bool, device=g.device).triu(1)
    return G, diff.masked_fill(upper, float("-inf")).exp()


def _zeros(q: Tensor, v: Tensor) -> Tensor:
    return q.new_zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1])


def decay_scan(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], state: Optional[Tensor] = None,
               chunk: int = 64) -> Tuple[Tensor, Tensor]:
    """Chunked: (outputs, final state)."""
    S = _zeros(q, v) if state is None else state
    g = q.new_zeros(q.shape[:-1]) if g is None else g
    out = []
    for i in range(0, q.shape[-2], chunk):
        qc, kc, vc, gc = q[..., i:i + chunk, :], k[..., i:i + chunk, :], v[..., i:i + chunk, :], g[..., i:i + chunk]
        G, ratio = _decays(gc)
        out.append((qc * G.exp().unsqueeze(-1)) @ S + ((qc @ kc.transpose(-1, -2)) * ratio) @ vc)
        last = G[..., -1:]
        S = last.exp().unsqueeze(-1) * S + (kc * (last - G).exp().unsqueeze(-1)).transpose(-1, -2) @ vc
    return torch.cat(out, dim=-2), S


def decay_step(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], state: Optional[Tensor] = None
               ) -> Tuple[Tensor, Tensor]:
    """Recurrent: one position at a time (L is usually 1 when decoding)."""
    S = _zeros(q, v) if state is None else state
    out = []
    for t in range(q.shape[-2]):
        if g is not None:
            S = g[..., t].exp()[..., None, None] * S
        S = S + k[..., t, :].unsqueeze(-1) * v[..., t, :].unsqueeze(-2)
        out.append((q[..., t, :].unsqueeze(-2) @ S))
    return torch.cat(out, dim=-2), S


def delta_scan(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Optional[Tensor] = None,
               chunk: int = 64) -> Tuple[Tensor, Tensor]:
    """Chunked gated delta rule; ``beta`` (B, H, L). (outputs, final state)."""
    S = _zeros(q, v) if state is None else state
    out = []
    for i in range(0, q.shape[-2], chunk):
        qc, kc, vc = q[..., i:i + chunk, :], k[..., i:i + chunk, :], v[..., i:i + chunk, :]
        gc, bc = g[..., i:i + chunk], beta[..., i:i + chunk].unsqueeze(-1)
        G, ratio = _decays(gc)
        gamma = G.exp().unsqueeze(-1)
        eye = torch.eye(gc.shape[-1], dtype=q.dtype, device=q.device)
        lhs = eye + (bc * ratio * (kc @ kc.transpose(-1, -2))).tril(-1)
        w = torch.linalg.solve_triangular(lhs, bc * gamma * kc, upper=False, unitriangular=True)
        u = torch.linalg.solve_triangular(lhs, bc * vc, upper=False, unitriangular=True) - w @ S
        out.append((qc * gamma) @ S + ((qc @ kc.transpose(-1, -2)) * ratio) @ u)
        last = G[..., -1:]
        S = last.exp().unsqueeze(-1) * S + (kc * (last - G).exp().unsqueeze(-1)).transpose(-1, -2) @ u
    return torch.cat(out, dim=-2), S


def delta_step(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Optional[Tensor] = None
               ) -> Tuple[Tensor, Tensor]:
    """Recurrent gated delta rule, one position at a time."""
    S = _zeros(q, v) if state is None else state
    out = []
    for t in range(q.shape[-2]):
        S = g[..., t].exp()[..., None, None] * S
        kt = k[..., t, :].unsqueeze(-1)  # (B, H, Dk, 1)
        u = beta[..., t, None] * (v[..., t, :] - (kt * S).sum(-2))  # (B, H, Dv): what the write changes
        S = S + kt * u.unsqueeze(-2)
        out.append(q[..., t, :].unsqueeze(-2) @ S)
    return torch.cat(out, dim=-2), S
