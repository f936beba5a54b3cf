"""Transformer layers and stacks. Norm placement (pre/post) lives here, once, in ``Residual``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch
from torch import Tensor, nn

from ..components.attention import KVCache, MultiHeadAttention
from ..components.feedforward import FEEDFORWARD, FFNContext
from ..components.init import mark_residual_out
from ..components.masks import AttentionMask, cross_attention_mask, self_attention_mask
from ..components.norms import NORMS
from ..components.positions import POSITIONS, PositionContext, PositionScheme
from ..config import ModelConfig


class Residual(nn.Module):
    """Wraps a sublayer f: ``x + drop(f(norm(x)))`` (pre) or ``norm(x + drop(f(x)))`` (post)."""

    def __init__(self, sublayer: nn.Module, norm: nn.Module, placement: str, dropout: float):
        super().__init__()
        self.sublayer, self.norm, self.pre = sublayer, norm, placement == "pre"
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, *args, **kwargs) -> Tensor:
        if self.pre:
            return x + self.dropout(self.sublayer(self.norm(x), *args, **kwargs))
        return self.norm(x + self.dropout(self.sublayer(x, *args, **kwargs)))


@dataclass
class LayerCache:
    self_kv: KVCache = field(default_factory=KVCache)
    cross_kv: KVCache = field(default_factory=KVCache)


@dataclass
class StackInputs:
    """Everything a layer needs besides x; computed once per forward by the stack."""

    self_mask: AttentionMask
    self_rotate: Optional[callable] = None
    memory: Optional[Tensor] = None
    cross_mask: Optional[AttentionMask] = None
    cross_rotate: Optional[callable] = None
    need_weights: bool = False


def _attention(cfg: ModelConfig, cross: bool) -> MultiHeadAttention:
    attn = MultiHeadAttention.from_config(cfg, cross=cross)
    mark_residual_out(attn.out)
    return attn


class TransformerLayer(nn.Module):
    """Self-attention, optional cross-attention over encoder memory, then the feed-forward network."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()

        def wrap(sublayer):
            return Residual(sublayer, NORMS.build(cfg.norm, cfg.d_model), cfg.norm_placement, cfg.dropout)

        self.self_attn = wrap(_attention(cfg, cross=False))
        self.cross_attn = wrap(_attention(cfg, cross=True)) if cross else None
        self.ffn = wrap(FEEDFORWARD.build(cfg.ffn, FFNContext(cfg.d_model, cfg.d_ff, cfg.bias, cfg.dropout)))

    def forward(self, x: Tensor, inputs: StackInputs, cache: Optional[LayerCache] = None) -> Tensor:
        x = self.self_attn(x, inputs.self_mask, inputs.self_rotate, cache=cache and cache.self_kv,
                           need_weights=inputs.need_weights)
        if self.cross_attn is not None:
            x = self.cross_attn(x, inputs.cross_mask, inputs.cross_rotate, memory=inputs.memory,
                                cache=cache and cache.cross_kv, need_weights=inputs.need_weights)
        return self.ffn(x)


def _acts(scheme: PositionScheme, hook: str) -> bool:
    return getattr(type(scheme), hook) is not getattr(PositionScheme, hook)


def default_positions(attention_mask: Optional[Tensor], length: int, past: int, device) -> Tensor:
    """Positions of the last ``length`` tokens: counted over real tokens only when a padding
    mask is given (so left-padded prompts start at 0), else ``past .. past+length-1``."""
    if attention_mask is None:
        return torch.arange(past, past + length, device=device).unsqueeze(0)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]


class Stack(nn.Module):
    """Position scheme + layers + optional final norm: token embeddings in, hidden states out."""

    def __init__(self, cfg: ModelConfig, n_layers: int, causal: bool, cross: bool):
        super().__init__()
        self.causal = causal
        self.cross_positions = cross and cfg.cross_attention_position
        ctx = PositionContext(cfg.d_model, cfg.n_heads, cfg.dim_per_head, cfg.max_seq_len, causal)
        self.position: PositionScheme = POSITIONS.build(cfg.position, ctx)
        self.embedding_norm = NORMS.build(cfg.norm, cfg.d_model) if cfg.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(cfg.rate("embedding_dropout"))
        self.layers = nn.ModuleList(TransformerLayer(cfg, cross) for _ in range(n_layers))
        self.final_norm = NORMS.build(cfg.norm, cfg.d_model) if cfg.use_final_norm else nn.Identity()

    def _with_bias(self, mask: AttentionMask, q_pos: Tensor, k_pos: Tensor, cross: bool) -> AttentionMask:
        if not _acts(self.position, "score_bias"):
            return mask
        bias = self.position.score_bias(q_pos, k_pos, cross=cross)
        return mask.with_bias(bias, q_pos.shape[-1], k_pos.shape[-1])

    def forward(self, x: Tensor, attention_mask: Optional[Tensor] = None, positions: Optional[Tensor] = None,
                memory: Optional[Tensor] = None, memory_mask: Optional[Tensor] = None,
                memory_positions: Optional[Tensor] = None, caches: Optional[List[LayerCache]] = None,
                past_positions: Optional[Tensor] = None, need_weights: bool = False) -> Tensor:
        """``past_positions`` (B|1, past) are the positions of keys already in ``caches``."""
        length = x.shape[1]
        past = 0 if past_positions is None else past_positions.shape[-1]
        if positions is None:
            positions = default_positions(attention_mask, length, past, x.device)
        k_pos = positions
        if past_positions is not None:
            b = max(past_positions.shape[0], positions.shape[0])
            k_pos = torch.cat((past_positions.expand(b, -1), positions.expand(b, -1)), dim=-1)
        mask = self_attention_mask(attention_mask, length, past, self.causal, x.device)
        inputs = StackInputs(self._with_bias(mask, positions, k_pos, cross=False), self.position.rotator(positions, positions),
                             need_weights=need_weights)
        if memory is not None:
            inputs.memory = memory
            inputs.cross_mask = cross_attention_mask(memory_mask, length)
            if self.cross_positions:
                if memory_positions is None:
                    memory_positions = default_positions(memory_mask, memory.shape[1], 0, x.device)
                inputs.cross_mask = self._with_bias(inputs.cross_mask, positions, memory_positions, cross=True)
                inputs.cross_rotate = self.position.rotator(positions, memory_positions)
        x = self.dropout(self.embedding_norm(self.position.embed(x, positions)))
        for i, layer in enumerate(self.layers):
            x = layer(x, inputs, caches[i] if caches is not None else None)
        return self.final_norm(x)
