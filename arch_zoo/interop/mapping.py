"""What several Hugging Face families share, both ways: reading HF's rope settings, per-layer
``layer_types``, the config keys every family spells alike; and the tensor layouts more than one
family stores (q/k norms, dense MLPs, stacked experts, head-by-head fused QKV, the pre-norm decoder
skeleton). A family module (``families/<model_type>.py``) takes these and adds what is its own."""
from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from torch import Tensor

from ..coerce import to_dict
from ..config import ModelConfig
from ..config.validation import layer_configs
from .checkpoint import WeightMap
from .family import unsupported

ROTARY = (r"(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq",)  # recomputed, not learned
ROTARY_ANY = (r"rotary_emb\.(original_)?inv_freq",)  # the same, where only the model-level table is kept
ATTENTION_TYPES = ("sliding_attention", "full_attention")  # HF's layer_types values for attention
PARAMS = ("weight", "bias")


class NotExpressible(Exception):
    """What of the model a family has no field for, e.g. "position alibi"."""


# ---------------------------------------------------------------------------- HF config -> arch_zoo

def rope_parameters(c: dict) -> dict:
    """HF's rope settings: ``rope_parameters`` (transformers 5) or the older ``rope_scaling``."""
    return dict(c.get("rope_parameters") or c.get("rope_scaling") or {})


def plain_rope(model_type: str, c: dict) -> dict:
    """``rope_parameters`` of a family that takes plain RoPE only; any other rope_type is refused."""
    rope = rope_parameters(c)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise unsupported(model_type, f"rope_type '{rope_type}'")
    return rope


def shared_keys(c: dict, tie: bool, std: float = 0.02, scaled_residual: bool = False, pad: bool = True) -> dict:
    """The keys families read alike: tying (``tie``: the family's default), init, pad id (``pad``: GPT-2
    leaves it to the tokenizer)."""
    out = {"tie_embeddings": c.get("tie_word_embeddings", tie),
           "init": {"name": "normal", "std": c.get("initializer_range", std), "scaled_residual": scaled_residual}}
    return {**out, "pad_token_id": c.get("pad_token_id") or 0} if pad else out


def layer_types(model_type: str, c: dict, allowed: Sequence[str], default: List[str]) -> List[str]:
    """HF's per-layer ``layer_types`` (``default`` when the config has none), checked: one per layer,
    each one of ``allowed``."""
    n = c["num_hidden_layers"]
    types = list(c.get("layer_types") or default)
    if len(types) != n or not set(types) <= set(allowed):
        raise unsupported(model_type, f"layer_types {types} (expected {n} of {', '.join(allowed)})")
    return types


def period(types: Sequence[Any]) -> int:
    """The shortest period that repeats ``types`` over all its layers."""
    n = len(types)
    return next(p for p in range(1, n + 1) if all(t == types[i % p] for i, t in enumerate(types)))


def layer_ranges(indices: Sequence[int], single: bool = False) -> List[Union[int, str]]:
    """Sorted layer indices as ``model.layers`` ranges, consecutive ones as 'a:b' (``single``: an index
    with no neighbour as itself)."""
    runs: List[List[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [a if single and b == a + 1 else f"{a}:{b}" for a, b in runs]


def layer_attention(model_type: str, c: dict, default: List[str],
                    repeating: bool) -> Tuple[object, Optional[List[dict]]]:
    """(``model.attention``, ``model.layers``) for HF's per-layer ``layer_types`` (``default`` when the
    config has none); one type on every layer needs no ``layers``. Written as the family writes it:
    ``repeating``, the shortest ``pattern`` that gives each layer its type (Gemma 2:
    ``[{attention: sliding_window}, {}]``); otherwise one ``range`` entry per run of windowed layers
    (Qwen3's last layers)."""
    n, window = c["num_hidden_layers"], c.get("sliding_window")
    types = layer_types(model_type, c, ATTENTION_TYPES, default)
    if window is None and "sliding_attention" in types:
        raise unsupported(model_type, "sliding_attention layers without a sliding_window")
    sliding = {"name": "sliding_window", "window": int(window)} if window is not None else None
    if len(set(types)) == 1:
        return (sliding if types[0] == "sliding_attention" else "global"), None
    if repeating:
        return "global", [{"pattern": [{"attention": sliding} if t == "sliding_attention" else {}
                                       for t in types[:period(types)]]}]
    starts = [i for i, t in enumerate(types) if t == "sliding_attention" and (i == 0 or types[i - 1] != t)]
    ends = [i + 1 for i, t in enumerate(types) if t == "sliding_attention" and (i == n - 1 or types[i + 1] != t)]
    return "global", [{"range": f"{a}:{b}", "attention": sliding} for a, b in zip(starts, ends)]


# ---------------------------------------------------------------------------- tensors

def copy_each(w: WeightMap, a: str, h: str, pairs: Sequence[Tuple[str, str]], params: Sequence[str] = ("weight",),
              fn=None) -> None:
    """``a + ours + p`` <- ``h + theirs + p`` for each (ours, theirs) pair and parameter ``p``."""
    for ours, theirs in pairs:
        for p in params:
            w.copy(f"{a}{ours}.{p}", f"{h}{theirs}.{p}", fn)


def fused_attention(w: WeightMap, a: str, h: str, params: Sequence[str] = ("weight",), out: str = "o_proj") -> None:
    """Attention's separate q, k, v projections fused into arch_zoo's ``qkv``, and its output projection:
    ``a`` the mixer's prefix, ``h`` HF's attention module's; ``params``: the biases too where it has them."""
    for p in params:
        w.fuse(f"{a}qkv.{p}", [f"{h}{x}_proj.{p}" for x in "qkv"])
    copy_each(w, a, h, [("out", out)], params)


def qk_norms(w: WeightMap, a: str, h: str, theirs: str = "{x}_norm") -> None:
    """Attention's q/k RMSNorm gains: ``a`` the mixer's prefix, ``h`` HF's attention module's."""
    copy_each(w, a, h, [(f"{x}_norm", theirs.format(x=x)) for x in "qk"])


def dense_mlp(w: WeightMap, a: str, h: str, names: Sequence[str] = ("gate_proj", "up_proj", "down_proj"),
              params: Sequence[str] = ("weight",)) -> None:
    """A gated MLP: arch_zoo's gate / up / down <- HF's ``names``."""
    copy_each(w, a, h, list(zip(("gate", "up", "down"), names)), params)


def stacked_experts(w: WeightMap, a: str, h: str, n_experts: int, d_ff: int) -> None:
    """Routed experts as transformers 5 stacks them: ``gate_up_proj`` (E, 2 d_ff, d), ``down_proj``
    (E, d, d_ff); ``a``/``h``: the MoE block's prefixes."""
    for e in range(n_experts):
        x = f"{a}experts.{e}."
        w.copy(f"{x}gate.weight", f"{h}experts.gate_up_proj", lambda t, e=e: t[e, :d_ff])
        w.copy(f"{x}up.weight", f"{h}experts.gate_up_proj", lambda t, e=e: t[e, d_ff:])
        w.copy(f"{x}down.weight", f"{h}experts.down_proj", lambda t, e=e: t[e])


def per_head_qkv(n_heads: int):
    """[q_0 k_0 v_0 | q_1 k_1 v_1 | ...] (rows of a fused weight or bias, one block per head, as GPT-NeoX
    and BLOOM store them) -> arch_zoo's [q | k | v]."""
    def reorder(w: Tensor) -> Tensor:
        rest = w.shape[1:]
        return w.reshape(n_heads, 3, -1, *rest).transpose(0, 1).reshape(w.shape)
    return reorder


def decoder_layers(w: WeightMap, cfg: ModelConfig, norms: Tuple[str, str] = ("input_layernorm",
                   "post_attention_layernorm"), embed: str = "embed_tokens", final: str = "norm",
                   layers: str = "layers") -> Iterator[Tuple[ModelConfig, str, str]]:
    """A pre-norm decoder's skeleton (RMSNorm gains): the embedding, each layer's two norms
    (mixer's, feed-forward's <- ``norms``) and the final norm are mapped here; yields each layer's
    (config, arch_zoo prefix, HF prefix) for what the family's layers hold besides."""
    w.copy("embed.weight", f"{embed}.weight")
    for i, layer in enumerate(layer_configs(cfg, "decoder", cfg.decoder_layers)):
        a, h = f"decoder.layers.{i}.", f"{layers}.{i}."
        copy_each(w, a, h, [("mixer.norm", norms[0]), ("ffn.norm", norms[1])])
        yield layer, a, h
    w.copy("decoder.final_norm.weight", f"{final}.weight")


# ---------------------------------------------------------------------------- arch_zoo -> HF config

def spec(d: dict, key: str) -> dict:
    """A config entry as a mapping ({"name": ...} for a bare name)."""
    value = d.get(key)
    return value if isinstance(value, dict) else {"name": value}


def inverse(table: Mapping[str, str], value: str, what: str) -> str:
    for k, v in table.items():
        if v == value:
            return k
    raise NotExpressible(f"{what} {value}")


def integral(x: float):
    """An int where HF's config wants one (Gemma's query_pre_attn_scalar) and ``x`` is one up to rounding."""
    return round(x) if math.isclose(x, round(x), rel_tol=1e-9) else x


def common(m: ModelConfig, d: dict) -> Dict[str, Any]:
    # bos / eos are the tokenizer's (``export_hf.special_ids``), not a family's defaults (GPT-2's 50256,
    # past a small vocabulary's end)
    return {"vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_embeddings,
            "initializer_range": spec(d, "init").get("std", 0.02), "bos_token_id": None, "eos_token_id": None}


def written_layer_types(m: ModelConfig) -> Dict[str, Any]:
    """HF's per-layer ``layer_types`` and its one ``sliding_window`` from each layer's attention."""
    types, windows = [], set()
    for layer in layer_configs(m, "decoder", m.decoder_layers):
        attention = spec(to_dict(layer), "attention")
        if attention["name"] == "sliding_window":
            types.append("sliding_attention")
            windows.add(attention.get("window"))
        else:
            types.append("full_attention")
    if len(windows) > 1:
        raise NotExpressible(f"attention sliding windows of several widths {sorted(windows)}")
    return {"layer_types": types, "sliding_window": windows.pop() if windows else None}
