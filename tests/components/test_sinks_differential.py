"""Attention sinks (gpt-oss) and differential attention (Ye et al. 2025) against float64 loops written
here from their definitions, on both kernels; the invariant grid; their bad settings."""
import math

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.attention import KERNELS, Backend
from arch_zoo.components.masks import AttentionMask, self_attention_mask
from arch_zoo.components.mixers import MixerInputs
from arch_zoo.components.mixers.differential import DifferentialAttention
from arch_zoo.config.loading import model_config
from arch_zoo.models import build_model
from arch_zoo.registry import NoOptions
from arch_zoo.testing import check_component
from tests.conftest import tiny

B, H, KV, L, D = 2, 4, 2, 6, 3


def sink_loop(q, k, v, allowed, sinks, scale):
    """out[b, h, i] = sum_j p_j v_j, p = softmax over the allowed keys and the head's sink logit (whose
    value is zero); a row with no allowed key gets only the sink: out 0."""
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                keys = [j for j in range(k.shape[2]) if allowed[b, i, j]]
                s = [float(q[b, h, i] @ k[b, h // group, j]) * scale for j in keys]
                top = max(s + [float(sinks[h])])
                e = [math.exp(x - top) for x in s]
                z = sum(e) + math.exp(float(sinks[h]) - top)
                for w, j in zip(e, keys):
                    out[b, h, i] += w / z * v[b, h // group, j]
    return out


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_sinks_take_mass_and_return_nothing_as_a_float64_loop_says(kernel):
    q, k, v = (torch.randn(B, n, L, D, dtype=torch.float64) for n in (H, KV, KV))
    sinks = torch.randn(H, dtype=torch.float64) * 2
    pad = torch.tensor([[1] * L, [0, 0] + [1] * (L - 2)])
    mask = self_attention_mask(pad, L, 0, True, None)
    allowed = torch.ones(B, L, L, dtype=torch.bool).tril() & pad[:, None, :].bool()
    backend = KERNELS.build(model_config({"attention_kernel": kernel}).attention_kernel, None, None)
    out, _ = backend(q, k, v, mask, 0.0, sinks=sinks)
    if mask.keep is not None:
        out = out * mask.keep
    # float64 inputs; the explicit kernel takes the scores in float32, as it does for every model
    torch.testing.assert_close(out, sink_loop(q, k, v, allowed, sinks, D ** -0.5), atol=1e-6, rtol=0)
    big, _ = backend(q, k, v, AttentionMask(None, True, None), 0.0, sinks=torch.full((H,), 60.0, dtype=torch.float64))
    assert big.abs().max() < 1e-20  # a sink far above every score takes all the mass: nothing comes back


def test_sink_gradients_agree_between_kernels():
    grads = []
    for kernel in ("sdpa", "explicit"):
        torch.manual_seed(0)
        model = build_model(tiny(attention_kernel=kernel, mixer={"name": "attention", "sinks": True}), 20)
        ids = torch.randint(1, 20, (2, 9))
        model(ids, torch.ones_like(ids)).logits.square().mean().backward()
        grads.append(model.decoder.layers[0].mixer.sublayer.sinks.grad)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-4)


def test_sinks_keep_every_invariant():
    assert "cache_parity [decoder]" in check_component("mixers", "attention", {"sinks": True}, position="rope")


def diff_loop(m, x):
    """Ye et al. 2025, eq. 1-3, pair by pair: head i and i + H/2 give the maps A1, A2; the pair's output
    (A1 - lambda A2) [V_i, V_j] goes through a gainless RMSNorm and (1 - lambda_init); its first half
    is head i's output, its second half head i + H/2's."""
    qkv = x @ m.qkv.weight.T + m.qkv.bias
    q, k, v = qkv.split((H * D, KV * D, KV * D), dim=-1)
    q, k, v = q.view(L, H, D), k.view(L, KV, D), v.view(L, KV, D)
    lam = (torch.exp(m.lambda_q1 @ m.lambda_k1) - torch.exp(m.lambda_q2 @ m.lambda_k2) + m.lambda_init)
    heads = torch.zeros(L, H, D, dtype=x.dtype)
    half, group = H // 2, H // KV

    def attn(h, i):
        s = torch.stack([q[i, h] @ k[j, h // group] for j in range(i + 1)]) / math.sqrt(D)
        return torch.softmax(s, 0)

    for i in range(L):
        for a in range(half):
            b = a + half
            values = [torch.cat((v[j, a // group], v[j, b // group])) for j in range(i + 1)]
            p1, p2 = attn(a, i), attn(b, i)
            o = sum((p1[j] - lam * p2[j]) * values[j] for j in range(i + 1))
            o = (1 - m.lambda_init) * o / torch.sqrt((o * o).mean() + m.norm_eps)
            heads[i, a], heads[i, b] = o[:D], o[D:]
    return heads.flatten(1) @ m.out.weight.T + m.out.bias


@pytest.mark.parametrize("kernel", ["sdpa", "explicit"])
def test_differential_attention_matches_a_float64_loop_of_the_paper_s_equations(kernel):
    cfg = model_config({"d_model": 12, "n_heads": H, "n_kv_heads": KV, "n_layers": 3, "attention_kernel": kernel,
                        "mixer": "differential_attention"})
    m = DifferentialAttention(cfg.mixer.options, cfg, type("Ctx", (), {"index": 2})()).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(B, L, 12, dtype=torch.float64)
    got = m(x, MixerInputs(AttentionMask(None, True, None)))
    for b in range(B):
        # lambda is taken in float32 (as Hugging Face's DiffLlama does), explicit scores too
        torch.testing.assert_close(got[b], diff_loop(m, x[b]), atol=1e-6, rtol=0)


def test_lambda_init_follows_depth_as_in_the_paper_unless_set():
    model = build_model(tiny(n_layers=4, mixer="differential_attention"), 20)
    got = [layer.mixer.sublayer.lambda_init for layer in model.decoder.layers]
    assert got == pytest.approx([0.8 - 0.6 * math.exp(-0.3 * (depth - 1)) for depth in (1, 2, 3, 4)])
    model = build_model(tiny(n_layers=2, mixer={"name": "differential_attention", "lambda_init": 0.5}), 20)
    assert [layer.mixer.sublayer.lambda_init for layer in model.decoder.layers] == [0.5, 0.5]


def test_differential_attention_with_gqa_keeps_every_invariant():
    assert "cache_parity [decoder]" in check_component("mixers", "differential_attention", n_heads=4, n_kv_heads=2,
                                                       position="rope", d_model=16)


class NoSinks(Backend):
    def __call__(self, q, k, v, mask, dropout):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=mask.is_causal), None


@pytest.fixture
def kernel_without_sinks():
    KERNELS.register("nosinks", NoOptions, "a kernel that takes no sinks")(NoSinks)
    yield
    KERNELS.unregister("nosinks")


@pytest.mark.parametrize("override,expected", [
    ("model.attention_kernel=nosinks model.mixer.sinks=true",
     "model.attention_kernel: kernel 'nosinks' cannot take attention sinks (mixer sinks: true); kernels that can: "
     "explicit, sdpa"),
    ("model.mixer=differential_attention model.n_heads=3 model.n_kv_heads=1 model.d_model=48",
     "model.n_heads: differential attention pairs the heads: n_heads must be even, got 3"),
    ("model.mixer=differential_attention model.mixer.lambda_init=1.2", "model.mixer.lambda_init: must be in [0, 1)"),
])
def test_bad_sink_and_differential_settings_are_one_line_errors(override, expected, capsys, kernel_without_sinks):
    code = main(["describe", "preset:llama-tiny", *override.split(" ")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
