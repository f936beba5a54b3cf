"""arch_zoo model configs -> Hugging Face ``config.json`` dicts, one writer per imported family.

Each writer is the inverse of its family's importer (``hf_*.py``) and reads only the config's
fields. A writer does not judge whether the family expresses the model: ``export_hf`` runs the
family's importer on what the writer produced and keeps the family only when that gives back the
model's function (``function_view``), so the importers stay the one definition of each mapping."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..components.placements import ends_with_norm
from ..config import ModelConfig
from ..coerce import to_dict
from ..config.validation import layer_configs, stacks, validate_model
from .hf_llama import GATED
from .hf_registry import FFN_ACTIVATIONS
from .hf_t5 import GATED as T5_GATED
from .hf_t5 import PLAIN as T5_PLAIN

# what changes how a model trains, never what it computes: re-imported, these take the family's values
TRAINING_ONLY = ("dropout", "attention_dropout", "embedding_dropout", "init", "attention_kernel", "pad_token_id",
                 "layers", "parametrization")
MOE_TRAINING_ONLY = ("aux_loss_weight", "aux_loss_layers")


class NotExpressible(Exception):
    """What of the model a family has no field for, e.g. "position alibi"."""


def function_view(m: ModelConfig) -> Dict[str, Any]:
    """The fields that decide what the model computes, layer by layer (per-layer overrides resolved,
    defaults that depend on other keys filled in), without those that only shape training."""
    m = validate_model(m)
    # defaults that depend on other keys, written out: a family may store them as numbers
    m = dataclasses.replace(m, attention_scale=m.attention_scale or m.dim_per_head ** -0.5, head_dim=m.dim_per_head,
                            n_kv_heads=m.kv_heads, n_encoder_layers=m.encoder_layers, n_decoder_layers=m.decoder_layers,
                            final_norm=ends_with_norm(m))
    top = {k: v for k, v in to_dict(m).items() if k not in TRAINING_ONLY + ("n_layers",)}
    if isinstance(top.get("ffn"), dict):
        top["ffn"] = {k: v for k, v in top["ffn"].items() if k not in MOE_TRAINING_ONLY}
    out: Dict[str, Any] = {"model": top}
    for stack, depth in stacks(m)[:2]:
        layers = []
        for layer in layer_configs(m, stack, depth):
            view = {k: v for k, v in to_dict(layer).items() if k not in TRAINING_ONLY}
            if isinstance(view.get("ffn"), dict):
                view["ffn"] = {k: v for k, v in view["ffn"].items() if k not in MOE_TRAINING_ONLY}
            layers.append(view)
        out[stack] = layers
    return out


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
    return {"vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_embeddings,
            "initializer_range": _spec(d, "init").get("std", 0.02)}


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
            "rope_theta": position.get("base", 10000.0), "partial_rotary_factor": position.get("fraction", 1.0),
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
    for key in ("hidden_act", "mlp_bias", "partial_rotary_factor"):
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


# by model kind, in the order tried: the first family whose importer gives the model back is written
WRITERS: Dict[str, List[Callable[[ModelConfig, dict], Dict[str, Any]]]] = {
    "decoder": [gpt2, llama, mistral, qwen3, mixtral, gemma2, gpt_neox, bloom],
    "encoder": [bert],
    "encoder_decoder": [t5],
}



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
    for key in ("mlp_bias", "partial_rotary_factor", "rope_theta"):
        base.pop(key)
    return {**base, **_layer_types(m), "rope_parameters": rope,
            "num_local_experts": moe.get("n_experts"), "num_experts_per_tok": moe.get("top_k"),
            "swiglu_alpha": expert.get("alpha", 1.702), "swiglu_limit": expert.get("limit", 7.0),
            "router_aux_loss_coef": moe.get("aux_loss_weight", 0.001)}


WRITERS["decoder"].append(gpt_oss)
