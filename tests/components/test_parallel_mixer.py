"""The parallel mixer (Falcon-H1's layer: mixers side by side in one layer spec): its output is the sum of
its branches' outputs, each on its scaled input and scaled itself; its decoding state is the tuple of
theirs and serves the eager cache, beam search's reordering and the static cache; a layout it cannot
serve, or options that do not fit its branches, are one line from the CLI with exit 2 and nothing
written. (The conformance oracle runs it with the rest of the registry: test_mixer_conformance.)"""
import pytest
import torch
import yaml

from arch_zoo.cli import main
from arch_zoo.components.masks import self_attention_mask
from arch_zoo.components.mixers import MIXERS, MixerInputs
from arch_zoo.components.mixers.parallel import ParallelState
from arch_zoo.components.state import KVCache, RecurrentState
from arch_zoo.config.loading import model_config
from arch_zoo.generation.api import generate
from arch_zoo.models import build_model
from arch_zoo.models.static_cache import StaticCache
from tests.conftest import tiny
from tests.test_bad_input import check_one_line, tree

VOCAB = 29
MAMBA = {"name": "mamba2", "n_heads": 3, "head_dim": 6, "state_size": 4, "conv_size": 3, "chunk_size": 4}
PARALLEL = {"name": "parallel", "branches": ["attention", MAMBA], "in_multipliers": [0.5, 1.5],
            "out_multipliers": [2.0, 0.25]}


def model(**changes):
    torch.manual_seed(0)
    return build_model(tiny(d_model=18, n_layers=2, n_heads=3, mixer=PARALLEL, **changes), VOCAB).eval()


def test_the_output_is_the_scaled_sum_of_the_branches_built_alone():
    cfg = model_config(tiny(d_model=18, n_heads=3, mixer=PARALLEL))
    torch.manual_seed(0)
    parallel = MIXERS.build(cfg.mixer, cfg)
    attention = MIXERS.build(MIXERS.parse("attention", "m"), cfg)
    mamba = MIXERS.build(MIXERS.parse(MAMBA, "m"), cfg)
    attention.load_state_dict(parallel.branches[0].state_dict())
    mamba.load_state_dict(parallel.branches[1].state_dict())
    x = torch.randn(2, 5, 18)
    inputs = MixerInputs(self_attention_mask(None, 5, 0, True))
    with torch.no_grad():
        want = 2.0 * attention(0.5 * x, inputs) + 0.25 * mamba(1.5 * x, inputs)
        got = parallel(x, inputs)
    assert want.abs().max() > 0.1
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_its_state_is_the_tuple_of_its_branches_states_and_reports_their_sizes():
    m = model()
    ids = torch.randint(1, VOCAB, (2, 6))
    cache = m.new_cache()
    with torch.no_grad():
        m(ids, cache=cache)
    state = cache.layers[0].mixer
    assert isinstance(state, ParallelState) and [type(p) for p in state.parts] == [KVCache, RecurrentState]
    assert state.nbytes == state.parts[0].nbytes + state.parts[1].nbytes > 0
    mixer = m.decoder.layers[0].mixer.sublayer
    assert mixer.state_elements(6) == 2 * 3 * 6 * 6 + (3 * 4 * 6 + (18 + 2 * 4) * 2)  # K/V; SSM + conv window


def test_beam_search_reorders_every_branch_state():
    """Cached beam search (rows reordered each step) gives the hypotheses of the uncached one."""
    m = model()
    prompts = [[3, 7, 11, 2], [5]]
    cached = generate(m, prompts, strategy="beam", beams=3, max_new_tokens=5, pad_token_id=0)
    uncached = generate(m, prompts, strategy="beam", beams=3, max_new_tokens=5, pad_token_id=0, use_cache=False)
    assert cached.to_lists() == uncached.to_lists()


def test_the_static_cache_takes_over_the_eager_one():
    m = model()
    ids = torch.randint(1, VOCAB, (2, 7))
    with torch.no_grad():
        full = m(ids).logits
        cache = m.new_cache()
        m(ids[:, :4], cache=cache)
        static = StaticCache(m.decoder, 2, 8, torch.float32, ids.device)
        static.load(cache, None, torch.full((2, 1), 4))
        steps = [m(ids[:, t:t + 1], cache=static).logits[:, -1] for t in (4, 5, 6)]
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 4:], rtol=0, atol=1e-5)


def test_a_layer_of_model_layers_may_be_parallel():
    m = build_model(tiny(d_model=18, n_layers=3, n_heads=3, layers=[{"range": 1, "mixer": PARALLEL}]), VOCAB)
    assert [type(layer.mixer.sublayer).__name__ for layer in m.decoder.layers] == ["Attention", "Parallel", "Attention"]


ENCODER = {"kind": "encoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32}


@pytest.mark.parametrize("model_,expected", [
    ({**ENCODER, "mixer": {"name": "parallel", "branches": ["attention", "mamba2"]}},
     "model.mixer: mixer 'parallel' cannot serve a bidirectional encoder (it serves: decoder); mixers for a "
     "bidirectional encoder: attention"),
    ({**tiny(), "mixer": {"name": "parallel", "branches": ["mamba2"]}},
     "model.mixer.branches: a parallel layer needs at least two mixers, got 1; mixers: attention"),
    ({**tiny(), "mixer": {"name": "parallel", "branches": ["attention", "parallel"]}},
     "model.mixer.branches.1: a branch cannot itself be parallel"),
    ({**tiny(), "mixer": {"name": "parallel", "branches": ["attention", "mamba"]}},
     "model.mixer.branches.1: unknown sequence mixer 'mamba'"),
    ({**tiny(), "mixer": {"name": "parallel", "out_multipliers": [1.0, 0.5, 2.0]}},
     "model.mixer.out_multipliers: 3 multipliers for 2 branches (attention, mamba2): give one per branch, or null"),
], ids=["branch-cannot-serve-the-stack", "one-branch", "nested", "unknown-branch", "multipliers-per-branch"])
def test_a_parallel_layer_that_cannot_be_built_is_one_line_exit_2_nothing_written(model_, expected, tmp_path, capsys,
                                                                                  monkeypatch):
    config = {"name": "p", "model": model_, "task": {"name": "char_lm", "max_chars": 2000, "seq_len": 16},
              "train": {"max_steps": 1, "batch_size": 2}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    for argv in (["describe", "exp.yaml"], ["train", "exp.yaml", "--out", str(tmp_path / "run")]):
        capsys.readouterr()
        check_one_line(main(argv), capsys.readouterr().err, expected)
        assert tree(tmp_path) == before
