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
                   "k_inside", "note"]
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
        if not c.ok:
            row["note"] = _no_prediction(c, top.number)
        else:
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
    lines = [f"held-out rung: no prediction for {r['variant']}: {r['note'].removeprefix('no prediction: ')}"
             for _, r in frame.iterrows() if isinstance(r["note"], str)]
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


def _no_prediction(c: Curve, held_out: int) -> str:
    """Why the rungs below the held-out one give no prediction, naming the rungs left out of the fits."""
    missing = [str(n) for n in range(1, held_out) if n not in c.numbers]
    left = (f" (no rung {', '.join(missing)} to fit: {'it' if len(missing) == 1 else 'they'} did not train or did "
            "not complete)") if missing else ""
    return f"no prediction: {c.note}{left}"


def _span(values: pd.Series, unit: str) -> str:
    return f"{values.abs().max():.3g} {unit} at most" if len(values) > 1 else f"{values.iloc[0]:+.3g} {unit}"


def _share(order: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(replicates,) the share of pairs whose sign agrees; ``order`` and ``truth``: (replicates, pairs)."""
    return (np.sign(order) == np.sign(truth)).mean(axis=1)


def decision_accuracy(ladder: Ladder, drawn: Drawn, x_ref: float, delta: float, confidence: float = 0.95
                      ) -> pd.DataFrame:
    """The share of variant pairs whose order at each smaller rung (its means, and the fit of the trained rungs
    up to it where there are 3 or more) matches the largest rung's measured order, with its interval. The rungs
    are those every variant with a largest rung trained: a rung that did not train (left out of the fits)
    leaves the others their rung means, which need no fit."""
    variants = [v for v in drawn if _top(ladder, v) is not None]
    shared = sorted(set.intersection(*({r.number for r in ladder.rungs[v]} for v in variants))) if variants else []
    below = [n for n in shared if n < ladder.planned]
    if len(variants) < 2 or not below:
        return pd.DataFrame(columns=DECISION_COLUMNS)
    pairs = list(combinations(variants, 2))
    column = {v: {r.number: i for i, r in enumerate(ladder.rungs[v])} for v in variants}
    means = {v: {r.number: r.best().mean() for r in ladder.rungs[v]} for v in variants}

    def reps(v: str, n: int) -> np.ndarray:
        return drawn[v][1][:, column[v][n]]

    top = ladder.planned
    truth = np.array([[means[a][top] - means[b][top] for a, b in pairs]])
    truth_reps = np.stack([reps(a, top) - reps(b, top) for a, b in pairs], axis=1)
    rows = []
    for n in below:
        size = ladder.rungs[variants[0]][column[variants[0]][n]].best().size
        point = _share(np.array([[means[a][n] - means[b][n] for a, b in pairs]]), truth)[0]
        shares = _share(np.stack([reps(a, n) - reps(b, n) for a, b in pairs], axis=1), truth_reps)
        low, high = interval(shares[np.all(np.isfinite(truth_reps), axis=1)], confidence)
        rows.append({"rung": n, "size": size, "by": "rung means", "pairs": len(pairs), "accuracy": point,
                     "ci_low": low, "ci_high": high})
        upto = [m for m in below if m <= n]
        if len(upto) >= MIN_RUNGS:
            rows.append(_by_fit(ladder, drawn, variants, pairs, upto, column, x_ref, delta, truth, truth_reps,
                                confidence))
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def _rung_list(numbers: List[int]) -> str:
    """'1-3' for consecutive rungs, else '2, 3, 5'."""
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(map(str, numbers))


def _by_fit(ladder, drawn, variants, pairs, upto, column, x_ref, delta, truth, truth_reps, confidence) -> dict:
    items = []
    for v in variants:
        cols = [column[v][n] for n in upto]
        items.append((v, [ladder.rungs[v][c] for c in cols], (drawn[v][0][:, cols], drawn[v][1][:, cols])))
    fits = {c.variant: c for c in fit_curves(items, x_ref, delta)}
    row = {"rung": upto[-1], "size": items[0][1][-1].best().size, "by": f"fit of rungs {_rung_list(upto)}",
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
    means = decisions[decisions["by"] == "rung means"]
    if not len(means):
        return None
    r = means.loc[means["rung"].idxmin()]
    pairs = int(r["pairs"])
    smallest = "the smallest rung's" if r["rung"] == 1 else f"the smallest trained rung's (rung {int(r['rung'])})"
    return (f"decision accuracy: {smallest} order matches the largest's for {r['accuracy']:.0%} "
            f"[{r['ci_low']:.0%}, {r['ci_high']:.0%}] of {pairs} variant pair{'s' * (pairs != 1)}")
