import math

import pytest
import torch

from arch_zoo.components.attention import KERNELS, AttentionShape, MultiHeadAttention
from arch_zoo.components.masks import AttentionMask, self_attention_mask

BACKENDS = KERNELS.choices()


def _worked_example(backend, v):
    """The chapter's example: one query whose scores on two keys are [2, 0] (D = 1, so 1/sqrt(d_k) = 1)."""
    q = torch.tensor([[[[1.0]]]])  # (B, H, Lq, D)
    k = torch.tensor([[[[2.0], [0.0]]]])
    fn = KERNELS.build(KERNELS.parse(backend, "attention_kernel"))
    return fn(q, k, v, AttentionMask(), 0.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_example_from_the_chapter(backend):
    """scores [2, 0] -> softmax [0.881, 0.119]; weighted values 0.881 * 10 + 0.119 * 20 = 11.19."""
    out, weights = _worked_example(backend, torch.tensor([[[[10.0], [20.0]]]]))
    assert out.item() == pytest.approx(11.19, abs=5e-3)
    if weights is not None:
        assert weights.flatten().tolist() == pytest.approx([0.881, 0.119], abs=5e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_weights_of_the_worked_example_in_every_backend(backend):
    """The weights [0.881, 0.119] = softmax([2, 0]) as each backend computes them, sdpa included
    (it returns no weights): with one-hot values, row i of the output is the weight on key i."""
    out, _ = _worked_example(backend, torch.eye(2).view(1, 1, 2, 2))
    assert out.flatten().tolist() == pytest.approx([0.881, 0.119], abs=5e-4)
    assert out.flatten().tolist() == pytest.approx([1 / (1 + math.exp(-2)), 1 / (1 + math.exp(2))], abs=1e-6)


def _pair(n_heads=4, n_kv_heads=4, cross=False):
    shape = AttentionShape(32, n_heads, n_kv_heads, 8, True, 0.0)
    a = MultiHeadAttention(shape, KERNELS.build(KERNELS.parse("sdpa", "a")), cross=cross)
    b = MultiHeadAttention(shape, KERNELS.build(KERNELS.parse("explicit", "a")), cross=cross)
    b.load_state_dict(a.state_dict())
    return a, b


def _masks(batch, length):
    pad = torch.ones(batch, length, dtype=torch.long)
    pad[0, -3:] = 0
    left = torch.ones(batch, length, dtype=torch.long)
    left[1, :4] = 0
    return {
        "none": AttentionMask(),
        "causal": self_attention_mask(None, length, 0, True),
        "padding": self_attention_mask(pad, length, 0, False),
        "padding+causal": self_attention_mask(left, length, 0, True),
        "bias": self_attention_mask(pad, length, 0, True).with_bias(torch.randn(1, 4, length, length), length, length),
    }


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("mask_name", ["none", "causal", "padding", "padding+causal", "bias"])
def test_sdpa_and_explicit_backends_agree(kv_heads, mask_name):
    """README, Tests: "`sdpa` and `explicit` agree to 1e-5", for MHA, GQA and MQA under every mask form."""
    torch.manual_seed(0)
    a, b = _pair(n_kv_heads=kv_heads)
    x = torch.randn(2, 10, 32)
    mask = _masks(2, 10)[mask_name]
    torch.testing.assert_close(a(x, mask), b(x, mask), atol=1e-5, rtol=1e-5)


def test_backends_agree_in_cross_attention():
    """README, Tests: "`sdpa` and `explicit` agree to 1e-5", in cross-attention with source padding."""
    torch.manual_seed(0)
    a, b = _pair(n_kv_heads=2, cross=True)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    from arch_zoo.components.masks import cross_attention_mask

    src = torch.ones(2, 7, dtype=torch.long)
    src[1, 4:] = 0
    mask = cross_attention_mask(src, 5)
    torch.testing.assert_close(a(x, mask, memory=memory), b(x, mask, memory=memory), atol=1e-5, rtol=1e-5)


def test_explicit_backend_returns_weights_that_respect_the_mask():
    torch.manual_seed(0)
    _, b = _pair()
    mask = self_attention_mask(None, 6, 0, True)
    b(torch.randn(1, 6, 32), mask, need_weights=True)
    w = b.last_weights
    assert w.shape == (1, 4, 6, 6)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 4, 6))
    assert torch.all(w.triu(diagonal=1) == 0)


def test_sdpa_refuses_to_return_weights():
    a, _ = _pair()
    with pytest.raises(ValueError, match="explicit"):
        a(torch.randn(1, 3, 32), AttentionMask(), need_weights=True)


def test_query_rows_with_nothing_to_attend_give_zero_not_nan():
    torch.manual_seed(0)
    for attn in _pair():
        left = torch.tensor([[0, 0, 1, 1]])  # left padding under a causal mask: rows 0-1 see nothing
        mask = self_attention_mask(left, 4, 0, True)
        x = torch.randn(1, 4, 32, requires_grad=True)
        out = attn(x, mask)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0, :2], attn.out.bias.expand(2, -1))  # zero attention, then out proj
        out.sum().backward()
        assert torch.isfinite(x.grad).all()


TINY_PRESETS = [p for p in __import__("arch_zoo.config.loading", fromlist=["preset_names"]).preset_names() if p.endswith("-tiny")]


@pytest.mark.parametrize("preset", TINY_PRESETS)
def test_switching_a_presets_attention_kernel_keeps_its_function(preset):
    """README model keys: `attention_kernel` is the kernel only; switching it never changes the model's
    function (T5's unscaled q.k is `attention_scale`, which the switch keeps)."""
    from dataclasses import replace

    from arch_zoo.experiment import load
    from arch_zoo.models import build_model

    base = load(f"preset:{preset}").model
    torch.manual_seed(0)
    ids = torch.randint(6, 50, (2, 7))
    dec = torch.randint(6, 50, (2, 5))
    outputs = []
    for kernel in BACKENDS:
        cfg = load(f"preset:{preset}", [f"model.attention_kernel={kernel}"]).model
        assert cfg == replace(base, attention_kernel=cfg.attention_kernel)  # the kernel is all that changed
        model = build_model(cfg, 50).eval()
        if outputs:
            model.load_state_dict(first.state_dict())
        else:
            first = model
        with torch.no_grad():
            out = model(ids, dec) if cfg.kind == "encoder_decoder" else model(ids)
        outputs.append(out.logits)
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], atol=1e-5, rtol=1e-5)
