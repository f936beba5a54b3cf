"""What a model computes, as a comparable view of its config (``function_view``), and where two views
differ.

A family's writer (``families/<model_type>.py``: ``write``) does not judge whether the family expresses
the model: ``export_hf`` runs the family's importer on what the writer produced and keeps the family
only when that gives back the model's function view, so the importers stay the one definition of
each mapping."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

from ..components.mixers import MIXERS
from ..components.mixers.attention import score_width
from ..components.parametrization import PARAMETRIZATIONS
from ..components.placements import ends_with_norm
from ..config import ModelConfig
from ..coerce import to_dict
from ..config.layers import resolved_mixer
from ..config.validation import layer_configs, stacks, validate_model
from .export_family import drop_unread

# what changes how a model trains, never what it computes: re-imported, these take the family's values
TRAINING_ONLY = ("dropout", "attention_dropout", "embedding_dropout", "init", "attention_kernel", "pad_token_id",
                 "layers", "parametrization")
MOE_TRAINING_ONLY = ("aux_loss_weight", "aux_loss_layers", "bias_update_speed")
# a mixer's options that change how it computes, never what (its chunked form's chunk size, its kernels)
MIXER_HOW_ONLY = ("chunk_size", "kernel")


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
    if m.scale_embeddings:  # the parametrization's number, which TRAINING_ONLY leaves out (RecurrentGemma rounds it)
        top["embedding_multiplier"] = PARAMETRIZATIONS.build(m.parametrization, m).embedding_multiplier()
    logit_multiplier = PARAMETRIZATIONS.build(m.parametrization, m).logit_multiplier()
    if logit_multiplier != 1.0:  # the standard one's published factor (Falcon-H1's lm_head_multiplier)
        top["logit_multiplier"] = logit_multiplier
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
    return {"name": spec.name, **_what_only(view)}


def _what_only(view: Dict[str, Any]) -> Dict[str, Any]:
    """A mixer's options view without MIXER_HOW_ONLY, a parallel layer's branches' too."""
    out = {k: v for k, v in view.items() if k not in MIXER_HOW_ONLY}
    if isinstance(out.get("branches"), (list, tuple)):
        out["branches"] = [_what_only(b) if isinstance(b, dict) else b for b in out["branches"]]
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
