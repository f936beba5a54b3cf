"""Checkpoints that name the layer's mixer slot ``self_attn`` (earlier versions) load into today's
``mixer`` slot through the layer's load_state_dict pre-hook, whatever the stack and the prefix."""
import pickle

import pytest
import torch

from arch_zoo.models import build_model
from arch_zoo.models.renamed_keys import renamed_slot_keys

TINY = {"d_model": 16, "n_layers": 2, "n_heads": 2, "d_ff": 32, "max_seq_len": 16}


def _earlier(state: dict, prefix: str = "") -> dict:
    """``state`` as an earlier version saved it: the slot (and only the slot) called self_attn."""
    out = {}
    for key, value in state.items():
        head, sep, rest = key.partition(".layers.")
        index, _, tail = rest.partition(".")
        if sep and tail.startswith("mixer."):
            key = f"{head}.layers.{index}.self_attn.{tail[len('mixer.'):]}"
        out[prefix + key] = value
    return out


@pytest.mark.parametrize("kind", ["decoder", "encoder", "encoder_decoder"])
def test_an_earlier_state_dict_loads_strict_into_every_kind(kind):
    source = build_model({**TINY, "kind": kind}, 11)
    state = source.state_dict()
    old = _earlier(state)
    assert sum(".self_attn." in k for k in old) == sum(".mixer." in k for k in state) > 0
    assert not any(".mixer." in k for k in old)
    target = build_model({**TINY, "kind": kind}, 11)
    result = target.load_state_dict(old, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert all(torch.equal(v, state[k]) for k, v in target.state_dict().items())
    assert set(old) == set(_earlier(state))  # the caller's dict is left as it was given


def test_the_hook_renames_the_slot_under_its_prefix_and_nothing_deeper():
    state = {"m.decoder.layers.0.self_attn.norm.weight": 1, "m.decoder.layers.0.mixer.sublayer.self_attn.w": 2,
             "m.decoder.layers.0.ffn.norm.weight": 3, "m.decoder.layers.1.self_attn.norm.weight": 4}
    renamed_slot_keys(None, state, "m.decoder.layers.0.")
    assert state == {"m.decoder.layers.0.mixer.norm.weight": 1, "m.decoder.layers.0.mixer.sublayer.self_attn.w": 2,
                     "m.decoder.layers.0.ffn.norm.weight": 3, "m.decoder.layers.1.self_attn.norm.weight": 4}


def test_a_wrapped_model_loads_an_earlier_state_dict_and_still_pickles():
    """A LightningModule holds the model under ``model.``; spawned workers pickle it."""
    outer = torch.nn.Module()
    outer.model = build_model({**TINY, "kind": "decoder"}, 11)
    state = outer.state_dict()
    fresh = torch.nn.Module()
    fresh.model = build_model({**TINY, "kind": "decoder"}, 11)
    fresh.load_state_dict(_earlier({k.removeprefix("model."): v for k, v in state.items()}, "model."), strict=True)
    assert all(torch.equal(v, state[k]) for k, v in fresh.state_dict().items())
    again = pickle.loads(pickle.dumps(fresh))
    assert all(torch.equal(v, state[k]) for k, v in again.state_dict().items())
