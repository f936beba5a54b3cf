"""Qwen3-Next (``Qwen3NextForCausalLM``, ``Qwen3NextModel``): Llama's layout with zero-centred RMSNorms,
layers that are Gated DeltaNet (``linear_attention``) or gated attention (``full_attention``) by
``layer_types``, and a mixture of experts beside a gated shared expert (dense SwiGLU layers where
``mlp_only_layers`` / ``decoder_sparse_step`` say so).

Hugging Face fuses and interleaves its projections: ``q_proj`` holds each head's query and output
gate side by side; the Gated DeltaNet's ``in_proj_qkvz`` holds, per key head, its query, key, and its
value heads' values and gates, and ``in_proj_ba`` per key head its value heads' b then a. arch_zoo
keeps each kind in one block (queries of all heads, then keys, ...); the rows are regrouped here."""
from __future__ import annotations

from typing import Any, Dict, List

import torch

from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import ROTARY_ANY, NotExpressible, decoder_layers, dense_mlp, layer_ranges, layer_types, period, \
    qk_norms, rope_parameters, spec, stacked_experts
from . import llama

LAYER_TYPES = ("linear_attention", "full_attention")


def _dense_layers(c: dict) -> List[int]:
    """The layers HF gives its dense MLP rather than the sparse MoE block."""
    only, step = set(c.get("mlp_only_layers") or ()), c.get("decoder_sparse_step", 1)
    return [i for i in range(c["num_hidden_layers"])
            if i in only or not (c.get("num_experts", 0) > 0 and (i + 1) % step == 0)]


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("hidden_act", "silu") != "silu":  # the conv's activation and the experts' gate both
        raise unsupported("qwen3_next", f"hidden_act '{c['hidden_act']}'")
    if c.get("attention_bias", False):
        raise unsupported("qwen3_next", "attention_bias (its Gated DeltaNet layers have no biases)")
    cfg = llama.config(c, weights)
    rope = rope_parameters(c)  # unlike Llama, Qwen3-Next rotates a fraction
    cfg["position"]["fraction"] = float(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
    eps = c.get("rms_norm_eps", 1e-6)
    cfg["norm"] = cfg["qk_norm"] = {"name": "zero_centred_rmsnorm", "eps": eps}
    cfg["mixer"], cfg["attention"] = {"name": "attention", "gate": "sigmoid"}, "global"
    gdn = {"mixer": {"name": "gated_deltanet", "n_heads": c["linear_num_key_heads"],
                     "n_v_heads": c["linear_num_value_heads"], "head_dim": c["linear_key_head_dim"],
                     "v_head_dim": c["linear_value_head_dim"], "conv_size": c.get("linear_conv_kernel_dim", 4),
                     "norm_eps": eps, "l2norm": "rsqrt"}}
    every = c.get("full_attention_interval", 4)
    types = layer_types("qwen3_next", c, LAYER_TYPES, ["full_attention" if (i + 1) % every == 0 else
                                                       "linear_attention" for i in range(c["num_hidden_layers"])])
    n = len(types)
    layers: List[dict] = []
    if "linear_attention" in types:
        layers.append({"pattern": [gdn if t == "linear_attention" else {} for t in types[:period(types)]]})
    dense = _dense_layers(c)
    if len(dense) < n:
        cfg["ffn"] = {"name": "moe", "n_experts": c["num_experts"], "top_k": c["num_experts_per_tok"],
                      "d_ff": c["moe_intermediate_size"], "norm_topk_prob": bool(c.get("norm_topk_prob", True)),
                      "n_shared_experts": 1, "shared_d_ff": c["shared_expert_intermediate_size"],
                      "shared_gate": True, "aux_loss_weight": float(c.get("router_aux_loss_coef", 0.001)),
                      "aux_loss_layers": "pooled"}  # HF's load_balancing_loss_func pools the layers
        layers += [{"range": r, "ffn": "swiglu"} for r in layer_ranges(dense)]
    cfg["layers"] = layers or None
    return cfg


def _regrouped(w: WeightMap, dst: str, src: str, groups: int, sizes: List[int], parts: List[int]) -> None:
    """``src``'s rows as ``groups`` consecutive blocks split by ``sizes``: the ``parts`` of every block,
    part by part (part 0 of all blocks, then part 1 ...), as ``dst``."""
    if src not in w:
        return
    blocks = w.take(src).unflatten(0, (groups, sum(sizes))).split(sizes, dim=1)
    w.out[dst], w.sources[dst] = torch.cat([blocks[p].flatten(0, 1) for p in parts]), src


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg):
        _attention(w, layer, f"{a}mixer.sublayer.", f"{h}self_attn.")
        _gated_deltanet(w, layer, f"{a}mixer.sublayer.", f"{h}linear_attn.")
        _feedforward(w, layer, f"{a}ffn.sublayer.", f"{h}mlp.")
    if not cfg.tie_embeddings:
        w.copy("head.proj.weight", "lm_head.weight")


def _attention(w: WeightMap, layer: ModelConfig, a: str, h: str) -> None:
    """``q_proj``: per head, its query rows then its output gate's."""
    q, names = f"{h}q_proj.weight", [f"{h}{x}_proj.weight" for x in "qkv"]
    if not all(n in w for n in names):
        return
    heads = w.take(q).unflatten(0, (layer.n_heads, 2, layer.dim_per_head))
    w.out[f"{a}gate.weight"], w.sources[f"{a}gate.weight"] = heads[:, 1].flatten(0, 1), q
    w.out[f"{a}qkv.weight"] = torch.cat([heads[:, 0].flatten(0, 1), w.take(names[1]), w.take(names[2])])
    w.sources[f"{a}qkv.weight"] = " + ".join(names)
    w.copy(f"{a}out.weight", f"{h}o_proj.weight")
    qk_norms(w, a, h)


def _gated_deltanet(w: WeightMap, layer: ModelConfig, a: str, h: str) -> None:
    """Per key head, ``in_proj_qkvz`` holds [q, k, its value heads' v, their z] and ``in_proj_ba``
    [their b, their a]; arch_zoo's ``in_proj`` is [q, k, v, z] and ``ba_proj`` [b, a], each over all heads."""
    if layer.mixer.name != "gated_deltanet":
        return
    o = layer.mixer.options.resolved(layer)  # a model built here may leave them null
    heads, dk = o.n_heads, o.head_dim
    per = (o.n_v_heads // o.n_heads) * o.v_head_dim  # the value (and gate) rows of one key head
    _regrouped(w, f"{a}in_proj.weight", f"{h}in_proj_qkvz.weight", heads, [dk, dk, per, per], [0, 1, 2, 3])
    r = o.n_v_heads // o.n_heads
    _regrouped(w, f"{a}ba_proj.weight", f"{h}in_proj_ba.weight", heads, [r, r], [0, 1])
    w.copy(f"{a}conv.conv.weight", f"{h}conv1d.weight")
    for name in ("dt_bias", "A_log", "norm.weight"):
        w.copy(f"{a}{name}", f"{h}{name}")
    w.copy(f"{a}out.weight", f"{h}out_proj.weight")


def _feedforward(w: WeightMap, layer: ModelConfig, a: str, h: str) -> None:
    """A dense layer's SwiGLU, or the router, the stacked experts and the shared expert with its gate."""
    if layer.ffn.name != "moe":
        dense_mlp(w, a, h)
        return
    o = layer.ffn.options
    w.copy(f"{a}router.weight", f"{h}gate.weight")
    stacked_experts(w, a, h, o.n_experts, o.d_ff or layer.d_ff)
    dense_mlp(w, f"{a}shared.", f"{h}shared_expert.")
    w.copy(f"{a}shared_gate.weight", f"{h}shared_expert_gate.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    layers = layer_configs(m, "decoder", m.decoder_layers)
    if any(layer.bias for layer in layers):  # attention_bias only: its Gated DeltaNet and MLPs have none
        raise NotExpressible("bias True")
    types = ["linear_attention" if layer.mixer.name == "gated_deltanet" else "full_attention" for layer in layers]
    base = llama.write(m, d, "qwen3_next", "Qwen3NextForCausalLM", ffn={"name": "swiglu"})
    base.pop("mlp_bias")
    out = {**base, "partial_rotary_factor": spec(d, "position").get("fraction", 1.0),  # Qwen3-Next reads it
           "layer_types": types, "decoder_sparse_step": 1,
           "mlp_only_layers": [i for i, layer in enumerate(layers) if layer.ffn.name != "moe"]}
    gdn = next((layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "gated_deltanet"), None)
    if gdn is not None:
        out.update(linear_num_key_heads=gdn.n_heads, linear_num_value_heads=gdn.n_v_heads,
                   linear_key_head_dim=gdn.head_dim, linear_value_head_dim=gdn.v_head_dim,
                   linear_conv_kernel_dim=gdn.conv_size)
    moe = next((layer for layer in layers if layer.ffn.name == "moe"), None)
    if moe is None:
        out["num_experts"] = 0
    else:
        o = moe.ffn.options
        out.update(num_experts=o.n_experts, num_experts_per_tok=o.top_k, moe_intermediate_size=o.d_ff or moe.d_ff,
                   shared_expert_intermediate_size=o.shared_d_ff or o.n_shared_experts * (o.d_ff or moe.d_ff),
                   norm_topk_prob=o.norm_topk_prob, router_aux_loss_coef=o.aux_loss_weight)
    return out


FAMILY = register(HFFamily("qwen3_next", "Qwen3-Next", config, weights, write,
                           mixers=("gated_deltanet", "attention"), prefix="model.", ignore=ROTARY_ANY))
