"""``ffn: none`` (attention-only layers): no slot, so no branch, norm or parameter for a feed-forward;
the layer is its attention residual alone under every placement; parameter counts against a hand count
and FLOPs against torch's FlopCounterMode."""
import pytest
import torch

from arch_zoo.components.feedforward import FEEDFORWARD, has_sublayer
from arch_zoo.components.masks import self_attention_mask
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.components.mixers import MixerInputs as StackInputs
from arch_zoo.models.summary import count_parameters, flops_per_token, parameter_breakdown
from tests.models.flop_reference import measured_forward_flops

VOCAB = 40
BASE = dict(d_model=16, n_layers=2, n_heads=4, d_ff=64, max_seq_len=32, attention_kernel="explicit", dropout=0.0,
            position="rope", ffn="none")


def test_none_is_registered_without_a_sublayer_and_others_have_one():
    assert "none" in FEEDFORWARD.choices() and not has_sublayer("none")
    assert all(has_sublayer(n) for n in FEEDFORWARD.choices() if n != "none")


@pytest.mark.parametrize("placement", ["pre", "post", "sandwich", "deepnorm", "parallel"])
def test_layer_is_its_attention_residual_alone(placement):
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": "decoder", "norm_placement": placement}, VOCAB).eval()
    layer = model.decoder.layers[1]
    assert layer.ffn is None and len(layer.slots()) == 1
    norms = [n for n, m in layer.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    assert all(n.startswith("mixer.") for n in norms), norms  # no norm kept for a missing FFN
    x = torch.randn(2, 5, 16)
    mask = self_attention_mask(None, 5, 0, True, x.device)
    slot = layer.mixer
    f = lambda h: slot.sublayer(h, StackInputs(mask))  # noqa: E731
    expected = {"pre": lambda: x + f(slot.norm(x)), "post": lambda: slot.norm(x + f(x)),
                "sandwich": lambda: x + slot.post_norm(f(slot.norm(x))),
                "deepnorm": lambda: slot.norm(layer.placement.alpha * x + f(x)),
                "parallel": lambda: x + f(slot.norm(x))}[placement]()
    with torch.no_grad():
        torch.testing.assert_close(layer(x, StackInputs(mask)), expected, rtol=0, atol=0)


def test_parameters_match_a_hand_count():
    d, h, L, V = 16, 4, 2, VOCAB
    model = build_model({**BASE, "kind": "decoder", "bias": True, "tie_embeddings": True}, V)
    attention = 3 * d * d + 3 * d + d * d + d  # fused qkv with bias, output projection with bias
    norms = (L + 1) * 2 * d  # one layernorm per layer (pre placement) and the final norm: gain and bias
    assert count_parameters(model) == V * d + L * attention + norms
    parts = parameter_breakdown(model)
    assert "decoder feed-forward" not in parts and parts["decoder attention"] == L * attention
    assert parts["decoder norms"] == norms and h == 4


@pytest.mark.parametrize("kind", ["encoder", "decoder", "encoder_decoder"])
def test_flops_match_flop_counter(kind):
    torch.manual_seed(0)
    model = build_model({**BASE, "kind": kind}, VOCAB)
    src, tgt = torch.randint(0, VOCAB, (1, 9)), torch.randint(0, VOCAB, (1, 9))
    if kind == "encoder_decoder":
        measured = measured_forward_flops(model, input_ids=src, decoder_input_ids=tgt)
        tokens = 18
    else:
        measured = measured_forward_flops(model, input_ids=src)
        tokens = 9
    counted = flops_per_token(model, 9)
    assert counted["total"] * tokens == pytest.approx(measured, rel=1e-9)
    with_ffn = flops_per_token(build_model({**BASE, "kind": kind, "ffn": "gelu"}, VOCAB), 9)
    stacks = 2 if kind == "encoder_decoder" else 1  # each stack's tokens run 2 matmuls of d x d_ff per layer
    assert with_ffn["total"] - counted["total"] == pytest.approx(2 * 2 * 16 * 64 * 2 * stacks / (tokens / 9))


def test_an_moe_cannot_have_no_ffn_experts():
    with pytest.raises(ConfigError, match="expert: unknown feed-forward for an expert 'none'"):
        model_config({**BASE, "ffn": {"name": "moe", "expert": "none"}})
