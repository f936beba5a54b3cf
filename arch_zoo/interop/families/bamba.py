"""Bamba (``BambaForCausalLM``, ``BambaModel``; IBM 2024): pre-norm RMSNorm layers that are a Mamba-2
mixer (HF's ``BambaMixer``, the ``mamba2`` mixer here) or grouped-query attention with RoPE on half of
each head's dims (``attn_layer_indices``), each followed by a SwiGLU feed-forward; a final RMSNorm and
an untied output projection by default.

arch_zoo writes it with ``mamba2`` as the model's mixer and one ``model.layers`` entry per run of
attention layers (``{range: 9, mixer: attention}``). HF hard-codes ``partial_rotary_factor`` 0.5 and
reads one ``hidden_act`` for the mixer's convolution and the feed-forward's gate; the mixer's, the
attention's and the feed-forward's biases are three flags, one ``bias`` here."""
from __future__ import annotations

from typing import Any, Dict, List

from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import (PARAMS, ROTARY_ANY, NotExpressible, common, decoder_layers, dense_mlp, fused_attention,
                       integral, layer_ranges, plain_rope, shared_keys, spec)
from .mamba2 import mixer_weights, unclamped


def _biases(c: dict, attention: List[int]) -> bool:
    """The one ``bias`` the three flags give: the feed-forward's, and the mixer's or the attention's where
    some layer has it."""
    n = c["num_hidden_layers"]
    flags = {"mlp_bias": c.get("mlp_bias", False)}
    if len(attention) < n:
        flags["mamba_proj_bias"] = c.get("mamba_proj_bias", False)
    if attention:
        flags["attention_bias"] = c.get("attention_bias", False)
    if len(set(flags.values())) > 1:
        raise unsupported("bamba", f"{', '.join(flags)} differing ({', '.join(map(str, flags.values()))})")
    return bool(flags["mlp_bias"])


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("hidden_act", "silu") != "silu":  # the mixer's convolution and the feed-forward's gate both
        raise unsupported("bamba", f"hidden_act '{c['hidden_act']}'")
    unclamped("bamba", c)
    rope = plain_rope("bamba", c)
    n, hidden, heads = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
    attention = sorted(c.get("attn_layer_indices") or ())
    if any(not 0 <= i < n for i in attention):
        raise unsupported("bamba", f"attn_layer_indices {attention} (layers 0..{n - 1})")
    m_heads, expand = c.get("mamba_n_heads", 128), c.get("mamba_expand", 2)
    head_dim = c.get("mamba_d_head", "auto")
    eps = c.get("rms_norm_eps", 1e-5)
    mamba = {"name": "mamba2", "n_heads": m_heads,
             "head_dim": expand * hidden // m_heads if head_dim in (None, "auto") else head_dim,
             "state_size": c.get("mamba_d_state", 256), "n_groups": c.get("mamba_n_groups", 1),
             "conv_size": c.get("mamba_d_conv", 4), "conv_bias": c.get("mamba_conv_bias", True),
             "chunk_size": c.get("mamba_chunk_size", 256), "norm_eps": eps}
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden, "n_layers": n,
        "n_heads": heads, "n_kv_heads": c.get("num_key_value_heads") or heads,
        "head_dim": c.get("head_dim") or hidden // heads, "d_ff": c["intermediate_size"],
        "max_seq_len": c.get("max_position_embeddings", 262144),
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                     "fraction": float(rope.get("partial_rotary_factor", 0.5))},
        "mixer": mamba, "attention": "global",
        "layers": [{"range": r, "mixer": "attention"} for r in layer_ranges(attention, single=True)] or None,
        "norm": {"name": "rmsnorm", "eps": eps}, "norm_placement": "pre", "final_norm": True,
        "ffn": "swiglu", "bias": _biases(c, attention),
        **shared_keys(c, tie=False), "dropout": 0.0,
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg, norms=("input_layernorm", "pre_ff_layernorm"), final="final_layernorm"):
        m = f"{a}mixer.sublayer."
        if layer.mixer.name == "mamba2":
            mixer_weights(w, m, f"{h}mamba.")
        else:
            fused_attention(w, m, f"{h}self_attn.", PARAMS)  # biases where the checkpoint has them (attention_bias)
        dense_mlp(w, f"{a}ffn.sublayer.", f"{h}feed_forward.", params=PARAMS)
    w.copy("head.proj.weight", "lm_head.weight")  # a tied one too: the load checks it equals the embedding


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    layers = layer_configs(m, "decoder", m.decoder_layers)
    mambas = {layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "mamba2"}
    if len(mambas) > 1:
        raise NotExpressible(f"mamba2 options differing between layers {sorted(map(str, mambas))}")
    out = {**common(m, d), "model_type": "bamba", "architectures": ["BambaForCausalLM"],
           "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
           "num_key_value_heads": m.kv_heads, "head_dim": m.dim_per_head, "intermediate_size": m.d_ff,
           "max_position_embeddings": m.max_seq_len, "rms_norm_eps": spec(d, "norm").get("eps", 1e-5),
           "rope_parameters": {"rope_type": "default", "rope_theta": spec(d, "position").get("base", 10000.0)},
           "attn_layer_indices": [i for i, layer in enumerate(layers) if layer.mixer.name != "mamba2"],
           "attention_bias": m.bias, "mlp_bias": m.bias, "mamba_proj_bias": m.bias,
           "attention_dropout": m.rate("attention_dropout")}
    if not mambas:  # attention only: mixer settings Bamba's config accepts, read by no layer
        return {**out, "mamba_n_heads": 1, "mamba_d_head": 2 * m.d_model, "mamba_expand": 2}
    o = mambas.pop()
    expand = integral(o.n_heads * o.head_dim / m.d_model)
    if not isinstance(expand, int):  # Bamba's mixer is expand x hidden_size wide
        raise NotExpressible(f"mamba2 n_heads x head_dim ({o.n_heads} x {o.head_dim}) not a multiple of d_model")
    return {**out, "mamba_n_heads": o.n_heads, "mamba_d_head": o.head_dim, "mamba_expand": expand,
            "mamba_d_state": o.state_size, "mamba_n_groups": o.n_groups, "mamba_d_conv": o.conv_size,
            "mamba_conv_bias": o.conv_bias, "mamba_chunk_size": o.chunk_size}


FAMILY = register(HFFamily("bamba", "Bamba", config, weights, write, mixers=("mamba2", "attention"),
                           prefix="model.", ignore=ROTARY_ANY))
