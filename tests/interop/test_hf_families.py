"""T5 v1.1, GPT-NeoX (Pythia) and BLOOM: each -tiny preset computes what its Hugging Face reference
computes. README: "Each preset gives the same logits as its reference implementation ... to 1e-4";
"For these the tests also check left- and right-padded batches and that cached greedy decoding
gives the tokens of Hugging Face `generate`". References are random (nothing is downloaded)."""
import inspect

import pytest
import torch

from arch_zoo.interop import CheckpointError, from_hf, load_hf_checkpoint, model_config_from_hf
from tests.interop.references import VOCAB, cached_greedy, padded_batch, positions, randomize, tiny
from tests.interop.test_hf_parity import greedy_cached

tf = pytest.importorskip("transformers")

ATOL = 1e-4


def _t5(m):
    return tf.T5Config, tf.T5ForConditionalGeneration, dict(
        d_model=m.d_model, d_kv=m.head_dim, d_ff=m.d_ff, num_layers=m.n_layers, num_heads=m.n_heads,
        relative_attention_num_buckets=m.position.options.num_buckets,
        relative_attention_max_distance=m.position.options.max_distance,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False)


def _pythia(m):
    return tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM, dict(
        hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
        intermediate_size=m.d_ff, max_position_embeddings=m.max_seq_len, rotary_pct=0.25)


def _bloom(m):
    return tf.BloomConfig, tf.BloomForCausalLM, dict(hidden_size=m.d_model, n_layer=m.n_layers, n_head=m.n_heads)


# preset -> (HF config class, HF model class, the HF config of the preset's -tiny size)
FAMILIES = {"t5-v1_1": _t5, "pythia": _pythia, "bloom": _bloom}


def reference(name: str, **changes):
    """A random Hugging Face model (eval mode) of the architecture preset ``name`` claims to be, at -tiny size."""
    config, cls, sizes = FAMILIES[name](tiny(name))
    cfg = config(vocab_size=VOCAB, **{**sizes, **changes})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(cls(cfg)).eval()


def outputs(ref, model, side):
    """(reference, arch_zoo) logits at the real positions of a padded batch."""
    ids, mask = padded_batch([7, 12, 3], 12, side)
    with torch.no_grad():
        if model.config.kind == "encoder_decoder":
            dec, dec_mask = padded_batch([5, 1, 6], 6, side, seed=2)
            a = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask).logits
            return a[dec_mask.bool()], model(ids, dec, mask, dec_mask).logits[dec_mask.bool()]
        kwargs = {"position_ids": positions(mask)} if "position_ids" in inspect.signature(ref.forward).parameters else {}
        a = ref(input_ids=ids, attention_mask=mask, **kwargs).logits
        return a[mask.bool()], model(ids, mask).logits[mask.bool()]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param, reference(request.param)


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(family, side):
    name, ref = family
    model = from_hf(ref, config=f"preset:{name}-tiny")
    assert model.config == tiny(name)
    a, b = outputs(ref, model, side)
    assert a.abs().max() > 0.1
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_derived_config_equals_the_reference(family):
    name, ref = family
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    torch.testing.assert_close(*reversed(outputs(ref, model, "left")), atol=ATOL, rtol=0)


WRONG = {  # one architectural slip per preset: the parity check must notice each
    "t5-v1_1": {"ffn": "geglu"},  # exact GELU in the gate instead of gelu_new
    "pythia": {"position": {"fraction": 0.5}},  # rotating half of each head instead of a quarter
    "bloom": {"position": {"max_bias": 4.0}},  # ALiBi slopes 2^(-4i/n) instead of 2^(-8i/n)
}


def test_parity_check_notices_a_wrong_preset(family):
    name, ref = family
    a, b = outputs(ref, from_hf(ref, config=f"preset:{name}-tiny", changes=WRONG[name]), "right")
    assert (a - b).abs().max() > ATOL


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(family):
    name, ref = family
    model = from_hf(ref, config=f"preset:{name}-tiny")
    steps = 8
    if model.config.kind == "encoder_decoder":
        ids, mask = padded_batch([9, 4, 6], 9, "right")
        start = torch.zeros(3, 1, dtype=torch.long)  # T5 starts decoding from the pad token
        expected = ref.generate(input_ids=ids, attention_mask=mask, decoder_input_ids=start, decoder_start_token_id=0, do_sample=False,
                                max_new_tokens=steps, min_new_tokens=steps)[:, 1:]
        got = cached_greedy(model, ids, mask, start, steps)
    else:
        ids, mask = padded_batch([5, 8, 2], 8, "left")
        expected = ref.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=steps,
                                min_new_tokens=steps, pad_token_id=0)[:, -steps:]
        got = greedy_cached(model, ids, mask, steps)
    assert len(set(expected.flatten().tolist())) > 1  # the prompts matter
    assert torch.equal(got, expected)


def test_neox_sequential_residual_and_hf_rotary_dims():
    """use_parallel_residual: false is the pre placement; rotary_pct 0.3 of head_dim 16 rotates
    int(4.8) = 4 dims, as Hugging Face does (rounding would give 5, an odd and invalid count)."""
    ref = reference("pythia", use_parallel_residual=False, rotary_pct=0.3)
    model = from_hf(ref)
    assert model.config.norm_placement.name == "pre"
    assert model.decoder.position.rot == 4
    torch.testing.assert_close(*reversed(outputs(ref, model, "left")), atol=ATOL, rtol=0)


def test_bloom_residual_after_the_norm_is_refused():
    ref = reference("bloom", apply_residual_connection_post_layernorm=True)
    with pytest.raises(CheckpointError, match="apply_residual_connection_post_layernorm"):
        from_hf(ref)


@pytest.mark.parametrize("name", ["pythia", "bloom"])
def test_saved_checkpoint_directory_loads_without_transformers(name, tmp_path):
    """A checkpoint saved by transformers (config.json + model.safetensors) loads into the preset."""
    ref = reference(name)
    ref.save_pretrained(tmp_path)
    a, b = outputs(ref, load_hf_checkpoint(tmp_path, config=f"preset:{name}-tiny"), "right")
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)

