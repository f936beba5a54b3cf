"""A ladder reports how well it predicts (issue 42 items 2 and 3): the held-out rung and decision accuracy,
checked against the known curves the synthetic ladders are drawn from (the rung means sit on the curves:
each rung's seed offsets sum to 0) and against scipy for the seed-noise part of the interval."""
import html
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from arch_zoo.reports import load_runs, summarize, write_report
from arch_zoo.reports.scaling import analyse

from .ladders import COMPUTE, write_ladder

BASE = (1.5, 60.0, 0.15)
VARIANT = (1.4, 55.0, 0.15)  # better at every rung
CROSSING = (1.2, 80.0, 0.15)  # worse than BASE at the smallest rung, better at the largest
OFFSETS = (-0.004, 0.0, 0.004)


def loss(curve, c):
    E, A, alpha = curve
    return E + A * c ** -alpha


def k_closed_form(variant, base, c):
    return (base[1] / (loss(variant, c) - base[0])) ** (1 / base[2]) / c


def _runs(tmp_path, curves, losses=None):
    root = write_ladder(tmp_path / "lad", curves, offsets={k: OFFSETS for k in curves}, losses=losses)
    return root, load_runs(root)


def test_the_largest_rung_is_held_out_and_predicted_from_the_rungs_below(tmp_path):
    _, runs = _runs(tmp_path, {"relu": BASE, "swiglu": VARIANT})
    s = analyse(runs, summarize(runs), replicates=200)
    held = s.holdout.set_index("variant")
    top = COMPUTE[-1]
    for name, curve in (("ffn=relu", BASE), ("ffn=swiglu", VARIANT)):
        row = held.loc[name]
        seeds = [loss(curve, top) * (1 + o) for o in OFFSETS]
        assert row["rung"] == 4 and row["measured"] == pytest.approx(np.mean(seeds), rel=1e-12)
        assert row["seed_sd"] == pytest.approx(np.std(seeds, ddof=1), rel=1e-9)
        assert row["predicted"] == pytest.approx(loss(curve, top), rel=1e-6)  # 3 exact rungs give the curve back
        assert row["error"] == pytest.approx(row["measured"] - row["predicted"], abs=1e-12)
        assert row["error_sds"] == pytest.approx(row["error"] / row["seed_sd"], rel=1e-9)
        noise = stats.t.ppf(0.975, 2) * np.std(seeds, ddof=1) / math.sqrt(3)  # the measured mean's own t-interval
        assert row["pred_high"] - row["predicted"] >= noise * (1 - 1e-9)
        assert row["predicted"] - row["pred_low"] >= noise * (1 - 1e-9)
        assert bool(row["inside"])
    k = held.loc["ffn=swiglu"]
    assert k["k_predicted"] == pytest.approx(k_closed_form(VARIANT, BASE, top), rel=1e-5)
    assert k["k_all_rungs"] == pytest.approx(k_closed_form(VARIANT, BASE, top), rel=1e-5) and bool(k["k_inside"])
    assert "the fits of the rungs below predict ffn=swiglu to win at the largest rung; it measured ffn=swiglu: " \
           "the prediction holds" in " ".join(s.notes)
    assert s.held["ffn=relu"].numbers == [1, 2, 3]


def test_a_largest_rung_off_its_prediction_is_outside_and_a_wrong_winner_is_said(tmp_path):
    """swiglu's largest rung ends 10% above its curve (beyond relu there): outside its prediction, and the
    predicted winner is not the measured one."""
    worse = {("swiglu", 3, s): loss(VARIANT, COMPUTE[-1]) * 1.1 * (1 + o) for s, o in enumerate(OFFSETS)}
    _, runs = _runs(tmp_path, {"relu": BASE, "swiglu": VARIANT}, worse)
    s = analyse(runs, summarize(runs), replicates=200)
    row = s.holdout.set_index("variant").loc["ffn=swiglu"]
    assert row["error"] == pytest.approx(0.1 * loss(VARIANT, COMPUTE[-1]), rel=1e-5) and not row["inside"]
    assert "predict ffn=swiglu to win at the largest rung; it measured ffn=relu: the prediction fails" in \
        " ".join(s.notes)


def test_no_hold_out_below_four_rungs_or_when_the_runs_say_none(tmp_path):
    _, runs = _runs(tmp_path, {"relu": BASE, "swiglu": VARIANT})
    for record in runs.attrs["scale"].values():
        record["holdout"] = None  # as scale.holdout: none records it
    s = analyse(runs, summarize(runs), replicates=50)
    assert s.holdout.empty and not s.held


def test_decision_accuracy_counts_the_pairs_each_rung_orders_as_the_largest_does(tmp_path):
    """Three variants: swiglu beats both everywhere; gelu is worse than relu at the smallest rungs and better at
    the largest. The share per rung is counted here from the curves; the fit of rungs 1-3 (exact curves)
    predicts the largest rung's order, so it gets every pair right."""
    curves = {"relu": BASE, "swiglu": VARIANT, "gelu": CROSSING}
    _, runs = _runs(tmp_path, curves)
    s = analyse(runs, summarize(runs), replicates=200)
    names = list(curves)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]

    def share(c):
        top = COMPUTE[-1]
        return np.mean([np.sign(loss(curves[a], c) - loss(curves[b], c)) == np.sign(loss(curves[a], top)
                                                                                   - loss(curves[b], top))
                        for a, b in pairs])

    means = s.decisions[s.decisions["by"] == "rung means"].set_index("rung")
    assert list(means.index) == [1, 2, 3] and (means["pairs"] == 3).all()
    for rung in (1, 2, 3):
        assert means.loc[rung, "accuracy"] == pytest.approx(share(COMPUTE[rung - 1]), abs=1e-12)
        assert means.loc[rung, "ci_low"] <= means.loc[rung, "accuracy"] <= means.loc[rung, "ci_high"]
    assert share(COMPUTE[0]) == pytest.approx(2 / 3)  # the crossing pair is misordered at the smallest rung
    fit = s.decisions[s.decisions["by"] == "fit of rungs 1-3"].iloc[0]
    assert fit["accuracy"] == 1.0
    assert s.verdicts["ffn=swiglu"].endswith("decision accuracy: the smallest rung's order matches the largest's "
                                             f"for 67% [{means.loc[1, 'ci_low']:.0%}, {means.loc[1, 'ci_high']:.0%}] "
                                             "of 3 variant pairs")


def test_the_report_shows_the_held_out_rung_and_decision_accuracy_in_every_format(tmp_path):
    root, _ = _runs(tmp_path, {"relu": BASE, "swiglu": VARIANT})
    out = tmp_path / "report"
    result = write_report(root, out, formats="md,csv,tex,parquet,html")
    s = result["groups"][0]["scaling"]
    assert pd.read_csv(out / "holdout.csv")["predicted"].to_numpy() == \
        pytest.approx(s.holdout["predicted"].to_numpy(), rel=1e-12)
    assert pd.read_parquet(out / "decision_accuracy.parquet")["accuracy"].tolist() == s.decisions["accuracy"].tolist()
    md, tex, page = ((out / f).read_text() for f in ("report.md", "scaling.tex", "report.html"))
    for text in (md, tex.replace("\\%", "%"), html.unescape(page)):
        assert "held-out rung: 2 of 2 measured losses inside their predicted 95% interval" in text
        assert "decision accuracy: the smallest rung's order matches the largest's" in text
    assert "Held-out rung: predicted from the rungs below" in page and "k predicted [95\\%]" in tex
    assert "Held-out rung: predicted from the rungs below:" in md and "Decision accuracy: the order" in md
    assert (out / "plots" / "scaling_decision_accuracy.png").is_file()


def test_a_smallest_rung_that_did_not_train_leaves_a_reason_and_the_rung_means(tmp_path):
    """relu's smallest rung ends above the unigram loss: its hold-out fit has 2 rungs, too few, so its row says
    why there is no prediction; decision accuracy still orders the variants by the rung means at the rungs every
    variant trained (2 and 3), which need no fit, and the verdicts cite the smallest of them."""
    curves = {"relu": BASE, "swiglu": VARIANT, "gelu": CROSSING}
    root = write_ladder(tmp_path / "lad", curves, offsets={k: OFFSETS for k in curves},
                        losses={("relu", 0, s): 9.0 for s in range(3)})
    for summary in root.glob("runs/*/summary.json"):
        record = json.loads(summary.read_text())
        record["task"] = {"unigram_loss": 5.0}
        summary.write_text(json.dumps(record))
    runs = load_runs(root)
    s = analyse(runs, summarize(runs), replicates=100)
    held = s.holdout.set_index("variant")
    assert pd.isna(held.loc["ffn=relu", "predicted"])
    why = ("no prediction: 2 rungs with completed runs; a curve of 3 parameters needs at least 3 (no rung 1 to "
           "fit: it did not train or did not complete)")
    assert held.loc["ffn=relu", "note"] == why and pd.isna(held.loc["ffn=swiglu", "note"])
    assert f"held-out rung: no prediction for ffn=relu: {why.removeprefix('no prediction: ')}" in s.notes
    assert not pd.isna(held.loc["ffn=swiglu", "predicted"])  # its 3 rungs below still predict

    names = list(curves)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    top = COMPUTE[-1]
    means = s.decisions[s.decisions["by"] == "rung means"].set_index("rung")
    assert list(means.index) == [2, 3] and (means["pairs"] == 3).all()
    for rung in (2, 3):
        c = COMPUTE[rung - 1]
        expected = np.mean([np.sign(loss(curves[a], c) - loss(curves[b], c)) == np.sign(loss(curves[a], top)
                                                                                       - loss(curves[b], top))
                            for a, b in pairs])
        assert means.loc[rung, "accuracy"] == pytest.approx(expected, abs=1e-12)
    assert not (s.decisions["by"] != "rung means").any()  # 2 shared rungs below the largest: no fit of 3
    r = means.loc[2]
    assert s.verdicts["ffn=swiglu"].endswith(f"decision accuracy: the smallest trained rung's (rung 2) order matches "
                                             f"the largest's for {r['accuracy']:.0%} [{r['ci_low']:.0%}, "
                                             f"{r['ci_high']:.0%}] of 3 variant pairs")
