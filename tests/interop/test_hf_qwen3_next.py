"""Qwen3-Next: the qwen3-next-tiny preset computes what Hugging Face's Qwen3NextForCausalLM computes (its
pure-torch path; nothing downloaded, random weights), with left and right padding; cached greedy decoding
gives the tokens of HF `generate`; the full preset has the parameter count HF's class gives for its
default config (Qwen3-Next-80B-A3B) and the active count per token by hand."""
import functools

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.norms import RMSNorm, ZeroCentredRMSNorm
from arch_zoo.interop import from_hf, model_config_from_hf
from arch_zoo.models import build_model
from tests.interop.references import (ATOL, VOCAB, assert_generates_as_hf, assert_same_logits, causal_lm_logits,
                                      meta_parameters, randomize, tiny)

tf = pytest.importorskip("transformers")


def hf_config(**changes):
    m = tiny("qwen3-next")
    gdn = m.layers[0]["pattern"][0]["mixer"]
    moe = m.ffn.options
    config = tf.Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
        num_key_value_heads=m.n_kv_heads, head_dim=m.head_dim, intermediate_size=m.d_ff,
        max_position_embeddings=m.max_seq_len, linear_num_key_heads=gdn["n_heads"],
        linear_num_value_heads=gdn["n_v_heads"], linear_key_head_dim=gdn["head_dim"],
        linear_value_head_dim=gdn["v_head_dim"], linear_conv_kernel_dim=gdn["conv_size"],
        num_experts=moe.n_experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.d_ff,
        shared_expert_intermediate_size=moe.shared_d_ff, pad_token_id=0, **changes)
    config._attn_implementation = "eager"
    return config


@pytest.fixture(scope="module")
def ref():
    torch.manual_seed(0)
    return randomize(tf.Qwen3NextForCausalLM(hf_config())).eval()


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:qwen3-next-tiny")
    assert model.config == tiny("qwen3-next")
    assert_same_logits(ref, model, side)


def test_derived_config_equals_the_reference(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert_same_logits(ref, model, "left")


def test_dense_layers_and_another_layout_import_too():
    """mlp_only_layers give dense SwiGLU layers (model.layers ranges); layer_types need not repeat by 4."""
    torch.manual_seed(1)
    types = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
    ref = randomize(tf.Qwen3NextForCausalLM(hf_config(mlp_only_layers=[0, 1], layer_types=types))).eval()
    model = from_hf(ref)
    names = [(type(l.mixer.sublayer).__name__, type(l.ffn.sublayer).__name__) for l in model.decoder.layers]
    assert names == [("GatedDeltaNet", "SwiGLU"), ("Attention", "SwiGLU"), ("GatedDeltaNet", "MixtureOfExperts"),
                     ("GatedDeltaNet", "MixtureOfExperts")], names
    assert_same_logits(ref, model, "right")


def test_parity_check_notices_a_plain_rmsnorm(ref):
    """The zero-centred norms apply 1 + w: read as plain gains w the model is another function."""
    model = from_hf(ref, config="preset:qwen3-next-tiny")
    norm = model.decoder.final_norm
    norm.forward = functools.partial(RMSNorm.forward, norm)  # gain w, not 1 + w
    a, b = causal_lm_logits(ref, model, "right")
    assert (a - b).abs().max() > ATOL


@pytest.mark.parametrize("scale", [1.0, 1e-4])
def test_the_gated_deltanet_layer_equals_hfs_also_where_q_and_k_are_near_zero(ref, scale):
    """`l2norm: rsqrt` is HF's q * rsqrt(|q|^2 + 1e-6); the mixer's default (F.normalize's clamp) differs
    only for near-zero vectors, which an input scaled by 1e-4 makes (|q|^2 well below 1e-6)."""
    from arch_zoo.components.masks import AttentionMask
    from arch_zoo.components.mixers import MixerInputs

    model = from_hf(ref, config="preset:qwen3-next-tiny")
    ours, theirs = model.decoder.layers[0].mixer.sublayer, ref.model.layers[0].linear_attn
    x = torch.randn(2, 10, 64) * scale
    with torch.no_grad():
        expected = theirs(x)
        got = ours(x, MixerInputs(AttentionMask(None, True)))
        ours.l2norm = "clamp"  # the mixer's default
        clamped = ours(x, MixerInputs(AttentionMask(None, True)))
    size = expected.abs().max()
    assert size > 0
    assert (got - expected).abs().max() < 1e-4 * size
    assert ((clamped - expected).abs().max() > 0.1 * size) == (scale < 1)


def test_a_new_model_starts_its_zero_centred_gains_at_zero():
    """The init resets norm gains to their identity: 0 for a gain applied as 1 + w, 1 for the rest."""
    model = build_model(tiny("qwen3-next"), VOCAB)
    zero = [m for m in model.modules() if isinstance(m, ZeroCentredRMSNorm)]
    assert len(zero) == 4 * 2 + 1 * 2 + 1  # each layer's two, the attention layer's q/k norms, the final one
    assert all(bool((m.weight == 0).all()) for m in zero)
    x = torch.randn(3, 64)
    torch.testing.assert_close(zero[0](x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    gated = model.decoder.layers[0].mixer.sublayer.norm.weight  # the Gated DeltaNet's own norm: a plain gain
    assert bool((gated == 1).all())


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:qwen3-next-tiny"))


def test_the_full_preset_has_the_parameters_of_hf_qwen3_next_default(capsys):
    config = tf.Qwen3NextConfig()
    hf = meta_parameters(tf.Qwen3NextForCausalLM, config)
    assert hf == 79_674_391_296  # the figure: Qwen3-Next-80B-A3B
    assert main(["describe", "preset:qwen3-next", "--vocab-size", str(config.vocab_size)]) == 0
    out = capsys.readouterr().out
    # active: the total less, in each of 48 layers, the 502 experts (3 x 2048 x 512 each) a token skips
    active = hf - 48 * (512 - 10) * 3 * 2048 * 512
    assert f"parameters  {hf:,} total, {active:,} active per token" in out, out
    assert "decoder layers 0-2, 4-6, 8-10, 12-14, 16-18, 20-22, 24-26, 28-30, 32-34, 36-38, 40-42, 44-46: " \
           "mixer=gated_deltanet(n_heads=16, n_v_heads=32, head_dim=128, v_head_dim=128" in out  # 3:1
    assert "decoder layers 3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47: as the model" in out


@pytest.mark.parametrize("change,match", [
    ({"hidden_act": "gelu"}, "qwen3_next config: hidden_act 'gelu' has no arch_zoo equivalent"),
    ({"attention_bias": True}, "qwen3_next config: attention_bias"),
])
def test_what_has_no_equivalent_is_refused_in_one_line(change, match):
    from arch_zoo.interop.checkpoint import CheckpointError

    torch.manual_seed(0)
    with pytest.raises(CheckpointError, match=match) as info:
        from_hf(tf.Qwen3NextForCausalLM(hf_config(**change)))
    assert "\n" not in str(info.value)
