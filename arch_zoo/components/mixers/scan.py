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
import torch.nn.functional as F
from torch import Tensor


def _chunks(x: Tensor, chunk: int) -> Tensor:
    """(..., L, D) -> (..., n, chunk, D), zero-padded at the end to whole chunks: a padded position has
    k = 0, b = 0 and g = 0, so it writes nothing and decays nothing, and its output is dropped."""
    pad = -x.shape[-2] % chunk
    # contiguous: every chunk feeds several batched matmuls, which would each copy a strided operand
    x = torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x.contiguous()
    return x.unflatten(-2, (-1, chunk))


def _decays(g: Tensor) -> Tuple[Tensor, Tensor]:
    """(cumulative log-decay G (..., c), the lower-triangular ratio gamma_t / gamma_s = exp(G_t - G_s),
    0 above the diagonal (..., c, c))."""
    G = g.cumsum(-1)
    c = g.shape[-1]
    diff = G.unsqueeze(-1) - G.unsqueeze(-2)
    upper = torch.ones(c, c, dtype=torch.bool, device=g.device).triu(1)
    return G, diff.masked_fill(upper, float("-inf")).exp()


def _zeros(q: Tensor, v: Tensor) -> Tensor:
    return q.new_zeros(q.shape[0], q.shape[1], q.shape[-1], v.shape[-1])


def _carry(S: Tensor, decay: Tensor, writes: Tensor) -> Tuple[Tensor, Tensor]:
    """The only sequential part of a chunked scan: S_{j+1} = decay_j S_j + writes_j over chunks j;
    (the state each chunk starts from (..., n, Dk, Dv), the final state)."""
    starts = []
    for decay_j, writes_j in zip(decay.unbind(-3), writes.unbind(-3)):  # unbind: indexing would cost a
        starts.append(S)  # tensor-sized zero fill per chunk in the backward pass
        S = decay_j * S + writes_j
    return torch.stack(starts, dim=-3), S


def decay_scan(q: Tensor, k: Tensor, v: Tensor, g: Optional[Tensor], state: Optional[Tensor] = None,
               chunk: int = 64) -> Tuple[Tensor, Tensor]:
    """Chunked: (outputs, final state). Everything within a chunk runs for all chunks at once; only
    the state is carried from chunk to chunk."""
    length = q.shape[-2]
    chunk = min(chunk, length)
    S = _zeros(q, v) if state is None else state
    g = q.new_zeros(q.shape[:-1]) if g is None else g
    q, k, v = (_chunks(t, chunk) for t in (q, k, v))  # (B, H, n, c, D)
    G, ratio = _decays(_chunks(g.unsqueeze(-1), chunk).squeeze(-1))
    last = G[..., -1:]
    writes = (k * (last - G).exp().unsqueeze(-1)).transpose(-1, -2) @ v
    starts, S = _carry(S, last.exp().unsqueeze(-1), writes)
    out = (q * G.exp().unsqueeze(-1)) @ starts + ((q @ k.transpose(-1, -2)) * ratio) @ v
    return out.flatten(-3, -2)[..., :length, :], S


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
    """Chunked gated delta rule; ``beta`` (B, H, L). (outputs, final state). The triangular solves and
    every product within a chunk run for all chunks at once; the loop over chunks carries the state."""
    length = q.shape[-2]
    chunk = min(chunk, length)
    S = _zeros(q, v) if state is None else state
    q, k, v = (_chunks(t, chunk) for t in (q, k, v))  # (B, H, n, c, D)
    g, b = (_chunks(t.unsqueeze(-1), chunk) for t in (g, beta))  # (B, H, n, c, 1)
    G, ratio = _decays(g.squeeze(-1))
    gamma = G.exp().unsqueeze(-1)
    # I + A, A strictly lower: a unit-triangular solve reads only the strict lower triangle (and its
    # gradient is that triangle only), so A's diagonal and the zeros above it need no masking or eye
    A = b * ratio * (k @ k.transpose(-1, -2))
    w, u = torch.linalg.solve_triangular(A, torch.cat((b * gamma * k, b * v), dim=-1), upper=False,
                                         unitriangular=True).split((k.shape[-1], v.shape[-1]), dim=-1)
    attn = (q @ k.transpose(-1, -2)) * ratio
    qg = q * gamma
    last = G[..., -1:]
    kdec = (k * (last - G).exp().unsqueeze(-1)).transpose(-1, -2)
    decay = last.exp().unsqueeze(-1)
    out = []
    # u_j depends on the state the chunk starts from, so this is not a plain carry (unbind, as there)
    for u_j, w_j, qg_j, attn_j, decay_j, kdec_j in zip(*(t.unbind(-3) for t in (u, w, qg, attn, decay, kdec))):
        u_j = u_j - w_j @ S
        out.append(qg_j @ S + attn_j @ u_j)
        S = decay_j * S + kdec_j @ u_j
    return torch.stack(out, dim=-3).flatten(-3, -2)[..., :length, :], S


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


def linear_scan(a: Tensor, b: Tensor, state: Optional[Tensor] = None, chunk: int = 64) -> Tuple[Tensor, Tensor]:
    """h_t = a_t h_{t-1} + b_t, elementwise, over the last dim of a and b (..., L), from ``state`` (...)
    (None: zeros); (h (..., L), h after the last position). A scalar state per channel (Griffin's RG-LRU)
    needs no matrices: ``decay_scan`` with 1 x 1 states builds a chunk x chunk decay matrix per channel
    and chunk, chunk times the work. Within a chunk, log2(chunk) doubling steps (Hillis and Steele) pair
    each position with the one 1, 2, 4, ... before it, (a, b) o (a', b') = (a a', a b' + b), so the
    products of a stay in [0, 1] and nothing overflows; across chunks the state is carried (``_carry``)."""
    length = a.shape[-1]
    chunk = min(chunk, length)
    pad = -length % chunk  # a = 1, b = 0: padding keeps the state as it is
    a = F.pad(a, (0, pad), value=1.0).unflatten(-1, (-1, chunk))  # (..., n, c)
    b = F.pad(b, (0, pad)).unflatten(-1, (-1, chunk))
    step = 1
    while step < chunk:  # afterwards b_t = h_t from a zero start of its chunk, a_t = a's product since then
        b = b + a * F.pad(b[..., :-step], (step, 0))
        a = a * F.pad(a[..., :-step], (step, 0), value=1.0)
        step *= 2
    S = b.new_zeros(b.shape[:-2]) if state is None else state
    starts, S = _carry(S[..., None, None], a[..., -1:, None], b[..., -1:, None])  # (..., n, 1, 1)
    return (b + a * starts[..., 0]).flatten(-2)[..., :length], S[..., 0, 0]
