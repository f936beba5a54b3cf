"""The layer read top to bottom (models/blocks.py): the placement's pre/post steps, cross-attention as a
mixer slot, one decoding-state protocol for the stack, attention's own fields off the Mixer base, and
the decoding loops kept short (issue 57)."""
import inspect

import pytest
import torch

from arch_zoo.components.masks import cross_attention_mask, self_attention_mask
from arch_zoo.components.mixers import MIXERS, Mixer, MixerInputs
from arch_zoo.components.mixers.attention import CrossAttention, CrossInputs, rotary_dim, score_width
from arch_zoo.components.placements import PLACEMENTS, Placement
from arch_zoo.config.loading import model_config
from arch_zoo.generation.api import generate
from arch_zoo.generation.search import beam_search
from arch_zoo.models import build_model
from arch_zoo.models.cache import Cache, StackState
from arch_zoo.models.static_cache import StaticCache
from tests.conftest import tiny

VOCAB = 11


@pytest.mark.parametrize("name", ["pre", "post", "sandwich", "deepnorm"])
def test_a_layer_is_its_placements_pre_and_post_steps_in_order(name):
    """norm, mixer, residual, norm, cross-attention, residual, norm, ffn, residual: the placement's
    ``pre``/``post`` called by hand over the layer's own slots give the layer's output exactly."""
    torch.manual_seed(0)
    model = build_model(tiny(kind="encoder_decoder", norm_placement=name, n_layers=2), VOCAB).eval()
    layer, p = model.decoder.layers[1], model.decoder.layers[1].placement
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    inputs = MixerInputs(self_attention_mask(None, 5, 0, True, x.device))
    inputs.cross = CrossInputs(cross_attention_mask(None, 5), memory=memory)
    h = p.post(layer.mixer, x, layer.mixer.sublayer(p.pre(layer.mixer, x), inputs))
    h = p.post(layer.cross_attn, h, layer.cross_attn.sublayer(p.pre(layer.cross_attn, h), inputs.cross))
    h = p.post(layer.ffn, h, layer.ffn.sublayer(p.pre(layer.ffn, h)))
    torch.testing.assert_close(layer(x, inputs), h, rtol=0, atol=0)


def test_a_placement_that_overrides_residual_still_combines_the_sublayers():
    """The older per-sublayer protocol (``residual(slot, x, branch)``) is honoured for plugins."""

    class Doubled(Placement):
        def residual(self, slot, x, branch):
            return x + 2 * branch(slot.norm(x))

    torch.manual_seed(0)
    model = build_model(tiny(n_layers=1), VOCAB).eval()
    layer = model.decoder.layers[0]
    layer.placement = Doubled(None, layer.ctx)
    x = torch.randn(2, 4, 16)
    inputs = MixerInputs(self_attention_mask(None, 4, 0, True, x.device))
    h = x + 2 * layer.mixer.sublayer(layer.mixer.norm(x), inputs)
    h = h + 2 * layer.ffn.sublayer(layer.ffn.norm(h))
    torch.testing.assert_close(layer(x, inputs), h, rtol=0, atol=0)
    assert layer.placement.combines_itself() and not PLACEMENTS.build(PLACEMENTS.parse("pre", "p"),
                                                                        layer.ctx).combines_itself()


def test_cross_attention_is_a_mixer_slot_whose_state_holds_the_memorys_keys():
    """forward(x, inputs, state) as every mixer: the first call fills its K/V state from the memory,
    later calls read it (no memory needed), and the outputs match attending to the memory directly."""
    torch.manual_seed(0)
    cfg = model_config(tiny(kind="encoder_decoder"))
    cross = CrossAttention(cfg).eval()
    assert isinstance(cross, Mixer)
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    pad = torch.ones(2, 6, dtype=torch.long)
    pad[1, 4:] = 0
    inputs = CrossInputs(cross_attention_mask(pad, 1), memory=memory)
    full = cross(x, CrossInputs(cross_attention_mask(pad, 3), memory=memory))
    state = cross.new_state()
    first = cross(x[:, :1], inputs, state)
    assert state.k.shape == (2, cfg.kv_heads, 6, cfg.dim_per_head)
    later = cross(x[:, 1:2], CrossInputs(cross_attention_mask(pad, 1)), state)  # the memory is not read again
    torch.testing.assert_close(torch.cat((first, later), 1), full[:, :2], rtol=1e-6, atol=1e-6)


class _Recording(Cache):
    def __init__(self, cache, calls):
        super().__init__(cache.layers, cache.positions)
        self.calls = calls

    def keys(self, *args):
        self.calls.append("keys")
        return super().keys(*args)

    def layer(self, index):
        self.calls.append(f"layer {index}")
        return super().layer(index)

    def advance(self, positions):
        self.calls.append("advance")
        super().advance(positions)


def test_the_stack_calls_every_decoding_state_the_same_way():
    """One protocol: no state, an eager Cache and the compiled path's StaticCache go through the same
    keys / layer / advance calls, and cached decoding over either equals the full forward."""
    torch.manual_seed(0)
    model = build_model(tiny(n_layers=2), VOCAB).eval()
    ids = torch.randint(1, VOCAB, (2, 6))
    with torch.no_grad():
        full = model(ids).logits
        assert torch.equal(model.decoder(model.embed(ids), state=StackState()), model.decoder(model.embed(ids)))
        calls = []
        cache = _Recording(model.new_cache(), calls)
        model(ids[:, :4], cache=cache)
        assert calls == ["keys", "layer 0", "layer 1", "advance"]
        static = StaticCache(model.decoder, 2, 8, torch.float32, ids.device)
        static.load(cache, None, torch.full((2, 1), 4))
        assert isinstance(static, StackState)
        steps = [model(ids[:, t:t + 1], cache=static).logits[:, -1] for t in (4, 5)]
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 4:], rtol=1e-5, atol=1e-5)


def test_attention_fields_live_with_attention_not_on_the_mixer_base():
    """rotary_dim / score_width / reads_attention_keys: declared by the mixers that attend (MLA's
    differ), read through mixers.attention, absent from the Mixer base."""
    assert not any(hasattr(Mixer, name) for name in ("rotary_dim", "score_width", "reads_attention_keys"))
    cfg = model_config(tiny(d_model=32, n_heads=2))
    mla = MIXERS.get("mla").factory
    options = MIXERS.parse({"name": "mla", "qk_nope_head_dim": 6, "qk_rope_head_dim": 4}, "m").options
    assert rotary_dim(mla, options, cfg) == 4 and score_width(mla, options, cfg)[0] == 10
    mamba = MIXERS.get("mamba2").factory
    assert rotary_dim(mamba, None, cfg) == 16 and score_width(mamba, None, cfg) == (16, "head_dim")


@pytest.mark.parametrize("fn", [beam_search, generate], ids=["beam_search", "generate"])
def test_the_decoding_loops_read_as_their_steps_in_under_60_lines(fn):
    assert len(inspect.getsourcelines(fn)[0]) < 60
