"""L(N, D) = E + A / N^alpha + B / D^beta from sizes x WSD-S budgets (issue 56 item 2): the fit
against scipy and known surfaces, the compute-optimal point and the multiplier there against a
brute-force minimisation, the held-out point, the bootstrap's coverage at 3 seeds in a seeded
simulation, and the line for a ladder that resolves no beta."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.optimize import brentq, least_squares, minimize_scalar

from arch_zoo.formatting import number
from arch_zoo.reports import load_runs, write_report
from arch_zoo.reports.scaling.bootstrap import huber_delta, interval
from arch_zoo.reports.scaling.fit import OK, huber
from arch_zoo.reports.scaling.fit_nd import fit_nd_many, frontier, natural, optimum, predict_nd
from arch_zoo.reports.scaling.multiplier import multiplier
from arch_zoo.reports.scaling.nd import Points, analyse_points
from arch_zoo.reports.scaling.points import Cell, Ladder, Rung, draws, resample, seed_noise
from arch_zoo.reports.scaling.surface import fit_surfaces

BASE = (1.8, 60.0, 0.35, 80.0, 0.30)  # E, A, alpha, B, beta
VARIANT = (1.75, 50.0, 0.35, 80.0, 0.30)
SIZES = (1e5, 2e5, 4e5, 8e5)  # non-embedding parameters
BUDGETS = (0.25, 0.5, 1.0)  # WSD-S decays of a run of 20 tokens per parameter
N = np.repeat(SIZES, len(BUDGETS))
D = np.array([20 * n * f for n in SIZES for f in BUDGETS])
N_REF, D_REF = math.exp(np.log(N).mean()), math.exp(np.log(D).mean())
KAPPA, TOP = 6.0, 6.0 * 8e5 * 16e6  # FLOPs per parameter and token; the largest run's compute


def loss(p, n, d):
    E, A, alpha, B, beta = p
    return E + A * np.asarray(n, float) ** -alpha + B * np.asarray(d, float) ** -beta


def theta(p):
    E, A, alpha, B, beta = p
    return np.array([[E, math.log(A) - alpha * math.log(N_REF), alpha, math.log(B) - beta * math.log(D_REF), beta]])


def ladder(rng, surfaces, seeds=3, sigma=0.01):
    """Every variant's 12 (size, budget) points, each seed's loss the surface's times exp(N(0, sigma))."""
    rungs = {v: [Rung(i + 1, str(i), [Cell(str(n), i + 1, math.nan, n, {
        s: float(loss(p, n, d) * (math.exp(rng.normal(0, sigma)) if rng is not None else 1.0)) for s in range(seeds)})])
        for i, (n, d) in enumerate(zip(N, D))] for v, p in surfaces.items()}
    lad = Ladder(list(rungs), rungs, {}, False, False, len(N))
    return Points(lad, {v: N for v in rungs}, {v: D for v in rungs}, KAPPA, TOP)


def brute_optimum(p, compute):
    """(N*, L*) by a bounded scalar minimisation of L(N, C / (kappa N)) over log N."""
    f = lambda logn: float(loss(p, math.exp(logn), compute / KAPPA / math.exp(logn)))  # noqa: E731
    res = minimize_scalar(f, bounds=(math.log(1e2), math.log(1e12)), method="bounded",
                          options={"xatol": 1e-12})
    return math.exp(res.x), res.fun


def test_exact_points_give_back_the_surface():
    r = analyse_points(ladder(None, {"base": BASE, "variant": VARIANT}), "base", replicates=20)
    for _, row in r.fits.iterrows():
        truth = BASE if row["variant"] == "base" else VARIANT
        assert row["status"] == OK
        assert [row[k] for k in ("E", "A", "alpha", "B", "beta")] == pytest.approx(truth, rel=1e-6)
    assert r.notes == []


def test_the_fit_reaches_the_minimum_scipy_least_squares_finds_with_the_same_huber_loss():
    rng = np.random.default_rng(5)
    delta = 0.005
    ys = loss(BASE, N, D)[None, :] * np.exp(rng.normal(0, 0.01, (5, len(N))))
    n, d = (np.tile(np.log(x / ref), (len(ys), 1)) for x, ref in ((N, N_REF), (D, D_REF)))
    fits = fit_nd_many(n, d, np.log(ys), np.ones_like(ys), delta=delta)
    assert (fits.status == OK).all()
    for i, y in enumerate(ys):
        def residuals(t):
            return np.log(t[0] + np.exp(t[1] - t[2] * n[i]) + np.exp(t[3] - t[4] * d[i])) - np.log(y)

        ours = huber(residuals(fits.theta[i]), delta).sum()
        assert ours == pytest.approx(fits.loss[i], rel=1e-12)
        best = math.inf
        for start in (fits.theta[i], theta(BASE)[0], (0.5 * y.min(), 0.0, 0.3, 0.0, 0.3)):
            res = least_squares(residuals, start, loss="huber", f_scale=delta,
                                bounds=([0, -np.inf, 0, -np.inf, 0], [y.max(), np.inf, 4, np.inf, 4]),
                                xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=5000)
            best = min(best, res.cost)  # 0.5 f_scale^2 sum rho((r / f_scale)^2): the same sum
        assert ours <= best * (1 + 1e-6) + 1e-15, i


def test_the_compute_optimal_point_and_the_multiplier_there_equal_a_brute_force_minimisation():
    n_opt, d_opt, l_opt = (float(v[0]) for v in optimum(theta(BASE), N_REF, D_REF, TOP, KAPPA))
    brute_n, brute_l = brute_optimum(BASE, TOP)
    assert n_opt == pytest.approx(brute_n, rel=1e-5) and l_opt == pytest.approx(brute_l, rel=1e-10)
    assert n_opt * d_opt * KAPPA == pytest.approx(TOP, rel=1e-12)
    # k: the compute at which the baseline's optimum reaches the variant's optimal loss at TOP, over TOP
    target = brute_optimum(VARIANT, TOP)[1]
    k_brute = brentq(lambda c: brute_optimum(BASE, c)[1] - target, TOP, 1e3 * TOP, xtol=1e-6 * TOP, rtol=1e-12) / TOP
    k = multiplier(frontier(theta(VARIANT), N_REF, D_REF, KAPPA, TOP), frontier(theta(BASE), N_REF, D_REF, KAPPA, TOP),
                   1.0)[0]
    assert k == pytest.approx(k_brute, rel=1e-5)
    r = analyse_points(ladder(None, {"base": BASE, "variant": VARIANT}), "base", replicates=20)
    row = r.multipliers.iloc[0]
    assert (row["variant"], row["baseline"]) == ("variant", "base") and row["k"] == pytest.approx(k_brute, rel=1e-5)
    opt = r.optimum.set_index("variant").loc["base"]
    assert (opt["N_opt"], opt["loss_opt"]) == pytest.approx((brute_n, brute_l), rel=1e-5)


def test_the_held_out_point_is_predicted_by_the_surface_fitted_without_it():
    rng = np.random.default_rng(11)
    pts = ladder(rng, {"base": BASE})
    r = analyse_points(pts, "base", replicates=200)
    row = r.holdout.iloc[0]
    top = pts.ladder.rungs["base"][-1].cells[0]  # 8e5 parameters at its full budget
    seeds = list(top.losses.values())
    assert (row["N"], row["D"], row["seeds"]) == (8e5, 16e6, 3)
    assert row["measured"] == pytest.approx(np.mean(seeds)) and row["seed_sd"] == pytest.approx(np.std(seeds, ddof=1))
    refit = fit_nd_many(np.log(N[:-1] / N_REF)[None], np.log(D[:-1] / D_REF)[None],
                        np.log([c.cells[0].mean() for c in pts.ladder.rungs["base"][:-1]])[None],
                        np.ones((1, len(N) - 1)), delta=huber_delta(seed_noise(pts.ladder)))
    predicted = math.exp(predict_nd(refit.theta, np.log(8e5 / N_REF) * np.ones((1, 1)),
                                    np.log(16e6 / D_REF) * np.ones((1, 1)))[0, 0])
    assert row["predicted"] == pytest.approx(predicted, rel=1e-6)
    assert row["error"] == pytest.approx(predicted - np.mean(seeds))
    assert row["error_sds"] == pytest.approx(row["error"] / np.std(seeds, ddof=1))
    assert row["pred_low"] < row["predicted"] < row["pred_high"] and row["inside"]


def test_bootstrap_intervals_cover_the_truth_at_3_seeds():
    """A seeded simulation: 150 ladders of 4 sizes x 3 budgets x 3 seeds (1% noise per seed) of two variants,
    each fitted with 100 paired replicates, in one batch. Each 95% interval (the base's parameters, its
    compute-optimal N and loss at the largest compute, and the multiplier there) must hold the truth in at
    least 90% of the ladders; and the point estimates must recover it (medians within 5%)."""
    rng = np.random.default_rng(56)
    items, deltas, ladders, replicates = [], [], 150, 100
    for _ in range(ladders):
        pts = ladder(rng, {"base": BASE, "variant": VARIANT})
        shared = draws(pts.ladder, replicates, rng)
        items += [(v, pts.ladder.rungs[v], N, D, resample(pts.ladder.rungs[v], shared, replicates)[1])
                  for v in ("base", "variant")]
        deltas.append(huber_delta(seed_noise(pts.ladder)))
    surfaces = fit_surfaces(items, N_REF, D_REF, float(np.median(deltas)))
    k_true = multiplier(frontier(theta(VARIANT), N_REF, D_REF, KAPPA, TOP),
                        frontier(theta(BASE), N_REF, D_REF, KAPPA, TOP), 1.0)[0]
    n_true, _, l_true = (float(v[0]) for v in optimum(theta(BASE), N_REF, D_REF, TOP, KAPPA))
    hits, estimates = {k: 0 for k in ("E", "A", "alpha", "B", "beta", "N_opt", "loss_opt", "k")}, []
    for base, var in zip(surfaces[::2], surfaces[1::2]):
        assert base.ok and var.ok and base.usable.mean() > 0.95
        reps = natural(base.replicates.theta, N_REF, D_REF)
        for i, name in enumerate(("E", "A", "alpha", "B", "beta")):
            low, high = base.interval(reps[:, i])
            hits[name] += low <= BASE[i] <= high
        n_opt, _, l_opt = optimum(base.replicates.theta, N_REF, D_REF, TOP, KAPPA)
        hits["N_opt"] += base.interval(n_opt)[0] <= n_true <= base.interval(n_opt)[1]
        hits["loss_opt"] += base.interval(l_opt)[0] <= l_true <= base.interval(l_opt)[1]
        both = base.usable & var.usable
        ks = multiplier(frontier(var.replicates.theta[both], N_REF, D_REF, KAPPA, TOP),
                        frontier(base.replicates.theta[both], N_REF, D_REF, KAPPA, TOP), 1.0)
        low, high = interval(ks)
        hits["k"] += low <= k_true <= high
        estimates.append([*natural(base.point.theta, N_REF, D_REF)[0], ks[0] if len(ks) else math.nan])
    coverage = {k: v / ladders for k, v in hits.items()}
    assert all(v >= 0.90 for v in coverage.values()), coverage
    medians = np.nanmedian(np.array(estimates), axis=0)
    assert medians[[0, 2, 4]] == pytest.approx([BASE[0], BASE[2], BASE[4]], rel=0.05)


def test_a_ladder_with_no_data_term_says_it_resolves_no_beta():
    flat = (1.8, 60.0, 0.35, 0.0, 0.3)  # B = 0: the budgets change nothing
    pts = ladder(None, {"base": (flat[0], flat[1], flat[2], 1e-12, 0.3)})
    r = analyse_points(pts, "base", replicates=20)
    assert len(r.notes) == 1 and r.notes[0].startswith("base: the ladder resolves no beta"), r.notes
    assert r.optimum.empty and r.multipliers.empty
    assert r.notes[0].endswith("no optimum or multiplier is given")


def test_a_ladder_with_no_floor_keeps_its_optimum_and_says_what_it_assumes():
    """E fitted at 0 (the points show no floor): N*, D* and k are still the surface's, and the note
    says they are those of a surface without a floor, not that they were left out."""
    pts = ladder(None, {"base": (0.0, 60.0, 0.35, 40.0, 0.3), "var": (0.0, 40.0, 0.35, 40.0, 0.3)})
    r = analyse_points(pts, "base", replicates=20)
    assert r.notes and all("resolves no E" in n and n.endswith("no floor in the ladder's range") for n in r.notes), r.notes
    assert set(r.optimum["variant"]) == {"base", "var"} and list(r.multipliers["variant"]) == ["var"]


def write_wsds_ladder(root, surfaces, seeds=(0, 1, 2)):
    """A WSD-S ladder store as `arch-zoo sweep` leaves it: per size, variant and seed a run of 20 tokens per
    parameter, with a branch per budget below 1 under branches/<steps>/ (run.json from training's own
    branch_meta); every seed's val/loss the surface's exact value."""
    from arch_zoo.recipes.wsds import Branch
    from arch_zoo.training.branches import branch_meta

    from .sweeps import config, write_run

    root.mkdir(parents=True)
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "name": root.name, "base": "configs/experiments/char_lm.yaml", "grid": {"model.ffn": list(surfaces)},
        "seeds": list(seeds), "baseline": {"model.ffn": "relu"}, "metric": {"name": "val/loss", "goal": "min"},
        "scale": {"sizes": [{"d_model": 16 * 2 ** i} for i in range(len(SIZES))]}}))
    for rung, n in enumerate(SIZES):
        size, steps = f"d{16 * 2 ** rung}", 400 * 2 ** rung
        for name, p in surfaces.items():
            for seed in seeds:
                run = root / "runs" / f"ffn-{name}__size-{size}-s{seed}"
                tokens = 20 * n
                dirs = [(run, steps, None)] + [(run / "branches" / str(round(f * steps)), round(f * steps), f)
                                               for f in BUDGETS[:-1]]
                for where, at, fraction in dirs:
                    write_run(where, status="completed", settings={"model.ffn": name, "scale.size": size}, seed=seed,
                              variant=f"ffn={name},size={size}", final={"val/loss": float(loss(p, n, tokens * at / steps))},
                              sweep=root.name, is_baseline=name == "relu",
                              cfg=config("rope", seed, **{"model.ffn": name, "model.d_model": 16 * 2 ** rung,
                                                          "train.max_steps": at}))
                    summary = json.loads((where / "summary.json").read_text())
                    (where / "summary.json").write_text(json.dumps({**summary, "step": at}))
                    meta = json.loads((run / "run.json").read_text())
                    meta.update(budget={"match": "tokens", "steps": steps, "tokens": tokens, "flops": KAPPA * n * tokens},
                                scale={"rung": rung, "size": size, "keys": {"d_model": 16 * 2 ** rung},
                                       "budget": "tokens_per_param", "params": int(n * 1.2), "non_embedding_params": n,
                                       "tokens_per_param": 20.0, "flops_budget": None, "lr": None})
                    if fraction is None:
                        (run / "run.json").write_text(json.dumps(meta))
                    else:
                        (where / "run.json").write_text(json.dumps(branch_meta(meta, Branch(at, 0, fraction))))
    return root


def test_the_report_of_a_wsds_ladder_carries_the_l_n_d_section(tmp_path):
    root = write_wsds_ladder(tmp_path / "lad", {"relu": BASE, "swiglu": VARIANT})
    runs = load_runs(root)
    assert len(runs) == 2 * 4 * 3 * 3 and sorted(set(runs["wsds.budget"])) == [0.25, 0.5, 1.0]
    result = write_report(root, tmp_path / "rep", formats="md,csv")
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "L(N, D) fits" in text and "Compute multiplier at the compute-optimal point" in text
    fits = pd.read_csv(tmp_path / "rep" / "scaling_nd_fits.csv").set_index("variant")
    for variant, truth in (("ffn=relu", BASE), ("ffn=swiglu", VARIANT)):
        assert [fits.loc[variant, k] for k in ("E", "A", "alpha", "B", "beta")] == pytest.approx(truth, rel=1e-5)
    best = pd.read_csv(tmp_path / "rep" / "scaling_nd_optimum.csv").set_index("variant").loc["ffn=relu"]
    brute_n, brute_l = brute_optimum(BASE, TOP)
    assert best["compute"] == pytest.approx(TOP) and (best["N_opt"], best["loss_opt"]) == pytest.approx(
        (brute_n, brute_l), rel=1e-4)
    k = pd.read_csv(tmp_path / "rep" / "scaling_nd_multipliers.csv").iloc[0]
    target = brute_optimum(VARIANT, TOP)[1]
    k_brute = brentq(lambda c: brute_optimum(BASE, c)[1] - target, TOP, 1e3 * TOP, xtol=1e-6 * TOP) / TOP
    assert (k["variant"], k["baseline"]) == ("ffn=swiglu", "ffn=relu") and k["k"] == pytest.approx(k_brute, rel=1e-4)
    assert result["groups"][0]["scaling"].nd is not None
    # the console says the same numbers: each variant's fit, its optimum and k, as `arch-zoo report` prints them
    from arch_zoo.reports.scaling.render import terminal_lines

    lines = "\n".join(terminal_lines(result["groups"][0]["scaling"]))
    assert "L(N, D) = E + A / N^alpha + B / D^beta" in lines
    relu = next(line for line in lines.splitlines() if line.startswith("  ffn=relu: "))
    assert f"N* {number(best['N_opt'], 4)} [" in relu and f"E {number(BASE[0], 4)} [" in relu
    assert f"k vs ffn=relu {number(k['k'], 4)} [" in lines and "held out ffn=" in lines
