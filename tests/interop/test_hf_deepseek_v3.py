"""DeepSeek-V3: the deepseek-v3-tiny preset computes what Hugging Face's DeepseekV3ForCausalLM computes (its
pure-torch path; nothing downloaded, random weights), with left and right padding; cached greedy decoding
gives the tokens of HF `generate`; the full preset has the parameter count HF's class gives for its default
config and the active count per token by hand."""
import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.coerce import to_dict
from arch_zoo.config.loading import model_config
from arch_zoo.interop import from_hf, model_config_from_hf
from arch_zoo.interop.checkpoint import CheckpointError
from arch_zoo.interop.export_hf import native_config
from arch_zoo.interop.families import deepseek_v3
from arch_zoo.interop.mapping import NotExpressible
from tests.interop.family_checks import with_router_bias
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, meta_parameters, randomize, tiny)

tf = pytest.importorskip("transformers")


def hf_config(**changes):
    m = tiny("deepseek-v3")
    mla, moe = m.mixer.options, m.ffn.options
    sizes = dict(
        vocab_size=VOCAB, hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
        num_key_value_heads=m.n_heads, intermediate_size=m.d_ff, max_position_embeddings=m.max_seq_len,
        q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank, qk_nope_head_dim=mla.qk_nope_head_dim,
        qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim, n_routed_experts=moe.n_experts,
        num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.d_ff, n_group=moe.n_group,
        topk_group=moe.topk_group, first_k_dense_replace=1, pad_token_id=0)
    config = tf.DeepseekV3Config(**{**sizes, **changes})
    config._attn_implementation = "eager"
    return config


def reference(**changes):
    torch.manual_seed(0)
    return with_router_bias(randomize(tf.DeepseekV3ForCausalLM(hf_config(**changes))).eval(), 1)


@pytest.fixture(scope="module")
def ref():
    return reference()


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:deepseek-v3-tiny")
    assert model.config == tiny("deepseek-v3")
    assert_same_logits(ref, model, side)


def test_derived_config_is_the_preset(ref):
    """The importer reads every field the preset sets (the router's training rule included), so the
    model it derives is the preset at the reference's size."""
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    preset = tiny("deepseek-v3")
    assert model.config.mixer == preset.mixer and model.config.ffn == preset.ffn
    assert model.config.layers == preset.layers
    assert_same_logits(ref, model, "left")


def test_the_selection_bias_and_the_routed_scale_are_read():
    """The parity check notices a router that ignores the correction bias or HF's scaling factor."""
    ref = reference(routed_scaling_factor=1.7)
    model = from_hf(ref)
    assert model.config.ffn.options.routed_scaling_factor == 1.7
    assert_same_logits(ref, model, "right")
    for layer in model.decoder.layers[1:]:
        layer.ffn.sublayer.score_bias.zero_()
    theirs, ours = causal_lm_logits(ref, model, "right")
    assert (theirs - ours).abs().max() > 1e-3


@pytest.mark.parametrize("changes", [
    # full-rank queries (V2-Lite), rotate-half pairs; HF's rotary ignores a partial_rotary_factor
    {"q_lora_rank": None, "rope_interleave": False,
     "rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}},
    {"first_k_dense_replace": 0, "n_group": 1, "topk_group": 1, "norm_topk_prob": False, "n_shared_experts": 2},
])
def test_other_settings_of_the_family_import_too(changes):
    ref = reference(**changes)
    model = from_hf(ref)
    assert_same_logits(ref, model, "left")
    dense = [type(layer.ffn.sublayer).__name__ for layer in model.decoder.layers].count("SwiGLU")
    assert dense == ref.config.first_k_dense_replace


def test_the_latent_norms_keep_hf_eps_whatever_rms_norm_eps_says():
    """Issue: the importer gave q_a_layernorm and kv_a_layernorm the model's rms_norm_eps, where
    DeepseekV3Attention builds them at DeepseekV3RMSNorm's default 1e-6; 1e-2 makes the difference show.
    The export writes them back only as DeepSeek-V3's (a latent eps of 1e-2 has no field there)."""
    ref = reference(rms_norm_eps=1e-2)
    model = from_hf(ref)
    assert model.config.norm.options.eps == 1e-2 and model.config.mixer.options.norm_eps == 1e-6
    assert_same_logits(ref, model, "right")
    theirs, before = causal_lm_logits(ref, from_hf(ref, changes={"mixer": {"norm_eps": None}}), "right")
    assert (theirs - before).abs().max() > 1e-3  # the model's eps in the latents: the comparison tells them apart
    assert_round_trip(ref)
    other = model_config({**to_dict(model.config), "mixer": {**to_dict(model.config.mixer), "norm_eps": None}})
    assert native_config(other).hf_config is None
    with pytest.raises(NotExpressible, match=r"mla.norm_eps 0.01 \(DeepSeek-V3's latent norms keep 1e-06\)"):
        deepseek_v3.write(other, to_dict(other))


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    assert_generates_as_hf(ref, from_hf(ref, config="preset:deepseek-v3-tiny"))


def test_absorbed_decoding_gives_the_tokens_of_hf_generate(ref):
    """MLA's absorbed form (the up-projections folded into the query and output) decodes HF's tokens."""
    assert_generates_as_hf(ref, from_hf(ref, config="preset:deepseek-v3-tiny", changes={"mixer": {"absorb": True}}))


def test_the_published_per_expert_layout_loads_too(ref):
    """Published checkpoints store each expert as its own gate/up/down projections."""
    from arch_zoo.interop.hf import convert

    state = dict(ref.state_dict())
    d_ff = ref.config.moe_intermediate_size
    for i in range(1, ref.config.num_hidden_layers):
        h = f"model.layers.{i}.mlp.experts."
        gate_up, down = state.pop(h + "gate_up_proj"), state.pop(h + "down_proj")
        for e in range(ref.config.n_routed_experts):
            state[f"{h}{e}.gate_proj.weight"], state[f"{h}{e}.up_proj.weight"] = gate_up[e, :d_ff], gate_up[e, d_ff:]
            state[f"{h}{e}.down_proj.weight"] = down[e]
    model = convert(ref.config.to_dict(), state, config="preset:deepseek-v3-tiny")
    assert_same_logits(ref, model, "right")


def test_the_full_preset_has_the_parameters_of_hf_deepseek_v3_default(capsys):
    config = tf.DeepseekV3Config()
    hf = meta_parameters(tf.DeepseekV3ForCausalLM, config)
    assert hf == 671_026_404_352  # the figure: DeepSeek-V3
    assert main(["describe", "preset:deepseek-v3", "--vocab-size", str(config.vocab_size)]) == 0
    out = capsys.readouterr().out
    # active: the total less, in each of the 58 MoE layers, the 248 experts (3 x 7168 x 2048 each) a token skips
    active = hf - 58 * (256 - 8) * 3 * 7168 * 2048
    assert active // 10 ** 9 == 37  # the published 37B
    assert f"parameters  {hf:,} total, {active:,} active per token" in out, out
    assert "decoder layers 0-2: ffn=swiglu" in out and "decoder layers 3-60: as the model" in out
    assert "q.k scaled by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) = 1/sqrt(192)" in out


@pytest.mark.parametrize("change,match", [
    ({"rope_parameters": {"rope_type": "yarn", "factor": 40.0, "rope_theta": 10000.0,
                          "original_max_position_embeddings": 4096}}, "deepseek_v3 config: rope_type 'yarn'"),
    ({"attention_bias": True}, "deepseek_v3 config: attention_bias"),
    ({"hidden_act": "tanh"}, "deepseek_v3 config: activation 'tanh'"),
    ({"n_shared_experts": 0}, "deepseek_v3 config: n_shared_experts 0"),
])
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # HF's zero-width shared MLP
def test_what_has_no_equivalent_is_refused_in_one_line(change, match):
    torch.manual_seed(0)
    with pytest.raises(CheckpointError, match=match) as info:
        from_hf(tf.DeepseekV3ForCausalLM(hf_config(**change)))
    assert "\n" not in str(info.value)


def test_to_hf_of_from_hf_gives_the_reference_tensors_back(ref):
    """The selection bias (a buffer) and the router included; the export's fresh-process logits and
    tokens are checked with the other families' (tests/interop/test_export_hf.py)."""
    assert_round_trip(ref)


def test_an_mla_model_of_defaults_exports_as_deepseek_v3_and_a_scale_it_lacks_does_not():
    """MLA's null widths (from head_dim) export as the numbers they stand for; a dense model is
    first_k_dense_replace = n_layers. An explicit attention_scale of 1/sqrt(head_dim) is another
    function than MLA's 1/sqrt(nope + rope), which DeepSeek-V3 has no field for."""
    base = {"kind": "decoder", "d_model": 32, "n_heads": 4, "n_layers": 2, "norm": "rmsnorm", "ffn": "swiglu",
            "bias": False, "position": "rope", "mixer": "mla", "vocab_size": VOCAB}
    choice = native_config(model_config(base))
    assert choice.reason == "written as DeepseekV3ForCausalLM"
    hf = choice.hf_config
    assert (hf["kv_lora_rank"], hf["qk_nope_head_dim"], hf["qk_rope_head_dim"], hf["v_head_dim"]) == (32, 8, 4, 8)
    assert hf["q_lora_rank"] is None and hf["first_k_dense_replace"] == 2
    scaled = native_config(model_config({**base, "attention_scale": 8 ** -0.5}))
    assert scaled.hf_config is None and "attention_scale" in scaled.reason, scaled.reason
