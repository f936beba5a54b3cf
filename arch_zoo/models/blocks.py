"""Transformer layers and stacks. How a layer combines its sublayers is its placement's job
(``components.placements``); each layer is built from its own config and ``LayerContext``."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from torch import Tensor, nn

from ..components.context import LayerContext
from ..components.feedforward import FEEDFORWARD, FFNContext, has_sublayer
from ..components.masks import AttentionMask, cross_attention_mask, self_attention_mask, within_documents
from ..components.mixers import MIXERS, MixerInputs
from ..components.mixers.documents import DocumentRows, mix, positions_within
from ..components.mixers.attention import CrossAttention, CrossInputs, rotary_dim
from ..components.norms import NORMS
from ..components.placements import PLACEMENTS, Slot, ends_with_norm
from ..components.positions import POSITIONS, PositionContext, PositionScheme
from ..components.state import KVCache, LayerState
from ..config import ModelConfig
from ..config.kinds import kind_of
from .cache import StackState, default_positions
from .renamed_keys import renamed_slot_keys


class MixerSlot(Slot):
    """The mixer's slot: it keeps packed documents apart as the mixer declares (``mixers.documents``)."""

    def forward(self, h: Tensor, inputs: MixerInputs, state=None) -> Tensor:
        return self.dropout(mix(self.sublayer, h, inputs, state))


class TransformerLayer(nn.Module):
    """The token mixer, optional cross-attention over encoder memory, then the feed-forward network,
    each a ``Slot`` (its module under ``.sublayer``, its norms beside it): ``mixer``, ``cross_attn``,
    ``ffn``. The placement says what each reads (``pre``) and how its output joins the residual
    stream (``post``): under pre, ``x = x + mixer(norm(x))``, ``x = x + cross(norm(x))``,
    ``x = x + ffn(norm(x))``."""

    def __init__(self, cfg: ModelConfig, ctx: LayerContext):
        super().__init__()
        self.ctx = ctx
        self.placement = PLACEMENTS.build(cfg.norm_placement, ctx)

        def slot(index: int, sublayer: nn.Module, kind=Slot) -> Slot:
            norms = {name: NORMS.build(cfg.norm, cfg.d_model) for name in self.placement.norm_slots(index)}
            return kind(sublayer, norms, cfg.dropout)

        self.mixer = slot(0, MIXERS.build(cfg.mixer, cfg, ctx), MixerSlot)  # marks its own output projection
        self.cross_attn = slot(1, CrossAttention(cfg, ctx)) if ctx.cross else None
        self.ffn = None  # ffn: none -- attention-only: no slot, so no branch and no norm for it
        if has_sublayer(cfg.ffn):
            ffn = FEEDFORWARD.build(cfg.ffn, FFNContext(cfg.d_model, cfg.d_ff, cfg.bias, cfg.dropout))  # marks its own output
            self.ffn = slot(2 if ctx.cross else 1, ffn)
        self.register_load_state_dict_pre_hook(renamed_slot_keys)  # checkpoints of earlier versions keep loading

    def slots(self) -> List[Slot]:
        return [s for s in (self.mixer, self.cross_attn, self.ffn) if s is not None]

    def new_state(self) -> LayerState:
        cross = KVCache() if self.cross_attn is None else self.cross_attn.sublayer.new_state()
        return LayerState(self.mixer.sublayer.new_state(), cross)

    def static_state(self, batch: int, columns: int, source_columns: Optional[int], dtype, device,
                     column: Tensor) -> LayerState:
        """The preallocated form (the compiled step's): ``columns`` decoder columns written at ``column``,
        ``source_columns`` of encoder memory for the cross-attention."""
        mixer = self.mixer.sublayer.static_state(batch, columns, dtype, device, column)
        if self.cross_attn is None:
            return LayerState(mixer, KVCache())
        return LayerState(mixer, self.cross_attn.sublayer.static_state(batch, source_columns, dtype, device))

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[LayerState] = None) -> Tensor:
        own, cross = (None, None) if state is None else (state.mixer, state.cross)
        p = self.placement
        if p.combines_itself():  # a plugin's placement that takes the slots and combines them
            return p.forward(x, self.slots(), self._branches(inputs, own, cross))
        if p.parallel:  # GPT-J, PaLM: the sublayers read the layer's input side by side
            return self._side_by_side(x, inputs, own)
        x = p.post(self.mixer, x, self.mixer(p.pre(self.mixer, x), inputs, own))
        if self.cross_attn is not None:
            x = p.post(self.cross_attn, x, self.cross_attn(p.pre(self.cross_attn, x), inputs.cross, cross))
        if self.ffn is not None:
            x = p.post(self.ffn, x, self.ffn(p.pre(self.ffn, x)))
        return x

    def _side_by_side(self, x: Tensor, inputs: MixerInputs, own) -> Tensor:
        p = self.placement
        h = p.pre(self.mixer, x)
        out = p.post(self.mixer, x, self.mixer(h, inputs, own))
        if self.ffn is not None:  # a shared norm: the ffn reads the mixer's input, its own slot has no norm
            out = p.post(self.ffn, out, self.ffn(h if p.shared_norm else p.pre(self.ffn, x)))
        return out

    def _branches(self, inputs: MixerInputs, own, cross) -> list:
        """Each slot with its inputs bound, h -> dropout(f(h)), for a placement's ``forward``."""
        branches = {self.mixer: lambda h: self.mixer(h, inputs, own),
                    self.cross_attn: lambda h: self.cross_attn(h, inputs.cross, cross), self.ffn: self.ffn}
        return [branches[slot] for slot in self.slots()]


def _in_attention(spec) -> bool:
    """The scheme rotates q and k or biases the scores, so its tables are shaped by a layer's heads."""
    return POSITIONS.get(spec.name).factory.acts_in_attention


class Stack(nn.Module):
    """Position scheme + layers + optional final norm: token embeddings in, hidden states out."""

    def __init__(self, cfg: ModelConfig, layer_cfgs: List[ModelConfig], causal: bool, cross: bool):
        super().__init__()
        n_layers = len(layer_cfgs)
        kind = kind_of(cfg)
        n_enc = cfg.encoder_layers if kind.has("encoder") else 0
        n_dec = cfg.decoder_layers if kind.has("decoder") else 0
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
                head_dim=rotary_dim(MIXERS.get(layer_cfg.mixer.name).factory, layer_cfg.mixer.options, layer_cfg))
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

    def _rows(self, rows: DocumentRows, positions: Tensor, tokens: Optional[Tensor],
              scheme: PositionScheme) -> DocumentRows:
        """``rows`` with the MixerInputs of one row per document (right-padded: ``valid`` the real ones)."""
        real = rows.valid if tokens is None else rows.valid & rows.gather(tokens)
        at = rows.gather(positions.expand(rows.starts.shape[0], -1))
        mask = self._with_bias(self_attention_mask(real.long(), real.shape[1], 0, self.causal, real.device),
                               at, at, cross=False, scheme=scheme)
        inputs = MixerInputs(mask, scheme.rotator(at, at), False, real, self.causal)
        return DocumentRows(rows.index, rows.valid, rows.back, rows.starts, inputs)

    def forward(self, x: Tensor, attention_mask: Optional[Tensor] = None, positions: Optional[Tensor] = None,
                memory: Optional[Tensor] = None, memory_mask: Optional[Tensor] = None,
                memory_positions: Optional[Tensor] = None, state: Optional[StackState] = None,
                need_weights: bool = False, document_ids: Optional[Tensor] = None) -> Tensor:
        """``state``: the decoding state (models/cache.py) the layers read and extend by the new
        positions; None: a pass that keeps nothing. ``document_ids`` (B, L): the packed documents each
        token belongs to, kept apart (``mixers.documents``; a pass that keeps nothing only)."""
        state = state if state is not None else StackState()
        length = x.shape[1]
        if document_ids is not None and type(state) is not StackState:
            raise ValueError("document_ids are for a pass that keeps no decoding state; decode from the last "
                             "document's tokens instead (generation does)")
        if document_ids is not None and positions is None:
            positions = positions_within(document_ids, default_positions(attention_mask, length, 0, x.device))
        positions, k_pos, mask = state.keys(positions, attention_mask, length, self.causal, x.device)
        rows, ways = None, set()
        if document_ids is not None:
            mask = within_documents(mask, document_ids)
            ways = {getattr(layer.mixer.sublayer, "document_boundaries", "rows") for layer in self.layers}
            rows = DocumentRows.of(document_ids) if ways - {"mask"} else None  # an attention-only stack: the mask
        tokens = None if attention_mask is None else attention_mask[:, -length:].bool()
        cross_mask = cross_attention_mask(memory_mask, length) if memory is not None else None
        if memory is not None and self.cross_positions and memory_positions is None:
            memory_positions = default_positions(memory_mask, memory.shape[1], 0, x.device)
        schemes = [self.position, *self.layer_positions]
        per_layer: dict = {}  # (self scheme, cross scheme) -> MixerInputs: biases and tables once per forward
        x = self.dropout(self.embedding_norm(self.position.embed(x, positions)))
        for i, layer in enumerate(self.layers):
            key = (self.scheme_of[i], self.cross_scheme_of[i])
            if key not in per_layer:
                own, cross = schemes[key[0]], schemes[key[1]]
                inputs = MixerInputs(self._with_bias(mask, positions, k_pos, cross=False, scheme=own),
                                     own.rotator(positions, positions), need_weights, tokens, self.causal)
                if rows is not None:
                    inputs.documents = self._rows(rows, positions, tokens, own) if "rows" in ways else rows
                if memory is not None:
                    inputs.cross = CrossInputs(cross_mask, None, need_weights, tokens, False, memory=memory)
                    if self.cross_positions:
                        inputs.cross.mask = self._with_bias(cross_mask, positions, memory_positions, cross=True,
                                                            scheme=cross)
                        inputs.cross.rotate = cross.rotator(positions, memory_positions)
                per_layer[key] = inputs
            x = layer(x, per_layer[key], state.layer(i))
        state.advance(positions)
        return self.final_norm(x)
