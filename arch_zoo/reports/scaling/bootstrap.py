"""One variant's curve: the fit through its rungs' mean losses and the bootstrap around it, or the
reason there is none (too few rungs, a ladder whose loss does not fall, a fit that does not converge).

The Huber threshold follows the noise: delta = 1.345 x the seeds' median standard error in log space
(Huber's constant for 95% efficiency under normal noise), never below Hoffmann et al.'s 1e-3. A
rung's mean that lies far off the curve (a rung that trained badly) then pulls on it linearly, not
quadratically, while ordinary seed noise is fitted as least squares would.

Bootstrap replicates start from the full data's fit; one that does not converge from there is
refitted from the whole grid of starts; one still unconverged is left out, and counted."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...sweeps.scale import MIN_RUNGS
from .fit import ALPHA_AT_BOUND, HUBER_DELTA, OK, Fits, fit_many, solve
from .points import Rung, point_arrays

HUBER_K = 1.345
CONFIDENCE = 0.95
REPLICATES = 1000
TOO_FEW, NON_MONOTONE = "too few rungs", "non-monotone"


@dataclass
class Curve:
    variant: str
    x: str  # "compute" or "params"
    numbers: List[int]  # the rungs' numbers
    px: np.ndarray  # each rung's x (its best cell's)
    py: np.ndarray  # each rung's mean loss
    x_ref: float
    delta: float
    status: str  # fit.OK, or why there is no usable curve
    note: str = ""
    point: Optional[Fits] = None  # a batch of one
    replicates: Optional[Fits] = None
    usable: Optional[np.ndarray] = None  # replicates that converged (and had 3 rungs of data)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def interval(self, values: np.ndarray) -> Tuple[float, float]:
        return interval(values[self.usable])


def interval(values: np.ndarray, confidence: float = CONFIDENCE) -> Tuple[float, float]:
    """A percentile interval that keeps infinite values (k with no finite answer) as infinite ends."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    if not len(v):
        return math.nan, math.nan
    return _percentile(v, (1 - confidence) / 2), _percentile(v, (1 + confidence) / 2)


def _percentile(v: np.ndarray, q: float) -> float:
    """numpy's linear percentile of sorted ``v``, written out because numpy's interpolation turns
    inf - inf into NaN: a percentile between a finite value and an infinite one is infinite."""
    pos = q * (len(v) - 1)
    i = int(math.floor(pos))
    j, t = min(i + 1, len(v) - 1), pos - i
    a, b = float(v[i]), float(v[j])
    if t == 0 or a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return b if b == math.inf else a
    return a + t * (b - a)


def huber_delta(noise: Optional[float]) -> float:
    return max(HUBER_DELTA, HUBER_K * noise) if noise is not None and math.isfinite(noise) else HUBER_DELTA


def _monotone(numbers: Sequence[int], px: np.ndarray, py: np.ndarray, x: str) -> str:
    """'' when x rises and the loss falls from rung to rung, else what breaks it."""
    for i in range(1, len(py)):
        if px[i] <= px[i - 1]:
            return f"rung {numbers[i]}'s {x} ({px[i]:.3g}) is not above rung {numbers[i - 1]}'s ({px[i - 1]:.3g})"
        if py[i] >= py[i - 1]:
            return (f"the mean loss does not fall from rung {numbers[i - 1]} to rung {numbers[i]} "
                    f"({py[i - 1]:.4g} -> {py[i]:.4g})")
    return ""


def fit_curves(items: Sequence[Tuple[str, List[Rung], Tuple[np.ndarray, np.ndarray]]], x_ref: float, delta: float,
               x: str = "compute") -> List[Curve]:
    """A curve per (variant, its rungs, its bootstrap points ``resample`` drew), all fitted in one batch:
    the point fits together, then every replicate of every curve together."""
    curves, todo = [], []
    for variant, rungs, drawn in items:
        numbers = [r.number for r in rungs]
        px, py = point_arrays(rungs, x)
        c = Curve(variant, x, numbers, px, py, x_ref, delta, OK)
        curves.append(c)
        if len(rungs) < MIN_RUNGS:
            c.status, c.note = TOO_FEW, (f"{len(rungs)} rung{'s' * (len(rungs) != 1)} with completed runs; a "
                                         f"curve of 3 parameters needs at least {MIN_RUNGS}")
        elif _monotone(numbers, px, py, x):
            c.status, c.note = NON_MONOTONE, _monotone(numbers, px, py, x) + "; a power law with a floor cannot " \
                                                                                "describe it"
        else:
            todo.append((c, drawn))
    if not todo:
        return curves
    logx, logy, w = _padded([(np.log(c.px / x_ref), np.log(c.py)) for c, _ in todo])
    points = fit_many(logx, logy, w, delta=delta)
    for i, (c, _) in enumerate(todo):
        c.point = _take(points, [i])
        if points.status[i] != OK:
            c.status = str(points.status[i])
            c.note = ("the fit did not converge" if c.status != ALPHA_AT_BOUND else
                      f"the fitted exponent sits at a bound of its range (alpha = {points.alpha[i]:.3g})")
    todo = [(c, d) for c, d in todo if c.ok]
    if not todo:
        return curves
    blocks = [(np.log(np.where(np.isfinite(ys), xs, x_ref) / x_ref), np.log(np.where(np.isfinite(ys), ys, 1.0)),
               np.isfinite(ys)) for xs, ys in (d for _, d in todo)]
    width = max(b[0].shape[1] for b in blocks)
    pad = lambda a, v: np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=v)  # noqa: E731
    logx = np.concatenate([pad(b[0], 0.0) for b in blocks])
    logy = np.concatenate([pad(b[1], 0.0) for b in blocks])
    w = np.concatenate([pad(b[2].astype(float), 0.0) for b in blocks])
    start = np.concatenate([np.repeat(c.point.theta, len(b[0]), axis=0) for (c, _), b in zip(todo, blocks)])
    reps = solve(start, logx, logy, w, delta)
    again = np.flatnonzero(reps.status != OK)
    if len(again):  # a replicate the warm start did not settle: the whole grid of starts
        redo = fit_many(logx[again], logy[again], w[again], extra=start[again], delta=delta)
        for name in ("theta", "loss", "status", "floor_at_bound"):
            getattr(reps, name)[again] = getattr(redo, name)
    first = 0
    for (c, _), b in zip(todo, blocks):
        rows = list(range(first, first + len(b[0])))
        first += len(b[0])
        c.replicates = _take(reps, rows)
        c.usable = (c.replicates.status == OK) & (w[rows].sum(axis=1) >= MIN_RUNGS)
    return curves


def _padded(problems: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = max(len(lx) for lx, _ in problems)
    logx, logy, w = (np.zeros((len(problems), width)) for _ in range(3))
    for i, (lx, ly) in enumerate(problems):
        logx[i, :len(lx)], logy[i, :len(ly)], w[i, :len(lx)] = lx, ly, 1.0
    return logx, logy, w


def _take(fits: Fits, rows) -> Fits:
    return Fits(fits.theta[rows], fits.loss[rows], fits.status[rows], fits.floor_at_bound[rows])
