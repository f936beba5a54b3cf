"""Falcon-H1: the falcon-h1-tiny preset (attention beside Mamba-2 in every layer: the parallel mixer)
computes what Hugging Face's FalconH1ForCausalLM computes (its pure-torch path; nothing downloaded,
random weights, every muP multiplier set to a number of its own) with left and right padding; cached
greedy decoding gives the tokens of HF `generate`; both round trips are bit for bit; an export loads in
transformers alone; `arch-zoo import` reads a saved checkpoint; the full preset (Falcon-H1-0.5B) has the
parameter count HF's class gives for its published config."""
import dataclasses

import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.family_checks import (assert_export_loads_alone, assert_import_reads_a_saved_checkpoint,
                                         assert_refused_in_one_line, described, preset_model, rebuilt, seeded)
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, padded_batch, randomize, tiny)

tf = pytest.importorskip("transformers")
# tiiuae/Falcon-H1-0.5B-Base's published config (the rest are FalconH1Config's defaults)
FALCON_H1_05B = dict(
    vocab_size=32784, hidden_size=1024, intermediate_size=2048, num_hidden_layers=36, num_attention_heads=8,
    num_key_value_heads=2, head_dim=64, max_position_embeddings=16384, rope_theta=1e11, mamba_d_ssm=1536,
    mamba_n_heads=24, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_d_conv=4, mamba_chunk_size=128,
    mamba_rms_norm=False, mamba_norm_before_gate=False, tie_word_embeddings=False)
# the tiny preset's multipliers, as Falcon-H1's config spells them
MULTIPLIERS = dict(attention_in_multiplier=0.75, ssm_in_multiplier=1.25, attention_out_multiplier=0.9375,
                   ssm_out_multiplier=0.5, key_multiplier=0.390625, mlp_multipliers=[0.875, 0.5859375],
                   ssm_multipliers=[0.5, 0.25, 0.75, 0.5, 1.5], embedding_multiplier=2.0, lm_head_multiplier=0.5)


def hf_config(**changes):
    m = tiny("falcon-h1")
    o = m.mixer.options.branches[1].options
    config = tf.FalconH1Config(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "head_dim": m.head_dim,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "intermediate_size": m.d_ff,
        "max_position_embeddings": m.max_seq_len, "rope_theta": 10000.0, "mamba_d_ssm": o.n_heads * o.head_dim,
        "mamba_n_heads": o.n_heads, "mamba_d_head": o.head_dim, "mamba_d_state": o.state_size,
        "mamba_n_groups": o.n_groups, "mamba_chunk_size": o.chunk_size, "mamba_rms_norm": True,
        "mamba_norm_before_gate": True, "pad_token_id": 0, **MULTIPLIERS, **changes})
    config._attn_implementation = "eager"
    return config


def reference(seed=0, **changes):
    return seeded(tf.FalconH1ForCausalLM, hf_config(**changes), seed)


@pytest.fixture(scope="module")
def ref():
    return reference()


def test_the_tiny_config_is_the_one_the_preset_names(ref):
    layer = ref.model.layers[0]
    assert layer.mamba.head_dim == 10 and layer.mamba.intermediate_size == 60 and layer.self_attn.head_dim == 16
    assert layer.mamba.mup_vector.unique().tolist() == [0.25, 0.5, 0.75, 1.5]  # the multipliers act in HF


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = preset_model(ref, "falcon-h1", ["Parallel"] * 3)
    assert_same_logits(ref, model, side)


def test_derived_config_equals_the_preset(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert dataclasses.replace(model.config, vocab_size=None) == tiny("falcon-h1")


@pytest.mark.parametrize("multiplier", sorted(MULTIPLIERS))
def test_parity_notices_each_multiplier(ref, multiplier):
    """Each multiplier moves HF's logits: a config that lost any one of them would fail the parity."""
    model = from_hf(ref)
    value = MULTIPLIERS[multiplier]
    other = reference(**{multiplier: [1.0] * len(value) if isinstance(value, list) else 1.0})
    a, b = causal_lm_logits(other, model, "right")
    assert (a - b).abs().max() > 1e-3, multiplier


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:falcon-h1-tiny"))


def test_to_hf_of_from_hf_gives_the_tensors_back(ref):
    assert_round_trip(ref)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    from arch_zoo.interop.export_hf import sized

    model = randomize(from_hf(ref, config="preset:falcon-h1-tiny"), seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, model, "layers_block_type")
    assert again.config == sized(model)
    assert_same_logits(hf.eval(), model, "left")


def test_no_gated_norm_biases_and_a_tied_head_import_too():
    """Falcon-H1-0.5B's mixer has no gated norm (mamba_rms_norm: false); right padding only: with
    mamba_proj_bias, HF's left-padded rows convolve in_proj's biases at the pads (as Bamba's)."""
    hf = reference(seed=1, mamba_rms_norm=False, attention_bias=True, mlp_bias=True, mamba_proj_bias=True,
                   projectors_bias=True, tie_word_embeddings=True, mamba_conv_bias=False)
    assert isinstance(hf.model.layers[0].mamba.norm, torch.nn.Identity)
    model = from_hf(hf)
    mamba = model.config.mixer.options.branches[1].options
    assert mamba.norm == "none" and model.config.bias and model.config.tie_embeddings and not mamba.conv_bias
    assert_same_logits(hf, model, "right")
    assert_round_trip(hf)


def test_bias_flags_that_differ_are_refused_in_one_line():
    assert_refused_in_one_line(reference(projectors_bias=True),
                               r"falcon_h1 config: attention_bias, mlp_bias, mamba_proj_bias, projectors_bias differing "
                               r"\(False, False, False, True\) has no arch_zoo equivalent")


@pytest.mark.slow  # a fresh process importing transformers: ~30 s on 2 cores (make test-slow)
def test_an_export_loads_in_transformers_alone_with_the_same_logits_and_tokens(tmp_path):
    from arch_zoo.interop import save_hf

    ours = randomize(from_hf(reference(seed=4), config="preset:falcon-h1-tiny"), seed=4).eval()
    assert save_hf(ours, None, tmp_path / "hf") == "written as FalconH1ForCausalLM"
    job = {"dir": str(tmp_path / "hf"), "auto_class": "AutoModelForCausalLM", "remote": False,
           "prompts": [[5, 9, 14, 3], [7]], "new_tokens": 6,
           **{side: padded_batch([7, 12, 3], 12, side, low=3) for side in ("right", "left")}}
    assert_export_loads_alone(tmp_path, ours, job)


@pytest.mark.parametrize("changes,why", [
    ({"mixer": {"name": "parallel", "branches": ["attention", "gated_deltanet"]}},
     "parallel branches attention, gated_deltanet (Falcon-H1's are attention and mamba2)"),
    ({"layers": [{"range": 1, "mixer": "attention"}]}, "its mixer layout (parallel x2 + attention) is no Hugging Face"),
])
def test_layers_falcon_h1_cannot_write_are_named(changes, why):
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    reason = native_config(model_config({**to_dict(tiny("falcon-h1")), "vocab_size": VOCAB, **changes})).reason
    assert why in reason and "\n" not in reason, reason


def test_arch_zoo_import_reads_a_saved_checkpoint(tmp_path):
    cfg = assert_import_reads_a_saved_checkpoint(tmp_path, reference, "falcon-h1")
    assert cfg.model.mixer == tiny("falcon-h1").mixer


def test_the_full_preset_has_the_parameters_of_hf_falcon_h1_05b(capsys):
    config = tf.FalconH1Config(**FALCON_H1_05B)
    hf, out = described(capsys, tf.FalconH1ForCausalLM, config, "preset:falcon-h1-500m")
    assert hf == 521_411_104  # Falcon-H1-0.5B: 0.52B parameters
    assert f"parameters  {hf:,} total" in out, out
    assert "decoder x 36: parallel (causal)" in out
