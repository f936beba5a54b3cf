"""LFM2: the lfm2-tiny preset computes what Hugging Face's Lfm2ForCausalLM computes (its pure-torch
path; nothing downloaded, random weights) with left and right padding; cached greedy decoding gives
the tokens of HF `generate`; both round trips are bit for bit; `arch-zoo import` reads a saved
checkpoint; the feed-forward takes HF's actual width (block_auto_adjust_ff_dim); the full preset
(LFM2-1.2B) has the parameter count HF's class gives for its published config."""
import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.family_checks import (assert_import_reads_a_saved_checkpoint, assert_refused_in_one_line, described,
                                         preset_model, rebuilt, seeded)
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, randomize, tiny)

tf = pytest.importorskip("transformers")
TYPES = {"short_conv": "conv", "attention": "full_attention"}
# LiquidAI/LFM2-1.2B's published config (the rest are Lfm2Config's defaults)
LFM2_1_2B = dict(hidden_size=2048, intermediate_size=12288, num_hidden_layers=16, num_attention_heads=32,
                 num_key_value_heads=8, full_attn_idxs=[2, 5, 8, 10, 12, 14])


def hf_config(**changes):
    m = tiny("lfm2")
    types = [TYPES[layer.get("mixer", {"name": "attention"})["name"]] for layer in m.layers[0]["pattern"]]
    config = tf.Lfm2Config(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "intermediate_size": m.d_ff,
        "block_auto_adjust_ff_dim": False, "max_position_embeddings": m.max_seq_len, "layer_types": types,
        "conv_L_cache": 3, "pad_token_id": 0, **changes})
    config._attn_implementation = "eager"
    return config


def reference(seed=0, **changes):
    return seeded(tf.Lfm2ForCausalLM, hf_config(**changes), seed)


@pytest.fixture(scope="module")
def ref():
    return reference()


def test_the_tiny_config_is_the_one_the_brief_names(ref):
    assert ref.config.layer_types == ["conv", "conv", "full_attention", "conv"]
    assert (ref.config.hidden_size, ref.config.num_attention_heads, ref.config.num_key_value_heads) == (24, 3, 1)


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = preset_model(ref, "lfm2", ["GatedShortConv", "GatedShortConv", "Attention", "GatedShortConv"])
    assert_same_logits(ref, model, side)


def test_derived_config_equals_the_reference(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert_same_logits(ref, model, "left")


def test_parity_check_notices_the_qk_norm_left_out(ref):
    """The attention layer's q/k RMSNorms change the function: without them the logits differ."""
    model = from_hf(ref, config="preset:lfm2-tiny")
    attention = model.decoder.layers[2].mixer.sublayer
    attention.q_norm.forward = attention.k_norm.forward = lambda x: x
    a, b = causal_lm_logits(ref, model, "right")
    assert (a - b).abs().max() > 1e-3


@pytest.mark.parametrize("size,multiplier,multiple,width", [(100, 1.5, 16, 112), (96, 1.0, 32, 64),
                                                            (12288, 1.0, 256, 8192)])
def test_the_feed_forward_takes_hfs_actual_width(size, multiplier, multiple, width):
    """block_auto_adjust_ff_dim: int(2/3 size), times the multiplier, rounded up to the multiple; the
    width is the one HF's Lfm2MLP holds."""
    from arch_zoo.interop.families.lfm2 import ff_width

    changes = dict(intermediate_size=size, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=multiplier,
                   block_multiple_of=multiple)
    assert ff_width({**hf_config().to_dict(), **changes}) == width
    if size > 1000:
        return
    config = hf_config()
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    hf = randomize(tf.Lfm2ForCausalLM(config)).eval()
    assert hf.model.layers[0].feed_forward.w1.out_features == width
    model = from_hf(hf)
    assert model.config.d_ff == width
    assert_same_logits(hf, model, "right")


def test_conv_biases_and_an_untied_head_import_too():
    """Right padding only: with conv_bias, HF's left-padded rows convolve in_proj's biases at the pads
    (it zeroes the layer's input there, not B * x), so its logits depend on the padding; arch_zoo's
    do not (docs/how-to/hugging-face.md says so). LFM2's published checkpoints have no conv biases."""
    hf = reference(seed=1, conv_bias=True, tie_word_embeddings=False,
                   layer_types=["full_attention", "conv", "conv", "conv"])
    assert hf.model.layers[1].conv.in_proj.bias is not None
    model = from_hf(hf)
    assert not model.config.tie_embeddings
    assert_same_logits(hf, model, "right")
    assert_round_trip(hf)


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:lfm2-tiny"))


def test_to_hf_of_from_hf_gives_the_tensors_back(ref):
    assert_round_trip(ref)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    from arch_zoo.interop.export_hf import sized

    model = from_hf(ref, config="preset:lfm2-tiny")
    model = randomize(model, seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, model, "layer_types")
    assert again.config == sized(model)
    assert_same_logits(hf.eval(), model, "left")


def test_a_conv_layer_of_another_width_is_named_when_no_family_fits():
    from arch_zoo.config.loading import model_config
    from arch_zoo.coerce import to_dict
    from arch_zoo.interop.export_hf import native_config

    conv = lambda n: {"mixer": {"name": "short_conv", "conv_size": n}}  # noqa: E731
    cfg = model_config({**to_dict(tiny("lfm2")), "vocab_size": VOCAB,
                        "layers": [{"pattern": [conv(3), conv(4), {}, conv(3)]}]})
    reason = native_config(cfg).reason
    assert "fits LFM2 only" in reason and "short_conv options differing between layers" in reason, reason


def test_arch_zoo_import_reads_a_saved_checkpoint(tmp_path):
    assert_import_reads_a_saved_checkpoint(tmp_path, reference, "lfm2")


def test_the_full_preset_has_the_parameters_of_hf_lfm2_1_2b(capsys):
    config = tf.Lfm2Config(**LFM2_1_2B)
    hf, out = described(capsys, tf.Lfm2ForCausalLM, config, "preset:lfm2")
    assert hf == 1_170_340_608  # LFM2-1.2B
    assert f"parameters  {hf:,} total" in out, out
    assert "decoder layers 2, 5, 8, 10, 12, 14: as the model" in out
    assert "decoder layers 0-1, 3-4, 6-7, 9, 11, 13, 15: mixer=short_conv(conv_size=3, bias=False)" in out


def test_a_rope_scaling_is_refused_in_one_line():
    torch.manual_seed(0)
    hf = tf.Lfm2ForCausalLM(hf_config(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                       "rope_theta": 1e6}))
    assert_refused_in_one_line(hf, "lfm2 config: rope_type 'linear' has no arch_zoo equivalent")
