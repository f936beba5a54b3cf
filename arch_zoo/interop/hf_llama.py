"""Llama (``LlamaForCausalLM``, ``LlamaModel``): separate q/k/v projections are fused here."""
from __future__ import annotations

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, ffn_name, register, unsupported

GATED = {"silu": "swiglu", "gelu": "geglu", "relu": "reglu"}


def llama_config(c: dict, weights: WeightMap, model_type: str = "llama") -> dict:
    """``model_type``: the family named when a setting has no equivalent (a Llama descendant's own)."""
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise unsupported(model_type, f"rope_type '{rope_type}'")
    if c.get("attention_bias", False) != c.get("mlp_bias", False):
        raise unsupported(model_type, "attention_bias differing from mlp_bias")
    heads = c["num_attention_heads"]
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"],
        "d_model": c["hidden_size"], "n_layers": c["num_hidden_layers"], "n_heads": heads,
        "n_kv_heads": c.get("num_key_value_heads") or heads,
        "head_dim": c.get("head_dim") or c["hidden_size"] // heads,
        "d_ff": c["intermediate_size"], "max_seq_len": c.get("max_position_embeddings", 2048),
        # HF's Llama-style classes rotate whole heads whatever partial_rotary_factor says
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 10000.0)))},
        "norm": {"name": "rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)},
        "norm_placement": "pre", "final_norm": True,
        "ffn": ffn_name(model_type, c.get("hidden_act", "silu"), GATED),
        "bias": bool(c.get("attention_bias", False)),
        "tie_embeddings": c.get("tie_word_embeddings", False),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": False},
        "dropout": 0.0, "attention_dropout": float(c.get("attention_dropout") or 0.0),
        "pad_token_id": c.get("pad_token_id") or 0,
    }


def llama_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_tokens.weight")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        for p in ("weight", "bias"):
            w.fuse(f"{a}mixer.sublayer.qkv.{p}", [f"{h}self_attn.{x}_proj.{p}" for x in "qkv"])
            w.copy(f"{a}mixer.sublayer.out.{p}", f"{h}self_attn.o_proj.{p}")
            w.copy(f"{a}ffn.sublayer.gate.{p}", f"{h}mlp.gate_proj.{p}")
            w.copy(f"{a}ffn.sublayer.up.{p}", f"{h}mlp.up_proj.{p}")
            w.copy(f"{a}ffn.sublayer.down.{p}", f"{h}mlp.down_proj.{p}")
        w.copy(f"{a}mixer.norm.weight", f"{h}input_layernorm.weight")
        w.copy(f"{a}ffn.norm.weight", f"{h}post_attention_layernorm.weight")
    w.copy("decoder.final_norm.weight", "norm.weight")
    w.copy("head.proj.weight", "lm_head.weight")


register(HFArchitecture(
    "llama", llama_config, llama_weights, prefix="model.",
    ignore=(r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",),  # recomputed, not learned
))
