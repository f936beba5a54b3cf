"""LFM2 (``Lfm2ForCausalLM``, ``Lfm2Model``; Liquid AI 2025): pre-norm RMSNorm layers that are a gated
short convolution (``conv``) or grouped-query attention with q/k RMSNorm and RoPE (``full_attention``)
by ``layer_types``, each followed by a SwiGLU feed-forward; the final norm is ``embedding_norm``
(applied after the last layer, despite its name) and the output projection is tied by default.

The feed-forward's width is not ``intermediate_size`` as written: with ``block_auto_adjust_ff_dim``
HF takes 2/3 of it, scales it by ``block_ffn_dim_multiplier`` and rounds it up to
``block_multiple_of`` (``Lfm2MLP``); arch_zoo's d_ff is that actual width, and the export writes it
back with the adjustment off."""
from __future__ import annotations

from typing import Any, Dict

from ...components.mixers.short_conv import HF_NAMES
from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register
from ..mapping import (PARAMS, ROTARY_ANY, NotExpressible, common, copy_each, decoder_layers, dense_mlp, layer_types,
                       plain_rope, shared_keys, spec)

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


def config(c: dict, weights: WeightMap) -> dict:
    rope = plain_rope("lfm2", c)
    hidden, heads, eps = c["hidden_size"], c["num_attention_heads"], c.get("norm_eps", 1e-5)
    conv = {"name": "short_conv", "conv_size": c.get("conv_L_cache", 3)}
    if c.get("conv_bias", False):  # the attention and feed-forward projections have no biases
        conv["bias"] = True
    attention = c.get("full_attn_idxs")
    types = layer_types("lfm2", c, LAYER_TYPES, ["full_attention" if attention is None or i in attention else "conv"
                                                 for i in range(c["num_hidden_layers"])])
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
        **shared_keys(c, tie=True), "dropout": 0.0,
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg, norms=("operator_norm", "ffn_norm"), final="embedding_norm"):
        m = f"{a}mixer.sublayer."
        if layer.mixer.name == "short_conv":  # biases where the checkpoint has them (conv_bias)
            copy_each(w, m, f"{h}conv.", list(HF_NAMES.items()), PARAMS)
        else:
            w.fuse(f"{m}qkv.weight", [f"{h}self_attn.{x}_proj.weight" for x in "qkv"])
            w.copy(f"{m}out.weight", f"{h}self_attn.out_proj.weight")
            copy_each(w, m, f"{h}self_attn.", [(f"{x}_norm", f"{x}_layernorm") for x in "qk"])
        dense_mlp(w, f"{a}ffn.sublayer.", f"{h}feed_forward.", ("w1", "w3", "w2"))
    w.copy("head.proj.weight", "lm_head.weight")  # a tied one too: the load checks it equals the embedding


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """d_ff written as the actual width (``block_auto_adjust_ff_dim`` off)."""
    layers = layer_configs(m, "decoder", m.decoder_layers)
    convs = [layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "short_conv"]
    if len({(o.conv_size, o.bias) for o in convs}) > 1:
        raise NotExpressible(f"short_conv options differing between layers {sorted({str(o) for o in convs})}")
    position = spec(d, "position")
    return {**common(m, d), "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "intermediate_size": m.d_ff, "block_auto_adjust_ff_dim": False,
            "max_position_embeddings": m.max_seq_len, "norm_eps": spec(d, "norm").get("eps", 1e-5),
            "rope_parameters": {"rope_type": "default", "rope_theta": position.get("base", 1_000_000.0)},
            "layer_types": ["conv" if layer.mixer.name == "short_conv" else "full_attention" for layer in layers],
            "conv_L_cache": convs[0].conv_size if convs else 3, "conv_bias": bool(convs and convs[0].bias)}


FAMILY = register(HFFamily("lfm2", "LFM2", config, weights, write, mixers=("short_conv", "attention"),
                           prefix="model.", ignore=ROTARY_ANY))
