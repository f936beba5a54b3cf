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

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_llama import llama_config, llama_weights
from .hf_llama_variants import ATTENTION_TYPES, ROTARY, layer_attention
from .hf_registry import HFArchitecture, register, unsupported

YARN_KEYS = {"beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
             "mscale": "mscale", "mscale_all_dim": "mscale_all_dim"}  # HF's rope_parameters -> yarn's options


def rope_position(model_type: str, c: dict) -> dict:
    """``model.position`` for HF's ``rope_parameters`` (or the older ``rope_scaling`` + ``rope_theta``):
    plain RoPE or YaRN; any other rope_type is refused."""
    rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
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


def gpt_oss_config(c: dict, weights: WeightMap) -> dict:
    quantized = sorted(k for k in weights.tensors if k.endswith(("_blocks", "_scales")))
    if quantized:
        raise unsupported("gpt_oss", f"MXFP4-quantized experts ('{quantized[0]}'); load the model dequantized "
                                     f"(transformers' Mxfp4Config(dequantize=True)) and convert that")
    if not c.get("attention_bias", True):  # the experts always have biases; model.bias covers both
        raise unsupported("gpt_oss", "attention_bias: false beside the experts' biases")
    cfg = llama_config({**c, "rope_parameters": None, "rope_scaling": None, "hidden_act": "silu",
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


def gpt_oss_weights(w: WeightMap, cfg: ModelConfig) -> None:
    llama_weights(w, cfg)  # embeddings, q/k/v/o with their biases, norms, the output projection
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        w.copy(f"{a}mixer.sublayer.sinks", f"{h}self_attn.sinks")
        f, m = f"{a}ffn.sublayer.", f"{h}mlp."
        for p in ("weight", "bias"):
            w.copy(f"{f}router.{p}", f"{m}router.{p}")
        for e in range(cfg.ffn.options.n_experts):
            x = f"{f}experts.{e}."
            for ours, cols in (("gate", slice(0, None, 2)), ("up", slice(1, None, 2))):
                w.copy(f"{x}{ours}.weight", f"{m}experts.gate_up_proj", lambda t, e=e, s=cols: t[e][:, s].t())
                w.copy(f"{x}{ours}.bias", f"{m}experts.gate_up_proj_bias", lambda t, e=e, s=cols: t[e, s])
            w.copy(f"{x}down.weight", f"{m}experts.down_proj", lambda t, e=e: t[e].t())
            w.copy(f"{x}down.bias", f"{m}experts.down_proj_bias", lambda t, e=e: t[e])


register(HFArchitecture("gpt_oss", gpt_oss_config, gpt_oss_weights, prefix="model.", ignore=ROTARY))
