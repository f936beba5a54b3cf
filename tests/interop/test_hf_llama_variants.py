"""Qwen3, Mistral and Mixtral presets compute what Hugging Face's models compute: same logits to 1e-4
in fp32 on left- and right-padded batches, and cached greedy decoding picks the tokens HF ``generate``
picks. README (Configs, Llama's descendants): "equal to the Hugging Face model's logits to 1e-4 with left
and right padding, and cached greedy decoding picks the tokens HF `generate` picks".

Sliding window and padding: HF's mask and arch_zoo's both count the window in sequence slots
(``i - window < j <= i`` over cache positions, pad slots included). Left padding puts every pad
before the real tokens, so a window that reaches a pad slot already holds all the real tokens before
it: a left-padded row's window holds the same real tokens as the row alone, and its logits equal the
row's alone (test_a_left_padded_rows_window_holds_the_real_tokens_it_would_alone). The batches are
longer than mistral-tiny's window (8), and decoding runs past it."""
import pytest
import torch

from arch_zoo.interop import from_hf, model_config_from_hf
from tests.interop.references import VOCAB, padded_batch, positions, randomize, tiny
from tests.interop.test_hf_parity import ATOL, both, greedy_cached

tf = pytest.importorskip("transformers")

NAMES = ["qwen3", "mistral", "mixtral"]


def reference(name: str, **changes):
    """A random HF model of the published architecture at the -tiny preset's size. Published settings
    that differ from transformers' defaults are written here, not read from the preset."""
    m = tiny(name)
    sizes = dict(hidden_size=m.d_model, num_hidden_layers=m.n_layers, num_attention_heads=m.n_heads,
                 num_key_value_heads=m.n_kv_heads, intermediate_size=m.d_ff, max_position_embeddings=m.max_seq_len)
    if name == "qwen3":  # Qwen3 8B's config.json
        config, cls = tf.Qwen3Config, tf.Qwen3ForCausalLM
        sizes.update(head_dim=m.head_dim, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    elif name == "mistral":  # Mistral 7B v0.1's
        config, cls = tf.MistralConfig, tf.MistralForCausalLM
        sizes.update(sliding_window=m.attention.options.window, rms_norm_eps=1e-5)
    elif name == "mixtral":  # Mixtral 8x7B v0.1's
        config, cls = tf.MixtralConfig, tf.MixtralForCausalLM
        sizes.update(num_local_experts=m.ffn.options.n_experts, num_experts_per_tok=m.ffn.options.top_k,
                     rope_parameters={"rope_type": "default", "rope_theta": 1e6}, router_aux_loss_coef=0.02)
    else:
        raise KeyError(name)
    cfg = config(vocab_size=VOCAB, **{**sizes, **changes})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(cls(cfg)).eval()


@pytest.fixture(scope="module", params=NAMES)
def ref(request):
    return request.param, reference(request.param)


@pytest.mark.parametrize("side", ["right", "left"])
def test_preset_logits_equal_the_reference(ref, side):
    name, hf = ref
    model = from_hf(hf, config=f"preset:{name}-tiny")
    a, b = both(name, hf, model, side)
    assert a.abs().max() > 0.1
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_derived_config_is_the_preset(ref):
    """Converting without a preset derives the same architecture the preset names."""
    name, hf = ref
    derived, preset = model_config_from_hf(hf), tiny(name)
    for key in ("attention", "qk_norm", "ffn", "position", "norm", "dim_per_head", "kv_heads", "tie_embeddings"):
        assert getattr(derived, key) == getattr(preset, key), key
    torch.testing.assert_close(*reversed(both(name, hf, from_hf(hf), "left")), atol=ATOL, rtol=0)


WRONG = {  # the feature each family adds, taken away or changed: the parity check must notice
    "qwen3": {"qk_norm": {"name": "rmsnorm", "eps": 1.0}},  # a norm that barely normalises
    "mistral": {"attention": "global"},
    "mixtral": {"ffn": {"name": "moe", "n_experts": 8, "top_k": 1}},
}


def test_parity_check_notices_a_missing_feature(ref):
    name, hf = ref
    a, b = both(name, hf, from_hf(hf, config=f"preset:{name}-tiny", changes=WRONG[name]), "left")
    assert (a - b).abs().max() > ATOL


@pytest.mark.parametrize("name", NAMES)
def test_cached_greedy_decoding_equals_hf_generate(name):
    hf = reference(name)
    model = from_hf(hf, config=f"preset:{name}-tiny")
    ids, mask = padded_batch([10, 6, 3], 10, "left")  # longer than mistral-tiny's window; decoding goes further
    steps = 8
    out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                      do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = out[:, -steps:]
    assert len(set(expected.flatten().tolist())) > 1
    assert torch.equal(greedy_cached(model, ids, mask, steps), expected)


def test_mixtral_published_checkpoint_layout():
    """Published Mixtral checkpoints store each expert apart (block_sparse_moe.experts.N.w1/w3/w2);
    transformers 5 fuses them on load. Both layouts convert to the same model."""
    from arch_zoo.interop import convert

    hf = reference("mixtral")
    ff, published = hf.config.intermediate_size, {}
    for k, v in hf.state_dict().items():
        if ".mlp.experts.gate_up_proj" in k:
            base = k.replace(".mlp.experts.gate_up_proj", ".block_sparse_moe.experts.")
            for e in range(v.shape[0]):
                published[f"{base}{e}.w1.weight"], published[f"{base}{e}.w3.weight"] = v[e, :ff], v[e, ff:]
        elif ".mlp.experts.down_proj" in k:
            base = k.replace(".mlp.experts.down_proj", ".block_sparse_moe.experts.")
            for e in range(v.shape[0]):
                published[f"{base}{e}.w2.weight"] = v[e]
        else:
            published[k.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = v
    assert not any(".mlp." in k for k in published)
    model = convert(hf.config.to_dict(), published, config="preset:mixtral-tiny")
    torch.testing.assert_close(*reversed(both("mixtral", hf, model, "right")), atol=ATOL, rtol=0)


def test_qwen3_sliding_window_on_every_layer_or_on_the_last_ones_converts():
    """use_sliding_window windows the layers from max_window_layers on: all of them is model.attention,
    the last ones a model.layers range (README: "windowing some of them converts to per-layer attention")."""
    hf = reference("qwen3", use_sliding_window=True, sliding_window=4, max_window_layers=0)
    model = from_hf(hf)
    assert (model.config.attention.options.window, model.config.layers) == (4, None)
    torch.testing.assert_close(*reversed(both("qwen3", hf, model, "left")), atol=ATOL, rtol=0)
    mixed = reference("qwen3", use_sliding_window=True, sliding_window=4, max_window_layers=1)
    model = from_hf(mixed)
    assert model.config.attention.name == "global"
    assert model.config.layers == [{"range": "1:2", "attention": {"name": "sliding_window", "window": 4}}]
    a, b = both("qwen3", mixed, model, "left")
    torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
    assert (a - both("qwen3", mixed, from_hf(mixed, changes={"layers": None}), "left")[1]).abs().max() > ATOL


def test_mixtral_checkpoint_directory_round_trip(tmp_path):
    """What ``save_pretrained`` writes (transformers 5 writes the published per-expert layout) loads
    with ``load_hf_checkpoint``, safetensors alone."""
    from safetensors import safe_open

    from arch_zoo.interop import load_hf_checkpoint

    hf = reference("mixtral")
    hf.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert "model.layers.0.block_sparse_moe.experts.0.w1.weight" in f.keys()
    loaded = load_hf_checkpoint(tmp_path)
    assert loaded.config == from_hf(hf).config
    torch.testing.assert_close(*reversed(both("mixtral", hf, loaded, "right")), atol=ATOL, rtol=0)


def test_imported_mixtral_aux_loss_is_hf_s():
    """An imported Mixtral trains with HF's aux loss: router_aux_loss_coef x load_balancing_loss_func over
    all layers' router logits, padding left out (``aux_loss_layers: pooled``); the per-layer mean would
    be another number."""
    from arch_zoo.components.moe import router_aux_loss

    hf = reference("mixtral", num_hidden_layers=3)
    model = from_hf(hf)
    assert model.config.ffn.options.aux_loss_layers == "pooled"
    ids, mask = padded_batch([10, 6, 3], 10, "left")
    mean = from_hf(hf, changes={"ffn": {**model.config.ffn.to_dict(), "aux_loss_layers": "mean"}})
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, output_router_logits=True)
        got = [(m(ids, mask), router_aux_loss(m, {"decoder": mask}))[1] for m in (model, mean)]
    torch.testing.assert_close(got[0], hf.config.router_aux_loss_coef * out.aux_loss)
    assert abs(got[1] / got[0] - 1) > 1e-3, got


def test_a_left_padded_rows_window_holds_the_real_tokens_it_would_alone():
    """Pads count as window slots, but they come first: 12 real tokens (past mistral-tiny's window of 8)
    after 5 pads give each query the keys they give it alone, in HF's Mistral and here (equal to float
    rounding)."""
    hf = reference("mistral")
    model = from_hf(hf, config="preset:mistral-tiny")
    ids, _ = padded_batch([12], 12, "left")
    padded, mask = torch.cat((torch.zeros(1, 5, dtype=torch.long), ids), 1), (torch.arange(17) >= 5).long()[None]
    assert model.config.attention.options.window < 12
    with torch.no_grad():
        for run in (lambda i, m: hf(input_ids=i, attention_mask=m, position_ids=positions(m)).logits,
                    lambda i, m: model(i, m).logits):
            alone = run(ids, torch.ones_like(ids))
            torch.testing.assert_close(run(padded, mask)[:, 5:], alone, atol=1e-5, rtol=0)
        glob = from_hf(hf, config="preset:mistral-tiny", changes={"attention": "global"})(ids).logits
        assert (glob - alone).abs().max() > 1e-3  # the window binds here
