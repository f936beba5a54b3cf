"""Gated DeltaProduct (Siems et al. 2025): Gated DeltaNet taking ``n_householder`` delta steps per token
instead of one, so each token's transition is a product of that many generalised Householder matrices
(a state-tracking power one step lacks). Per token t, with its decay exp(g_t) applied before the first
step, for j = 1..n:

    S <- (I - b_tj k_tj k_tj^T) S + b_tj k_tj v_tj^T,      o_t = S^T q_t after the last step

with n keys, values and write strengths per token (each key L2-normalised), one query and one decay.
It is ``GatedDeltaNet`` run over the token steps laid out one after the other (step j of token t at
position t n + j, queries only at each token's last step): the same chunked and recurrent scans, the
same conv, norm and gate. With n_householder 1 it is Gated DeltaNet, weight for weight.

Projections are step-major: in_proj gives q, then the n keys, the n values, then z; ba_proj the n
write strengths, then the decay's input."""
from __future__ import annotations

from dataclasses import dataclass

from .base import MIXERS
from .gated_deltanet import GatedDeltaNet, GatedDeltaNetOptions


@dataclass(frozen=True)
class GatedDeltaProductOptions(GatedDeltaNetOptions):
    n_householder: int = 2  # delta steps per token

    def __post_init__(self):
        super().__post_init__()
        if self.n_householder < 1:
            raise ValueError(f"n_householder must be positive, got {self.n_householder}")


@MIXERS.register("gated_deltaproduct", GatedDeltaProductOptions, "Gated DeltaProduct (Siems et al. 2025): Gated "
                 "DeltaNet with n_householder delta steps per token; causal only")
class GatedDeltaProduct(GatedDeltaNet):
    example_options = {"conv_size": 3, "chunk_size": 4, "n_householder": 2}
