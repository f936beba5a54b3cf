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


def test_length_grouping_keeps_each_group_of_examples_and_pads_less():
    """train.group_by_length: each run of G batches of a pass holds the same examples as without it,
    sorted by length into batches taken in a seeded order; a pure function of (seed, step), and
    resumable; 0 or 1 is the plain order."""
    n, bs, g = 1000, 10, 8
    lengths = torch.randint(1, 50, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    key = lengths.__getitem__
    plain = list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 0))
    grouped = list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 0, group=g, length_of=key))
    assert list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 0, group=1, length_of=key)) == plain
    assert list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 0, group=g)) == plain  # no lengths
    per_pass = n // bs
    groups = [(p + s, min(p + s + g, p + per_pass))  # groups restart each pass; the last one of a pass is short
              for p in range(0, 200, per_pass) for s in range(0, per_pass, g)]
    for first, last in groups:
        assert sorted(i for b in grouped[first:last] for i in b) == sorted(i for b in plain[first:last] for i in b)
    assert grouped != plain and grouped[:100] != grouped[100:200]

    def padding(batches):
        return sum(len(b) * max(lengths[i] for i in b) for b in batches) / sum(lengths[i] for b in batches for i in b)
    assert padding(grouped) < 0.75 * padding(plain)
    again = list(StepBatchSampler(n, bs, seed=3, total=250, start=lambda: 37, group=g, length_of=key))
    assert again == grouped[37:]  # resumed mid-group
    assert list(StepBatchSampler(n, bs, seed=4, total=20, start=lambda: 0, group=g, length_of=key)) != grouped[:20]
    r0 = StepBatchSampler(n, 5, seed=3, total=20, start=lambda: 0, rank=0, world=2, group=g, length_of=key)
    r1 = StepBatchSampler(n, 5, seed=3, total=20, start=lambda: 0, rank=1, world=2, group=g, length_of=key)
    assert [a + b for a, b in zip(r0, r1)] == grouped[:20]


def test_length_grouping_weighs_each_target_token_as_a_random_batch_would():
    """With group_by_length a batch's mean loss is scaled by its target tokens over the training set's
    mean per batch: a short batch's tokens do not count more than a long batch's (lm: labels[1:])."""
    from arch_zoo.data.example import Example
    from arch_zoo.data.tasks.base import IGNORE, TaskData
    from arch_zoo.training.datamodule import length_key
    from arch_zoo.training.module import _target_tokens_per_batch

    seq2seq = [Example([1, 2], [3, 4, 2], decoder_input_ids=[1, 3, 4]), Example([1], [2], decoder_input_ids=[1])]
    data = TaskData(None, "seq2seq", {"train": seq2seq})
    assert _target_tokens_per_batch(data, 8) == 8 * (3 + 1) / 2
    lm = [Example([1, 5, 6], [5, 6, 2]), Example([1, 5], [IGNORE, 5])]
    assert _target_tokens_per_batch(TaskData(None, "lm", {"train": lm}), 2) == 2 * (2 + 1) / 2
    assert _target_tokens_per_batch(TaskData(None, "classification", {"train": [Example([1], 0)]}), 2) is None
    assert length_key(seq2seq[0]) == (3, 2) and length_key(lm[0]) == (0, 3)


def test_the_mean_target_tokens_of_a_large_training_set_reads_a_bounded_evenly_spaced_sample(monkeypatch):
    """A corpus store can hold billions of windows: group_by_length's mean reads at most
    MEAN_TOKENS_FROM examples, evenly spaced, not the whole split."""
    from arch_zoo.data.example import Example
    from arch_zoo.data.tasks.base import TaskData
    from arch_zoo.training import module

    class Windows:  # a store-backed split: examples are built on access
        def __init__(self, n):
            self.n, self.read = n, []

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            self.read.append(i)
            return Example([1] * 4, [2] * (1 + i // 250_000), decoder_input_ids=[1])

    monkeypatch.setattr(module, "MEAN_TOKENS_FROM", 4)
    train = Windows(1_000_000)
    assert module._target_tokens_per_batch(TaskData(None, "seq2seq", {"train": train}), 8) == 8 * (1 + 2 + 3 + 4) / 4
    assert train.read[1:] == [0, 250_000, 500_000, 750_000]  # (read[0]: the label type check)
