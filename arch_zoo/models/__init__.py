"""Transformer models assembled from a ModelConfig. Needs torch alone (no Lightning, wandb, pandas)."""
from .transformer import (Cache, DecoderModel, EncoderDecoderModel, EncoderModel, ModelOutput,
                          TransformerModel, build_model)

__all__ = ["Cache", "DecoderModel", "EncoderDecoderModel", "EncoderModel", "ModelOutput", "TransformerModel",
           "build_model"]
