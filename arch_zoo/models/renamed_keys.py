"""Checkpoint keys of earlier versions, renamed as they load. The mixer's slot in a layer was called
``self_attn`` before mixers other than attention came (``decoder.layers.0.self_attn.sublayer.qkv.weight``,
now ``decoder.layers.0.mixer.sublayer.qkv.weight``). Run directories, Lightning resumes, ``restore``
and ``torch.load`` + ``load_state_dict`` go through the layer's load_state_dict pre-hook; a remote-code
export loaded by transformers goes through the conversion ``for_transformers`` registers."""
from __future__ import annotations

import re
import sys
from typing import Dict

from torch import nn

RENAMED_SLOTS = {"self_attn": "mixer"}  # a layer's slot: the earlier name -> today's
# a layer's slot key, as a whole model's state dict spells it: (prefix of the layer)(slot).
SLOT_KEY = r"((?:encoder|decoder)\.layers\.\d+\.){old}\."


def renamed_slot_keys(layer: nn.Module, state_dict, prefix: str, *_) -> None:
    """A load_state_dict pre-hook of a layer: its keys under an earlier slot name take today's.
    A module-level function, so a model holding it still pickles (spawned DDP workers)."""
    for old, new in RENAMED_SLOTS.items():
        for key in [k for k in state_dict if k.startswith(f"{prefix}{old}.")]:
            state_dict[f"{prefix}{new}.{key[len(prefix) + len(old) + 1:]}"] = state_dict.pop(key)


def renamed_model_keys(state_dict: Dict[str, object]) -> Dict[str, object]:
    """A whole model's state dict under today's slot names, before any model is loaded with it (the
    shapes a run of an earlier version would give ``train.init_from`` are checked against today's)."""
    out = dict(state_dict)
    for old, new in RENAMED_SLOTS.items():
        pattern = re.compile(SLOT_KEY.format(old=old))
        out = {pattern.sub(rf"\1{new}.", k, count=1): v for k, v in out.items()}
    return out


_registered = False


def for_transformers() -> None:
    """transformers 5 loads a checkpoint by key into the model, without load_state_dict's hooks: an
    export in arch_zoo's remote-code form written by an earlier version (its own copy of the modelling
    file, which builds today's model) would load with the mixers left uninitialised. The same renaming,
    as a conversion of model type ``arch_zoo``. Only where transformers is imported already (the models
    never import it); an older transformers without conversions is left as it is."""
    global _registered
    if _registered or "transformers" not in sys.modules:
        return
    try:
        from transformers.conversion_mapping import register_checkpoint_conversion_mapping
        from transformers.core_model_loading import WeightRenaming
    except ImportError:
        return
    register_checkpoint_conversion_mapping("arch_zoo", [
        WeightRenaming(SLOT_KEY.format(old=old), rf"\1{new}.")
        for old, new in RENAMED_SLOTS.items()], overwrite=True)
    _registered = True
