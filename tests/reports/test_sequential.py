"""Group-sequential comparisons (issue 56 item 3): the boundaries equal gsDesign's published ones, and
the rule applied to t statistics keeps its error rate and interval coverage where naive peeking does not."""
import math

import numpy as np
import pytest
from scipy import stats

from arch_zoo.sequential import Design, boundaries, look, repeated_interval, spent

LOOKS = (3, 4, 5, 6, 7, 8, 9, 10)


def test_obrien_fleming_boundaries_equal_gsdesigns_published_values():
    # gsDesign::gsDesign(k=5, test.type=2, alpha=0.025, sfu=sfLDOF)$upper$bound (Jennison & Turnbull table)
    published = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
    assert boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05) == pytest.approx(published, abs=2e-3)


@pytest.mark.parametrize("rule", ["obrien-fleming", "pocock"])
def test_each_look_spends_what_its_function_says_on_a_simulated_brownian_motion(rule):
    """Independent of the numerical integration: crossings of simulated z paths at each look."""
    t = np.array([0.25, 0.5, 0.75, 1.0])
    c = np.array(boundaries(tuple(t), 0.05, rule))
    rng = np.random.default_rng(7)
    steps = rng.standard_normal((400_000, 4)) * np.sqrt(np.diff(t, prepend=0.0))
    z = np.abs(np.cumsum(steps, axis=1)) / np.sqrt(t)
    crossed = z >= c
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    shares = [np.mean(first == k) for k in range(4)]
    expected = np.diff([spent(x, 0.05, rule) for x in np.concatenate([[0.0], t])])
    assert shares == pytest.approx(expected, abs=4 * math.sqrt(0.05 / 400_000) + 1e-4)
    assert sum(expected) == pytest.approx(0.05)


def _simulate(design: Design, shift: float, n: int, seed: int):
    """Each simulated pair looked at after each round until decided (differs) or at the last look:
    (how often it was declared different, how often the interval it stopped at held the true shift, mean seeds)."""
    x = np.random.default_rng(seed).standard_normal((n, design.max)) + shift
    stopped = np.zeros(n, bool)
    differs, covered, seeds = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n)
    for k, m in zip(design.critical(), design.looks):
        mean, se = x[:, :m].mean(1), x[:, :m].std(1, ddof=1) / math.sqrt(m)
        low, high = mean - k * se, mean + k * se
        now = ~stopped & ((low > 0) | (high < 0) | (m == design.max))
        differs[now] = ((low > 0) | (high < 0))[now]
        covered[now] = ((low < shift) & (shift < high))[now]
        seeds[now] = m
        stopped |= now
    return differs.mean(), covered.mean(), seeds.mean()


@pytest.mark.parametrize("rule", ["obrien-fleming", "pocock"])
def test_the_rule_keeps_its_false_positive_rate_and_coverage_where_naive_peeking_does_not(rule):
    design = Design(LOOKS, 0.05, rule)
    n = 40_000
    fpr, coverage, _ = _simulate(design, 0.0, n, seed=11)
    assert fpr <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)
    assert coverage >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / n)
    for shift in (0.5, 1.0, 2.0):  # the interval a pair stops at holds the true difference
        assert _simulate(design, shift, 20_000, seed=12)[1] >= 0.90
    # "add seeds until p < 0.05" on the same kind of data: a paired t-test at every look
    x = np.random.default_rng(13).standard_normal((n, 10))
    naive = np.zeros(n, bool)
    for m in LOOKS:
        naive |= stats.ttest_1samp(x[:, :m], 0.0, axis=1).pvalue < 0.05
    assert naive.mean() > 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)  # ~0.17


def test_a_large_effect_stops_early_and_saves_seeds():
    design = Design(LOOKS, 0.05, "obrien-fleming")
    power, _, seeds = _simulate(design, 2.0, 20_000, seed=14)
    assert power > 0.99 and seeds < 7


def test_a_looks_interval_excludes_zero_exactly_when_t_passes_the_boundary():
    design = Design(LOOKS, 0.05, "obrien-fleming", pairs=3)
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(3, 11))
        d = rng.standard_normal(n) + rng.uniform(-2, 2)
        low, high = repeated_interval(d, design.level(n))
        t = abs(stats.ttest_1samp(d, 0.0).statistic)
        crit = design.critical()[design.look_of(n)]
        assert ((low > 0) or (high < 0)) == (t > crit)


def test_equivalence_is_decided_when_the_repeated_interval_lies_inside_the_margin():
    design = Design((2, 3, 4), 0.05)
    tiny = [1e-7, -2e-7, 1.5e-7]
    assert look(tiny, design, margin=1e-3).decided == "equivalent"
    assert look(tiny, design, margin=None).decided == ""
    assert look([1.0, 1.1], design).decided == ""  # 2 seeds: the first look spends almost nothing
    assert look([1.0, 1.1, 0.9, 1.05], design).decided == "differs"
    assert look([1.0, 1.1, 0.9, 1.05], design).final
