"""The three model kinds, each built from a resolved ModelConfig (``build_model``, in ``build``).

Every model takes (batch, length) token ids plus Hugging Face style padding information
(``attention_mask``: 1 for real tokens) and returns a ``ModelOutput`` with the logits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Union

import torch
from torch import Tensor, nn

from ..components.heads import EMBEDDING, HEADS, HeadContext
from ..components.init import INITS
from ..components.parametrization import PARAMETRIZATIONS, readout
from ..config import ModelConfig
from ..config.schema import ResolvedModel
from ..config.validation import resolve_layers
from ..errors import ConfigError
from .blocks import Stack
from .build import MODEL_KINDS, build_model, model_kind  # noqa: F401  (build_model: its long-standing import path)
from .cache import Cache, StackState
from .renamed_keys import for_transformers


@dataclass
class ModelOutput:
    logits: Tensor
    hidden: Tensor
    cache: Optional[StackState] = None
    attentions: Optional[List[Tensor]] = None  # per layer, with need_weights and the explicit backend
    extras: dict = field(default_factory=dict)


class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size: int, d_model: int, multiplier: float, padding_idx: int):
        super().__init__(vocab_size, d_model)
        self.multiplier = multiplier

    def forward(self, ids: Tensor) -> Tensor:
        x = super().forward(ids)
        return x * self.multiplier if self.multiplier != 1.0 else x


class TransformerModel(nn.Module):
    """Shared plumbing: config, embeddings, head, init and tying."""

    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.config = cfg
        self.vocab_size = vocab_size
        self.parametrization = PARAMETRIZATIONS.build(cfg.parametrization, cfg)  # a plain object: no state
        self.embed = self.token_embedding()
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.head = HEADS.build(cfg.head, HeadContext(cfg.d_model, vocab_size, cfg.bias))
        logit_multiplier = self.parametrization.logit_multiplier() if self.head.produces != EMBEDDING else 1.0
        self.logit_multiplier = logit_multiplier if logit_multiplier != 1.0 else None

    def token_embedding(self) -> TokenEmbedding:
        cfg = self.config
        multiplier = self.parametrization.embedding_multiplier() if cfg.scale_embeddings else 1.0
        return TokenEmbedding(self.vocab_size, cfg.d_model, multiplier, cfg.pad_token_id)

    def _finish(self) -> None:
        n_layers = sum(len(m.layers) for m in self.modules() if isinstance(m, Stack))
        init = INITS.build(self.config.init, n_layers)
        init(self)
        init_layer = getattr(init, "init_layer", None)  # a plugin's plain callable may not have one
        for stack in (m for m in self.modules() if isinstance(m, Stack)):
            for layer in stack.layers:
                if init_layer is not None:
                    init_layer(layer, layer.ctx)
                layer.placement.after_init(layer.slots())
        if self.config.tie_embeddings and hasattr(self.head, "tie"):
            self.head.tie(self.output_embedding())
        self.parametrization.rescale_init(self, init)  # once tied: a tied readout is an embedding

    def output_embedding(self) -> nn.Embedding:
        """The embedding a tied head shares: the tokens the model predicts."""
        return self.embed

    def logits(self, hidden: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        """The head's output (its readout's product times the parametrization's multiplier, mup's
        base_width / d_model), soft-capped to (-cap, cap) when model.final_logit_softcap is set (Gemma 2)."""
        out = self.head(hidden, attention_mask)
        if self.logit_multiplier is not None:
            out = out * self.logit_multiplier
            bias = getattr(readout(self), "bias", None)
            if bias is not None:  # as mup's MuReadout, W (x / m) + b: a bias scaled too would learn m times slower
                out = out + bias * (1.0 - self.logit_multiplier)
        cap = self.config.final_logit_softcap
        return out if cap is None else torch.tanh(out / cap) * cap

    def embed_tokens(self, input_ids: Tensor, token_type_ids: Optional[Tensor] = None) -> Tensor:
        """Token embeddings plus token-type embeddings (type 0 where ``token_type_ids`` is None, as in BERT)."""
        x = self.embed(input_ids)
        if self.token_type is None:
            if token_type_ids is not None:
                raise ValueError("token_type_ids were given but model.type_vocab_size is 0")
            return x
        types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        return x + self.token_type(types)

    def _attentions(self, stack: Stack, need: bool):
        if not need:
            return None
        return [w for layer in stack.layers for w in
                (getattr(layer.mixer.sublayer, "last_weights", None),
                 layer.cross_attn.sublayer.last_weights if layer.cross_attn is not None else None) if w is not None]

    def new_cache(self) -> Cache:
        return Cache([layer.new_state() for layer in self.decoder.layers])


@model_kind("encoder")
class EncoderModel(TransformerModel):
    """Bidirectional encoder with a classification, token-classification, MLM or embedding head."""

    def __init__(self, cfg: Union[ModelConfig, ResolvedModel], vocab_size: int):
        resolved = resolve_layers(cfg)
        super().__init__(resolved.config, vocab_size)
        self.encoder = Stack(resolved.config, resolved.layers("encoder"), causal=False, cross=False)
        self._finish()

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
                positions: Optional[Tensor] = None, need_weights: bool = False,
                token_type_ids: Optional[Tensor] = None, document_ids: Optional[Tensor] = None) -> ModelOutput:
        hidden = self.encoder(self.embed_tokens(input_ids, token_type_ids), attention_mask, positions,
                              need_weights=need_weights, document_ids=document_ids)
        return ModelOutput(self.logits(hidden, attention_mask), hidden,
                           attentions=self._attentions(self.encoder, need_weights))


def _last(hidden: Tensor, n: int) -> Tensor:
    return hidden[:, -n:] if n else hidden


@model_kind("decoder")
class DecoderModel(TransformerModel):
    """Causal language model."""

    def __init__(self, cfg: Union[ModelConfig, ResolvedModel], vocab_size: int):
        resolved = resolve_layers(cfg)
        super().__init__(resolved.config, vocab_size)
        self.decoder = Stack(resolved.config, resolved.layers("decoder"), causal=True, cross=False)
        self._finish()

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
                positions: Optional[Tensor] = None, cache: Optional[StackState] = None,
                need_weights: bool = False, logits_to_keep: int = 0,
                document_ids: Optional[Tensor] = None) -> ModelOutput:
        """With ``cache`` (a Cache, or the compiled step's StaticCache), ``input_ids`` are the new tokens
        only and ``attention_mask`` covers the cached plus the new positions; the cache is extended in
        place. ``logits_to_keep`` > 0 projects only the last that many positions onto the vocabulary (0: all), as in HF.
        ``document_ids`` (B, L; no cache): packed documents kept apart, each given the logits it gets alone."""
        hidden = self.decoder(self.embed(input_ids), attention_mask, positions, state=cache, need_weights=need_weights,
                              document_ids=document_ids)
        return ModelOutput(self.logits(_last(hidden, logits_to_keep)), hidden, cache,
                           self._attentions(self.decoder, need_weights))


@model_kind("encoder_decoder")
class EncoderDecoderModel(TransformerModel):
    """Encoder over the source; decoder with causal self-attention and cross-attention to the memory."""

    def __init__(self, cfg: Union[ModelConfig, ResolvedModel], vocab_size: int):
        resolved = resolve_layers(cfg)
        super().__init__(resolved.config, vocab_size)
        cfg = resolved.config
        self.encoder = Stack(cfg, resolved.layers("encoder"), causal=False, cross=False)
        self.decoder = Stack(cfg, resolved.layers("decoder"), causal=True, cross=True)
        self.decoder_embed = self.embed if cfg.tie_encoder_decoder_embeddings else self.token_embedding()
        self._finish()

    def output_embedding(self) -> nn.Embedding:
        return self.decoder_embed  # the output projection predicts target tokens

    def encode(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
               positions: Optional[Tensor] = None) -> Tensor:
        return self.encoder(self.embed(input_ids), attention_mask, positions)

    def decode(self, decoder_input_ids: Tensor, memory: Tensor, attention_mask: Optional[Tensor] = None,
               decoder_attention_mask: Optional[Tensor] = None, decoder_positions: Optional[Tensor] = None,
               cache: Optional[StackState] = None, need_weights: bool = False, logits_to_keep: int = 0) -> ModelOutput:
        """``attention_mask`` is the source padding mask; see DecoderModel.forward for the cache."""
        hidden = self.decoder(self.decoder_embed(decoder_input_ids), decoder_attention_mask, decoder_positions,
                              memory=memory, memory_mask=attention_mask, state=cache, need_weights=need_weights)
        return ModelOutput(self.logits(_last(hidden, logits_to_keep)), hidden, cache,
                           self._attentions(self.decoder, need_weights))

    def forward(self, input_ids: Tensor, decoder_input_ids: Tensor, attention_mask: Optional[Tensor] = None,
                decoder_attention_mask: Optional[Tensor] = None, need_weights: bool = False) -> ModelOutput:
        memory = self.encode(input_ids, attention_mask)
        out = self.decode(decoder_input_ids, memory, attention_mask, decoder_attention_mask,
                          need_weights=need_weights)
        out.extras["memory"] = memory
        return out
