"""Mamba-2 (``Mamba2ForCausalLM``, ``Mamba2Model``): pre-norm RMSNorm layers whose only sublayer is the
``mamba2`` mixer (no attention, no feed-forward), a final RMSNorm and the LM head."""
from __future__ import annotations

import math
from typing import Any, Dict

from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import PARAMS, NotExpressible, common, copy_each, integral, shared_keys, spec


def unclamped(model_type: str, c: dict) -> None:
    """Refuses a ``time_step_limit`` that clamps dt: arch_zoo's mamba2 mixer does not. A saved config.json
    spells infinity as transformers' ``{"__float__": "Infinity"}``."""
    limit = tuple(float(x["__float__"]) if isinstance(x, dict) else x
                  for x in c.get("time_step_limit") or (0.0, math.inf))
    if limit[0] > 0.0 or limit[1] != math.inf:
        raise unsupported(model_type, f"time_step_limit {list(limit)} (dt is not clamped here)")


def mixer_weights(w: WeightMap, a: str, h: str, norm: bool = True) -> None:
    """One mamba2 mixer's tensors (``a``: arch_zoo's mixer, ``h``: HF's ``Mamba2Mixer`` / ``BambaMixer``),
    biases where the checkpoint has them (use_bias, use_conv_bias); ``norm``: it has the gated norm's
    weight (Falcon-H1's may have none)."""
    copy_each(w, a, h, (("in_proj", "in_proj"), ("out", "out_proj"), ("conv.conv", "conv1d")), PARAMS)
    for name in ("dt_bias", "A_log", "D") + (("norm.weight",) if norm else ()):
        w.copy(f"{a}{name}", f"{h}{name}")


def config(c: dict, weights: WeightMap) -> dict:
    hidden, heads, head_dim = c["hidden_size"], c["num_heads"], c["head_dim"]
    if heads * head_dim != int(c.get("expand", 2) * hidden):
        raise unsupported("mamba2", f"num_heads x head_dim ({heads} x {head_dim}) other than expand x hidden_size")
    unclamped("mamba2", c)
    if c.get("hidden_act", "silu") != "silu":
        raise unsupported("mamba2", f"hidden_act '{c['hidden_act']}'")
    eps = c.get("layer_norm_epsilon", 1e-5)
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden, "n_layers": c["num_hidden_layers"],
        "n_heads": math.gcd(hidden, heads),  # read by nothing: no layer has attention
        "max_seq_len": c.get("max_position_embeddings", 4096),  # no position table: only a limit for checks
        "position": "none",
        "mixer": {"name": "mamba2", "n_heads": heads, "head_dim": head_dim, "state_size": c["state_size"],
                  "n_groups": c.get("n_groups", 1), "conv_size": c.get("conv_kernel", 4),
                  "conv_bias": c.get("use_conv_bias", True), "chunk_size": c.get("chunk_size", 256),
                  "dt_min": c.get("time_step_min", 0.001), "dt_max": c.get("time_step_max", 0.1), "norm_eps": eps},
        "norm": {"name": "rmsnorm", "eps": eps}, "norm_placement": "pre", "final_norm": True,
        "ffn": "none", "bias": c.get("use_bias", False),
        **shared_keys(c, tie=False, std=0.1), "dropout": 0.0,
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embeddings.weight")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.mixer.", f"layers.{i}."
        w.copy(f"{a}norm.weight", f"{h}norm.weight")
        mixer_weights(w, f"{a}sublayer.", f"{h}mixer.")
    w.copy("decoder.final_norm.weight", "norm_f.weight")
    if not cfg.tie_embeddings:
        w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    mixer = layer_configs(m, "decoder", m.decoder_layers)[0].mixer
    if mixer.name != "mamba2":
        raise NotExpressible(f"mixer {mixer.name}")
    o = mixer.options.resolved(m)
    heads, head_dim = o.n_heads, o.head_dim
    return {**common(m, d), "model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_heads": heads, "head_dim": head_dim,
            "expand": integral(heads * head_dim / m.d_model), "state_size": o.state_size, "n_groups": o.n_groups,
            "conv_kernel": o.conv_size, "use_conv_bias": o.conv_bias, "chunk_size": o.chunk_size,
            "time_step_min": o.dt_min, "time_step_max": o.dt_max,
            "layer_norm_epsilon": spec(d, "norm").get("eps", 1e-5), "use_bias": m.bias,
            "max_position_embeddings": m.max_seq_len}


FAMILY = register(HFFamily("mamba2", "Mamba-2", config, weights, write, mixers=("mamba2",), prefix="backbone."))
