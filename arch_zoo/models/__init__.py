"""Transformer models assembled from a ModelConfig. Needs torch alone (no Lightning, wandb, pandas)."""
from .build import build_model
from .transformer import (Cache, DecoderModel, EncoderDecoderModel, EncoderModel, ModelOutput,
                          TransformerModel)

__all__ = ["Cache", "DecoderModel", "EncoderDecoderModel", "EncoderModel", "ModelOutput", "TransformerModel",
           "build_model"]
