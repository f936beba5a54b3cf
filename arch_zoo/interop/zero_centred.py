"""A model's plain RMSNorm gains rewritten zero-centred, for a family that stores them that way.

An RMSNorm with gain g computes what a zero-centred one (``zero_centred_rmsnorm``: applied as 1 + w)
computes with w = g - 1, and 1 + (g - 1) is g again in float32 wherever g - 1 is exact, every g in
[0.5, 2^24] (Sterbenz below 2; above, g and 1 are both multiples of g's last place): so a
model with plain gains (one trained from an earlier gemma2 preset, or a Gemma 2 run imported by an
earlier version, which stored Gemma's 1 + w as a plain gain) exports as Gemma 2 by this rewrite."""
from __future__ import annotations

from typing import Any

import torch

from ..coerce import to_dict
from ..config.loading import model_config

# a norm and its zero-centred form (the same options, the gain offset by its identity, 1)
ZERO_CENTRED = {"rmsnorm": "zero_centred_rmsnorm"}
NORM_KEYS = ("norm", "qk_norm")  # the config keys that name a norm, at the top and in ``layers`` entries


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in NORM_KEYS and isinstance(value, str) and value in ZERO_CENTRED:
            value = ZERO_CENTRED[value]
        elif key in NORM_KEYS and isinstance(value, dict) and value.get("name") in ZERO_CENTRED:
            value = {**value, "name": ZERO_CENTRED[value["name"]]}
        else:
            value = _rewrite(value)
        out[key] = value
    return out


def zero_centred_config(cfg):
    """``cfg`` (a ModelConfig) with every plain RMSNorm zero-centred, or None when it has none."""
    before = to_dict(cfg)
    after = _rewrite(before)
    return model_config(after) if after != before else None


def as_zero_centred(model, cfg) -> torch.nn.Module:
    """``model`` rebuilt as ``cfg`` (``zero_centred_config``), its plain gains g written as g - 1."""
    from ..models import build_model

    again = build_model(cfg, model.vocab_size)
    old = dict(model.named_modules())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for name, module in again.named_modules():
        if getattr(module, "zero_centred", False) and name in old and not getattr(old[name], "zero_centred", False):
            key = f"{name}.weight"
            state[key] = state[key].float() - 1.0  # exact for g in [0.5, 2^24] (a bf16 g too)
    again.load_state_dict(state)  # float32, as the export writes
    return again.train(model.training)
