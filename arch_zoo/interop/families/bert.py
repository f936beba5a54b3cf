"""BERT (``BertForMaskedLM``, ``BertModel``).

BertForMaskedLM becomes an encoder with the ``mlm`` head. BertModel has no LM head; it becomes an
encoder whose ``embedding`` head returns the [CLS] state. BertModel's pooler (dense + tanh over
[CLS], trained by next-sentence prediction) has no arch_zoo counterpart and is not converted.
"""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import FFN_ACTIVATIONS, HFFamily, ffn_name, register, unsupported
from ..mapping import PARAMS, common, copy_each, inverse, shared_keys, spec

MLM = "cls.predictions."
LAYER = (("mixer.sublayer.out", "attention.output.dense"), ("mixer.norm", "attention.output.LayerNorm"),
         ("ffn.sublayer.up", "intermediate.dense"), ("ffn.sublayer.down", "output.dense"),
         ("ffn.norm", "output.LayerNorm"))


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("is_decoder") or c.get("add_cross_attention"):
        raise unsupported("bert", "a BERT decoder (is_decoder / add_cross_attention)")
    if c.get("position_embedding_type", "absolute") not in (None, "absolute"):
        raise unsupported("bert", f"position_embedding_type '{c['position_embedding_type']}'")
    act = ffn_name("bert", c.get("hidden_act", "gelu"))
    eps = c.get("layer_norm_eps", 1e-12)
    if f"{MLM}transform.dense.weight" in weights:
        head = {"name": "mlm", "activation": act, "norm_eps": eps}
    else:
        head = {"name": "embedding", "pooling": "cls", "normalize": False}
    return {
        "kind": "encoder", "vocab_size": c["vocab_size"],
        "d_model": c["hidden_size"], "n_layers": c["num_hidden_layers"], "n_heads": c["num_attention_heads"],
        "d_ff": c["intermediate_size"], "max_seq_len": c.get("max_position_embeddings", 512),
        "position": "learned", "type_vocab_size": c.get("type_vocab_size", 2), "embedding_norm": True,
        "norm": {"name": "layernorm", "eps": eps}, "norm_placement": "post", "final_norm": False,
        "ffn": act, "bias": True, "head": head, **shared_keys(c, tie=True),
        "dropout": c.get("hidden_dropout_prob", 0.1),
        "attention_dropout": c.get("attention_probs_dropout_prob", 0.1),
    }


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    e = "embeddings."
    w.copy("embed.weight", f"{e}word_embeddings.weight")
    w.copy("encoder.position.table.weight", f"{e}position_embeddings.weight")
    w.copy("token_type.weight", f"{e}token_type_embeddings.weight")
    copy_each(w, "encoder.", e, (("embedding_norm", "LayerNorm"),), PARAMS)
    for i in range(cfg.encoder_layers):
        a, h = f"encoder.layers.{i}.", f"encoder.layer.{i}."
        for p in PARAMS:
            w.fuse(f"{a}mixer.sublayer.qkv.{p}", [f"{h}attention.self.{x}.{p}" for x in ("query", "key", "value")])
        copy_each(w, a, h, LAYER, PARAMS)
    copy_each(w, "head.", MLM, (("transform", "transform.dense"), ("norm", "transform.LayerNorm")), PARAMS)
    w.copy("head.proj.weight", f"{MLM}decoder.weight")
    # the output bias is one parameter that Hugging Face keeps under two names
    w.copy("head.proj.bias", f"{MLM}decoder.bias")
    w.alias("head.proj.bias", f"{MLM}bias")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    head = spec(d, "head")
    return {**common(m, d), "model_type": "bert",
            "architectures": ["BertForMaskedLM" if head["name"] == "mlm" else "BertModel"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "type_vocab_size": m.type_vocab_size, "layer_norm_eps": spec(d, "norm").get("eps", 1e-12),
            "hidden_act": inverse(FFN_ACTIVATIONS, spec(d, "ffn")["name"], "ffn"),
            "hidden_dropout_prob": m.dropout, "attention_probs_dropout_prob": m.rate("attention_dropout"),
            "pad_token_id": m.pad_token_id}


FAMILY = register(HFFamily(
    "bert", "BERT", config, weights, write, kind="encoder", prefix="bert.",
    ignore=(r"pooler\..*", r"embeddings\.(position_ids|token_type_ids)"),
))
