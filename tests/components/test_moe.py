"""Mixture-of-experts feed-forward: routing, the load-balancing loss, counts, and training."""
import csv
import math

import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.feedforward import FEEDFORWARD, FFNContext
from arch_zoo.components.moe import (MixtureOfExperts, load_balancing_loss, pooled_load_balancing_loss,
                                     router_aux_loss)
from arch_zoo.models import build_model
from arch_zoo.models.mfu import train_flops_per_token
from arch_zoo.models.summary import active_parameters, count_parameters, flops_per_token
from tests.conftest import tiny

CTX = FFNContext(d_model=8, d_ff=12, bias=False, dropout=0.0)


def _moe(n_experts=4, top_k=2, expert="swiglu", **opts):
    torch.manual_seed(0)
    spec = FEEDFORWARD.parse({"name": "moe", "n_experts": n_experts, "top_k": top_k, "expert": expert, **opts}, "ffn")
    return FEEDFORWARD.build(spec, CTX)


@pytest.mark.parametrize("top_k", [1, 2, 4])
def test_each_token_gets_its_top_k_experts_weighted_by_the_renormalised_router_softmax(top_k):
    """README model keys: `moe` — top_k of n_experts per token, weights softmax-renormalised over the
    chosen ones (Mixtral). The reference runs one token at a time."""
    moe = _moe(top_k=top_k)
    x = torch.randn(3, 5, 8)
    out = moe(x)
    for b in range(3):
        for t in range(5):
            logits = moe.router(x[b, t])
            chosen = logits.topk(top_k).indices
            weights = logits[chosen].softmax(-1)  # a softmax over the chosen logits alone
            expected = sum(w * moe.experts[int(e)](x[b, t]) for w, e in zip(weights, chosen))
            torch.testing.assert_close(out[b, t], expected, atol=1e-6, rtol=1e-5)


def test_the_moe_block_equals_hugging_face_mixtrals():
    """README model keys: `moe` follows Hugging Face's Mixtral router and experts exactly."""
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    from transformers import MixtralConfig

    moe = _moe(n_experts=4, top_k=2)
    config = MixtralConfig(hidden_size=8, intermediate_size=12, num_local_experts=4, num_experts_per_tok=2)
    ref = mixtral.MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        ref.gate.weight.copy_(moe.router.weight)
        for e, expert in enumerate(moe.experts):
            ref.experts.gate_up_proj[e].copy_(torch.cat((expert.gate.weight, expert.up.weight)))
            ref.experts.down_proj[e].copy_(expert.down.weight)
    x = torch.randn(2, 7, 8)
    torch.testing.assert_close(moe(x), ref(x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(load_balancing_loss(moe.router_logits, 2),
                               mixtral.load_balancing_loss_func((moe.router_logits.view(-1, 4),), 4, 2))
    mask = torch.tensor([[1] * 7, [0] * 3 + [1] * 4])
    torch.testing.assert_close(load_balancing_loss(moe.router_logits, 2, mask),
                               mixtral.load_balancing_loss_func((moe.router_logits.view(-1, 4),), 4, 2, mask))


def test_load_balancing_loss_by_hand():
    """n_experts * sum_e f_e * P_e: 4 tokens, 2 experts, top-1. Tokens 0-2 prefer expert 0 (router
    probabilities 0.9, 0.8, 0.6), token 3 expert 1 (0.3): f = [3/4, 1/4], P = [0.65, 0.35]."""
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [0.3, 0.7]])
    logits = probs.log()
    expected = 2 * (0.75 * 0.65 + 0.25 * 0.35)
    assert load_balancing_loss(logits, 1).item() == pytest.approx(expected)
    # padded tokens are left out: without token 0, f = [2/3, 1/3] and P = [0.5667, 0.4333]
    mask = torch.tensor([0, 1, 1, 1])
    assert load_balancing_loss(logits, 1, mask).item() == pytest.approx(2 * (2 / 3 * 1.7 / 3 + 1 / 3 * 1.3 / 3))
    # perfectly balanced routing gives top_k; routing collapsed onto one expert gives more
    assert load_balancing_loss(torch.zeros(6, 3), 2).item() == pytest.approx(2.0)
    assert load_balancing_loss(torch.tensor([[5.0, 0.0, 0.0]] * 6), 1).item() > 2.5


def test_the_model_aux_loss_is_the_weighted_mean_over_moe_layers():
    model = build_model(tiny(n_layers=3, ffn={"name": "moe", "n_experts": 4, "top_k": 2, "aux_loss_weight": 0.5}), 30)
    assert router_aux_loss(model, {"decoder": None}) is None  # nothing routed yet
    ids = torch.randint(1, 30, (2, 6))
    model(ids)
    layers = [m for m in model.modules() if isinstance(m, MixtureOfExperts)]
    expected = sum(0.5 * load_balancing_loss(m.router_logits, 2) for m in layers) / 3
    torch.testing.assert_close(router_aux_loss(model, {"decoder": None}), expected)
    assert router_aux_loss(build_model(tiny(), 30), {"decoder": None}) is None


def _skewed_layers(n_layers=3, tokens=14, n_experts=4):
    """Router logits of layers that favour different experts: pooling them then differs from averaging."""
    g = torch.Generator().manual_seed(0)
    return [torch.randn(tokens, n_experts, generator=g) + 2.0 * torch.eye(n_experts)[i % n_experts]
            for i in range(n_layers)]


def test_pooled_loss_is_hugging_faces_load_balancing_loss_func_over_all_layers():
    """HF's load_balancing_loss_func pools counts and probabilities over the layers before the
    product; the per-layer mean is another number (a few percent apart here)."""
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    layers = _skewed_layers()
    mask = torch.tensor([[1] * 7, [0] * 3 + [1] * 4])  # (2, 7): the 14 tokens, three of them padding
    for m in (None, mask):
        hf = mixtral.load_balancing_loss_func(tuple(layers), 4, 2, m)
        torch.testing.assert_close(pooled_load_balancing_loss(layers, 2, m), hf)
        mean = torch.stack([load_balancing_loss(x, 2, m) for x in layers]).mean()
        assert abs(mean / hf - 1) > 0.01, (mean, hf)


@pytest.mark.parametrize("layers", ["mean", "pooled"])
def test_the_model_aux_loss_over_layers_is_the_mean_or_the_pooled_loss(layers):
    """README model keys: `moe` — `aux_loss_layers: mean` averages the layers' losses, `pooled` is HF's
    load_balancing_loss_func over all layers' router logits (padding left out in both)."""
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    model = build_model(tiny(n_layers=3, ffn={"name": "moe", "n_experts": 4, "top_k": 2, "aux_loss_weight": 0.5,
                                              "aux_loss_layers": layers}), 30)
    ids, mask = torch.randint(1, 30, (2, 6)), torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    model(ids, mask)
    logits = [m.router_logits for m in model.modules() if isinstance(m, MixtureOfExperts)]
    mean = sum(0.5 * load_balancing_loss(x, 2, mask) for x in logits) / 3
    pooled = 0.5 * mixtral.load_balancing_loss_func(tuple(x.view(-1, 4) for x in logits), 4, 2, mask)
    torch.testing.assert_close(router_aux_loss(model, {"decoder": mask}), mean if layers == "mean" else pooled)


def test_mean_and_pooled_layers_in_one_model_each_count_per_layer():
    """Per-layer settings may mix the two: a mean layer counts as its own loss, the pooled layers' one
    loss once per layer it pools, and the model's aux loss is the mean over layers."""
    moe = {"name": "moe", "n_experts": 4, "top_k": 2, "aux_loss_weight": 0.5, "aux_loss_layers": "pooled"}
    model = build_model(tiny(n_layers=3, ffn=moe, layers=[{"range": "0:1", "ffn": {**moe, "aux_loss_layers": "mean"}}]),
                        30)
    model(torch.randint(1, 30, (2, 6)))
    first, *rest = [m.router_logits for m in model.modules() if isinstance(m, MixtureOfExperts)]
    expected = (0.5 * load_balancing_loss(first, 2) + 2 * 0.5 * pooled_load_balancing_loss(rest, 2)) / 3
    torch.testing.assert_close(router_aux_loss(model, {"decoder": None}), expected)


def test_describe_says_how_the_aux_loss_combines_layers(capsys):
    for layers, words in (("mean", "the mean of each MoE layer's own loss"),
                          ("pooled", "one loss over all MoE layers' routing pooled (HF Mixtral's)")):
        assert main(["describe", "preset:llama-tiny", "model.ffn=moe", f"model.ffn.aux_loss_layers={layers}",
                     "--vocab-size", "100"]) == 0
        assert f"training adds 0.01 x the load-balancing loss: {words}" in capsys.readouterr().out
    assert main(["describe", "preset:mixtral-tiny", "--vocab-size", "100"]) == 0
    assert "aux_loss_layers=pooled" in capsys.readouterr().out


def test_total_and_active_parameters_and_flops_count_only_the_routed_experts():
    """README model keys: `moe` — `describe` and run summaries report total and active parameters;
    FLOPs per token count only the top_k experts a token runs through."""
    moe_cfg = tiny(n_layers=2, d_model=16, d_ff=24, bias=False, ffn={"name": "moe", "n_experts": 4, "top_k": 2})
    dense_cfg = tiny(n_layers=2, d_model=16, d_ff=24, bias=False, ffn="swiglu")
    moe, dense = build_model(moe_cfg, 30), build_model(dense_cfg, 30)
    expert = 3 * 16 * 24
    router = 16 * 4
    assert count_parameters(moe) == count_parameters(dense) + 2 * (3 * expert + router)
    assert active_parameters(moe) == count_parameters(dense) + 2 * (expert + router)
    assert active_parameters(dense) == count_parameters(dense)
    f_moe, f_dense = flops_per_token(moe, 32), flops_per_token(dense, 32)
    assert f_moe["decoder matmuls"] == f_dense["decoder matmuls"] + 2 * (2 * expert + 2 * router)
    assert train_flops_per_token(moe, 32) == 3 * f_moe["total"]


def test_describe_reports_total_and_active_parameters(capsys):
    code = main(["describe", "preset:llama-tiny", "model.ffn=moe", "model.ffn.n_experts=4", "--vocab-size", "100"])
    out = capsys.readouterr().out
    assert code == 0
    assert "308,544 total, 173,376 active per token" in out  # 2 layers x 2 unused experts x 3 x 64 x 176
    assert "active experts only" in out


@pytest.mark.outcome
def test_moe_trains_and_logs_its_aux_loss(tmp_path):
    """README model keys: `moe` — the load-balancing loss is added to the training loss and logged as
    train/aux_loss; a tiny MoE language model learns (its loss falls well below the start)."""
    from arch_zoo.experiment import load
    from arch_zoo.training import run_one

    cfg = load({"name": "moe", "seed": 0, "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
                "model": tiny(n_layers=2, d_model=32, d_ff=32, position="rope",
                              ffn={"name": "moe", "n_experts": 4, "top_k": 2, "aux_loss_weight": 0.1}),
                "train": {"max_steps": 40, "batch_size": 8, "lr": 3e-3, "val_every": 40, "val_batches": 2,
                          "log_every": 5, "progress_bar": False}})
    result = run_one(cfg, tmp_path / "run", quiet=True)
    assert result.status == "completed"
    rows = [r for r in csv.DictReader(open(tmp_path / "run" / "metrics.csv")) if r.get("train/aux_loss")]
    aux = [float(r["train/aux_loss"]) for r in rows]
    loss = [float(r["train/loss"]) for r in rows]
    assert len(aux) >= 5 and all(0.1 * 1.5 < a < 0.1 * 4 for a in aux)  # weight x about top_k (balanced) at most n_experts
    assert loss[-1] < loss[0] - 0.5 and loss[0] > math.log(20)  # from near uniform over the characters
    assert result.summary["active_parameters"] < result.summary["parameters"]


@pytest.mark.parametrize("override,expected", [
    ("model.ffn.top_k=5", "model.ffn.top_k: must be between 1 and n_experts (4), got 5"),
    ("model.ffn.n_experts=0", "model.ffn.n_experts: must be positive, got 0"),
    ("model.ffn.expert=swigl", "model.ffn.expert: unknown feed-forward for an expert 'swigl' (did you mean 'swiglu'?)"),
    ("model.ffn.expert=moe", "model.ffn.expert: unknown feed-forward for an expert 'moe'"),
    ("model.ffn.aux_loss_weight=-1", "model.ffn.aux_loss_weight: must be >= 0"),
    ("model.ffn.aux_loss_layers=pool", "model.ffn.aux_loss_layers: unknown way to combine layers' aux losses 'pool' "
                                       "(did you mean 'pooled'?); choices: mean, pooled"),
])
def test_bad_moe_settings_are_one_line_errors(override, expected, capsys):
    """README: "A user mistake prints one line and exits 2"."""
    code = main(["describe", "preset:llama-tiny", "model.ffn=moe", "model.ffn.n_experts=4", override])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err
