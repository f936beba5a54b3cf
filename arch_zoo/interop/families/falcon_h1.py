"""Falcon-H1 (``FalconH1ForCausalLM``, ``FalconH1Model``; TII 2025): every layer runs grouped-query
attention with RoPE and a Mamba-2 mixer side by side on the same RMS-normed input and adds both to the
residual, then a SwiGLU feed-forward; a final RMSNorm and an untied output projection by default.

arch_zoo writes the layer as the ``parallel`` mixer, ``{name: parallel, branches: [attention, {name:
mamba2, ...}]}``, and Falcon-H1's muP multipliers where they act:

* ``attention_in_multiplier`` / ``ssm_in_multiplier`` and ``attention_out_multiplier`` /
  ``ssm_out_multiplier``: the parallel mixer's ``in_multipliers`` and ``out_multipliers``;
* ``key_multiplier`` scales k, so q.k: ``model.attention_scale`` = key_multiplier / sqrt(head_dim);
* ``ssm_multipliers`` (HF's ``mup_vector`` over in_proj's z, x, B, C, dt): mamba2's
  ``projection_multipliers``; ``mamba_rms_norm`` / ``mamba_norm_before_gate``: mamba2's ``norm``;
* ``mlp_multipliers``: ``scaled_swiglu``'s ``gate_multiplier`` and ``out_multiplier`` (swiglu where both are 1);
* ``embedding_multiplier`` and ``lm_head_multiplier``: ``scale_embeddings`` with the standard
  parametrization's ``embedding_multiplier`` and ``logit_multiplier``.

The attention's, the feed-forward's and the mixer's two projections' biases are four flags
(``attention_bias``, ``mlp_bias``, ``mamba_proj_bias``, ``projectors_bias``), one ``bias`` here."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ...components.mixers import MIXERS
from ...components.parametrization import PARAMETRIZATIONS
from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import (PARAMS, ROTARY_ANY, NotExpressible, common, decoder_layers, dense_mlp, fused_attention,
                       plain_rope, shared_keys, spec)
from .mamba2 import mixer_weights, unclamped

BIASES = ("attention_bias", "mlp_bias", "mamba_proj_bias", "projectors_bias")
NORMS = {(False, False): "none", (False, True): "none", (True, False): "after_gate", (True, True): "before_gate"}


def _unless_ones(values) -> Optional[List[float]]:
    values = [float(v) for v in values]
    return None if all(v == 1.0 for v in values) else values


def _mamba(c: dict) -> dict:
    hidden, heads = c["hidden_size"], c.get("mamba_n_heads", 128)
    inner = c.get("mamba_d_ssm") or int(c.get("mamba_expand", 2) * hidden)
    head_dim = c.get("mamba_d_head", "auto")
    head_dim = inner // heads if head_dim in (None, "auto") else head_dim
    if heads * head_dim != inner:
        raise unsupported("falcon_h1", f"mamba_n_heads x mamba_d_head ({heads} x {head_dim}) other than mamba_d_ssm")
    multipliers = c.get("ssm_multipliers") or [1.0] * 5
    return {"name": "mamba2", "n_heads": heads, "head_dim": head_dim, "state_size": c.get("mamba_d_state", 256),
            "n_groups": c.get("mamba_n_groups", 1), "conv_size": c.get("mamba_d_conv", 4),
            "conv_bias": c.get("mamba_conv_bias", True), "chunk_size": c.get("mamba_chunk_size", 256),
            "norm_eps": c.get("rms_norm_eps", 1e-5),
            "norm": NORMS[bool(c.get("mamba_rms_norm", False)), bool(c.get("mamba_norm_before_gate", True))],
            "projection_multipliers": _unless_ones(multipliers)}


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("hidden_act", "silu") != "silu":  # the mixer's convolution and the feed-forward's gate both
        raise unsupported("falcon_h1", f"hidden_act '{c['hidden_act']}'")
    unclamped("falcon_h1", c)
    flags = [bool(c.get(name, False)) for name in BIASES]
    if len(set(flags)) > 1:
        raise unsupported("falcon_h1", f"{', '.join(BIASES)} differing ({', '.join(map(str, flags))})")
    rope = plain_rope("falcon_h1", c)
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or hidden // heads
    key = float(c.get("key_multiplier", 1.0))
    gate, down = c.get("mlp_multipliers") or (1.0, 1.0)
    embed, logits = float(c.get("embedding_multiplier", 1.0)), float(c.get("lm_head_multiplier", 1.0))
    parametrization = {"name": "standard", **({"embedding_multiplier": embed} if embed != 1.0 else {}),
                       **({"logit_multiplier": logits} if logits != 1.0 else {})}
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden, "n_layers": c["num_hidden_layers"],
        "n_heads": heads, "n_kv_heads": c.get("num_key_value_heads") or heads, "head_dim": head_dim,
        "d_ff": c["intermediate_size"], "max_seq_len": c.get("max_position_embeddings", 8192),
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                     "fraction": float(rope.get("partial_rotary_factor", 1.0))},
        "mixer": {"name": "parallel", "branches": ["attention", _mamba(c)],
                  "in_multipliers": _unless_ones([c.get("attention_in_multiplier", 1.0), c.get("ssm_in_multiplier", 1.0)]),
                  "out_multipliers": _unless_ones([c.get("attention_out_multiplier", 1.0),
                                                   c.get("ssm_out_multiplier", 1.0)])},
        "attention": "global", "attention_scale": None if key == 1.0 else key * head_dim ** -0.5,
        "norm": {"name": "rmsnorm", "eps": c.get("rms_norm_eps", 1e-5)}, "norm_placement": "pre", "final_norm": True,
        "ffn": "swiglu" if (gate, down) == (1.0, 1.0) else {"name": "scaled_swiglu", "gate_multiplier": float(gate),
                                                            "out_multiplier": float(down)},
        "bias": flags[0], "scale_embeddings": embed != 1.0, "parametrization": parametrization,
        **shared_keys(c, tie=False), "dropout": 0.0,
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg, norms=("input_layernorm", "pre_ff_layernorm"), final="final_layernorm"):
        for i, branch in enumerate(layer.mixer.options.branches):
            m = f"{a}mixer.sublayer.branches.{i}."
            if branch.name == "mamba2":
                mixer_weights(w, m, f"{h}mamba.", norm=branch.options.norm != "none")
            else:
                fused_attention(w, m, f"{h}self_attn.", PARAMS)  # biases where the checkpoint has them
        dense_mlp(w, f"{a}ffn.sublayer.", f"{h}feed_forward.", params=PARAMS)
    w.copy("head.proj.weight", "lm_head.weight")  # a tied one too: the load checks it equals the embedding


def _mixer(m: ModelConfig):
    """The one parallel mixer every layer holds, as (its options, the attention's index, mamba2's index)."""
    layers = layer_configs(m, "decoder", m.decoder_layers)  # each parallel (HFFamily.mixers)
    options = {MIXERS.get("parallel").factory.resolved_options(layer.mixer.options, layer) for layer in layers}
    if len(options) > 1:
        raise NotExpressible("parallel mixer options differing between layers")
    o = options.pop()
    names = [b.name for b in o.branches]
    if sorted(names) != ["attention", "mamba2"]:
        raise NotExpressible(f"parallel branches {', '.join(names)} (Falcon-H1's are attention and mamba2)")
    return o, names.index("attention"), names.index("mamba2")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    o, att, ssm = _mixer(m)
    mamba = o.branches[ssm].options
    built = PARAMETRIZATIONS.build(m.parametrization, m)
    scale = m.attention_scale
    key = 1.0 if scale is None else scale / m.dim_per_head ** -0.5
    if key * m.dim_per_head ** -0.5 != (scale or m.dim_per_head ** -0.5):
        raise NotExpressible(f"attention_scale {scale} (no key_multiplier gives it exactly)")
    ffn = spec(d, "ffn")
    norm = mamba.norm
    return {**common(m, d), "model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "head_dim": m.dim_per_head, "intermediate_size": m.d_ff,
            "max_position_embeddings": m.max_seq_len, "rms_norm_eps": spec(d, "norm").get("eps", 1e-5),
            "rope_parameters": {"rope_type": "default", "rope_theta": spec(d, "position").get("base", 10000.0)},
            **{name: m.bias for name in BIASES}, "attention_dropout": m.rate("attention_dropout"),
            "mamba_d_ssm": mamba.n_heads * mamba.head_dim, "mamba_n_heads": mamba.n_heads,
            "mamba_d_head": mamba.head_dim, "mamba_d_state": mamba.state_size, "mamba_n_groups": mamba.n_groups,
            "mamba_d_conv": mamba.conv_size, "mamba_conv_bias": mamba.conv_bias, "mamba_chunk_size": mamba.chunk_size,
            "mamba_rms_norm": norm != "none", "mamba_norm_before_gate": norm == "before_gate",
            "ssm_multipliers": list(mamba.projection_multipliers or (1.0,) * 5),
            "attention_in_multiplier": o.in_multipliers[att], "ssm_in_multiplier": o.in_multipliers[ssm],
            "attention_out_multiplier": o.out_multipliers[att], "ssm_out_multiplier": o.out_multipliers[ssm],
            "key_multiplier": key,
            "mlp_multipliers": [ffn.get("gate_multiplier", 1.0), ffn.get("out_multiplier", 1.0)],
            "embedding_multiplier": built.embedding_multiplier() if m.scale_embeddings else 1.0,
            "lm_head_multiplier": built.logit_multiplier()}


FAMILY = register(HFFamily("falcon_h1", "Falcon-H1", config, weights, write, mixers=("parallel",),
                           prefix="model.", ignore=ROTARY_ANY))
