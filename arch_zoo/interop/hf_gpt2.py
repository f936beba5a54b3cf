"""GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``). Its Conv1D layers store weights as (in, out): transposed here."""
from __future__ import annotations

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, ffn_name, register, transposed, unsupported


def gpt2_config(c: dict, weights: WeightMap) -> dict:
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
        "tie_embeddings": c.get("tie_word_embeddings", True),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": True},
        "dropout": c.get("resid_pdrop", 0.1), "attention_dropout": c.get("attn_pdrop", 0.1),
        "embedding_dropout": c.get("embd_pdrop", 0.1),
    }


def gpt2_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "wte.weight")
    w.copy("decoder.position.table.weight", "wpe.weight")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.", f"h.{i}."
        for p in ("weight", "bias"):
            w.copy(f"{a}mixer.norm.{p}", f"{h}ln_1.{p}")
            w.copy(f"{a}ffn.norm.{p}", f"{h}ln_2.{p}")
        for dst, src in (("mixer.sublayer.qkv", "attn.c_attn"), ("mixer.sublayer.out", "attn.c_proj"),
                         ("ffn.sublayer.up", "mlp.c_fc"), ("ffn.sublayer.down", "mlp.c_proj")):
            w.copy(f"{a}{dst}.weight", f"{h}{src}.weight", transposed)
            w.copy(f"{a}{dst}.bias", f"{h}{src}.bias")
    for p in ("weight", "bias"):
        w.copy(f"decoder.final_norm.{p}", f"ln_f.{p}")
    w.copy("head.proj.weight", "lm_head.weight")


register(HFArchitecture(
    "gpt2", gpt2_config, gpt2_weights, prefix="transformer.",
    # causal-mask buffers that checkpoints written by older transformers versions carry
    ignore=(r"h\.\d+\.attn\.(bias|masked_bias)",),
))
