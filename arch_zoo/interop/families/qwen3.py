"""Qwen3 (``Qwen3ForCausalLM``): Llama with q/k RMSNorm; with ``use_sliding_window`` it windows the
layers from ``max_window_layers`` on (``layer_types``)."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register
from ..mapping import ATTENTION_TYPES, ROTARY, layer_attention, qk_norms, written_layer_types
from . import llama


def config(c: dict, weights: WeightMap) -> dict:
    cfg = llama.config(c, weights)
    on = c.get("use_sliding_window") and c.get("sliding_window") is not None
    first = c.get("max_window_layers", 28)
    cfg["attention"], cfg["layers"] = layer_attention(
        "qwen3", c, [ATTENTION_TYPES[0] if on and i >= first else ATTENTION_TYPES[1]
                     for i in range(c["num_hidden_layers"])], repeating=False)
    cfg["qk_norm"] = {"name": "rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)}
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    llama.weights(w, cfg)
    for i in range(cfg.decoder_layers):
        qk_norms(w, f"decoder.layers.{i}.mixer.sublayer.", f"layers.{i}.self_attn.")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    types = written_layer_types(m)
    sliding = types["layer_types"].count("sliding_attention")
    first = m.n_layers - sliding  # Qwen3 windows the layers from max_window_layers on
    return {**llama.write(m, d, "qwen3", "Qwen3ForCausalLM"), **types, "use_sliding_window": bool(sliding),
            "max_window_layers": first if sliding else m.n_layers}


FAMILY = register(HFFamily("qwen3", "Qwen3", config, weights, write, prefix="model.", ignore=ROTARY))
