"""Mixtral (``MixtralForCausalLM``): Mistral with a mixture of experts in every feed-forward.
``WeightMap.copy`` skips tensors a checkpoint lacks, so Llama's weights map everything shared and
leave the missing dense MLP alone."""
from __future__ import annotations

from typing import Any, Dict

from ...config import ModelConfig
from ..checkpoint import WeightMap
from ..family import HFFamily, register
from ..mapping import ROTARY, copy_each, spec, stacked_experts, written_layer_types
from . import llama, mistral


def config(c: dict, weights: WeightMap) -> dict:
    cfg = mistral.config(c, weights)
    # router_jitter_noise (multiplicative noise on the router input) acts in training only: the converted
    # model computes what HF's computes in eval mode; fine-tuning it here trains without the noise.
    cfg["ffn"] = {"name": "moe", "n_experts": c["num_local_experts"], "top_k": c["num_experts_per_tok"],
                  "expert": cfg["ffn"], "aux_loss_weight": float(c.get("router_aux_loss_coef", 0.001)),
                  "aux_loss_layers": "pooled"}  # HF's load_balancing_loss_func pools the layers
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    """The experts as transformers 5 holds them (``mlp.experts.gate_up_proj`` (E, 2 d_ff, d) and
    ``down_proj`` (E, d, d_ff)) or as the published checkpoints store them
    (``block_sparse_moe.experts.N.w1/w3/w2``: gate, up, down)."""
    llama.weights(w, cfg)
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.layers.{i}.ffn.sublayer.", f"layers.{i}."
        for moe in ("mlp.", "block_sparse_moe."):
            w.copy(f"{a}router.weight", f"{h}{moe}gate.weight")
        stacked_experts(w, a, f"{h}mlp.", cfg.ffn.options.n_experts, cfg.d_ff)
        for e in range(cfg.ffn.options.n_experts):
            copy_each(w, f"{a}experts.{e}.", f"{h}block_sparse_moe.experts.{e}.",
                      (("gate", "w1"), ("up", "w3"), ("down", "w2")))


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    moe = spec(d, "ffn")
    expert = {"name": moe.get("expert")} if moe["name"] == "moe" else {"name": f"dense {moe['name']}"}
    return {**llama.write(m, d, "mixtral", "MixtralForCausalLM", ffn=expert),
            "sliding_window": written_layer_types(m)["sliding_window"],
            "num_local_experts": moe.get("n_experts"), "num_experts_per_tok": moe.get("top_k"),
            "router_aux_loss_coef": moe.get("aux_loss_weight", 0.001), "router_jitter_noise": 0.0}


FAMILY = register(HFFamily("mixtral", "Mixtral", config, weights, write, prefix="model.", ignore=ROTARY))
