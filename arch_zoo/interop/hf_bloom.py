"""BLOOM (``BloomForCausalLM``, ``BloomModel``): ALiBi, a LayerNorm over the embeddings, and GPT-NeoX's
head-by-head fused QKV layout.

Hugging Face adds slope * (key position) to the scores, the positions counted over real tokens
(attention mask cumsum - 1); arch_zoo adds -slope * |query - key| with the same positions (real
tokens from 0, left padding included). Under the causal mask the two differ by a constant per
query row, which softmax ignores: the same attention, padded on either side.
"""
from __future__ import annotations

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, register, unsupported
from .hf_neox import per_head_qkv


def bloom_config(c: dict, weights: WeightMap) -> dict:
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
        "bias": True,
        "tie_embeddings": c.get("tie_word_embeddings", True),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": False},
        "dropout": float(c.get("hidden_dropout") or 0.0), "attention_dropout": float(c.get("attention_dropout") or 0.0),
        "pad_token_id": c.get("pad_token_id") or 0,
    }


def bloom_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "word_embeddings.weight")
    reorder = per_head_qkv(cfg.n_heads)
    for p in ("weight", "bias"):
        w.copy(f"decoder.embedding_norm.{p}", f"word_embeddings_layernorm.{p}")
        for i in range(cfg.decoder_layers):
            a, h = f"decoder.layers.{i}.", f"h.{i}."
            w.copy(f"{a}mixer.norm.{p}", f"{h}input_layernorm.{p}")
            w.copy(f"{a}ffn.norm.{p}", f"{h}post_attention_layernorm.{p}")
            w.copy(f"{a}mixer.sublayer.qkv.{p}", f"{h}self_attention.query_key_value.{p}", reorder)
            w.copy(f"{a}mixer.sublayer.out.{p}", f"{h}self_attention.dense.{p}")
            w.copy(f"{a}ffn.sublayer.up.{p}", f"{h}mlp.dense_h_to_4h.{p}")
            w.copy(f"{a}ffn.sublayer.down.{p}", f"{h}mlp.dense_4h_to_h.{p}")
        w.copy(f"decoder.final_norm.{p}", f"ln_f.{p}")
    w.copy("head.proj.weight", "lm_head.weight")


register(HFArchitecture("bloom", bloom_config, bloom_weights, prefix="transformer."))
