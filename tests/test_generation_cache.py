"""What the key/value cache holds during decoding, and how often the K/V projections run.

The README's Decoding section says "GQA caches only the kv heads" and "cross-attention memory K/V
are computed once": these tests look at the cache tensors ``generate`` decodes over and count the
calls to the projection modules with forward hooks.
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from arch_zoo.generation import generate
from arch_zoo.models.transformer import build_model

VOCAB = 40
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]  # left-padded to 7
STEPS = 6
BASE = dict(d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=48)
HEAD_DIM = 32 // 4


def _model(**changes):
    torch.manual_seed(0)
    return build_model(dict(BASE, **changes), VOCAB).eval()


def _keep_caches(model):
    """Record every cache ``generate`` makes; the model decodes over it as usual."""
    made = []
    new_cache = model.new_cache

    def recording():
        made.append(new_cache())
        return made[-1]

    model.new_cache = recording
    return made


@pytest.mark.parametrize("kind", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_gqa_caches_only_the_kv_heads(kind, kv_heads, strategy):
    """README, Decoding: "GQA caches only the kv heads". Every cached K and V (and the buffer behind
    it) has n_kv_heads heads, not n_heads: a GQA model's cache is n_heads / n_kv_heads times smaller."""
    model = _model(kind=kind, position="rope", n_kv_heads=kv_heads)
    made = _keep_caches(model)
    beams = 3 if strategy == "beam" else 1
    extra = dict(beams=beams) if strategy == "beam" else {}
    out = generate(model, PROMPTS, strategy=strategy, max_new_tokens=STEPS, **extra)
    assert out.tokens.shape[-1] == STEPS  # no EOS: every step ran
    assert len(made) == 1
    rows = len(PROMPTS) * beams
    # decoder-only: the prompt plus every new token but the last (never fed back);
    # encoder-decoder: the start token plus every new token but the last
    self_len = (7 if kind == "decoder" else 1) + STEPS - 1
    for layer in made[0].layers:
        for cached in (layer.mixer.k, layer.mixer.v):
            assert cached.shape == (rows, kv_heads, self_len, HEAD_DIM)
        assert layer.mixer._k.shape[1] == layer.mixer._v.shape[1] == kv_heads  # the buffers too
        if kind == "encoder_decoder":
            for cached in (layer.cross.k, layer.cross.v):
                assert cached.shape == (rows, kv_heads, 7, HEAD_DIM)  # one entry per source token
        else:
            assert layer.cross.k is None


def _count_calls(modules):
    calls = Counter()
    handles = [m.register_forward_hook(lambda mod, args, out, name=name: calls.update([name]))
               for name, m in modules.items()]
    return calls, handles


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_cross_attention_kv_are_computed_once(strategy):
    """README, Decoding: "cross-attention memory K/V are computed once". Each decoder layer's
    cross-attention K/V projection runs once per ``generate`` call (for beam search too, before the
    cache is copied to the beams) while its query projection runs every step; without the cache
    the K/V projection runs every step, so the count can tell the two apart."""
    model = _model(kind="encoder_decoder", position="rope", n_kv_heads=2)
    modules = {}
    for i, layer in enumerate(model.decoder.layers):
        modules[f"kv{i}"], modules[f"q{i}"] = layer.cross_attn.sublayer.kv, layer.cross_attn.sublayer.q
    modules["encoder"] = model.encoder
    extra = dict(beams=3) if strategy == "beam" else {}
    calls, handles = _count_calls(modules)
    try:
        cached = generate(model, PROMPTS, strategy=strategy, max_new_tokens=STEPS, **extra)
        with_cache = dict(calls)
        calls.clear()
        uncached = generate(model, PROMPTS, strategy=strategy, max_new_tokens=STEPS, use_cache=False, **extra)
    finally:
        for h in handles:
            h.remove()
    assert torch.equal(cached.tokens, uncached.tokens)
    n_layers = len(model.decoder.layers)
    assert with_cache == {"encoder": 1, **{f"kv{i}": 1 for i in range(n_layers)},
                          **{f"q{i}": STEPS for i in range(n_layers)}}
    assert dict(calls) == {"encoder": 1, **{f"kv{i}": STEPS for i in range(n_layers)},
                           **{f"q{i}": STEPS for i in range(n_layers)}}


def test_the_cached_cross_kv_are_the_projection_of_the_encoder_memory():
    """What is computed once is the right thing: the cache holds kv(memory), split into kv heads."""
    model = _model(kind="encoder_decoder", position="none", n_kv_heads=2)
    made = _keep_caches(model)
    generate(model, [PROMPTS[0]], max_new_tokens=STEPS)
    with torch.no_grad():
        memory = model.encode(torch.tensor([PROMPTS[0]]))
        for layer, cache in zip(model.decoder.layers, made[0].layers):
            k, v = layer.cross_attn.sublayer.kv(memory).split(2 * HEAD_DIM, dim=-1)
            torch.testing.assert_close(cache.cross.k, k.unflatten(-1, (2, HEAD_DIM)).transpose(1, 2))
            torch.testing.assert_close(cache.cross.v, v.unflatten(-1, (2, HEAD_DIM)).transpose(1, 2))
