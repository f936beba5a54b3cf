"""The scaling law in parameters and data, ``L(N, D) = E + A / N^alpha + B / D^beta`` (Hoffmann et
al. 2022, approach 3), fitted as the L(C) curve is (fit.py): a Huber loss on log residuals,
minimised by the same batched Levenberg-Marquardt from a grid of starts, the best kept.

Parameters are ``theta = (E, log A, alpha, log B, beta)`` on ``N / N_ref`` and ``D / D_ref`` (each
the geometric mean of the points), so ``Fits.E`` and ``Fits.alpha`` read as they do for L(C).

At a compute ``C = kappa N D`` (kappa: the ladder's training FLOPs per parameter and token, about 6)
the loss is least at ``N* = G (C / kappa)^(beta / (alpha + beta))``, ``D* = (C / kappa) / N*`` with
``G = (alpha A / (beta B))^(1 / (alpha + beta))``, and there ``L*(C) = E + K C^-gamma`` with
``gamma = alpha beta / (alpha + beta)``: the compute-optimal frontier is an L(C) curve, so the
compute multiplier at the optimum is the L(C) multiplier (multiplier.py) of two frontiers."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

from .fit import ALPHA_MAX, ALPHA_STARTS, E_FRACTIONS, HUBER_DELTA, MAX_ITER, NO_CONVERGENCE, OK, Fits, \
    best_start, minimise

NO_EXPONENT = "an exponent at a bound"  # alpha or beta at 0 or ALPHA_MAX: the points do not resolve it


def predict_nd(theta: np.ndarray, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """log L at n = log(N / N_ref), d = log(D / D_ref), for (P, 5) parameters and (P, R) or (R,) points."""
    E, a, alpha, b, beta = (theta[:, i:i + 1] for i in range(5))
    with np.errstate(divide="ignore"):  # E = 0: the two power terms alone
        return np.logaddexp(np.logaddexp(np.log(E), a - alpha * n), b - beta * d)


def solve_nd(theta0: np.ndarray, n: np.ndarray, d: np.ndarray, logy: np.ndarray, w: np.ndarray,
             delta: float = HUBER_DELTA, max_iter: int = MAX_ITER) -> Fits:
    """Each problem's fit from ``theta0`` (P, 5); ``n``, ``d``, ``logy``, ``w``: (P, R). Status
    NO_EXPONENT when alpha or beta ends at a bound of [0, ALPHA_MAX]."""
    ymax = np.where(w > 0, logy, -np.inf).max(axis=1)
    free = np.full_like(ymax, np.inf)
    lo = np.stack([np.zeros_like(ymax), -free, np.zeros_like(ymax), -free, np.zeros_like(ymax)], axis=1)
    hi = np.stack([np.exp(ymax), free, np.full_like(ymax, ALPHA_MAX), free, np.full_like(ymax, ALPHA_MAX)], axis=1)

    def model(th, rows):
        nn, dd = n[rows], d[rows]
        pred = predict_nd(th, nn, dd)
        size = np.exp(th[:, 1:2] - th[:, 2:3] * nn - pred)  # each power term's share of L
        data = np.exp(th[:, 3:4] - th[:, 4:5] * dd - pred)
        return pred, np.stack([np.exp(-pred), size, -size * nn, data, -data * dd], axis=2)

    theta, f, done = minimise(theta0, lo, hi, model, logy, w, delta, max_iter)
    status = np.where(done, OK, NO_CONVERGENCE).astype(object)
    exps = theta[:, [2, 4]]
    status[done & ((exps <= 1e-6) | (exps >= ALPHA_MAX - 1e-6)).any(axis=1)] = NO_EXPONENT
    return Fits(theta, f, status, theta[:, 0] <= 1e-9 * np.exp(np.where(w > 0, logy, np.inf).min(axis=1)))


def starts_nd(n: np.ndarray, d: np.ndarray, logy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(P, K, 5): E at fractions of the smallest loss, alpha and beta at a few exponents each, and A
    and B each carrying half of the loss above E on average."""
    y = np.exp(logy)
    ymin = np.where(w > 0, y, np.inf).min(axis=1)
    count = np.maximum(w.sum(axis=1), 1)
    out = []
    for frac in E_FRACTIONS:
        E0 = frac * ymin
        half = np.log(np.maximum(y - E0[:, None], 1e-3 * y) / 2)
        for alpha0 in ALPHA_STARTS:
            a0 = (w * (half + alpha0 * n)).sum(axis=1) / count
            for beta0 in ALPHA_STARTS:
                b0 = (w * (half + beta0 * d)).sum(axis=1) / count
                out.append(np.stack([E0, a0, np.full_like(a0, alpha0), b0, np.full_like(b0, beta0)], axis=1))
    return np.stack(out, axis=1)


def fit_nd_many(n: np.ndarray, d: np.ndarray, logy: np.ndarray, w: np.ndarray, extra: Optional[np.ndarray] = None,
                delta: float = HUBER_DELTA) -> Fits:
    """Each problem from every start (and ``extra`` (P, 5)), the lowest objective kept."""
    grid = starts_nd(n, d, logy, w)
    if extra is not None:
        grid = np.concatenate([extra[:, None, :], grid], axis=1)
    P, K, _ = grid.shape
    rep = lambda a: np.repeat(a, K, axis=0)  # noqa: E731
    return best_start(solve_nd(grid.reshape(P * K, 5), rep(n), rep(d), rep(logy), rep(w), delta), P, K)


def natural(theta: np.ndarray, n_ref: float, d_ref: float) -> np.ndarray:
    """(P, 5) -> (E, A, alpha, B, beta) in the units of N and D."""
    E, a, alpha, b, beta = theta.T
    return np.stack([E, np.exp(a + alpha * math.log(n_ref)), alpha, np.exp(b + beta * math.log(d_ref)), beta], axis=1)


def optimum(theta: np.ndarray, n_ref: float, d_ref: float, compute: float, kappa: float
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N*, D*, L*) at ``compute`` FLOPs for each row of (P, 5) parameters (NaN where an exponent is 0)."""
    E, A, alpha, B, beta = natural(theta, n_ref, d_ref).T
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
        N = G * (compute / kappa) ** (beta / (alpha + beta))
        D = compute / kappa / N
        return N, D, E + A * N ** -alpha + B * D ** -beta


def frontier(theta: np.ndarray, n_ref: float, d_ref: float, kappa: float, c_ref: float) -> np.ndarray:
    """The compute-optimal loss ``L*(C) = E + K C^-gamma`` as L(C) parameters (P, 3) = (E, log K on
    C / c_ref, gamma), what multiplier.py reads."""
    E, A, alpha, B, beta = natural(theta, n_ref, d_ref).T
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gamma = alpha * beta / (alpha + beta)
        G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
        log_k = np.log(A * G ** -alpha + B * G ** beta) + gamma * math.log(kappa)
    return np.stack([E, log_k - gamma * math.log(c_ref), gamma], axis=1)
