"""Llama (``LlamaForCausalLM``, ``LlamaModel``): separate q/k/v projections are fused here. Most
decoder families descend from it and start from its ``config``, ``weights`` and ``write``."""
from __future__ import annotations

from typing import Any, Dict, Optional

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, ffn_name, register, unsupported
from ..mapping import PARAMS, ROTARY, common, copy_each, decoder_layers, inverse, plain_rope, shared_keys, spec

GATED = {"silu": "swiglu", "gelu": "geglu", "relu": "reglu"}


def config(c: dict, weights: WeightMap, model_type: str = "llama") -> dict:
    """``model_type``: the family named when a setting has no equivalent (a Llama descendant's own)."""
    rope = plain_rope(model_type, c)
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
        **shared_keys(c, tie=False),
        "dropout": 0.0, "attention_dropout": float(c.get("attention_dropout") or 0.0),
    }


def attention_and_mlp(w: WeightMap, a: str, h: str) -> None:
    """One layer's q/k/v (fused), o and gated MLP, with their biases where the checkpoint has them."""
    for p in PARAMS:
        w.fuse(f"{a}mixer.sublayer.qkv.{p}", [f"{h}self_attn.{x}_proj.{p}" for x in "qkv"])
    copy_each(w, a, h, [("mixer.sublayer.out", "self_attn.o_proj"), ("ffn.sublayer.gate", "mlp.gate_proj"),
                        ("ffn.sublayer.up", "mlp.up_proj"), ("ffn.sublayer.down", "mlp.down_proj")], PARAMS)


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for _, a, h in decoder_layers(w, cfg):
        attention_and_mlp(w, a, h)
    w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict, model_type: str = "llama", cls: str = "LlamaForCausalLM",
          ffn: Optional[dict] = None) -> Dict[str, Any]:
    position = spec(d, "position")
    return {**common(m, d), "model_type": model_type, "architectures": [cls],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "head_dim": m.dim_per_head, "intermediate_size": m.d_ff,
            "max_position_embeddings": m.max_seq_len,
            "rope_theta": position.get("base", 10000.0),
            "rms_norm_eps": spec(d, "norm").get("eps", 1e-6),
            "hidden_act": inverse(GATED, (ffn or spec(d, "ffn"))["name"], "ffn"),
            "attention_bias": m.bias, "mlp_bias": m.bias, "attention_dropout": m.rate("attention_dropout")}


FAMILY = register(HFFamily("llama", "Llama", config, weights, write, prefix="model.", ignore=ROTARY))
