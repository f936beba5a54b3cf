"""RecurrentGemma (Griffin): the recurrentgemma-tiny preset computes what Hugging Face's
RecurrentGemmaForCausalLM computes (its pure-torch path; nothing downloaded, random weights), right-padded
and, row by row, left-padded; cached greedy decoding gives the tokens of HF `generate`; both round trips
are bit for bit; an export loads with transformers alone in a fresh process; `arch-zoo import` reads a
saved checkpoint; the full preset (RecurrentGemma-2B) has the parameter count HF's class gives.

transformers' recurrent block convolves the pads' inputs into a left-padded row's first real positions
(it masks nothing), so its left-padded logits depend on the padding; arch_zoo's do not: a left-padded
row is compared with HF's run on that row alone."""
import dataclasses
import json

import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.family_checks import (assert_export_loads_alone, assert_import_reads_a_saved_checkpoint,
                                         assert_left_padded_rows_equal_hf_alone, assert_refused_in_one_line, described,
                                         preset_model, rebuilt, seeded)
from tests.interop.references import (VOCAB, assert_round_trip, assert_same_logits, causal_lm_logits,
                                      greedy_cached, padded_batch, randomize, tiny)

tf = pytest.importorskip("transformers")
LENGTHS = [7, 12, 3]
# google/recurrentgemma-2b's published config (the rest are RecurrentGemmaConfig's defaults, which are
# that model's: 26 layers, hidden 2560, 10 heads, lru_width 2560, window 2048, vocab 256000)
RECURRENTGEMMA_2B = dict(intermediate_size=15360, num_key_value_heads=1)


def hf_config(**changes):
    m = tiny("recurrentgemma")
    config = tf.RecurrentGemmaConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv_heads, "intermediate_size": 2 * m.d_ff,
        "lru_width": 27, "conv1d_width": 3, "attention_window_size": m.attention.options.window,
        "logits_soft_cap": m.final_logit_softcap, "max_position_embeddings": m.max_seq_len, **changes})
    config._attn_implementation = "eager"
    return config


def reference(seed=0, **changes):
    return seeded(tf.RecurrentGemmaForCausalLM, hf_config(**changes), seed)


@pytest.fixture(scope="module")
def ref():
    return reference()


def test_the_tiny_config_is_the_one_the_brief_names(ref):
    assert ref.config.layers_block_type == ["linear_attention", "linear_attention", "sliding_attention",
                                            "linear_attention"]
    assert (ref.config.hidden_size, ref.config.lru_width, ref.config.head_dim) == (24, 27, 8)
    assert float(ref.model.normalizer) != 24 ** 0.5  # bfloat16's 4.906: the rounding shows


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = preset_model(ref, "recurrentgemma", ["RGLRU", "RGLRU", "Attention", "RGLRU"])
    assert model.decoder.layers[2].mixer.sublayer.qkv.bias is None  # HF's q, k, v have none; o_proj has one
    if side == "right":
        assert_same_logits(ref, model, side)
    else:
        assert_left_padded_rows_equal_hf_alone(ref, model, LENGTHS)


def test_derived_config_equals_the_preset(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert model.config == dataclasses.replace(tiny("recurrentgemma"), vocab_size=VOCAB)


@pytest.mark.parametrize("what", ["embedding_multiplier_dtype", "fraction"])
def test_the_parity_check_notices_a_detail_left_out(ref, what):
    """The bfloat16 embedding multiplier (4.906, not 4.899) and the half-rotated heads change the
    logits past the tolerance: without them the comparison fails."""
    from arch_zoo.models import build_model

    cfg = tiny("recurrentgemma")
    if what == "fraction":
        changed = dataclasses.replace(cfg.position, options=dataclasses.replace(cfg.position.options, fraction=1.0))
        cfg = dataclasses.replace(cfg, position=changed)
    else:
        exact = dataclasses.replace(cfg.parametrization.options, embedding_multiplier_dtype=None)
        cfg = dataclasses.replace(cfg, parametrization=dataclasses.replace(cfg.parametrization, options=exact))
    model = build_model(dataclasses.replace(cfg, vocab_size=VOCAB), VOCAB)
    model.load_state_dict(from_hf(ref).state_dict())
    a, b = causal_lm_logits(ref, model.eval(), "right")
    assert (a - b).abs().max() > 1e-3


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate(ref):
    """Left-padded prompts decoded together through arch_zoo's cache; each prompt alone through HF's."""
    ids, mask = padded_batch([5, 8, 2], 8, "left")
    steps = 8
    ours = greedy_cached(from_hf(ref, config="preset:recurrentgemma-tiny"), ids, mask, steps)
    expected = torch.cat([ref.generate(input_ids=ids[row:row + 1, 8 - n:], do_sample=False, max_new_tokens=steps,
                                       min_new_tokens=steps, pad_token_id=0)[:, -steps:]
                          for row, n in enumerate([5, 8, 2])])
    assert len(set(expected.flatten().tolist())) > 1
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("changes", [{}, {"tie_word_embeddings": False, "attention_bias": True, "lru_width": None,
                                         "block_types": ["attention", "recurrent"], "hidden_activation": "gelu"}])
def test_to_hf_of_from_hf_gives_the_tensors_back(ref, changes):
    """The tiny config, and one with an untied head, q/k/v biases, lru_width left to hidden_size, another
    block pattern and exact GELU."""
    hf = reference(seed=1, **changes) if changes else ref
    if changes:
        assert_same_logits(hf, from_hf(hf), "right")
    assert_round_trip(hf)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    from arch_zoo.interop.export_hf import sized

    model = randomize(from_hf(ref, config="preset:recurrentgemma-tiny"), seed=3)  # its own tensors, not HF's
    hf, again = rebuilt(ref, model, "layers_block_type")
    assert again.config == sized(model)
    assert_same_logits(hf.eval(), model, "right")


@pytest.mark.parametrize("changes,why", [
    ({"attention": "global"}, "attention global has no RecurrentGemma equivalent"),
    ({"final_logit_softcap": None}, "final_logit_softcap null has no RecurrentGemma equivalent"),
    ({"parametrization": "standard"}, "embedding_multiplier 4.898979485566356 has no RecurrentGemma equivalent"),
    ({"layers": [{"pattern": [{"mixer": {"name": "rg_lru", "width": 27, "conv_size": 3}},
                              {"mixer": {"name": "rg_lru", "width": 27, "conv_size": 4}}, {}]}]},
     "rg_lru options differing between layers"),
])
def test_what_recurrent_gemma_cannot_hold_is_named_in_one_line(changes, why):
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    cfg = model_config({**to_dict(tiny("recurrentgemma")), "vocab_size": VOCAB, **changes})
    reason = native_config(cfg).reason
    assert "fits RecurrentGemma only" in reason and why in reason and "\n" not in reason, reason


def test_an_export_loads_in_transformers_alone_with_the_same_logits_and_greedy_tokens(tmp_path, ref):
    from arch_zoo.interop import save_hf

    model = randomize(from_hf(ref), seed=4)
    assert save_hf(model, None, tmp_path / "hf") == "written as RecurrentGemmaForCausalLM"
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["RecurrentGemmaForCausalLM"]
    right, whole = padded_batch(LENGTHS, 12, "right"), padded_batch([12, 12], 12, "left")  # HF convolves left pads
    job = {"dir": str(tmp_path / "hf"), "auto_class": "AutoModelForCausalLM", "remote": False, "right": right,
           "left": whole, "prompts": [[5, 9, 14, 3], [7, 2]], "new_tokens": 6}
    assert_export_loads_alone(tmp_path, model, job)


def test_arch_zoo_import_reads_a_saved_checkpoint(tmp_path):
    assert_import_reads_a_saved_checkpoint(tmp_path, reference, "recurrentgemma")


def test_the_full_preset_has_the_parameters_of_hf_recurrentgemma_2b(capsys):
    config = tf.RecurrentGemmaConfig(**RECURRENTGEMMA_2B)
    hf, out = described(capsys, tf.RecurrentGemmaForCausalLM, config, "preset:recurrentgemma-2b")
    assert hf == 2_682_862_080  # RecurrentGemma-2B: the report's "2.7B"
    assert f"parameters  {hf:,} total" in out, out
    assert "decoder layers 2, 5, 8, 11, 14, 17, 20, 23: as the model" in out
    assert "held at 50.5 by the parametrization" in out


def test_a_rope_scaling_is_refused_in_one_line():
    hf = reference()
    hf.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    assert_refused_in_one_line(hf, "recurrent_gemma config: rope_type 'linear' has no arch_zoo")
