"""A difference smaller than the smallest effect that counts is 'equivalent', never a winner (issue 42
item 0): the TOST p against scipy's one-sided t-tests, the default margin against a hand-pooled seed
spread, and the verdict column of an ordinary sweep's table against intervals scipy computes."""
import math
import re

import numpy as np
import pytest
from scipy import stats

from arch_zoo.reports import load_runs, summarize, write_report
from arch_zoo.stats import FLOAT_TOLERANCE, SEED_SHARE, judge, smallest_effect, tost_p
from arch_zoo.reports.tables import display

from .sweeps import write_sweep

BASE = [2.10, 2.14, 2.08, 2.12]


def test_tost_p_is_the_larger_of_two_one_sided_t_tests():
    d = np.array([0.003, -0.001, 0.002, 0.0005])
    for margin in (0.002, 0.01):
        lower = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
        upper = stats.ttest_1samp(d, margin, alternative="less").pvalue
        assert tost_p(d, margin) == pytest.approx(max(lower, upper), rel=1e-12)
    assert math.isnan(tost_p([0.1], 0.5))


def test_the_default_margin_is_a_share_of_the_pooled_seed_spread_never_below_float_rounding():
    a, b = [2.10, 2.14, 2.08], [2.01, 2.06, 1.99, 2.03]
    pooled = math.sqrt((np.var(a, ddof=1) * 2 + np.var(b, ddof=1) * 3) / 5)
    assert smallest_effect([a, b]) == pytest.approx(SEED_SHARE * pooled, rel=1e-12)
    assert smallest_effect([[3.0, 3.0], [3.0, 3.0, 3.0]]) == pytest.approx(FLOAT_TOLERANCE * 3.0)
    assert smallest_effect([a, b], given=0.2) == 0.2


@pytest.mark.parametrize("delta,low,high,p,word", [
    (-7.1e-8, -9e-8, -5e-8, 0.021, "equivalent"),  # the kernels: significant, and far inside the margin
    (-0.05, -0.08, -0.02, 0.01, "better"), (0.05, 0.02, 0.08, 0.01, "worse"),
    (-0.05, -0.12, 0.02, 0.2, "inconclusive"),
    (-0.05, -0.08, 0.001, 0.03, "inconclusive"),  # p below alpha but the interval shown holds 0: no word contradicts it
])
def test_the_word_is_read_off_the_interval_shown_beside_it(delta, low, high, p, word):
    assert judge(delta, low, high, p, 0.01, "min") == word


def _ci(diffs, level=0.95):
    return stats.t.interval(level, len(diffs) - 1, loc=np.mean(diffs), scale=stats.sem(diffs))


def test_float_noise_between_two_kernels_is_equivalent_in_the_table_and_a_real_gain_stays_better(tmp_path):
    """explicit against sdpa: the same function, Δ = -7.1e-8 nats at every seed (Holm p well below 0.05):
    'equivalent', not 'better'. rope's real gain of 0.09 nats stays 'better'; alibi, whose interval holds
    both 0 and values beyond the margin, is 'inconclusive'."""
    jitter = [1e-9, -2e-9, 0.0, 1e-9]
    losses = {"sinusoidal": BASE, "rope": [2.01, 2.06, 1.99, 2.03], "alibi": [2.05, 2.02, 2.09, 2.17],
              "learned": [x - 7.1e-8 + j for x, j in zip(BASE, jitter)]}
    root = write_sweep(tmp_path / "s", losses, status={})
    table = summarize(load_runs(root)).set_index("variant")
    for name, word in (("learned", "equivalent"), ("rope", "better"), ("alibi", "inconclusive")):
        pair = (losses[name], BASE)  # the pair's own seeds set its margin, no other variant's
        margin = SEED_SHARE * math.sqrt(np.mean([np.var(v, ddof=1) for v in pair]))
        diffs = np.array(losses[name]) - np.array(BASE)
        row = table.loc[f"position={name}"]
        assert row["val/loss margin"] == pytest.approx(margin, rel=1e-9)
        low, high = _ci(diffs, row["val/loss verdict_ci_level"])
        assert (row["val/loss verdict_ci_low"], row["val/loss verdict_ci_high"]) == pytest.approx((low, high), rel=1e-9)
        assert row["val/loss verdict"] == word, name
        assert (-margin < low and high < margin) == (word == "equivalent")
    assert table.loc["position=learned", "val/loss p_holm"] < 0.05  # a t-test alone would call it a winner
    shown = display(summarize(load_runs(root))).set_index("position")
    assert shown.loc["learned", "verdict"] == "equivalent" and shown.loc["sinusoidal", "verdict"] == ""
    md = (write_report(root, tmp_path / "r")["out_dir"] / "report.md").read_text()
    assert "verdict: equivalent when Δ's interval lies inside ± the margin column: the default smallest" in md
    assert re.search(r"\| learned .*\| equivalent +\|", md) and re.search(r"\| rope .*\| better +\|", md)


def test_the_spec_sets_the_smallest_effect(tmp_path):
    """metric.min_effect in the sweep spec is the margin: 0.2 nats makes rope's 0.09 gain 'equivalent'."""
    losses = {"sinusoidal": BASE, "rope": [2.01, 2.06, 1.99, 2.03]}
    root = write_sweep(tmp_path / "s", losses, status={},
                       metric={"name": "val/loss", "goal": "min", "min_effect": 0.2})
    table = summarize(load_runs(root)).set_index("variant")
    assert table.loc["position=rope", "val/loss margin"] == 0.2
    assert table.loc["position=rope", "val/loss verdict"] == "equivalent"
    assert summarize(load_runs(root), min_effect=0.01).set_index("variant").loc[
        "position=rope", "val/loss verdict"] == "better"  # --min-effect overrides the spec
