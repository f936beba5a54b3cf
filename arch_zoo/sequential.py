"""Group-sequential comparisons: seeds added in rounds, each pair looked at after every round, without
the error rate a naive "add seeds until p < 0.05" inflates.

The rule is alpha spending (Lan & DeMets 1983): the two-sided error ``alpha`` is spent over the looks
by a spending function of the information fraction t = seeds so far / the most seeds (O'Brien-Fleming's
shape by default, which keeps almost all of it for the last look; Pocock's spends it evenly). The
z-boundaries come from the joint distribution of the sequential statistics (a Brownian motion seen at
the looks, integrated numerically as Armitage, McPherson & Rowe 1969 do). A look at n paired seeds
reads its boundary as a nominal level and a t-quantile with n - 1 degrees of freedom (the usual small-
sample form), so the repeated confidence interval of a look is mean ± t * se (Jennison & Turnbull 1989):
a pair is decided once that interval excludes 0 (better / worse) or lies inside the equivalence margin,
and the intervals hold their coverage whichever look stops, so the decisions keep the error rate.
Several pairs share ``alpha`` by Bonferroni (alpha / pairs each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional, Sequence, Tuple

import numpy as np
from scipy import optimize, stats

GRID = 801  # points over a look's continuation region: boundaries to ~1e-4 of gsDesign's


def spent(t: float, alpha: float, rule: str = "obrien-fleming") -> float:
    """The error spent by information fraction ``t`` (two-sided, alpha / 2 a side): Lan-DeMets
    O'Brien-Fleming 4 - 4 Phi(z_{alpha/4} / sqrt(t)) (gsDesign's sfLDOF at alpha / 2 a side), or Pocock
    alpha log(1 + (e - 1) t)."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if rule == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    return float(4 * stats.norm.sf(stats.norm.isf(alpha / 4) / math.sqrt(t)))


@lru_cache(maxsize=256)
def boundaries(fractions: Tuple[float, ...], alpha: float, rule: str = "obrien-fleming") -> Tuple[float, ...]:
    """Two-sided z-boundaries c_k at increasing information ``fractions`` (the last one 1 for the full
    alpha): P(|Z_j| < c_j for j < k, |Z_k| >= c_k) = spent(t_k) - spent(t_{k-1}) under no effect."""
    t = np.asarray(fractions, dtype=float)
    if len(t) == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0, got {fractions}")
    out: List[float] = []
    grid = weights = density = None  # the sub-density of S_k = Z_k sqrt(t_k) on paths not yet stopped
    for k, tk in enumerate(t):
        target = spent(tk, alpha, rule) - (spent(t[k - 1], alpha, rule) if k else 0.0)
        if target <= 0:
            out.append(math.inf)
        elif k == 0:
            out.append(float(stats.norm.isf(target / 2)))
        else:
            step = math.sqrt(tk - t[k - 1])

            def crossing(c: float) -> float:
                b = c * math.sqrt(tk)
                tails = stats.norm.cdf((-b - grid) / step) + stats.norm.sf((b - grid) / step)
                return float(np.sum(weights * density * tails)) - target

            alive = float(np.sum(weights * density))
            out.append(float(optimize.brentq(crossing, 1e-6, 40.0)) if alive > target else 0.0)
        grid, weights, density = _advance(grid, weights, density, tk, t[k - 1] if k else 0.0, out[-1])
    return tuple(out)


def _advance(grid, weights, density, tk: float, previous: float, c: float):
    """The sub-density of S at ``tk`` on the paths inside (-c sqrt(tk), c sqrt(tk)), from the one at
    ``previous`` (None at the first look: S starts at 0)."""
    b = min(c, 12.0) * math.sqrt(tk)
    new = np.linspace(-b, b, GRID)
    w = np.full(GRID, (2 * b) / (GRID - 1))
    w[0] = w[-1] = w[0] / 2  # the trapezoid rule
    if grid is None:
        return new, w, stats.norm.pdf(new, scale=math.sqrt(tk))
    step = math.sqrt(tk - previous)
    kernel = stats.norm.pdf((new[:, None] - grid[None, :]) / step) / step
    return new, w, kernel @ (weights * density)


PATHS = 200_000  # null paths that calibrate the t-boundaries (a fixed seed: a design is a pure function)
CALIBRATION_SEED = 0
FEW = 50  # a look that spends less than this many paths' worth takes its z-boundary as a t-quantile


@lru_cache(maxsize=64)
def t_boundaries(looks: Tuple[int, ...], alpha: float, rule: str = "obrien-fleming") -> Tuple[float, ...]:
    """Critical |t| of each look at ``looks`` paired seeds (the last the most), spending ``alpha`` as
    ``boundaries`` does but for the paired t statistic, whose spread is estimated: the z-boundaries
    read as t-quantiles let through ~6% at 2-3 seeds a look. Calibrated on ``PATHS`` simulated null
    pairs (their t statistics are free of the unknown spread): at each look the threshold that stops
    exactly that look's share of the paths still running."""
    z = boundaries(tuple(n / looks[-1] for n in looks), alpha, rule)
    rng = np.random.default_rng(CALIBRATION_SEED)
    total = total_sq = np.zeros(PATHS)
    alive = np.ones(PATHS, dtype=bool)
    out: List[float] = []
    seen = 0
    for k, n in enumerate(looks):
        x = rng.standard_normal((PATHS, n - seen))
        total, total_sq, seen = total + x.sum(axis=1), total_sq + (x * x).sum(axis=1), n
        sd = np.sqrt(np.maximum(total_sq - total * total / n, 0.0) / (n - 1))
        t = np.abs(total / n) / (sd / math.sqrt(n))
        share = spent(n / looks[-1], alpha, rule) - (spent(looks[k - 1] / looks[-1], alpha, rule) if k else 0.0)
        stops = int(round(share * PATHS))
        if stops < FEW:
            crit = float(stats.t.isf(stats.norm.sf(z[k]), n - 1))
        else:
            candidates = t[alive]
            stops = min(stops, len(candidates))
            crit = float(np.partition(candidates, len(candidates) - stops)[len(candidates) - stops])
        out.append(crit)
        alive &= t < crit
    return tuple(out)


@dataclass(frozen=True)
class Design:
    """Looks at ``looks`` paired seeds (increasing; the last is the most a pair gets), ``alpha``
    two-sided over ``pairs`` comparisons (Bonferroni: alpha / pairs each), spent by ``rule``."""

    looks: Tuple[int, ...]
    alpha: float = 0.05
    rule: str = "obrien-fleming"
    pairs: int = 1

    @property
    def max(self) -> int:
        return self.looks[-1]

    def look_of(self, n: int) -> int:
        """The index of the last planned look at or below ``n`` paired seeds (0 below the first)."""
        return max(0, sum(1 for k in self.looks if k <= n) - 1)

    def critical(self) -> Tuple[float, ...]:
        return t_boundaries(tuple(self.looks), self.alpha / max(1, self.pairs), self.rule)

    def level(self, n: int) -> float:
        """The nominal two-sided level of the look at ``n`` paired seeds: what its interval's width is."""
        k = self.look_of(n)
        return float(2 * stats.t.sf(self.critical()[k], self.looks[k] - 1))


def repeated_interval(differences: Sequence[float], level: float) -> Tuple[float, float]:
    """mean ± t_{n-1}(1 - level / 2) x se of paired ``differences``: the look's repeated confidence
    interval; (nan, nan) below 2 pairs."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    half = float(stats.t.isf(level / 2, len(d) - 1)) * se if level > 0 else math.inf
    return mean - half, mean + half


@dataclass(frozen=True)
class Look:
    """One pair's state at its latest look: the interval the verdict reads and whether it is decided."""

    n: int
    level: float
    low: float
    high: float
    decided: str  # "" while open, else "differs" or "equivalent"
    final: bool  # the design's last look: no more seeds come


def look(differences: Sequence[float], design: Design, margin: Optional[float] = None) -> Look:
    """Where a pair stands after ``len(differences)`` paired seeds under ``design``."""
    n = len(differences)
    level = design.level(n)
    low, high = repeated_interval(differences, level)
    decided = ""
    if not math.isnan(low):
        if margin is not None and margin > 0 and -margin < low and high < margin:
            decided = "equivalent"  # as stats.judge: a difference too small to count, real or not
        elif low > 0 or high < 0:
            decided = "differs"
    return Look(n, level, low, high, decided, n >= design.max)
