"""Kimi Linear (``KimiLinearForCausalLM``, ``KimiLinearModel``; Moonshot AI 2025): Llama's pre-norm RMSNorm
layout whose layers are Kimi Delta Attention (``kda``; ``linear_attention``) or multi-head latent attention
(``mla``; ``full_attention``) by ``layer_types``, followed by a dense SwiGLU (``mlp_layer_types`` ``dense``,
the first ``first_k_dense_replace``) or DeepSeek-V3's mixture of experts (``sparse``: sigmoid scores, group
limit, selection bias, renormalised weights times ``routed_scaling_factor``, shared experts beside).

Its MLA layers have no positions at all (``position: none``): the ``qk_rope_head_dim`` part of each query
meets the key part shared by all heads unrotated. The latents' RMSNorms keep transformers' default eps
(1e-6) whatever ``rms_norm_eps`` says (``mla``'s ``norm_eps``). The published checkpoints spell some
settings differently (``linear_attn_config`` with 1-indexed ``full_attn_layers`` / ``kda_layers``,
``num_experts``, ``moe_renormalize``, ...) and store their tensors the original way (separate q/k/v
convolutions, the forget gate's tensors on the layer, per-expert ``block_sparse_moe.experts.N.w1/w2/w3``):
both are read. HF's output projection is never tied (``_tied_weights_keys = {}``).

The config keeps no training rule for the routers; the model gets DeepSeek-V3's (aux-loss-free
balancing and a small balance loss, ``deepseek_v3``), which Kimi Linear's paper is not known here to
change."""
from __future__ import annotations

from typing import Any, Dict, List

from ...coerce import to_dict
from ...components.mixers.kda import HF_NAMES
from ...components.mixers.latent_attention import RANKS
from ...config import ModelConfig
from ...config.layers import resolved_mixer
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import NotExpressible, common, copy_each, decoder_layers, dense_mlp, layer_ranges, layer_types, period, \
    shared_keys, spec
from . import deepseek_v3

LAYER_TYPES, MLP_TYPES = ("linear_attention", "full_attention"), ("dense", "sparse")
TYPE_OF = {"kda": "linear_attention", "mla": "full_attention"}  # mixer -> HF layer type
LATENT_EPS = 1e-6  # KimiLinearRMSNorm's default, which its kv_a / q_a layernorms keep
# (ours, HF's) in KimiLinearDeltaAttention; the published checkpoints keep the forget gate's on the layer
KDA_NAMES = [(ours, theirs) for theirs, ours in HF_NAMES.items() if ours] + [
    (x, x) for x in ("q_proj", "k_proj", "v_proj", "b_proj", "g_a_proj", "g_b_proj", "o_norm")]
# HF's attribute_map: the published config.json's spelling first, transformers' argument name second
ALIASES = {"experts": ("num_experts", "num_local_experts"), "top_k": ("num_experts_per_token", "num_experts_per_tok"),
           "shared": ("num_shared_experts", "n_shared_experts"), "norm": ("moe_renormalize", "norm_topk_prob"),
           "groups": ("num_expert_group", "n_group"), "length": ("model_max_length", "max_position_embeddings")}


def _get(c: dict, key: str, default: Any = None) -> Any:
    return next((c[n] for n in ALIASES[key] if c.get(n) is not None), default)


def _linear(c: dict) -> dict:
    """The KDA layers' settings: ``linear_attn_config``'s win over the flat keys (as HF reads them)."""
    lin = c.get("linear_attn_config") or {}
    return {"n_heads": lin.get("num_heads", c.get("linear_num_heads", 32)),
            "head_dim": lin.get("head_dim", c.get("linear_head_dim", 128)),
            "conv_size": lin.get("short_conv_kernel_size", c.get("linear_conv_kernel_dim", 4))}


def _types(c: dict) -> List[str]:
    n, lin = c["num_hidden_layers"], c.get("linear_attn_config") or {}
    if c.get("layer_types") is None and "full_attn_layers" in lin and "kda_layers" in lin:  # 1-indexed
        default: List[Any] = [None] * n
        for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
            for i in lin[key]:
                if not 1 <= i <= n:
                    raise unsupported("kimi_linear", f"linear_attn_config.{key} layer {i} (layers are 1..{n})")
                default[i - 1] = kind
    else:
        default = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
    return layer_types("kimi_linear", c, LAYER_TYPES, default)


def _mlp_types(c: dict) -> List[str]:
    n = c["num_hidden_layers"]
    first = c.get("first_k_dense_replace", 1)
    types = list(c.get("mlp_layer_types") or ["dense" if i < first else "sparse" for i in range(n)])
    if len(types) != n or not set(types) <= set(MLP_TYPES):
        raise unsupported("kimi_linear", f"mlp_layer_types {types} (expected {n} of {', '.join(MLP_TYPES)})")
    return types


def config(c: dict, weights: WeightMap) -> dict:
    for key, want in (("hidden_act", "silu"), ("moe_router_activation_func", "sigmoid"), ("mla_use_nope", True)):
        if c.get(key, want) != want:  # hidden_act: the KDA convolutions' activation and the experts' gate
            raise unsupported("kimi_linear", f"{key} {c[key]!r}")
    if c.get("attention_bias", False):
        raise unsupported("kimi_linear", "attention_bias (its KDA layers and feed-forwards have no biases)")
    heads = c["num_attention_heads"]
    if (c.get("num_key_value_heads") or heads) != heads:  # HF's MLA would repeat its per-head keys again
        raise unsupported("kimi_linear", f"num_key_value_heads {c['num_key_value_heads']} differing from "
                                         f"num_attention_heads {heads}")
    eps = c.get("rms_norm_eps", 1e-5)
    kda = {"name": "kda", **_linear(c), "norm_eps": eps, "l2norm": "rsqrt"}
    mla = {"name": "mla", **{k: c.get(k) for k in RANKS}, "norm_eps": LATENT_EPS}
    types, mlps = _types(c), _mlp_types(c)
    dense = "swiglu"
    cfg = {"kind": "decoder", "vocab_size": c["vocab_size"], "d_model": c["hidden_size"],
           "n_layers": c["num_hidden_layers"], "n_heads": heads, "head_dim": c.get("v_head_dim") or 128,
           "d_ff": c["intermediate_size"], "max_seq_len": _get(c, "length", 1_048_576), "position": "none",
           "mixer": kda if "linear_attention" in types else mla, "attention": "global",
           "norm": {"name": "rmsnorm", "eps": eps}, "norm_placement": "pre", "final_norm": True, "ffn": dense,
           "bias": False, **shared_keys(c, tie=False), "tie_embeddings": False,  # HF never ties it
           "dropout": 0.0, "attention_dropout": float(c.get("attention_dropout") or 0.0)}
    layers: List[dict] = []
    if len(set(types)) > 1:
        p = period(types)
        if p < len(types):
            layers.append({"pattern": [{"mixer": mla} if t == "full_attention" else {} for t in types[:p]]})
        else:
            layers += [{"range": i, "mixer": mla} for i, t in enumerate(types) if t == "full_attention"]
    if "sparse" in mlps:
        shared = _get(c, "shared", 1)
        if not shared:  # HF still builds the shared MLP, zero units wide
            raise unsupported("kimi_linear", "num_shared_experts 0 (a zero-width shared MLP)")
        experts = c.get("moe_intermediate_size")
        cfg["ffn"] = {"name": "moe", "expert": dense, "n_experts": _get(c, "experts", 256),
                      "top_k": _get(c, "top_k", 8), "scoring": "sigmoid",
                      "d_ff": None if experts == c["intermediate_size"] else experts,
                      "norm_topk_prob": bool(_get(c, "norm", True)),
                      "routed_scaling_factor": float(c.get("routed_scaling_factor", 1.0)),
                      "n_group": _get(c, "groups", 1), "topk_group": c.get("topk_group") or 1,
                      "n_shared_experts": shared, "selection_bias": True,
                      "bias_update_speed": deepseek_v3.BIAS_UPDATE_SPEED,
                      "aux_loss_weight": deepseek_v3.BALANCE_LOSS_WEIGHT}
        layers += [{"range": r, "ffn": dense} for r in layer_ranges([i for i, t in enumerate(mlps) if t == "dense"])]
    cfg["layers"] = layers or None
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg):
        m, s = f"{a}mixer.sublayer.", f"{h}self_attn."
        if layer.mixer.name == "kda":
            _kda(w, m, s)
        else:
            copy_each(w, m, s, list(deepseek_v3.MLA_NAMES.items()))
        if layer.ffn.name == "moe":  # the published checkpoints' experts are one module each, w1 / w3 / w2
            moe, o = f"{h}block_sparse_moe.", layer.ffn.options
            for e in range(o.n_experts):
                dense_mlp(w, f"{a}ffn.sublayer.experts.{e}.", f"{moe}experts.{e}.", ("w1", "w3", "w2"))
            w.copy(f"{a}ffn.sublayer.router.weight", f"{moe}gate.weight")
            w.copy(f"{a}ffn.sublayer.score_bias", f"{moe}gate.e_score_correction_bias")
            dense_mlp(w, f"{a}ffn.sublayer.shared.", f"{moe}shared_experts.")
        deepseek_v3._feedforward(w, layer, f"{a}ffn.sublayer.", f"{h}mlp.")
    w.copy("head.proj.weight", "lm_head.weight")


def _kda(w: WeightMap, a: str, h: str) -> None:
    """transformers' names, or the published ones: the forget gate's tensors on the layer, and q, k, v
    convolved by three convolutions (one depthwise convolution over their concatenation)."""
    copy_each(w, a, h, KDA_NAMES)
    for gate in (f"{h}forget_gate.", h):
        w.copy(f"{a}dt_bias", f"{gate}dt_bias")
        w.copy(f"{a}A_log", f"{gate}A_log", lambda t: t.flatten())  # HF's (1, 1, H, 1)
        copy_each(w, a, gate, [(x, x) for x in ("f_a_proj", "f_b_proj")])
    w.fuse(f"{a}conv.conv.weight", [f"{h}{x}_conv1d.weight" for x in "qkv"])


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """One KDA setting and one MLA setting for all their layers; dense or MoE feed-forwards per layer."""
    if m.bias:
        raise NotExpressible("bias True")
    layers = layer_configs(m, "decoder", m.decoder_layers)
    for layer in layers:
        if layer.mixer.name not in TYPE_OF:
            raise NotExpressible(f"mixer {layer.mixer.name}")
    out: Dict[str, Any] = {}
    for name in TYPE_OF:
        options = {str(resolved_mixer(layer).mixer.options) for layer in layers if layer.mixer.name == name}
        if len(options) > 1:
            raise NotExpressible(f"{name} options differing between layers {sorted(options)}")
        first = next((resolved_mixer(layer).mixer.options for layer in layers if layer.mixer.name == name), None)
        if first is None:
            continue
        if name == "kda":
            out.update(linear_num_heads=first.n_heads, linear_head_dim=first.head_dim,
                       linear_conv_kernel_dim=first.conv_size)
        else:
            out.update({k: getattr(first, k) for k in RANKS})
    specs = [spec(to_dict(layer), "ffn") for layer in layers]
    moe = next((s for s in specs if s["name"] == "moe"), None)
    if moe is not None:
        out.update(num_local_experts=moe["n_experts"], num_experts_per_tok=moe["top_k"],
                   moe_intermediate_size=moe.get("d_ff") or m.d_ff, n_shared_experts=moe.get("n_shared_experts"),
                   routed_scaling_factor=moe.get("routed_scaling_factor"), n_group=moe.get("n_group"),
                   topk_group=moe.get("topk_group"), norm_topk_prob=moe.get("norm_topk_prob"))
    # pad_token_id: HF's default (163839) lies past a small vocabulary's end, where its embedding refuses it
    return {**common(m, d), "pad_token_id": m.pad_token_id, "model_type": "kimi_linear",
            "architectures": ["KimiLinearForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.n_heads, "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "rms_norm_eps": spec(d, "norm").get("eps", 1e-5), "hidden_act": "silu", "attention_bias": False,
            "attention_dropout": m.rate("attention_dropout"),
            "layer_types": [TYPE_OF[layer.mixer.name] for layer in layers],
            "mlp_layer_types": ["sparse" if s["name"] == "moe" else "dense" for s in specs], **out}


FAMILY = register(HFFamily("kimi_linear", "Kimi Linear", config, weights, write, mixers=("kda", "mla"),
                           prefix="model."))
