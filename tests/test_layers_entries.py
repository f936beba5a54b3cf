"""Issue 55 item 1: a per-layer spec trains the model that was written, or says why not. An entry
that changes no layer (shadowed by later entries, empty, or a pattern's items past its range) is
refused at describe, train and sweep; a pattern that does not tile its range is said; describe's
headline names each layer's mixer; RoPE acts in the attention layers and nowhere else."""
import pytest
import torch
import yaml

from arch_zoo.cli import main
from arch_zoo.config import ExperimentConfig
from arch_zoo.config.loading import model_config
from arch_zoo.config.validation import layer_models
from arch_zoo.describe import describe_text
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from tests.conftest import tiny
from tests.sweeps.conftest import write_spec

GDN = {"mixer": "gated_deltanet"}
PER_LAYER = [GDN, GDN, GDN, {}]  # one entry meant per layer: without range, each applies to every layer


def mixers(model) -> list:
    return [type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers]


@pytest.mark.parametrize("layers,key,words", [
    (PER_LAYER, "model.layers[0]", ["has no effect", "(mixer)", "model.layers[1]", "pattern"]),
    ([{"range": "0:2", "ffn": "relu"}, {"ffn": "swiglu"}], "model.layers[0]", ["(ffn)", "by model.layers[1]"]),
    ([{"range": 1, "ffn": "relu", "d_ff": 8}, {"range": "0:2", "ffn": "swiglu"}, {"range": ":", "d_ff": 24}],
     "model.layers[0]", ["(ffn, d_ff)", "by model.layers[1], model.layers[2]"]),
    ([{"pattern": [GDN, {}]}, {"mixer": "attention"}], "model.layers[0]", ["(mixer)", "model.layers[1]"]),
    ([GDN, {}], "model.layers[1]", ["sets no model key", "pattern"]),
    ([GDN, {"range": 3}], "model.layers[1]", ["sets no model key"]),
    ([{"pattern": [{}, {}]}], "model.layers[0]", ["sets no model key"]),
    ([{"pattern": [GDN, GDN, GDN, {}, GDN]}], "model.layers[0].pattern", ["5 items for the 4 layers", "item 4 "]),
    ([{"range": "1:3", "pattern": [GDN, {}, GDN, {}]}], "model.layers[0].pattern", ["for the 2 layers", "items 2-3 "]),
])
def test_an_entry_that_changes_no_layer_is_one_line_naming_it(layers, key, words):
    with pytest.raises(ConfigError) as err:
        model_config(tiny(n_layers=4, layers=layers))
    assert err.value.key == key and "\n" not in str(err.value), str(err.value)
    assert all(w in str(err.value) for w in words), str(err.value)


@pytest.mark.parametrize("layers", [
    [GDN, {"range": 3, "mixer": "attention"}],  # layer 0-2 keep the first entry's mixer
    [{"range": "0:2", "ffn": "relu", "d_ff": 8}, {"ffn": "swiglu"}],  # d_ff survives on 0-1
    [{"norm": {"name": "rmsnorm", "eps": 1e-3}}, {"norm": {"eps": 1e-4}}],  # options merge into the earlier
    [{"pattern": [GDN, {}]}, {"range": "0:2", "mixer": "attention"}],  # layer 2 keeps the pattern's
])
def test_an_entry_partly_overwritten_still_changes_a_layer_and_is_accepted(layers):
    assert len(layer_models(model_config(tiny(n_layers=4, layers=layers)), "decoder", 4)) == 4


def test_the_one_entry_per_layer_spec_written_as_a_pattern_builds_three_gated_deltanet_layers_then_attention():
    model = build_model(tiny(n_layers=4, layers=[{"pattern": PER_LAYER}]), 11)
    assert mixers(model) == ["GatedDeltaNet"] * 3 + ["Attention"]


def test_a_pattern_that_does_not_tile_its_range_is_said_item_by_item():
    """3 items over 4 layers: item j reaches layers j, j+3, ... (the built layers are the check)."""
    cfg = model_config(tiny(n_layers=4, layers=[{"pattern": [GDN, GDN, {}]}]))
    assert mixers(build_model(cfg, 11)) == ["GatedDeltaNet", "GatedDeltaNet", "Attention", "GatedDeltaNet"]
    text = describe_text(ExperimentConfig(model=cfg), vocab_size=11)
    assert ("  note: model.layers[0].pattern: 3 items over 4 layers (range ':') do not tile them: "
            "item 0 -> layers 0, 3; item 1 -> layer 1; item 2 -> layer 2\n") in text
    tiled = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=4, layers=[{"pattern": [GDN, {}]}]))),
                          vocab_size=11)
    assert "note:" not in tiled


def test_describe_headline_says_what_each_layer_is_with_the_mixer_options_resolved():
    cfg = model_config(tiny(n_layers=4, layers=[{"range": "0:3", **GDN}]))
    model = build_model(cfg, 11)
    assert mixers(model) == ["GatedDeltaNet"] * 3 + ["Attention"]
    gdn = model.decoder.layers[0].mixer.sublayer
    text = describe_text(ExperimentConfig(model=cfg), vocab_size=11)
    assert ("  decoder x 4 (causal): layers 0-2 gated_deltanet -> feed-forward; "
            "layer 3 self-attention -> feed-forward\n") in text
    assert "decoder x 4: self-attention" not in text
    assert (f"  decoder layers 0-2: mixer=gated_deltanet(n_heads={gdn.h}, n_v_heads={gdn.hv}, head_dim={gdn.dk}, "
            f"v_head_dim={gdn.dv}, ") in text and "=None" not in text.split("\nlayers\n")[1]
    assert (gdn.h, gdn.dk) == (2, 8)  # tiny(): 2 heads of 16 / 2
    whole = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=4, **GDN))), vocab_size=11)
    assert "  decoder x 4: gated_deltanet (causal) -> feed-forward\n" in whole
    assert "  mixer         gated_deltanet(n_heads=2, n_v_heads=2, head_dim=8, v_head_dim=8," in whole


def test_rope_acts_in_the_attention_layers_and_nowhere_else():
    """An all-Gated-DeltaNet model takes the RoPE base's position (no refusal) and is the same network
    as with none; describe says in how many layers it acts."""
    torch.manual_seed(0)
    rope = build_model(tiny(n_layers=4, position="rope", layers=[{"pattern": [GDN]}]), 11)
    torch.manual_seed(0)
    nope = build_model(tiny(n_layers=4, position="none", layers=[{"pattern": [GDN]}]), 11)
    ids = torch.randint(1, 11, (2, 7))
    torch.testing.assert_close(rope(ids).logits, nope(ids).logits, rtol=0, atol=0)
    text = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=4, position="rope", **GDN))), vocab_size=11)
    assert "  position      rope(base=10000.0, fraction=1.0, interleaved=False): acts in 0 of 4 layers" in text
    hybrid = model_config(tiny(n_layers=4, position="rope", layers=[{"pattern": PER_LAYER}]))
    assert ": acts in 1 of 4 layers" in describe_text(ExperimentConfig(model=hybrid), vocab_size=11)
    plain = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=4, position="rope"))), vocab_size=11)
    assert "acts in" not in plain


def test_a_learned_scheme_that_only_attention_reads_is_still_refused_without_attention():
    with pytest.raises(ConfigError) as err:
        model_config(tiny(n_layers=2, position="t5_bias", **GDN))
    assert err.value.key == "model.position" and "nothing would train them" in str(err.value)
    assert "rope" in str(err.value) and "t5_bias" not in str(err.value).split("choose one of:")[1]


def _write(tmp_path, layers) -> str:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(tiny(n_layers=4, layers=layers)))
    return str(path)


def test_describe_refuses_the_one_entry_per_layer_spec_in_one_line(tmp_path, capsys):
    assert main(["describe", _write(tmp_path, PER_LAYER), "--vocab-size", "11"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "model.layers[0]" in err and "model.layers[1]" in err and "pattern" in err


def test_train_refuses_it_before_training(tmp_path, capsys, monkeypatch):
    import arch_zoo.training as training

    monkeypatch.setattr(training, "run_one", lambda *a, **k: pytest.fail("trained a refused config"))
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"name": "t", "model": tiny(n_layers=4, layers=PER_LAYER),
                                                       "task": {"name": "char_lm", "max_chars": 2000, "seq_len": 16},
                                                       "train": {"max_steps": 2, "batch_size": 2}}))
    assert main(["train", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.layers[0]: has no effect" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_a_sweep_and_its_dry_run_refuse_a_variant_that_would_not_be_what_was_written(dry, tmp_path, capsys):
    spec = write_spec(tmp_path / "spec", {"grid": {"model.layers": [None, PER_LAYER]},
                                          "overrides": {"model.n_layers": 4}})
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), *(["--dry-run"] if dry else ["--workers=1"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.layers[0]" in err and "model.layers[1]" in err, err
    assert not any(out.rglob("status.json"))


def test_a_mixer_sweep_on_a_rope_base_plans_and_says_what_a_pattern_gives_each_layer(tmp_path, capsys):
    """The base keeps model.position: rope (tests/sweeps BASE); no variant changes it."""
    layouts = [None, [{"pattern": [GDN]}], [{"pattern": [GDN, GDN, {}]}]]
    spec = write_spec(tmp_path / "spec", {"grid": {"model.layers": layouts}, "overrides": {"model.n_layers": 4}})
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.position" not in out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and notes[0].endswith(
        "model.layers[0].pattern: 3 items over 4 layers (range ':') do not tile them: item 0 -> layers 0, 3; "
        "item 1 -> layer 1; item 2 -> layer 2")


def test_a_run_trained_before_the_check_still_restores_and_describes_with_a_warning(tmp_path):
    """tests/fixtures/run_before_mixer_slot with a shadowed entry written into its saved config (an entry
    that set gelu, the model's own ffn, again: the checkpoint's model is unchanged)."""
    import shutil

    from tests.training.test_runs_before_mixer_slot import COMPLETED
    from arch_zoo.describe import describe_source
    from arch_zoo.training.restore import restore

    run = shutil.copytree(COMPLETED, tmp_path / "run")
    text = (run / "config.yaml").read_text()
    assert text.count("  layers: null\n") == 1
    (run / "config.yaml").write_text(text.replace("  layers: null\n", "  layers: [{ffn: gelu}, {ffn: gelu}]\n"))
    with pytest.raises(ConfigError):
        describe_source(str(run), ["seed=1"])  # a new config (changed on the command line) is refused
    with pytest.warns(UserWarning, match=r"run: model\.layers\[0\]: has no effect"):
        restored = restore(run)
    with pytest.warns(UserWarning, match="has no effect"):
        assert "decoder x 2: self-attention (causal)" in describe_source(str(run))
    ids = torch.tensor([[1, 2, 3, 4]])
    torch.testing.assert_close(restored.model(ids).logits, restore(COMPLETED).model(ids).logits, rtol=0, atol=0)
