"""MiniMax (``MiniMaxForCausalLM``, ``MiniMaxModel``; MiniMax-01, MiniMax 2025): Mixtral's softmax attention
and mixture of experts, with most layers lightning attention (``lightning``; ``layer_types``
``linear_attention``) and the rest softmax attention (``full_attention``; transformers' default: every
other layer, from the first). Its layers carry the normed input on the residual stream,
``alpha * norm(x) + beta * f(norm(x))`` (``norm_placement: normed_residual``), one alpha and one beta
for every sublayer here: a config whose full-attention, lightning and MLP factors differ is refused.

A lightning layer's decay depends on its place in the stack; transformers stores the decays as buffers
(``slope_rate``, ``query_decay``, ...), which the mixer recomputes: they are not weights here."""
from __future__ import annotations

from typing import Any, Dict, List

from ...config import ModelConfig
from ...config.layers import resolved_mixer
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import ROTARY, NotExpressible, copy_each, layer_types, period, spec
from . import mixtral

LAYER_TYPES = ("linear_attention", "full_attention")
TYPE_OF = {"lightning": "linear_attention", "attention": "full_attention"}
FACTORS = {"alpha": ("full_attn_alpha_factor", "linear_attn_alpha_factor", "mlp_alpha_factor"),
           "beta": ("full_attn_beta_factor", "linear_attn_beta_factor", "mlp_beta_factor")}
LIGHTNING = ("qkv_proj", "output_gate", "norm", "out_proj")  # the same names both sides
BUFFERS = (r"layers\.\d+\.self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)",)


def _factor(c: dict, which: str) -> float:
    values = {float(c.get(key, 1.0)) for key in FACTORS[which]}
    if len(values) > 1:
        raise unsupported("minimax", f"{' / '.join(FACTORS[which])} differing ({sorted(values)})")
    return values.pop()


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("hidden_act", "silu") != "silu":  # the lightning layers' q/k/v activation and the experts' gate
        raise unsupported("minimax", f"hidden_act '{c['hidden_act']}'")
    cfg = mixtral.config(c, weights)
    cfg["norm_placement"] = {"name": "normed_residual", "alpha": _factor(c, "alpha"), "beta": _factor(c, "beta")}
    lightning = {"name": "lightning", "chunk_size": c.get("block_size", 256)}
    types = layer_types("minimax", c, LAYER_TYPES, ["full_attention" if i % 2 == 0 else "linear_attention"
                                                    for i in range(c["num_hidden_layers"])])
    if set(types) == {"linear_attention"}:
        cfg["mixer"] = lightning
    elif "linear_attention" in types:
        cfg["layers"] = [{"pattern": [{"mixer": lightning} if t == "linear_attention" else {}
                                      for t in types[:period(types)]]}]
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    mixtral.weights(w, cfg)  # the norms, the attention layers and the experts; what a lightning layer lacks is skipped
    for i, layer in enumerate(layer_configs(cfg, "decoder", cfg.decoder_layers)):
        if layer.mixer.name == "lightning":
            copy_each(w, f"decoder.layers.{i}.mixer.sublayer.", f"layers.{i}.self_attn.", [(x, x) for x in LIGHTNING])


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    placement = spec(d, "norm_placement")
    if placement["name"] != "normed_residual":
        raise NotExpressible(f"norm_placement {placement['name']}")
    layers = layer_configs(m, "decoder", m.decoder_layers)
    types: List[str] = []
    for layer in layers:
        if layer.mixer.name not in TYPE_OF:
            raise NotExpressible(f"mixer {layer.mixer.name}")
        types.append(TYPE_OF[layer.mixer.name])
    lightning = [resolved_mixer(layer).mixer.options for layer in layers if layer.mixer.name == "lightning"]
    if any((o.n_heads or m.n_heads, o.head_dim or m.dim_per_head) != (m.n_heads, m.dim_per_head) for o in lightning):
        raise NotExpressible("lightning n_heads / head_dim other than the model's (MiniMax's layers share them)")
    chunks = {o.chunk_size for o in lightning}
    if len(chunks) > 1:
        raise NotExpressible(f"lightning chunk_size differing between layers {sorted(chunks)}")
    out = {**mixtral.write(m, d), "model_type": "minimax", "architectures": ["MiniMaxForCausalLM"],
           "layer_types": types, "block_size": chunks.pop() if chunks else 256}
    for which, keys in FACTORS.items():
        out.update({key: placement.get(which, 1.0) for key in keys})
    return out


FAMILY = register(HFFamily("minimax", "MiniMax", config, weights, write, mixers=("attention", "lightning"),
                           prefix="model.", ignore=ROTARY + BUFFERS))
