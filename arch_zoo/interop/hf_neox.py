"""GPT-NeoX / Pythia (``GPTNeoXForCausalLM``, ``GPTNeoXModel``): parallel residual with one norm per
sublayer, partial rotary, and a fused QKV projection laid out head by head."""
from __future__ import annotations

from torch import Tensor

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, ffn_name, register, unsupported


def per_head_qkv(n_heads: int):
    """[q_0 k_0 v_0 | q_1 k_1 v_1 | ...] (rows of a fused weight or bias, one block per head, as GPT-NeoX
    and BLOOM store them) -> arch_zoo's [q | k | v]."""
    def reorder(w: Tensor) -> Tensor:
        rest = w.shape[1:]
        return w.reshape(n_heads, 3, -1, *rest).transpose(0, 1).reshape(w.shape)
    return reorder


def neox_config(c: dict, weights: WeightMap) -> dict:
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise unsupported("gpt_neox", f"rope_type '{rope_type}'")
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
        "bias": True,
        "tie_embeddings": c.get("tie_word_embeddings", False),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": False},
        "dropout": float(c.get("hidden_dropout") or 0.0), "attention_dropout": float(c.get("attention_dropout") or 0.0),
        "pad_token_id": c.get("pad_token_id") or 0,
    }


def neox_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_in.weight")
    reorder = per_head_qkv(cfg.n_heads)
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        for p in ("weight", "bias"):
            w.copy(f"{a}mixer.norm.{p}", f"{h}input_layernorm.{p}")
            w.copy(f"{a}ffn.norm.{p}", f"{h}post_attention_layernorm.{p}")
            w.copy(f"{a}mixer.sublayer.qkv.{p}", f"{h}attention.query_key_value.{p}", reorder)
            w.copy(f"{a}mixer.sublayer.out.{p}", f"{h}attention.dense.{p}")
            w.copy(f"{a}ffn.sublayer.up.{p}", f"{h}mlp.dense_h_to_4h.{p}")
            w.copy(f"{a}ffn.sublayer.down.{p}", f"{h}mlp.dense_4h_to_h.{p}")
            w.copy(f"decoder.final_norm.{p}", f"final_layer_norm.{p}")
    w.copy("head.proj.weight", "embed_out.weight")  # Pythia's checkpoints
    w.copy("head.proj.weight", "lm_head.weight")  # what transformers 5 saves


register(HFArchitecture(
    "gpt_neox", neox_config, neox_weights, prefix="gpt_neox.",
    # recomputed rotary tables and causal-mask buffers of older checkpoints
    ignore=(r"(layers\.\d+\.attention\.)?rotary_emb\.inv_freq", r"layers\.\d+\.attention\.(bias|masked_bias)"),
))
