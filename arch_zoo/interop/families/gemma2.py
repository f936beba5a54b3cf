"""Gemma 2 (``Gemma2ForCausalLM``, ``Gemma2Model``): sandwich norms, attention and final logit
soft-capping, scaled embeddings, gated tanh-GELU, query_pre_attn_scalar.

Gemma's RMSNorm multiplies by (1 + weight): the import keeps weight as it is in a
``zero_centred_rmsnorm``, which computes the same float32 sum, so the export gives it back bit for
bit. Local/global alternation (``layer_types``: ``sliding_attention`` on even layers,
``full_attention`` on odd ones by default) becomes per-layer attention (``layer_attention``):
``attention: global`` plus
``layers: [{pattern: [{attention: sliding_window}, {}]}]``; any other ``layer_types`` list maps layer by
layer. Sliding windows have no weights, so the tensors map as without alternation.
"""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, ffn_name, register, unsupported
from ..mapping import (ATTENTION_TYPES, ROTARY, copy_each, decoder_layers, integral, inverse, layer_attention, spec,
                       written_layer_types)
from . import llama

ACTIVATIONS = {**llama.GATED, "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh"}


def config(c: dict, weights: WeightMap) -> dict:
    n = c["num_hidden_layers"]
    attention, layers = layer_attention("gemma2", c, [ATTENTION_TYPES[i % 2] for i in range(n)],
                                        repeating=True)
    if c.get("use_bidirectional_attention"):
        raise unsupported("gemma2", "use_bidirectional_attention: true")
    base = llama.config({**c, "hidden_act": "silu", "mlp_bias": c.get("attention_bias", False)}, weights)
    return {**base,
            "norm": {"name": "zero_centred_rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)},
            "norm_placement": "sandwich",
            "ffn": ffn_name("gemma2", c.get("hidden_activation") or c.get("hidden_act", "gelu_pytorch_tanh"),
                            ACTIVATIONS),
            "attention_scale": float(c.get("query_pre_attn_scalar", 256)) ** -0.5,
            "attn_logit_softcap": c.get("attn_logit_softcapping"),
            "final_logit_softcap": c.get("final_logit_softcapping"),
            "scale_embeddings": True,
            "tie_embeddings": c.get("tie_word_embeddings", True),
            "attention": attention, "layers": layers}


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for _, a, h in decoder_layers(w, cfg, norms=("input_layernorm", "pre_feedforward_layernorm")):
        llama.attention_and_mlp(w, a, h)
        copy_each(w, a, h, (("mixer.post_norm", "post_attention_layernorm"),
                            ("ffn.post_norm", "post_feedforward_layernorm")))
    w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    base = llama.write(m, d, "gemma2", "Gemma2ForCausalLM", ffn={"name": "swiglu"})
    for key in ("hidden_act", "mlp_bias"):
        base.pop(key)
    scale = m.attention_scale if m.attention_scale is not None else m.dim_per_head ** -0.5
    return {**base, **written_layer_types(m),
            "hidden_activation": inverse({"gelu_pytorch_tanh": "geglu_tanh", **llama.GATED}, spec(d, "ffn")["name"],
                                         "ffn"),
            "query_pre_attn_scalar": integral(scale ** -2), "attn_logit_softcapping": m.attn_logit_softcap,
            "final_logit_softcapping": m.final_logit_softcap}


FAMILY = register(HFFamily("gemma2", "Gemma 2", config, weights, write, prefix="model.", ignore=ROTARY))
