"""Scaling fits of ladder sweeps (issue 29 §2-3): the fit against scipy and known curves, the
bootstrap's coverage in a seeded simulation, the compute multiplier against the closed form of two
known curves, and the notes that replace a number the data cannot support."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import least_squares

from arch_zoo.errors import ConfigError
from arch_zoo.formatting import number
from arch_zoo.reports import load_runs, summarize, write_report
from arch_zoo.reports.scaling import analyse
from arch_zoo.reports.scaling.bootstrap import fit_curves, huber_delta, interval
from arch_zoo.reports.scaling.fit import OK, curve as fitted_curve, fit_many, fit_points, huber
from arch_zoo.reports.scaling.multiplier import multiplier
from arch_zoo.reports.scaling.points import Cell, Ladder, Rung, draws, resample, seed_noise
from arch_zoo.reports.scaling.verdict import k_phrase, relation, verdict

from .ladders import COMPUTE, write_ladder

BASE = (1.5, 60.0, 0.15)  # E, A, alpha of the baseline curve, in training FLOPs
VARIANT = (1.4, 55.0, 0.15)
OFFSETS = {"relu": (-0.004, 0.0, 0.004), "swiglu": (0.003, -0.005, 0.002)}  # each sums to 0: rung means on the curve


def loss(curve, c):
    E, A, alpha = curve
    return E + A * c ** -alpha


def k_closed_form(variant, base, c):
    """The compute the baseline needs for the variant's loss at c, over c; inf below its floor."""
    gap = loss(variant, c) - base[0]
    return math.inf if gap <= 0 else (base[1] / gap) ** (1 / base[2]) / c


def test_the_fit_reaches_the_minimum_scipy_least_squares_finds_with_the_same_huber_loss():
    rng = np.random.default_rng(4)
    c = np.geomspace(1e12, 1e16, 6)
    x_ref = math.exp(np.log(c).mean())
    delta = 0.005
    ys = loss(BASE, c)[None, :] * np.exp(rng.normal(0, 0.01, (6, len(c))))
    logx = np.tile(np.log(c / x_ref), (len(ys), 1))
    fits = fit_many(logx, np.log(ys), np.ones_like(ys), delta=delta)
    assert (fits.status == OK).all()
    for i, y in enumerate(ys):
        def residuals(theta):
            return np.log(theta[0] + np.exp(theta[1] - theta[2] * logx[i])) - np.log(y)

        ours = huber(residuals(fits.theta[i]), delta).sum()
        assert ours == pytest.approx(fits.loss[i], rel=1e-12)
        best = math.inf
        for start in (fits.theta[i], (0.5 * y.min(), 0.0, 0.3), (0.0, 0.5, 0.1)):
            res = least_squares(residuals, start, loss="huber", f_scale=delta,
                                bounds=([0, -np.inf, 0], [y.max(), np.inf, 4]), xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                max_nfev=2000)
            best = min(best, res.cost)  # scipy's cost: 0.5 * f_scale^2 * sum rho((r / f_scale)^2) = the same sum
        assert ours <= best * (1 + 1e-6) + 1e-15, i


def test_a_floor_held_at_zero_still_gets_the_best_power_law():
    """Points that bend the other way (concave in log-log: no floor E >= 0 fits them) pin E at 0; the other
    two parameters must then reach scipy's optimum, not stop where the step towards E < 0 was cut off."""
    c = np.array([44384256.0, 483950592.0, 1327104000.0])  # a tiny ladder's rungs (tests/sweeps/test_ladder.py)
    y = np.array([4.394164300733998, 3.9222491479689077, 3.388218479771768])
    x_ref, delta = math.exp(np.log(c).mean()), 0.0038
    fits = fit_points(c, y, x_ref, delta)
    assert fits.status[0] == OK and fits.E[0] == 0.0 and fits.floor_at_bound[0]

    def residuals(theta):
        return np.log(theta[0] + np.exp(theta[1] - theta[2] * np.log(c / x_ref))) - np.log(y)

    res = least_squares(residuals, (0.5, 0.5, 0.2), loss="huber", f_scale=delta,
                        bounds=([0, -np.inf, 0], [5, np.inf, 4]), xtol=1e-15, ftol=1e-15, gtol=1e-15)
    assert res.x[0] < 1e-12
    assert fits.theta[0, 1:] == pytest.approx(res.x[1:], rel=1e-7)


def test_exact_points_give_back_the_curve():
    c = np.geomspace(1e12, 1e16, 5)
    x_ref = math.exp(np.log(c).mean())
    fits = fit_points(c, loss(BASE, c), x_ref)
    assert fits.status[0] == OK
    assert (fits.E[0], fits.A(x_ref)[0], fits.alpha[0]) == pytest.approx(BASE, rel=1e-6)


def _simulated(rng, seeds, rungs, sigma, replicates):
    """One ladder of two variants drawn around known curves: (its curves, fitted) with the real bootstrap."""
    c = np.geomspace(1e12, 1e16, rungs)
    by = {}
    for name, curve in (("base", BASE), ("variant", VARIANT)):
        L = loss(curve, c)
        by[name] = [Rung(i + 1, str(i), [Cell(str(i), i, float(c[i]), 1.0,
                                              {s: float(L[i] * math.exp(rng.normal(0, sigma))) for s in range(seeds)})])
                    for i in range(rungs)]
    ladder = Ladder(list(by), by, {}, False, False, rungs)
    shared = draws(ladder, replicates, rng)
    return [(name, by[name], resample(by[name], shared, replicates)) for name in by], huber_delta(seed_noise(ladder))


def test_bootstrap_intervals_cover_the_true_parameters_and_multiplier_at_close_to_95_percent():
    """A seeded simulation: 200 ladders of 6 rungs x 8 seeds (1% noise per seed) around known curves, each fitted
    with 100 bootstrap replicates, all in one batch. Each 95% interval must cover the truth in 90-99% of the
    ladders: 0.95 within three binomial standard deviations (sqrt(0.95 * 0.05 / 200) = 1.5%), and the bootstrap's
    own slack of a few points."""
    rng = np.random.default_rng(29)
    reps, replicates, top = 200, 100, 1e16
    items, x_ref = [], math.exp(np.log(np.geomspace(1e12, 1e16, 6)).mean())
    deltas = []
    for _ in range(reps):
        more, delta = _simulated(rng, seeds=8, rungs=6, sigma=0.01, replicates=replicates)
        items += more
        deltas.append(delta)
    curves = fit_curves(items, x_ref, float(np.median(deltas)))
    k_true = k_closed_form(VARIANT, BASE, top)
    hits = {"E": 0, "A": 0, "alpha": 0, "k": 0}
    estimates = []
    for base, var in zip(curves[::2], curves[1::2]):
        assert base.ok and var.ok and base.usable.mean() > 0.95
        for name, values, truth in (("E", base.replicates.E, BASE[0]), ("A", base.replicates.A(x_ref), BASE[1]),
                                    ("alpha", base.replicates.alpha, BASE[2])):
            low, high = base.interval(values)
            hits[name] += low <= truth <= high
        both = base.usable & var.usable
        low, high = interval(multiplier(var.replicates.theta[both], base.replicates.theta[both], top / x_ref))
        hits["k"] += low <= k_true <= high
        estimates.append(multiplier(var.point.theta, base.point.theta, top / x_ref)[0])
    coverage = {k: v / reps for k, v in hits.items()}
    assert all(0.90 <= v <= 0.99 for v in coverage.values()), coverage
    assert np.median(estimates) == pytest.approx(k_true, rel=0.05)


@pytest.fixture
def ladder_report(tmp_path):
    root = write_ladder(tmp_path / "lad", {"relu": BASE, "swiglu": VARIANT}, offsets=OFFSETS)
    runs = load_runs(root)
    return root, runs, summarize(runs)


def test_compute_multipliers_equal_the_closed_form_of_the_two_curves(ladder_report):
    _, runs, table = ladder_report
    s = analyse(runs, table, extrapolate_to=1e16, replicates=200)
    k = s.multipliers
    rungs = k[k["kind"] == "rung"]
    assert list(rungs["compute"]) == pytest.approx(list(COMPUTE))
    want = [k_closed_form(VARIANT, BASE, c) for c in COMPUTE]
    assert list(rungs["k"]) == pytest.approx(want, rel=1e-5)
    assert list(rungs["loss_fit"]) == pytest.approx([loss(VARIANT, c) for c in COMPUTE], rel=1e-7)
    assert (rungs["k_ci_low"] <= rungs["k"]).all() and (rungs["k"] <= rungs["k_ci_high"]).all()
    far = k[k["kind"] == "extrapolated"].iloc[0]
    assert far["k"] == pytest.approx(k_closed_form(VARIANT, BASE, 1e16), rel=1e-5)
    assert "extrapolated beyond the largest rung" in far["note"]
    fits = s.fits[s.fits["x"] == "compute"].set_index("variant")
    for name, curve in (("ffn=relu", BASE), ("ffn=swiglu", VARIANT)):
        assert tuple(fits.loc[name, ["E", "A", "alpha"]]) == pytest.approx(curve, rel=1e-5)
    top = want[-1], rungs.iloc[-1]["k_ci_low"], rungs.iloc[-1]["k_ci_high"]
    assert s.verdicts["ffn=swiglu"] == (f"better at every size (k = {number(top[0], 3)}x [{number(top[1], 3)}, "
                                        f"{number(top[2], 3)}] at the largest rung: above 1); decision accuracy: the "
                                        "smallest rung's order matches the largest's for 100% [100%, 100%] of 1 "
                                        "variant pair")


def test_every_export_carries_the_fit_and_the_multipliers(ladder_report, tmp_path):
    root, _, _ = ladder_report
    out = tmp_path / "report"
    result = write_report(root, out, formats="md,csv,tex,parquet,html", extrapolate_to=1e16)
    s = result["groups"][0]["scaling"]
    fits = pd.read_csv(out / "scaling_fits.csv")
    assert fits[["E", "A", "alpha"]].to_numpy() == pytest.approx(s.fits[["E", "A", "alpha"]].to_numpy(), rel=1e-12)
    assert pd.read_parquet(out / "compute_multipliers.parquet")["k"].to_numpy() == \
        pytest.approx(s.multipliers["k"].to_numpy(), rel=1e-12)
    md, tex, page = ((out / f).read_text() for f in ("report.md", "scaling.tex", "report.html"))
    for text in (md, tex, page):
        for value in BASE:  # the exact ladder's fit prints the true curve's numbers
            assert number(value, 4) in text
        assert number(k_closed_form(VARIANT, BASE, COMPUTE[-1]), 4) in text
    assert "better at every size" in md and "extrapolated" in md and "az-scaling-data" in page
    from arch_zoo.reports.interactive import script_hash
    from arch_zoo.reports.scaling.interactive import SCALING_JS

    csp = page.split('http-equiv="Content-Security-Policy" content="')[1].split('"')[0]
    assert script_hash(SCALING_JS) in csp.replace("&#x27;", "'")  # the page lets its scaling plot run
    assert (out / "plots" / "scaling_loss_vs_compute.png").is_file()


def test_below_the_baselines_floor_there_is_no_finite_multiplier(tmp_path):
    low_floor = (0.5, 5.0, 0.2)  # below E = 1.5 at every rung
    root = write_ladder(tmp_path / "floor", {"relu": BASE, "swiglu": low_floor}, offsets=OFFSETS)
    runs = load_runs(root)
    s = analyse(runs, summarize(runs), replicates=50)
    assert all(math.isinf(k) for k in s.multipliers["k"])
    assert all(n.startswith("no finite k: the variant's fitted loss is below the baseline's fitted floor")
               for n in s.multipliers["note"])
    assert "no finite k at the largest rung" in s.verdicts["ffn=swiglu"]


def test_too_few_rungs_and_a_loss_that_rises_are_notes_not_numbers(tmp_path):
    root = write_ladder(tmp_path / "two", {"relu": BASE, "swiglu": VARIANT}, compute=COMPUTE[:2], offsets=OFFSETS)
    runs = load_runs(root)
    s = analyse(runs, summarize(runs), replicates=50)
    assert s.multipliers.empty and set(s.fits["status"]) == {"too few rungs"}
    assert s.fits[["E", "A", "alpha"]].isna().all().all()
    assert any("fits need at least 3" in n for n in s.notes)
    rising = {("swiglu", 2, seed): 9.0 for seed in (0, 1, 2)}
    root = write_ladder(tmp_path / "rise", {"relu": BASE, "swiglu": VARIANT}, losses=rising, offsets=OFFSETS)
    runs = load_runs(root)
    s = analyse(runs, summarize(runs), replicates=50)
    row = s.fits[(s.fits["variant"] == "ffn=swiglu") & (s.fits["x"] == "compute")].iloc[0]
    assert row["status"] == "non-monotone" and math.isnan(row["E"])
    assert "does not fall from rung 2 to rung 3" in row["note"]
    assert s.multipliers.empty and "no compute multiplier: non-monotone" in s.verdicts["ffn=swiglu"]


def test_a_rung_the_fitted_curve_misses_beyond_seed_noise_is_a_note(tmp_path):
    """A robust fit follows the other rungs past one that lies off the curve; the report says so,
    judged against that rung's own seed spread (computed here by hand)."""
    off = {("relu", 1, seed): loss(BASE, COMPUTE[1]) * (1.03 + d) for seed, d in zip((0, 1, 2), OFFSETS["relu"])}
    runs = load_runs(write_ladder(tmp_path / "off", {"relu": BASE, "swiglu": VARIANT}, losses=off, offsets=OFFSETS))
    s = analyse(runs, summarize(runs), replicates=50)
    flagged = [n for n in s.notes if "off the fitted curve" in n]
    assert len(flagged) == 1 and flagged[0].startswith("ffn=relu: rung 2 (d32) lies +"), s.notes
    c = s.curves["ffn=relu"]
    fitted = float(fitted_curve(c.point, np.array([COMPUTE[1]]), c.x_ref)[0, 0])
    values = [off[("relu", 1, seed)] for seed in (0, 1, 2)]
    se = np.std(values, ddof=1) / math.sqrt(3)
    assert f"{np.mean(values) / fitted - 1:+.1%} off" in flagged[0]
    assert f"({abs(np.mean(values) - fitted) / se:.0f}x its seeds' standard error)" in flagged[0]
    runs = load_runs(write_ladder(tmp_path / "on", {"relu": BASE, "swiglu": VARIANT}, offsets=OFFSETS))
    assert not [n for n in analyse(runs, summarize(runs), replicates=50).notes if "off the fitted curve" in n]


def test_extrapolating_inside_the_ladder_or_without_one_is_refused(ladder_report):
    _, runs, table = ladder_report
    with pytest.raises(ConfigError, match="not beyond the largest rung's training compute"):
        analyse(runs, table, extrapolate_to=COMPUTE[-1])


@pytest.mark.parametrize("marks,expected", [
    (["better"] * 3, "better at every size"),
    (["worse"] * 3, "worse at every size"),
    (["equivalent"] * 3, "equivalent at every size"),
    (["inconclusive"] * 3, "inconclusive at every size"),
    (["better", "better", "worse", "worse"],
     "flips between rung 2 and rung 3: better at rungs 1, 2; worse at rungs 3, 4"),
    (["inconclusive", "better", "better"], "better at rungs 2, 3; inconclusive at rung 1"),
    (["equivalent", "", "better"], "better at rung 3; equivalent at rung 1; untested at rung 2"),
])
def test_the_verdict_reads_the_per_rung_verdicts(marks, expected):
    assert verdict([(str(i + 1), w) for i, w in enumerate(marks)]) == expected


def test_a_verdict_and_a_multiplier_pointing_opposite_ways_are_said_to_disagree():
    line = verdict([("1", "better"), ("2", "better")], "k = 0.8x [0.7, 0.9] at the largest rung: below 1", "below 1")
    assert line.startswith("better at every size (k = 0.8x") and "point opposite ways" in line
    assert "opposite" not in verdict([("1", "better")], "k = 1.2x [1.1, 1.3]: above 1", "above 1")


@pytest.mark.parametrize("low,high,band,words", [
    (1.1, 1.3, (0.95, 1.05), "above 1"), (0.7, 0.9, (0.95, 1.05), "below 1"),
    (0.97, 1.04, (0.95, 1.05), "equivalent to 1 (within the smallest effect)"),
    (1.01, 1.2, (0.95, 1.05), "inconclusive"),  # excludes 1 but reaches into the band: no word claims more
    (0.9, 1.2, None, "inconclusive"), (1.01, 1.2, None, "above 1"),
])
def test_a_multipliers_words_are_read_off_its_interval_and_the_band(low, high, band, words):
    assert relation(low, high, band) == words
    phrase = k_phrase((low + high) / 2, low, high, band)
    assert phrase.endswith(": " + words)
    if band is not None and band[0] <= (low + high) / 2 <= band[1]:
        assert phrase.startswith("k = 1.00x")  # within the smallest effect: printed as 1.00


def test_an_isoflop_ladder_fits_the_best_size_at_each_budget(tmp_path):
    """Each budget's point is its best size (the compute-optimal frontier): here the middle size sits on the
    curve and the others above it, so the fit recovers the curve, and a verdict covers every (budget, size)."""
    from .ladders import write_isoflop

    budgets = (1e12, 4e12, 1.6e13, 6.4e13)
    root = write_isoflop(tmp_path / "iso", {"relu": BASE, "swiglu": VARIANT}, budgets,
                         offsets={"relu": (-0.004, 0.0, 0.004), "swiglu": (0.003, -0.005, 0.002)})
    runs = load_runs(root)
    s = analyse(runs, summarize(runs), replicates=100)
    fits = s.fits.set_index("variant")
    assert list(fits["x"]) == ["compute", "compute"]  # no parameter fit: sizes do not grow with the budget here
    for name, curve in (("ffn=relu", BASE), ("ffn=swiglu", VARIANT)):
        assert tuple(fits.loc[name, ["E", "A", "alpha"]]) == pytest.approx(curve, rel=1e-5)
    rungs = s.multipliers[s.multipliers["kind"] == "rung"]
    assert list(rungs["size"]) == ["d32"] * 4
    assert list(rungs["k"]) == pytest.approx([k_closed_form(VARIANT, BASE, c) for c in budgets], rel=1e-5)
    assert s.verdicts["ffn=swiglu"].startswith("better at every size")


def test_an_interval_whose_end_falls_among_infinite_multipliers_is_infinite_not_huge():
    """The 97.5th percentile of 1,000 values, 25 of them infinite, lies between the 975th value
    (finite) and the 976th (infinite): linear interpolation makes it infinite, never a stand-in's
    fraction such as 2.5e298. Finite samples keep numpy's own linear percentiles."""
    v = np.r_[np.linspace(1.0, 2.0, 975), np.full(25, np.inf)]
    low, high = interval(v)
    assert high == math.inf and low == pytest.approx(np.quantile(v[:975], 0.025 * 999 / 974))
    finite = np.random.default_rng(0).lognormal(size=37)
    assert interval(finite) == pytest.approx(tuple(np.quantile(finite, [0.025, 0.975])))
    assert interval(np.r_[finite, np.nan]) == pytest.approx(interval(finite))
