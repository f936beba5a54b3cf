"""GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``). Its Conv1D layers store weights as (in, out): transposed here."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import FFN_ACTIVATIONS, HFFamily, ffn_name, register, transposed, unsupported
from ..mapping import PARAMS, common, copy_each, inverse, shared_keys, spec


def config(c: dict, weights: WeightMap) -> dict:
    for flag in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if c.get(flag):
            raise unsupported("gpt2", f"{flag}: true")
    return {
        "kind": "decoder", "vocab_size": c["vocab_size"],
        "d_model": c["n_embd"], "n_layers": c["n_layer"], "n_heads": c["n_head"],
        "d_ff": c.get("n_inner") or 4 * c["n_embd"], "max_seq_len": c["n_positions"],
        "position": "learned",
        "norm": {"name": "layernorm", "eps": c.get("layer_norm_epsilon", 1e-5)},
        "norm_placement": "pre", "final_norm": True,
        "ffn": ffn_name("gpt2", c.get("activation_function", "gelu_new")),
        "attention_kernel": "sdpa", "attention_scale": None if c.get("scale_attn_weights", True) else 1.0,
        "bias": True,
        **shared_keys(c, tie=True, scaled_residual=True, pad=False),
        "dropout": c.get("resid_pdrop", 0.1), "attention_dropout": c.get("attn_pdrop", 0.1),
        "embedding_dropout": c.get("embd_pdrop", 0.1),
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "wte.weight")
    w.copy("decoder.position.table.weight", "wpe.weight")
    conv1d = (("mixer.sublayer.qkv", "attn.c_attn"), ("mixer.sublayer.out", "attn.c_proj"),
              ("ffn.sublayer.up", "mlp.c_fc"), ("ffn.sublayer.down", "mlp.c_proj"))
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"h.{i}."
        copy_each(w, a, h, (("mixer.norm", "ln_1"), ("ffn.norm", "ln_2")), PARAMS)
        copy_each(w, a, h, conv1d, ("weight",), transposed)
        copy_each(w, a, h, conv1d, ("bias",))
    copy_each(w, "decoder.", "", (("final_norm", "ln_f"),), PARAMS)
    w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    return {**common(m, d), "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "n_embd": m.d_model, "n_layer": m.n_layers, "n_head": m.n_heads, "n_inner": m.d_ff,
            "n_positions": m.max_seq_len, "layer_norm_epsilon": spec(d, "norm").get("eps", 1e-5),
            "activation_function": inverse(FFN_ACTIVATIONS, spec(d, "ffn")["name"], "ffn"),
            "scale_attn_weights": m.attention_scale is None, "resid_pdrop": m.dropout,
            "attn_pdrop": m.rate("attention_dropout"), "embd_pdrop": m.rate("embedding_dropout")}


FAMILY = register(HFFamily(
    "gpt2", "GPT-2", config, weights, write, prefix="transformer.",
    # causal-mask buffers that checkpoints written by older transformers versions carry
    ignore=(r"h\.\d+\.attn\.(bias|masked_bias)",),
))
