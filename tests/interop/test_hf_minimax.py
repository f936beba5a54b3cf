"""MiniMax: the minimax-tiny preset (odd widths; lightning and softmax attention layers, MoE, residual
factors away from 1) computes what Hugging Face's MiniMaxForCausalLM computes (its pure-torch path;
random weights, nothing downloaded) with left and right padding; cached greedy decoding gives the tokens
of HF `generate`; both round trips are bit for bit; a saved export loads in transformers; what the
family cannot hold is refused in one line."""
import pytest
import torch

from arch_zoo.interop import convert, from_hf
from arch_zoo.interop.checkpoint import CheckpointError
from arch_zoo.interop.export_hf import native_config, sized
from arch_zoo.interop.function_view import function_view
from tests.interop.family_checks import preset_model, rebuilt, seeded
from tests.interop.references import VOCAB, assert_generates_as_hf, assert_round_trip, assert_same_logits, \
    randomize, tiny

tf = pytest.importorskip("transformers")


def hf_config(**changes):
    m = tiny("minimax")
    moe, placement = m.ffn.options, m.norm_placement.options
    config = tf.MiniMaxConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "head_dim": m.head_dim,
        "intermediate_size": m.d_ff, "max_position_embeddings": m.max_seq_len, "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": m.position.options.base},
        "num_local_experts": moe.n_experts, "num_experts_per_tok": moe.top_k, "block_size": 4,
        **{f"{k}_alpha_factor": placement.alpha for k in ("full_attn", "linear_attn", "mlp")},
        **{f"{k}_beta_factor": placement.beta for k in ("full_attn", "linear_attn", "mlp")},
        "pad_token_id": 0, "bos_token_id": None, "eos_token_id": None, **changes})
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"  # the grouped-GEMM default needs 16-byte rows on CPU
    return config


def reference(seed=0, **changes):
    return seeded(tf.MiniMaxForCausalLM, hf_config(**changes), seed)


@pytest.fixture(scope="module")
def ref():
    return reference()


@pytest.fixture(scope="module")
def model(ref):
    return preset_model(ref, "minimax", ["Attention", "LightningAttention"] * 2)


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, model, side):
    assert_same_logits(ref, model, side)


def test_the_derived_config_computes_the_preset(ref):
    assert function_view(from_hf(ref).config) == function_view(sized(from_hf(ref, config="preset:minimax-tiny")))


def test_lightning_only_and_another_layout_import_too():
    for types in (["linear_attention"] * 3, ["linear_attention", "linear_attention", "full_attention"]):
        hf = reference(seed=2, num_hidden_layers=3, layer_types=types)
        assert_same_logits(hf, from_hf(hf), "left")


def test_the_residual_factors_act(ref):
    """With the factors at 1 (transformers' defaults) the logits differ: the preset's 1.7 and 0.9 are read."""
    plain = from_hf(reference(**{f"{k}_{f}_factor": 1.0 for k in ("full_attn", "linear_attn", "mlp")
                                 for f in ("alpha", "beta")}))
    ids = torch.randint(1, VOCAB, (1, 6))
    with torch.no_grad():
        assert (plain(ids).logits - from_hf(ref)(ids).logits).abs().max() > 1e-2


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref, model):
    assert_generates_as_hf(ref, model)


def test_to_hf_of_from_hf_gives_the_tensors_back(ref):
    assert_round_trip(ref)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    ours = randomize(from_hf(ref, config="preset:minimax-tiny"), seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, ours, "layer_types")
    assert function_view(again.config) == function_view(sized(ours))
    hf.config._experts_implementation = "eager"
    assert_same_logits(hf.eval(), ours, "right")


@pytest.mark.parametrize("change,match", [
    ({"hidden_act": "gelu"}, "minimax config: hidden_act 'gelu'"),
    ({"mlp_alpha_factor": 2.0}, "minimax config: full_attn_alpha_factor / linear_attn_alpha_factor / "
                                "mlp_alpha_factor differing"),
])
def test_what_has_no_equivalent_is_refused_in_one_line(change, match):
    with pytest.raises(CheckpointError, match=match) as info:
        convert({**hf_config().to_dict(), **change}, {})
    assert "\n" not in str(info.value)


def test_an_export_minimax_cannot_hold_names_the_family_and_the_field():
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config

    m = {**to_dict(tiny("minimax")), "vocab_size": VOCAB}
    reason = native_config(model_config({**m, "norm_placement": "pre"})).reason
    assert "fits MiniMax only" in reason and "norm_placement pre" in reason, reason
    own_heads = [{"pattern": [{}, {"mixer": {"name": "lightning", "chunk_size": 4, "head_dim": 4}}]}]
    reason = native_config(model_config({**m, "layers": own_heads})).reason
    assert "lightning n_heads / head_dim other than the model's" in reason, reason


def test_a_saved_export_loads_in_transformers_with_its_decay_buffers_recomputed(tmp_path):
    """The directory holds no decay buffers; transformers computes them on load: the same logits.
    Widths of 16-byte rows (32, experts of 16): transformers' default experts path runs on CPU."""
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop import save_hf
    from arch_zoo.models import build_model
    from tests.interop.references import ATOL, padded_batch, positions

    cfg = model_config({**to_dict(tiny("minimax")), "d_model": 32, "d_ff": 16, "vocab_size": VOCAB})
    torch.manual_seed(4)
    ours = randomize(build_model(cfg, VOCAB), seed=4).eval()
    assert save_hf(ours, None, tmp_path / "hf") == "written as MiniMaxForCausalLM"
    hf = tf.MiniMaxForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids, mask = padded_batch([7, 12, 3], 12, "left", low=3)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits[mask.bool()]
        torch.testing.assert_close(ours(ids, mask).logits[mask.bool()], theirs, atol=ATOL, rtol=0)
