"""gpt-oss: the gpt-oss-tiny preset computes what Hugging Face's GptOssForCausalLM computes (eager, pure
torch; nothing downloaded, random weights), with left and right padding; cached greedy decoding gives
the tokens of HF `generate`; the full presets have the parameter counts HF's class gives for the same
configs (gpt-oss-120b: HF's defaults; gpt-oss-20b: 24 layers of 32 experts) and the active counts by hand."""
import dataclasses

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.interop import from_hf, model_config_from_hf
from arch_zoo.interop.checkpoint import CheckpointError
from tests.interop.references import VOCAB, padded_batch, positions, randomize, tiny
from tests.interop.test_hf_parity import greedy_cached

tf = pytest.importorskip("transformers")
ATOL = 1e-4


def hf_config(**changes):
    """HF's config of the gpt-oss-tiny preset: its sizes, its YaRN and its window; every other setting
    is GptOssConfig's default."""
    m = tiny("gpt-oss")
    yarn, moe = m.position.options, m.ffn.options
    rope = {"rope_type": "yarn", "rope_theta": yarn.base, "factor": yarn.factor, "beta_fast": yarn.beta_fast,
            "beta_slow": yarn.beta_slow, "truncate": yarn.truncate,
            "original_max_position_embeddings": yarn.original_max_seq_len}
    config = tf.GptOssConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "head_dim": m.head_dim,
        "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len,
        "sliding_window": m.layers[0]["pattern"][0]["attention"]["window"], "num_local_experts": moe.n_experts,
        "num_experts_per_tok": moe.top_k, "rope_parameters": rope, "pad_token_id": 0, **changes})
    config._attn_implementation = "eager"
    return config


def reference(seed=0, **changes):
    torch.manual_seed(seed)
    return randomize(tf.GptOssForCausalLM(hf_config(**changes)), seed).eval()


@pytest.fixture(scope="module")
def ref():
    return reference()


def outputs(ref, model, side):
    ids, mask = padded_batch([7, 12, 3], 12, side)
    with torch.no_grad():
        theirs = ref(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits[mask.bool()]
        return theirs, model(ids, mask).logits[mask.bool()]


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:gpt-oss-tiny")
    assert model.config == tiny("gpt-oss")
    a, b = outputs(ref, model, side)
    assert a.abs().max() > 0.1
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_derived_config_equals_the_preset_and_the_reference(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    # the preset leaves vocab_size to the tokenizer, and attention_dropout (None) to dropout (0.0)
    assert model.config == dataclasses.replace(tiny("gpt-oss"), vocab_size=VOCAB, attention_dropout=0.0)
    torch.testing.assert_close(*reversed(outputs(ref, model, "left")), atol=ATOL, rtol=0)


def test_each_part_of_the_reference_moves_the_logits(ref):
    """The sinks, the biases, YaRN's attention factor and the window each change the function here, so
    the parity above holds them all: zeroing one in both models keeps parity and moves the logits."""
    base = outputs(ref, from_hf(ref), "right")[0]
    for name, edit in [("sinks", lambda p, n: n.endswith("sinks")), ("biases", lambda p, n: n.endswith("bias"))]:
        other = reference()
        with torch.no_grad():
            for n, p in other.named_parameters():
                if edit(p, n):
                    p.zero_()
        a, b = outputs(other, from_hf(other), "right")
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
        assert (a - base).abs().max() > 1e-2, name
    for change in ({"sliding_window": 64}, {"rope_parameters": {"rope_type": "default", "rope_theta": 150000.0}}):
        other = reference(**change)
        a, b = outputs(other, from_hf(other), "right")
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
        assert (a - base).abs().max() > 1e-2, change


@pytest.mark.parametrize("changes", [
    {"swiglu_limit": 0.5, "swiglu_alpha": 1.2},  # a clamp that cuts most of the experts' activations
    {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 4.0,
                         "beta_slow": 0.5, "original_max_position_embeddings": 8}},  # truncate by default
    {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},  # no YaRN
    {"layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]},
])
def test_other_configs_import_to_equal_logits(changes):
    ref = reference(seed=1, **changes)
    model = from_hf(ref)
    for side in ("left", "right"):
        torch.testing.assert_close(*reversed(outputs(ref, model, side)), atol=ATOL, rtol=0)


def test_the_clamp_acts_in_the_clamped_reference():
    """With swiglu_limit 0.5 the experts' clamp cuts: the same weights without it give other logits."""
    ref = reference(seed=1, swiglu_limit=0.5)
    model = from_hf(ref)
    unclamped = from_hf(ref, changes={"ffn": {"expert": {"name": "clamped_swiglu", "limit": 1e6}}})
    a, b = outputs(ref, model, "right")[1], outputs(ref, unclamped, "right")[1]
    assert (a - b).abs().max() > 1e-2


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    model = from_hf(ref, config="preset:gpt-oss-tiny")
    steps = 8
    ids, mask = padded_batch([5, 8, 2], 8, "left")
    expected = ref.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=steps,
                            min_new_tokens=steps, pad_token_id=0)[:, -steps:]
    assert len(set(expected.flatten().tolist())) > 1
    assert torch.equal(greedy_cached(model, ids, mask, steps), expected)


def test_the_bare_gpt_oss_model_imports_with_a_tied_head():
    """GptOssModel has no output projection: tied to the embeddings, the logits are its hidden states
    times the embedding table."""
    torch.manual_seed(0)
    ref = randomize(tf.GptOssModel(hf_config())).eval()
    model = from_hf(ref, changes={"tie_embeddings": True})
    ids, mask = padded_batch([7, 12, 3], 12, "left")
    with torch.no_grad():
        hidden = ref(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).last_hidden_state
        expected = (hidden @ ref.embed_tokens.weight.T)[mask.bool()]
        torch.testing.assert_close(model(ids, mask).logits[mask.bool()], expected, atol=ATOL, rtol=0)


PER_EXPERT = 2880 * 2 * 2880 + 2 * 2880 + 2880 * 2880 + 2880  # gate and up with biases, down with its bias


@pytest.mark.parametrize("name,layers,experts,openai_active", [
    ("gpt-oss-120b", 36, 128, "5.13"),
    ("gpt-oss-20b", 24, 32, "3.61"),
])
def test_the_full_presets_have_the_parameters_of_hf_gpt_oss(name, layers, experts, openai_active, capsys):
    config = tf.GptOssConfig(num_hidden_layers=layers, num_local_experts=experts)
    with torch.device("meta"):
        hf = sum(p.numel() for p in tf.GptOssForCausalLM(config).parameters())
    if name == "gpt-oss-120b":
        assert hf == 116_829_156_672  # the figure
    assert main(["describe", f"preset:{name}", "--vocab-size", str(config.vocab_size)]) == 0
    out = capsys.readouterr().out
    # active: the total less, in each layer, the experts a token skips (all but 4)
    active = hf - layers * (experts - 4) * PER_EXPERT
    assert f"parameters  {hf:,} total, {active:,} active per token" in out, out
    # OpenAI's model card leaves the embedding table (201088 x 2880) out of the active count
    assert f"{(active - 201088 * 2880) / 1e9:.2f}" == openai_active
    assert f"decoder layers {', '.join(str(i) for i in range(0, layers, 2))}: " \
           "attention=sliding_window(window=128)" in out


def test_quantized_experts_and_attention_without_biases_are_refused_in_one_line(ref):
    state = {k: v for k, v in ref.state_dict().items() if "experts.gate_up_proj" not in k}
    state["model.layers.0.mlp.experts.gate_up_proj_blocks"] = torch.zeros(8, 64, 2, 16, dtype=torch.uint8)
    from arch_zoo.interop.hf import convert

    with pytest.raises(CheckpointError, match="gpt_oss config: MXFP4-quantized experts") as info:
        convert(ref.config.to_dict(), state)
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="gpt_oss config: attention_bias: false") as info:
        from_hf(tf.GptOssForCausalLM(hf_config(attention_bias=False)))
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="rope_type 'linear'") as info:
        from_hf(tf.GptOssForCausalLM(hf_config(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                "rope_theta": 10000.0})))
    assert "\n" not in str(info.value)
