"""How well a ladder predicts (issue 42 items 2 and 3), in the same report as its fits.

Held-out rung: each variant is refitted on the rungs below the largest, and that fit predicts the
largest rung's loss. The prediction's interval joins the curve's (the replicates' pointwise 95%) and the
noise of the measured mean (a t-interval of its seeds: the measured mean is one draw too), in
quadrature. The table gives the error in nats and in the rung's seed standard deviations, whether the
measured mean falls inside, the multiplier predicted at that rung (with its interval) against the one
the fits of every rung give, and whether the predicted winner is the measured one.

Decision accuracy (DataDecide, Magnusson et al. 2025): for every pair of variants, does the order at a
smaller rung (its means, or the fit of the rungs up to it extrapolated to the largest rung's compute)
match the order the largest rung measured? The share of pairs, with an interval from the same
replicates the fits use (each replicate redraws every rung, the largest included)."""
from __future__ import annotations

import math
from itertools import combinations
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
from scipy import stats

from .bootstrap import MIN_RUNGS, Curve, fit_curves, interval
from .fit import curve as curve_values
from .multiplier import at
from .points import Ladder

HOLDOUT_COLUMNS = ["variant", "rung", "size", "compute", "seeds", "measured", "seed_sd", "predicted", "pred_low",
                   "pred_high", "error", "error_sds", "inside", "k_predicted", "k_low", "k_high", "k_all_rungs",
                   "k_inside"]
DECISION_COLUMNS = ["rung", "size", "by", "pairs", "accuracy", "ci_low", "ci_high"]
Drawn = Dict[str, Tuple[np.ndarray, np.ndarray]]


def _top(ladder: Ladder, variant: str):
    rungs = ladder.rungs[variant]
    return rungs[-1] if rungs and rungs[-1].number == ladder.planned else None


def held_out_fits(ladder: Ladder, drawn: Drawn, x_ref: float, delta: float) -> Dict[str, Curve]:
    """Each variant with the largest rung refitted without it (on every rung below), from the same replicates."""
    items = [(v, ladder.rungs[v][:-1], (drawn[v][0][:, :-1], drawn[v][1][:, :-1])) for v in drawn
             if _top(ladder, v) is not None]
    return {c.variant: c for c in fit_curves(items, x_ref, delta)}


def _prediction(c: Curve, compute: float, seeds: List[float], confidence: float) -> Tuple[float, float, float]:
    mid = float(curve_values(c.point, np.array([compute]), c.x_ref)[0, 0])
    reps = curve_values(c.replicates, np.array([compute]), c.x_ref)[c.usable, 0]
    low, high = interval(reps, confidence) if len(reps) else (mid, mid)
    n = len(seeds)
    noise = stats.t.ppf((1 + confidence) / 2, n - 1) * np.std(seeds, ddof=1) / math.sqrt(n) if n >= 2 else 0.0
    return mid, mid - math.hypot(mid - low, noise), mid + math.hypot(high - mid, noise)


def holdout_table(ladder: Ladder, held: Dict[str, Curve], full: Dict[str, Curve], baseline: Optional[str],
                  confidence: float = 0.95) -> Tuple[pd.DataFrame, List[str]]:
    """One row per variant at the held-out rung, and the lines that say what it shows."""
    rows = []
    base_held, base_full = held.get(baseline), full.get(baseline)
    for v, c in held.items():
        top = _top(ladder, v)
        cell = top.best()
        seeds = list(cell.losses.values())
        sd = float(np.std(seeds, ddof=1)) if len(seeds) > 1 else math.nan
        row = {"variant": v, "rung": top.number, "size": cell.size, "compute": cell.compute, "seeds": len(seeds),
               "measured": cell.mean(), "seed_sd": sd}
        if c.ok:
            mid, low, high = _prediction(c, cell.compute, seeds, confidence)
            error = cell.mean() - mid
            row.update(predicted=mid, pred_low=low, pred_high=high, error=error,
                       error_sds=error / sd if sd and sd > 0 else math.nan, inside=bool(low <= cell.mean() <= high))
        if v != baseline and c.ok and base_held is not None and base_held.ok:
            k, k_low, k_high, _ = at(c, base_held, cell.compute)
            row.update(k_predicted=k, k_low=k_low, k_high=k_high)
            if full.get(v) is not None and full[v].ok and base_full is not None and base_full.ok:
                measured = at(full[v], base_full, cell.compute)[0]
                row.update(k_all_rungs=measured, k_inside=bool(k_low <= measured <= k_high))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=HOLDOUT_COLUMNS)
    for col in ("inside", "k_inside"):
        frame[col] = frame[col].astype("boolean")  # yes / no / not known, and a parquet column of one type
    lines = []
    done = frame.dropna(subset=["predicted"])
    if len(done) >= 2:
        predicted, measured = done.loc[done["predicted"].idxmin(), "variant"], done.loc[done["measured"].idxmin(),
                                                                                         "variant"]
        lines.append(f"held-out rung: the fits of the rungs below predict {predicted} to win at the largest rung; it "
                     f"measured {measured}" + (": the prediction holds" if predicted == measured else
                                              ": the prediction fails"))
    if len(done):
        lines.append(f"held-out rung: {int(done['inside'].sum())} of {len(done)} measured losses inside their "
                     f"predicted 95% interval; error {_span(done['error'], 'nats')}")
    return frame, lines


def _span(values: pd.Series, unit: str) -> str:
    return f"{values.abs().max():.3g} {unit} at most" if len(values) > 1 else f"{values.iloc[0]:+.3g} {unit}"


def _share(order: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(replicates,) the share of pairs whose sign agrees; ``order`` and ``truth``: (replicates, pairs)."""
    return (np.sign(order) == np.sign(truth)).mean(axis=1)


def decision_accuracy(ladder: Ladder, drawn: Drawn, x_ref: float, delta: float, confidence: float = 0.95
                      ) -> pd.DataFrame:
    """The share of variant pairs whose order at each smaller rung (its means, and the fit of the rungs up to
    it where there are 3 or more) matches the largest rung's measured order, with its interval."""
    variants = [v for v in drawn if _top(ladder, v) is not None
                and [r.number for r in ladder.rungs[v]] == list(range(1, ladder.planned + 1))]
    if len(variants) < 2 or ladder.planned < 2:
        return pd.DataFrame(columns=DECISION_COLUMNS)
    pairs = list(combinations(variants, 2))
    means = {v: np.array([r.best().mean() for r in ladder.rungs[v]]) for v in variants}
    ys = {v: drawn[v][1] for v in variants}
    top = ladder.planned - 1
    truth = np.array([[means[a][top] - means[b][top] for a, b in pairs]])
    truth_reps = np.stack([ys[a][:, top] - ys[b][:, top] for a, b in pairs], axis=1)
    rows = []
    for j in range(top):
        size = ladder.rungs[variants[0]][j].best().size
        point = _share(np.array([[means[a][j] - means[b][j] for a, b in pairs]]), truth)[0]
        reps = _share(np.stack([ys[a][:, j] - ys[b][:, j] for a, b in pairs], axis=1), truth_reps)
        low, high = interval(reps[np.all(np.isfinite(truth_reps), axis=1)], confidence)
        rows.append({"rung": j + 1, "size": size, "by": "rung means", "pairs": len(pairs), "accuracy": point,
                     "ci_low": low, "ci_high": high})
        if j + 1 >= MIN_RUNGS:
            rows.append(_by_fit(ladder, drawn, variants, pairs, j + 1, x_ref, delta, truth, truth_reps, confidence))
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def _by_fit(ladder, drawn, variants, pairs, upto, x_ref, delta, truth, truth_reps, confidence) -> dict:
    items = [(v, ladder.rungs[v][:upto], (drawn[v][0][:, :upto], drawn[v][1][:, :upto])) for v in variants]
    fits = {c.variant: c for c in fit_curves(items, x_ref, delta)}
    row = {"rung": upto, "size": ladder.rungs[variants[0]][upto - 1].best().size, "by": f"fit of rungs 1-{upto}",
           "pairs": len(pairs), "accuracy": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    if not all(c.ok for c in fits.values()):
        return row
    at_top = {v: np.array([ladder.rungs[v][-1].best().compute]) for v in variants}
    point = {v: curve_values(fits[v].point, at_top[v], x_ref)[0, 0] for v in variants}
    reps = {v: curve_values(fits[v].replicates, at_top[v], x_ref)[:, 0] for v in variants}
    usable = np.all([fits[v].usable for v in variants], axis=0) & np.all(np.isfinite(truth_reps), axis=1)
    row["accuracy"] = float(_share(np.array([[point[a] - point[b] for a, b in pairs]]), truth)[0])
    shares = _share(np.stack([reps[a] - reps[b] for a, b in pairs], axis=1), truth_reps)
    row["ci_low"], row["ci_high"] = interval(shares[usable], confidence)
    return row


def decision_line(decisions: pd.DataFrame) -> Optional[str]:
    """What the smallest rung would have told you: the line the verdicts cite."""
    first = decisions[(decisions["rung"] == 1) & (decisions["by"] == "rung means")]
    if not len(first):
        return None
    r = first.iloc[0]
    pairs = int(r["pairs"])
    return (f"decision accuracy: the smallest rung's order matches the largest's for {r['accuracy']:.0%} "
            f"[{r['ci_low']:.0%}, {r['ci_high']:.0%}] of {pairs} variant pair{'s' * (pairs != 1)}")
