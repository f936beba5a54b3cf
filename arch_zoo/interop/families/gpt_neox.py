"""GPT-NeoX / Pythia (``GPTNeoXForCausalLM``, ``GPTNeoXModel``): parallel residual with one norm per
sublayer, partial rotary, and a fused QKV projection laid out head by head."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import FFN_ACTIVATIONS, HFFamily, ffn_name, register, unsupported
from ..mapping import PARAMS, common, copy_each, inverse, per_head_qkv, plain_rope, shared_keys, spec


def config(c: dict, weights: WeightMap) -> dict:
    rope = plain_rope("gpt_neox", c)
    if not c.get("attention_bias", True):
        raise unsupported("gpt_neox", "attention_bias: false (its MLP keeps biases)")
    heads = c["num_attention_heads"]
    head_dim = c["hidden_size"] // heads
    # Hugging Face rotates int(head_dim * factor) dims; arch_zoo rounds head_dim * fraction, so pass the exact share
    rotated = int(head_dim * rope.get("partial_rotary_factor", c.get("rotary_pct", 0.25)))
    placement = {"name": "parallel", "shared_norm": False} if c.get("use_parallel_residual", True) else "pre"
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"],
        "d_model": c["hidden_size"], "n_layers": c["num_hidden_layers"], "n_heads": heads,
        "d_ff": c["intermediate_size"], "max_seq_len": c.get("max_position_embeddings", 2048),
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rotary_emb_base", 10000.0))),
                     "fraction": rotated / head_dim},
        "norm": {"name": "layernorm", "eps": c.get("layer_norm_eps", 1e-5)},
        "norm_placement": placement, "final_norm": True,
        "ffn": ffn_name("gpt_neox", c.get("hidden_act", "gelu")),
        "bias": True, **shared_keys(c, tie=False), **dropouts(c),
    }


def dropouts(c: dict) -> dict:
    """GPT-NeoX's and BLOOM's dropout keys."""
    return {"dropout": float(c.get("hidden_dropout") or 0.0),
            "attention_dropout": float(c.get("attention_dropout") or 0.0)}


def layer(w: WeightMap, cfg: ModelConfig, a: str, h: str, attention: str) -> None:
    """One layer as GPT-NeoX and BLOOM store it (``attention``: the attention module's name): two
    LayerNorms, the head-by-head fused QKV, the dense output and the 4h MLP, each with its bias."""
    copy_each(w, a, h, (("mixer.norm", "input_layernorm"), ("ffn.norm", "post_attention_layernorm"),
                        ("mixer.sublayer.out", f"{attention}.dense"), ("ffn.sublayer.up", "mlp.dense_h_to_4h"),
                        ("ffn.sublayer.down", "mlp.dense_4h_to_h")), PARAMS)
    copy_each(w, a, h, (("mixer.sublayer.qkv", f"{attention}.query_key_value"),), PARAMS, per_head_qkv(cfg.n_heads))


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_in.weight")
    for i in range(cfg.decoder_layers):
        layer(w, cfg, f"decoder.layers.{i}.", f"layers.{i}.", "attention")
    copy_each(w, "decoder.", "", (("final_norm", "final_layer_norm"),), PARAMS)
    w.copy("head.proj.weight", "embed_out.weight")  # Pythia's checkpoints
    w.copy("head.proj.weight", "lm_head.weight")  # what transformers 5 saves


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    position = spec(d, "position")
    return {**common(m, d), "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "rotary_emb_base": position.get("base", 10000.0), "rotary_pct": position.get("fraction", 0.25),
            "layer_norm_eps": spec(d, "norm").get("eps", 1e-5),
            "use_parallel_residual": spec(d, "norm_placement")["name"] == "parallel",
            "hidden_act": inverse(FFN_ACTIVATIONS, spec(d, "ffn")["name"], "ffn"), "attention_bias": m.bias,
            "hidden_dropout": m.dropout, "attention_dropout": m.rate("attention_dropout")}


FAMILY = register(HFFamily(
    "gpt_neox", "GPT-NeoX", config, weights, write, prefix="gpt_neox.",
    # recomputed rotary tables and causal-mask buffers of older checkpoints
    ignore=(r"(layers\.\d+\.attention\.)?rotary_emb\.inv_freq", r"layers\.\d+\.attention\.(bias|masked_bias)"),
))
