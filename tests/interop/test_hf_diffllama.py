"""DiffLlama: the diffllama-tiny preset computes what Hugging Face's DiffLlamaForCausalLM computes (its
pure-torch path; nothing downloaded, random weights), with left and right padding; cached greedy decoding
gives the tokens of HF `generate`."""
import pytest
import torch

from arch_zoo.coerce import to_dict
from arch_zoo.config.loading import model_config
from arch_zoo.interop import from_hf, model_config_from_hf
from arch_zoo.interop.checkpoint import CheckpointError
from arch_zoo.interop.export_hf import native_config
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, randomize, tiny)

tf = pytest.importorskip("transformers")


def hf_config(**changes):
    m = tiny("diffllama")
    sizes = dict(vocab_size=VOCAB, hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                 num_key_value_heads=m.n_kv_heads, intermediate_size=m.d_ff, max_position_embeddings=m.max_seq_len,
                 pad_token_id=0)
    config = tf.DiffLlamaConfig(**{**sizes, **changes})
    config._attn_implementation = "eager"
    return config


def reference(**changes):
    torch.manual_seed(0)
    return randomize(tf.DiffLlamaForCausalLM(hf_config(**changes))).eval()


@pytest.fixture(scope="module")
def ref():
    return reference()


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:diffllama-tiny")
    assert model.config == tiny("diffllama")
    assert_same_logits(ref, model, side)


def test_derived_config_is_the_preset(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    preset = tiny("diffllama")
    assert model.config.mixer == preset.mixer and model.config.n_kv_heads == preset.n_kv_heads
    assert_same_logits(ref, model, "left")


def test_lambda_init_follows_each_layers_depth(ref):
    """HF's lambda_init per layer index; one depth for all layers is another function."""
    model = from_hf(ref, config="preset:diffllama-tiny")
    ours = [layer.mixer.sublayer.lambda_init for layer in model.decoder.layers]
    assert ours == [layer.self_attn.lambda_init for layer in ref.model.layers] and len(set(ours)) == 3
    for layer in model.decoder.layers:
        layer.mixer.sublayer.lambda_init = ours[0]
    theirs, got = causal_lm_logits(ref, model, "right")
    assert (theirs - got).abs().max() > 1e-3


def test_full_multi_head_attention_imports_too():
    """Also: HF's DiffLlama rotates whole heads whatever a partial_rotary_factor says."""
    rope = {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
    ref = reference(num_key_value_heads=4, rms_norm_eps=1e-6, rope_parameters=rope)
    model = from_hf(ref)
    assert model.config.kv_heads == 4 and model.config.mixer.options.norm_eps == 1e-6
    assert model.config.position.options.base == 500.0 and model.config.position.options.fraction == 1.0
    assert_same_logits(ref, model, "right")


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:diffllama-tiny"))


@pytest.mark.parametrize("change,match", [
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type 'linear'"),
    ({"attention_bias": True}, "attention_bias without feed-forward biases"),
])
def test_what_has_no_equivalent_is_refused_in_one_line(change, match):
    with pytest.raises(CheckpointError, match=f"diffllama config: {match}") as info:
        from_hf(reference(**change))
    assert "\n" not in str(info.value)


def test_to_hf_of_from_hf_gives_the_reference_tensors_back(ref):
    """o_proj's reordered columns go back to HF's order (the fresh-process export test is
    tests/interop/test_export_hf.py's)."""
    assert_round_trip(ref)


def test_a_lambda_init_set_by_hand_is_not_written_as_diffllama():
    """DiffLlama has no field for it: HF's lambda_init always follows depth."""
    preset = to_dict(tiny("diffllama"))
    assert native_config(model_config({**preset, "vocab_size": VOCAB})).reason == "written as DiffLlamaForCausalLM"
    mixer = {"name": "differential_attention", "lambda_init": 0.5}
    fixed = model_config({**preset, "vocab_size": VOCAB, "mixer": mixer})
    assert native_config(fixed).hf_config is None
    assert "mixer.lambda_init 0.5 has no DiffLlama equivalent" in native_config(fixed).reason
