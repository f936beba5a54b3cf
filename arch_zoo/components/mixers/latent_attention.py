"""Multi-head latent attention (MLA; DeepSeek-V2/V3, Kimi Linear's full-attention layers).

Keys and values come from one compressed latent per position, c = RMSNorm(x W_dkv) of width
``kv_lora_rank``, up-projected per head (W_uk, W_uv: ``kv_b``); the queries optionally through their
own low-rank bottleneck (``q_lora_rank``; null: full rank). RoPE is decoupled: each head's query has a
``qk_nope_head_dim`` part that meets the up-projected key and a ``qk_rope_head_dim`` part that the
position scheme rotates and that meets one rotated key shared by all heads (computed from x beside the
latent). The scores are scaled by 1/sqrt(nope + rope) (or model.attention_scale).

The decoding state is the latent and the rotated shared key, (kv_lora_rank + qk_rope_head_dim)
numbers a position whatever the heads: a ``KVCache`` whose two tensors are those, one "head" each. A
plain step up-projects every cached latent again; ``absorb: true`` folds W_uk into the query and
W_uv into the output instead, so the kernel attends over the latents directly (one shared key and
value, as in MQA) and gives the same function."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ..attention import KERNELS
from ..attention_patterns import ATTENTION
from ..init import mark_residual_out
from ..norms import NORMS
from ..parametrization import PARAMETRIZATIONS
from ..positions import POSITIONS, PositionContext
from ..state import DecodingState, KVCache, StaticKV, mask_keys
from .attention import ring_size, supports
from .base import MIXERS, Mixer, MixerInputs

RANKS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class LatentOptions:
    q_lora_rank: Optional[int] = None  # the queries' bottleneck; null: full-rank queries (DeepSeek-V2-Lite)
    kv_lora_rank: Optional[int] = None  # the latent's width; null: 4 x model head_dim (DeepSeek-V3: 512)
    qk_nope_head_dim: Optional[int] = None  # per head, the query/key part without positions; null: model head_dim
    qk_rope_head_dim: Optional[int] = None  # per head, the rotated part (key shared by heads); null: head_dim / 2
    v_head_dim: Optional[int] = None  # per head value width; null: model head_dim
    absorb: bool = False  # decode in the absorbed form (W_uk into the query, W_uv into the output): same tokens
    # the latents' RMSNorms' eps; null: model.norm's (Kimi Linear's HF class keeps 1e-6 beside rms_norm_eps 1e-5)
    norm_eps: Optional[float] = None

    def __post_init__(self):
        for name in RANKS:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value}")
        if self.norm_eps is not None and self.norm_eps <= 0:
            raise ConfigError("norm_eps", f"must be positive, got {self.norm_eps}")


def resolved(options: LatentOptions, cfg) -> LatentOptions:
    """The options with every null filled in from the layer's ModelConfig."""
    d = cfg.dim_per_head
    return dataclasses.replace(
        options, kv_lora_rank=options.kv_lora_rank or 4 * d, qk_nope_head_dim=options.qk_nope_head_dim or d,
        qk_rope_head_dim=options.qk_rope_head_dim or d // 2, v_head_dim=options.v_head_dim or d,
        norm_eps=options.norm_eps if options.norm_eps is not None else getattr(cfg.norm.options, "eps", None))


def latent_norm(cfg, options: LatentOptions, dim: int) -> nn.Module:
    """model.norm over a latent, with the mixer's own eps where it sets one."""
    spec = cfg.norm
    if options.norm_eps is not None:
        spec = dataclasses.replace(spec, options=dataclasses.replace(spec.options, eps=options.norm_eps))
    return NORMS.build(spec, dim)


@MIXERS.register("mla", LatentOptions, "multi-head latent attention (DeepSeek-V2/V3): keys and values from a "
                 "cached low-rank latent, decoupled RoPE on a shared key; absorb: true decodes in the absorbed form")
class LatentAttention(Mixer):
    stacks = ("decoder", "encoder")
    layer_name = "self-attention"
    part = "attention"
    reads_attention_keys = True
    document_boundaries = "mask"  # it reads other positions only through inputs.mask
    sinks = None
    cross = False
    records_attention = True  # attention diagnostics read its scores (attention_diagnostics.py)
    example_options = {"q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4,
                       "v_head_dim": 5}

    def __init__(self, options: LatentOptions, cfg, ctx=None):
        super().__init__()
        o = self.options = resolved(options, cfg)
        h, d_model = cfg.n_heads, cfg.d_model
        self.h, self.nope, self.rope, self.dv, self.rank = (h, o.qk_nope_head_dim, o.qk_rope_head_dim, o.v_head_dim,
                                                            o.kv_lora_rank)
        qk = self.score_width(options, cfg)[0]
        if o.q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, h * qk, bias=False)
        else:
            self.q_a = nn.Linear(d_model, o.q_lora_rank, bias=cfg.bias)
            self.q_norm = latent_norm(cfg, options, o.q_lora_rank)
            self.q_b = nn.Linear(o.q_lora_rank, h * qk, bias=False)
        self.kv_a = nn.Linear(d_model, self.rank + self.rope, bias=cfg.bias)
        self.kv_norm = latent_norm(cfg, options, self.rank)
        self.kv_b = nn.Linear(self.rank, h * (self.nope + self.dv), bias=False)  # no bias: absorbable
        self.out = mark_residual_out(nn.Linear(h * self.dv, d_model, bias=cfg.bias))
        scale = cfg.attention_scale
        if scale is None:
            scale = PARAMETRIZATIONS.build(cfg.parametrization, cfg).attention_scale(qk)
        if scale is None:  # stated, not the kernel's default: the absorbed form's q is rank + rope wide
            scale = qk ** -0.5
        self.backend = KERNELS.build(cfg.attention_kernel, scale, cfg.attn_logit_softcap)
        self.pattern = ATTENTION.build(cfg.attention)
        self.dropout = cfg.rate("attention_dropout")
        self.recorder = None  # attention_diagnostics.AttentionRecorder while it records

    @classmethod
    def check(cls, options: LatentOptions, cfg, key: str) -> None:
        scheme = POSITIONS.get(cfg.position.name).factory
        # only a rotation needs pairs: Kimi Linear's MLA layers (no positions) take any width
        rope = options.qk_rope_head_dim
        if scheme.rotates and rope is not None and rope % 2:
            raise ConfigError(f"{key}.mixer.qk_rope_head_dim", f"must be even (RoPE rotates pairs), got {rope}")
        if scheme.rotates and rope is None and (cfg.dim_per_head // 2) % 2 + (cfg.dim_per_head < 4):
            raise ConfigError(f"{key}.mixer.qk_rope_head_dim", f"must be even (RoPE rotates pairs); null takes "
                              f"head_dim / 2 = {cfg.dim_per_head // 2}: set it")
        o = resolved(options, cfg)
        if cfg.qk_norm is not None:
            raise ConfigError(f"{key}.qk_norm", "mla normalises its latents (model.norm) and has no qk-norm: "
                              "leave qk_norm unset")
        if options.norm_eps is not None and not hasattr(cfg.norm.options, "eps"):
            raise ConfigError(f"{key}.mixer.norm_eps", f"model.norm {cfg.norm.name} has no eps to set")
        if scheme.rotates:  # it rotates the decoupled part, not a whole head
            ctx = dataclasses.replace(PositionContext.of(cfg, True), head_dim=o.qk_rope_head_dim)
            scheme.check(cfg.position.options, ctx, f"{key}.position")

    @classmethod
    def rotary_dim(cls, options, cfg) -> int:
        return resolved(options, cfg).qk_rope_head_dim

    @classmethod
    def resolved_options(cls, options, cfg):
        return resolved(options, cfg)

    @classmethod
    def score_width(cls, options, cfg):
        o = resolved(options, cfg)
        return o.qk_nope_head_dim + o.qk_rope_head_dim, "qk_nope_head_dim + qk_rope_head_dim"

    def queries(self, x: Tensor) -> Tensor:
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b(self.q_norm(self.q_a(x)))
        return q.unflatten(-1, (self.h, self.nope + self.rope)).transpose(1, 2)  # (B, H, L, nope + rope)

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[DecodingState] = None) -> Tensor:
        if inputs.need_weights:
            raise ValueError("mla does not return attention weights")
        q_nope, q_rope = self.queries(x).split((self.nope, self.rope), dim=-1)
        latent, k_rope = self.kv_a(x).split((self.rank, self.rope), dim=-1)
        latent, k_rope = self.kv_norm(latent).unsqueeze(1), k_rope.unsqueeze(1)  # (B, 1, L, .): shared by heads
        if inputs.rotate is not None:
            q_rope, k_rope = inputs.rotate(q_rope, k_rope)
        mask = inputs.mask
        if state is not None:
            latent, k_rope, mask = state.attend(latent, k_rope, mask, self.pattern)
        else:
            mask = self.pattern.restrict(mask, x.shape[1], mask_keys(mask, x.shape[1]), x.device)
        dropout = self.dropout if self.training else 0.0
        if self.options.absorb and state is not None:
            w_uk, w_uv = self.kv_b.weight.unflatten(0, (self.h, self.nope + self.dv)).split((self.nope, self.dv), dim=1)
            q = torch.cat((q_nope @ w_uk, q_rope), dim=-1)  # (B, H, Lq, rank + rope): q_nope.(W_uk c) = (q_nope W_uk).c
            k = torch.cat((latent, k_rope), dim=-1)
            if self.recorder is not None:  # the same scores as the plain form's
                self.recorder(self, q, k, mask)
            out, _ = self.backend(q, k, latent, mask, dropout)
            out = out @ w_uv.transpose(1, 2)  # (B, H, Lq, rank) -> (B, H, Lq, dv)
        else:
            kv = self.kv_b(latent.squeeze(1)).unflatten(-1, (self.h, self.nope + self.dv)).transpose(1, 2)
            k_nope, v = kv.split((self.nope, self.dv), dim=-1)
            k = torch.cat((k_nope, k_rope.expand(-1, self.h, -1, -1)), dim=-1)
            q = torch.cat((q_nope, q_rope), dim=-1)
            if self.recorder is not None:
                self.recorder(self, q, k, mask)
            out, _ = self.backend(q, k, v, mask, dropout)
        if mask.keep is not None:
            out = out * mask.keep.to(out.dtype)
        return self.out(out.transpose(1, 2).flatten(2))

    def new_state(self) -> DecodingState:
        return KVCache()

    def static_state(self, batch, columns, dtype, device, column) -> DecodingState:
        slots = ring_size(self.pattern, columns)
        return StaticKV(torch.zeros(batch, 1, slots, self.rank, dtype=dtype, device=device),
                        torch.zeros(batch, 1, slots, self.rope, dtype=dtype, device=device),
                        column=column, columns=columns)

    def static_unsupported(self) -> Optional[str]:
        if supports(self.pattern):
            return None
        return f"the static cache cannot follow attention pattern {type(self.pattern).__name__}"

    def _keys(self, context: int) -> int:
        keep = self.pattern.cache_keep()
        return context if keep is None else min(context, keep)

    def mixing_flops(self, length: int, causal: bool) -> float:
        per_key = 2 * self.h * (self.nope + self.rope + self.dv)  # q.k and weights.v
        return per_key * self.pattern.visible_keys(length, causal) * length if length else 0.0

    def step_mixing_flops(self, context: int) -> float:
        """One step after ``context`` positions. Plain: kv_b up-projects each cached latent again
        (the new one is kv_b's linear FLOPs), then attention at head width. Absorbed: attention at
        latent width over one shared key; folding W_uk and W_uv into the new query and output costs
        what kv_b's linear FLOPs count for the new token."""
        cached, keys = self._keys(context), self._keys(context) + 1
        if self.options.absorb:
            return 2 * self.h * (2 * self.rank + self.rope) * keys
        return 2 * self.rank * self.h * (self.nope + self.dv) * cached + 2 * self.h * (self.nope + self.rope + self.dv) * keys

    def state_elements(self, context: int) -> int:
        return (self.rank + self.rope) * self._keys(context)
