"""Llama's descendants: Qwen3 (QK-norm), Mistral (sliding window) and Mixtral (mixture of experts);
and HF's per-layer ``layer_types`` as ``model.layers`` (Qwen3's windowed layers, Gemma 2's alternation).

Each is a Llama with one change, so each converter is Llama's (``llama_config``, ``llama_weights``)
plus that change. ``WeightMap.copy`` skips tensors a checkpoint lacks, so ``llama_weights`` maps
everything the variants share and leaves Mixtral's missing dense MLP alone.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, register, unsupported
from .hf_llama import llama_config, llama_weights

ROTARY = (r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",)  # recomputed, not learned


ATTENTION_TYPES = ("sliding_attention", "full_attention")  # HF's layer_types values


def layer_attention(model_type: str, c: dict, default: List[str],
                    repeating: bool) -> Tuple[object, Optional[List[dict]]]:
    """(``model.attention``, ``model.layers``) for HF's per-layer ``layer_types`` (``default`` when the
    config has none); one type on every layer needs no ``layers``. Written as the family writes it:
    ``repeating``, the shortest ``pattern`` that gives each layer its type (Gemma 2:
    ``[{attention: sliding_window}, {}]``); otherwise one ``range`` entry per run of windowed layers
    (Qwen3's last layers)."""
    n, window = c["num_hidden_layers"], c.get("sliding_window")
    types = list(c.get("layer_types") or default)
    if len(types) != n or not set(types) <= set(ATTENTION_TYPES):
        raise unsupported(model_type, f"layer_types {types} (expected {n} of {', '.join(ATTENTION_TYPES)})")
    if window is None and "sliding_attention" in types:
        raise unsupported(model_type, "sliding_attention layers without a sliding_window")
    sliding = {"name": "sliding_window", "window": int(window)} if window is not None else None
    if len(set(types)) == 1:
        return (sliding if types[0] == "sliding_attention" else "global"), None
    if repeating:
        period = next(p for p in range(1, n + 1) if all(t == types[i % p] for i, t in enumerate(types)))
        return "global", [{"pattern": [{"attention": sliding} if t == "sliding_attention" else {}
                                       for t in types[:period]]}]
    starts = [i for i, t in enumerate(types) if t == "sliding_attention" and (i == 0 or types[i - 1] != t)]
    ends = [i + 1 for i, t in enumerate(types) if t == "sliding_attention" and (i == n - 1 or types[i + 1] != t)]
    return "global", [{"range": f"{a}:{b}", "attention": sliding} for a, b in zip(starts, ends)]


def attention_pattern(model_type: str, c: dict) -> Tuple[object, Optional[List[dict]]]:
    """(``model.attention``, ``model.layers``): Mistral's ``sliding_window`` (None: global attention) on
    every layer. Qwen3 opts in with ``use_sliding_window`` and windows the layers from
    ``max_window_layers`` on (``layer_types``)."""
    window = c.get("sliding_window")
    if model_type == "qwen3":
        on = c.get("use_sliding_window") and window is not None
        first = c.get("max_window_layers", 28)
        return layer_attention(model_type, c, [ATTENTION_TYPES[0] if on and i >= first else ATTENTION_TYPES[1]
                                               for i in range(c["num_hidden_layers"])], repeating=False)
    return ("global" if window is None else {"name": "sliding_window", "window": int(window)}), None


def variant_config(model_type: str, c: dict, weights: WeightMap) -> dict:
    cfg = llama_config(c, weights)
    cfg["attention"], cfg["layers"] = attention_pattern(model_type, c)
    return cfg


def qwen3_config(c: dict, weights: WeightMap) -> dict:
    cfg = variant_config("qwen3", c, weights)
    cfg["qk_norm"] = {"name": "rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)}
    return cfg


def qwen3_weights(w: WeightMap, cfg: ModelConfig) -> None:
    llama_weights(w, cfg)
    for i in range(cfg.decoder_layers):
        for x in "qk":
            w.copy(f"decoder.layers.{i}.mixer.sublayer.{x}_norm.weight", f"layers.{i}.self_attn.{x}_norm.weight")


def mistral_config(c: dict, weights: WeightMap) -> dict:
    return variant_config("mistral", c, weights)


def mixtral_config(c: dict, weights: WeightMap) -> dict:
    cfg = variant_config("mixtral", c, weights)
    # router_jitter_noise (multiplicative noise on the router input) acts in training only: the converted
    # model computes what HF's computes in eval mode; fine-tuning it here trains without the noise.
    cfg["ffn"] = {"name": "moe", "n_experts": c["num_local_experts"], "top_k": c["num_experts_per_tok"],
                  "expert": cfg["ffn"], "aux_loss_weight": float(c.get("router_aux_loss_coef", 0.001)),
                  "aux_loss_layers": "pooled"}  # HF's load_balancing_loss_func pools the layers
    return cfg


def mixtral_weights(w: WeightMap, cfg: ModelConfig) -> None:
    """The experts as transformers 5 holds them (``mlp.experts.gate_up_proj`` (E, 2 d_ff, d) and
    ``down_proj`` (E, d, d_ff)) or as the published checkpoints store them
    (``block_sparse_moe.experts.N.w1/w3/w2``: gate, up, down)."""
    llama_weights(w, cfg)
    d_ff = cfg.d_ff
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.ffn.sublayer.", f"layers.{i}."
        for moe in ("mlp.", "block_sparse_moe."):
            w.copy(f"{a}router.weight", f"{h}{moe}gate.weight")
        for e in range(cfg.ffn.options.n_experts):
            x = f"{a}experts.{e}."
            w.copy(f"{x}gate.weight", f"{h}mlp.experts.gate_up_proj", lambda t, e=e: t[e, :d_ff])
            w.copy(f"{x}up.weight", f"{h}mlp.experts.gate_up_proj", lambda t, e=e: t[e, d_ff:])
            w.copy(f"{x}down.weight", f"{h}mlp.experts.down_proj", lambda t, e=e: t[e])
            for dst, src in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
                w.copy(f"{x}{dst}.weight", f"{h}block_sparse_moe.experts.{e}.{src}.weight")


register(HFArchitecture("qwen3", qwen3_config, qwen3_weights, prefix="model.", ignore=ROTARY))
register(HFArchitecture("mistral", mistral_config, llama_weights, prefix="model.", ignore=ROTARY))
register(HFArchitecture("mixtral", mixtral_config, mixtral_weights, prefix="model.", ignore=ROTARY))
