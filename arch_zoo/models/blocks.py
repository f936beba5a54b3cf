"""Transformer layers and stacks. How a layer combines its sublayers is its placement's job
(``components.placements``); each layer is built from its own config and ``LayerContext``."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..components.attention import MultiHeadAttention
from ..components.context import LayerContext
from ..components.feedforward import FEEDFORWARD, FFNContext, has_sublayer
from ..components.init import mark_residual_out
from ..components.masks import AttentionMask, cross_attention_mask, self_attention_mask
from ..components.mixers import MIXERS, MixerInputs
from ..components.norms import NORMS
from ..components.placements import PLACEMENTS, Slot, ends_with_norm
from ..components.positions import POSITIONS, PositionContext, PositionScheme
from ..components.state import KVCache, LayerState
from ..config import ModelConfig
from .renamed_keys import renamed_slot_keys


StackInputs = MixerInputs  # the name layers and tests have long used


def _cross_attention(cfg: ModelConfig) -> MultiHeadAttention:
    attn = MultiHeadAttention.from_config(cfg, cross=True)
    mark_residual_out(attn.out)
    return attn


class TransformerLayer(nn.Module):
    """The token mixer, optional cross-attention over encoder memory, then the feed-forward network:
    under the pre placement ``x = x + mixer(norm(x))``, ``x = x + cross(norm(x))``, ``x = x + ffn(norm(x))``.
    Each is a ``Slot`` (its module under ``.sublayer``, its norms beside it): ``mixer``, ``cross_attn``, ``ffn``."""

    def __init__(self, cfg: ModelConfig, ctx: LayerContext):
        super().__init__()
        self.ctx = ctx
        self.placement = PLACEMENTS.build(cfg.norm_placement, ctx)

        def slot(index: int, sublayer: nn.Module) -> Slot:
            norms = {name: NORMS.build(cfg.norm, cfg.d_model) for name in self.placement.norm_slots(index)}
            return Slot(sublayer, norms, cfg.dropout)

        self.mixer = slot(0, MIXERS.build(cfg.mixer, cfg, ctx))  # marks its own output projection
        self.cross_attn = slot(1, _cross_attention(cfg)) if ctx.cross else None
        self.ffn = None  # ffn: none -- attention-only: no slot, so no branch and no norm for it
        if has_sublayer(cfg.ffn):
            ffn = FEEDFORWARD.build(cfg.ffn, FFNContext(cfg.d_model, cfg.d_ff, cfg.bias, cfg.dropout))  # marks its own output
            self.ffn = slot(2 if ctx.cross else 1, ffn)
        self.register_load_state_dict_pre_hook(renamed_slot_keys)  # checkpoints of earlier versions keep loading

    def slots(self) -> List[Slot]:
        return [s for s in (self.mixer, self.cross_attn, self.ffn) if s is not None]

    def new_state(self) -> LayerState:
        return LayerState(self.mixer.sublayer.new_state(), KVCache())

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[LayerState] = None) -> Tensor:
        def mixer(h):
            return self.mixer.dropout(self.mixer.sublayer(h, inputs, state and state.mixer))

        def cross_attn(h):
            return self.cross_attn.dropout(self.cross_attn.sublayer(
                h, inputs.cross_mask, inputs.cross_rotate, memory=inputs.memory, cache=state and state.cross,
                need_weights=inputs.need_weights))

        def ffn(h):
            return self.ffn.dropout(self.ffn.sublayer(h))

        branches = [b for b, s in ((mixer, self.mixer), (cross_attn, self.cross_attn), (ffn, self.ffn))
                    if s is not None]
        return self.placement.forward(x, self.slots(), branches)


def _in_attention(spec) -> bool:
    """The scheme rotates q and k or biases the scores, so its tables are shaped by a layer's heads."""
    return POSITIONS.get(spec.name).factory.acts_in_attention


def default_positions(attention_mask: Optional[Tensor], length: int, past: int, device) -> Tensor:
    """Positions of the last ``length`` tokens: counted over real tokens only when a padding
    mask is given (so left-padded prompts start at 0), else ``past .. past+length-1``."""
    if attention_mask is None:
        return torch.arange(past, past + length, device=device).unsqueeze(0)
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -length:]


class Stack(nn.Module):
    """Position scheme + layers + optional final norm: token embeddings in, hidden states out."""

    def __init__(self, cfg: ModelConfig, layer_cfgs: List[ModelConfig], causal: bool, cross: bool):
        super().__init__()
        n_layers = len(layer_cfgs)
        n_enc = cfg.encoder_layers if cfg.kind != "decoder" else 0
        n_dec = cfg.decoder_layers if cfg.kind != "encoder" else 0
        stack = "decoder" if causal else "encoder"
        self.causal = causal
        self.cross_positions = cross and cfg.cross_attention_position
        ctx = PositionContext.of(cfg, causal)
        self.position: PositionScheme = POSITIONS.build(cfg.position, ctx)
        self.embedding_norm = NORMS.build(cfg.norm, cfg.d_model) if cfg.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(cfg.rate("embedding_dropout"))
        self.layers = nn.ModuleList(
            TransformerLayer(layer_cfg, LayerContext(i, n_layers, stack, cfg.kind, n_enc, n_dec, cfg.d_model))
            for i, layer_cfg in enumerate(layer_cfgs))
        # Each layer's attention uses its config's scheme (rotate, score bias) built for its own heads and
        # head_dim (model.layers may change them); embeddings stay the stack's. Index 0 is the stack's
        # scheme, k > 0 layer_positions[k-1]; cross-attention uses the stack's scheme at the layer's shape.
        built = [(cfg.position, ctx)]

        def scheme(spec, layer_cfg: ModelConfig) -> int:
            at = ctx if not _in_attention(spec) else dataclasses.replace(
                ctx, n_heads=layer_cfg.n_heads,
                head_dim=MIXERS.get(layer_cfg.mixer.name).factory.rotary_dim(layer_cfg.mixer.options, layer_cfg))
            if (spec, at) not in built:
                built.append((spec, at))
            return built.index((spec, at))

        self.scheme_of = [scheme(layer_cfg.position, layer_cfg) for layer_cfg in layer_cfgs]
        self.cross_scheme_of = [scheme(cfg.position, layer_cfg) if self.cross_positions else 0
                                for layer_cfg in layer_cfgs]
        self.layer_positions = nn.ModuleList(POSITIONS.build(spec, at) for spec, at in built[1:])
        self.final_norm = NORMS.build(cfg.norm, cfg.d_model) if ends_with_norm(cfg) else nn.Identity()

    def _with_bias(self, mask: AttentionMask, q_pos: Tensor, k_pos: Tensor, cross: bool,
                   scheme: Optional[PositionScheme] = None) -> AttentionMask:
        scheme = scheme if scheme is not None else self.position
        if not scheme.biases_scores:
            return mask
        bias = scheme.score_bias(q_pos, k_pos, cross=cross)
        return mask.with_bias(bias, q_pos.shape[-1], k_pos.shape[-1])

    def forward(self, x: Tensor, attention_mask: Optional[Tensor] = None, positions: Optional[Tensor] = None,
                memory: Optional[Tensor] = None, memory_mask: Optional[Tensor] = None,
                memory_positions: Optional[Tensor] = None, caches: Optional[List[LayerState]] = None,
                past_positions: Optional[Tensor] = None, need_weights: bool = False,
                static_keys: Optional[Tuple[Tensor, AttentionMask]] = None) -> Tensor:
        """``past_positions`` (B|1, past) are the positions of keys already in ``caches``.
        ``static_keys``: (key positions, self-attention mask) over every column of a static cache,
        the new token's included (models/static_cache.py); then ``positions`` must be given."""
        length = x.shape[1]
        past = 0 if past_positions is None else past_positions.shape[-1]
        if positions is None:
            positions = default_positions(attention_mask, length, past, x.device)
        if static_keys is not None:
            k_pos, mask = static_keys
        else:
            k_pos = positions
            if past_positions is not None:
                b = max(past_positions.shape[0], positions.shape[0])
                k_pos = torch.cat((past_positions.expand(b, -1), positions.expand(b, -1)), dim=-1)
            mask = self_attention_mask(attention_mask, length, past, self.causal, x.device)
        cross_mask = cross_attention_mask(memory_mask, length) if memory is not None else None
        if memory is not None and self.cross_positions and memory_positions is None:
            memory_positions = default_positions(memory_mask, memory.shape[1], 0, x.device)
        schemes = [self.position, *self.layer_positions]
        tokens = None if attention_mask is None else attention_mask[:, -length:].bool()
        per_layer: dict = {}  # (self scheme, cross scheme) -> MixerInputs: biases and tables once per forward
        x = self.dropout(self.embedding_norm(self.position.embed(x, positions)))
        for i, layer in enumerate(self.layers):
            key = (self.scheme_of[i], self.cross_scheme_of[i])
            if key not in per_layer:
                own, cross = schemes[key[0]], schemes[key[1]]
                inputs = MixerInputs(self._with_bias(mask, positions, k_pos, cross=False, scheme=own),
                                     own.rotator(positions, positions), need_weights=need_weights, tokens=tokens,
                                     causal=self.causal)
                if memory is not None:
                    inputs.memory, inputs.cross_mask = memory, cross_mask
                    if self.cross_positions:
                        inputs.cross_mask = self._with_bias(cross_mask, positions, memory_positions, cross=True,
                                                            scheme=cross)
                        inputs.cross_rotate = cross.rotator(positions, memory_positions)
                per_layer[key] = inputs
            x = layer(x, per_layer[key], caches[i] if caches is not None else None)
        return self.final_norm(x)
