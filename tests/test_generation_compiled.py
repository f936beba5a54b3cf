"""The compiled decoding path (static cache + one compiled step) gives the eager cached path's tokens.

DESIGN, "Decoding has two paths with one result". CI runs one case per strategy on one model, all
at one (batch 3, 64 columns) shape so that they share one compiled step (compiling is what costs);
the whole registry grid, greedy and beam, is `slow`.
"""
from __future__ import annotations

import pytest
import torch

from arch_zoo.errors import ConfigError
from arch_zoo.generation import generate
from arch_zoo.generation import compiled
from arch_zoo.generation.compiled import _STEPS, last_compiled
from arch_zoo.models.transformer import build_model
from tests.test_generation import GRID, PROMPTS, STEPS, VOCAB, model_for

CI_MODEL = "decoder-sliding-window-3"  # RoPE, left padding and a ring buffer (window 3 < 14 columns)
BEAM = dict(strategy="beam", beams=3, n_best=3, max_new_tokens=6, eos_token_id=[3, 4])
ONE_PROMPT = [PROMPTS[0]]  # x 3 beams: batch 3, the greedy runs' shape, so the compiled step is shared

STRATEGIES = {
    "greedy": dict(),
    "temperature": dict(strategy="sample", temperature=0.7, seed=3),
    "top_k": dict(strategy="sample", top_k=5, seed=4),
    "top_p": dict(strategy="sample", top_p=0.8, temperature=1.5, seed=5),
}


def _same(name, prompts, **kwargs):
    model = model_for(name)
    eager = generate(model, prompts, **kwargs)
    compiled = generate(model, prompts, compile=True, **kwargs)
    assert torch.equal(eager.tokens, compiled.tokens), name
    assert torch.equal(eager.lengths, compiled.lengths)
    torch.testing.assert_close(compiled.scores, eager.scores, atol=1e-5, rtol=0)
    return eager, compiled


@pytest.mark.compiles
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_compiled_tokens_equal_eager(strategy):
    eager, compiled = _same(CI_MODEL, PROMPTS, max_new_tokens=STEPS, return_logits=True, **STRATEGIES[strategy])
    assert compiled.tokens.shape == (3, 1, STEPS)
    torch.testing.assert_close(compiled.logits, eager.logits, atol=1e-5, rtol=0)


@pytest.mark.compiles
def test_compiled_beam_equals_eager_and_shares_the_step():
    from torch._dynamo.utils import counters

    generate(model_for(CI_MODEL), PROMPTS, max_new_tokens=STEPS, compile=True)  # compiled here unless already
    graphs = counters["stats"]["unique_graphs"]
    _same(CI_MODEL, ONE_PROMPT, **BEAM)
    assert counters["stats"]["unique_graphs"] == graphs  # beams reorder the static cache in place: no re-trace
    step = last_compiled(model_for(CI_MODEL))
    assert step.fullgraph and step.fallback_reason is None and step.compile_s is not None
    assert (step.cache.batch, step.cache.columns) == (3, 64)
    # the greedy, sampled and beam runs above (whichever ran) all used this one compiled step
    assert [k[:5] for k in _STEPS[model_for(CI_MODEL)] if k[4] == "inductor"] == [(3, 64, None, None, "inductor")]
    ring = step.cache.layers[0].mixer
    assert ring.ring and ring.k.shape[-2] == 3  # the window's keys only, not 64 columns


@pytest.fixture
def backend(request, monkeypatch):
    monkeypatch.setattr(compiled, "BACKEND", request.param)
    return request.param


@pytest.mark.parametrize("backend", [None], indirect=True, ids=["static-cache-uncompiled"])
@pytest.mark.parametrize("name", sorted(GRID))
def test_every_grid_model_decodes_the_same_over_the_static_cache(name, backend):
    """The static cache's masks, rings, positions and cross-attention buffers, without the compiler's
    cost: the compiled path's step run as plain Python, for every model of the grid."""
    _same(name, PROMPTS, max_new_tokens=STEPS, return_logits=True)
    _same(name, ONE_PROMPT, **BEAM)


@pytest.mark.slow
@pytest.mark.compiles
@pytest.mark.parametrize("backend", ["eager", "inductor"], indirect=True)
@pytest.mark.parametrize("name", sorted(GRID))
def test_every_grid_model_decodes_the_same_compiled(name, backend):
    """Dynamo captures every grid model's step as one graph (MoE's routing included), and inductor's code
    for it decodes the eager path's tokens."""
    _same(name, PROMPTS, max_new_tokens=STEPS)
    _same(name, ONE_PROMPT, **BEAM)
    step = last_compiled(model_for(name))
    assert step.backend == backend and step.fullgraph, step.fallback_reason


@pytest.mark.parametrize("kwargs, key, words", [
    (dict(compile=True, use_cache=False), "compile", "use_cache=False"),
    (dict(compile=True, static_cache_length=10), "static_cache_length", "needs 14"),
    (dict(compile_mode="max-autotune"), "compile_mode", "compile=True"),
    (dict(static_cache_length=64), "static_cache_length", "compile=True"),
])
def test_compiled_bad_input_names_the_argument(kwargs, key, words):
    model = build_model(GRID["decoder-rope-mha"], VOCAB)
    with pytest.raises(ConfigError) as err:
        generate(model, PROMPTS, max_new_tokens=STEPS, **kwargs)
    assert err.value.key == key and words in err.value.message


def test_compile_without_a_compiler_says_so(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    model = build_model(GRID["decoder-rope-mha"], VOCAB)
    with pytest.raises(ConfigError, match="C\\+\\+ compiler; 'no-such-compiler-xyz' is not on PATH"):
        generate(model, PROMPTS, max_new_tokens=STEPS, compile=True)
