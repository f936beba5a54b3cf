"""Kimi Linear: the kimi-linear-tiny preset (odd widths) computes what Hugging Face's KimiLinearForCausalLM
computes (its pure-torch path; nothing downloaded, random weights) with left and right padding; cached
greedy decoding gives the tokens of HF `generate`; both round trips are bit for bit; an export loads in
transformers in a fresh process; `arch-zoo import` reads a checkpoint in the published layout; the full
preset (Kimi-Linear-48B-A3B) has the parameter count HF's class gives for the published config."""
import json

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.interop import convert, from_hf
from arch_zoo.interop.checkpoint import CheckpointError
from arch_zoo.interop.export_hf import native_config, sized
from arch_zoo.interop.function_view import first_difference, function_view
from tests.interop.family_checks import assert_export_loads_alone, described, imported, rebuilt, with_router_bias
from tests.interop.references import (VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits,
                                      causal_lm_logits, padded_batch, randomize, tiny)

tf = pytest.importorskip("transformers")
# transformers' default experts path (grouped GEMM) fails on CPU at widths whose rows are not 16-byte
# multiples ("strides should be multiple of 16 bytes"); its eager loop is the pure-torch reference
EAGER = "eager"
# moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json in its own spelling (KimiLinearConfig's defaults
# for the rest); the layers of linear_attn_config count from 1
PUBLISHED = dict(vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024,
                 num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32, kv_lora_rank=512,
                 q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_experts=256,
                 num_experts_per_token=8, num_shared_experts=1, routed_scaling_factor=2.446, first_k_dense_replace=1,
                 linear_attn_config={"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "num_heads": 32, "head_dim": 128,
                                     "kda_layers": [i for i in range(1, 27) if i % 4], "short_conv_kernel_size": 4})


def hf_config(**changes):
    m = tiny("kimi-linear")
    kda, mla, moe = m.mixer.options, m.layers[0]["pattern"][3]["mixer"], m.ffn.options
    config = tf.KimiLinearConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_heads, "intermediate_size": m.d_ff,
        "max_position_embeddings": m.max_seq_len, **{k: mla[k] for k in ("q_lora_rank", "kv_lora_rank",
                                                                          "qk_nope_head_dim", "qk_rope_head_dim",
                                                                          "v_head_dim")},
        "linear_num_heads": kda.n_heads, "linear_head_dim": kda.head_dim, "linear_conv_kernel_dim": kda.conv_size,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"], "num_local_experts": moe.n_experts,
        "num_experts_per_tok": moe.top_k, "moe_intermediate_size": moe.d_ff, "n_group": moe.n_group,
        "topk_group": moe.topk_group, "first_k_dense_replace": 1, "pad_token_id": 0, "bos_token_id": None,
        "eos_token_id": None, **changes})
    config._attn_implementation = "eager"
    config._experts_implementation = EAGER
    return config


def reference(seed=0, **changes):
    torch.manual_seed(seed)
    return with_router_bias(randomize(tf.KimiLinearForCausalLM(hf_config(**changes)), seed).eval(), seed + 1)


@pytest.fixture(scope="module")
def ref():
    return reference()


@pytest.fixture(scope="module")
def model(ref):
    return from_hf(ref, config="preset:kimi-linear-tiny")


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, model, side):
    assert model.config == tiny("kimi-linear")
    assert [type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers] == [
        "KimiDeltaAttention"] * 3 + ["LatentAttention"]
    assert_same_logits(ref, model, side)


def test_the_derived_config_computes_the_preset(ref):
    derived = from_hf(ref)
    assert function_view(derived.config) == function_view(sized(from_hf(ref, config="preset:kimi-linear-tiny")))
    assert derived.decoder.layers[3].mixer.sublayer.kv_norm.eps == 1e-6  # HF's latent norms, not rms_norm_eps


@pytest.mark.parametrize("changes", [
    # full-rank queries (as published), MLA layers not in a repeating pattern, every layer MoE, one group,
    # weights not renormalised, two shared experts; latent norms at 1e-6 beside a layer norm eps far from it
    {"q_lora_rank": None, "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention",
                                          "linear_attention"], "num_hidden_layers": 5, "first_k_dense_replace": 0,
     "n_group": 1, "topk_group": 1, "moe_renormalize": False, "n_shared_experts": 2, "rms_norm_eps": 0.3},
    {"mlp_layer_types": ["sparse", "dense", "dense", "sparse"], "routed_scaling_factor": 1.7},
])
def test_other_settings_of_the_family_import_too(changes):
    hf = reference(seed=2, **changes)
    model = from_hf(hf)
    assert_same_logits(hf, model, "left")
    dense = [type(layer.ffn.sublayer).__name__ == "SwiGLU" for layer in model.decoder.layers]
    assert dense == [t == "dense" for t in hf.config.mlp_layer_types]


def test_the_selection_bias_acts(ref):
    model = from_hf(ref)
    for layer in model.decoder.layers[1:]:
        layer.ffn.sublayer.score_bias.zero_()
    theirs, ours = causal_lm_logits(ref, model, "right")
    assert (theirs - ours).abs().max() > 1e-3


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref, model):
    assert_generates_as_hf(ref, model)


def test_to_hf_of_from_hf_gives_the_tensors_back(ref):
    assert_round_trip(ref)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref, model):
    ours = randomize(from_hf(ref, config="preset:kimi-linear-tiny"), seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, ours, "layer_types")
    assert function_view(again.config) == function_view(sized(ours))
    hf.config._experts_implementation = EAGER
    assert_same_logits(hf.eval(), ours, "right")


def test_an_export_loads_in_transformers_alone_with_the_same_logits_and_tokens(tmp_path):
    """Widths of 16-byte rows (44, experts of 12): transformers loads it with its default experts path."""
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop import save_hf
    from arch_zoo.models import build_model

    m = to_dict(tiny("kimi-linear"))
    cfg = model_config({**m, "d_model": 44, "ffn": {**m["ffn"], "d_ff": 12}})
    torch.manual_seed(4)
    ours = randomize(build_model(cfg, VOCAB), seed=4).eval()
    assert save_hf(ours, None, tmp_path / "hf") == "written as KimiLinearForCausalLM"
    job = {"dir": str(tmp_path / "hf"), "auto_class": "AutoModelForCausalLM", "remote": False,
           "prompts": [[5, 9, 14, 3], [7]], "new_tokens": 6,
           **{side: padded_batch([7, 12, 3], 12, side, low=3) for side in ("right", "left")}}
    assert_export_loads_alone(tmp_path, ours, job)


def _published_layout(hf):
    """``hf``'s tensors as the published checkpoints store them (transformers converts them on load)."""
    state, e = {}, hf.config.num_local_experts
    for name, value in hf.state_dict().items():
        name = name.replace(".forget_gate.", ".")
        if any(x in name for x in (".mlp.experts.", ".mlp.gate.", ".mlp.shared_experts.")):  # MoE layers only
            name = name.replace(".mlp.", ".block_sparse_moe.")
        if name.endswith("self_attn.conv1d.weight"):
            for x, part in zip("qkv", value.chunk(3)):
                state[name.replace("conv1d", f"{x}_conv1d")] = part
        elif name.endswith("experts.gate_up_proj"):
            for i in range(e):
                gate, up = value[i].chunk(2)
                state[name.replace("gate_up_proj", f"{i}.w1.weight")] = gate
                state[name.replace("gate_up_proj", f"{i}.w3.weight")] = up
        elif name.endswith("experts.down_proj"):
            for i in range(e):
                state[name.replace("down_proj", f"{i}.w2.weight")] = value[i]
        else:
            state[name] = value
    layers = hf.config.layer_types
    config = {k: v for k, v in hf.config.to_dict().items() if k not in ("layer_types", "mlp_layer_types")}
    config["linear_attn_config"] = {
        "full_attn_layers": [i + 1 for i, t in enumerate(layers) if t == "full_attention"],
        "kda_layers": [i + 1 for i, t in enumerate(layers) if t == "linear_attention"],
        "num_heads": config.pop("linear_num_heads"), "head_dim": config.pop("linear_head_dim"),
        "short_conv_kernel_size": config.pop("linear_conv_kernel_dim")}
    return config, state


def test_arch_zoo_import_reads_a_checkpoint_in_the_published_layout(tmp_path):
    from safetensors.torch import save_file

    from tests.evaluation.helpers import bos_tokenizer

    tok = bos_tokenizer()
    hf = reference(seed=5, vocab_size=tok.get_vocab_size(), layer_types=["linear_attention", "full_attention"] * 2)
    config, state = _published_layout(hf)
    assert "model.layers.2.self_attn.q_conv1d.weight" in state and "model.layers.2.self_attn.A_log" in state
    (tmp_path / "hf").mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "hf" / "model.safetensors"))
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "architectures": ["KimiLinearForCausalLM"]}))
    _, model = imported(tmp_path / "hf", tok)
    assert [type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers] == [
        "KimiDeltaAttention", "LatentAttention"] * 2
    assert_same_logits(hf, model, "right")


def test_the_full_preset_is_what_the_published_config_imports_as():
    import dataclasses

    from arch_zoo.config.loading import model_config
    from arch_zoo.experiment import load
    from arch_zoo.interop.checkpoint import WeightMap
    from arch_zoo.interop.families.kimi_linear import FAMILY

    preset = function_view(dataclasses.replace(load("preset:kimi-linear-48b-a3b").model, vocab_size=163840))
    for published in (PUBLISHED, tf.KimiLinearConfig(**PUBLISHED).to_dict()):  # as written, as transformers reads it
        imported = function_view(model_config(FAMILY.config(dict(published), WeightMap({}))))
        assert first_difference(imported, preset) is None and imported == preset


def test_an_odd_rotated_width_is_refused_only_where_something_rotates(capsys):
    assert main(["describe", "preset:kimi-linear-tiny", "--vocab-size", "97"]) == 0
    capsys.readouterr()
    assert main(["describe", "preset:kimi-linear-tiny", "model.position=rope", "model.head_dim=8"]) == 2
    err = capsys.readouterr().err
    assert "model.layers[0].mixer.qk_rope_head_dim: must be even (RoPE rotates pairs), got 5" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err


def test_the_full_preset_has_the_parameters_of_hf_kimi_linear_48b_a3b(capsys):
    config = tf.KimiLinearConfig(**PUBLISHED)
    assert config.layer_types.count("full_attention") == 7 and config.num_local_experts == 256
    hf, out = described(capsys, tf.KimiLinearForCausalLM, config, "preset:kimi-linear-48b-a3b")
    assert hf == 49_122_675_072
    # active: the total less, in each of the 26 MoE layers, the 248 experts (3 x 2304 x 1024 each) a token skips
    active = hf - 26 * (256 - 8) * 3 * 2304 * 1024
    assert f"parameters  {hf:,} total, {active:,} active per token" in out, out
    assert "decoder layers 3, 7, 11, 15, 19, 23, 26: mixer=mla(" in out and "decoder layer 0: ffn=swiglu" in out


@pytest.mark.parametrize("change,match", [
    ({"hidden_act": "gelu"}, "kimi_linear config: hidden_act 'gelu'"),
    ({"attention_bias": True}, "kimi_linear config: attention_bias"),
    ({"num_key_value_heads": 1}, "kimi_linear config: num_key_value_heads 1 differing from num_attention_heads 3"),
    ({"mla_use_nope": False}, "kimi_linear config: mla_use_nope False"),
    ({"moe_router_activation_func": "softmax"}, "kimi_linear config: moe_router_activation_func 'softmax'"),
    ({"num_shared_experts": 0}, "kimi_linear config: num_shared_experts 0"),
    ({"linear_attn_config": {"full_attn_layers": [9], "kda_layers": [1, 2, 3]}, "layer_types": None},
     "kimi_linear config: linear_attn_config.full_attn_layers layer 9"),
])
def test_what_has_no_equivalent_is_refused_in_one_line(change, match):
    config = {**hf_config().to_dict(), **change}
    with pytest.raises(CheckpointError, match=match) as info:
        convert(config, {})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("change,why", [
    ({"position": "alibi"}, "position alibi has no Kimi Linear equivalent"),
    ({"tie_embeddings": True}, "tie_embeddings True has no Kimi Linear equivalent"),
])
def test_an_export_kimi_linear_cannot_hold_names_the_family_and_the_field(change, why):
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config

    reason = native_config(model_config({**to_dict(tiny("kimi-linear")), "vocab_size": VOCAB, **change})).reason
    assert "fits Kimi Linear only" in reason and why in reason, reason


def test_mla_in_every_layer_exports_as_deepseek_v3_with_rope_and_as_kimi_linear_without_positions():
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config

    m = {**to_dict(tiny("deepseek-v3")), "vocab_size": VOCAB}
    assert native_config(model_config(m)).reason == "written as DeepseekV3ForCausalLM"
    assert native_config(model_config({**m, "position": "none"})).reason == "written as KimiLinearForCausalLM"
