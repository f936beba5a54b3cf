"""The statistics of a comparison: Holm-adjusted p, d_z, seeds needed for 80% power, bootstrap CIs,
and the report columns that show them. Reference values are typed in, not recomputed by the code
under test."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from arch_zoo.cli import main
from arch_zoo.reports import load_runs, summarize, write_report
from arch_zoo.stats import bootstrap_ci, cohens_dz, holm, paired_power, seeds_needed
from arch_zoo.reports.tables import display
from tests.reports.sweeps import LOSS, STATUS, write_sweep

# ---- Holm-Bonferroni -----------------------------------------------------------------------------------


def test_holm_hand_worked_example():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    # a comparison with no p (the baseline itself, or < 2 paired seeds) is not a test: m = 2 here
    got = holm([math.nan, 0.04, 0.01])
    assert math.isnan(got[0]) and got[1:] == pytest.approx([0.04, 0.02], abs=1e-15)
    assert holm([]).shape == (0,) and np.isnan(holm([math.nan])).all()


def test_holm_matches_the_r_multtest_values_statsmodels_tests_against():
    """statsmodels/stats/tests/test_multi.py: res_multtest1, columns rawp and Holm (from R's multtest)."""
    raw = [0.838541367553, 0.642193923795, 0.680845947633, 0.967833824309, 0.71626938238, 0.177096952723,
           5.23656777208e-005, 0.0202732688798, 0.00028140506198, 0.0149877310796]
    holm_sorted = [5.2365677720800005e-04, 2.5326455578199999e-03, 1.1990184863680001e-01,
                   1.4191288215860001e-01, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    got = holm(raw)
    assert got[np.argsort(raw)] == pytest.approx(holm_sorted, rel=1e-12)


def test_holm_is_monotone_never_below_raw_and_capped_at_one():
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 17):
        p = rng.uniform(0, 1, size) ** 2
        adj = holm(p)
        order = np.argsort(p)
        assert np.all(np.diff(adj[order]) >= 0)  # a smaller raw p never gets a larger adjusted p
        assert np.all(adj >= p) and np.all(adj <= 1.0)
        assert adj[order[0]] == pytest.approx(min(1.0, p.min() * size))  # the smallest: Bonferroni
    assert holm([0.5, 0.6, 0.9]).tolist() == [1.0, 1.0, 1.0]


# ---- effect size, power, seeds needed ------------------------------------------------------------------


def test_cohens_dz_on_a_known_paired_sample():
    before = np.array([10.0, 12.0, 9.0, 11.0])
    after = np.array([11.0, 14.0, 12.0, 15.0])  # differences 1, 2, 3, 4: mean 2.5, sd sqrt(5/3)
    assert cohens_dz(after - before) == pytest.approx(2.5 / math.sqrt(5 / 3), rel=1e-12)
    assert cohens_dz(after - before) == pytest.approx(1.9364916731, rel=1e-9)
    # d_z = t / sqrt(n) of the paired t-test, with Δ's sign
    t = stats.ttest_rel(before, after).statistic
    assert cohens_dz(before - after) == pytest.approx(t / 2, rel=1e-12) and t < 0
    assert math.isnan(cohens_dz([0.3])) and math.isnan(cohens_dz([0.0, 0.0, 0.0]))
    assert cohens_dz([-0.1, -0.1]) == -math.inf
    assert cohens_dz([2.0 - 1.91, 2.1 - 2.01, 2.2 - 2.11]) == math.inf  # equal up to float rounding: no spread


def test_paired_power_is_alpha_at_no_effect_and_matches_simulated_t_tests():
    assert paired_power(0.0, 12) == pytest.approx(0.05, abs=1e-12)
    rng = np.random.default_rng(0)
    n, dz, trials = 10, 0.8, 20000
    diffs = rng.normal(dz, 1.0, size=(trials, n))
    rejected = stats.ttest_1samp(diffs, 0.0, axis=1).pvalue < 0.05
    # binomial sd of the simulated rate is ~0.003; 0.012 is four of them
    assert paired_power(dz, n) == pytest.approx(rejected.mean(), abs=0.012)


@pytest.mark.parametrize("dz, n", [(0.2, 199), (0.5, 34), (0.8, 15)])
def test_seeds_needed_matches_the_power_table(dz, n):
    """G*Power / Cohen's table, paired t-test, two-sided, alpha 0.05, power 0.8."""
    assert seeds_needed(dz) == n == seeds_needed(-dz)
    assert paired_power(dz, n) >= 0.8 > paired_power(dz, n - 1)
    if dz == 0.5:
        assert paired_power(dz, n) == pytest.approx(0.8077775, abs=1e-6)  # G*Power's "actual power"


def test_power_and_seeds_needed_hold_where_scipys_noncentral_t_returns_nan():
    """scipy's nct gives NaN at large noncentralities (d_z 20 at 2 seeds); power then comes from
    integrating the same distribution, and 2 seeds suffice for a huge effect, not ">1000"."""
    rng = np.random.default_rng(1)
    diffs = rng.normal(20.0, 1.0, size=(20000, 2))
    rejected = stats.ttest_1samp(diffs, 0.0, axis=1).pvalue < 0.05
    assert paired_power(20.0, 2) == pytest.approx(rejected.mean(), abs=0.006)  # 4 binomial sd
    for dz in (20.0, 30.0, 38.0, 50.0, 1e10, 1e14):
        assert seeds_needed(dz) == 2, dz
        assert 0.97 < paired_power(dz, 2) <= 1.0
    assert seeds_needed(10.0) == 3 and paired_power(10.0, 2) < 0.8 <= paired_power(10.0, 3)


def test_seeds_needed_cap_no_effect_and_undefined():
    assert seeds_needed(0.05) == math.inf  # > 1000: the display says ">1000"
    assert seeds_needed(0.1) == 787 and seeds_needed(0.1, cap=500) == math.inf
    assert math.isnan(seeds_needed(0.0)) and math.isnan(seeds_needed(math.nan))
    assert seeds_needed(math.inf) == 2


def test_bootstrap_ci_is_scipys_bca_with_a_fixed_seed():
    x = np.array([2.1, 2.4, 1.9, 2.0, 3.5, 2.2, 2.05, 2.3])
    ref = stats.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=9999, method="BCa",
                          random_state=np.random.default_rng(0)).confidence_interval
    assert bootstrap_ci(x) == pytest.approx((ref.low, ref.high), rel=1e-12)
    assert bootstrap_ci(x) == bootstrap_ci(x)  # reproducible: a report is a function of its runs
    assert bootstrap_ci([1.5, 1.5, 1.5]) == (1.5, 1.5)
    assert all(math.isnan(v) for v in bootstrap_ci([1.0]))
    assert all(math.isnan(v) for v in bootstrap_ci([1.0, 2.0]))  # [min, max] of two: no interval at all


# ---- in the report -------------------------------------------------------------------------------------

VARIANTS = {**LOSS, "learned": [2.15, 2.12, 2.30, 2.25]}
FEW = {("learned", 2): ("failed", "CUDA out of memory"), ("learned", 3): ("failed", "CUDA out of memory")}


def _expected(variant):
    ok = {v: [s for s in range(4) if (v, s) not in {**STATUS, **FEW}] for v in VARIANTS}
    seeds = [s for s in ok[variant] if s in ok["sinusoidal"]]
    a = np.array([VARIANTS[variant][s] for s in seeds])
    b = np.array([VARIANTS["sinusoidal"][s] for s in seeds])
    return stats.ttest_rel(a, b).pvalue, a - b


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_sweep(tmp_path_factory.mktemp("s") / "pos", VARIANTS, status={**STATUS, **FEW})
    return write_report(root, root.parent / "report")


def test_report_has_holm_effect_size_and_seeds_needed_in_every_export(report):
    """README "Reports": each variant's p (Holm) over all its comparisons with the baseline, the paired
    effect size d_z, and the seeds needed for 80% power to detect the observed Δ."""
    others = ["rope", "alibi", "learned"]
    raw = {v: _expected(v)[0] for v in others}
    adjusted = dict(zip(others, holm([raw[v] for v in others])))
    out = report["out_dir"]
    for frame in (report["variants"], pd.read_csv(out / "variants.csv"), pd.read_parquet(out / "variants.parquet")):
        rows = frame.set_index("variant")
        for v in others:
            row = rows.loc[f"position={v}"]
            diffs = _expected(v)[1]
            assert row["val/loss p"] == pytest.approx(raw[v], rel=1e-9)
            assert row["val/loss p_holm"] == pytest.approx(adjusted[v], rel=1e-9) and adjusted[v] >= raw[v]
            assert row["val/loss d_z"] == pytest.approx(diffs.mean() / diffs.std(ddof=1), rel=1e-9)
            assert row["val/loss seeds_needed"] == seeds_needed(row["val/loss d_z"])
        base = rows.loc["position=sinusoidal"]
        assert math.isnan(base["val/loss p_holm"]) and math.isnan(base["val/loss seeds_needed"])
    # alibi vs sinusoidal: d_z -0.82 -> 14 seeds (the fixture's 3 paired seeds are too few)
    assert report["variants"].set_index("variant").loc["position=alibi", "val/loss seeds_needed"] == 14
    md = (out / "report.md").read_text()
    header = md.split("\n")[2]
    assert header.index("| p ") < header.index("| p (Holm)") < header.index("| d_z") < header.index("| seeds needed")
    assert "| nan " not in md  # the baseline row has no notes: an empty cell, not "nan"
    assert "- seeds needed: paired seeds for 80% power (two-sided paired t-test, alpha 0.05" in md
    assert "p (Holm): Holm-Bonferroni adjusted over every variant-vs-baseline test" in md
    assert "p (Holm) & verdict & margin & d\\_z & seeds needed" in (out / "table.tex").read_text()
    assert "<th>p (Holm)</th><th>verdict</th><th>margin</th><th>d_z</th><th>seeds needed</th>" in (out / "report.html").read_text()


def test_report_warns_when_a_variant_has_fewer_than_three_completed_seeds(report):
    """README "Reports": a variant with fewer than 3 completed seeds gets a warning."""
    notes = report["variants"].attrs["notes"]
    assert "warning: only 2 completed seeds with val/loss for position=learned; intervals and p-values need at least " \
        "3 to mean much: add seeds to the sweep spec (seeds: [0, 1, 2, 3, 4]) and rerun the same `arch-zoo sweep` " \
        "command (or retrain the failed ones with --retry-failed); finished runs are kept, only the new ones train." \
        in notes
    assert not any("position=rope" in n for n in notes if "completed seed" in n)  # 3 completed: no warning
    assert "warning: only 2 completed seeds with val/loss for position=learned" in \
        (report["out_dir"] / "report.md").read_text()


def test_notes_name_a_non_finite_metric_and_a_delta_paired_over_too_few_seeds(tmp_path):
    """A completed run with an infinite val/loss is left out and named; rope has 3 completed seeds but
    shares only 2 with the baseline, so its Δ and p get a warning of their own."""
    root = write_sweep(tmp_path / "pos", {"sinusoidal": [2.1, 2.14, 2.08, 2.12], "rope": [2.01, 2.06, 1.99, 2.03]},
                       status={("sinusoidal", 0): ("failed", "boom"), ("sinusoidal", 1): ("failed", "boom")})
    summary = root / "runs" / "rope-s3" / "summary.json"
    summary.write_text(summary.read_text().replace('"val/loss": 2.03', '"val/loss": Infinity'))
    table = summarize(load_runs(root)).set_index("variant")
    notes = table.attrs["notes"]
    assert "completed with a non-finite or missing val/loss, left out of its statistics: position=rope seed 3 (inf)" \
        in notes
    assert table.loc["position=rope", "val/loss n"] == 3 and table.loc["position=rope", "val/loss n_paired"] == 1
    table = summarize(load_runs(write_sweep(tmp_path / "two", {"sinusoidal": [2.1, 2.14, 2.08, 2.12],
                                                                "rope": [2.01, 2.06, 1.99, 2.03]},
                                            status={("sinusoidal", 0): ("failed", "boom")}, seeds=(0, 1, 2, 3))))
    assert not any("pairs only" in n for n in table.attrs["notes"])  # 3 paired seeds: enough
    root = write_sweep(tmp_path / "thin", {"sinusoidal": [2.1, 2.14, 2.08, 2.12], "rope": [2.01, 2.06, 1.99, 2.03]},
                       status={("sinusoidal", 0): ("failed", "boom"), ("rope", 1): ("failed", "boom")})
    notes = summarize(load_runs(root)).attrs["notes"]
    assert "warning: position=rope's Δ vs position=sinusoidal pairs only 2 seeds both completed; its p-value needs " \
        "at least 3." in notes


def test_display_says_over_the_cap_no_effect_and_undefined(tmp_path):
    variants = {"sinusoidal": [2.0, 2.1, 2.2, 2.3], "rope": [2.0, 2.1, 2.2, 2.3],  # Δ exactly 0
                "alibi": [2.1, 2.0, 2.3, 2.21], "learned": [1.0, 9.0, 9.0, 9.0]}
    status = {("learned", s): ("failed", "boom") for s in (1, 2, 3)}  # 1 paired seed: no test
    table = summarize(load_runs(write_sweep(tmp_path / "pos", variants, status=status)))
    shown = display(table).set_index("position")
    assert shown.loc["rope", "seeds needed"] == "no effect"
    assert shown.loc["alibi", "seeds needed"] == ">1000"  # d_z 0.02: > 1000 seeds
    assert shown.loc["learned", "seeds needed"] == "undefined" and shown.loc["learned", "p (Holm)"] == ""
    assert shown.loc["sinusoidal", "seeds needed"] == ""


def test_cli_bootstrap_intervals_and_min_effect(tmp_path, capsys):
    """README "Reports": `--ci bootstrap` gives BCa bootstrap intervals; `--min-effect D` plans the
    seeds for a difference D of the ranked metric instead of the observed one."""
    root = write_sweep(tmp_path / "pos")
    assert main(["report", str(root), "--out", str(tmp_path / "r"), "--format", "csv,md",
                 "--ci", "bootstrap", "--min-effect", "0.02"]) == 0
    rows = pd.read_csv(tmp_path / "r" / "variants.csv").set_index("variant")
    rope = [LOSS["rope"][s] for s in (0, 1, 3)]
    assert (rows.loc["position=rope", "val/loss ci_low"], rows.loc["position=rope", "val/loss ci_high"]) == \
        pytest.approx(bootstrap_ci(rope), rel=1e-12)
    diffs = np.array(rope) - np.array([LOSS["sinusoidal"][s] for s in (0, 1, 3)])
    assert (rows.loc["position=rope", "val/loss delta_ci_low"], rows.loc["position=rope", "val/loss delta_ci_high"]) \
        == pytest.approx(bootstrap_ci(diffs), rel=1e-12)
    assert rows.loc["position=rope", "val/loss seeds_needed"] == seeds_needed(0.02 / diffs.std(ddof=1))
    md = (tmp_path / "r" / "report.md").read_text()
    assert "to detect a difference of 0.02" in md and "95% CI by BCa bootstrap" in md
    assert "warning: with fewer than 10 seeds a bootstrap interval is too narrow" in md  # 3-4 seeds here
    capsys.readouterr()
    assert main(["report", str(root), "--out", str(tmp_path / "bad"), "--min-effect", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "min-effect" in err and not (tmp_path / "bad").exists()
    assert main(["report", str(root), "--ci", "normal"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ci" in err and "bootstrap" in err


def test_a_bounded_metrics_interval_at_two_seeds_is_clipped_to_its_range(tmp_path):
    """Issue 43 item 4: an accuracy over 2 seeds has a t-interval far past [0, 1] (12.7 standard errors a
    side); the report clips it to the range and says so. A loss's interval that stays above 0 is untouched."""
    acc = {"sinusoidal": [0.2, 0.9], "rope": [0.55, 0.6]}
    root = write_sweep(tmp_path / "s", {"sinusoidal": [2.1, 2.2], "rope": [2.0, 2.05]}, status={}, seeds=(0, 1))
    for d in (root / "runs").iterdir():
        summary = json.loads((d / "summary.json").read_text())
        name, seed = d.name.rsplit("-s", 1)
        summary["final"]["val/token_accuracy"] = acc[name][int(seed)]
        (d / "summary.json").write_text(json.dumps(summary))
    table = summarize(load_runs(root)).set_index("variant")
    for name, values in acc.items():
        raw = stats.t.interval(0.95, 1, loc=np.mean(values), scale=stats.sem(values))
        row = table.loc[f"position={name}"]
        got = (row["val/token_accuracy ci_low"], row["val/token_accuracy ci_high"])
        assert got == pytest.approx(tuple(np.clip(raw, 0.0, 1.0)), rel=1e-12)
    assert raw[0] > 0 and raw[1] < 1  # rope's own interval needed no clip, and kept its t-interval
    loss = stats.t.interval(0.95, 1, loc=2.15, scale=stats.sem([2.1, 2.2]))
    assert loss[0] > 0 and table.loc["position=sinusoidal", "val/loss ci_low"] == pytest.approx(loss[0], rel=1e-12)
    assert ("val/token_accuracy: the 95% CI of the mean is clipped to the metric's range [0, 1] for "
            "position=sinusoidal (its interval reached past it; with so few seeds the clipped interval is wide, not "
            "precise)") in summarize(load_runs(root)).attrs["notes"]
