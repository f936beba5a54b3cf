"""DeepSeek-V3 (``DeepseekV3ForCausalLM``, ``DeepseekV3Model``): Llama's pre-norm RMSNorm layout with
multi-head latent attention (``mla``) in every layer, dense SwiGLU feed-forwards in the first
``first_k_dense_replace`` layers and, after them, a mixture of experts: sigmoid scores, the top
``topk_group`` of ``n_group`` expert groups (a group scores the sum of its two best), a selection
bias (``e_score_correction_bias``) that chooses experts without weighting them, the chosen weights
renormalised and scaled by ``routed_scaling_factor``, beside ``n_shared_experts`` shared experts.

HF's config keeps no training rule for the routers; the model gets DeepSeek-V3's (Liu et al. 2024,
section 2.1.2 and 4.2): the selection bias moves 0.001 a step (aux-loss-free balancing) beside a
balance loss weighted 0.0001."""
from __future__ import annotations

from typing import Any, Dict

from ...coerce import to_dict
from ...components.mixers.latent_attention import RANKS
from ...config import ModelConfig
from ...config.layers import resolved_mixer
from ...config.validation import layer_configs
from ..checkpoint import WeightMap
from ..family import HFFamily, register, unsupported
from ..mapping import NotExpressible, common, copy_each, decoder_layers, dense_mlp, inverse, spec, stacked_experts
from . import llama

MLA_NAMES = {"q_proj": "q_proj", "q_a": "q_a_proj", "q_norm": "q_a_layernorm", "q_b": "q_b_proj",
             "kv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_b": "kv_b_proj", "out": "o_proj"}
BIAS_UPDATE_SPEED, BALANCE_LOSS_WEIGHT = 0.001, 0.0001  # the paper's gamma and alpha
LATENT_EPS = 1e-6  # DeepseekV3RMSNorm's default: q_a_layernorm and kv_a_layernorm keep it whatever rms_norm_eps says


def config(c: dict, weights: WeightMap) -> dict:
    if c.get("attention_bias", False):  # model.bias would put biases on the feed-forwards as well
        raise unsupported("deepseek_v3", "attention_bias without feed-forward biases")
    if not c.get("n_shared_experts"):  # HF still builds the shared MLP, zero units wide
        raise unsupported("deepseek_v3", "n_shared_experts 0 (a zero-width shared MLP)")
    cfg = llama.config(c, weights, "deepseek_v3")
    dense = cfg["ffn"]
    cfg.pop("n_kv_heads")  # keys and values come from the latent, one of each per query head
    cfg["head_dim"] = c["v_head_dim"]  # HF's head_dim is the rotary width; mla's own widths are all set
    # HF's rotary covers all qk_rope_head_dim dims whatever partial_rotary_factor says
    cfg["position"] = {"name": "rope", "base": cfg["position"]["base"],
                       "interleaved": bool(c.get("rope_interleave", True))}
    cfg["mixer"] = {"name": "mla", **{k: c[k] for k in RANKS}}
    if cfg["norm"]["eps"] != LATENT_EPS:  # (unset where they agree: mla's null is model.norm's eps)
        cfg["mixer"]["norm_eps"] = LATENT_EPS
    n, first = c["num_hidden_layers"], min(c.get("first_k_dense_replace") or 0, c["num_hidden_layers"])
    experts = c.get("moe_intermediate_size")
    if first < n:
        cfg["ffn"] = {"name": "moe", "expert": dense, "n_experts": c["n_routed_experts"],
                      "top_k": c["num_experts_per_tok"], "scoring": "sigmoid",
                      # null where it is the dense width: moe's default, so either spelling exports
                      "d_ff": None if experts == c["intermediate_size"] else experts,
                      "norm_topk_prob": bool(c.get("norm_topk_prob", True)),
                      "routed_scaling_factor": float(c.get("routed_scaling_factor", 1.0)),
                      "n_group": c.get("n_group") or 1, "topk_group": c.get("topk_group") or 1,
                      "n_shared_experts": c["n_shared_experts"], "selection_bias": True,
                      "bias_update_speed": BIAS_UPDATE_SPEED, "aux_loss_weight": BALANCE_LOSS_WEIGHT}
    cfg["layers"] = [{"range": f"0:{first}", "ffn": dense}] if 0 < first < n else None
    return cfg


def weights(w: WeightMap, cfg: ModelConfig) -> None:
    for layer, a, h in decoder_layers(w, cfg):
        copy_each(w, f"{a}mixer.sublayer.", f"{h}self_attn.", list(MLA_NAMES.items()))
        _feedforward(w, layer, f"{a}ffn.sublayer.", f"{h}mlp.")
    if not cfg.tie_embeddings:
        w.copy("head.proj.weight", "lm_head.weight")


def _feedforward(w: WeightMap, layer: ModelConfig, a: str, h: str) -> None:
    """A dense layer's MLP, or the router (its weight and selection bias), the routed experts (stacked
    as transformers 5 holds them, or one module per expert as the published checkpoints store them)
    and the shared experts as one MLP."""
    if layer.ffn.name != "moe":
        dense_mlp(w, a, h)
        return
    o = layer.ffn.options
    w.copy(f"{a}router.weight", f"{h}gate.weight")
    w.copy(f"{a}score_bias", f"{h}gate.e_score_correction_bias")
    stacked_experts(w, a, h, o.n_experts, o.d_ff or layer.d_ff)
    for e in range(o.n_experts):
        dense_mlp(w, f"{a}experts.{e}.", f"{h}experts.{e}.")
    dense_mlp(w, f"{a}shared.", f"{h}shared_experts.")


def write(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """MLA everywhere; dense layers first, then DeepSeek-V3's MoE (``first_k_dense_replace``)."""
    if m.mixer.name != "mla":
        raise NotExpressible(f"mixer {m.mixer.name}")
    if m.bias:  # attention_bias only: DeepSeek-V3's feed-forwards have none
        raise NotExpressible("bias True")
    layers = [to_dict(layer) for layer in layer_configs(m, "decoder", m.decoder_layers)]
    first = next((i for i, layer in enumerate(layers) if spec(layer, "ffn")["name"] == "moe"), len(layers))
    moe = spec(layers[first], "ffn") if first < len(layers) else {}
    dense = spec(layers[0], "ffn")["name"] if first else moe.get("expert", "swiglu")
    position, ranks = spec(d, "position"), resolved_mixer(m).mixer.options
    if ranks.norm_eps != LATENT_EPS:
        raise NotExpressible(f"mla.norm_eps {ranks.norm_eps} (DeepSeek-V3's latent norms keep {LATENT_EPS})")
    experts = {} if not moe else {
        "n_routed_experts": moe["n_experts"], "num_experts_per_tok": moe["top_k"],
        "moe_intermediate_size": moe.get("d_ff") or m.d_ff, "n_shared_experts": moe.get("n_shared_experts"),
        "routed_scaling_factor": moe.get("routed_scaling_factor"), "n_group": moe.get("n_group"),
        "topk_group": moe.get("topk_group"), "norm_topk_prob": moe.get("norm_topk_prob")}
    return {**common(m, d), "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.n_heads, "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "rope_theta": position.get("base", 10000.0), "rope_interleave": bool(position.get("interleaved")),
            "rms_norm_eps": spec(d, "norm").get("eps", 1e-6), "hidden_act": inverse(llama.GATED, dense, "ffn"),
            **{k: getattr(ranks, k) for k in RANKS}, "first_k_dense_replace": first, **experts,
            "attention_bias": False, "attention_dropout": m.rate("attention_dropout")}


FAMILY = register(HFFamily("deepseek_v3", "DeepSeek-V3", config, weights, write, mixers=("mla",), prefix="model.",
                           ignore=(r"rotary_emb\.(original_)?inv_freq",  # recomputed, not learned
                                   # the multi-token prediction module the published checkpoint stores after
                                   # its 61 layers (HF leaves it out too): it predicts no next token
                                   r"layers\.61\..*")))
