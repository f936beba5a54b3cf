"""Attention variants: the sliding window (and its bounded cache), QK-norm (its references: test_qk_norm.py)
and logit soft-capping.

Each is checked against a hand-written reference, then through the model-level invariants (no
causal leak, padding changes no real token, cached decoding equals the full forward, the sdpa and
explicit kernels agree)."""
import math

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.attention import KERNELS, AttentionShape, KVCache, MultiHeadAttention
from arch_zoo.components.attention_patterns import ATTENTION
from arch_zoo.components.masks import self_attention_mask
from arch_zoo.components.norms import NORMS
from arch_zoo.components.positions import POSITIONS, PositionContext
from arch_zoo.models import build_model
from tests.conftest import tiny

D, H, HD = 16, 2, 8
SHAPE = AttentionShape(D, H, H, HD, True, 0.0)


def _mha(kernel="explicit", pattern="global", qk_norm=None, softcap=None, shape=SHAPE, qk_norm_scope="head", **opts):
    spec = ATTENTION.parse({"name": pattern, **opts} if opts else pattern, "attention")
    norm = (lambda dim: NORMS.build(NORMS.parse(qk_norm, "qk_norm"), dim)) if qk_norm else None
    return MultiHeadAttention(shape, KERNELS.build(KERNELS.parse(kernel, "k"), None, softcap),
                              pattern=ATTENTION.build(spec), qk_norm=norm, qk_norm_scope=qk_norm_scope)


def _rms(t, gain, eps=1e-6):
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gain


def _reference(attn, x, allowed, softcap=None, rotate=None, qk_rms_over=None):
    """Attention written out for one layer, one query at a time: no mask tensor, no kernel.
    ``qk_rms_over``: an RMS QK-norm with attn's gains, over "head" or the whole "projection"."""
    q, k, v = attn.qkv(x).split(H * HD, dim=-1)
    if qk_rms_over == "projection":
        q, k = _rms(q, attn.q_norm.weight), _rms(k, attn.k_norm.weight)
    q, k, v = (t.unflatten(-1, (H, HD)).transpose(1, 2) for t in (q, k, v))
    if qk_rms_over == "head":
        q, k = _rms(q, attn.q_norm.weight), _rms(k, attn.k_norm.weight)
    elif qk_rms_over is None and attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if rotate is not None:
        q, k = rotate(q, k)
    out = torch.zeros_like(q)
    for i in range(x.shape[1]):
        keys = [j for j in range(x.shape[1]) if allowed(i, j)]
        s = (q[:, :, i:i + 1] @ k[:, :, keys].transpose(-2, -1)) / math.sqrt(HD)
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        out[:, :, i] = (s.softmax(-1) @ v[:, :, keys]).squeeze(2)
    return attn.out(out.transpose(1, 2).flatten(2))


@pytest.mark.parametrize("window", [1, 3, 20])
@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_sliding_window_matches_a_hand_written_reference(window, kernel):
    """README model keys: `sliding_window` — query i sees keys j with i - window < j <= i (Mistral)."""
    torch.manual_seed(0)
    attn = _mha(kernel, "sliding_window", window=window)
    x = torch.randn(2, 9, D)
    out = attn(x, self_attention_mask(None, 9, 0, True))
    expected = _reference(attn, x, lambda i, j: i - window < j <= i)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_sliding_window_in_an_encoder_is_the_symmetric_band():
    torch.manual_seed(0)
    attn = _mha("sdpa", "sliding_window", window=2)
    x = torch.randn(1, 7, D)
    out = attn(x, self_attention_mask(None, 7, 0, False))
    torch.testing.assert_close(out, _reference(attn, x, lambda i, j: abs(i - j) < 2), atol=1e-5, rtol=1e-5)


def _rope(length):
    rope = POSITIONS.build(POSITIONS.parse("rope", "p"), PositionContext(D, H, HD, 64, True))
    pos = torch.arange(length).unsqueeze(0)
    return rope.rotator(pos, pos)


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_attention_logit_softcap_matches_the_reference(kernel):
    """README model keys: `attn_logit_softcap` — scores become cap * tanh(scores / cap) (Gemma 2);
    the sdpa kernel computes the same function (it runs the explicit math for such layers)."""
    torch.manual_seed(0)
    attn = _mha(kernel, softcap=0.5)  # small: the cap changes the output a lot
    x = torch.randn(2, 6, D) * 3
    out = attn(x, self_attention_mask(None, 6, 0, True))
    torch.testing.assert_close(out, _reference(attn, x, lambda i, j: j <= i, softcap=0.5), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, _reference(attn, x, lambda i, j: j <= i), atol=1e-3)


def _masks(length):
    pad = torch.ones(2, length, dtype=torch.long)
    pad[0, :3] = 0  # left padding
    pad[1, -2:] = 0  # right padding
    return {"causal": self_attention_mask(None, length, 0, True),
            "padding+causal": self_attention_mask(pad, length, 0, True),
            "padding": self_attention_mask(pad, length, 0, False),
            "bias": self_attention_mask(pad, length, 0, True).with_bias(torch.randn(1, H, length, length),
                                                                        length, length)}


@pytest.mark.parametrize("mask_name", ["causal", "padding+causal", "padding", "bias"])
@pytest.mark.parametrize("variant", [dict(softcap=5.0), dict(pattern="sliding_window", window=3),
                                     dict(qk_norm="rmsnorm", softcap=2.0, pattern="sliding_window", window=4)],
                         ids=["softcap", "window", "all"])
def test_sdpa_and_explicit_kernels_agree_on_every_variant(variant, mask_name):
    """README, Tests: "`sdpa` and `explicit` agree to 1e-5", with soft-capping and a sliding window."""
    torch.manual_seed(0)
    a, b = _mha("sdpa", **variant), _mha("explicit", **variant)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 10, D)
    mask = _masks(10)[mask_name]
    out = a(x, mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, b(x, mask), atol=1e-5, rtol=1e-5)


VARIANTS = {
    "window": dict(attention={"name": "sliding_window", "window": 3}),
    "qk_norm": dict(qk_norm="layernorm"),
    "softcaps": dict(attn_logit_softcap=1.0, final_logit_softcap=2.0),
    "moe": dict(ffn={"name": "moe", "n_experts": 4, "top_k": 2}),
    "all": dict(attention={"name": "sliding_window", "window": 4}, qk_norm="rmsnorm", attn_logit_softcap=3.0,
                final_logit_softcap=5.0, ffn={"name": "moe", "n_experts": 3, "top_k": 1, "expert": "gelu"}),
}
KINDS = ["decoder", "encoder", "encoder_decoder"]


def _model(name, kind="decoder", position="rope", kernel="sdpa"):
    torch.manual_seed(0)
    cfg = tiny(kind=kind, n_layers=2, position=position, attention_kernel=kernel, **VARIANTS[name])
    if kind == "encoder":
        cfg["head"] = {"name": "token_classification", "n_classes": 5}
    return build_model(cfg, 30).eval()


def _forward(model, ids, mask=None):
    if model.config.kind == "encoder_decoder":
        return model(ids, ids, attention_mask=mask, decoder_attention_mask=mask).logits
    return model(ids, attention_mask=mask).logits


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_no_variant_lets_a_query_see_the_future(name):
    """README, Tests: "causal masks never leak the future", for every attention and FFN variant."""
    model = _model(name, position="alibi")
    ids = torch.randint(1, 30, (2, 12))
    changed = ids.clone()
    changed[:, 8:] = torch.randint(1, 30, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(_forward(model, ids)[:, :8], _forward(model, changed)[:, :8])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_padding_changes_no_real_tokens_output_in_any_variant(name, kind):
    """README, Tests: "padding never changes real tokens' outputs", left and right, every variant."""
    model = _model(name, kind)
    ids = torch.randint(1, 30, (1, 9))
    with torch.no_grad():
        alone = _forward(model, ids)
        # left-padded decoder inputs are not a seq2seq layout: there, right padding covers both sides
        for side in ("right",) if kind == "encoder_decoder" else ("left", "right"):
            pad = torch.zeros(1, 4, dtype=torch.long)
            padded = torch.cat((pad, ids), 1) if side == "left" else torch.cat((ids, pad), 1)
            mask = (torch.arange(13) >= 4 if side == "left" else torch.arange(13) < 9).long().unsqueeze(0)
            out = _forward(model, padded, mask)
            real = out[:, 4:] if side == "left" else out[:, :9]
            torch.testing.assert_close(real, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_sdpa_and_explicit_kernels_agree_on_whole_models(name):
    """README, Tests: "`sdpa` and `explicit` agree to 1e-5", on models with each variant."""
    a, b = _model(name, kernel="sdpa"), _model(name, kernel="explicit")
    ids = torch.randint(1, 30, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(_forward(a, ids), _forward(b, ids), atol=1e-5, rtol=1e-5)


def test_final_logit_softcap_bounds_the_logits_as_gemma_2_does():
    """README model keys: `final_logit_softcap` — logits become cap * tanh(logits / cap)."""
    capped = _model("softcaps")
    torch.manual_seed(0)
    plain = build_model(tiny(n_layers=2, position="rope", attn_logit_softcap=1.0), 30).eval()
    plain.load_state_dict(capped.state_dict())
    ids = torch.randint(1, 30, (2, 7))
    with torch.no_grad():
        raw, out = plain(ids).logits, capped(ids).logits
    torch.testing.assert_close(out, 2.0 * torch.tanh(raw / 2.0))
    assert out.abs().max() < 2.0


@pytest.mark.parametrize("kind,window,position", [("decoder", 1, "rope"), ("decoder", 4, "rope"),
                                                   ("decoder", 4, "alibi"), ("decoder", 4, "t5_bias"),
                                                   ("encoder_decoder", 1, "rope"), ("encoder_decoder", 4, "rope")])
def test_sliding_window_cache_stays_bounded_and_decodes_as_the_full_forward(kind, window, position):
    """README model keys: `sliding_window` — the decoding cache keeps only the window, so its memory
    stops growing; decoding far beyond the window still equals the full forward, with left-padded
    prompts, and with score biases (ALiBi, T5) computed over the full history."""
    torch.manual_seed(0)
    cfg = tiny(kind=kind, n_layers=2, position=position, attention={"name": "sliding_window", "window": window},
               n_kv_heads=1, max_seq_len=64)
    model = build_model(cfg, 30).eval()
    ids = torch.randint(1, 30, (2, 30))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, :3] = 0  # the second prompt is 3 tokens shorter, left-padded
    prompt = 5
    src = torch.randint(1, 30, (2, 6))
    with torch.no_grad():
        if kind == "encoder_decoder":
            memory = model.encode(src)
            full = model.decode(ids, memory, decoder_attention_mask=mask).logits
            step = lambda i, j, c: model.decode(ids[:, i:j], memory, decoder_attention_mask=mask[:, :j], cache=c)
        else:
            full = model(ids, attention_mask=mask).logits
            step = lambda i, j, c: model(ids[:, i:j], attention_mask=mask[:, :j], cache=c)
        cache = model.new_cache()
        outs = [step(0, prompt, cache).logits]
        sizes = []
        for t in range(prompt, 30):
            outs.append(step(t, t + 1, cache).logits)
            sizes.append(max(layer.mixer.capacity for layer in cache.layers))
            assert all(len(layer.mixer) == window - 1 for layer in cache.layers)
    torch.testing.assert_close(torch.cat(outs, 1)[1, 3:], full[1, 3:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(outs, 1)[0], full[0], atol=1e-5, rtol=1e-5)
    assert max(sizes) <= max(prompt, 2 * window)  # bounded by the window, not by the 30 positions decoded
    assert max(sizes[10:]) == max(sizes[:10])  # stopped growing


def test_a_global_cache_keeps_every_key():
    cache = KVCache()
    for _ in range(9):
        cache.append(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert len(cache) == 9 and cache.capacity >= 9
    cache.trim(3)
    assert len(cache) == 3
    k, _ = cache.append(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert k.shape[-2] == 4 and k[0, 0, -1].tolist() == [1.0, 1.0] and k[0, 0, 0].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("override,expected", [
    ("model.attention=sliding_window model.attention.window=0", "model.attention.window: must be a positive"),
    ("model.attention=sdpa", "model.attention: 'sdpa' is not one of the attention patterns any more: "
                             "set model.attention_kernel=sdpa"),
    ("model.qk_norm=rms", "model.qk_norm: unknown norm 'rms' (did you mean 'rmsnorm'?); choices: layernorm, rmsnorm"),
    ("model.qk_norm_scope=projection", "model.qk_norm_scope: refines model.qk_norm, which is not set: set "
                                       "model.qk_norm too, or leave qk_norm_scope at head"),
    ("model.qk_norm=rmsnorm model.qk_norm_scope=heads", "model.qk_norm_scope: unknown value 'heads' "
                                                        "(did you mean 'head'?); choices: head, projection"),
    ("model.attn_logit_softcap=0", "model.attn_logit_softcap: must be positive, got 0"),
    ("model.final_logit_softcap=-1", "model.final_logit_softcap: must be positive"),
    ("model.attention=slide", "model.attention: unknown attention pattern 'slide'"),
])
def test_bad_attention_settings_are_one_line_errors(override, expected, capsys):
    """README: "A user mistake prints one line and exits 2"."""
    code = main(["describe", "preset:llama-tiny", *override.split(" ")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
