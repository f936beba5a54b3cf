"""The gemma2 preset computes what Hugging Face's Gemma2ForCausalLM computes: same logits to 1e-4 in
fp32 on left- and right-padded batches, and cached greedy decoding picks the tokens HF ``generate``
picks. README (Configs, "Gemma 2: the `gemma2` preset ..."): "equal to the Hugging Face model's
logits to 1e-4 with left and right padding, and cached greedy decoding picks the tokens HF
`generate` picks"; "any `layer_types` list converts; a sliding layer's decoding cache keeps only
its window".

The reference alternates local and global layers (HF's default ``layer_types``: sliding on even
layers) with a window (8) shorter than the batches (12) and than prompt + decoded tokens (18), so
both the per-layer window and its trimmed decoding cache are exercised. References are random."""
import dataclasses

import pytest
import torch

from arch_zoo.interop import CheckpointError, convert, from_hf, load_hf_checkpoint, model_config_from_hf
from tests.interop.references import VOCAB, padded_batch, randomize, tiny
from tests.interop.test_hf_parity import ATOL, both, greedy_cached

tf = pytest.importorskip("transformers")

SLIDING = {"name": "sliding_window", "window": 8}


def reference(**changes):
    """A random Gemma2ForCausalLM at gemma2-tiny's size. Settings the 2B model shares with
    transformers' defaults (eps, rope base, alternation, tied head) are left to those defaults;
    query_pre_attn_scalar (16, not head_dim 32) and the small soft-caps make their slips visible."""
    m = tiny("gemma2")
    sizes = dict(hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                 num_key_value_heads=m.n_kv_heads, head_dim=m.head_dim, intermediate_size=m.d_ff,
                 max_position_embeddings=m.max_seq_len, sliding_window=8, query_pre_attn_scalar=16,
                 attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
    cfg = tf.Gemma2Config(vocab_size=VOCAB, **{**sizes, **changes})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(tf.Gemma2ForCausalLM(cfg)).eval()


def architecture(cfg):
    """The config without what HF states and the preset leaves to the task: vocab_size, and
    attention_dropout 0.0 (the preset's default is the residual dropout, 0.0)."""
    return dataclasses.replace(cfg, vocab_size=None, attention_dropout=None)


@pytest.fixture(scope="module")
def ref():
    hf = reference()
    assert hf.config.layer_types == ["sliding_attention", "full_attention"]
    return hf


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    model = from_hf(ref, config="preset:gemma2-tiny")
    assert model.config == tiny("gemma2")
    a, b = both("gemma2", ref, model, side)
    assert a.abs().max() > 0.1
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_derived_config_is_the_preset(ref):
    """Converting without a preset derives the architecture the preset names, alternation included."""
    derived = model_config_from_hf(ref)
    assert derived.layers == [{"pattern": [{"attention": SLIDING}, {}]}]
    assert architecture(derived) == tiny("gemma2")
    assert [type(layer.mixer.sublayer.pattern).__name__ for layer in from_hf(ref).decoder.layers] == \
        ["SlidingWindowAttention", "GlobalAttention"]


WRONG = {  # each Gemma 2 feature taken away: the parity check must notice
    "all global": {"layers": None},
    "all local": {"attention": SLIDING, "layers": None},
    "alternation shifted": {"layers": [{"pattern": [{}, {"attention": SLIDING}]}]},
    "no attention soft-cap": {"attn_logit_softcap": None},
    "no final soft-cap": {"final_logit_softcap": None},
    "scale from head_dim": {"attention_scale": 32 ** -0.5},
    "no embedding scale": {"scale_embeddings": False},
}


@pytest.mark.parametrize("slip", sorted(WRONG))
def test_parity_check_notices_a_missing_feature(ref, slip):
    a, b = both("gemma2", ref, from_hf(ref, config="preset:gemma2-tiny", changes=WRONG[slip]), "left")
    assert (a - b).abs().max() > ATOL


def test_cached_greedy_decoding_equals_hf_generate(ref):
    """HF keeps a sliding-window cache for the local layer; arch_zoo trims that layer's cache to the
    window and keeps the global layer's whole."""
    model = from_hf(ref, config="preset:gemma2-tiny")
    ids, mask = padded_batch([10, 6, 3], 10, "left")
    steps = 8
    out = ref.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                       do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = out[:, -steps:]
    assert len(set(expected.flatten().tolist())) > 1
    assert torch.equal(greedy_cached(model, ids, mask, steps), expected)
    cache = model.new_cache()
    with torch.no_grad():
        model(out, torch.cat((mask, torch.ones_like(expected)), dim=1), cache=cache)
    assert [len(layer.mixer) for layer in cache.layers] == [7, 10 + steps]  # window - 1 keys; all of them


def test_any_layer_types_map_to_per_layer_attention():
    """A layer_types list other than the default alternation maps layer by layer, as the shortest
    repeating pattern; one type on every layer needs no per-layer entry."""
    for types, pattern in [(["full_attention", "sliding_attention"] * 2, [{}, {"attention": SLIDING}]),
                           (["full_attention", "sliding_attention", "sliding_attention"],
                            [{}, {"attention": SLIDING}, {"attention": SLIDING}])]:
        hf = reference(num_hidden_layers=len(types), layer_types=types)
        model = from_hf(hf)
        assert model.config.layers == [{"pattern": pattern}]
        torch.testing.assert_close(*reversed(both("gemma2", hf, model, "left")), atol=ATOL, rtol=0)
    local = model_config_from_hf(reference(layer_types=["sliding_attention"] * 2))
    assert (local.attention.options.window, local.layers) == (8, None)


def test_checkpoint_directory_keeps_the_alternation(ref, tmp_path):
    """config.json's layer_types survive save_pretrained; load_hf_checkpoint reads them without transformers."""
    ref.save_pretrained(tmp_path)
    loaded = load_hf_checkpoint(tmp_path)
    assert architecture(loaded.config) == tiny("gemma2")
    torch.testing.assert_close(*reversed(both("gemma2", ref, loaded, "right")), atol=ATOL, rtol=0)


@pytest.mark.parametrize("changes,message", [
    ({"layer_types": ["sliding_attention", "chunked_attention"]}, "layer_types"),
    ({"layer_types": ["full_attention"]}, "expected 2"),
    ({"sliding_window": None}, "without a sliding_window"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
])
def test_configs_without_an_exact_equivalent_are_refused(ref, changes, message):
    with pytest.raises(CheckpointError, match=message):
        convert({**ref.config.to_dict(), **changes}, ref.state_dict())


@pytest.fixture(scope="module")
def earlier_run(ref, tmp_path_factory):
    """A Gemma 2 run as the earlier version's import wrote it (``save_as_run`` of its model): config.yaml
    says ``norm: rmsnorm`` and each norm's gain holds Gemma's w as 1 + w, summed in float32."""
    from arch_zoo.coerce import to_dict
    from arch_zoo.config.loading import model_config
    from arch_zoo.data.tokenizers import WordTokenizer
    from arch_zoo.interop.as_run import save_as_run
    from arch_zoo.models import build_model

    new = from_hf(ref)
    old = build_model(model_config({**to_dict(new.config), "norm": {"name": "rmsnorm", "eps": 1e-6}}), VOCAB)
    state = {k: 1.0 + v.float() if k.endswith("norm.weight") else v for k, v in new.state_dict().items()}
    old.load_state_dict(state)
    tokenizer = WordTokenizer(symbols=[f"w{i}" for i in range(VOCAB - 6)])  # 6 special tokens + 91 words
    run = save_as_run(old.eval(), tokenizer, tmp_path_factory.mktemp("earlier") / "gemma2_run")
    assert "name: rmsnorm" in (run / "config.yaml").read_text()
    return run


def test_a_run_the_earlier_import_wrote_still_loads_and_generates(ref, earlier_run, capsys):
    from arch_zoo.cli import main
    from arch_zoo.training.restore import restore

    cfg, model, tokenizer = restore(earlier_run)
    assert cfg.model.norm.name == "rmsnorm"
    torch.testing.assert_close(*reversed(both("gemma2", ref, model, "left")), atol=ATOL, rtol=0)
    prompt = "w3 w17 w40 w8"
    ids = tokenizer.encode(prompt)
    expected = ref.generate(input_ids=torch.tensor([ids]), max_new_tokens=6, min_new_tokens=6, do_sample=False,
                            pad_token_id=0, eos_token_id=None)[0, len(ids):].tolist()
    capsys.readouterr()
    assert main(["generate", str(earlier_run), "--prompt", prompt, "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert len(set(expected)) > 1 and tokenizer.eos_id not in expected
    assert out == tokenizer.decode(expected) + "\n"  # the continuation


def test_a_run_the_earlier_import_wrote_exports_as_gemma2(ref, earlier_run, tmp_path, capsys):
    """Its plain gains g leave as Gemma's w = g - 1, exact in float32 for g >= 0.5, so Gemma 2's 1 + w is
    g again: the directory computes what the run computes, and w is HF's to float32 rounding of 1 + w."""
    from safetensors.torch import load_file

    from arch_zoo.cli import main
    from arch_zoo.training.restore import restore

    assert main(["export", str(earlier_run), "--to", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert ("written as Gemma2ForCausalLM (its RMSNorm gains g written as w = g - 1, which Gemma 2 applies as "
            "1 + w)") in capsys.readouterr().out
    ours, theirs = load_file(tmp_path / "hf" / "model.safetensors"), ref.state_dict()
    assert set(ours) == set(theirs) - {"lm_head.weight"}  # tied: saved once
    norms = [k for k in theirs if k.endswith("norm.weight")]
    assert len(norms) == 4 * ref.config.num_hidden_layers + 1
    for key in ours:
        if key in norms:
            gain = 1.0 + theirs[key]  # what the earlier import stored
            assert torch.equal(1 + ours[key], gain) and torch.equal(ours[key], gain - 1), key
            assert torch.allclose(ours[key], theirs[key], atol=1e-6, rtol=0), key
        else:
            assert torch.equal(ours[key], theirs[key]), key
    back = tf.Gemma2ForCausalLM.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    _, model, _ = restore(earlier_run)
    for side in ("left", "right"):
        torch.testing.assert_close(*reversed(both("gemma2", back, model, side)), atol=ATOL, rtol=0)
