"""Gemma 2 (``Gemma2ForCausalLM``, ``Gemma2Model``): sandwich norms, attention and final logit
soft-capping, scaled embeddings, gated tanh-GELU, query_pre_attn_scalar.

Gemma's RMSNorm multiplies by (1 + weight): the import keeps weight as it is in a
``zero_centred_rmsnorm``, which computes the same float32 sum, so the export gives it back bit for
bit. Local/global alternation (``layer_types``: ``sliding_attention`` on even layers,
``full_attention`` on odd ones by default) becomes per-layer attention (``layer_attention``):
``attention: global`` plus
``layers: [{pattern: [{attention: sliding_window}, {}]}]``; any other ``layer_types`` list maps layer by
layer. Sliding windows have no weights, so the tensors map as without alternation.
"""
from __future__ import annotations

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, ffn_name, register, unsupported
from .hf_llama import GATED, llama_config
from .hf_llama_variants import ATTENTION_TYPES, layer_attention


def gemma2_config(c: dict, weights: WeightMap) -> dict:
    n = c["num_hidden_layers"]
    attention, layers = layer_attention("gemma2", c, [ATTENTION_TYPES[i % 2] for i in range(n)],
                                        repeating=True)
    if c.get("use_bidirectional_attention"):
        raise unsupported("gemma2", "use_bidirectional_attention: true")
    base = llama_config({**c, "hidden_act": "silu", "mlp_bias": c.get("attention_bias", False)}, weights)
    return {**base,
            "norm": {"name": "zero_centred_rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)},
            "norm_placement": "sandwich",
            "ffn": ffn_name("gemma2", c.get("hidden_activation") or c.get("hidden_act", "gelu_pytorch_tanh"),
                            {**GATED, "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh"}),
            "attention_scale": float(c.get("query_pre_attn_scalar", 256)) ** -0.5,
            "attn_logit_softcap": c.get("attn_logit_softcapping"),
            "final_logit_softcap": c.get("final_logit_softcapping"),
            "scale_embeddings": True,
            "tie_embeddings": c.get("tie_word_embeddings", True),
            "attention": attention, "layers": layers}


def gemma2_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_tokens.weight")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        for p in ("weight", "bias"):
            w.fuse(f"{a}mixer.sublayer.qkv.{p}", [f"{h}self_attn.{x}_proj.{p}" for x in "qkv"])
            w.copy(f"{a}mixer.sublayer.out.{p}", f"{h}self_attn.o_proj.{p}")
            for x in ("gate", "up", "down"):
                w.copy(f"{a}ffn.sublayer.{x}.{p}", f"{h}mlp.{x}_proj.{p}")
        for dst, src in (("mixer.norm", "input_layernorm"), ("mixer.post_norm", "post_attention_layernorm"),
                         ("ffn.norm", "pre_feedforward_layernorm"), ("ffn.post_norm", "post_feedforward_layernorm")):
            w.copy(f"{a}{dst}.weight", f"{h}{src}.weight")
    w.copy("decoder.final_norm.weight", "norm.weight")
    w.copy("head.proj.weight", "lm_head.weight")


register(HFArchitecture("gemma2", gemma2_config, gemma2_weights, prefix="model.",
                        ignore=(r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",)))
