"""The mixer seam: choosing a mixer per model and per layer, the stacks it can serve, the errors a
user sees, the FLOPs and decoding-state bytes each mixer declares (against hand counts and measured
states), and attention's output gate."""
import math
import subprocess
import sys

import pytest
import torch
import yaml

from arch_zoo import testing
from arch_zoo.cli import main
from arch_zoo.components.mixers import MIXERS
from arch_zoo.components.mixers.base import decode_flops, flops_per_token, state_bytes_per_token
from arch_zoo.components.flops import linear_flops
from arch_zoo.config import ExperimentConfig
from arch_zoo.config.loading import model_config
from arch_zoo.describe import _fmt, describe_text
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.models.flops import FlopCounter, decoding_state_bytes
from tests.conftest import tiny

RECURRENT = ["gated_deltanet", "mamba2", "linear_attention", "lstm", "gru"]
HYBRID = [{"pattern": [{"mixer": "gated_deltanet"}, {"mixer": "gated_deltanet"}, {"mixer": "gated_deltanet"}, {}]}]


def test_attention_is_the_default_and_keeps_todays_state_dict():
    """Every existing config builds today's model: the same parameter names and shapes as an explicit
    ``mixer: attention``, under the layer's ``mixer`` slot."""
    a = build_model(tiny(n_layers=2), 11)
    b = build_model(tiny(n_layers=2, mixer="attention"), 11)
    keys = {k: v.shape for k, v in a.state_dict().items()}
    assert keys == {k: v.shape for k, v in b.state_dict().items()}
    assert "decoder.layers.0.mixer.sublayer.qkv.weight" in keys and model_config(tiny()).mixer.name == "attention"


def test_a_hybrid_is_data_and_keeps_every_invariant():
    """Qwen3-Next's layout, 3 Gated DeltaNet layers to 1 attention layer, through model.layers."""
    cfg = tiny(n_layers=4, layers=HYBRID)
    model = build_model(cfg, 11)
    assert [type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers] == ["GatedDeltaNet"] * 3 + ["Attention"]
    ran = testing.check_model({**cfg, "mixer": {"name": "attention"}}, kinds=["decoder"])
    assert "cache_parity [decoder]" in ran and "padding_invariance (left) [decoder]" in ran


def test_attention_keys_stay_allowed_where_some_layer_or_cross_attention_reads_them():
    model_config(tiny(n_layers=4, position="rope", qk_norm="rmsnorm", layers=HYBRID))
    model_config(tiny(kind="encoder_decoder", position="alibi", cross_attention_position=True, qk_norm="rmsnorm",
                      layers=[{"stack": "decoder", "mixer": "lstm"}]))
    model_config(tiny(mixer="lstm", position="learned"))


def test_an_encoder_decoder_takes_a_causal_mixer_in_its_decoder_only():
    cfg = tiny(kind="encoder_decoder", layers=[{"stack": "decoder", "mixer": {"name": "mamba2", "state_size": 4,
                                                                              "chunk_size": 4}}])
    model = build_model(cfg, 11)
    assert type(model.decoder.layers[0].mixer.sublayer).__name__ == "Mamba2"
    assert type(model.encoder.layers[0].mixer.sublayer).__name__ == "Attention"
    testing.check_model(cfg, kinds=["encoder_decoder"])


@pytest.mark.parametrize("cfg,key,words", [
    (tiny(kind="encoder", mixer="gated_deltanet"), "model.mixer", "cannot serve a bidirectional encoder"),
    (tiny(kind="encoder_decoder", mixer="lstm"), "model.mixer", "mixers for a bidirectional encoder: attention, differential_attention, linear_attention, mla"),
    (tiny(kind="encoder", layers=[{"range": "0:1", "mixer": "mamba2"}]), "model.layers[0].mixer", "cannot serve"),
    # one layer's mixer: the error says which stack (and layer) the entry reached, and how to keep it to the other
    (tiny(kind="encoder", n_layers=3, layers=[{"range": "1:", "mixer": "lstm"}]), "model.layers[0].mixer",
     "cannot serve encoder layer 1 (bidirectional)"),
    (tiny(kind="encoder_decoder", layers=[{"range": "0:1", "mixer": "mamba2"}]), "model.layers[0].mixer",
     "cannot serve encoder layer 0 (bidirectional) (it serves: decoder); mixers for a bidirectional encoder: "
     "attention, differential_attention, linear_attention, mla; the entry has no stack, so it reaches both stacks: "
     "add stack: decoder"),
    (tiny(kind="encoder_decoder", mixer="gru"), "model.mixer", "for the decoder only: model.layers: [{stack: decoder, "
     "mixer: gru}]"),
    (tiny(mixer="gated_deltanett"), "model.mixer", "did you mean 'gated_deltanet'"),
    (tiny(mixer={"name": "gated_deltanet", "conv_sise": 4}), "model.mixer.conv_sise", "did you mean 'conv_size'"),
    (tiny(mixer={"name": "gated_deltanet", "n_heads": 2, "n_v_heads": 3}), "model.mixer", "multiple of n_heads"),
    (tiny(mixer={"name": "mamba2", "state_size": 0}), "model.mixer", "state_size must be positive"),
    (tiny(mixer={"name": "attention", "gate": "tanh"}), "model.mixer.gate", "sigmoid"),
    (tiny(mixer={"name": "attention", "gate_scope": "head"}), "model.mixer", "gate_scope refines gate"),
    (tiny(mixer={"name": "linear_attention", "feature_map": "elu1"}), "model.mixer.feature_map", "elu"),
    (tiny(mixer={"name": "gated_deltanet", "kernel": "flaa"}), "model.mixer.kernel", "fla"),
    # attention's keys with no attention layer to act in would silently do nothing
    (tiny(mixer="mamba2", position="t5_bias"), "model.position", "no decoder layer has attention"),
    (tiny(mixer="lstm", qk_norm="rmsnorm"), "model.qk_norm", "no layer has attention"),
    (tiny(mixer="linear_attention", attention={"name": "sliding_window", "window": 4}), "model.attention", "default"),
    (tiny(kind="encoder_decoder", position="t5_bias", layers=[{"stack": "decoder", "mixer": "lstm"}]), "model.position",
     "no decoder layer has attention"),
])
def test_a_bad_mixer_is_one_error_naming_the_key(cfg, key, words):
    with pytest.raises(ConfigError) as err:
        model_config(cfg)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("override,words", [
    ("model.mixer=lstm", "model.mixer: mixer 'lstm' cannot serve a bidirectional encoder"),
    ("model.mixer=mamba", "did you mean 'mamba2'"),
])
def test_the_cli_exits_2_with_one_line_and_writes_nothing(override, words, tmp_path, capsys, monkeypatch):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(tiny(kind="encoder", head="mlm")))
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    capsys.readouterr()
    code = main(["train", str(tmp_path / "m.yaml"), override, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and words in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_the_console_script_refuses_a_causal_mixer_in_an_encoder(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(tiny(kind="encoder", mixer="gated_deltanet")))
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "describe", str(tmp_path / "m.yaml"), "--vocab-size", "11"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "model.mixer" in proc.stderr, proc.stderr


def test_arch_zoo_components_lists_the_mixers(capsys):
    assert main(["components"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ["attention", *RECURRENT])


# FLOPs: hand counts per token (2 FLOPs a multiply-add) of each mixer's mixing beyond its linear layers.
SIZES = dict(d_model=16, n_heads=2)  # head_dim 8


def _mixer(name, **options):
    cfg = model_config(tiny(**SIZES, mixer={"name": name, **options}))
    return MIXERS.build(cfg.mixer, cfg, None)


@pytest.mark.parametrize("name,options,per_token", [
    # conv over q, k, v (2*16 + 4*6 channels) with 4 taps; 7 Dk Dv per value head (decay, k^T S, write, read)
    ("gated_deltanet", {"n_v_heads": 4, "v_head_dim": 6}, 2 * (2 * 16 + 24) * 4 + 7 * 4 * 8 * 6),
    # conv over x, B, C (2 heads x 16 channels + 2 x 5); 5 N P per head (decay, write, read); D x
    ("mamba2", {"state_size": 5}, 2 * (32 + 10) * 4 + 5 * 2 * 5 * 16 + 2 * 2 * 16),
    # write phi(k) [v, 1] and read phi(q)^T S: a multiply-add per entry of the 8 x 9 state, each
    ("linear_attention", {}, 2 * 2 * 2 * 8 * 9),
    # four gates, input and recurrent matmuls: 4 H (D + H) multiply-adds
    ("lstm", {"hidden_size": 12}, 2 * 4 * 12 * (16 + 12)),
    # three gates (r, z, n), input and recurrent matmuls: 3 H (D + H) multiply-adds
    ("gru", {"hidden_size": 12}, 2 * 3 * 12 * (16 + 12)),
])
def test_recurrent_mixing_flops_are_a_hand_count_flat_in_the_context(name, options, per_token):
    mixer = _mixer(name, **options)
    for length in (1, 7, 64):
        assert mixer.mixing_flops(length, True) == length * per_token
        assert mixer.step_mixing_flops(length) == per_token  # one decoding step costs the same at any context
    assert flops_per_token(mixer, 10) == linear_flops(mixer) + per_token == decode_flops(mixer, 500)


@pytest.mark.parametrize("options", [{}, {"attention": {"name": "sliding_window", "window": 3}}])
def test_decoding_steps_add_up_to_the_sequences_flops(options):
    """Every mixer: the FLOPs of decoding positions 0..L-1 one at a time sum to the whole sequence's
    (attention's step grows with the context; a window caps it)."""
    for name in ["attention", *RECURRENT]:
        cfg = model_config(tiny(**SIZES, **(options if name == "attention" else {}), mixer=name))
        mixer = MIXERS.build(cfg.mixer, cfg, None)
        for L in (1, 5, 9):
            assert sum(mixer.step_mixing_flops(c) for c in range(L)) == pytest.approx(mixer.mixing_flops(L, True)), name
    plain = model_config(tiny(**SIZES))
    attention = MIXERS.build(plain.mixer, plain, None)
    assert attention.step_mixing_flops(99) == 100 * 4 * 16  # 100 keys, q.k and p.v over 2 heads x 8


@pytest.mark.parametrize("name", ["attention", *RECURRENT])
def test_state_bytes_are_the_bytes_an_eager_prefill_holds(name):
    """What a mixer declares (``state_elements``) is what its eager state holds after a prefill of n
    positions (float32, one row), and ``decoding_state_bytes`` and describe report the model's sum."""
    model = build_model(tiny(n_layers=2, **SIZES, mixer=name), 11).eval()
    n = 9
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(1, 11, (1, n)), cache=cache)
    held = sum(layer.mixer.nbytes for layer in cache.layers)
    assert held == decoding_state_bytes(model, n) == sum(4 * l.mixer.sublayer.state_elements(n) for l in model.decoder.layers)
    assert state_bytes_per_token(model.decoder.layers[0].mixer.sublayer, n) == held / 2 / n
    text = describe_text(ExperimentConfig(model=model_config(tiny(n_layers=2, **SIZES, mixer=name))), vocab_size=11,
                         seq_len=n)
    line = next(l for l in text.splitlines() if l.startswith("  state bytes (float32)"))
    assert line.split()[3] == _fmt(held), line


def test_describe_counts_a_decoding_step_and_splits_mixers_from_attention():
    cfg = model_config(tiny(n_layers=4, **SIZES, layers=HYBRID))
    model = build_model(cfg, 11)
    counter = FlopCounter(model)
    per_token = counter.per_token({(12, 0): 1})
    mixers = [layer.mixer.sublayer for layer in model.decoder.layers]
    assert per_token["decoder mixer"] == pytest.approx(sum(m.mixing_flops(12, True) for m in mixers[:3]) / 12)
    assert per_token["decoder attention"] == pytest.approx(4 * 16 * (12 + 1) / 2)
    step = counter.decode_step(12)
    assert step == linear_flops(model.decoder) + linear_flops(model.head) + sum(m.step_mixing_flops(12) for m in mixers)


@pytest.mark.parametrize("scope", ["elementwise", "head"])
def test_the_attention_gate_multiplies_each_heads_output_by_a_sigmoid(scope):
    """Qiu et al. 2025 / Qwen3-Next: out = W_o (attn(x) * sigmoid(x W_g)), per element or per head."""
    cfg = model_config(tiny(**SIZES, mixer={"name": "attention", "gate": "sigmoid", "gate_scope": scope}))
    torch.manual_seed(0)
    attn = MIXERS.build(cfg.mixer, cfg, None).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    from arch_zoo.components.masks import self_attention_mask
    from arch_zoo.components.mixers import MixerInputs

    got = attn(x, MixerInputs(self_attention_mask(None, 5, 0, True, x.device)))
    q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in attn.qkv(x).split(16, -1))
    w = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
    o = (w.softmax(-1) @ v).transpose(1, 2)  # (B, L, H, D)
    g = torch.sigmoid(attn.gate(x)).view(2, 5, 2, -1)
    assert g.shape[-1] == (8 if scope == "elementwise" else 1)
    torch.testing.assert_close(got, attn.out((o * g).flatten(2)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,kernel,package", [("gated_deltanet", "fla", "flash-linear-attention"),
                                                 ("mamba2", "mamba_ssm", "mamba-ssm")])
def test_a_kernel_without_its_package_is_one_line_naming_what_to_install(name, kernel, package, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda mod, *a: None if mod == kernel else real(mod, *a))
    with pytest.raises(ConfigError) as err:
        model_config(tiny(mixer={"name": name, "kernel": kernel}))
    assert err.value.key == "model.mixer.kernel" and f"pip install {package}" in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:  # per layer, the key is the entry's option
        model_config(tiny(n_layers=2, layers=[{"range": "0:1", "mixer": {"name": name, "kernel": kernel}}]))
    assert err.value.key == "model.layers[0].mixer.kernel", str(err.value)


@pytest.mark.parametrize("name,kernel", [("gated_deltanet", "fla"), ("mamba2", "mamba_ssm")])
def test_a_kernel_whose_package_is_installed_names_the_option_too(name, kernel, monkeypatch):
    import importlib.machinery
    import importlib.util

    real = importlib.util.find_spec
    found = importlib.machinery.ModuleSpec(kernel, None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda mod, *a: found if mod == kernel else real(mod, *a))
    with pytest.raises(ConfigError) as err:
        model_config(tiny(mixer={"name": name, "kernel": kernel}))
    assert err.value.key == "model.mixer.kernel" and "kernel: torch" in str(err.value), str(err.value)
