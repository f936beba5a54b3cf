"""LFM2 (``Lfm2ForCausalLM``, ``Lfm2Model``; Liquid AI 2025): pre-norm RMSNorm layers that are a gated
short convolution (``conv``) or grouped-query attention with q/k RMSNorm and RoPE (``full_attention``)
by ``layer_types``, each followed by a SwiGLU feed-forward; the final norm is ``embedding_norm``
(applied after the last layer, despite its name) and the output projection is tied by default.

The feed-forward's width is not ``intermediate_size`` as written: with ``block_auto_adjust_ff_dim``
HF takes 2/3 of it, scales it by ``block_ffn_dim_multiplier`` and rounds it up to
``block_multiple_of`` (``Lfm2MLP``); arch_zoo's d_ff is that actual width, and the export writes it
back with the adjustment off."""
from __future__ import annotations

from typing import List

from ..components.mixers.short_conv import HF_NAMES
from ..config import ModelConfig
from ..config.validation import layer_configs
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, register, unsupported

LAYER_TYPES = ("conv", "full_attention")


def ff_width(c: dict) -> int:
    """The hidden width of HF's ``Lfm2MLP`` for config ``c``."""
    width = c["intermediate_size"]
    if c.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier, multiple = c.get("block_ffn_dim_multiplier", 1.0), c.get("block_multiple_of", 256)
        if multiplier is not None:
            width = int(multiplier * width)
            width = multiple * ((width + multiple - 1) // multiple)
    return width


def _layer_types(c: dict) -> List[str]:
    n = c["num_hidden_layers"]
    attention = c.get("full_attn_idxs")
    types = list(c.get("layer_types") or ["full_attention" if attention is None or i in attention else "conv"
                                          for i in range(n)])
    if len(types) != n or not set(types) <= set(LAYER_TYPES):
        raise unsupported("lfm2", f"layer_types {types} (expected {n} of {', '.join(LAYER_TYPES)})")
    return types


def lfm2_config(c: dict, weights: WeightMap) -> dict:
    rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise unsupported("lfm2", f"rope_type '{rope_type}'")
    hidden, heads, eps = c["hidden_size"], c["num_attention_heads"], c.get("norm_eps", 1e-5)
    conv = {"name": "short_conv", "conv_size": c.get("conv_L_cache", 3)}
    if c.get("conv_bias", False):  # the attention and feed-forward projections have no biases
        conv["bias"] = True
    types = _layer_types(c)
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden, "n_layers": c["num_hidden_layers"],
        "n_heads": heads, "n_kv_heads": c.get("num_key_value_heads") or heads,
        "head_dim": c.get("head_dim") or hidden // heads, "d_ff": ff_width(c),
        "max_seq_len": c.get("max_position_embeddings", 128_000),
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 1_000_000.0)))},
        "mixer": "attention", "attention": "global",
        "layers": [{"pattern": [{"mixer": conv} if t == "conv" else {} for t in types]}] if "conv" in types else None,
        "norm": {"name": "rmsnorm", "eps": eps}, "qk_norm": {"name": "rmsnorm", "eps": eps},
        "norm_placement": "pre", "final_norm": True, "ffn": "swiglu", "bias": False,
        "tie_embeddings": c.get("tie_word_embeddings", True),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": False},
        "dropout": 0.0, "pad_token_id": c.get("pad_token_id") or 0,
    }


def lfm2_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_tokens.weight")
    for i, layer in enumerate(layer_configs(cfg, "decoder", cfg.decoder_layers)):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        w.copy(f"{a}mixer.norm.weight", f"{h}operator_norm.weight")
        w.copy(f"{a}ffn.norm.weight", f"{h}ffn_norm.weight")
        m = f"{a}mixer.sublayer."
        if layer.mixer.name == "short_conv":
            for ours, theirs in HF_NAMES.items():
                for p in ("weight", "bias"):  # biases where the checkpoint has them (conv_bias)
                    w.copy(f"{m}{ours}.{p}", f"{h}conv.{theirs}.{p}")
        else:
            w.fuse(f"{m}qkv.weight", [f"{h}self_attn.{x}_proj.weight" for x in "qkv"])
            w.copy(f"{m}out.weight", f"{h}self_attn.out_proj.weight")
            for x in "qk":
                w.copy(f"{m}{x}_norm.weight", f"{h}self_attn.{x}_layernorm.weight")
        for ours, theirs in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
            w.copy(f"{a}ffn.sublayer.{ours}.weight", f"{h}feed_forward.{theirs}.weight")
    w.copy("decoder.final_norm.weight", "embedding_norm.weight")
    w.copy("head.proj.weight", "lm_head.weight")  # a tied one too: the load checks it equals the embedding


register(HFArchitecture("lfm2", lfm2_config, lfm2_weights, prefix="model.",
                        ignore=(r"rotary_emb\.(original_)?inv_freq",)))  # recomputed, not learned
