"""The registry of Hugging Face families: one ``HFFamily`` per ``model_type``, declared by the family's
own module under ``families/`` (``families/__init__`` imports them all, in the order export tries them).

A leaf below ``hf.py``, ``export_hf.py`` and the family modules, so no family imports the module that
imports them all."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from torch import Tensor

from ..config import ModelConfig
from .checkpoint import CheckpointError, WeightMap


@dataclass(frozen=True)
class HFFamily:
    """Everything one Hugging Face family needs, both ways."""
    model_type: str  # config.json's "model_type"
    name: str  # as messages name the family ("Gemma 2")
    config: Callable[[dict, WeightMap], dict]  # HF config (+ which tensors exist) -> arch_zoo model mapping
    weights: Callable[[WeightMap, ModelConfig], None]  # arch_zoo tensor <- HF tensor(s); export runs it backwards
    write: Optional[Callable[[ModelConfig, dict], Dict[str, Any]]] = None  # ModelConfig -> HF config.json dict
    kind: str = "decoder"  # the arch_zoo model kind its writer is tried for
    mixers: Tuple[str, ...] = ("attention",)  # the mixers its layers take (decides which families export tries)
    prefix: str = ""  # base-model prefix in task-head classes ('transformer.' in GPT2LMHeadModel)
    ignore: Tuple[str, ...] = ()  # full-match patterns of tensors with no arch_zoo counterpart


FAMILIES: Dict[str, HFFamily] = {}
ARCHITECTURES = FAMILIES  # the name ``arch_zoo.interop`` has always exported


def register(family: HFFamily) -> HFFamily:
    FAMILIES[family.model_type] = family
    return family


def exporters(kind: str) -> List[HFFamily]:
    """The families that write models of ``kind``, in the order export tries them (registration order)."""
    return [f for f in FAMILIES.values() if f.kind == kind and f.write is not None]


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


def architecture(hf_config: Mapping[str, Any], where: str = "config") -> HFFamily:
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(where, f"model_type '{model_type}' is not supported; supported: "
                                     f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]
