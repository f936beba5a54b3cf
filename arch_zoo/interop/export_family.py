"""What decides a model's Hugging Face family: the mixers its layers take (its mixer layout), then the
keys those layers read.

A family is a candidate only if its layers take the model's mixers (Mamba-2's take mamba2, Qwen3-Next's
gated_deltanet and attention); among the candidates the nearest one's first mismatch says why none
fits. A key no layer reads computes nothing (a pure Mamba-2 model's model-level n_heads, a d_ff beside
``ffn: none``), so ``function_view`` leaves it out and it decides no family."""
from __future__ import annotations

from typing import Any, Dict, List, Set

from ..components.feedforward import has_sublayer
from ..components.mixers import MIXERS
from ..components.mixers.attention import reads_attention_keys
from ..components.positions import POSITIONS
from ..config import ModelConfig
from ..config.validation import ATTENTION_KEYS, layer_configs, stacks
from ..config.kinds import kind_of
from .family import HFFamily

HEAD_KEYS = ("n_heads", "n_kv_heads", "head_dim")


def _mixers(m: ModelConfig) -> List[str]:
    """Each layer's mixer, stack after stack."""
    return [layer.mixer.name for stack, depth in stacks(m) for layer in layer_configs(m, stack, depth)]


def mixer_layout(m: ModelConfig) -> str:
    """The mixers by count, in the order they first appear: "gated_deltanet x3 + attention"."""
    counts: Dict[str, int] = {}
    for name in _mixers(m):
        counts[name] = counts.get(name, 0) + 1
    return " + ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def takes_mixers(family: HFFamily, m: ModelConfig) -> bool:
    """Whether ``family``'s layers can take every mixer of ``m``'s layers (``HFFamily.mixers``)."""
    return set(_mixers(m)) <= set(family.mixers)


def unread_keys(layer: ModelConfig, cross_attention: bool) -> Set[str]:
    """The model keys a layer's modules never read: attention's where nothing in the layer attends
    (a position scheme too, unless it adds to the embeddings), the head keys where the mixer's own
    options hold its heads, d_ff where the layer has no feed-forward."""
    mixer = MIXERS.get(layer.mixer.name).factory
    out: Set[str] = set()
    if not reads_attention_keys(mixer) and not cross_attention:
        out |= set(ATTENTION_KEYS) | {"qk_norm_scope"}
        if not POSITIONS.get(layer.position.name).factory.adds_to_embeddings:
            out.add("position")
        if not mixer.reads_model_heads:
            out |= set(HEAD_KEYS)
    if not has_sublayer(layer.ffn):
        out.add("d_ff")
    return out


def drop_unread(view: Dict[str, Any], m: ModelConfig) -> Dict[str, Any]:
    """``view`` (``function_view``'s, built from ``m``) without the keys no layer reads: each layer's own
    unread keys from its entry, and those no layer reads from the model's."""
    unread_by_all = None
    for stack, depth in stacks(m)[:2]:
        cross = stack == "decoder" and kind_of(m).cross_attention
        for layer, entry in zip(layer_configs(m, stack, depth), view[stack]):
            unread = unread_keys(layer, cross)
            for key in unread:
                entry.pop(key, None)
            unread_by_all = unread if unread_by_all is None else unread_by_all & unread
    for key in unread_by_all or ():
        view["model"].pop(key, None)
    return view
