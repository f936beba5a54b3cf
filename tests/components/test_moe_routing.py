"""Mixture-of-experts routing as DeepSeek-V3, Qwen3-Next and gpt-oss use it: shared experts (and their
gate), softmax or sigmoid scores, group-limited top-k, routed scaling, a router bias, and
auxiliary-loss-free balancing. Each against a plain loop over tokens and experts, or Hugging Face."""
import pytest
import torch

from arch_zoo.cli import main
from arch_zoo.components.feedforward import FEEDFORWARD, FFNContext
from arch_zoo.components.moe import MixtureOfExperts, router_aux_loss
from arch_zoo.models import build_model
from arch_zoo.models.summary import active_parameters, count_parameters
from arch_zoo.training.objectives import Objective
from tests.conftest import tiny

CTX = FFNContext(d_model=8, d_ff=12, bias=False, dropout=0.0)


def _moe(**opts):
    spec = FEEDFORWARD.parse({"name": "moe", **opts}, "ffn")
    moe = FEEDFORWARD.build(spec, CTX)
    with torch.no_grad():  # weights of the usual scale, so a wrong choice shows in the output
        for p in moe.parameters():
            p.normal_(0, 0.5)
        if hasattr(moe, "score_bias"):
            moe.score_bias.normal_(0, 0.3)
    return moe


def _reference(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """One token at a time, one expert at a time: the routing written out from the papers' formulas."""
    o = moe.options
    per_group = o.n_experts // o.n_group
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        logits = [float(moe.router.weight[e] @ x[t]) + (float(moe.router.bias[e]) if o.router_bias else 0.0)
                  for e in range(o.n_experts)]
        if o.scoring == "softmax":
            z = sum(torch.tensor(logits, dtype=torch.float64).exp().tolist())
            scores = [float(torch.tensor(l, dtype=torch.float64).exp()) / z for l in logits]
        else:
            scores = [1 / (1 + float(torch.tensor(-l, dtype=torch.float64).exp())) for l in logits]
        choice = [s + (float(moe.score_bias[e]) if o.selection_bias else 0.0) for e, s in enumerate(scores)]
        group_score = [sum(sorted(choice[g * per_group:(g + 1) * per_group], reverse=True)[:2])
                       for g in range(o.n_group)]
        groups = sorted(range(o.n_group), key=lambda g: -group_score[g])[:o.topk_group]
        candidates = [e for e in range(o.n_experts) if e // per_group in groups]
        chosen = sorted(candidates, key=lambda e: -choice[e])[:o.top_k]
        weights = [scores[e] for e in chosen]
        if o.norm_topk_prob:
            weights = [w / sum(weights) for w in weights]
        for w, e in zip(weights, chosen):
            out[t] += w * o.routed_scaling_factor * moe.experts[e](x[t])
        if o.n_shared_experts:
            gate = torch.sigmoid(moe.shared_gate.weight[0] @ x[t]) if o.shared_gate else 1.0
            out[t] += gate * moe.shared(x[t])
    return out


CASES = {
    "mixtral": {},
    "unnormalised softmax": {"norm_topk_prob": False},
    "router bias": {"router_bias": True, "top_k": 1},
    "sigmoid, scaled": {"scoring": "sigmoid", "routed_scaling_factor": 2.5},
    "deepseek-v3": {"n_experts": 8, "top_k": 3, "scoring": "sigmoid", "n_group": 4, "topk_group": 2,
                    "selection_bias": True, "routed_scaling_factor": 2.5, "n_shared_experts": 1, "d_ff": 6},
    "groups of softmax scores": {"n_experts": 6, "top_k": 2, "n_group": 3, "topk_group": 1},
    "qwen3-next": {"n_experts": 6, "top_k": 3, "n_shared_experts": 1, "shared_d_ff": 10, "shared_gate": True,
                   "d_ff": 4},
    "two shared experts": {"n_shared_experts": 2, "d_ff": 5},
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_routing_option_equals_a_loop_over_tokens_and_experts(case):
    """README model keys: `moe` — scores, groups, selection bias, scaling and shared experts."""
    moe = _moe(**{"n_experts": 4, "top_k": 2, **CASES[case]})
    x = torch.randn(9, 8)
    with torch.no_grad():
        torch.testing.assert_close(moe(x.view(3, 3, 8)).view(9, 8), _reference(moe, x), atol=1e-5, rtol=1e-5)


def test_the_selection_bias_changes_the_choice_not_the_weights():
    """With a bias that favours expert 3 by far, every token picks it, weighted by its plain score."""
    moe = _moe(n_experts=4, top_k=1, scoring="sigmoid", selection_bias=True, norm_topk_prob=False)
    with torch.no_grad():
        moe.score_bias.copy_(torch.tensor([0.0, 0.0, 0.0, 10.0]))
    x = torch.randn(5, 8)
    with torch.no_grad():
        out = moe(x)
        expected = torch.stack([torch.sigmoid(moe.router.weight[3] @ x[t]) * moe.experts[3](x[t]) for t in range(5)])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    assert "score_bias" not in dict(moe.named_parameters())  # no gradient: a buffer
    assert "score_bias" in moe.state_dict()  # saved with the checkpoint


def test_aux_loss_free_balancing_moves_the_bias_by_hand():
    """DeepSeek-V3: after a training step's forward, b_e += speed * sign(mean load - load_e), over
    the real tokens. Tokens choose experts 0, 0, 0, 1 (top-1): load [3, 1, 0, 0], mean 1."""
    moe = _moe(n_experts=4, top_k=1, scoring="sigmoid", selection_bias=True, bias_update_speed=0.01)
    with torch.no_grad():
        moe.score_bias.zero_()
    moe.routing = (torch.full((4, 4), 0.25), torch.tensor([[0], [0], [0], [1]]))
    moe.update_selection_bias(None)
    torch.testing.assert_close(moe.score_bias, torch.tensor([-0.01, 0.0, 0.01, 0.01]))
    # token 0 padded: load [2, 1, 0, 0], mean 0.75 -> down, down, up, up
    moe.update_selection_bias(torch.tensor([0, 1, 1, 1]))
    torch.testing.assert_close(moe.score_bias, torch.tensor([-0.02, -0.01, 0.02, 0.02]))


def test_the_training_objective_updates_the_selection_bias_from_the_forward_it_ran():
    moe = {"name": "moe", "n_experts": 4, "top_k": 2, "scoring": "sigmoid", "selection_bias": True,
           "bias_update_speed": 0.001, "aux_loss_weight": 0.0}
    model = build_model(tiny(n_layers=2, ffn=moe), 30)
    ids, mask = torch.randint(1, 30, (2, 6)), torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    model(ids, mask)
    layers = [m for m in model.modules() if isinstance(m, MixtureOfExperts)]
    expected = []
    for m in layers:  # the loads counted by hand from the experts each real token chose
        load = [0.0] * 4
        for t, (row, real) in enumerate(zip(m.routing[1].tolist(), mask.reshape(-1).tolist())):
            for e in row:
                load[e] += real
        mean = sum(load) / 4
        expected.append(torch.tensor([0.001 * ((mean > l) - (mean < l)) for l in load]))
    aux = Objective().aux_loss(model, {"input_ids": ids, "attention_mask": mask})
    assert aux is not None and aux.item() == 0.0  # the aux loss itself is off
    for m, e in zip(layers, expected):
        torch.testing.assert_close(m.score_bias, e)
    assert any(bool(e.abs().sum()) for e in expected)


def test_sigmoid_aux_loss_counts_the_chosen_experts_and_normalised_scores():
    """f_e: the experts actually chosen (group limit and bias included); P_e: each token's sigmoid
    scores divided by their sum."""
    model = build_model(tiny(n_layers=1, ffn={"name": "moe", "n_experts": 4, "top_k": 2, "scoring": "sigmoid",
                                              "n_group": 2, "topk_group": 1, "aux_loss_weight": 1.0}), 30)
    model(torch.randint(1, 30, (2, 5)))
    m = next(m for m in model.modules() if isinstance(m, MixtureOfExperts))
    scores = m.router_logits.reshape(-1, 4).double().sigmoid()
    probs = scores / scores.sum(-1, keepdim=True)
    f = torch.zeros(4, dtype=torch.float64)
    for row in m.routing[1].tolist():
        assert row[0] // 2 == row[1] // 2  # both from one group
        for e in row:
            f[e] += 1 / 10
    expected = 4 * (f * probs.mean(0)).sum()
    torch.testing.assert_close(router_aux_loss(model, {"decoder": None}).double(), expected, rtol=1e-5, atol=1e-6)


def test_the_first_layers_are_dense_through_model_layers():
    """DeepSeek-V3's first k dense layers: `layers: [{range: '0:k', ffn: swiglu}]`, the dense ones at
    model.d_ff, the experts at their own d_ff; counts by hand."""
    moe = {"name": "moe", "n_experts": 4, "top_k": 2, "d_ff": 6, "n_shared_experts": 1, "shared_gate": True}
    cfg = tiny(n_layers=3, d_model=16, d_ff=40, bias=False, ffn=moe, layers=[{"range": "0:1", "ffn": "swiglu"}])
    model = build_model(cfg, 30)
    ffns = [layer.ffn.sublayer for layer in model.decoder.layers]
    assert type(ffns[0]).__name__ == "SwiGLU" and ffns[0].up.out_features == 40
    assert all(isinstance(f, MixtureOfExperts) and f.experts[0].up.out_features == 6 for f in ffns[1:])
    dense = build_model(tiny(n_layers=3, d_model=16, d_ff=40, bias=False, ffn="swiglu"), 30)
    expert, router, gate = 3 * 16 * 6, 16 * 4, 16
    moe_layer = 4 * expert + expert + router + gate  # routed, shared (one expert wide), router, shared gate
    assert count_parameters(model) == count_parameters(dense) + 2 * (moe_layer - 3 * 16 * 40)
    assert active_parameters(model) == count_parameters(model) - 2 * 2 * expert


@pytest.mark.parametrize("case", ["deepseek-v3", "qwen3-next"])
def test_the_moe_block_equals_hugging_faces(case):
    """Hugging Face's DeepseekV3MoE (sigmoid, groups, correction bias, scaling, shared experts) and
    Qwen3NextSparseMoeBlock (softmax, gated shared expert), weights copied across."""
    if case == "deepseek-v3":
        mod = pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
        from transformers import DeepseekV3Config
        config = DeepseekV3Config(hidden_size=8, moe_intermediate_size=6, n_routed_experts=8, num_experts_per_tok=3,
                                  n_group=4, topk_group=2, n_shared_experts=2, routed_scaling_factor=2.5)
        ref, opts = mod.DeepseekV3MoE(config), CASES["deepseek-v3"] | {"n_shared_experts": 2}
        shared, gate_name = ref.shared_experts, None
    else:
        mod = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
        from transformers import Qwen3NextConfig
        config = Qwen3NextConfig(hidden_size=8, moe_intermediate_size=4, shared_expert_intermediate_size=10,
                                 num_experts=6, num_experts_per_tok=3)
        ref, opts = mod.Qwen3NextSparseMoeBlock(config), CASES["qwen3-next"]
        shared, gate_name = ref.shared_expert, "shared_expert_gate"
    moe = _moe(**opts)
    with torch.no_grad():
        ref.gate.weight.copy_(moe.router.weight)
        if hasattr(moe, "score_bias"):
            ref.gate.e_score_correction_bias.copy_(moe.score_bias)
        for e, expert in enumerate(moe.experts):
            ref.experts.gate_up_proj[e].copy_(torch.cat((expert.gate.weight, expert.up.weight)))
            ref.experts.down_proj[e].copy_(expert.down.weight)
        for ours, theirs in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            getattr(shared, theirs).weight.copy_(getattr(moe.shared, ours).weight)
        if gate_name:
            getattr(ref, gate_name).weight.copy_(moe.shared_gate.weight)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(moe(x), ref(x), atol=1e-5, rtol=1e-5)


def test_describe_counts_shared_experts_as_active_and_says_how_the_bias_balances(capsys):
    assert main(["describe", "preset:llama-tiny", "model.ffn=moe", "model.ffn.n_experts=4",
                 "model.ffn.n_shared_experts=1", "model.ffn.scoring=sigmoid", "model.ffn.selection_bias=true",
                 "model.ffn.bias_update_speed=0.001", "--vocab-size", "100"]) == 0
    out = capsys.readouterr().out
    # test_moe's 308,544 total / 173,376 active, plus 2 layers x one always-active 3 x 64 x 176 expert
    shared = 2 * 3 * 64 * 176
    assert f"{308_544 + shared:,} total, {173_376 + shared:,} active per token" in out, out
    assert "aux-loss-free balancing" in out


@pytest.mark.parametrize("override,expected", [
    ("model.ffn.n_group=3", "model.ffn.n_group: must divide n_experts (4), got 3"),
    ("model.ffn.topk_group=2", "model.ffn.topk_group: must be at most n_group (1), got 2"),
    ("model.ffn.scoring=sigmoidal", "model.ffn.scoring"),
    ("model.ffn.shared_gate=true", "model.ffn.shared_gate: needs n_shared_experts >= 1"),
    ("model.ffn.bias_update_speed=0.01", "model.ffn.bias_update_speed: needs selection_bias: true"),
    ("model.ffn.d_ff=0", "model.ffn.d_ff: must be positive, got 0"),
])
def test_bad_routing_settings_are_one_line_errors(override, expected, capsys):
    code = main(["describe", "preset:llama-tiny", "model.ffn=moe", "model.ffn.n_experts=4", override])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err


def test_a_training_run_moves_the_selection_bias_and_its_checkpoint_keeps_it(tmp_path):
    """Each training step moves every expert's bias by exactly +-speed or 0, so after n steps each entry
    is a whole multiple of speed, at most n of them; the checkpoint holds the bias."""
    from arch_zoo.experiment import load
    from arch_zoo.training import run_one

    speed, steps = 0.01, 6
    cfg = load({"name": "moe", "seed": 0, "task": {"name": "char_lm", "max_chars": 5000, "seq_len": 16},
                "model": tiny(n_layers=2, ffn={"name": "moe", "n_experts": 4, "top_k": 1, "scoring": "sigmoid",
                                               "selection_bias": True, "bias_update_speed": speed}),
                "train": {"max_steps": steps, "batch_size": 4, "val_every": steps, "val_batches": 1,
                          "progress_bar": False}})
    assert run_one(cfg, tmp_path / "run", quiet=True).status == "completed"
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    biases = [v for k, v in state["state_dict"].items() if k.endswith("score_bias")]
    assert len(biases) == 2
    for b in biases:
        multiples = b / speed
        torch.testing.assert_close(multiples, multiples.round(), atol=1e-4, rtol=0)
        assert multiples.abs().max() <= steps and multiples.abs().max() >= 1
