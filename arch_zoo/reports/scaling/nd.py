"""L(N, D) ladders (issue 56 item 2): sizes x WSD-S budgets, one surface per variant (surface.py).

From a ladder whose runs branch decays (``train.schedule.decays``; the run store lists each branch as a
run at its own steps), each variant's points are its (size, budget) cells: N the size's non-embedding
parameters, D the training tokens, the loss the seeds' mean. What it gives, every number with a 95%
interval from the same paired, t-calibrated bootstrap the L(C) fits use:

- the fitted E, A, alpha, B, beta;
- the compute-optimal N*(C), D*(C) and loss at a compute C (default: the largest the ladder spent),
  with C = kappa N D, kappa the ladder's measured training FLOPs per parameter and token;
- the compute multiplier at the optimum: the compute the baseline's frontier needs to reach the
  variant's optimal loss at C, over C (multiplier.py on the two frontiers, fit_nd.py);
- a held-out point: the largest size at its largest budget, predicted by the surface fitted without
  it, with its error in nats and in the point's seed standard deviations;
- one line per variant whose ladder resolves no E (the floor fitted at 0) or no exponent."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
from scipy import stats

from ...run_names import BUDGET_KEY, short_names
from ...stats import BOOTSTRAP_SEED
from .bootstrap import CONFIDENCE, REPLICATES, huber_delta, interval
from .fit import ALPHA_MAX
from .fit_nd import frontier, natural, optimum
from .multiplier import multiplier
from .points import ARCH_HIDDEN, Cell, Ladder, Rung, arch_label, draws, resample, seed_noise
from .surface import Surface, fit_surfaces

PARAMS = ("E", "A", "alpha", "B", "beta")


@dataclass
class Points:
    """Every variant's (size, budget) cells as rungs of a Ladder (numbered alike across variants, so
    the bootstrap pairs them), with each cell's N and D."""
    ladder: Ladder
    N: Dict[str, np.ndarray]
    D: Dict[str, np.ndarray]
    kappa: float  # training FLOPs per parameter and token
    largest_compute: float


def nd_points(runs: pd.DataFrame, metric: str) -> Points:
    records = runs.attrs.get("scale") or {}
    settings = [s for s in runs.attrs.get("settings") or [] if s not in (*ARCH_HIDDEN, BUDGET_KEY)]
    names = short_names(settings)
    done = runs[(runs["status"] == "completed") & runs["run_id"].isin(list(records))]
    cells: Dict[Tuple[str, Any, Any], Dict[str, Any]] = {}
    ratios, computes, keys = [], [], {}
    for _, row in done.iterrows():
        value, tokens = row.get(metric), row.get("train_tokens")
        if value is None or not np.isfinite(value) or not tokens or not np.isfinite(tokens):
            continue
        rec = records[row["run_id"]]
        variant = arch_label({k: row[k] for k in settings}, names)
        keys.setdefault(variant, {k: row[k] for k in settings})
        n = float(rec.get("non_embedding_params") or rec.get("params"))
        key = (variant, rec["size"], rec.get("steps", row.get("step")))
        cell = cells.setdefault(key, {"N": n, "D": [], "losses": {}, "order": (rec.get("rung", 0), key[2])})
        cell["D"].append(float(tokens))
        cell["losses"][row["seed"]] = float(value)
        if np.isfinite(row.get("train_flops", math.nan)):
            ratios.append(row["train_flops"] / (n * tokens))
            computes.append(float(row["train_flops"]))
    order = sorted({(c["order"], k[1], k[2]) for k, c in cells.items()}, key=lambda t: (t[0], str(t[1])))
    number = {(size, steps): i + 1 for i, (_, size, steps) in enumerate(order)}
    rungs: Dict[str, List[Rung]] = {}
    N: Dict[str, List[float]] = {}
    D: Dict[str, List[float]] = {}
    for (variant, size, steps), c in sorted(cells.items(), key=lambda kv: number[kv[0][1:]]):
        i = number[(size, steps)]
        rungs.setdefault(variant, []).append(Rung(i, f"{size} @{steps}", [Cell(str(size), i, math.nan, c["N"],
                                                                                 c["losses"])]))
        N.setdefault(variant, []).append(c["N"])
        D.setdefault(variant, []).append(float(np.mean(c["D"])))
    ladder = Ladder(list(rungs), rungs, keys, False, False, len(number))
    return Points(ladder, {v: np.array(x) for v, x in N.items()}, {v: np.array(x) for v, x in D.items()},
                  float(np.median(ratios)) if ratios else 6.0, max(computes) if computes else math.nan)


@dataclass
class NDScaling:
    points: Points
    surfaces: Dict[str, Surface]
    baseline: Optional[str]
    compute: float
    fits: pd.DataFrame
    optimum: pd.DataFrame
    multipliers: pd.DataFrame
    holdout: pd.DataFrame
    notes: List[str] = field(default_factory=list)


def wsds_surfaces(runs: pd.DataFrame, table: pd.DataFrame, metric: str, replicates: int = REPLICATES
                  ) -> Optional[NDScaling]:
    """A ladder's L(N, D) section when its runs span budgets (train.max_steps, WSD-S); None otherwise.
    The baseline: the per-variant table's baseline row, named without its size and budget."""
    if BUDGET_KEY not in (runs.attrs.get("settings") or []):
        return None
    settings = [s for s in runs.attrs.get("settings") or [] if s not in (*ARCH_HIDDEN, BUDGET_KEY)]
    rows = table[table["baseline"] == True] if "baseline" in table.columns else table.iloc[:0]  # noqa: E712
    baseline = arch_label({k: rows.iloc[0][k] for k in settings}, short_names(settings)) if len(rows) else None
    return analyse_points(nd_points(runs, metric), baseline, replicates=replicates, seed=BOOTSTRAP_SEED)


def analyse_points(pts: Points, baseline: Optional[str] = None, compute: Optional[float] = None,
                   replicates: int = REPLICATES, seed: int = 0) -> NDScaling:
    ladder = pts.ladder
    rng = np.random.default_rng(seed)
    shared = draws(ladder, replicates, rng)
    drawn = {v: resample(ladder.rungs[v], shared, replicates)[1] for v in ladder.variants}
    every = np.concatenate([x for x in pts.N.values()] or [np.ones(1)])
    n_ref = math.exp(np.log(every).mean())
    d_ref = math.exp(np.log(np.concatenate([x for x in pts.D.values()] or [np.ones(1)])).mean())
    delta = huber_delta(seed_noise(ladder))
    items = [(v, ladder.rungs[v], pts.N[v], pts.D[v], drawn[v]) for v in ladder.variants]
    surfaces = {s.variant: s for s in fit_surfaces(items, n_ref, d_ref, delta)}
    compute = compute if compute is not None else pts.largest_compute
    base = baseline if baseline in surfaces else (ladder.variants[0] if ladder.variants else None)
    out = NDScaling(pts, surfaces, base, compute, _fit_rows(surfaces), _optimum_rows(surfaces, pts.kappa, compute),
                    _multiplier_rows(surfaces, base, pts.kappa, compute), _holdout(pts, items, n_ref, d_ref, delta))
    out.notes = [line for s in surfaces.values() for line in [unresolved(s)] if line]
    return out


def unresolved(s: Surface) -> Optional[str]:
    """One line when the surface's ladder resolves no floor E or no exponent; None when it resolves all."""
    if s.point is None:
        return f"{s.variant}: no L(N, D) fit: {s.note}"
    E, _, alpha, _, beta = s.point.theta[0]
    missing = ([f"no E (the floor is fitted at 0: the points show none)"] if s.point.floor_at_bound[0] else []) + \
              [f"no {name} ({name} = {v:.3g}, at a bound of [0, {ALPHA_MAX:g}])" for name, v in (("alpha", alpha),
                                                                                                 ("beta", beta))
               if v <= 1e-6 or v >= ALPHA_MAX - 1e-6]
    if not missing:
        return None
    if s.ok:  # only the floor is unresolved: the optimum and k stand, on a surface without one
        return (f"{s.variant}: the ladder resolves {' and '.join(missing)}; N*, D*, the loss there and k are "
                "those of a surface with no floor in the ladder's range")
    return f"{s.variant}: the ladder resolves {' and '.join(missing)}; no optimum or multiplier is given"


def _fit_rows(surfaces: Dict[str, Surface]) -> pd.DataFrame:
    rows = []
    for s in surfaces.values():
        row: Dict[str, Any] = {"variant": s.variant, "points": len(s.y), "status": s.status, "note": s.note}
        if s.point is not None:
            point, reps = natural(s.point.theta, s.n_ref, s.d_ref)[0], natural(s.replicates.theta, s.n_ref, s.d_ref)
            for i, name in enumerate(PARAMS):
                low, high = s.interval(reps[:, i])
                row.update({name: float(point[i]), f"{name}_low": low, f"{name}_high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def _optimum_rows(surfaces: Dict[str, Surface], kappa: float, compute: float) -> pd.DataFrame:
    rows = []
    for s in surfaces.values():
        if not s.ok or not np.isfinite(compute):
            continue
        point = [float(v[0]) for v in optimum(s.point.theta, s.n_ref, s.d_ref, compute, kappa)]
        reps = optimum(s.replicates.theta, s.n_ref, s.d_ref, compute, kappa)
        row = {"variant": s.variant, "compute": compute}
        for name, mid, values in zip(("N_opt", "D_opt", "loss_opt"), point, reps):
            low, high = s.interval(values)
            row.update({name: mid, f"{name}_low": low, f"{name}_high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def _multiplier_rows(surfaces: Dict[str, Surface], baseline: Optional[str], kappa: float,
                     compute: float) -> pd.DataFrame:
    base = surfaces.get(baseline) if baseline else None
    rows = []
    if base is None or not base.ok or not np.isfinite(compute):
        return pd.DataFrame(rows)
    fb = frontier(base.point.theta, base.n_ref, base.d_ref, kappa, compute)
    fb_reps = frontier(base.replicates.theta, base.n_ref, base.d_ref, kappa, compute)
    for s in surfaces.values():
        if s.variant == baseline or not s.ok:
            continue
        k = float(multiplier(frontier(s.point.theta, s.n_ref, s.d_ref, kappa, compute), fb, 1.0)[0])
        both = s.usable & base.usable
        ks = multiplier(frontier(s.replicates.theta[both], s.n_ref, s.d_ref, kappa, compute), fb_reps[both], 1.0)
        low, high = interval(ks)
        rows.append({"variant": s.variant, "baseline": baseline, "compute": compute, "k": k, "k_low": low,
                     "k_high": high})
    return pd.DataFrame(rows)


def _holdout(pts: Points, items, n_ref: float, d_ref: float, delta: float,
             confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Each variant's largest size at its largest budget, predicted by its surface fitted without it."""
    cut, held = [], {}
    for v, rungs, N, D, drawn in items:
        top = max(range(len(rungs)), key=lambda i: (N[i], D[i]))
        keep = [i for i in range(len(rungs)) if i != top]
        held[v] = (rungs[top], N[top], D[top])
        cut.append((v, [rungs[i] for i in keep], N[keep], D[keep], drawn[:, keep]))
    rows = []
    for s in fit_surfaces(cut, n_ref, d_ref, delta):
        rung, N, D = held[s.variant]
        seeds = list(rung.cells[0].losses.values())
        measured, sd = float(np.mean(seeds)), float(np.std(seeds, ddof=1)) if len(seeds) >= 2 else math.nan
        if not s.ok:
            rows.append({"variant": s.variant, "N": N, "D": D, "seeds": len(seeds), "measured": measured,
                         "seed_sd": sd, "note": s.note or s.status})
            continue
        mid = float(s.loss(s.point, N, D)[0])
        low, high = s.interval(s.loss(s.replicates, N, D), confidence)
        n = len(seeds)  # the measured mean is one draw too: its t-interval joins the surface's, in quadrature
        noise = stats.t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n) if n >= 2 else 0.0
        low, high = mid - math.hypot(mid - low, noise), mid + math.hypot(high - mid, noise)
        rows.append({"variant": s.variant, "N": N, "D": D, "seeds": n, "measured": measured, "seed_sd": sd,
                     "predicted": mid, "pred_low": low, "pred_high": high, "error": mid - measured,
                     "error_sds": (mid - measured) / sd if sd and np.isfinite(sd) else math.nan,
                     "inside": bool(low <= measured <= high), "note": None})
    return pd.DataFrame(rows)
