"""One variant's L(N, D) surface (fit_nd.py) through its points' mean losses, and the bootstrap around
it, as bootstrap.py does for an L(C) curve: the Huber threshold from the seeds' noise, the same paired,
t-calibrated replicates (points.py's ``draws`` and ``resample``: every variant at a point moves with
the same weights on the same seeds), replicates warm-started from the full data's fit and refitted
from the whole grid where that does not converge.

A point is a (size, budget) cell: a size of the ladder trained to one of its WSD-S budgets (a decay
branch, or the run itself), N its non-embedding parameters and D its training tokens."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .bootstrap import CONFIDENCE, interval
from .fit import NO_CONVERGENCE, OK, Fits
from .fit_nd import NO_EXPONENT, fit_nd_many, predict_nd, solve_nd
from .points import Rung

MIN_POINTS = 6  # five parameters, and one point to spare
TOO_FEW = "too few points"


@dataclass
class Surface:
    variant: str
    numbers: List[int]  # the points' numbers (shared by every variant at the same size and budget)
    N: np.ndarray
    D: np.ndarray
    y: np.ndarray  # each point's mean loss
    n_ref: float
    d_ref: float
    delta: float
    status: str  # fit.OK, or why there is no usable surface
    note: str = ""
    point: Optional[Fits] = None  # a batch of one
    replicates: Optional[Fits] = None
    usable: Optional[np.ndarray] = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def interval(self, values: np.ndarray, confidence: float = CONFIDENCE) -> Tuple[float, float]:
        return interval(np.asarray(values)[self.usable], confidence)

    def loss(self, fits: Fits, N: float, D: float) -> np.ndarray:
        """The fitted loss at (N, D) for each fit of ``fits``."""
        n = np.full((len(fits.theta), 1), np.log(N / self.n_ref))
        d = np.full((len(fits.theta), 1), np.log(D / self.d_ref))
        return np.exp(predict_nd(fits.theta, n, d)[:, 0])


def _logs(s: Surface, ys: np.ndarray) -> Tuple[np.ndarray, ...]:
    n = np.broadcast_to(np.log(s.N / s.n_ref), ys.shape)
    d = np.broadcast_to(np.log(s.D / s.d_ref), ys.shape)
    w = np.isfinite(ys)
    return n, d, np.log(np.where(w, ys, 1.0)), w.astype(float)


def _why_not(N: np.ndarray, D: np.ndarray) -> str:
    if len(N) < MIN_POINTS:
        return f"{len(N)} points with completed runs; a surface of 5 parameters needs at least {MIN_POINTS}"
    if len(set(N)) < 2 or len(set(D)) < 2:
        return "the points do not vary both N and D"
    return ""


def fit_surfaces(items: Sequence[Tuple[str, List[Rung], np.ndarray, np.ndarray, np.ndarray]], n_ref: float,
                 d_ref: float, delta: float) -> List[Surface]:
    """A surface per (variant, its points as rungs, N, D, its replicates' means (n, points)), fitted in
    one batch: the point fits together, then every replicate of every surface together."""
    out, todo = [], []
    for variant, rungs, N, D, drawn in items:
        y = np.array([r.cells[0].mean() for r in rungs])
        s = Surface(variant, [r.number for r in rungs], np.asarray(N, float), np.asarray(D, float), y, n_ref, d_ref,
                    delta, OK)
        out.append(s)
        why = _why_not(s.N, s.D)
        if why:
            s.status, s.note = TOO_FEW, why
        else:
            todo.append((s, drawn))
    if not todo:
        return out
    points = _batch([_logs(s, s.y[None, :]) for s, _ in todo])
    fits = fit_nd_many(*points, delta=delta)
    for i, (s, _) in enumerate(todo):
        s.point = _take(fits, [i])
        if fits.status[i] != OK:
            s.status = str(fits.status[i])
            s.note = ("the fit did not converge" if s.status == NO_CONVERGENCE else
                      f"an exponent sits at a bound of its range (alpha = {fits.alpha[i]:.3g}, "
                      f"beta = {fits.theta[i, 4]:.3g})")
    todo = [(s, drawn) for s, drawn in todo if s.status in (OK, NO_EXPONENT)]
    if not todo:
        return out
    n, d, logy, w = _batch([_logs(s, drawn) for s, drawn in todo])
    start = np.concatenate([np.repeat(s.point.theta, len(drawn), axis=0) for s, drawn in todo])
    reps = solve_nd(start, n, d, logy, w, delta)
    again = np.flatnonzero(reps.status == NO_CONVERGENCE)
    if len(again):
        redo = fit_nd_many(n[again], d[again], logy[again], w[again], extra=start[again], delta=delta)
        for name in ("theta", "loss", "status", "floor_at_bound"):
            getattr(reps, name)[again] = getattr(redo, name)
    first = 0
    for s, drawn in todo:
        rows = list(range(first, first + len(drawn)))
        first += len(drawn)
        s.replicates = _take(reps, rows)
        s.usable = (s.replicates.status != NO_CONVERGENCE) & (w[rows].sum(axis=1) >= MIN_POINTS)
    return out


def _batch(blocks: Sequence[Tuple[np.ndarray, ...]]) -> Tuple[np.ndarray, ...]:
    """Problems of different point counts as one batch: padded with weight 0."""
    width = max(b[0].shape[1] for b in blocks)
    pad = lambda a: np.pad(a, ((0, 0), (0, width - a.shape[1])))  # noqa: E731
    return tuple(np.concatenate([pad(np.asarray(b[i], float)) for b in blocks]) for i in range(4))


def _take(fits: Fits, rows) -> Fits:
    return Fits(fits.theta[rows], fits.loss[rows], fits.status[rows], fits.floor_at_bound[rows])
