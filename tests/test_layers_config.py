"""Per-layer config (model.layers): resolution, the built model, the saved compact form, describe,
bad input and sweeping it. README: "Any layer-level model key can be set per layer"."""
import subprocess
import sys

import pytest
import torch
import yaml

from arch_zoo.config import ExperimentConfig
from arch_zoo.config.loading import model_config, save
from arch_zoo.experiment import load
from arch_zoo.config.validation import layer_models
from arch_zoo.describe import describe_text
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from tests.conftest import tiny

LAYERS = [{"range": "0:2", "norm_placement": "sandwich"},
          {"pattern": [{"attention_scale": 0.5}, {}]},
          {"range": "-1:", "ffn": "swiglu", "d_ff": 24}]


def test_ranges_and_patterns_resolve_in_order_into_one_config_per_layer():
    m = model_config(tiny(n_layers=5, layers=LAYERS))
    got = [(c.norm_placement.name, c.attention_scale, c.ffn.name, c.d_ff) for c in layer_models(m, "decoder", 5)]
    assert got == [("sandwich", 0.5, "gelu", 32), ("sandwich", None, "gelu", 32), ("pre", 0.5, "gelu", 32),
                   ("pre", None, "gelu", 32), ("pre", 0.5, "swiglu", 24)]


def test_each_layer_is_built_from_its_own_config():
    model = build_model(tiny(n_layers=3, layers=LAYERS), 11)
    layers = model.decoder.layers
    assert [hasattr(layer.mixer, "post_norm") for layer in layers] == [True, True, False]
    assert [hasattr(layer.ffn.sublayer, "gate") for layer in layers] == [False, False, True]
    assert [layer.mixer.sublayer.backend.scale for layer in layers] == [0.5, None, 0.5]
    assert model(torch.randint(1, 11, (2, 4))).logits.shape == (2, 4, 11)


def test_layers_are_resolved_once_by_validation_and_the_stacks_build_from_that(monkeypatch):
    import arch_zoo.config.validation as validation
    calls = []
    real = validation.resolve
    monkeypatch.setattr(validation, "resolve", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    cfg = load({"model": tiny(kind="encoder_decoder", n_layers=3, layers=LAYERS)})
    assert calls == ["encoder", "decoder"]
    model = build_model(cfg, 11)  # a validated config is not validated (nor resolved) again
    assert calls == ["encoder", "decoder"]
    assert [hasattr(layer.ffn.sublayer, "gate") for layer in model.decoder.layers] == [False, False, True]
    import dataclasses
    from arch_zoo.models.transformer import MODEL_KINDS
    copy = dataclasses.replace(cfg.model)  # not through validation: the stacks resolve it themselves
    assert not hasattr(copy, validation.RESOLVED_LAYERS)
    again = MODEL_KINDS["encoder_decoder"](copy, 11)
    assert [hasattr(layer.ffn.sublayer, "gate") for layer in again.decoder.layers] == [False, False, True]


def test_a_component_mapping_without_name_changes_the_options_of_the_same_component():
    m = model_config(tiny(n_layers=2, norm={"name": "layernorm", "eps": 1e-6},
                          layers=[{"range": 1, "norm": {"bias": False}}]))
    first, second = layer_models(m, "decoder", 2)
    assert (first.norm.options.eps, first.norm.options.bias) == (1e-6, True)
    assert (second.norm.options.eps, second.norm.options.bias) == (1e-6, False)


def test_encoder_decoder_entries_can_target_one_stack():
    m = model_config(tiny(kind="encoder_decoder", n_layers=2, layers=[{"stack": "decoder", "ffn": "relu"}]))
    assert {c.ffn.name for c in layer_models(m, "encoder", 2)} == {"gelu"}
    assert {c.ffn.name for c in layer_models(m, "decoder", 2)} == {"relu"}


def test_the_saved_config_keeps_the_compact_form_and_rebuilds_the_same_model(tmp_path):
    cfg = load({"model": tiny(n_layers=3, layers=LAYERS)})
    save(cfg, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["model"]["layers"] == LAYERS
    again = load(tmp_path / "config.yaml")
    torch.manual_seed(0)
    a = build_model(cfg, 11)
    torch.manual_seed(0)
    b = build_model(again, 11)
    ids = torch.randint(1, 11, (1, 5))
    torch.testing.assert_close(a(ids).logits, b(ids).logits, rtol=0, atol=0)


def test_describe_prints_the_layout_grouping_identical_layers():
    text = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=6, layers=LAYERS))), vocab_size=11)
    assert "  decoder layer 0: attention_scale=0.5, norm_placement=sandwich\n" in text
    assert "  decoder layers 2, 4: attention_scale=0.5\n" in text
    assert "  decoder layer 3: as the model\n" in text
    assert "  decoder layer 5: d_ff=24, ffn=swiglu\n" in text


@pytest.mark.parametrize("layers,key,words", [
    ([{"rnge": "0:2"}], "model.layers[0].rnge", "did you mean 'range'"),
    ([{"d_model": 8}], "model.layers[0].d_model", "cannot differ per layer"),
    ([{}, {"range": "0:9", "ffn": "relu"}], "model.layers[1].range", "reaches past the 4 layers"),
    ([{"range": "a:b"}], "model.layers[0].range", "start:stop"),
    ([{"range": "3:1"}], "model.layers[0].range", "selects no layer"),
    ([{"range": 7}], "model.layers[0].range", "does not exist"),
    ([{"pattern": []}], "model.layers[0].pattern", "non-empty list"),
    ([{"pattern": [{"vocab_size": 3}]}], "model.layers[0].pattern[0].vocab_size", "cannot differ"),
    ([{"stack": "encoder"}], "model.layers[0].stack", "encoder_decoder"),
    ([{"range": 1, "n_heads": 3}], "model.layers[0].n_heads", "not divisible"),
    ([{"ffn": "swigl"}], "model.layers[0].ffn", "swiglu"),
])
def test_bad_layers_are_one_line_errors_naming_the_key(layers, key, words):
    with pytest.raises(ConfigError) as err:
        model_config(tiny(n_layers=4, layers=layers))
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


def test_the_cli_exits_2_on_a_bad_layer_range(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(tiny(n_layers=2, layers=[{"range": "0:5", "ffn": "relu"}])))
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "describe", str(tmp_path / "m.yaml"), "--vocab-size", "11"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "model.layers[0].range" in proc.stderr and "Traceback" not in proc.stderr


def test_a_sweep_can_vary_the_layer_layout(tmp_path):
    """Issue 14 §1: a sweep can vary it (an axis whose values are model.layers lists), params matched."""
    from arch_zoo.sweeps import expand, load_spec, make_plan
    from tests.sweeps.conftest import write_spec

    local_global = [{"pattern": [{"norm_placement": "sandwich"}, {}]}]
    spec = load_spec(write_spec(tmp_path, {"grid": {"model.layers": [None, local_global]},
                                           "overrides": {"model.n_layers": 2}, "match_params": True}))
    assert [v.settings["model.layers"] for v in expand(spec)] == [None, local_global]
    plan = make_plan(spec)
    configs = [run.config for run in plan.runs]
    assert [c.model.layers for c in configs] == [None, local_global]
    assert len({run.run_id for run in plan.runs}) == 2


def test_a_position_scheme_in_some_layers_only_acts_in_those_layers():
    """README: ALiBi in some layers only. Layer 1 with alibi in a NoPE model is the same network as
    an ALiBi model whose layer 0 has none (neither scheme has parameters, so the seeds line up)."""
    torch.manual_seed(0)
    a = build_model(tiny(n_layers=2, position="none", layers=[{"range": 1, "position": "alibi"}]), 11)
    torch.manual_seed(0)
    b = build_model(tiny(n_layers=2, position="alibi", layers=[{"range": 0, "position": "none"}]), 11)
    torch.manual_seed(0)
    nope = build_model(tiny(n_layers=2, position="none"), 11)
    ids = torch.randint(1, 11, (2, 7))
    torch.testing.assert_close(a(ids).logits, b(ids).logits, rtol=0, atol=0)
    assert not torch.allclose(a(ids).logits, nope(ids).logits)


@pytest.mark.parametrize("scheme", ["alibi", "rope", "t5_bias"])
def test_cached_decoding_with_a_per_layer_scheme_equals_the_full_forward(scheme):
    torch.manual_seed(0)
    model = build_model(tiny(n_layers=3, position="rope", layers=[{"pattern": [{}, {"position": scheme}]}]), 11).eval()
    ids = torch.randint(1, 11, (2, 6))
    full = model(ids).logits
    cache, steps = model.new_cache(), []
    for t in range(ids.shape[1]):
        steps.append(model(ids[:, t:t + 1], cache=cache).logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_a_per_layer_scheme_that_adds_to_embeddings_is_refused():
    with pytest.raises(ConfigError) as err:
        model_config(tiny(n_layers=2, layers=[{"range": 1, "position": "learned"}]))
    assert err.value.key == "model.layers[0].position" and "alibi" in str(err.value)
