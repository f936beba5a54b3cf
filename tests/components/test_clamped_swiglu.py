"""gpt-oss's clamped SwiGLU (``ffn: clamped_swiglu``) against a float64 computation and HF's own gate;
a mixture of such experts with a biased router (``moe`` with ``router_bias`` and ``expert: {name:
clamped_swiglu, ...}``) against HF's GptOssMLP; and an expert's options named by key when wrong."""
import pytest
import torch

from arch_zoo.components.feedforward import FEEDFORWARD, FFNContext
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError

tf = pytest.importorskip("transformers")


def clamped(options=None, d_model=8, d_ff=12, bias=True):
    spec = FEEDFORWARD.parse({"name": "clamped_swiglu", **(options or {})}, "ffn")
    return FEEDFORWARD.build(spec, FFNContext(d_model, d_ff, bias, 0.0))


def test_equals_a_float64_computation_with_both_clamps_acting():
    ffn = clamped({"alpha": 1.5, "limit": 2.0})
    x = torch.randn(50, 8) * 4  # gate and up spread well past +-2
    g = (x.double() @ ffn.gate.weight.double().T + ffn.gate.bias.double())
    u = (x.double() @ ffn.up.weight.double().T + ffn.up.bias.double())
    assert (g > 2).any() and (u < -2).any() and (u > 2).any() and (g < -2).any()
    g, u = g.clamp(max=2.0), u.clamp(-2.0, 2.0)  # the gate is cut from above only
    hidden = g * (1 / (1 + torch.exp(-1.5 * g))) * (u + 1)
    expected = hidden @ ffn.down.weight.double().T + ffn.down.bias.double()
    torch.testing.assert_close(ffn(x).double(), expected, atol=1e-5, rtol=0)


def test_the_activation_is_hfs_gate_on_its_interleaved_layout():
    """HF's GptOssExperts._apply_gate on (tokens, 2 d_ff) pre-activations, gate in the even columns and
    up in the odd ones; ours read through zero input weights, biases that carry the pre-activations and
    an identity down projection."""
    config = tf.GptOssConfig(hidden_size=12, intermediate_size=12, num_local_experts=1, swiglu_limit=1.5)
    experts = tf.models.gpt_oss.modeling_gpt_oss.GptOssExperts(config)
    ffn = clamped({"limit": 1.5}, d_model=12)  # alpha at gpt-oss's 1.702, HF's default too
    gate_up = torch.randn(30, 24) * 3
    g, u = gate_up[:, ::2], gate_up[:, 1::2]
    assert (g > 1.5).any() and (u.abs() > 1.5).any()
    with torch.no_grad():
        ffn.gate.weight.zero_(), ffn.up.weight.zero_()
        ffn.down.weight.copy_(torch.eye(12)), ffn.down.bias.zero_()
        ours = []
        for row in range(30):
            ffn.gate.bias.copy_(g[row]), ffn.up.bias.copy_(u[row])
            ours.append(ffn(torch.zeros(1, 12))[0])
    torch.testing.assert_close(torch.stack(ours), experts._apply_gate(gate_up), atol=1e-6, rtol=0)


def test_no_gradient_flows_through_a_clamped_pre_activation():
    ffn = clamped({"limit": 0.5})
    x = torch.randn(1, 8) * 3
    ffn(x).sum().backward()
    with torch.no_grad():
        g, u = ffn.gate(x)[0], ffn.up(x)[0]
    assert (g > 0.5).any() and (g <= 0.5).any() and (u.abs() > 0.5).any() and (u.abs() <= 0.5).any()
    assert bool((ffn.gate.bias.grad[g > 0.5] == 0).all()) and bool((ffn.gate.bias.grad[g < 0.5] != 0).all())
    assert bool((ffn.up.bias.grad[u.abs() > 0.5] == 0).all())
    assert bool((ffn.up.bias.grad[(u.abs() < 0.5) & (g != 0)] != 0).all())


def test_a_mixture_of_clamped_experts_with_a_biased_router_equals_hfs_gpt_oss_block():
    """HF's GptOssMLP: logits with a bias, top-k of the logits, softmax over those k, experts with
    biases; ours: the moe router (softmax over all, top-k, renormalised: the same weights)."""
    config = tf.GptOssConfig(hidden_size=16, intermediate_size=8, num_local_experts=6, num_experts_per_tok=3,
                             swiglu_limit=1.0)
    theirs = tf.models.gpt_oss.modeling_gpt_oss.GptOssMLP(config)
    spec = FEEDFORWARD.parse({"name": "moe", "n_experts": 6, "top_k": 3, "router_bias": True,
                              "expert": {"name": "clamped_swiglu", "limit": 1.0}}, "ffn")
    ours = FEEDFORWARD.build(spec, FFNContext(16, 8, True, 0.0))
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape))
        ours.router.weight.copy_(theirs.router.weight), ours.router.bias.copy_(theirs.router.bias)
        e = theirs.experts
        for i, expert in enumerate(ours.experts):
            expert.gate.weight.copy_(e.gate_up_proj[i][:, ::2].T), expert.gate.bias.copy_(e.gate_up_proj_bias[i, ::2])
            expert.up.weight.copy_(e.gate_up_proj[i][:, 1::2].T), expert.up.bias.copy_(e.gate_up_proj_bias[i, 1::2])
            expert.down.weight.copy_(e.down_proj[i].T), expert.down.bias.copy_(e.down_proj_bias[i])
        x = torch.randn(2, 9, 16)
        expected, _ = theirs(x)
        got = ours(x)
    assert expected.abs().max() > 1
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    with torch.no_grad():
        ours.router.bias.zero_()  # the router's bias decides the routing here
        assert (ours(x) - expected).abs().max() > 1e-2


@pytest.mark.parametrize("ffn,key,message", [
    ({"name": "clamped_swiglu", "limit": 0.0}, "model.ffn.limit", "must be positive"),
    ({"name": "moe", "expert": {"name": "clamped_swiglu", "limit": -1.0}}, "model.ffn.expert.limit",
     "must be positive"),
    ({"name": "moe", "expert": {"name": "clamped_swiglu", "limt": 1.0}}, "model.ffn.expert.limt",
     "did you mean 'limit'"),
    ({"name": "moe", "expert": {"limit": 1.0}}, "model.ffn.expert", "needs 'name'"),
    ({"name": "moe", "expert": {"name": "clamped_swiglu", "alpha": "x"}}, "model.ffn.expert.alpha", "a number"),
])
def test_bad_options_name_their_key(ffn, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        model_config({"kind": "decoder", "d_model": 16, "n_heads": 2, "ffn": ffn})
    assert info.value.key == key


def test_an_expert_is_written_out_in_one_spelling():
    """A name, or a mapping with some options, becomes the full spec (one config per function, as the
    export's function view compares them); an expert without options stays a bare name."""
    def expert(value):
        return model_config({"kind": "decoder", "d_model": 16, "n_heads": 2,
                             "ffn": {"name": "moe", "expert": value}}).ffn.options.expert

    full = {"name": "clamped_swiglu", "alpha": 1.702, "limit": 7.0}
    assert expert("clamped_swiglu") == expert({"name": "clamped_swiglu"}) == expert({"name": "clamped_swiglu",
                                                                                     "limit": 7}) == full
    assert expert({"name": "swiglu"}) == expert("swiglu") == "swiglu"
