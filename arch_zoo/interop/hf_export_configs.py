"""arch_zoo model configs -> Hugging Face ``config.json`` dicts, one writer per imported family.

Each writer is the inverse of its family's importer (``hf_*.py``) and reads only the config's
fields. A writer does not judge whether the family expresses the model: ``export_hf`` runs the
family's importer on what the writer produced and keeps the family only when that gives back the
model's function (``function_view``), so the importers stay the one definition of each mapping."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..components.mixers import MIXERS
from ..components.mixers.attention import score_width
from ..components.mixers.latent_attention import RANKS as MLA_RANKS
from ..components.placements import ends_with_norm
from ..config import ModelConfig
from ..coerce import to_dict
from ..config.layers import resolved_mixer
from ..config.validation import layer_configs, stacks, validate_model
from .export_family import drop_unread
from .hf_llama import GATED
from .hf_registry import FFN_ACTIVATIONS
from .hf_t5 import GATED as T5_GATED
from .hf_t5 import PLAIN as T5_PLAIN

# what changes how a model trains, never what it computes: re-imported, these take the family's values
TRAINING_ONLY = ("dropout", "attention_dropout", "embedding_dropout", "init", "attention_kernel", "pad_token_id",
                 "layers", "parametrization")
MOE_TRAINING_ONLY = ("aux_loss_weight", "aux_loss_layers", "bias_update_speed")
# a mixer's options that change how it computes, never what (its chunked form's chunk size, its kernels)
MIXER_HOW_ONLY = ("chunk_size", "kernel")


class NotExpressible(Exception):
    """What of the model a family has no field for, e.g. "position alibi"."""


def function_view(m: ModelConfig) -> Dict[str, Any]:
    """The fields that decide what the model computes, layer by layer (per-layer overrides resolved,
    defaults that depend on other keys filled in), without those that only shape training or that no
    layer reads (``export_family.drop_unread``)."""
    m = validate_model(m)
    # defaults that depend on other keys, written out: a family may store them as numbers
    width = score_width(MIXERS.get(m.mixer.name).factory, m.mixer.options, m)[0]  # what q.k sums over
    m = dataclasses.replace(m, attention_scale=m.attention_scale or width ** -0.5, head_dim=m.dim_per_head,
                            n_kv_heads=m.kv_heads, n_encoder_layers=m.encoder_layers, n_decoder_layers=m.decoder_layers,
                            final_norm=ends_with_norm(m))
    top = {k: v for k, v in to_dict(resolved_mixer(m)).items() if k not in TRAINING_ONLY + ("n_layers",)}
    if isinstance(top.get("ffn"), dict):
        top["ffn"] = {k: v for k, v in top["ffn"].items() if k not in MOE_TRAINING_ONLY}
    top["mixer"] = _mixer_view(m)
    out: Dict[str, Any] = {"model": top}
    for stack, depth in stacks(m)[:2]:
        layers = []
        for layer in layer_configs(m, stack, depth):
            view = {k: v for k, v in to_dict(resolved_mixer(layer)).items() if k not in TRAINING_ONLY}
            if isinstance(view.get("ffn"), dict):
                view["ffn"] = {k: v for k, v in view["ffn"].items() if k not in MOE_TRAINING_ONLY}
            view["mixer"] = _mixer_view(layer)
            layers.append(view)
        out[stack] = layers
    return drop_unread(out, m)


def _mixer_view(m: ModelConfig) -> Any:
    """The mixer's spec as it computes: nulls filled in from the layer (the mixer's ``resolved_options``),
    so an option left to its default equals the number a family writes."""
    spec = m.mixer
    options = resolved_mixer(m).mixer.options
    view = to_dict(options) if dataclasses.is_dataclass(options) else {}
    return {"name": spec.name, **{k: v for k, v in view.items() if k not in MIXER_HOW_ONLY}}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b


def first_difference(a: Any, b: Any, path: str = "") -> Optional[str]:
    """The first field where two function views differ, as "field value" of ``a`` (the model's):
    "position alibi", or "attention sliding_window (decoder layer 1)" for a per-layer one."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            found = first_difference(a[k], b.get(k), f"{path}.{k}" if path else k)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):  # a stack's layers
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y)
            if found:
                return f"{found} ({path} layer {i})"
        return None
    if _same(a, b):
        return None
    key = path.removeprefix("model.").removesuffix(".name")
    return f"{key} {a.get('name') if isinstance(a, dict) else a}"


def count_differences(a: Any, b: Any) -> int:
    """How many leaves of two function views differ: the family with the fewest is the closest."""
    if isinstance(a, dict) and isinstance(b, dict):
        return sum(count_differences(v, b.get(k)) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return sum(count_differences(x, y) for x, y in zip(a, b))
    return int(not _same(a, b))


def _inverse(table: Mapping[str, str], value: str, what: str) -> str:
    for k, v in table.items():
        if v == value:
            return k
    raise NotExpressible(f"{what} {value}")


def _spec(d: dict, key: str) -> dict:
    value = d.get(key)
    return value if isinstance(value, dict) else {"name": value}


def _layer_types(m: ModelConfig) -> Dict[str, Any]:
    """HF's per-layer ``layer_types`` and its one ``sliding_window`` from each layer's attention."""
    types, windows = [], set()
    for layer in layer_configs(m, "decoder", m.decoder_layers):
        spec = _spec(to_dict(layer), "attention")
        if spec["name"] == "sliding_window":
            types.append("sliding_attention")
            windows.add(spec.get("window"))
        else:
            types.append("full_attention")
    if len(windows) > 1:
        raise NotExpressible(f"attention sliding windows of several widths {sorted(windows)}")
    return {"layer_types": types, "sliding_window": windows.pop() if windows else None}


def _integral(x: float):
    """An int where HF's config wants one (Gemma's query_pre_attn_scalar) and ``x`` is one up to rounding."""
    return round(x) if math.isclose(x, round(x), rel_tol=1e-9) else x


def _common(m: ModelConfig, d: dict) -> Dict[str, Any]:
    # bos / eos are the tokenizer's (``export_hf.special_ids``), not a family's defaults (GPT-2's 50256,
    # past a small vocabulary's end)
    return {"vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_embeddings,
            "initializer_range": _spec(d, "init").get("std", 0.02), "bos_token_id": None, "eos_token_id": None}


def gpt2(m: ModelConfig, d: dict) -> Dict[str, Any]:
    return {**_common(m, d), "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "n_embd": m.d_model, "n_layer": m.n_layers, "n_head": m.n_heads, "n_inner": m.d_ff,
            "n_positions": m.max_seq_len, "layer_norm_epsilon": _spec(d, "norm").get("eps", 1e-5),
            "activation_function": _inverse(FFN_ACTIVATIONS, _spec(d, "ffn")["name"], "ffn"),
            "scale_attn_weights": m.attention_scale is None, "resid_pdrop": m.dropout,
            "attn_pdrop": m.rate("attention_dropout"), "embd_pdrop": m.rate("embedding_dropout")}


def llama(m: ModelConfig, d: dict, model_type: str = "llama", cls: str = "LlamaForCausalLM",
          ffn: Optional[dict] = None) -> Dict[str, Any]:
    position = _spec(d, "position")
    return {**_common(m, d), "model_type": model_type, "architectures": [cls],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "head_dim": m.dim_per_head, "intermediate_size": m.d_ff,
            "max_position_embeddings": m.max_seq_len,
            "rope_theta": position.get("base", 10000.0),
            "rms_norm_eps": _spec(d, "norm").get("eps", 1e-6),
            "hidden_act": _inverse(GATED, (ffn or _spec(d, "ffn"))["name"], "ffn"),
            "attention_bias": m.bias, "mlp_bias": m.bias, "attention_dropout": m.rate("attention_dropout")}


def mistral(m: ModelConfig, d: dict) -> Dict[str, Any]:
    types = _layer_types(m)
    if len(set(types["layer_types"])) > 1:
        raise NotExpressible("attention differing between layers")
    return {**llama(m, d, "mistral", "MistralForCausalLM"), "sliding_window": types["sliding_window"]}


def qwen3(m: ModelConfig, d: dict) -> Dict[str, Any]:
    types = _layer_types(m)
    sliding = types["layer_types"].count("sliding_attention")
    first = m.n_layers - sliding  # Qwen3 windows the layers from max_window_layers on
    return {**llama(m, d, "qwen3", "Qwen3ForCausalLM"), **types, "use_sliding_window": bool(sliding),
            "max_window_layers": first if sliding else m.n_layers}


def mixtral(m: ModelConfig, d: dict) -> Dict[str, Any]:
    moe = _spec(d, "ffn")
    expert = {"name": moe.get("expert")} if moe["name"] == "moe" else {"name": f"dense {moe['name']}"}
    return {**llama(m, d, "mixtral", "MixtralForCausalLM", ffn=expert),
            "sliding_window": _layer_types(m)["sliding_window"],
            "num_local_experts": moe.get("n_experts"), "num_experts_per_tok": moe.get("top_k"),
            "router_aux_loss_coef": moe.get("aux_loss_weight", 0.001), "router_jitter_noise": 0.0}


def gemma2(m: ModelConfig, d: dict) -> Dict[str, Any]:
    base = llama(m, d, "gemma2", "Gemma2ForCausalLM", ffn={"name": "swiglu"})
    for key in ("hidden_act", "mlp_bias"):
        base.pop(key)
    scale = m.attention_scale if m.attention_scale is not None else m.dim_per_head ** -0.5
    return {**base, **_layer_types(m),
            "hidden_activation": _inverse({"gelu_pytorch_tanh": "geglu_tanh", **GATED}, _spec(d, "ffn")["name"], "ffn"),
            "query_pre_attn_scalar": _integral(scale ** -2), "attn_logit_softcapping": m.attn_logit_softcap,
            "final_logit_softcapping": m.final_logit_softcap}


def gpt_neox(m: ModelConfig, d: dict) -> Dict[str, Any]:
    position = _spec(d, "position")
    return {**_common(m, d), "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "rotary_emb_base": position.get("base", 10000.0), "rotary_pct": position.get("fraction", 0.25),
            "layer_norm_eps": _spec(d, "norm").get("eps", 1e-5),
            "use_parallel_residual": _spec(d, "norm_placement")["name"] == "parallel",
            "hidden_act": _inverse(FFN_ACTIVATIONS, _spec(d, "ffn")["name"], "ffn"), "attention_bias": m.bias,
            "hidden_dropout": m.dropout, "attention_dropout": m.rate("attention_dropout")}


def bloom(m: ModelConfig, d: dict) -> Dict[str, Any]:
    return {**_common(m, d), "model_type": "bloom", "architectures": ["BloomForCausalLM"],
            "hidden_size": m.d_model, "n_layer": m.n_layers, "n_head": m.n_heads, "seq_length": m.max_seq_len,
            "layer_norm_epsilon": _spec(d, "norm").get("eps", 1e-5),
            "hidden_dropout": m.dropout, "attention_dropout": m.rate("attention_dropout")}


def bert(m: ModelConfig, d: dict) -> Dict[str, Any]:
    head = _spec(d, "head")
    return {**_common(m, d), "model_type": "bert",
            "architectures": ["BertForMaskedLM" if head["name"] == "mlm" else "BertModel"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "type_vocab_size": m.type_vocab_size, "layer_norm_eps": _spec(d, "norm").get("eps", 1e-12),
            "hidden_act": _inverse(FFN_ACTIVATIONS, _spec(d, "ffn")["name"], "ffn"),
            "hidden_dropout_prob": m.dropout, "attention_probs_dropout_prob": m.rate("attention_dropout"),
            "pad_token_id": m.pad_token_id}


def t5(m: ModelConfig, d: dict) -> Dict[str, Any]:
    ffn, position = _spec(d, "ffn")["name"], _spec(d, "position")
    gated = ffn in T5_GATED.values()
    act = _inverse(T5_GATED if gated else T5_PLAIN, ffn, "ffn")
    return {**_common(m, d), "model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
            "d_model": m.d_model, "num_layers": m.encoder_layers, "num_decoder_layers": m.decoder_layers,
            "num_heads": m.n_heads, "d_kv": m.dim_per_head, "d_ff": m.d_ff,
            "relative_attention_num_buckets": position.get("num_buckets", 32),
            "relative_attention_max_distance": position.get("max_distance", 128),
            "layer_norm_epsilon": _spec(d, "norm").get("eps", 1e-6),
            "feed_forward_proj": f"gated-{act}" if gated else act, "dense_act_fn": act,
            "scale_decoder_outputs": bool(_spec(d, "head").get("scale_input")),
            "n_positions": m.max_seq_len, "dropout_rate": m.dropout, "pad_token_id": m.pad_token_id, "is_encoder_decoder": True}


def _mixers(m: ModelConfig) -> List[Any]:
    """Each decoder layer's mixer spec (per-layer overrides resolved)."""
    return [layer.mixer for layer in layer_configs(m, "decoder", m.decoder_layers)]


def mamba2(m: ModelConfig, d: dict) -> Dict[str, Any]:
    mixer = _mixers(m)[0]
    if mixer.name != "mamba2":
        raise NotExpressible(f"mixer {mixer.name}")
    o = mixer.options.resolved(m)
    heads, head_dim = o.n_heads, o.head_dim
    return {**_common(m, d), "model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_heads": heads, "head_dim": head_dim,
            "expand": _integral(heads * head_dim / m.d_model), "state_size": o.state_size, "n_groups": o.n_groups,
            "conv_kernel": o.conv_size, "use_conv_bias": o.conv_bias, "chunk_size": o.chunk_size,
            "time_step_min": o.dt_min, "time_step_max": o.dt_max,
            "layer_norm_epsilon": _spec(d, "norm").get("eps", 1e-5), "use_bias": m.bias,
            "max_position_embeddings": m.max_seq_len}


def qwen3_next(m: ModelConfig, d: dict) -> Dict[str, Any]:
    layers = layer_configs(m, "decoder", m.decoder_layers)
    if any(layer.bias for layer in layers):  # attention_bias only: its Gated DeltaNet and MLPs have none
        raise NotExpressible("bias True")
    types = ["linear_attention" if layer.mixer.name == "gated_deltanet" else "full_attention" for layer in layers]
    base = llama(m, d, "qwen3_next", "Qwen3NextForCausalLM", ffn={"name": "swiglu"})
    base.pop("mlp_bias")
    out = {**base, "partial_rotary_factor": _spec(d, "position").get("fraction", 1.0),  # Qwen3-Next reads it
           "layer_types": types, "decoder_sparse_step": 1,
           "mlp_only_layers": [i for i, layer in enumerate(layers) if layer.ffn.name != "moe"]}
    gdn = next((layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "gated_deltanet"), None)
    if gdn is not None:
        out.update(linear_num_key_heads=gdn.n_heads, linear_num_value_heads=gdn.n_v_heads,
                   linear_key_head_dim=gdn.head_dim, linear_value_head_dim=gdn.v_head_dim,
                   linear_conv_kernel_dim=gdn.conv_size)
    moe = next((layer for layer in layers if layer.ffn.name == "moe"), None)
    if moe is None:
        out["num_experts"] = 0
    else:
        o = moe.ffn.options
        out.update(num_experts=o.n_experts, num_experts_per_tok=o.top_k, moe_intermediate_size=o.d_ff or moe.d_ff,
                   shared_expert_intermediate_size=o.shared_d_ff or o.n_shared_experts * (o.d_ff or moe.d_ff),
                   norm_topk_prob=o.norm_topk_prob, router_aux_loss_coef=o.aux_loss_weight)
    return out


def lfm2(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """Inverse of ``hf_lfm2``: d_ff written as the actual width (``block_auto_adjust_ff_dim`` off)."""
    layers = layer_configs(m, "decoder", m.decoder_layers)
    convs = [layer.mixer.options.resolved(layer) for layer in layers if layer.mixer.name == "short_conv"]
    if len({(o.conv_size, o.bias) for o in convs}) > 1:
        raise NotExpressible(f"short_conv options differing between layers {sorted({str(o) for o in convs})}")
    position = _spec(d, "position")
    eps = _spec(d, "norm").get("eps", 1e-5)
    return {**_common(m, d), "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.kv_heads, "intermediate_size": m.d_ff, "block_auto_adjust_ff_dim": False,
            "max_position_embeddings": m.max_seq_len, "norm_eps": eps,
            "rope_parameters": {"rope_type": "default", "rope_theta": position.get("base", 1_000_000.0)},
            "layer_types": ["conv" if layer.mixer.name == "short_conv" else "full_attention" for layer in layers],
            "conv_L_cache": convs[0].conv_size if convs else 3, "conv_bias": bool(convs and convs[0].bias)}


def diffllama(m: ModelConfig, d: dict) -> Dict[str, Any]:
    if _spec(d, "mixer")["name"] != "differential_attention":
        raise NotExpressible(f"mixer {m.mixer.name}")
    if m.bias:  # DiffLlama's MLP has no biases
        raise NotExpressible("bias True")
    base = llama(m, d, "diffllama", "DiffLlamaForCausalLM")
    for key in ("mlp_bias",):  # not read by DiffLlama
        base.pop(key)
    mixer = _spec(d, "mixer")
    return {**base, "lambda_std_dev": mixer.get("lambda_std", 0.1)}


def deepseek_v3(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """MLA everywhere; dense layers first, then DeepSeek-V3's MoE (``first_k_dense_replace``)."""
    if m.mixer.name != "mla":
        raise NotExpressible(f"mixer {m.mixer.name}")
    if m.bias:  # attention_bias only: DeepSeek-V3's feed-forwards have none
        raise NotExpressible("bias True")
    layers = [to_dict(layer) for layer in layer_configs(m, "decoder", m.decoder_layers)]
    first = next((i for i, layer in enumerate(layers) if _spec(layer, "ffn")["name"] == "moe"), len(layers))
    moe = _spec(layers[first], "ffn") if first < len(layers) else {}
    dense = _spec(layers[0], "ffn")["name"] if first else moe.get("expert", "swiglu")
    position, ranks = _spec(d, "position"), resolved_mixer(m).mixer.options
    experts = {} if not moe else {
        "n_routed_experts": moe["n_experts"], "num_experts_per_tok": moe["top_k"],
        "moe_intermediate_size": moe.get("d_ff") or m.d_ff, "n_shared_experts": moe.get("n_shared_experts"),
        "routed_scaling_factor": moe.get("routed_scaling_factor"), "n_group": moe.get("n_group"),
        "topk_group": moe.get("topk_group"), "norm_topk_prob": moe.get("norm_topk_prob")}
    return {**_common(m, d), "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
            "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
            "num_key_value_heads": m.n_heads, "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
            "rope_theta": position.get("base", 10000.0), "rope_interleave": bool(position.get("interleaved")),
            "rms_norm_eps": _spec(d, "norm").get("eps", 1e-6), "hidden_act": _inverse(GATED, dense, "ffn"),
            **{k: getattr(ranks, k) for k in MLA_RANKS}, "first_k_dense_replace": first, **experts,
            "attention_bias": False, "attention_dropout": m.rate("attention_dropout")}



def gpt_oss(m: ModelConfig, d: dict) -> Dict[str, Any]:
    """Inverse of ``hf_gpt_oss``: every feed-forward a biased-router MoE of clamped-SwiGLU experts,
    biases everywhere, RoPE or YaRN on whole heads (HF's gpt-oss rotates all of head_dim)."""
    moe = _spec(d, "ffn")
    expert = _spec(moe, "expert") if moe["name"] == "moe" else {"name": f"dense {moe['name']}"}
    if expert["name"] != "clamped_swiglu":
        raise NotExpressible(f"ffn {expert['name']}")
    if not m.bias:
        raise NotExpressible("bias False")
    position = _spec(d, "position")
    if position["name"] not in ("rope", "yarn") or position.get("fraction", 1.0) != 1.0:
        raise NotExpressible(f"position {position['name']} (fraction {position.get('fraction')})")
    rope = {"rope_type": "default" if position["name"] == "rope" else "yarn", "rope_theta": position.get("base")}
    if position["name"] == "yarn":
        rope.update({theirs: position.get(ours) for theirs, ours in
                     (("factor", "factor"), ("original_max_position_embeddings", "original_max_seq_len"),
                      ("beta_fast", "beta_fast"), ("beta_slow", "beta_slow"), ("truncate", "truncate"),
                      ("attention_factor", "attention_factor"), ("mscale", "mscale"),
                      ("mscale_all_dim", "mscale_all_dim")) if position.get(ours) is not None})
    base = llama(m, d, "gpt_oss", "GptOssForCausalLM", ffn={"name": "swiglu"})
    for key in ("mlp_bias", "rope_theta"):
        base.pop(key)
    return {**base, **_layer_types(m), "rope_parameters": rope,
            "num_local_experts": moe.get("n_experts"), "num_experts_per_tok": moe.get("top_k"),
            "swiglu_alpha": expert.get("alpha", 1.702), "swiglu_limit": expert.get("limit", 7.0),
            "router_aux_loss_coef": moe.get("aux_loss_weight", 0.001)}


# by model kind, in the order tried: the first family whose importer gives the model back is written
WRITERS: Dict[str, List[Callable[[ModelConfig, dict], Dict[str, Any]]]] = {
    "decoder": [gpt2, llama, mistral, qwen3, mixtral, gemma2, gpt_neox, bloom,
                mamba2, qwen3_next, lfm2, diffllama, deepseek_v3, gpt_oss],
    "encoder": [bert],
    "encoder_decoder": [t5],
}
