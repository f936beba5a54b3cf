"""Softmax attention as a mixer: today's self-attention, its options the model's flat keys (heads,
pattern, kernel, qk-norm, soft-cap, scale), plus an optional output gate that nests under it:
``mixer: {name: attention, gate: sigmoid}``. Its decoding state is a key/value cache that grows
with the context (a ring of the window for a sliding-window pattern).

``CrossAttention`` is a decoder layer's cross-attention slot behind the same protocol,
``forward(x, inputs, state)``: its inputs (``CrossInputs``) add the encoder memory, its state is the
memory's K/V, filled on the first call. It serves the encoder-decoder kind only, so it is not a
registered mixer."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional, Tuple

from torch import Tensor, nn

from ...errors import ConfigError
from ..attention import KERNELS, MultiHeadAttention, MultiHeadCrossAttention, attention_args
from ..attention_patterns import AttentionPattern, SlidingWindowAttention
from ..init import mark_residual_out
from ..state import DecodingState, KVCache
from .base import MIXERS, Mixer, MixerInputs


@dataclass(frozen=True)
class AttentionOptions:
    gate: Optional[Literal["sigmoid"]] = None  # an output gate after the attention (Qiu et al. 2025; Qwen3-Next)
    gate_scope: Literal["elementwise", "head"] = "elementwise"  # one gate per element of each head, or per head
    sinks: bool = False  # a learned logit per head that takes softmax mass and returns nothing (gpt-oss)
    # biases on the q, k, v projections; null: model.bias, as the output projection's (RecurrentGemma:
    # none there, one on the output)
    qkv_bias: Optional[bool] = None

    def __post_init__(self):
        if self.gate is None and self.gate_scope != "elementwise":
            raise ValueError("gate_scope refines gate, which is not set: set gate: sigmoid too")


def check_sinks(sinks: bool, cfg, key: str) -> None:
    """Sinks need a kernel that takes them (``takes_sinks``)."""
    if sinks and not KERNELS.get(cfg.attention_kernel.name).factory.takes_sinks:
        able = [e.name for e in KERNELS.entries() if e.factory.takes_sinks]
        raise ConfigError(f"{key}.attention_kernel", f"kernel '{cfg.attention_kernel.name}' cannot take attention "
                          f"sinks (mixer sinks: true); kernels that can: {', '.join(able)}")


def ring_size(pattern: AttentionPattern, columns: int) -> int:
    """Slots a static self-attention cache of ``columns`` columns needs under ``pattern``."""
    keep = pattern.cache_keep()
    return columns if keep is None else min(columns, keep + 1)


def supports(pattern: AttentionPattern) -> bool:
    """A static cache reproduces patterns that restrict nothing or restrict to the window they keep
    (what the eager cache then trims to); a plugin's other band would need its own query column."""
    restrict = type(pattern).restrict
    return restrict is AttentionPattern.restrict or restrict is SlidingWindowAttention.restrict


def reads_attention_keys(mixer: type) -> bool:
    """Whether the mixer class reads the model's attention keys (pattern, qk_norm, scale, soft-cap, a
    position scheme that rotates q/k or biases scores); a model none of whose layers does refuses them.
    A mixer that attends says so with ``reads_attention_keys = True``."""
    return getattr(mixer, "reads_attention_keys", False)


def rotary_dim(mixer: type, options, cfg) -> int:
    """The head width the position scheme rotates for the mixer: its ``rotary_dim(options, cfg)``
    where it has one (MLA: its decoupled RoPE part), else the layer's head_dim."""
    own = getattr(mixer, "rotary_dim", None)
    return own(options, cfg) if own is not None else cfg.dim_per_head


def score_width(mixer: type, options, cfg) -> Tuple[int, str]:
    """(width, its name): what q.k sums over, so the default scale 1/sqrt(width) and the
    parametrization's scale read it: the mixer's ``score_width(options, cfg)`` where it has one
    (MLA: qk_nope_head_dim + qk_rope_head_dim), else the layer's head_dim."""
    own = getattr(mixer, "score_width", None)
    return own(options, cfg) if own is not None else (cfg.dim_per_head, "head_dim")


@MIXERS.register("attention", AttentionOptions, "softmax attention (Vaswani et al. 2017): MHA/GQA/MQA, its pattern, "
                 "kernel and qk-norm the model's keys; gate: sigmoid adds Qwen3-Next's output gate, "
                 "sinks: true gpt-oss's per-head sink logit")
class Attention(MultiHeadAttention, Mixer):
    stacks = ("decoder", "encoder")
    layer_name = "self-attention"  # as describe's layer lines say it
    part = "attention"
    reads_attention_keys = True
    document_boundaries = "mask"  # it reads other positions only through inputs.mask
    # the grid's plain attention is every other model's default; here the gate and the sinks
    example_options = {"gate": "sigmoid", "sinks": True}

    def __init__(self, options: AttentionOptions, cfg, ctx=None):
        gate = None if options.gate is None else options.gate_scope
        super().__init__(cross=False, gate=gate, sinks=options.sinks, **attention_args(cfg))
        mark_residual_out(self.out)
        if options.qkv_bias is not None and options.qkv_bias != cfg.bias:  # (the model's init draws it later)
            self.qkv = nn.Linear(self.qkv.in_features, self.qkv.out_features, bias=options.qkv_bias)

    @classmethod
    def resolved_options(cls, options, cfg):
        if isinstance(options, AttentionOptions) and options.qkv_bias is None:
            return dataclasses.replace(options, qkv_bias=cfg.bias)
        return options

    @classmethod
    def check(cls, options: AttentionOptions, cfg, key: str) -> None:
        check_sinks(options.sinks, cfg, key)

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[DecodingState] = None) -> Tensor:
        return super().forward(x, inputs.mask, inputs.rotate, cache=state, need_weights=inputs.need_weights)

    def new_state(self) -> DecodingState:
        return KVCache()

    def static_state(self, batch, columns, dtype, device, column) -> DecodingState:
        return self.static_kv(batch, ring_size(self.pattern, columns), dtype, device, column=column, columns=columns)

    def static_unsupported(self) -> Optional[str]:
        if supports(self.pattern):
            return None
        return (f"the static cache cannot follow attention pattern {type(self.pattern).__name__} "
                "(it restricts keys other than to the window it keeps)")

    def _per_key(self) -> int:
        return 4 * self.shape.n_heads * self.shape.head_dim  # q.k and weights.v, 2 FLOPs a multiply-add

    def mixing_flops(self, length: int, causal: bool) -> float:
        return self._per_key() * self.pattern.visible_keys(length, causal) * length if length else 0.0

    def step_mixing_flops(self, context: int) -> float:
        """The keys the new query sees: all it has seen but those its pattern no longer keeps."""
        keep = self.pattern.cache_keep()
        return self._per_key() * (context + 1 if keep is None else min(context, keep) + 1)

    def state_elements(self, context: int) -> int:
        keep = self.pattern.cache_keep()
        keys = context if keep is None else min(context, keep)
        return 2 * self.shape.n_kv_heads * self.shape.head_dim * keys


@dataclass
class CrossInputs(MixerInputs):
    """A cross-attention slot's inputs: ``mask`` and ``rotate`` over the memory's positions, and the
    memory (B, S, d_model) its keys and values come from."""

    memory: Optional[Tensor] = None


class CrossAttention(MultiHeadCrossAttention, Mixer):
    """Queries from the decoder's positions, keys and values from the encoder memory (global: no
    pattern); built from the layer's config as self-attention is."""

    layer_name = "cross-attention"
    part = "attention"

    def __init__(self, cfg, ctx=None):
        super().__init__(**attention_args(cfg))
        mark_residual_out(self.out)

    def forward(self, x: Tensor, inputs: CrossInputs, state: Optional[DecodingState] = None) -> Tensor:
        return super().forward(x, inputs.mask, inputs.rotate, memory=inputs.memory, cache=state,
                               need_weights=inputs.need_weights)

    def new_state(self) -> DecodingState:
        return KVCache()

    def static_state(self, batch, columns, dtype, device, column=None) -> DecodingState:
        return self.static_kv(batch, columns, dtype, device)  # the memory's columns, written once
