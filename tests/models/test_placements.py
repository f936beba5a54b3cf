"""Norm placements (components/placements.py): each formula against a hand-written computation (normed_residual
included), DeepNorm's constants and init against Wang et al. 2022, final-norm defaults, errors, describe."""

import pytest
import torch

from arch_zoo.components.context import LayerContext
from arch_zoo.components.masks import self_attention_mask
from arch_zoo.components.placements import PLACEMENTS, deepnorm_constants, ends_with_norm
from arch_zoo.config.loading import model_config
from arch_zoo.errors import ConfigError
from arch_zoo.models import build_model
from arch_zoo.components.mixers import MixerInputs as StackInputs
from tests.conftest import tiny


def _layer(placement, **changes):
    torch.manual_seed(0)
    model = build_model(tiny(norm_placement=placement, n_layers=2, **changes), 11).eval()
    layer = model.decoder.layers[1]
    for norm in (m for m in layer.modules() if isinstance(m, torch.nn.LayerNorm)):
        torch.nn.init.normal_(norm.weight, 1.0, 0.3)  # gains that are not 1, so a missing norm shows
        torch.nn.init.normal_(norm.bias, 0.0, 0.3)
    return layer


def _run(layer):
    x = torch.randn(2, 5, 16)
    mask = self_attention_mask(None, 5, 0, True, x.device)
    attn = lambda h: layer.mixer.sublayer(h, StackInputs(mask))  # noqa: E731
    ffn = layer.ffn.sublayer
    return x, attn, ffn, layer(x, StackInputs(mask))


def test_pre_norm_is_x_plus_f_of_norm_x():
    layer = _layer("pre")
    x, attn, ffn, out = _run(layer)
    y = x + attn(layer.mixer.norm(x))
    torch.testing.assert_close(out, y + ffn(layer.ffn.norm(y)), rtol=0, atol=0)


def test_post_norm_is_norm_of_x_plus_f_x():
    layer = _layer("post")
    x, attn, ffn, out = _run(layer)
    y = layer.mixer.norm(x + attn(x))
    torch.testing.assert_close(out, layer.ffn.norm(y + ffn(y)), rtol=0, atol=0)


def test_sandwich_norms_before_and_after_each_sublayer():
    """README: sandwich = x + post_norm(f(norm(x))) (Gemma 2)."""
    layer = _layer("sandwich")
    x, attn, ffn, out = _run(layer)
    y = x + layer.mixer.post_norm(attn(layer.mixer.norm(x)))
    torch.testing.assert_close(out, y + layer.ffn.post_norm(ffn(layer.ffn.norm(y))))


def test_normed_residual_carries_alpha_norm_x_plus_beta_f_of_norm_x():
    """MiniMax-01's layers: the residual stream carries the normed input, not x."""
    layer = _layer({"name": "normed_residual", "alpha": 1.7, "beta": 0.6})
    x, attn, ffn, out = _run(layer)
    h = layer.mixer.norm(x)
    y = 1.7 * h + 0.6 * attn(h)
    h = layer.ffn.norm(y)
    torch.testing.assert_close(out, 1.7 * h + 0.6 * ffn(h), rtol=0, atol=1e-6)

def test_deepnorm_scales_the_residual_by_alpha_before_the_post_norm():
    layer = _layer("deepnorm")
    x, attn, ffn, out = _run(layer)
    alpha = (2 * 2) ** 0.25  # decoder-only, 2 layers
    assert layer.placement.alpha == pytest.approx(alpha)
    y = layer.mixer.norm(alpha * x + attn(x))
    torch.testing.assert_close(out, layer.ffn.norm(alpha * y + ffn(y)))


@pytest.mark.parametrize("shared", [True, False])
def test_parallel_adds_both_sublayers_to_the_same_input(shared):
    layer = _layer({"name": "parallel", "shared_norm": shared})
    x, attn, ffn, out = _run(layer)
    ffn_norm = layer.mixer.norm if shared else layer.ffn.norm
    assert hasattr(layer.ffn, "norm") != shared  # shared: one norm per layer (GPT-J); else two (GPT-NeoX)
    torch.testing.assert_close(out, x + attn(layer.mixer.norm(x)) + ffn(ffn_norm(x)))


def _ctx(kind, stack, n, m):
    return LayerContext(0, n if stack == "encoder" else m, stack, kind, n, m)


@pytest.mark.parametrize("kind,stack,n,m,alpha,beta", [
    ("encoder", "encoder", 12, 0, (2 * 12) ** 0.25, (8 * 12) ** -0.25),
    ("decoder", "decoder", 0, 18, (2 * 18) ** 0.25, (8 * 18) ** -0.25),
    ("encoder_decoder", "encoder", 6, 4, 0.81 * (6 ** 4 * 4) ** (1 / 16), 0.87 * (6 ** 4 * 4) ** (-1 / 16)),
    ("encoder_decoder", "decoder", 6, 4, (3 * 4) ** 0.25, (12 * 4) ** -0.25),
])
def test_deepnorm_constants_follow_the_paper(kind, stack, n, m, alpha, beta):
    """Wang et al. 2022, Fig. 2: encoder-only / decoder-only alpha=(2N)^1/4, beta=(8N)^-1/4;
    encoder-decoder encoder 0.81(N^4 M)^1/16, 0.87(N^4 M)^-1/16, decoder (3M)^1/4, (12M)^-1/4."""
    got = deepnorm_constants(_ctx(kind, stack, n, m))
    assert got == pytest.approx((alpha, beta), rel=1e-12)
    assert got[0] > 1 and got[1] < 1


def test_deepnorm_scales_value_output_and_ffn_init_by_beta_and_leaves_q_k():
    """Same seed, same draws: deepnorm's weights are pre-norm's with v, out and FFN times beta."""
    cfg = dict(kind="encoder_decoder", n_layers=3, n_decoder_layers=2, n_kv_heads=1, init="xavier")
    torch.manual_seed(0)
    pre = build_model(tiny(norm_placement="pre", **cfg), 11)
    torch.manual_seed(0)
    deep = build_model(tiny(norm_placement="deepnorm", **cfg), 11)
    for stack, (n, m) in (("encoder", (3, 2)), ("decoder", (3, 2))):
        beta = deepnorm_constants(_ctx("encoder_decoder", stack, n, m))[1]
        for a, b in zip(getattr(pre, stack).layers, getattr(deep, stack).layers):
            qk = (2 + 1) * 8  # n_heads 2 + n_kv_heads 1, head_dim 8
            torch.testing.assert_close(b.mixer.sublayer.qkv.weight[:qk], a.mixer.sublayer.qkv.weight[:qk])
            torch.testing.assert_close(b.mixer.sublayer.qkv.weight[qk:], beta * a.mixer.sublayer.qkv.weight[qk:])
            torch.testing.assert_close(b.mixer.sublayer.out.weight, beta * a.mixer.sublayer.out.weight)
            torch.testing.assert_close(b.ffn.sublayer.up.weight, beta * a.ffn.sublayer.up.weight)
            torch.testing.assert_close(b.ffn.sublayer.down.weight, beta * a.ffn.sublayer.down.weight)
            if stack == "decoder":
                cross_a, cross_b = a.cross_attn.sublayer, b.cross_attn.sublayer
                torch.testing.assert_close(cross_b.q.weight, cross_a.q.weight)
                torch.testing.assert_close(cross_b.kv.weight[:8], cross_a.kv.weight[:8])
                torch.testing.assert_close(cross_b.kv.weight[8:], beta * cross_a.kv.weight[8:])


@pytest.mark.parametrize("name", PLACEMENTS.choices())
def test_the_final_norm_default_is_declared_by_the_placement(name):
    model = build_model(tiny(norm_placement=name), 11)
    declared = PLACEMENTS.get(name).factory.final_norm
    assert ends_with_norm(model_config(tiny(norm_placement=name))) == declared
    assert isinstance(model.decoder.final_norm, torch.nn.LayerNorm) == declared
    forced = build_model(tiny(norm_placement=name, final_norm=not declared), 11)
    assert isinstance(forced.decoder.final_norm, torch.nn.LayerNorm) != declared


@pytest.mark.parametrize("name", PLACEMENTS.choices())
def test_every_placement_trains_a_step_and_keeps_gradients_finite(name):
    kind = "encoder_decoder" if PLACEMENTS.get(name).factory.cross_attention else "decoder"
    torch.manual_seed(0)
    model = build_model(tiny(kind=kind, norm_placement=name), 11)
    ids = torch.randint(1, 11, (2, 6))
    out = model(ids, ids) if kind == "encoder_decoder" else model(ids)
    out.logits.logsumexp(-1).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_parallel_has_no_cross_attention_form():
    with pytest.raises(ConfigError) as err:
        model_config(tiny(kind="encoder_decoder", norm_placement="parallel"))
    assert err.value.key == "model.norm_placement" and "pre" in str(err.value)


def test_bare_names_and_options_parse_and_bad_ones_list_the_choices():
    assert model_config(tiny(norm_placement="post")).norm_placement.name == "post"
    with pytest.raises(ConfigError) as err:
        model_config(tiny(norm_placement="sandwhich"))
    assert "sandwich" in str(err.value) and err.value.key == "model.norm_placement"
    with pytest.raises(ConfigError) as err:
        model_config(tiny(norm_placement={"name": "parallel", "shared": True}))
    assert err.value.key == "model.norm_placement.shared"


def test_describe_shows_the_placement_formula():
    from arch_zoo.config import ExperimentConfig
    from arch_zoo.describe import describe_text

    text = describe_text(ExperimentConfig(model=model_config(tiny(norm_placement="sandwich"))), vocab_size=11)
    assert "placement sandwich: x + post_norm(f(norm(x))); final norm yes" in text


def test_the_shipped_blocks_spec_plans_every_placement_parameter_matched():
    """README (Sweeps): "`blocks` (pre / post / sandwich / deepnorm / parallel, parameter-matched)"."""
    from pathlib import Path

    from arch_zoo.sweeps import load_spec, make_plan

    spec = load_spec(Path(__file__).resolve().parents[2] / "sweeps" / "blocks.yaml", ["task.max_chars=20000"])
    plan = make_plan(spec)  # the corpus shrunk: the plan needs only its tokenizer
    first_seed = [r for r in plan.runs if r.seed == 0]
    assert [r.config.model.norm_placement.name for r in first_seed] == ["pre", "post", "sandwich", "deepnorm", "parallel"]
    baseline = next(r.params for r in first_seed if r.is_baseline)
    assert all(abs(r.params - baseline) <= 0.01 * baseline for r in plan.runs)
    assert {r.config.model.d_ff for r in first_seed} != {512}  # some variant was adjusted to match
