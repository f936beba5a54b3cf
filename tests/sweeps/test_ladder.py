"""A tiny ladder end to end (issue 29 §3): 3 sizes x 2 variants x 2 seeds through `arch-zoo sweep`,
SIGKILLed (the whole process group, as a scheduler would) in the middle of a run's summary write,
resumed by the same command, then `arch-zoo report`; every fitted number the report gives is
recomputed here from the runs' own summary.json files with scipy."""
import csv
import json
import math
import signal
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import least_squares

from arch_zoo.cli import main

from .conftest import BASE, cli, write_spec
from .test_sigkill import arm, hooked  # noqa: F401 - the kill-hook fixture

SIZES = [{"d_model": 16, "n_layers": 1, "d_ff": 32}, {"d_model": 24, "n_layers": 2, "d_ff": 48},
         {"d_model": 32, "n_layers": 2, "d_ff": 64}]
SPEC = {"name": "ladder", "grid": {"model.position": ["sinusoidal", "rope"]}, "seeds": [0, 1],
        "baseline": {"model.position": "sinusoidal"}, "scale": {"sizes": SIZES, "budget": {"tokens_per_param": 2}}}
# enough to train every rung well below the unigram loss (the analysis leaves out rungs that did not): 30, 95
# and 158 steps at lr 1e-2, with embeddings that sinusoidal positions do not drown (xavier, scaled)
TRAINED = {**BASE, "model": {**BASE["model"], "init": "xavier", "scale_embeddings": True},
           "train": {**BASE["train"], "val_every": 20, "lr": 1e-2}}


def _rung_means(store, x):
    """{variant: [(x, mean final val/loss, [log losses])] per rung}, from run.json and summary.json; x:
    training FLOPs ("compute") or non-embedding parameters ("params")."""
    cells = {}
    for d in sorted((store / "runs").iterdir()):
        meta, summary = json.loads((d / "run.json").read_text()), json.loads((d / "summary.json").read_text())
        variant = f"position={meta['settings']['model.position']}"
        at = meta["budget"]["flops"] if x == "compute" else meta["scale"]["non_embedding_params"]
        rung = cells.setdefault(variant, {}).setdefault(meta["scale"]["rung"], [at, [], True])
        rung[1].append(summary["final"]["val/loss"])
        rung[2] &= summary["final"]["val/loss"] < 0.95 * summary["task"]["unigram_loss"]  # it trained
    return {v: [(c, float(np.mean(ls)), np.log(ls)) for _, (c, ls, trained) in sorted(rungs.items()) if trained]
            for v, rungs in cells.items()}


def _scipy_fit(points, delta):
    c = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    x = c / math.exp(np.log(c).mean())

    def residuals(theta):
        return np.log(theta[0] + np.exp(theta[1] - theta[2] * np.log(x))) - np.log(y)

    best = None
    for start in ((0.0, 0.5, 0.2), (0.5 * y.min(), 0.0, 0.3), (0.9 * y.min(), -1.0, 0.6)):
        res = least_squares(residuals, start, loss="huber", f_scale=delta,
                            bounds=([0, -np.inf, 0], [y.max(), np.inf, 4]), xtol=1e-15, ftol=1e-15, gtol=1e-15)
        best = res if best is None or res.cost < best.cost else best
    E, a, alpha = best.x
    return E, math.exp(a) * math.exp(np.log(c).mean()) ** alpha, alpha


@pytest.mark.outcome  # every rung trains: its worst seed 0.18 below the cut (0.95 x unigram) on this machine
@pytest.mark.slow  # 12 runs (30 to 158 steps) and two sweep processes: about 2 min on a busy 2-core machine
def test_a_tiny_ladder_killed_mid_way_resumes_and_reports_its_fits(tmp_path, hooked, capsys):  # noqa: F811
    path = write_spec(tmp_path / "spec", SPEC, TRAINED)
    out = tmp_path / "out"
    arm(hooked, ("rename", "summary.json", 5), "group", 1)  # the fifth run's summary, half written
    proc = subprocess.run(cli("sweep", path, "--out", out), start_new_session=True, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL and not hooked.exists(), proc.stderr[-2000:]
    store = out / "ladder"
    with (store / "index.csv").open() as f:
        assert sum(r["status"] == "completed" for r in csv.DictReader(f)) == 4

    assert main(["sweep", str(path), "--out", str(out)]) == 0
    with (store / "index.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["completed"] * 12 and "scale.size" in rows[0]

    capsys.readouterr()
    assert main(["report", str(store), "--out", str(tmp_path / "rep"), "--format", "md,csv"]) == 0
    printed = capsys.readouterr().out
    fits = pd.read_csv(tmp_path / "rep" / "scaling_fits.csv")
    ks = pd.read_csv(tmp_path / "rep" / "compute_multipliers.csv")
    md = (tmp_path / "rep" / "report.md").read_text()
    means = {x: _rung_means(store, x) for x in ("compute", "params")}
    errors = [np.std(logs, ddof=1) / math.sqrt(len(logs))
              for rungs in means["compute"].values() for _, _, logs in rungs]
    delta = max(1e-3, 1.345 * float(np.median(errors)))
    by = {}
    assert sorted(zip(fits["variant"], fits["x"])) == sorted((v, x) for v in means["compute"] for x in means)
    for _, row in fits.iterrows():
        points = means[row["x"]][row["variant"]]
        assert row["huber_delta"] == pytest.approx(delta, rel=1e-9)
        if len(points) < 3:  # rungs that did not train are left out of the fits, and named
            assert row["status"] == "too few rungs" and "left out of the fits" in md
        elif all(b[1] < a[1] for a, b in zip(points, points[1:])):  # a falling loss: the fit must be there
            assert row["status"] == "ok", row.to_dict()
            assert (row["E"], row["A"], row["alpha"]) == pytest.approx(_scipy_fit(points, delta), rel=1e-4)
            if row["x"] == "compute":
                by[row["variant"]] = (row["E"], row["A"], row["alpha"])
        else:  # a note instead of numbers
            assert row["status"] == "non-monotone" and math.isnan(row["E"])
            assert f"{row['variant']}: no fit (non-monotone)" in md
        assert row["variant"] in printed
    assert sorted(by) == ["position=rope", "position=sinusoidal"], fits.to_dict("records")  # every rung trained
    (Ev, Av, av), (Eb, Ab, ab) = by["position=rope"], by["position=sinusoidal"]  # k: the two curves' closed form
    assert len(ks) == 3
    for _, r in ks.iterrows():
        gap = Ev + Av * r["compute"] ** -av - Eb
        want = math.inf if gap <= 0 else (Ab / gap) ** (1 / ab) / r["compute"]
        assert r["k"] == pytest.approx(want, rel=1e-6)
    assert "## Scaling" in md and "- **position=rope**: " in md
