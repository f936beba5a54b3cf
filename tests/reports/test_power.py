"""How many seeds before you launch (issue 56 item 4): `arch-zoo sweep SPEC --dry-run --power` plans each pair's
seeds from a pilot's paired spread, read at an upper confidence bound; checked against scipy's chi-square
and noncentral t computed here, and by simulating the paired t-tests the plan promises."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from arch_zoo.cli import main
from arch_zoo.formatting import number
from arch_zoo.reports import load_runs
from arch_zoo.reports.power import SPREAD_CONFIDENCE, plan_seeds
from arch_zoo.stats import seeds_needed, spread_upper

from .sweeps import write_sweep

ROOT = Path(__file__).resolve().parents[2]
PILOT = {"sinusoidal": [2.10, 2.14, 2.08], "rope": [2.05, 2.12, 2.06]}


def _nct_power(dz, n):
    """Two-sided paired t-test power at n pairs, from scipy's noncentral t."""
    crit = stats.t.ppf(0.975, n - 1)
    return stats.nct.sf(crit, n - 1, dz * math.sqrt(n)) + stats.nct.cdf(-crit, n - 1, dz * math.sqrt(n))


def _simulated_power(effect, sd, n, rng, sims=20000):
    d = effect + sd * rng.standard_normal((sims, n))
    return float(np.mean(stats.ttest_1samp(d, 0.0, axis=1).pvalue < 0.05))


def test_a_plan_reads_the_upper_bound_of_the_paired_spread_and_its_seeds_reach_the_power(tmp_path):
    """The pilot's paired differences rope - sinusoidal: their SD, its 80% upper bound from scipy's chi-square,
    and the seeds for 0.02 at that bound; simulated paired t-tests reach 80% power there and not one seed
    earlier."""
    root = write_sweep(tmp_path / "pilot", PILOT, status={}, seeds=(0, 1, 2))
    [row] = plan_seeds(load_runs(root), min_effect=0.02)
    d = np.array(PILOT["rope"]) - np.array(PILOT["sinusoidal"])
    sd = d.std(ddof=1)
    upper = sd * math.sqrt(2 / stats.chi2.ppf(1 - SPREAD_CONFIDENCE, 2))
    assert row["spread"] == pytest.approx(sd, rel=1e-12) and row["spread bound"] == pytest.approx(upper, rel=1e-9)
    n = next(k for k in range(2, 1000) if _nct_power(0.02 / upper, k) >= 0.8)
    assert row["seeds"] == n and row["wall_s"] == pytest.approx(n * 24.0)  # 12 s a run, two runs a seed
    rng = np.random.default_rng(4)
    se = math.sqrt(0.8 * 0.2 / 20000)
    assert _simulated_power(0.02, upper, n, rng) >= 0.8 - 3 * se
    assert _simulated_power(0.02, upper, n - 1, rng) < 0.8 + 3 * se


def test_the_upper_bound_keeps_three_seed_pilots_from_promising_too_few_seeds():
    """A true effect that needs 18 seeds: from the spread of a 3-seed pilot as measured, about 1 in 5 pilots
    promise 5 or fewer; from its 80% upper bound, few do, and the bound lies below the true spread in about
    20% of pilots, as its level says."""
    dz = optimize.brentq(lambda x: _nct_power(x, 18) - 0.8, 0.3, 2.0)
    assert seeds_needed(dz) == 18
    dz5 = optimize.brentq(lambda x: _nct_power(x, 5) - 0.8, 0.5, 5.0)  # the least d_z that 5 seeds resolve
    rng = np.random.default_rng(7)
    sds = rng.standard_normal((20000, 3)).std(axis=1, ddof=1)  # true spread 1, effect dz
    factor = spread_upper(1.0, 3, SPREAD_CONFIDENCE)
    assert [spread_upper(s, 3, SPREAD_CONFIDENCE) for s in sds[:50]] == pytest.approx(sds[:50] * factor, rel=1e-12)
    bounds = sds * factor
    naive, planned = np.mean(dz / sds >= dz5), np.mean(dz / bounds >= dz5)
    assert 0.12 < naive < 0.25 and planned < 0.05
    assert np.mean(bounds < 1.0) == pytest.approx(1 - SPREAD_CONFIDENCE, abs=0.015)


def _spec(tmp_path, variants=("sinusoidal", "rope")):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: plan\nbase: {ROOT / 'configs/experiments/char_lm.yaml'}\n"
                    f"grid: {{model.position: [{', '.join(variants)}]}}\nseeds: [0, 1, 2]\n"
                    "baseline: {model.position: sinusoidal}\n")
    return spec


def test_dry_run_power_prints_each_pairs_seeds_and_wall_time(tmp_path, capsys):
    root = write_sweep(tmp_path / "pilot", PILOT, status={}, seeds=(0, 1, 2))
    argv = ["sweep", str(_spec(tmp_path)), "--dry-run", "--power", "--pilot", str(root), "--min-effect", "0.02",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    [row] = plan_seeds(load_runs(root), min_effect=0.02)
    n = int(row["seeds"])
    assert "planned from the 80% upper confidence bound of the spread" in out and "a difference of 0.02" in out
    line = next(x for x in out.splitlines() if x.startswith("position=rope") and "runs" in x)
    assert re.search(rf"\s{n}\s+{2 * n} runs\s+{number(n * 24 / 60, 3)} min$", line), line
    assert f"the sweep at {n} seeds (the most any pair needs): {2 * n} runs" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra,key", [([], "--pilot"), (["--pilot", "nowhere"], "--pilot")])
def test_power_without_a_pilot_is_one_line_naming_the_option(tmp_path, capsys, extra, key):
    argv = ["sweep", str(_spec(tmp_path)), "--dry-run", "--power", "--out", str(tmp_path / "out"), *extra]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and captured.out == "" and not (tmp_path / "out").exists()


def test_power_is_for_a_dry_run(tmp_path, capsys):
    root = write_sweep(tmp_path / "pilot", PILOT, status={}, seeds=(0, 1, 2))
    assert main(["sweep", str(_spec(tmp_path)), "--power", "--pilot", str(root), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--power" in err[0] and not (tmp_path / "o").exists()
