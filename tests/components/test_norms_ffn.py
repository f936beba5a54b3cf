import pytest
import torch

from arch_zoo.components.feedforward import FEEDFORWARD, FFNContext, GatedMLP, _GatedProduct, has_sublayer, is_gated
from arch_zoo.components.norms import NORMS


def test_rmsnorm_formula():
    norm = NORMS.build(NORMS.parse({"name": "rmsnorm", "eps": 0.0}, "n"), 4)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = x / torch.sqrt((x ** 2).mean())
    torch.testing.assert_close(norm(x), expected)


def test_layernorm_without_bias_has_no_bias_parameter():
    norm = NORMS.build(NORMS.parse({"name": "layernorm", "bias": False}, "n"), 4)
    assert norm.bias is None and len(list(norm.parameters())) == 1


@pytest.mark.parametrize("name", FEEDFORWARD.choices())
def test_feedforward_shapes_and_gating(name):
    spec = FEEDFORWARD.parse(name, "model.ffn")
    ffn = FEEDFORWARD.build(spec, FFNContext(8, 12, True, 0.0))
    if not has_sublayer(spec):  # ffn: none builds no slot (tests/components/test_ffn_none.py)
        assert not list(ffn.parameters()) and not is_gated(spec)
        return
    inner = ffn.experts[0] if hasattr(ffn, "experts") else ffn  # a mixture's experts are feed-forwards themselves
    gated = is_gated(spec)
    assert inner.up.out_features == 12
    assert hasattr(inner, "gate") == gated and (not gated or inner.gate.out_features == 12)
    assert ffn(torch.randn(2, 3, 8)).shape == (2, 3, 8)


def test_swiglu_is_silu_gate_times_value():
    ffn = FEEDFORWARD.build(FEEDFORWARD.parse("swiglu", "f"), FFNContext(4, 6, False, 0.0))
    x = torch.randn(3, 4)
    gate, value = x @ ffn.gate.weight.T, x @ ffn.up.weight.T
    torch.testing.assert_close(ffn(x), (torch.nn.functional.silu(gate) * value) @ ffn.down.weight.T)


GATED = [name for name in FEEDFORWARD.choices() if issubclass(FEEDFORWARD.get(name).factory, GatedMLP)]
ACTS = {"swiglu": torch.nn.functional.silu, "scaled_swiglu": torch.nn.functional.silu, "geglu": torch.nn.functional.gelu, "reglu": torch.nn.functional.relu,
        "geglu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def test_every_gated_ffn_has_a_reference_activation_here():
    assert sorted(GATED) == sorted(ACTS)  # a new gated variant needs its autograd reference below


@pytest.mark.parametrize("name", GATED)
def test_gated_ffn_hand_written_backward_matches_autograd(name):
    """The gated product has its own backward (fewer temporaries); it must give autograd's gradients
    of the textbook act(xW) * xV, for the input and every weight, in float64 and float32."""
    torch.manual_seed(0)
    ffn = FEEDFORWARD.build(FEEDFORWARD.parse(name, "f"), FFNContext(6, 10, True, 0.0)).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ffn, (x,))
    ffn = ffn.float()
    x = x.detach().float().requires_grad_()
    wrt = [x, *ffn.parameters()]
    ours = torch.autograd.grad(ffn(x).pow(2).sum(), wrt)
    textbook = ffn.down(ACTS[name](ffn.gate(x)) * ffn.up(x))
    for got, want in zip(ours, torch.autograd.grad(textbook.pow(2).sum(), wrt)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_scaled_swiglu_is_swiglu_with_its_multipliers_on_the_gate_s_input_and_the_output():
    """Falcon-H1's mlp_multipliers: out_multiplier * down(silu(gate_multiplier * x W) * x V), gradients too."""
    torch.manual_seed(0)
    spec = FEEDFORWARD.parse({"name": "scaled_swiglu", "gate_multiplier": 0.5, "out_multiplier": 3.0}, "f")
    ffn = FEEDFORWARD.build(spec, FFNContext(6, 10, True, 0.0))
    x = torch.randn(2, 5, 6, requires_grad=True)
    wrt = [x, *ffn.parameters()]
    ours = ffn(x)
    textbook = 3.0 * ffn.down(torch.nn.functional.silu(0.5 * ffn.gate(x)) * ffn.up(x))
    torch.testing.assert_close(ours, textbook, rtol=1e-6, atol=1e-6)
    for got, want in zip(torch.autograd.grad(ours.pow(2).sum(), wrt), torch.autograd.grad(textbook.pow(2).sum(), wrt)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", GATED)
def test_gated_product_backward_leaves_the_incoming_gradient_intact(name):
    """The backward writes into buffers it owns, never into the gradient it was handed (autograd
    may hand the same tensor to other consumers)."""
    ffn = FEEDFORWARD.build(FEEDFORWARD.parse(name, "f"), FFNContext(4, 6, False, 0.0))
    g = torch.randn(3, 6, requires_grad=True)
    u = torch.randn(3, 6, requires_grad=True)
    out = _GatedProduct.apply(g, u, ffn.act, ffn.act_backward)
    grad = torch.randn_like(out)
    kept = grad.clone()
    out.backward(grad)
    assert torch.equal(grad, kept)
    torch.testing.assert_close(u.grad, ACTS[name](g.detach()) * kept)
