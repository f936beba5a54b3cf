"""gpt-oss (``GptOssForCausalLM``, ``GptOssModel``): Llama's layout with biased attention projections,
a learned sink logit per head, sliding-window and full layers alternating (``layer_types``), YaRN
positions, and every feed-forward a mixture of experts: a biased router whose top-k logits are
softmaxed (the ``moe`` router with ``router_bias``: a softmax over all experts renormalised over the
chosen k is the same softmax) into experts of ``clamped_swiglu``, each with its biases.

Hugging Face keeps each layer's experts in two stacked tensors, transposed (``gate_up_proj`` (E, d,
2 d_ff), ``down_proj`` (E, d_ff, d)) and with gate and up interleaved column by column (gate in the
even columns, up in the odd ones); arch_zoo keeps one module per expert with its own ``gate``, ``up``
and ``down``. The published checkpoints store the experts MXFP4-quantized (``*_blocks`` and
``*_scales``), which is refused: load them dequantized (transformers' ``Mxfp4Config(dequantize=True)``)."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import (ATTENTION_TYPES, PARAMS, ROTARY, NotExpressible, copy_each, layer_attention, rope_parameters,
                       spec, written_layer_types)
from . import llama

YARN_KEYS = {"beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
             "mscale": "mscale", "mscale_all_dim": "mscale_all_dim"}  # HF's rope_parameters -> yarn's options
# the yarn options written back: (HF's key, arch_zoo's)
YARN_WRITTEN = (("factor", "factor"), ("original_max_position_embeddings", "original_max_seq_len"),
                ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow"), ("truncate", "truncate"),
                ("attention_factor", "attention_factor"), ("mscale", "mscale"), ("mscale_all_dim", "mscale_all_dim"))


def rope_position(model_type: str, c: dict) -> dict:
    """``model.position`` for HF's ``rope_parameters`` (or the older ``rope_scaling`` + ``rope_theta``):
    plain RoPE or YaRN; any other rope_type is refused."""
    rope = rope_parameters(c)
    kind = rope.get("rope_type", rope.get("type", "default"))
    position = {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                "fraction": float(rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))}
    if kind == "default":
        return position
    if kind != "yarn":
        raise unsupported(model_type, f"rope_type '{kind}' (supported: default, yarn)")
    original = int(rope["original_max_position_embeddings"])
    factor = rope.get("factor") or c["max_position_embeddings"] / original  # HF's fallback
    options = {ours: float(rope[theirs]) for theirs, ours in YARN_KEYS.items() if rope.get(theirs)}
    return {**position, "name": "yarn", "factor": float(factor), "original_max_seq_len": original,
            "truncate": bool(rope.get("truncate", True)), **options}


def config(c: dict, weights: WeightMap) -> dict:
    quantized = sorted(k for k in weights.tensors if k.endswith(("_blocks", "_scales")))
    if quantized:
        raise unsupported("gpt_oss", f"MXFP4-quantized experts ('{quantized[0]}'); load the model dequantized "
                                     f"(transformers' Mxfp4Config(dequantize=True)) and convert that")
    if not c.get("attention_bias", True):  # the experts always have biases; model.bias covers both
        raise unsupported("gpt_oss", "attention_bias: false beside the experts' biases")
    cfg = llama.config({**c, "rope_parameters": None, "rope_scaling": None, "hidden_act": "silu",
                        "attention_bias": True, "mlp_bias": True}, weights)
    n = c["num_hidden_layers"]
    cfg["attention"], cfg["layers"] = layer_attention("gpt_oss", c, [ATTENTION_TYPES[i % 2] for i in range(n)],
                                                      repeating=True)
    cfg["position"] = rope_position("gpt_oss", c)
    cfg["norm"] = {"name": "rmsnorm", "eps": c.get("rms_norm_eps", 1e-5)}
    cfg["mixer"] = {"name": "attention", "sinks": True}
    cfg["ffn"] = {"name": "moe", "n_experts": c["num_local_experts"], "top_k": c["num_experts_per_tok"],
                  "expert": {"name": "clamped_swiglu", "alpha": float(c.get("swiglu_alpha", 1.702)),
                             "limit": float(c.get("swiglu_limit", 7.0))},
                  "router_bias": True, "aux_loss_weight": float(c.get("router_aux_loss_coef", 0.001)),
                  "aux_loss_layers": "pooled"}  # HF's load_balancing_loss_func pools the layers
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    llama.weights(w, cfg)  # embeddings, q/k/v/o with their biases, norms, the output projection
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        w.copy(f"{a}mixer.sublayer.sinks", f"{h}self_attn.sinks")
        f, m = f"{a}ffn.sublayer.", f"{h}mlp."
        copy_each(w, f, m, (("router", "router"),), PARAMS)
        for e in range(cfg.ffn.options.n_experts):
            x = f"{f}experts.{e}."
            for ours, cols in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
                w.copy(f"{x}{ours}.weight", f"{m}experts.gate_up_proj", lambda t, e=e, s=cols: t[e][:, s].t())
                w.copy(f"{x}{ours}.bias", f"{m}experts.gate_up_proj_bias", lambda t, e=e, s=cols: t[e, s])
            w.copy(f"{x}down.weight", f"{m}experts.down_proj", lambda t, e=e: t[e].t())
            w.copy(f"{x}down.bias", f"{m}experts.down_proj_bias", lambda t, e=e: t[e])


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """Every feed-forward a biased-router MoE of clamped-SwiGLU experts, biases everywhere, RoPE or
    YaRN on whole heads (HF's gpt-oss rotates all of head_dim)."""
    moe = spec(d, "ffn")
    expert = spec(moe, "expert") if moe["name"] == "moe" else {"name": f"dense {moe['name']}"}
    if expert["name"] != "clamped_swiglu":
        raise NotExpressible(f"ffn {expert['name']}")
    if not m.bias:
        raise NotExpressible("bias False")
    position = spec(d, "position")
    if position["name"] not in ("rope", "yarn") or position.get("fraction", 1.0) != 1.0:
        raise NotExpressible(f"position {position['name']} (fraction {position.get('fraction')})")
    rope = {"rope_type": "default" if position["name"] == "rope" else "yarn", "rope_theta": position.get("base")}
    if position["name"] == "yarn":
        rope.update({theirs: position.get(ours) for theirs, ours in YARN_WRITTEN if position.get(ours) is not None})
    base = llama.write(m, d, "gpt_oss", "GptOssForCausalLM", ffn={"name": "swiglu"})
    for key in ("mlp_bias", "rope_theta"):
        base.pop(key)
    return {**base, **written_layer_types(m), "rope_parameters": rope,
            "num_local_experts": moe.get("n_experts"), "num_experts_per_tok": moe.get("top_k"),
            "swiglu_alpha": expert.get("alpha", 1.702), "swiglu_limit": expert.get("limit", 7.0),
            "router_aux_loss_coef": moe.get("aux_loss_weight", 0.001)}


FAMILY = register(HFFamily("gpt_oss", "gpt-oss", config, weights, write, prefix="model.", ignore=ROTARY))
