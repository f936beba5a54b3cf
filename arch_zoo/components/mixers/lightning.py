"""Lightning attention (Qin et al. 2024, Lightning Attention-2; MiniMax-01's linear layers, MiniMax 2025):
linear attention with no feature map beyond a silu, no normaliser and no 1/sqrt(d) scale, and a fixed
decay per head that no input changes. q, k, v = silu(x W_qkv) (per head, [q | k | v] side by side);
per head h of layer l (of n)

    S_t = exp(-s_h) S_{t-1} + k_t v_t^T,      o_t = S_t^T q_t,
    s_h = (2^(-8/H))^(h+1) (1 - l / (n - 1 + 1e-5) + 1e-5)

(ALiBi's slopes, shrunk with depth: the last layer barely forgets), then RMSNorm over all heads
together, times sigmoid(x W_gate), and the output projection. The state is one (head_dim, head_dim)
matrix per head. ``scan.decay_scan`` computes it chunked for training and prefill, ``decay_step`` per
position for decoding. It equals transformers' ``MiniMaxLightningAttention``
(``models/minimax/modeling_minimax.py``) on the weights ``from_hf_layer`` maps. A padded position
writes nothing and decays nothing, so the state skips it (transformers zeroes its q, k and v but
still decays)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..init import mark_residual_out
from .base import MIXERS, MixerInputs
from .conv import GatedRMSNorm
from .recurrent import RecurrentMixer, keep_mask, read, wide, write
from .scan import decay_scan, decay_step

HF_BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")  # recomputed from the layer's place


@dataclass(frozen=True)
class LightningOptions:
    chunk_size: int = 64  # positions per chunk of the parallel form (MiniMax's block_size; not the function)
    norm_eps: float = 1e-6  # the output RMSNorm's (MiniMax's is 1e-6 whatever rms_norm_eps says)
    n_heads: Optional[int] = None  # null: model.n_heads (MiniMax's)
    head_dim: Optional[int] = None  # null: the model's head_dim (MiniMax's)

    def __post_init__(self):
        for name in ("chunk_size", "n_heads", "head_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value}")


def slopes(n_heads: int, index: int, depth: int) -> Tensor:
    """(H,) the decay rates s_h of layer ``index`` of ``depth``, in float32 as transformers computes them
    (a checkpoint's function is the one its reference code computes)."""
    base = 1 / (2 ** (8 / n_heads))
    factor = 1 - index / (depth - 1 + 1e-5) + 1e-5
    return base ** (torch.arange(n_heads, device="cpu") + 1) * factor


@MIXERS.register("lightning", LightningOptions, "lightning attention (Lightning Attention-2, MiniMax-01's linear "
                 "layers): silu q/k/v, a fixed decay per head shrinking with depth, RMSNorm and a sigmoid gate; "
                 "causal only")
class LightningAttention(RecurrentMixer):
    example_options = {"chunk_size": 4}  # chunks shorter than the grid's sequences

    def __init__(self, options: LightningOptions, cfg, ctx=None):
        super().__init__()
        self.h, self.d = options.n_heads or cfg.n_heads, options.head_dim or cfg.dim_per_head
        self.chunk = options.chunk_size
        width = self.h * self.d
        self.qkv_proj = nn.Linear(cfg.d_model, 3 * width, bias=cfg.bias)
        self.output_gate = nn.Linear(cfg.d_model, width, bias=cfg.bias)
        self.norm = GatedRMSNorm(width, width, options.norm_eps, gate_first=False, gate=torch.sigmoid)
        self.out_proj = mark_residual_out(nn.Linear(width, cfg.d_model, bias=cfg.bias))
        # not saved: a function of the layer's place (as ALiBi's slopes and RoPE's frequencies are)
        self.register_buffer("slopes", slopes(self.h, ctx.index if ctx else 0, ctx.depth if ctx else 1),
                             persistent=False)

    def state_shapes(self, batch):
        return {"kv": (batch, self.h, self.d, self.d)}

    def forward(self, x: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        q, k, v = wide(F.silu(self.qkv_proj(x))).unflatten(-1, (self.h, 3 * self.d)).transpose(1, 2).chunk(3, dim=-1)
        g = -wide(self.slopes).view(1, self.h, 1).expand(x.shape[0], -1, x.shape[1])  # (B, H, L)
        keep = keep_mask(inputs, x)
        if keep is not None:
            keep = wide(keep).squeeze(-1).unsqueeze(1)  # (B, 1, L)
            k, g = k * keep.unsqueeze(-1), g * keep
        S = read(state, "kv")
        scan = decay_step if state is not None and x.shape[1] == 1 else decay_scan
        o, S = scan(q, k, v, g, None if S is None else wide(S), **({} if scan is decay_step else {"chunk": self.chunk}))
        write(state, "kv", S)
        return self.out_proj(self.norm(o.transpose(1, 2).flatten(2).to(x.dtype), self.output_gate(x)))

    def mixing_flops(self, length: int, causal: bool) -> float:
        return length * self.step_mixing_flops(length)

    def step_mixing_flops(self, context: int) -> float:
        """Per head what the recurrent form does to its d x d state: the decay (a multiply per entry),
        the write k v^T and the read q^T S (a multiply-add per entry each): 5 d^2."""
        return 5 * self.h * self.d * self.d


def from_hf_layer(hf: nn.Module) -> Dict[str, Tensor]:
    """This mixer's state dict from a transformers ``MiniMaxLightningAttention`` (its decay buffers are
    functions of the layer's place, which this mixer computes from its own)."""
    return {k: v for k, v in hf.state_dict().items() if k not in HF_BUFFERS}


def to_hf_layer(mixer: LightningAttention, hf: nn.Module) -> Dict[str, Tensor]:
    """A ``MiniMaxLightningAttention``'s state dict from this mixer, its decay buffers taken from ``hf``
    (the layer it will load into, which computed them for its place)."""
    return {**{k: hf.state_dict()[k] for k in HF_BUFFERS}, **mixer.state_dict()}
