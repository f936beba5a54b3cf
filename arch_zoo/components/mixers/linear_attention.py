"""Linear attention (Katharopoulos et al. 2020): softmax(q k^T) replaced by phi(q) phi(k)^T, so causal
attention is a recurrence over a state S_t = S_{t-1} + phi(k_t) v_t^T and a normaliser
z_t = z_{t-1} + phi(k_t): o_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps). The normaliser rides along
as one more value column (v extended by a 1), so the state is (head_dim, head_dim + 1) per head.
Chunked for training and prefill, per position for decoding (``scan``). Bidirectional in an encoder:
every query reads the sum over all real keys. Padding contributes no key."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .documents import reset_log_decay, same_document
from .recurrent import RecurrentMixer, keep_mask, read, wide, write
from .scan import decay_scan, decay_step

FEATURE_MAPS = {"elu": lambda x: F.elu(x) + 1.0, "relu": F.relu}


@dataclass(frozen=True)
class LinearAttentionOptions:
    feature_map: Literal["elu", "relu"] = "elu"  # phi: elu(x) + 1 (the paper's) or relu(x)
    normalize: bool = True  # divide by phi(q).z; false: the unnormalised form (an RMSNorm-free retnet-like read)
    eps: float = 1e-6
    chunk_size: int = 64  # positions per chunk of the parallel form (the function does not change)

    def __post_init__(self):
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be positive, got {self.chunk_size}")


@MIXERS.register("linear_attention", LinearAttentionOptions, "linear attention (Katharopoulos et al. 2020): "
                 "phi(q) phi(k)^T with phi = elu + 1, a recurrence when causal")
class LinearAttention(RecurrentMixer):
    stacks = ("decoder", "encoder")
    example_options = {"chunk_size": 4}
    # documents kept apart natively: causal, a decay to nothing at each start; bidirectional, a sum per document
    document_boundaries = "native"

    def __init__(self, options: LinearAttentionOptions, cfg, ctx=None):
        super().__init__()
        self.h, self.d = cfg.n_heads, cfg.dim_per_head
        self.phi = FEATURE_MAPS[options.feature_map]
        self.normalize, self.eps, self.chunk = options.normalize, options.eps, options.chunk_size
        self.qkv = nn.Linear(cfg.d_model, 3 * self.h * self.d, bias=cfg.bias)
        self.out = mark_residual_out(nn.Linear(self.h * self.d, cfg.d_model, bias=cfg.bias))

    def _values(self) -> int:
        return self.d + (1 if self.normalize else 0)

    def state_shapes(self, batch):
        return {"kv": (batch, self.h, self.d, self._values())}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        q, k, v = (wide(t.unflatten(-1, (self.h, self.d)).transpose(1, 2))
                   for t in self.qkv(x).split(self.h * self.d, dim=-1))
        q, k = self.phi(q), self.phi(k)
        keep = keep_mask(inputs, x)
        if keep is not None:
            k = k * wide(keep).unsqueeze(1)
        if self.normalize:
            v = torch.cat((v, torch.ones_like(v[..., :1])), dim=-1)
        if not inputs.causal and inputs.documents is not None:
            o = ((q @ k.transpose(-1, -2)) * same_document(inputs.documents.starts).unsqueeze(1)) @ v
        elif not inputs.causal:
            o = q @ (k.transpose(-1, -2) @ v)
        else:
            S = read(state, "kv")
            scan = decay_step if state is not None and x.shape[1] == 1 else decay_scan
            o, S = scan(q, k, v, reset_log_decay(inputs, self.h, q), None if S is None else wide(S),
                        **({} if scan is decay_step else {"chunk": self.chunk}))
            write(state, "kv", S)
        if self.normalize:
            o = o[..., :-1] / (o[..., -1:] + self.eps)
        return self.out(o.transpose(1, 2).flatten(2).to(x.dtype))

    def mixing_flops(self, length: int, causal: bool) -> float:
        """Per token and head: phi(k) v^T into the state and phi(q)^T S out (a multiply-add per entry of
        the d x (d + 1) state each), the same causal or not (bidirectional: sum all, then read)."""
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        return 4 * self.h * self.d * self._values()
