"""RecurrentGemma (``RecurrentGemmaForCausalLM``, ``RecurrentGemmaModel``; Griffin, De et al. 2024): pre-norm
layers whose temporal block is Griffin's recurrent block (``rg_lru``) or local multi-query attention, by
``block_types`` repeated over the layers (recurrent, recurrent, attention by default); every layer then
has a gated tanh-GELU MLP of half ``intermediate_size``, with biases.

What is its own: Gemma's zero-centred RMSNorm (1 + w); embeddings scaled by sqrt(hidden_size) rounded to
bfloat16 (``parametrization: {name: standard, embedding_multiplier_dtype: bfloat16}``); rotary
embeddings on half of each head (``partial_rotary_factor``); q, k, v without biases but the output
projection with one (``mixer: {name: attention, qkv_bias: false}`` beside ``bias: true``); every attention
layer windowed (``attention_window_size``); the logits soft-capped (``logits_soft_cap``); head_dim always
hidden_size / heads; the RG-LRU's gates have as many blocks as attention heads.

transformers' recurrent block convolves and scans whatever the positions hold, padding too: a left-padded
row's first real positions see the pads' inputs through the convolution. arch_zoo zeroes them, so a
left-padded row computes what HF computes for the row alone (the tests compare it so)."""
from __future__ import annotations

from typing import Any, Dict, List

from ...config import ModelConfig
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, ffn_name, register, unsupported
from ..mapping import (PARAMS, ROTARY_ANY, NotExpressible, common, copy_each, decoder_layers, dense_mlp,
                       fused_attention, inverse, period, plain_rope, shared_keys, spec)

BLOCKS = ("recurrent", "recurrent", "attention")  # RecurrentGemmaConfig's default block_types
ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu": "gelu"}  # both branches take it
GATED = {"gelu_tanh": "geglu_tanh", "gelu": "geglu"}
RG_LRU = ("linear_x", "linear_y", ("out", "linear_out"), ("conv.conv", "conv_1d"))
RG_LRU_PARAMS = ("recurrent_param", "input_gate_weight", "input_gate_bias", "recurrent_gate_weight",
                 "recurrent_gate_bias")
MAX_SEQ_LEN = 8192  # HF's config has no length; Griffin's training sequences were 8192 tokens


def block_types(c: dict) -> List[str]:
    """Each layer's block: HF's ``block_types`` repeated over ``num_hidden_layers`` (``layers_block_type``)."""
    n, blocks = c["num_hidden_layers"], list(c.get("block_types") or BLOCKS)
    if not blocks or not set(blocks) <= set(BLOCKS):
        raise unsupported("recurrent_gemma", f"block_types {blocks} (expected recurrent and attention)")
    return (blocks * n)[:n]


def config(c: dict, weights: WeightMap) -> dict:
    rope = plain_rope("recurrent_gemma", c)
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = hidden // heads  # RecurrentGemmaConfig sets it so, whatever config.json says
    rotated = int(head_dim * rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.5)))
    activation = c.get("hidden_activation", "gelu_pytorch_tanh")
    act = ffn_name("recurrent_gemma", activation, ACTIVATIONS)
    rg_lru = {"name": "rg_lru", "conv_size": c.get("conv1d_width", 4), "activation": act}
    if (c.get("lru_width") or hidden) != hidden:
        rg_lru["width"] = c["lru_width"]
    types = block_types(c)
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"], "d_model": hidden, "n_layers": c["num_hidden_layers"],
        "n_heads": heads, "n_kv_heads": c.get("num_key_value_heads") or heads, "head_dim": head_dim,
        "d_ff": c["intermediate_size"] // 2, "max_seq_len": c.get("max_position_embeddings", MAX_SEQ_LEN),
        "position": {"name": "rope", "base": float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                     "fraction": rotated / head_dim},
        "mixer": {"name": "attention", "qkv_bias": bool(c.get("attention_bias", False))},
        "attention": {"name": "sliding_window", "window": c.get("attention_window_size", 2048)},
        "layers": ([{"pattern": [{"mixer": rg_lru} if t == "recurrent" else {} for t in types[:period(types)]]}]
                   if "recurrent" in types else None),
        "norm": {"name": "zero_centred_rmsnorm", "eps": c.get("rms_norm_eps", 1e-6)},
        "norm_placement": "pre", "final_norm": True, "ffn": GATED[act], "bias": True,
        "final_logit_softcap": float(c.get("logits_soft_cap", 30.0)), "scale_embeddings": True,
        "parametrization": {"name": "standard", "embedding_multiplier_dtype": "bfloat16"},
        **shared_keys(c, tie=True), "dropout": 0.0,
        **({"attention_dropout": float(c["attention_dropout"])} if c.get("attention_dropout") else {}),
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg, norms=("temporal_pre_norm", "channel_pre_norm"), final="final_norm"):
        m, t = f"{a}mixer.sublayer.", f"{h}temporal_block."
        if layer.mixer.name == "rg_lru":
            copy_each(w, m, t, [(x, x) if isinstance(x, str) else x for x in RG_LRU], PARAMS)
            for p in RG_LRU_PARAMS:
                w.copy(f"{m}{p}", f"{t}rg_lru.{p}")
        else:
            fused_attention(w, m, t, PARAMS)  # q, k, v biases where attention_bias gives them
        dense_mlp(w, f"{a}ffn.sublayer.", f"{h}mlp_block.", params=PARAMS)
    w.copy("head.proj.weight", "lm_head.weight")  # a tied one too: the load checks it equals the embedding


def _one(values: set, what: str):
    """The one value every layer of a kind shares (HF's config has one field for all of them)."""
    if len(values) > 1:
        raise NotExpressible(f"{what} differing between layers {sorted(map(str, values))}")
    return values.pop() if values else None


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """Writes what the layers hold; the export's round trip through ``config`` judges the rest."""
    layers = layer_configs(m, "decoder", m.decoder_layers)
    types = ["recurrent" if layer.mixer.name == "rg_lru" else "attention" for layer in layers]
    recurrent = [layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "rg_lru"]
    rg = _one({(o.width, o.n_heads, o.conv_size, o.activation) for o in recurrent}, "rg_lru options")
    attention = [layer for layer in layers if layer.mixer.name != "rg_lru"]
    window = _one({layer.attention.options.window if layer.attention.name == "sliding_window"
                   else layer.attention.name for layer in attention}, "attention windows")
    if isinstance(window, str):
        raise NotExpressible(f"attention {window}")  # HF's attention layers are all windowed
    qkv_bias = _one({layer.bias if layer.mixer.options.qkv_bias is None else layer.mixer.options.qkv_bias
                     for layer in attention}, "attention qkv_bias")
    if m.final_logit_softcap is None:
        raise NotExpressible("final_logit_softcap null")  # HF always caps
    width, heads, conv, activation = rg or (m.d_model, m.n_heads, 4, inverse(GATED, spec(d, "ffn")["name"], "ffn"))
    if heads != m.n_heads:
        raise NotExpressible(f"rg_lru n_heads {heads} (HF's gates have n_heads {m.n_heads} blocks)")
    position = spec(d, "position")
    return {**common(m, d), "model_type": "recurrent_gemma", "architectures": ["RecurrentGemmaForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "intermediate_size": 2 * m.d_ff, "lru_width": width,
            "conv1d_width": conv, "hidden_activation": inverse(ACTIVATIONS, activation, "rg_lru activation"),
            "block_types": types[:period(types)], "attention_window_size": window or 2048,
            "attention_bias": bool(m.bias if qkv_bias is None else qkv_bias),  # None: no attention layer
            "rope_parameters": {"rope_type": "default", "rope_theta": position.get("base", 10000.0),
                                "partial_rotary_factor": position.get("fraction", 1.0)},
            "rms_norm_eps": spec(d, "norm").get("eps", 1e-6), "logits_soft_cap": m.final_logit_softcap,
            "max_position_embeddings": m.max_seq_len, "attention_dropout": m.rate("attention_dropout")}


FAMILY = register(HFFamily("recurrent_gemma", "RecurrentGemma", config, weights, write, mixers=("rg_lru", "attention"),
                           prefix="model.", ignore=ROTARY_ANY))
