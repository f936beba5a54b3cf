"""T5 (``T5ForConditionalGeneration``; ``T5Model`` without the head), versions 1.0 and 1.1 (gated
feed-forwards: "gated-gelu" is the tanh-approximated GELU, Hugging Face's gelu_new)."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, ffn_name, register
from ..mapping import common, inverse, spec

PLAIN = {"relu": "relu", "gelu": "gelu"}
GATED = {"relu": "reglu", "gelu": "geglu", "silu": "swiglu", "gelu_new": "geglu_tanh", "gelu_pytorch_tanh": "geglu_tanh"}


def config(c: dict, weights: WeightMap) -> dict:
    proj = c.get("feed_forward_proj", "relu")
    gated = proj.startswith("gated-")
    # Hugging Face reads "gated-gelu" as gelu_new whatever dense_act_fn says (older config.json files lack it)
    act = "gelu_new" if proj == "gated-gelu" else c.get("dense_act_fn") or proj.split("-")[-1]
    tie = c.get("tie_word_embeddings", True)
    return {
        "kind": "encoder_decoder", "vocab_size": c["vocab_size"],
        "d_model": c["d_model"], "n_layers": c["num_layers"],
        "n_decoder_layers": c.get("num_decoder_layers") or c["num_layers"],
        "n_heads": c["num_heads"], "head_dim": c["d_kv"], "d_ff": c["d_ff"], "max_seq_len": c.get("n_positions", 512),
        "position": {"name": "t5_bias", "num_buckets": c.get("relative_attention_num_buckets", 32),
                     "max_distance": c.get("relative_attention_max_distance", 128)},
        "cross_attention_position": False,
        "attention_kernel": "sdpa",
        "attention_scale": 1.0,
        "norm": {"name": "rmsnorm", "eps": c.get("layer_norm_epsilon", 1e-6)},
        "norm_placement": "pre", "final_norm": True,
        "ffn": ffn_name("t5", act, GATED if gated else PLAIN),
        "bias": False,
        "tie_embeddings": tie, "tie_encoder_decoder_embeddings": True,
        # v1.0 scales the decoder's states by d_model**-0.5 before its tied output projection
        "head": {"name": "lm", "scale_input": bool(c.get("scale_decoder_outputs", tie))},
        "init": {"name": "normal", "std": 0.02, "scaled_residual": False},  # T5's initializer_factor is no std
        "dropout": c.get("dropout_rate", 0.1), "pad_token_id": c.get("pad_token_id") or 0,
    }


def _attention(w: WeightMap, dst: str, src: str, cross: bool) -> None:
    if cross:
        w.copy(f"{dst}q.weight", f"{src}q.weight")
        w.fuse(f"{dst}kv.weight", [f"{src}k.weight", f"{src}v.weight"])
    else:
        w.fuse(f"{dst}qkv.weight", [f"{src}{x}.weight" for x in "qkv"])
    w.copy(f"{dst}out.weight", f"{src}o.weight")


def _ffn(w: WeightMap, dst: str, src: str) -> None:
    w.copy(f"{dst}up.weight", f"{src}wi.weight")
    w.copy(f"{dst}gate.weight", f"{src}wi_0.weight")  # gated: wi_0 is the gate, wi_1 the value
    w.copy(f"{dst}up.weight", f"{src}wi_1.weight")
    w.copy(f"{dst}down.weight", f"{src}wo.weight")


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "shared.weight")
    w.alias("embed.weight", "encoder.embed_tokens.weight")
    w.copy("decoder_embed.weight", "decoder.embed_tokens.weight")
    w.alias("decoder_embed.weight", "shared.weight")  # one table for both unless the config unties them
    for stack, n in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        # the bias table lives in the first layer and is shared by the whole stack
        w.copy(f"{stack}.position.bias.weight", f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
        for i in range(n):
            a, h = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
            _attention(w, f"{a}mixer.sublayer.", f"{h}0.SelfAttention.", cross=False)
            w.copy(f"{a}mixer.norm.weight", f"{h}0.layer_norm.weight")
            ffn = 1
            if stack == "decoder":
                _attention(w, f"{a}cross_attn.sublayer.", f"{h}1.EncDecAttention.", cross=True)
                w.copy(f"{a}cross_attn.norm.weight", f"{h}1.layer_norm.weight")
                ffn = 2
            _ffn(w, f"{a}ffn.sublayer.", f"{h}{ffn}.DenseReluDense.")
            w.copy(f"{a}ffn.norm.weight", f"{h}{ffn}.layer_norm.weight")
        w.copy(f"{stack}.final_norm.weight", f"{stack}.final_layer_norm.weight")
    w.copy("head.proj.weight", "lm_head.weight")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    ffn, position = spec(d, "ffn")["name"], spec(d, "position")
    gated = ffn in GATED.values()
    act = inverse(GATED if gated else PLAIN, ffn, "ffn")
    return {**common(m, d), "model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
            "d_model": m.d_model, "num_layers": m.encoder_layers, "num_decoder_layers": m.decoder_layers,
            "num_heads": m.n_heads, "d_kv": m.dim_per_head, "d_ff": m.d_ff,
            "relative_attention_num_buckets": position.get("num_buckets", 32),
            "relative_attention_max_distance": position.get("max_distance", 128),
            "layer_norm_epsilon": spec(d, "norm").get("eps", 1e-6),
            "feed_forward_proj": f"gated-{act}" if gated else act, "dense_act_fn": act,
            "scale_decoder_outputs": bool(spec(d, "head").get("scale_input")),
            "n_positions": m.max_seq_len, "dropout_rate": m.dropout, "pad_token_id": m.pad_token_id, "is_encoder_decoder": True}


FAMILY = register(HFFamily(
    "t5", "T5", config, weights, write, kind="encoder_decoder",
    # an unused table that checkpoints written by older transformers versions carry
    ignore=(r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight",),
))
