"""DiffLlama (``DiffLlamaForCausalLM``, ``DiffLlamaModel``): Llama with differential attention (Ye et al.
2025) in every layer. Its q/k/v/o projections are Llama's; each layer adds the four lambda vectors,
its lambda_init follows the layer's depth (0.8 - 0.6 exp(-0.3 i) at index i, the mixer's default) and
its per-pair RMSNorm (no gain) takes ``rms_norm_eps``."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import ROTARY_ANY, NotExpressible, spec
from . import llama

LAMBDAS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("attention_bias", False):  # HF's MLP has none; model.bias would give it biases too
        raise unsupported("diffllama", "attention_bias without feed-forward biases")
    cfg = llama.config(c, weights, "diffllama")
    cfg["mixer"] = {"name": "differential_attention", "norm_eps": c.get("rms_norm_eps", 1e-5),
                    "lambda_std": float(c.get("lambda_std_dev", 0.1))}
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    """Llama's, and ``o_proj``'s columns reordered: HF feeds it each head pair's 2 x head_dim outputs
    pair by pair; the mixer hands over the first halves of all pairs, then the second halves."""
    pairs, d = cfg.n_heads // 2, cfg.dim_per_head
    llama.weights(w, cfg)
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.mixer.sublayer.", f"layers.{i}.self_attn."
        w.copy(f"{a}out.weight", f"{h}o_proj.weight",
               lambda t: t.unflatten(1, (pairs, 2, d)).transpose(1, 2).flatten(1))
        for name in LAMBDAS:
            w.copy(f"{a}{name}", f"{h}{name}")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    mixer = spec(d, "mixer")
    if mixer["name"] != "differential_attention":
        raise NotExpressible(f"mixer {m.mixer.name}")
    if m.bias:  # DiffLlama's MLP has no biases
        raise NotExpressible("bias True")
    base = llama.write(m, d, "diffllama", "DiffLlamaForCausalLM")
    base.pop("mlp_bias")  # not read by DiffLlama
    return {**base, "lambda_std_dev": mixer.get("lambda_std", 0.1)}


FAMILY = register(HFFamily("diffllama", "DiffLlama", config, weights, write, mixers=("differential_attention",),
                           prefix="model.", ignore=ROTARY_ANY))
