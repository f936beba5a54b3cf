"""xLSTM (xLSTM-7B's mLSTM blocks): the xlstm-tiny preset computes what Hugging Face's xLSTMForCausalLM
computes (its pure-torch recurrent kernel; nothing downloaded, random weights), right-padded and, row by
row, left-padded; cached greedy decoding gives the tokens of HF `generate`; both round trips are bit for
bit; an export loads with transformers alone in a fresh process; `arch-zoo import` reads a saved
checkpoint; the full preset (xLSTM-7B) has the parameter count HF's class gives.

transformers' forward takes no attention mask (pads run through its recurrence like tokens), so a
left-padded row is compared with HF's run on that row alone. Its cache sizes the states by q/k and v
widths rounded up to 64 while its layers use the unrounded ones, so HF runs the odd-sized tiny config
without a cache only; generation and the fresh-process export use widths that are multiples of 64
(xLSTM-7B's are)."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.interop import from_hf, model_config_from_hf, to_hf
from tests.interop.family_checks import assert_left_padded_rows_equal_hf_alone
from tests.interop.references import (ATOL, VOCAB, assert_round_trip, causal_lm_logits, greedy_cached,
                                      meta_parameters, padded_batch, randomize, tiny)

tf = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
LENGTHS = [7, 12, 3]
CACHEABLE = dict(hidden_size=128, num_heads=4, use_cache=True)  # q/k 64 and v 128 wide: HF's cache fits


def hf_config(**changes):
    m = tiny("xlstm")
    return tf.xLSTMConfig(**{
        "vocab_size": VOCAB, "hidden_size": m.d_model, "num_hidden_layers": m.n_layers, "num_heads": m.n_heads,
        "gate_soft_cap": m.mixer.options.gate_soft_cap, "output_logit_soft_cap": m.final_logit_softcap,
        "ffn_proj_factor": 1.3, "ffn_round_up_to_multiple_of": 7, "max_position_embeddings": m.max_seq_len,
        "mode": "inference", "chunk_size": 64, "use_cache": False, "pad_token_id": 0, **changes})


def reference(seed=0, **changes):
    torch.manual_seed(seed)
    return randomize(tf.xLSTMForCausalLM(hf_config(**changes)), seed).eval()


@pytest.fixture(scope="module")
def ref():
    return reference()


def assert_same_logits(ref, model):
    theirs, ours = causal_lm_logits(ref, model, "right", position_ids=False)
    assert theirs.abs().max() > 0.1
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def test_the_tiny_config_is_the_one_the_brief_names(ref):
    layer = ref.backbone.blocks[0]
    assert (layer.mlstm_layer.qk_dim, layer.mlstm_layer.v_dim, layer.ffn.up_proj_dim) == (15, 30, 42)
    assert ref.config.qk_dim != layer.mlstm_layer.qk_dim  # HF's cache would size it 64: the reason for no cache


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:xlstm-tiny")
    assert model.config == tiny("xlstm")
    assert {type(layer.mixer.sublayer).__name__ for layer in model.decoder.layers} == {"MLSTM"}
    if side == "right":
        assert_same_logits(ref, model)
        return
    assert_left_padded_rows_equal_hf_alone(ref, model, LENGTHS)


def test_derived_config_equals_the_preset(ref):
    model = from_hf(ref)
    assert model.config == model_config_from_hf(ref)
    assert model.config == dataclasses.replace(tiny("xlstm"), vocab_size=VOCAB)


def test_the_parity_check_notices_the_gate_cap_left_out(ref):
    """The gates' soft cap (3 here) changes the logits past the tolerance: without it the comparison fails."""
    from arch_zoo.models import build_model

    cfg = tiny("xlstm")
    uncapped = dataclasses.replace(cfg.mixer, options=dataclasses.replace(cfg.mixer.options, gate_soft_cap=None))
    model = build_model(dataclasses.replace(cfg, mixer=uncapped, vocab_size=VOCAB), VOCAB)
    model.load_state_dict(from_hf(ref).state_dict())
    a, b = causal_lm_logits(ref, model.eval(), "right", position_ids=False)
    assert (a - b).abs().max() > 1e-3


def test_chunks_of_three_positions_give_hf_recurrent_kernels_logits(ref):
    """arch_zoo's chunk size is its own (the function does not change): 3-position chunks, several per row,
    still give the logits of HF's recurrent kernel."""
    from arch_zoo.models import build_model

    cfg = tiny("xlstm")
    chunked = dataclasses.replace(cfg.mixer, options=dataclasses.replace(cfg.mixer.options, chunk_size=3))
    model = build_model(dataclasses.replace(cfg, mixer=chunked, vocab_size=VOCAB), VOCAB)
    model.load_state_dict(from_hf(ref).state_dict())
    assert model.decoder.layers[0].mixer.sublayer.chunk == 3
    assert_same_logits(ref, model.eval())


def test_cached_greedy_decoding_gives_the_tokens_of_hf_generate():
    """Left-padded prompts decoded together through arch_zoo's cache; each prompt alone through HF's."""
    hf = reference(seed=2, **CACHEABLE)
    ids, mask = padded_batch([5, 8, 2], 8, "left")
    steps = 8
    ours = greedy_cached(from_hf(hf), ids, mask, steps)
    expected = torch.cat([hf.generate(input_ids=ids[row:row + 1, 8 - n:], do_sample=False, max_new_tokens=steps,
                                      min_new_tokens=steps, pad_token_id=0)[:, -steps:]
                          for row, n in enumerate([5, 8, 2])])
    assert len(set(expected.flatten().tolist())) > 1
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("changes", [{}, {"num_heads": 5, "qk_dim_factor": 0.5, "v_dim_factor": 2.0,
                                         "gate_soft_cap": 15.0, "output_logit_soft_cap": 30.0,
                                         "ffn_proj_factor": 2.667, "ffn_round_up_to_multiple_of": 64, "eps": 1e-3}])
def test_to_hf_of_from_hf_gives_the_tensors_back(ref, changes):
    """The tiny config, and one with 5 heads of other widths, xLSTM-7B's soft caps and feed-forward
    rounding, and another eps."""
    hf = reference(seed=1, **changes) if changes else ref
    if changes:
        assert_same_logits(hf, from_hf(hf))
    assert_round_trip(hf)


def test_from_hf_of_to_hf_rebuilds_the_model_bit_for_bit(ref):
    from arch_zoo.interop.export_hf import native_config, sized

    model = randomize(from_hf(ref, config="preset:xlstm-tiny"), seed=3)  # its own tensors, not HF's
    assert native_config(sized(model)).reason == "written as xLSTMForCausalLM"
    hf = to_hf(model)
    assert type(hf) is tf.xLSTMForCausalLM and hf.config.num_heads == 3
    again = from_hf(hf)
    assert again.config == sized(model)
    ours, back = model.state_dict(), again.state_dict()
    assert set(ours) == set(back) and all(torch.equal(back[k], v) for k, v in ours.items())
    hf.config.use_cache = False
    assert_same_logits(hf.eval(), model)


@pytest.mark.parametrize("changes,why", [
    ({"bias": True}, "bias true has no xLSTM equivalent"),
    ({"final_norm": False}, "final_norm"),
    ({"ffn": "geglu"}, "ffn"),
    ({"final_logit_softcap": None}, "final_logit_softcap null has no xLSTM equivalent"),
    ({"mixer": {"name": "mlstm", "gate_soft_cap": None}}, "gate_soft_cap null has no xLSTM equivalent"),
    ({"layers": [{"pattern": [{"mixer": {"name": "mlstm", "gate_soft_cap": 2.0}}, {}]}]},
     "mlstm options differing between layers"),
])
def test_what_xlstm_cannot_hold_is_named_in_one_line(changes, why):
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.interop.export_hf import native_config

    cfg = model_config({**to_dict(tiny("xlstm")), "vocab_size": VOCAB, **changes})
    reason = native_config(cfg).reason
    assert "fits xLSTM only" in reason and why in reason and "\n" not in reason, reason


def test_an_export_loads_in_transformers_alone_with_the_same_logits_and_greedy_tokens(tmp_path):
    from arch_zoo.generation import generate
    from arch_zoo.interop import save_hf

    model = randomize(from_hf(reference(**CACHEABLE)), seed=4)
    assert save_hf(model, None, tmp_path / "hf") == "written as xLSTMForCausalLM"
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["xLSTMForCausalLM"]
    right, whole = padded_batch(LENGTHS, 12, "right"), padded_batch([12, 12], 12, "left")  # HF runs left pads
    job = {"dir": str(tmp_path / "hf"), "auto_class": "AutoModelForCausalLM", "remote": False, "right": right,
           "left": whole, "prompts": [[5, 9, 14, 3], [7, 2]], "new_tokens": 6}
    torch.save([job], tmp_path / "job.pt")
    subprocess.run([sys.executable, "-m", "tests.interop.hf_load", str(tmp_path / "job.pt"), str(tmp_path / "out.pt")],
                   cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
                                              "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")})
    got = torch.load(tmp_path / "out.pt")[job["dir"]]
    for side in ("right", "left"):
        ids, mask = job[side]
        with torch.no_grad():
            torch.testing.assert_close(got[side][mask.bool()], model(ids, mask).logits[mask.bool()], atol=ATOL, rtol=0)
    for prompt, theirs in zip(job["prompts"], got["greedy"]):
        assert theirs[len(prompt):] == generate(model, [prompt], max_new_tokens=6).to_lists()[0][0]


def test_arch_zoo_import_reads_a_saved_checkpoint(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from arch_zoo import restore
    from tests.evaluation.helpers import bos_tokenizer

    tok = bos_tokenizer()
    ref = reference(vocab_size=tok.get_vocab_size())
    ref.save_pretrained(tmp_path / "hf")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    cfg, model, _ = restore(tmp_path / "run")
    assert cfg.model.mixer == tiny("xlstm").mixer
    assert_same_logits(ref, model.eval())


def test_the_full_preset_has_the_parameters_of_hf_xlstm_7b(capsys):
    config = tf.xLSTMConfig()  # its defaults are NX-AI/xLSTM-7b's published config
    hf = meta_parameters(tf.xLSTMForCausalLM, config)
    assert hf == 6_865_424_896  # xLSTM-7B: the paper's "7B"
    assert main(["describe", "preset:xlstm-7b", "--vocab-size", str(config.vocab_size)]) == 0
    out = capsys.readouterr().out
    assert f"parameters  {hf:,} total" in out, out


@pytest.mark.parametrize("key,value,what", [("weight_mode", "fused", "weight_mode 'fused'"),
                                            ("use_bias", True, "use_bias true")])
def test_what_arch_zoo_cannot_read_is_refused_in_one_line(ref, key, value, what):
    """(transformers' own init of a fused model fails, so the key is set on a built one: the config decides.)"""
    from arch_zoo.interop.checkpoint import CheckpointError

    hf = reference()
    setattr(hf.config, key, value)
    with pytest.raises(CheckpointError, match=f"xlstm config: {what}") as info:
        from_hf(hf)
    assert "\n" not in str(info.value)
