"""Hugging Face models and checkpoints -> arch_zoo models.

Nothing here imports ``transformers``: a converter reads the reference's config as a plain dict
(``model.config.to_dict()`` or ``config.json``) and its state dict (``model.state_dict()`` or the
safetensors files), so a local checkpoint directory loads with torch and safetensors alone.

Each supported ``model_type`` registers an ``HFFamily`` (``families/<model_type>.py``): how its config
becomes an arch_zoo model config, and how its tensors are renamed. The weights go through ``load_checked``, so a
checkpoint that does not fit the config fails at the first tensor, naming it and both shapes.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from torch import Tensor

from ..config import ModelConfig
from . import families  # noqa: F401  (each family registers itself)
from .checkpoint import ConfigLike, WeightMap, read_checkpoint_config, read_checkpoint_weights, resolve_config
from .family import architecture


def _strip(state: Mapping[str, Tensor], prefix: str) -> Dict[str, Tensor]:
    """Task-head classes keep the base model under a prefix; accept both layouts."""
    if prefix and any(k.startswith(prefix) for k in state):
        return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
    return dict(state)


def convert(hf_config: Mapping[str, Any], state: Mapping[str, Tensor], config: ConfigLike = None,
            changes: Optional[Mapping[str, Any]] = None, where: str = "config"):
    """An arch_zoo model (eval mode, float32) holding the reference's weights.

    ``config``: the arch_zoo architecture to load into (``preset:NAME``, a YAML path, a mapping or a
    ModelConfig); by default it is derived from ``hf_config``. ``changes`` are merged on top, e.g.
    ``{"attention_kernel": "explicit"}``."""
    from ..models import build_model

    arch = architecture(hf_config, where)
    weights = WeightMap(_strip(state, arch.prefix), arch.ignore)
    cfg = resolve_config(arch.config(dict(hf_config), weights), config, changes)
    model = build_model(cfg, cfg.vocab_size or hf_config.get("vocab_size"))
    arch.weights(weights, model.config)
    return weights.load(model).eval()


def model_config_from_hf(hf_model) -> ModelConfig:
    """The arch_zoo config equivalent to a Hugging Face model (GPT2LMHeadModel, BertModel, ...)."""
    from ..config.loading import model_config

    hf_config = hf_model.config.to_dict()
    arch = architecture(hf_config)
    return model_config(arch.config(hf_config, WeightMap(_strip(hf_model.state_dict(), arch.prefix))))


def from_hf(hf_model, config: ConfigLike = None, changes: Optional[Mapping[str, Any]] = None):
    """Convert an in-memory Hugging Face model: GPT2LMHeadModel/GPT2Model, BertForMaskedLM/BertModel,
    LlamaForCausalLM, T5ForConditionalGeneration (T5 1.0 and 1.1), Qwen3ForCausalLM,
    MistralForCausalLM, MixtralForCausalLM, GPTNeoXForCausalLM (Pythia), BloomForCausalLM and
    Gemma2ForCausalLM (``ARCHITECTURES`` lists the model types). A bare LlamaModel has no output
    projection to take; ``changes={"tie_embeddings": True}`` gives its hidden states with a tied head."""
    return convert(hf_model.config.to_dict(), hf_model.state_dict(), config, changes,
                   where=type(hf_model).__name__)


def load_hf_checkpoint(path, config: ConfigLike = None, changes: Optional[Mapping[str, Any]] = None):
    """Load a local Hugging Face checkpoint directory (config.json + model.safetensors); no network."""
    hf_config = read_checkpoint_config(path)
    where = f"{path}/config.json"
    architecture(hf_config, where)  # an unsupported model is refused before its weights are read
    return convert(hf_config, read_checkpoint_weights(path), config, changes, where=where)

