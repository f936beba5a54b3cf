"""Where a layer sits in the model, handed to the factories whose choice depends on it (placement,
DeepNorm's depth-derived constants, per-layer configs, an init scheme's ``init_layer``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..config.kinds import KINDS


@dataclass(frozen=True)
class LayerContext:
    index: int  # 0-based position in its stack
    depth: int  # layers in its stack
    stack: str  # "encoder" or "decoder"
    model_kind: str  # "encoder", "decoder" or "encoder_decoder"
    n_encoder_layers: int  # 0 where the model has no encoder
    n_decoder_layers: int  # 0 where the model has no decoder
    d_model: int = 0

    @property
    def cross(self) -> bool:
        """The layer attends to encoder memory (a decoder layer of an encoder-decoder model)."""
        return self.stack == "decoder" and KINDS[self.model_kind].cross_attention
