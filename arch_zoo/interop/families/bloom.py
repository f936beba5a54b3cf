"""BLOOM (``BloomForCausalLM``, ``BloomModel``): ALiBi, a LayerNorm over the embeddings, and GPT-NeoX's
layer layout (head-by-head fused QKV) under other names.

Hugging Face adds slope * (key position) to the scores, the positions counted over real tokens
(attention mask cumsum - 1); arch_zoo adds -slope * |query - key| with the same positions (real
tokens from 0, left padding included). Under the causal mask the two differ by a constant per
query row, which softmax ignores: the same attention, padded on either side.
"""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import PARAMS, common, copy_each, shared_keys, spec
from . import gpt_neox


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("apply_residual_connection_post_layernorm"):
        raise unsupported("bloom", "apply_residual_connection_post_layernorm: true (a residual taken after the norm)")
    d_model = c.get("hidden_size") or c["n_embed"]
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"],
        "d_model": d_model, "n_layers": c["n_layer"], "n_heads": c["n_head"],
        "d_ff": 4 * d_model, "max_seq_len": c.get("seq_length", 2048),
        "position": {"name": "alibi", "max_bias": 8.0}, "embedding_norm": True,
        "norm": {"name": "layernorm", "eps": c.get("layer_norm_epsilon", 1e-5)},
        "norm_placement": "pre", "final_norm": True,
        "ffn": "gelu_tanh",  # BLOOM's own GELU: the tanh form, written out
        "bias": True, **shared_keys(c, tie=True), **gpt_neox.dropouts(c),
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "word_embeddings.weight")
    copy_each(w, "decoder.", "", (("embedding_norm", "word_embeddings_layernorm"), ("final_norm", "ln_f")), PARAMS)
    for i in range(cfg.decoder_layers):
        gpt_neox.layer(w, cfg, f"decoder.layers.{i}.", f"h.{i}.", "self_attention")
    w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    return {**common(m, d), "model_type": "bloom", "architectures": ["BloomForCausalLM"],
            "hidden_size": m.d_model, "n_layer": m.n_layers, "n_head": m.n_heads, "seq_length": m.max_seq_len,
            "layer_norm_epsilon": spec(d, "norm").get("eps", 1e-5),
            "hidden_dropout": m.dropout, "attention_dropout": m.rate("attention_dropout")}


FAMILY = register(HFFamily("bloom", "BLOOM", config, weights, write, prefix="transformer."))
