"""Per-layer ``n_heads`` / ``head_dim`` (``model.layers``; issue 26 §1): each layer's position scheme is
built for that layer's heads, so RoPE rotates all of a wider layer's dims and ALiBi / T5 biases have
one row per head of their layer, in self- and cross-attention; the FLOP count follows every layer's
real shape. Checked against hand-written references and torch's FlopCounterMode."""
import math

import pytest
import torch

from arch_zoo import testing
from arch_zoo.models import build_model
from arch_zoo.models.summary import flops_per_token, parameter_breakdown

from .flop_reference import measured_forward_flops

VOCAB = 40
BASE = dict(d_model=32, n_layers=2, n_heads=4, head_dim=8, d_ff=64, max_seq_len=32, attention_kernel="explicit",
            dropout=0.0)
WIDER = [{"range": "1:", "head_dim": 16}]  # layer 1: 4 heads of 16 dims (the model's: 4 of 8)
FEWER = [{"range": "1:", "n_heads": 2, "head_dim": 16}]  # layer 1: 2 heads


def full_rope(x, pos, base=10000.0):
    """The textbook rotation of every dim (RoFormer; HF Llama's rotate_half), in float64."""
    d = x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.cat([pos.double()[:, None] * inv] * 2, dim=-1)  # (L, d)
    x = x.double()
    turned = torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    return x * angles.cos() + turned * angles.sin()


def _inputs_of(module):
    """What a mixer slot was called with, ``mixer(x, inputs, state)``: x, and the memory a cross-attention read."""
    seen = {}
    module.register_forward_hook(
        lambda m, args, out: seen.update(x=args[0], kw={"memory": getattr(args[1], "memory", None)}))
    return seen


def _reference_weights(attn, x, memory=None, rope=False, bias=None, causal=True):
    """softmax(q.k / sqrt(head_dim) + bias) from the layer's own projections, positions done by hand."""
    h, kv, d = attn.shape.n_heads, attn.shape.n_kv_heads, attn.shape.head_dim
    if memory is None:
        q, k, _ = attn.qkv(x).split((h * d, kv * d, kv * d), dim=-1)
    else:
        q, (k, _) = attn.q(x), attn.kv(memory).split(kv * d, dim=-1)
    q = q.unflatten(-1, (h, d)).transpose(1, 2)
    k = k.unflatten(-1, (kv, d)).transpose(1, 2).repeat_interleave(h // kv, dim=1)
    lq, lk = q.shape[-2], k.shape[-2]
    if rope:
        q, k = full_rope(q, torch.arange(lq)), full_rope(k, torch.arange(lk))
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1)


def _weights(model, ids, dec_ids=None):
    with torch.no_grad():
        out = model(ids, need_weights=True) if dec_ids is None else model(ids, dec_ids, need_weights=True)
    return out.attentions


@pytest.mark.parametrize("layers", [WIDER, FEWER], ids=["head_dim", "n_heads"])
def test_rope_rotates_every_dim_of_a_layer_with_its_own_head_dim(layers):
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": "decoder", "position": "rope", "layers": layers}, VOCAB).eval()
    seen = _inputs_of(model.decoder.layers[1].mixer.sublayer)
    weights = _weights(model, torch.randint(0, VOCAB, (2, 10)))
    expected = _reference_weights(model.decoder.layers[1].mixer.sublayer, seen["x"], rope=True)
    torch.testing.assert_close(weights[1].double(), expected, atol=1e-5, rtol=0)


def test_cross_attention_positions_follow_the_layer_shape_too():
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": "encoder_decoder", "position": "rope", "cross_attention_position": True,
                         "layers": [{"range": "1:", "stack": "decoder", "n_heads": 2, "head_dim": 16}]}, VOCAB).eval()
    cross = model.decoder.layers[1].cross_attn.sublayer
    seen = _inputs_of(cross)
    weights = _weights(model, torch.randint(0, VOCAB, (2, 7)), torch.randint(0, VOCAB, (2, 9)))
    expected = _reference_weights(cross, seen["x"], memory=seen["kw"]["memory"], rope=True, causal=False)
    torch.testing.assert_close(weights[-1].double(), expected, atol=1e-5, rtol=0)  # the last layer's cross-attention


def test_alibi_slopes_are_those_of_the_layers_own_head_count():
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": "decoder", "position": "alibi", "layers": FEWER}, VOCAB).eval()
    seen = _inputs_of(model.decoder.layers[1].mixer.sublayer)
    weights = _weights(model, torch.randint(0, VOCAB, (2, 10)))
    slopes = torch.tensor([2.0 ** -4, 2.0 ** -8], dtype=torch.float64)  # Press et al. for 2 heads: 2^(-8i/n)
    i = torch.arange(10, dtype=torch.float64)
    bias = -slopes[:, None, None] * (i[None, :] - i[:, None]).abs()
    expected = _reference_weights(model.decoder.layers[1].mixer.sublayer, seen["x"], bias=bias)
    torch.testing.assert_close(weights[1].double(), expected, atol=1e-5, rtol=0)


def test_t5_bias_gets_a_table_for_the_layers_own_heads_and_trains_it():
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": "decoder", "position": "t5_bias", "layers": FEWER}, VOCAB)
    own = model.decoder.layer_positions
    assert [tuple(p.bias.weight.shape) for p in own] == [(32, 2)]  # buckets x the layer's 2 heads
    torch.nn.init.normal_(own[0].bias.weight)
    seen = _inputs_of(model.decoder.layers[1].mixer.sublayer)
    model.eval()
    weights = _weights(model, torch.randint(0, VOCAB, (2, 10)))
    i = torch.arange(10)
    distance = (i[:, None] - i[None, :]).clamp(min=0)  # causal buckets: below 16 a bucket is the distance itself
    bias = own[0].bias.weight.detach().double()[distance].permute(2, 0, 1)
    expected = _reference_weights(model.decoder.layers[1].mixer.sublayer, seen["x"], bias=bias)
    torch.testing.assert_close(weights[1].double(), expected, atol=1e-5, rtol=0)
    model.train()
    model(torch.randint(0, VOCAB, (2, 10))).logits.sum().backward()
    assert own[0].bias.weight.grad.abs().sum() > 0
    parts = parameter_breakdown(model)  # the layer's table is a position parameter, not a norm
    assert parts["decoder positions"] == 32 * 4 + 32 * 2


@pytest.mark.parametrize("position", ["rope", "alibi", "t5_bias"])
def test_per_layer_shapes_keep_the_grid_invariants(position):
    cfg = {**testing.BASE, "position": position, "cross_attention_position": True,
           "layers": [{"range": "1:", "n_heads": 4, "head_dim": 8, "n_kv_heads": 2}]}
    for name, check, case in testing.cases(cfg, kinds=["encoder_decoder"]):
        if name in ("cache_parity", "padding_invariance", "causal_leak", "kernels_agree"):
            check(case)
    for name, check, case in testing.cases({**cfg, "cross_attention_position": False}, kinds=["decoder"]):
        if name in ("cache_parity", "padding_invariance (left)"):
            check(case)


SHAPES = [{"range": "0:1", "n_heads": 2, "head_dim": 16, "n_kv_heads": 1},
          {"range": "1:", "head_dim": 12, "d_ff": 48, "ffn": "swiglu"}]


@pytest.mark.parametrize("kind", ["encoder", "decoder", "encoder_decoder"])
def test_flops_follow_each_layers_shape_as_flop_counter_measures(kind):
    model = build_model({**BASE, "kind": kind, "position": "rope", "n_layers": 3, "layers": SHAPES}, VOCAB)
    src, tgt = torch.randint(0, VOCAB, (2, 9)), torch.randint(0, VOCAB, (2, 6))
    if kind == "encoder_decoder":
        measured = measured_forward_flops(model, input_ids=src, decoder_input_ids=tgt)
        ours = flops_per_token(model, 9, 6)["total"] * 2 * (9 + 6)  # per token of source and target
    else:
        measured = measured_forward_flops(model, input_ids=src)
        ours = flops_per_token(model, 9)["total"] * 2 * 9
    assert ours == pytest.approx(measured, rel=1e-9)
