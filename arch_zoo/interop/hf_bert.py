"""BERT (``BertForMaskedLM``, ``BertModel``).

BertForMaskedLM becomes an encoder with the ``mlm`` head. BertModel has no LM head; it becomes an
encoder whose ``embedding`` head returns the [CLS] state. BertModel's pooler (dense + tanh over
[CLS], trained by next-sentence prediction) has no arch_zoo counterpart and is not converted.
"""
from __future__ import annotations

from ..config import ModelConfig
from .checkpoint import WeightMap
from .hf_registry import HFArchitecture, ffn_name, register, unsupported

MLM = "cls.predictions."


def bert_config(c: dict, weights: WeightMap) -> dict:
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
        "ffn": act, "bias": True, "head": head,
        "tie_embeddings": c.get("tie_word_embeddings", True),
        "init": {"name": "normal", "std": c.get("initializer_range", 0.02), "scaled_residual": False},
        "dropout": c.get("hidden_dropout_prob", 0.1),
        "attention_dropout": c.get("attention_probs_dropout_prob", 0.1),
        "pad_token_id": c.get("pad_token_id") or 0,
    }


def bert_weights(w: WeightMap, cfg: ModelConfig) -> None:
    e = "embeddings."
    w.copy("embed.weight", f"{e}word_embeddings.weight")
    w.copy("encoder.position.table.weight", f"{e}position_embeddings.weight")
    w.copy("token_type.weight", f"{e}token_type_embeddings.weight")
    for p in ("weight", "bias"):
        w.copy(f"encoder.embedding_norm.{p}", f"{e}LayerNorm.{p}")
        for i in range(cfg.encoder_layers):
            a, h = f"encoder.layers.{i}.", f"encoder.layer.{i}."
            w.fuse(f"{a}mixer.sublayer.qkv.{p}", [f"{h}attention.self.{x}.{p}" for x in ("query", "key", "value")])
            w.copy(f"{a}mixer.sublayer.out.{p}", f"{h}attention.output.dense.{p}")
            w.copy(f"{a}mixer.norm.{p}", f"{h}attention.output.LayerNorm.{p}")
            w.copy(f"{a}ffn.sublayer.up.{p}", f"{h}intermediate.dense.{p}")
            w.copy(f"{a}ffn.sublayer.down.{p}", f"{h}output.dense.{p}")
            w.copy(f"{a}ffn.norm.{p}", f"{h}output.LayerNorm.{p}")
        w.copy(f"head.transform.{p}", f"{MLM}transform.dense.{p}")
        w.copy(f"head.norm.{p}", f"{MLM}transform.LayerNorm.{p}")
    w.copy("head.proj.weight", f"{MLM}decoder.weight")
    # the output bias is one parameter that Hugging Face keeps under two names
    w.copy("head.proj.bias", f"{MLM}decoder.bias")
    w.alias("head.proj.bias", f"{MLM}bias")


register(HFArchitecture(
    "bert", bert_config, bert_weights, prefix="bert.",
    ignore=(r"pooler\..*", r"embeddings\.(position_ids|token_type_ids)"),
))
