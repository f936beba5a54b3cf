import math

import pytest
import torch

from arch_zoo.components.positions import POSITIONS, PositionContext, alibi_slopes, t5_bucket
from arch_zoo.errors import ConfigError

CTX = PositionContext(d_model=16, n_heads=4, head_dim=8, max_seq_len=32, causal=True)


def build(name, ctx=CTX, **options):
    spec = POSITIONS.parse({"name": name, **options}, "model.position")
    return POSITIONS.build(spec, ctx)


def test_sinusoidal_matches_the_paper_formula():
    pe = build("sinusoidal").table(torch.arange(5).unsqueeze(0))[0]
    for pos in range(5):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_scores_depend_only_on_relative_offset(interleaved, fraction):
    rope = build("rope", interleaved=interleaved, fraction=fraction)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(i, j):
        qr, kr = rope.rotate(q, k, torch.tensor([[i]]), torch.tensor([[j]]))
        return (qr * kr).sum().item()

    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_rope_preserves_norms_and_leaves_unrotated_dims_alone():
    rope = build("rope", fraction=0.5)
    x = torch.randn(2, 4, 6, 8)
    pos = torch.arange(6).unsqueeze(0)
    xr, _ = rope.rotate(x, x, pos, pos)
    torch.testing.assert_close(xr.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(xr[..., 4:], x[..., 4:])


def test_rope_needs_an_even_rotated_dimension():
    spec = POSITIONS.parse({"name": "rope", "fraction": 0.375}, "model.position")  # 8 * 0.375 = 3
    with pytest.raises(ConfigError, match="model.position: RoPE needs an even"):
        POSITIONS.get("rope").factory.check(spec.options, CTX, "model.position")


def test_alibi_slopes_are_the_published_geometric_sequence():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    assert len(alibi_slopes(6)) == 6  # non-power-of-two heads interleave the next power


def test_alibi_bias_is_minus_slope_times_distance():
    bias = build("alibi").score_bias(torch.arange(4).unsqueeze(0), torch.arange(4).unsqueeze(0))
    assert bias.shape == (1, 4, 4, 4)
    slope = alibi_slopes(4)[1].item()
    assert bias[0, 1, 3, 0].item() == pytest.approx(-3 * slope)
    assert bias[0, 1, 2, 2].item() == 0


def test_t5_buckets_exact_then_logarithmic():
    rel = torch.tensor([0, -1, -7, -8, -20, -127, -500])
    causal = t5_bucket(rel, False, 32, 128).tolist()
    assert causal[:3] == [0, 1, 7]  # exact below num_buckets // 2
    assert causal == sorted(causal) and causal[-1] == 31  # monotone, saturating
    both = t5_bucket(torch.tensor([-3, 3]), True, 32, 128).tolist()
    assert both == [3, 16 + 3]  # bidirectional: the sign picks the half


def test_t5_bias_is_causal_in_decoders_and_bidirectional_in_encoders():
    q, k = torch.arange(3).unsqueeze(0), torch.arange(3).unsqueeze(0)
    dec = build("t5_bias")
    enc = build("t5_bias", ctx=PositionContext(16, 4, 8, 32, causal=False))
    enc.load_state_dict(dec.state_dict())
    # decoder: all future keys share bucket 0; encoder tells them apart
    assert torch.equal(dec.score_bias(q, k)[0, :, 0, 1], dec.score_bias(q, k)[0, :, 0, 2])
    assert not torch.equal(enc.score_bias(q, k)[0, :, 0, 1], enc.score_bias(q, k)[0, :, 0, 2])


def test_learned_positions_refuse_positions_past_the_table():
    learned = build("learned")
    with pytest.raises(ValueError, match="past the learned position table"):
        learned.embed(torch.zeros(1, 40, 16), torch.arange(40).unsqueeze(0))


def test_learned_table_shorter_than_max_seq_len_is_a_config_error():
    spec = POSITIONS.parse({"name": "learned", "size": 16}, "model.position")
    with pytest.raises(ConfigError, match="shorter than model.max_seq_len"):
        POSITIONS.get("learned").factory.check(spec.options, CTX, "model.position")


def _textbook_rope(x, pos, base, rot, interleaved):
    """x * cos + rotate(x) * sin over the first ``rot`` dims, written out (Su et al. 2021, eq. 34)."""
    inv = 1.0 / base ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    angles = pos.double().unsqueeze(-1) * inv
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)
        pairs = x[..., :rot].unflatten(-1, (-1, 2))
        turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    else:
        angles = torch.cat((angles, angles), dim=-1)
        a, b = x[..., :rot].chunk(2, dim=-1)
        turned = torch.cat((-b, a), dim=-1)
    head = x[..., :rot] * angles.cos().unsqueeze(1) + turned * angles.sin().unsqueeze(1)
    return torch.cat((head, x[..., rot:]), dim=-1)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_matches_the_textbook_form_and_its_gradient(interleaved, fraction):
    """RoPE runs as one autograd node whose backward is the inverse rotation; values and gradients
    must be the textbook form's, and gradcheck must pass (float64)."""
    rope = build("rope", interleaved=interleaved, fraction=fraction, base=100.0).double()
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 1, 2, 5, 9, 30], [3, 3, 4, 0, 1, 2]])
    got, _ = rope.rotate(x, None, pos, pos)
    want = _textbook_rope(x, pos, 100.0, int(8 * fraction), interleaved)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # angles are float32 by design
    weights = torch.randn_like(x)
    torch.testing.assert_close(torch.autograd.grad((got * weights).sum(), x)[0],
                               torch.autograd.grad((want * weights).sum(), x)[0], rtol=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda t: rope.rotate(t, None, pos, pos)[0], (x,))


def test_rope_keeps_the_input_dtype_under_reduced_precision():
    rope = build("rope")
    x = torch.randn(1, 4, 6, 8, dtype=torch.bfloat16)
    pos = torch.arange(6).unsqueeze(0)
    got, _ = rope.rotate(x, None, pos, pos)
    assert got.dtype == torch.bfloat16
    want = _textbook_rope(x.double(), pos, 10000.0, 8, False)
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_compiles_without_graph_breaks_and_matches_eager(interleaved):
    """fullgraph=True fails on any graph break (the eager path writes into views with out=)."""
    rope = build("rope", interleaved=interleaved, fraction=0.5)
    x = torch.randn(2, 4, 6, 8, requires_grad=True)
    pos = torch.arange(6).unsqueeze(0)

    def rotate(t):
        return rope.rotate(t, None, pos, pos)[0]

    compiled = torch.compile(rotate, backend="aot_eager", fullgraph=True)
    weights = torch.randn_like(x)
    got, want = compiled(x), rotate(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad((got * weights).sum(), x)[0],
                               torch.autograd.grad((want * weights).sum(), x)[0])
