"""Mamba-2: the mamba2-tiny preset computes what Hugging Face's Mamba2ForCausalLM computes (its pure-torch
path; nothing downloaded, random weights), with left and right padding; cached greedy decoding gives
the tokens of HF `generate`; the full preset has the parameter count HF's class gives for its default
config (the Mamba-Codestral-7B shape)."""
import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_same_logits, causal_lm_logits,
                                      meta_parameters, randomize, tiny)

tf = pytest.importorskip("transformers")
def hf_config(**changes):
    m = tiny("mamba2")
    o = m.mixer.options
    return tf.Mamba2Config(vocab_size=VOCAB, hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_heads=o.n_heads,
                           head_dim=o.head_dim, state_size=o.state_size, n_groups=o.n_groups, conv_kernel=o.conv_size,
                           chunk_size=o.chunk_size, expand=o.n_heads * o.head_dim // m.d_model, pad_token_id=0,
                           **changes)


@pytest.fixture(scope="module")
def ref():
    torch.manual_seed(0)
    return randomize(tf.Mamba2ForCausalLM(hf_config())).eval()


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:mamba2-tiny")
    assert model.config == tiny("mamba2")
    assert_same_logits(ref, model, side, position_ids=False)  # Mamba2ForCausalLM takes no position_ids


def test_derived_config_equals_the_reference(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref) and model.config.mixer == tiny("mamba2").mixer
    assert_same_logits(ref, model, "left", position_ids=False)


def test_parity_check_notices_the_gate_on_the_wrong_side_of_the_norm(ref):
    """Mamba-2 gates before its RMSNorm, Gated DeltaNet after: the other order is another function."""
    model = from_hf(ref, config="preset:mamba2-tiny")
    for layer in model.decoder.layers:
        layer.mixer.sublayer.norm.gate_first = False
    a, b = causal_lm_logits(ref, model, "right", position_ids=False)
    assert (a - b).abs().max() > 1e-4


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:mamba2-tiny"))


def test_the_full_preset_has_the_parameters_of_hf_mamba2_default(capsys):
    hf = meta_parameters(tf.Mamba2ForCausalLM, tf.Mamba2Config())
    assert hf == 7_285_403_648  # the figure: Mamba-Codestral-7B
    assert main(["describe", "preset:mamba2", "--vocab-size", str(tf.Mamba2Config().vocab_size)]) == 0
    out = capsys.readouterr().out
    assert f"parameters  {hf:,} total" in out and "decoder x 64: mamba2 (causal)\n" in out  # no feed-forward
