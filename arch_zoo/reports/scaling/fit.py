"""The scaling-law fit ``L(x) = E + A * x^-alpha`` (x: training compute, or parameters), robustly, as
Hoffmann et al. (2022, approach 3) fit theirs: a Huber loss (delta 1e-3) on the residuals in log
space, ``log(E + A x^-alpha) - log L``, minimised from a grid of initialisations, the best kept.

One fit is a handful of points, and a bootstrap needs thousands of fits, so the solver is batched:
Levenberg-Marquardt on the Huber loss by iteratively reweighted least squares (the Huber M-estimate
is the fixed point), each problem with its own damping, all problems advanced together in numpy.
The tests hold it to ``scipy.optimize.least_squares(loss="huber")`` on the same problems.

Parameters are ``theta = (E, log A, alpha)`` on ``x / x_ref`` (``x_ref`` the geometric mean of
the points): A stays positive and the problem well scaled for x of 1e15. E is kept linear, bounded
below by 0: in log E the objective flattens as E goes to 0 (a ladder that shows no floor), and a
solver creeps there for hundreds of steps. Points carry weights (0 drops one), so problems with
fewer points share a batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

HUBER_DELTA = 1e-3
ALPHA_MAX = 4.0  # an exponent at either end of [0, ALPHA_MAX] is no power law the points support
MAX_ITER = 300
GRAD_TOL = 1e-9  # converged: the Huber objective's gradient below this (relative to the point count)
STALL, STALL_TOL = 8, 1e-10  # or: this many iterations in a row each improving it by less than this
E_FRACTIONS = (0.0, 0.5, 0.9)
ALPHA_STARTS = (0.05, 0.2, 0.5, 1.0)

OK, NO_CONVERGENCE, ALPHA_AT_BOUND = "ok", "did not converge", "alpha at a bound"


@dataclass
class Fits:
    """A batch of fits: theta (P, 3) = (E, log A on x / x_ref, alpha), the objective and status."""

    theta: np.ndarray
    loss: np.ndarray
    status: np.ndarray  # OK, NO_CONVERGENCE or ALPHA_AT_BOUND per problem
    floor_at_bound: np.ndarray  # E pinned at 0: the points show no floor

    @property
    def E(self) -> np.ndarray:
        return self.theta[:, 0]

    @property
    def alpha(self) -> np.ndarray:
        return self.theta[:, 2]

    def A(self, x_ref: float) -> np.ndarray:
        """A in the units of x: A_ref * x_ref^alpha."""
        return np.exp(self.theta[:, 1] + self.theta[:, 2] * math.log(x_ref))


def huber(r: np.ndarray, delta: float = HUBER_DELTA) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def predict(theta: np.ndarray, logx: np.ndarray) -> np.ndarray:
    """log L at log(x / x_ref), for (P, 3) parameters and (P, R) or (R,) points: log-sum-exp."""
    E, a, alpha = theta[:, 0:1], theta[:, 1:2], theta[:, 2:3]
    with np.errstate(divide="ignore"):  # E = 0: log E = -inf, and the sum is the power term alone
        return np.logaddexp(np.log(E), a - alpha * logx)


def _objective(theta, logx, logy, w, delta):
    return (w * huber(predict(theta, logx) - logy, delta)).sum(axis=1)


def _bounds(logy: np.ndarray, w: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    ymin = np.where(w > 0, logy, np.inf).min(axis=1)
    ymax = np.where(w > 0, logy, -np.inf).max(axis=1)
    lo = np.stack([np.zeros_like(ymin), np.full_like(ymin, -np.inf), np.zeros_like(ymin)], axis=1)
    hi = np.stack([np.exp(ymax), np.full_like(ymin, np.inf), np.full_like(ymin, ALPHA_MAX)], axis=1)
    return lo, hi


def minimise(theta0: np.ndarray, lo: np.ndarray, hi: np.ndarray, model, logy: np.ndarray, w: np.ndarray,
             delta: float = HUBER_DELTA, max_iter: int = MAX_ITER) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batched Levenberg-Marquardt on the Huber objective of log residuals that every fit here
    uses: ``model(theta, rows)`` gives (log L, d log L / d theta), (p, R) and (p, R, K), for the
    problems ``rows`` at parameters theta (p, K), bounded by ``lo`` and ``hi`` (P, K). A problem is
    done when its projected gradient vanishes or when STALL iterations in a row improve its
    objective by less than STALL_TOL (relative): the valley of E against A and alpha is flat, and
    moving along it changes no prediction. Returns (theta, objective, done)."""
    theta = np.clip(theta0.astype(float), lo, hi)
    P, K = theta.shape
    objective = lambda th, rows: (w[rows] * huber(model(th, rows)[0] - logy[rows], delta)).sum(axis=1)  # noqa: E731
    lam = np.full(P, 1e-3)
    f = objective(theta, np.arange(P))
    done = np.zeros(P, dtype=bool)
    quiet = np.zeros(P, dtype=int)
    scale = GRAD_TOL * np.maximum(1.0, w.sum(axis=1))
    for _ in range(max_iter):
        act = np.flatnonzero(~done)
        if not len(act):
            break
        th, ly, wa = theta[act], logy[act], w[act]
        pred, J = model(th, act)
        r = pred - ly
        u = wa * np.minimum(1.0, delta / np.maximum(np.abs(r), 1e-300))  # IRLS weights of the Huber loss
        g = np.einsum("pr,prk->pk", u * r, J)
        held = ((th <= lo[act]) & (g > 0)) | ((th >= hi[act]) & (g < 0))  # a bound holding back the descent
        small = np.linalg.norm(np.where(held, 0.0, g), axis=1) < scale[act]
        H = np.einsum("pr,prk,prl->pkl", u, J, J)
        diag = np.diagonal(H, axis1=1, axis2=2)
        damp = lam[act, None, None] * np.eye(K) * (diag[:, :, None] + 1e-12)
        # a parameter held at its bound leaves the system: the others step as if it were fixed there
        free = (~held).astype(float)
        system = (H + damp) * free[:, :, None] * free[:, None, :] + np.eye(K) * (1.0 - free)[:, :, None]
        step = -np.linalg.solve(system, (g * free)[:, :, None])[:, :, 0]
        trial = np.clip(th + step, lo[act], hi[act])
        ft = objective(trial, act)
        better = ft < f[act]
        gain = np.where(better, (f[act] - ft) / np.maximum(f[act], 1e-300), 0.0)
        theta[act] = np.where(better[:, None], trial, th)
        f[act] = np.where(better, ft, f[act])
        lam[act] = np.where(better, np.maximum(lam[act] / 3, 1e-12), np.minimum(lam[act] * 4, 1e12))
        quiet[act] = np.where(gain < STALL_TOL, quiet[act] + 1, 0)
        done[act] = small | (quiet[act] >= STALL)
    return theta, f, done


def solve(theta0: np.ndarray, logx: np.ndarray, logy: np.ndarray, w: np.ndarray,
          delta: float = HUBER_DELTA, max_iter: int = MAX_ITER) -> Fits:
    """Minimise each problem's Huber objective from ``theta0`` (P, 3); ``logx``, ``logy``, ``w``: (P, R)."""
    lo, hi = _bounds(logy, w)

    def model(th, rows):
        lx = logx[rows]
        pred = predict(th, lx)
        # d log L / d theta: 1 / L, the power term's share of L, and -log x times that share
        share = np.exp(th[:, 1:2] - th[:, 2:3] * lx - pred)
        return pred, np.stack([np.exp(-pred), share, -share * lx], axis=2)  # (P, R, 3)

    theta, f, done = minimise(theta0, lo, hi, model, logy, w, delta, max_iter)
    status = np.where(done, OK, NO_CONVERGENCE).astype(object)
    at_bound = (theta[:, 2] <= 1e-6) | (theta[:, 2] >= ALPHA_MAX - 1e-6)
    status[done & at_bound] = ALPHA_AT_BOUND
    return Fits(theta, f, status, theta[:, 0] <= 1e-9 * np.exp(np.where(w > 0, logy, np.inf).min(axis=1)))


def starts(logx: np.ndarray, logy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The grid of initialisations for each problem: (P, K, 3). E at fractions of the smallest loss,
    alpha at a few exponents, A from the points given those two."""
    y = np.exp(logy)
    ymin = np.where(w > 0, y, np.inf).min(axis=1)
    out = []
    for frac in E_FRACTIONS:
        E0 = frac * ymin
        for alpha0 in ALPHA_STARTS:
            rest = np.log(np.maximum(y - E0[:, None], 1e-3 * y)) + alpha0 * logx
            a0 = (w * rest).sum(axis=1) / np.maximum(w.sum(axis=1), 1)
            out.append(np.stack([E0, a0, np.full_like(a0, alpha0)], axis=1))
    return np.stack(out, axis=1)


def fit_many(logx: np.ndarray, logy: np.ndarray, w: np.ndarray, extra: Optional[np.ndarray] = None,
             delta: float = HUBER_DELTA) -> Fits:
    """Each problem fitted from every start (and ``extra`` (P, 3), e.g. the full data's fit for a
    bootstrap replicate), keeping the lowest objective; converged fits beat unconverged ones."""
    grid = starts(logx, logy, w)
    if extra is not None:
        grid = np.concatenate([extra[:, None, :], grid], axis=1)
    P, K, n = grid.shape
    rep = lambda a: np.repeat(a, K, axis=0)  # noqa: E731
    return best_start(solve(grid.reshape(P * K, n), rep(logx), rep(logy), rep(w), delta), P, K)


def best_start(fits: Fits, P: int, K: int) -> Fits:
    """Of each problem's K fits (rows p * K ... p * K + K - 1), the lowest objective; converged fits
    beat unconverged ones."""
    score = np.where(fits.status == NO_CONVERGENCE, fits.loss + 1e300, fits.loss).reshape(P, K)
    best = np.argmin(score, axis=1) + np.arange(P) * K
    return Fits(fits.theta[best], fits.loss[best], fits.status[best], fits.floor_at_bound[best])


def fit_points(x: Sequence[float], y: Sequence[float], x_ref: float, delta: float = HUBER_DELTA) -> Fits:
    """One curve through points (x, y): a batch of one."""
    logx = np.log(np.asarray(x, dtype=float) / x_ref)[None, :]
    logy = np.log(np.asarray(y, dtype=float))[None, :]
    return fit_many(logx, logy, np.ones_like(logx), delta=delta)


def curve(fits: Fits, x: np.ndarray, x_ref: float) -> np.ndarray:
    """L at ``x`` for each fit: (P, len(x))."""
    return np.exp(predict(fits.theta, np.log(np.asarray(x, dtype=float) / x_ref)[None, :]))
