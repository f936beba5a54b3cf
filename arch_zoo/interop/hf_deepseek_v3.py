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

from ..components.mixers.latent_attention import RANKS
from ..config import ModelConfig
from ..config.validation import layer_configs
from .checkpoint import WeightMap
from .hf_llama import llama_config
from .hf_registry import HFArchitecture, register, unsupported

MLA_NAMES = {"q_proj": "q_proj", "q_a": "q_a_proj", "q_norm": "q_a_layernorm", "q_b": "q_b_proj",
             "kv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm", "kv_b": "kv_b_proj", "out": "o_proj"}
BIAS_UPDATE_SPEED, BALANCE_LOSS_WEIGHT = 0.001, 0.0001  # the paper's gamma and alpha


def deepseek_v3_config(c: dict, weights: WeightMap) -> dict:
    if c.get("attention_bias", False):  # model.bias would put biases on the feed-forwards as well
        raise unsupported("deepseek_v3", "attention_bias without feed-forward biases")
    if not c.get("n_shared_experts"):  # HF still builds the shared MLP, zero units wide
        raise unsupported("deepseek_v3", "n_shared_experts 0 (a zero-width shared MLP)")
    cfg = llama_config(c, weights, "deepseek_v3")
    dense = cfg["ffn"]
    cfg.pop("n_kv_heads")  # keys and values come from the latent, one of each per query head
    cfg["head_dim"] = c["v_head_dim"]  # HF's head_dim is the rotary width; mla's own widths are all set
    # HF's rotary covers all qk_rope_head_dim dims whatever partial_rotary_factor says
    cfg["position"] = {"name": "rope", "base": cfg["position"]["base"],
                       "interleaved": bool(c.get("rope_interleave", True))}
    cfg["mixer"] = {"name": "mla", **{k: c[k] for k in RANKS}}
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


def deepseek_v3_weights(w: WeightMap, cfg: ModelConfig) -> None:
    w.copy("embed.weight", "embed_tokens.weight")
    for i, layer in enumerate(layer_configs(cfg, "decoder", cfg.decoder_layers)):
        a, h = f"decoder.layers.{i}.", f"layers.{i}."
        w.copy(f"{a}mixer.norm.weight", f"{h}input_layernorm.weight")
        w.copy(f"{a}ffn.norm.weight", f"{h}post_attention_layernorm.weight")
        for ours, theirs in MLA_NAMES.items():
            w.copy(f"{a}mixer.sublayer.{ours}.weight", f"{h}self_attn.{theirs}.weight")
        _feedforward(w, layer, f"{a}ffn.sublayer.", f"{h}mlp.")
    w.copy("decoder.final_norm.weight", "norm.weight")
    if not cfg.tie_embeddings:
        w.copy("head.proj.weight", "lm_head.weight")


def _dense(w: WeightMap, a: str, h: str) -> None:
    for ours in ("gate", "up", "down"):
        w.copy(f"{a}{ours}.weight", f"{h}{ours}_proj.weight")


def _feedforward(w: WeightMap, layer: ModelConfig, a: str, h: str) -> None:
    """A dense layer's MLP, or the router (its weight and selection bias), the routed experts (as
    transformers 5 fuses them: ``gate_up_proj`` (E, 2 d_ff, d), ``down_proj`` (E, d, d_ff); or one
    module per expert as the published checkpoints store them) and the shared experts as one MLP."""
    if layer.ffn.name != "moe":
        _dense(w, a, h)
        return
    o = layer.ffn.options
    d_ff = o.d_ff or layer.d_ff
    w.copy(f"{a}router.weight", f"{h}gate.weight")
    w.copy(f"{a}score_bias", f"{h}gate.e_score_correction_bias")
    for e in range(o.n_experts):
        x = f"{a}experts.{e}."
        w.copy(f"{x}gate.weight", f"{h}experts.gate_up_proj", lambda t, e=e: t[e, :d_ff])
        w.copy(f"{x}up.weight", f"{h}experts.gate_up_proj", lambda t, e=e: t[e, d_ff:])
        w.copy(f"{x}down.weight", f"{h}experts.down_proj", lambda t, e=e: t[e])
        _dense(w, x, f"{h}experts.{e}.")
    _dense(w, f"{a}shared.", f"{h}shared_experts.")


register(HFArchitecture("deepseek_v3", deepseek_v3_config, deepseek_v3_weights, prefix="model.",
                        ignore=(r"rotary_emb\.(original_)?inv_freq",  # recomputed, not learned
                                # the multi-token prediction module the published checkpoint stores after
                                # its 61 layers (HF leaves it out too): it predicts no next token
                                r"layers\.61\..*")))
