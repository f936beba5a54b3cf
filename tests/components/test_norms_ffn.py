import pytest
import torch

from arch_zoo.components.feedforward import FEEDFORWARD, FFNContext
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
    ffn = FEEDFORWARD.build(FEEDFORWARD.parse(name, "model.ffn"), FFNContext(8, 12, True, 0.0))
    gated = name.endswith("glu")
    assert ffn.up.out_features == 12
    assert hasattr(ffn, "gate") == gated and (not gated or ffn.gate.out_features == 12)
    assert ffn(torch.randn(2, 3, 8)).shape == (2, 3, 8)


def test_swiglu_is_silu_gate_times_value():
    ffn = FEEDFORWARD.build(FEEDFORWARD.parse("swiglu", "f"), FFNContext(4, 6, False, 0.0))
    x = torch.randn(3, 4)
    gate, value = x @ ffn.gate.weight.T, x @ ffn.up.weight.T
    torch.testing.assert_close(ffn(x), (torch.nn.functional.silu(gate) * value) @ ffn.down.weight.T)
