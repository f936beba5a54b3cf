"""The token mixer: the sublayer that moves information between positions (``model.mixer``).

A layer is ``x + mixer(norm(x))`` then ``x + ffn(norm(x))`` under its placement; the mixer is one
registered class. Every mixer takes the same call, ``mixer(x, inputs, state)``: ``x`` (B, L, d_model)
the new positions, ``inputs`` what the stack computed once for all layers (``MixerInputs``), ``state``
its own decoding state (``components.state``; None when not decoding) which it reads and extends by
the positions it is given. Besides the forward, a mixer declares, so nothing else branches on it:

* ``stacks``: which stacks it can serve ("decoder": causal; "encoder": bidirectional);
* ``new_state()`` / ``static_state(...)``: its eager and preallocated decoding state, and
  ``static_unsupported()``: why a compiled static step cannot follow it (None: it can);
* ``mixing_flops(length, causal)``: forward FLOPs over one sequence beyond its linear layers (which
  are counted from the modules), and ``step_mixing_flops(context)`` for one decoding step after
  ``context`` positions; ``flops_per_token`` and ``decode_flops`` below add the two;
* ``state_elements(context)``: numbers its decoding state holds after ``context`` positions;
* ``document_boundaries``: how it keeps the documents of a packed row apart (``mixers.documents``):
  "rows" by default (the layer runs each document as a row of its own: always correct), "mask" for a
  mixer that moves information only through ``inputs.mask``, "native" for one that resets its state at
  ``inputs.documents.starts`` itself.

A mixer that attends declares what attention reads (``mixers.attention``: ``reads_attention_keys``,
``rotary_dim``, ``score_width``); the base knows nothing of heads that rotate or scores.

Padding: ``inputs.tokens`` marks the new positions that hold real tokens. A causal mixer must leave
its state as it was across a padded position (left-padded prompts), so a row's real tokens see what
they would see unpadded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Tuple

import torch
from torch import Tensor, nn

from ...registry import Registry
from ..flops import linear_flops
from ..masks import AttentionMask
from ..state import DecodingState

MIXERS = Registry("mixers", "sequence mixer")

STACKS = ("decoder", "encoder")


@dataclass
class MixerInputs:
    """What the stack computes once per forward and every mixer slot of a layer reads besides x:
    ``mask`` over the keys it may read ((B|1, H|1, L, keys), the padding, causality and any score bias),
    ``rotate`` the position scheme's q/k rotation at the new positions (None: it rotates nothing),
    ``tokens`` (B, L) bool the new positions that hold a real token (None: all of them), ``causal``
    whether it serves a causal stack. A decoder layer with cross-attention finds that slot's own
    inputs under ``cross`` (``mixers.attention.CrossInputs``: the memory and its mask). ``documents``
    (``mixers.documents.DocumentRows``; None: one document a row) says where packed documents start."""

    mask: AttentionMask
    rotate: Optional[Callable] = None
    need_weights: bool = False
    tokens: Optional[Tensor] = None
    causal: bool = True
    cross: Optional["MixerInputs"] = None
    documents: Optional[Any] = None


class Mixer(nn.Module):
    """The interface; a subclass registers with ``@MIXERS.register(name, Options)`` and is built as
    ``cls(options, cfg, ctx)``: its options, the layer's ModelConfig and its LayerContext."""

    stacks: ClassVar[Tuple[str, ...]] = ("decoder",)
    example_options: ClassVar[dict] = {}
    part: ClassVar[str] = "mixer"  # what parameter and FLOP breakdowns file it under ("decoder mixer")
    # whether it reads the model's n_heads / n_kv_heads / head_dim itself; False where its own options
    # hold its head counts and widths (``resolved_options`` fills their nulls from the model), so the
    # model's values decide nothing in its layers (a pure Mamba-2 model's n_heads exports as Mamba-2)
    reads_model_heads: ClassVar[bool] = True
    # how the documents of a packed row are kept apart (mixers.documents.WAYS): "rows" is right for any mixer
    document_boundaries: ClassVar[str] = "rows"

    def forward(self, x: Tensor, inputs: MixerInputs, state: Optional[DecodingState] = None) -> Tensor:
        raise TypeError("Mixer is abstract; use a registered mixer")

    @classmethod
    def check(cls, options, cfg, key: str) -> None:
        """Raise ConfigError (naming the key under ``key``, the model's) if the options do not fit the
        layer's ModelConfig ``cfg``; called before building."""

    @classmethod
    def resolved_options(cls, options, cfg):
        """The options with every null that the layer's ModelConfig fills written out, so that two
        spellings of one function compare equal (the export's ``function_view``)."""
        return options

    @classmethod
    def stacks_of(cls, options) -> Tuple[str, ...]:
        """The stacks it serves with ``options`` (a composite's: those all its branches serve)."""
        return cls.stacks

    def new_state(self) -> DecodingState:
        raise TypeError(f"{type(self).__name__} has no decoding state")

    def static_state(self, batch: int, columns: int, dtype, device, column: Tensor) -> DecodingState:
        raise TypeError(f"{type(self).__name__} has no static decoding state")

    def static_unsupported(self) -> Optional[str]:
        return None

    def mixing_flops(self, length: int, causal: bool) -> float:
        return 0.0

    def step_mixing_flops(self, context: int) -> float:
        return 0.0

    def state_elements(self, context: int) -> int:
        return 0


def flops_per_token(mixer: Mixer, length: int, causal: bool = True) -> float:
    """Forward FLOPs per token of ``mixer`` over sequences of ``length`` (a training step: ~3x)."""
    return linear_flops(mixer) + mixer.mixing_flops(length, causal) / length


def decode_flops(mixer: Mixer, context: int) -> float:
    """FLOPs of one decoding step of ``mixer`` with ``context`` positions before it."""
    return linear_flops(mixer) + mixer.step_mixing_flops(context)


def state_bytes_per_token(mixer: Mixer, context: int, dtype: torch.dtype = torch.float32) -> float:
    """Decoding-state bytes per token at ``context`` positions: a K/V cache's cost per key; a
    fixed-size state's size spread over the context."""
    return mixer.state_elements(context) * torch.empty((), dtype=dtype).element_size() / context


def serves(spec, stack: str) -> bool:
    """Whether the mixer ``spec`` (a ComponentSpec) can serve a stack ("encoder" or "decoder")."""
    return stack in MIXERS.get(spec.name).factory.stacks_of(spec.options)


def real_tokens(inputs: MixerInputs, x: Tensor) -> Optional[Tensor]:
    """(B, L, 1) in x's dtype: 1 at real tokens, 0 at padding; None without padding."""
    return None if inputs.tokens is None else inputs.tokens.unsqueeze(-1).to(x.dtype)
