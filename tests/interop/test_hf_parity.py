"""Every -tiny preset computes what its Hugging Face reference computes: same logits to 1e-4 in
fp32 on padded batches, same greedy tokens. References are random (nothing is downloaded)."""
import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.references import cached_greedy, greedy_cached, hf_reference, padded_batch, positions, tiny

pytest.importorskip("transformers")

ATOL = 1e-4
PRESETS = ["gpt2", "bert", "llama", "t5"]


def both(name, ref, model, side):
    """(reference, arch_zoo) outputs at the real positions of a padded batch."""
    ids, mask = padded_batch([7, 12, 3], 12, side)
    with torch.no_grad():
        if name == "t5":
            dec, dec_mask = padded_batch([5, 1, 6], 6, side, seed=2)
            a = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask).logits
            b = model(ids, dec, mask, dec_mask).logits
            return a[dec_mask.bool()], b[dec_mask.bool()]
        kwargs = {}
        if name == "bert":  # sentence A / sentence B
            kwargs["token_type_ids"] = (torch.arange(12) >= 6).long().expand(3, -1)
        a = ref(input_ids=ids, attention_mask=mask, position_ids=positions(mask), **kwargs).logits
        b = model(ids, mask, **kwargs).logits
        return a[mask.bool()], b[mask.bool()]


@pytest.fixture(scope="module", params=PRESETS)
def reference(request):
    return request.param, hf_reference(request.param)


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(reference, side):
    name, ref = reference
    model = from_hf(ref, config=f"preset:{name}-tiny")
    assert model.config == tiny(name)
    a, b = both(name, ref, model, side)
    assert a.abs().max() > 0.1  # a meaningful comparison, not of near-zero logits
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_derived_config_equals_the_reference(reference):
    name, ref = reference
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    torch.testing.assert_close(*reversed(both(name, ref, model, "right")), atol=ATOL, rtol=0)


WRONG = {  # one architectural slip per preset: the parity check must notice each
    "gpt2": {"ffn": "gelu"},  # exact GELU instead of the tanh approximation
    "bert": {"head": {"activation": "gelu_tanh"}},
    "llama": {"position": {"interleaved": True}},
    "t5": {"head": {"scale_input": False}},
}


def test_parity_check_notices_a_wrong_preset(reference):
    name, ref = reference
    a, b = both(name, ref, from_hf(ref, config=f"preset:{name}-tiny", changes=WRONG[name]), "right")
    assert (a - b).abs().max() > ATOL  # assert_close above would fail


def test_bert_model_hidden_states_equal_the_reference():
    ref = hf_reference("bert", "BertModel")
    model = from_hf(ref)
    assert model.config.head.name == "embedding"  # BertModel has no LM head; [CLS] state out
    ids, mask = padded_batch([9, 4], 10, "right")
    types = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        out = model(ids, mask, token_type_ids=types)
    torch.testing.assert_close(out.hidden[mask.bool()], a[mask.bool()], atol=ATOL, rtol=0)
    torch.testing.assert_close(out.logits, a[:, 0], atol=ATOL, rtol=0)


def greedy_reference(ref, ids, mask, steps):
    for _ in range(steps):
        with torch.no_grad():
            logits = ref(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits
        ids = torch.cat((ids, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        mask = torch.cat((mask, torch.ones_like(mask[:, :1])), dim=1)
    return ids[:, -steps:]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decoder_presets_generate_the_same_greedy_tokens(name):
    ref = hf_reference(name)
    model = from_hf(ref, config=f"preset:{name}-tiny")
    ids, mask = padded_batch([5, 8, 2], 8, "left")
    expected = greedy_reference(ref, ids, mask, 8)
    assert len(set(expected.flatten().tolist())) > 1  # the prompts matter (random models often repeat a token)
    assert torch.equal(greedy_cached(model, ids, mask, 8), expected)


def test_t5_generates_the_same_greedy_tokens():
    ref = hf_reference("t5")
    model = from_hf(ref, config="preset:t5-tiny")
    ids, mask = padded_batch([9, 4, 6], 9, "right")
    start = torch.zeros(3, 1, dtype=torch.long)  # T5 starts decoding from the pad token
    dec = start
    for _ in range(8):
        with torch.no_grad():
            logits = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        dec = torch.cat((dec, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert len(set(dec[:, 1:].flatten().tolist())) > 1
    assert torch.equal(cached_greedy(model, ids, mask, start, 8), dec[:, 1:])


def test_t5_with_a_gated_feed_forward_and_an_unscaled_head():
    ref = hf_reference("t5", feed_forward_proj="gated-silu", tie_word_embeddings=False)  # no output scaling
    model = from_hf(ref)
    assert model.config.ffn.name == "swiglu" and not model.config.head.options.scale_input
    torch.testing.assert_close(*reversed(both("t5", ref, model, "right")), atol=ATOL, rtol=0)
