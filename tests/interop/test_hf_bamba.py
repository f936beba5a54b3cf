"""Bamba: the bamba-tiny preset computes what Hugging Face's BambaForCausalLM computes (its pure-torch
path; nothing downloaded, random weights) with left and right padding; cached greedy decoding gives
the tokens of HF `generate`; both round trips are bit for bit; `arch-zoo import` reads a saved
checkpoint; what Bamba cannot hold is refused in one line; the full preset (Bamba-9B) has the parameter
count HF's class gives for its published config."""
import dataclasses

import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.family_checks import (assert_import_reads_a_saved_checkpoint, assert_refused_in_one_line, described,
                                         preset_model, rebuilt, seeded)
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, padded_batch, positions, randomize, tiny)

tf = pytest.importorskip("transformers")
# ibm-ai-platform/Bamba-9B's published config (the rest are BambaConfig's defaults)
BAMBA_9B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, attn_layer_indices=[9, 18, 27], mamba_n_heads=128,
                mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2)


def hf_config(**changes):
    m = tiny("bamba")
    o = m.mixer.options
    config = tf.BambaConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "intermediate_size": m.d_ff,
        "max_position_embeddings": m.max_seq_len, "attn_layer_indices": [1, 4], "mamba_n_heads": o.n_heads,
        "mamba_d_state": o.state_size, "mamba_n_groups": o.n_groups, "mamba_chunk_size": o.chunk_size,
        "pad_token_id": 0, **changes})
    config._attn_implementation = "eager"
    return config


def reference(seed=0, **changes):
    return seeded(tf.BambaForCausalLM, hf_config(**changes), seed)


@pytest.fixture(scope="module")
def ref():
    return reference()


def test_the_tiny_config_is_the_one_the_preset_names(ref):
    assert ref.config.layers_block_type == ["linear_attention", "full_attention", "linear_attention",
                                            "linear_attention", "full_attention"]
    assert ref.model.layers[0].mamba.head_dim == 12 and ref.model.rotary_emb.inv_freq.numel() == 3  # 6 of 12 rotate


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = preset_model(ref, "bamba", ["Mamba2", "Attention", "Mamba2", "Mamba2", "Attention"])
    assert_same_logits(ref, model, side)


def test_derived_config_equals_the_preset(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert dataclasses.replace(model.config, vocab_size=None) == tiny("bamba")
    assert_same_logits(ref, model, "left")


def test_parity_check_notices_the_whole_head_rotated(ref):
    """Bamba rotates half of each attention head's dims (partial_rotary_factor 0.5, hard-coded in HF)."""
    model = from_hf(ref, changes={"position": {"name": "rope", "base": 10000.0, "fraction": 1.0}})
    a, b = causal_lm_logits(ref, model, "right")
    assert (a - b).abs().max() > 1e-3


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:bamba-tiny"))


def test_to_hf_of_from_hf_gives_the_tensors_back(ref):
    assert_round_trip(ref)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    from arch_zoo.interop.export_hf import sized

    model = randomize(from_hf(ref, config="preset:bamba-tiny"), seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, model, "layers_block_type")
    assert again.config == sized(model)
    assert_same_logits(hf.eval(), model, "left")


def test_biases_a_tied_head_and_adjacent_attention_layers_import_too():
    """Right padding only: with mamba_proj_bias, HF's left-padded rows convolve in_proj's biases at the
    pads (it zeroes the layer's input there, not in_proj's output), so its logits depend on the
    padding; arch_zoo's do not (docs/how-to/hugging-face.md says so). Bamba-9B has no such biases."""
    hf = reference(seed=1, attention_bias=True, mlp_bias=True, mamba_proj_bias=True, tie_word_embeddings=True,
                   attn_layer_indices=[2, 3], mamba_conv_bias=False)
    assert hf.model.layers[0].mamba.in_proj.bias is not None and hf.model.layers[0].mamba.conv1d.bias is None
    model = from_hf(hf)
    assert model.config.bias and model.config.tie_embeddings and not model.config.mixer.options.conv_bias
    assert model.config.layers == [{"range": "2:4", "mixer": "attention"}]
    assert_same_logits(hf, model, "right")
    assert_round_trip(hf)
    ids, mask = padded_batch([3, 12], 12, "left")  # the 3-token row: HF's logits move with its pads, ours not
    with torch.no_grad():
        alone = hf(input_ids=ids[:1, -3:]).logits[0]
        padded = hf(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits[0, -3:]
        ours = model(ids, mask).logits[0, -3:]
    assert (padded - alone).abs().max() > 1e-2
    torch.testing.assert_close(ours, alone, atol=1e-4, rtol=0)


def test_bias_flags_that_differ_are_refused_in_one_line():
    assert_refused_in_one_line(reference(mamba_proj_bias=True), r"bamba config: mlp_bias, mamba_proj_bias, attention_bias "
                                                                r"differing \(False, True, False\) has no arch_zoo equivalent")


def test_export_names_bamba_and_the_first_field_it_cannot_hold():
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    whole = model_config({**to_dict(tiny("bamba")), "vocab_size": VOCAB,
                          "position": {"name": "rope", "base": 10000.0, "fraction": 1.0}})
    assert native_config(whole).reason == ("its mixer layout (mamba2 x3 + attention x2) fits Bamba "
                                           "only: position.fraction 1.0 has no Bamba equivalent"), \
        native_config(whole).reason


@pytest.mark.parametrize("changes,why", [
    ({"layers": [{"range": 1, "mixer": "attention"}, {"range": 2, "mixer": {"state_size": 4}}]},
     "mamba2 options differing between layers"),
    ({"mixer": {"name": "mamba2", "n_heads": 6, "head_dim": 10, "state_size": 8, "n_groups": 2}}, "mamba2 n_heads x head_dim (6 x 10) not a multiple of d_model has no Bamba"),
])
def test_mamba2_layers_bamba_cannot_write_are_named(changes, why):
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    reason = native_config(model_config({**to_dict(tiny("bamba")), "vocab_size": VOCAB, **changes})).reason
    assert "fits Bamba only: " in reason and why in reason and "\n" not in reason, reason


def test_arch_zoo_import_reads_a_saved_checkpoint(tmp_path):
    cfg = assert_import_reads_a_saved_checkpoint(tmp_path, reference, "bamba")
    assert cfg.model.mixer == tiny("bamba").mixer


def test_the_full_preset_has_the_parameters_of_hf_bamba_9b(capsys):
    config = tf.BambaConfig(**BAMBA_9B)
    hf, out = described(capsys, tf.BambaForCausalLM, config, "preset:bamba-9b")
    assert hf == 9_780_235_392  # Bamba-9B ("9.8b" in its checkpoint names)
    assert f"parameters  {hf:,} total" in out, out
    assert "decoder layers 9, 18, 27: mixer=attention" in out
