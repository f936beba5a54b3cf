"""The registry of Hugging Face architectures and what their converters share.

A leaf below ``hf.py`` and the ``hf_*`` converters: each converter registers its ``HFArchitecture``
here and ``hf.py`` looks it up, so no converter imports the module that imports them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Tuple

from torch import Tensor

from ..config import ModelConfig
from .checkpoint import CheckpointError, WeightMap


@dataclass(frozen=True)
class HFArchitecture:
    model_type: str  # config.json's "model_type"
    config: Callable[[dict, WeightMap], dict]  # HF config (+ which tensors exist) -> arch_zoo model mapping
    weights: Callable[[WeightMap, ModelConfig], None]  # fill the WeightMap for a model built from that config
    prefix: str = ""  # base-model prefix in task-head classes ('transformer.' in GPT2LMHeadModel)
    ignore: Tuple[str, ...] = ()  # full-match patterns of tensors with no arch_zoo counterpart


ARCHITECTURES: Dict[str, HFArchitecture] = {}


def register(arch: HFArchitecture) -> HFArchitecture:
    ARCHITECTURES[arch.model_type] = arch
    return arch


def unsupported(model_type: str, what: str) -> CheckpointError:
    return CheckpointError(f"{model_type} config", f"{what} has no arch_zoo equivalent, so this model cannot be "
                                                   f"converted exactly")


FFN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def ffn_name(model_type: str, activation: str, table: Mapping[str, str] = FFN_ACTIVATIONS) -> str:
    if activation not in table:
        raise unsupported(model_type, f"activation '{activation}' (supported: {', '.join(sorted(table))})")
    return table[activation]


def transposed(w: Tensor) -> Tensor:
    return w.t()


def architecture(hf_config: Mapping[str, Any], where: str = "config") -> HFArchitecture:
    model_type = hf_config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise CheckpointError(where, f"model_type '{model_type}' is not supported; supported: "
                                     f"{', '.join(sorted(ARCHITECTURES))}")
    return ARCHITECTURES[model_type]
