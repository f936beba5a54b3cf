"""Issue 28: `model.parametrization` (standard, mup). The coordinate check is the `mup` package's
standard test (Yang et al. 2022, Fig. 5), run against arch_zoo's own model and optimizer factory:
after a few Adam steps every layer's mean |activation| stays flat across widths 32-256 under mup
and grows with width under standard."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from arch_zoo.components.parametrization import HIDDEN, INPUT, OUTPUT, VECTOR, parameter_roles
from arch_zoo.config import TrainConfig
from arch_zoo.config.parse import from_dict
from arch_zoo.errors import ConfigError
from arch_zoo.config.loading import model_config
from arch_zoo.models import build_model
from arch_zoo.recipes import build_optimizer
from tests.conftest import tiny

VOCAB = 64


def build(seed=0, **cfg):
    torch.manual_seed(seed)
    return build_model(tiny(**cfg), VOCAB)


def mup(base):
    return {"name": "mup", "base_width": base}


def test_roles_follow_the_modules_holding_each_parameter():
    model = build(d_model=16, tie_embeddings=False, bias=True)
    roles = {name: role for name, _, role in parameter_roles(model)}
    linears = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert {n for n, r in roles.items() if r == HIDDEN} == linears - {"head.proj.weight"}
    assert {n for n, r in roles.items() if r == OUTPUT} == {"head.proj.weight"}
    assert {n for n, r in roles.items() if r == INPUT} == {"embed.weight"}
    assert all(p.dim() == 1 for n, p in model.named_parameters() if roles[n] == VECTOR)
    tied = {name: role for name, _, role in parameter_roles(build(d_model=16))}
    assert "head.proj.weight" not in tied and tied["embed.weight"] == INPUT  # a tied readout is the embedding


def test_at_base_width_mup_is_standard_but_for_the_attention_scale():
    """Issue 28 §2: with d_model = base_width, mup equals standard apart from q.k / head_dim."""
    wide = {"d_model": 32, "n_heads": 4, "init": {"name": "normal", "std": 0.3}}  # scores far from uniform
    std, mu = build(**wide), build(**wide, parametrization=mup(32))
    assert all(torch.equal(a, b) for a, b in zip(std.state_dict().values(), mu.state_dict().values()))
    ids = torch.randint(1, VOCAB, (2, 9))
    with torch.no_grad():
        assert not torch.allclose(std(ids).logits, mu(ids).logits, atol=1e-2)
        same_scale = build(**wide, attention_scale=1 / 8)  # head_dim 8
        torch.testing.assert_close(same_scale(ids).logits, mu(ids).logits, atol=0, rtol=0)


def test_mup_scales_hidden_init_logits_and_adam_lrs_by_the_width_multiplier():
    """Width 4x base: hidden matrices drawn at std / 2 (variance / 4), the rest as standard; logits * 1/4;
    the vocabulary is as wide as d_model (64), so only the head can tell the readout from a hidden matrix;
    Adam lr / 4 and weight decay * 4 on hidden matrices only, the lr of every other group untouched."""
    std = build(d_model=64, tie_embeddings=False, bias=True)
    mu = build(d_model=64, tie_embeddings=False, bias=True, parametrization=mup(16))
    hidden = {n for n, m in std.named_modules() if isinstance(m, nn.Linear) and n != "head.proj"}
    for (name, a), b in zip(std.named_parameters(), mu.parameters()):
        expected = a * 0.5 if name.removesuffix(".weight") in hidden and name.endswith(".weight") else a
        assert torch.equal(expected, b), name
    ids = torch.randint(1, VOCAB, (2, 5))
    with torch.no_grad():
        h = mu.decoder(mu.embed(ids))
        torch.testing.assert_close(mu(ids).logits, mu.head(h) / 4, atol=0, rtol=0)
    train = from_dict(TrainConfig, {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.1}, "train")
    groups = build_optimizer(mu, train).optimizer.param_groups
    by_param = {id(p): g for g in groups for p in g["params"]}
    for name, p in mu.named_parameters():
        g = by_param[id(p)]
        if name.removesuffix(".weight") in hidden and name.endswith(".weight"):
            assert (g["lr"], g["weight_decay"]) == (pytest.approx(1e-3 / 4), pytest.approx(0.4)), name
        else:
            assert g["lr"] == 1e-3, name


def test_mup_multiplies_the_readouts_product_not_its_bias():
    """Tensor Programs V (Table 3: all biases train at a width-independent Adam lr, multiplier 1) and
    mup's MuReadout (logits = W (x / m) + b): the 1/m is the readout weight's. On the whole logits it
    would also shrink the bias's effect, and so its effective Adam lr, by m."""
    mu = build(d_model=64, tie_embeddings=False, head={"name": "lm", "bias": True}, parametrization=mup(16))
    with torch.no_grad():
        mu.head.proj.bias.normal_()  # zero at init: give it a value the logits must carry whole
        ids = torch.randint(1, VOCAB, (2, 5))
        h = mu.decoder(mu.embed(ids))
        b = mu.head.proj.bias
        torch.testing.assert_close(mu(ids).logits, (mu.head(h) - b) / 4 + b)


def test_mup_holds_fan_scaled_init_of_embeddings_at_the_base_width():
    """Xavier's std shrinks with fan-in + fan-out; mup keeps embeddings and the readout at the
    std Xavier draws at base width (sqrt(2 / (vocab + base_width))) and the hidden matrices as drawn."""
    vocab, width, base = 2000, 64, 16
    torch.manual_seed(0)
    mu = build_model(tiny(d_model=width, init="xavier", parametrization=mup(base)), vocab)
    torch.manual_seed(0)
    std = build_model(tiny(d_model=width, init="xavier"), vocab)
    assert mu.embed.weight.std().item() == pytest.approx(math.sqrt(2 / (vocab + base)), rel=0.02)
    assert torch.equal(mu.decoder.layers[0].ffn.sublayer.up.weight, std.decoder.layers[0].ffn.sublayer.up.weight)


def test_mup_rescales_only_the_width_side_of_a_table_as_long_as_the_width():
    """A table's width side is its last (nn.Embedding (rows, d_model), a readout (vocab, d_model)); a
    vocabulary (or a learned position table) exactly d_model long is not a width, so the table keeps
    Xavier's base-width std sqrt(2 / (rows + base_width)), not sqrt(2 / (2 base_width))."""
    width, base = 256, 16
    torch.manual_seed(0)
    mu = build_model(tiny(d_model=width, init="xavier", parametrization=mup(base)), width)
    assert mu.embed.weight.std().item() == pytest.approx(math.sqrt(2 / (width + base)), rel=0.02)


def test_mup_with_scale_embeddings_holds_the_multiplier_at_sqrt_base_width():
    mu = build(d_model=64, scale_embeddings=True, parametrization=mup(16))
    assert mu.embed.multiplier == 4.0 and build(d_model=64, scale_embeddings=True).embed.multiplier == 8.0


@pytest.mark.parametrize("changes, key, text", [
    ({"parametrization": "mup"}, "model.parametrization.base_width", "mup needs base_width"),
    ({"parametrization": mup(32)}, "model.parametrization.base_width", "is 32, above d_model (16)"),
    ({"parametrization": mup(8), "head": {"name": "lm", "scale_input": True}}, "model.head.scale_input", "mup sets"),
])
def test_mup_refuses_what_its_rules_cannot_serve(changes, key, text):
    with pytest.raises(ConfigError) as err:
        model_config(tiny(**changes))
    assert err.value.key == key and text in err.value.message


def _coordinates(width, parametrization, steps=3, lr=1e-2):
    """Mean |activation| of every sublayer, every layer and the logits after ``steps`` Adam steps."""
    torch.manual_seed(0)
    model = build_model({"kind": "decoder", "d_model": width, "n_layers": 2, "n_heads": 4, "d_ff": 4 * width,
                         "max_seq_len": 16, "tie_embeddings": False, "parametrization": parametrization}, VOCAB)
    optimizer = build_optimizer(model, from_dict(TrainConfig, {"optimizer": "adam", "lr": lr}, "train")).optimizer
    ids = torch.randint(0, VOCAB, (8, 16), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        logits = model(ids[:, :-1]).logits
        F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()
    coords = {}
    watched = [(n, m) for n, m in model.named_modules()
               if n.endswith(("mixer.sublayer", "ffn.sublayer")) or (n.startswith("decoder.layers.") and n.count(".") == 2)]
    hooks = [m.register_forward_hook(lambda mod, inp, out, n=n: coords.__setitem__(n, out.abs().mean().item()))
             for n, m in watched]
    with torch.no_grad():
        coords["logits"] = model(ids[:, :-1]).logits.abs().mean().item()
    for h in hooks:
        h.remove()
    return coords


@pytest.mark.outcome
def test_coordinate_check_flat_under_mup_growing_under_standard():
    """Issue 28 §3. Measured: under mup every coordinate stays within 2x across widths 32-256 (max / min);
    under standard every sublayer and layer output grows 10-170x from width 32 to 256."""
    widths = (32, 64, 128, 256)
    mu = [_coordinates(w, mup(32)) for w in widths]
    std = [_coordinates(w, "standard") for w in widths]
    for name in mu[0]:
        values = [c[name] for c in mu]
        assert max(values) / min(values) < 3, (name, values)
        if name != "logits":
            assert std[-1][name] / std[0][name] > 4, (name, [c[name] for c in std])


def test_describe_says_the_parametrization_and_its_attention_scale(capsys):
    from arch_zoo.cli import main

    assert main(["describe", "preset:decoder-small", 'model.parametrization={"name":"mup","base_width":64}',
                 "--vocab-size", "50"]) == 0
    out = capsys.readouterr().out
    model = model_config("preset:decoder-small")
    assert f"q.k scaled by {1 / model.dim_per_head:g} (the parametrization's, mup)" in out
    assert f"parametrization mup(base_width=64): mup at width multiplier {model.d_model / 64:g}" in out


@pytest.mark.parametrize("adjust", [None, "match_rms_adamw"])
def test_under_mup_a_muon_step_moves_a_hidden_layers_output_alike_at_every_width(adjust):
    """The µP condition on an update (Yang et al. 2022; spectral form: Yang, Simon & Bernstein 2023):
    a hidden matrix's step changes its output coordinates by an amount independent of width. One
    torch.optim.Muon step on an n x n matrix with a rank-one gradient u x^T (x with O(1) entries), at
    train.lr times mup's multiplier for the update kind the muon recipe declares: |dW x| / |x| must
    not change from width 32 to 256. Independent arithmetic: original Muon's step has spectral norm
    lr (sqrt(max(1, rows/cols)) = 1 for a square matrix), so its multiplier is 1; match_rms_adamw's
    has 0.2 sqrt(n) lr, so it needs 1/sqrt(m), not Adam's 1/m."""
    from arch_zoo.components.parametrization import PARAMETRIZATIONS
    from arch_zoo.recipes import optimizer_recipe

    train = from_dict(TrainConfig, {"optimizer": {"name": "muon", "adjust_lr_fn": adjust}, "lr": 1e-2}, "train")
    update = optimizer_recipe(train).matrix_update
    moved = []
    for n in (32, 256):
        cfg = model_config(tiny(d_model=n, n_heads=4, parametrization=mup(32)))
        rule = PARAMETRIZATIONS.build(cfg.parametrization, cfg)
        g = torch.Generator().manual_seed(n)
        x, u = torch.randn(n, generator=g), torch.randn(n, generator=g)
        w = nn.Parameter(torch.zeros(n, n))
        w.grad = torch.outer(u, x)
        torch.optim.Muon([w], lr=1e-2 * rule.lr_multiplier(HIDDEN, update), weight_decay=0.0, momentum=0.0,
                         nesterov=False, adjust_lr_fn=adjust).step()
        moved.append(float((w.detach() @ x).norm() / x.norm()))
    assert moved[1] / moved[0] == pytest.approx(1.0, rel=0.1), moved


@pytest.mark.parametrize("adjust, factor", [(None, 1.0), ("match_rms_adamw", 2.0)])
def test_the_muon_recipe_gives_its_hidden_groups_mups_rule_and_the_rest_adams(adjust, factor):
    """Width 4x base: the Muon part's lr / 1 (original) or / sqrt(4) (match_rms_adamw), decay * the same
    factor; the AdamW part (embeddings, readout, vectors) at train.lr, as at base width."""
    mu = build(d_model=64, tie_embeddings=False, parametrization=mup(16))
    train = from_dict(TrainConfig, {"optimizer": {"name": "muon", "adjust_lr_fn": adjust}, "lr": 1e-2,
                                    "weight_decay": 0.1}, "train")
    groups = build_optimizer(mu, train).groups
    assert [(g["lr"], g["weight_decay"]) for g in groups if g["part"] == "muon"] == \
        [(pytest.approx(1e-2 / factor), pytest.approx(0.1 * factor))]
    assert {g["lr"] for g in groups if g["part"] == "adamw"} == {1e-2}
