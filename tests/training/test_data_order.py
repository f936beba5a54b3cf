"""The training order over a large token store: a permutation per pass that is a pure function of
(seed, step), evaluated per index so a run's start-up does not grow with the corpus (issue 15 §2)."""
import numpy as np
import pytest
import torch

from arch_zoo.training import datamodule
from arch_zoo.training.datamodule import FeistelPermutation, StepBatchSampler


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 4097, 65_537])
def test_feistel_permutation_is_a_bijection_and_depends_on_the_seed(n):
    a = FeistelPermutation(n, 5)(np.arange(n))
    assert sorted(a.tolist()) == list(range(n))
    assert np.array_equal(a, FeistelPermutation(n, 5)(np.arange(n)))
    if n > 16:
        assert not np.array_equal(a, FeistelPermutation(n, 6)(np.arange(n)))
    if n >= 1000:  # a random permutation has about one fixed point
        assert (a == np.arange(n)).sum() < 10


def test_a_large_training_set_is_permuted_per_pass_by_index(monkeypatch):
    """README: "batches are a seeded permutation of window indices per pass (a pure function of
    (seed, step))": above PERMUTE_BELOW every window comes once per pass, a resumed sampler continues
    the same sequence, and two ranks split each global batch."""
    monkeypatch.setattr(datamodule, "PERMUTE_BELOW", 100)
    n, bs = 1000, 10
    full = list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 0))
    for p in range(2):
        seen = [i for b in full[p * 100:(p + 1) * 100] for i in b]
        assert sorted(seen) == list(range(n))
    assert full[:100] != full[100:200]  # a new permutation each pass
    assert list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 137)) == full[137:]
    assert list(StepBatchSampler(n, bs, seed=4, total=5, start=lambda: 0)) != full[:5]
    r0 = StepBatchSampler(n, 5, seed=3, total=5, start=lambda: 0, rank=0, world=2)
    r1 = StepBatchSampler(n, 5, seed=3, total=5, start=lambda: 0, rank=1, world=2)
    assert [a + b for a, b in zip(r0, r1)] == full[:5]


def test_up_to_the_threshold_the_order_is_torch_randperm_as_before():
    """Existing studies keep their exact data order: small training sets still follow torch.randperm."""
    s = StepBatchSampler(64, 8, seed=2, total=8, start=lambda: 0)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(2 * 1_000_003))
    assert [i for b in s for i in b] == perm.tolist()
