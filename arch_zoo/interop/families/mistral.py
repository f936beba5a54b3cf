"""Mistral (``MistralForCausalLM``): Llama with one ``sliding_window`` (None: global attention) on
every layer."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register
from ..mapping import ROTARY, NotExpressible, written_layer_types
from . import llama


def uniform_window(c: dict):
    """``model.attention``: the config's ``sliding_window`` on every layer, or global attention."""
    window = c.get("sliding_window")
    return "global" if window is None else {"name": "sliding_window", "window": int(window)}


def config(c: dict, weights: WeightMap) -> dict:
    return {**llama.config(c, weights), "attention": uniform_window(c), "layers": None}


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    types = written_layer_types(m)
    if len(set(types["layer_types"])) > 1:
        raise NotExpressible("attention differing between layers")
    return {**llama.write(m, d, "mistral", "MistralForCausalLM"), "sliding_window": types["sliding_window"]}


FAMILY = register(HFFamily("mistral", "Mistral", config, llama.weights, write, prefix="model.", ignore=ROTARY))
