import math

import pytest
import torch

from arch_zoo.config import TrainConfig
from arch_zoo.models import build_model
from arch_zoo.training.datamodule import StepBatchSampler
from arch_zoo.training.objectives import loss_fn, objective
from arch_zoo.components.parametrization import parameter_roles
from arch_zoo.recipes import build_optimizer, schedule_for
from arch_zoo.recipes.optimizers import param_groups, parametrization_of
from tests.conftest import tiny


def lr_multiplier(step, t):
    return schedule_for(t)(step)


def test_noam_warms_up_linearly_then_decays_as_inverse_sqrt():
    t = TrainConfig(schedule="noam", warmup_steps=100, max_steps=1000)
    assert lr_multiplier(49, t) == pytest.approx(0.5)
    assert lr_multiplier(99, t) == pytest.approx(1.0)
    assert lr_multiplier(399, t) == pytest.approx(0.5)  # sqrt(100 / 400)
    # proportional to Vaswani et al.'s d^-0.5 * min(s^-0.5, s * w^-1.5)
    paper = [min(s ** -0.5, s * 100 ** -1.5) for s in (10, 100, 1000)]
    ours = [lr_multiplier(s - 1, t) for s in (10, 100, 1000)]
    assert [o / p for o, p in zip(ours, paper)] == pytest.approx([10.0] * 3)


def test_cosine_ends_at_the_floor_and_constant_stays_flat():
    t = TrainConfig(schedule="cosine", warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert lr_multiplier(9, t) == pytest.approx(1.0)
    assert lr_multiplier(59, t) == pytest.approx(0.55)
    assert lr_multiplier(109, t) == pytest.approx(0.1)
    c = TrainConfig(schedule="constant", warmup_steps=4)
    assert [lr_multiplier(s, c) for s in (0, 3, 50)] == [0.25, 1.0, 1.0]


def test_weight_decay_skips_biases_norms_and_embeddings():
    model = build_model(tiny(), 11)
    (decay, no_decay), _ = param_groups(list(parameter_roles(model)), parametrization_of(model), "adam", 1e-3, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed = {id(p) for p in decay["params"]}
    assert id(model.embed.weight) not in decayed
    assert all(p.dim() >= 2 for p in decay["params"])
    assert any(p.dim() == 1 for p in no_decay["params"])
    for name, expected in (("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)):
        assert type(build_optimizer(model, TrainConfig(optimizer=name)).optimizer) is expected


def test_label_smoothing_raises_the_loss_of_a_confident_right_answer():
    logits = torch.tensor([[10.0, 0.0, 0.0]])
    labels = torch.tensor([0])
    assert loss_fn(logits, labels, 0.1) > loss_fn(logits, labels, 0.0) + 0.1


def test_lm_objective_predicts_the_next_token():
    model = build_model(tiny(), 11)
    batch = {"input_ids": torch.tensor([[1, 5, 6, 7]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "labels": torch.tensor([[-100, 5, 6, 7]])}
    logits, labels = objective("lm").forward(model, batch)
    assert logits.shape[1] == 3 and labels.tolist() == [[5, 6, 7]]


def test_metrics_are_token_weighted_over_batches():
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]])
    labels = torch.tensor([[0, 0, -100]])
    sums = objective("lm").metric_sums(logits, labels)
    assert sums["count"] == 2 and sums["correct"] == 1
    m = objective("lm").finish(sums, chars_per_token=2.0)
    assert m["token_accuracy"] == 0.5
    assert m["bpc"] == pytest.approx(m["loss"] / math.log(2) / 2)


def test_step_sampler_is_a_pure_function_of_seed_and_step():
    a = StepBatchSampler(100, 8, seed=3, total=30, start=lambda: 0)
    b = StepBatchSampler(100, 8, seed=3, total=30, start=lambda: 17)
    assert list(a)[17:] == list(b)  # resuming at step 17 yields exactly the remaining batches
    assert list(StepBatchSampler(100, 8, seed=4, total=30, start=lambda: 0)) != list(a)
    first_pass = [i for batch in list(a)[:12] for i in batch]
    assert len(set(first_pass)) == 96  # no repeats within a pass (100 // 8 = 12 batches)


def test_step_sampler_shards_a_global_batch_across_ranks():
    r0 = StepBatchSampler(64, 4, seed=0, total=5, start=lambda: 0, rank=0, world=2)
    r1 = StepBatchSampler(64, 4, seed=0, total=5, start=lambda: 0, rank=1, world=2)
    for x, y in zip(r0, r1):
        assert not set(x) & set(y)
