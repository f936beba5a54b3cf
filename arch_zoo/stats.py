"""The statistics behind a comparison: many-comparison correction, effect size, power and bootstrap.

- ``holm``: Holm-Bonferroni adjusted p-values (Holm 1979), as R's ``p.adjust(p, "holm")`` and
  statsmodels' ``multipletests(method="holm")`` compute them.
- ``cohens_dz``: the paired effect size, mean difference / sample std of the differences.
- ``paired_power`` / ``seeds_needed``: the exact power of a two-sided paired t-test from the
  noncentral t distribution (what G*Power computes), and the fewest seeds that reach a target power.
- ``bootstrap_ci``: a BCa bootstrap interval of the mean (scipy.stats.bootstrap), for metrics far
  from normal.
- ``smallest_effect`` / ``judge``: the smallest difference that counts (the equivalence margin) and
  the word a comparison earns: better, worse, equivalent (the interval of Δ lies inside the margin:
  two one-sided tests, Schuirmann 1987) or inconclusive. The word is read off the interval shown
  beside it, so the two never disagree.
- ``adjusted_level``: the confidence level of that interval. Each comparison's interval is taken at
  1 - ALPHA x p / p_holm: its Holm step's level (1 - ALPHA / (m - i + 1) for the i-th smallest of m
  p-values), lower still where an earlier step already failed (Holm's running maximum). A t-interval
  at level 1 - g excludes 0 exactly when the t-test's p < g, so it excludes 0 exactly when
  p_holm < ALPHA: the interval and the adjusted p give one decision.
- ``pair_margin``: the default margin of one comparison, from the two variants it compares only.
- ``one_sided``: a claim "B beats A by at least d" as a one-sided paired t-test and the bound it reads.
- ``spread_upper``: an upper confidence bound of a standard deviation (chi-square), to plan seeds from.
"""
from __future__ import annotations

import math
import warnings
from typing import Sequence, Tuple

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000
RESAMPLES = 9999
ROUNDING = 1e-9  # a spread below this fraction of the differences is float rounding, not a spread
BOOTSTRAP_SEED = 0  # a report is a pure function of its runs: the same resamples every time
MIN_BOOTSTRAP = 3  # fewer values: no bootstrap interval (two resample to about their min and max)
# The smallest effect of interest, by default: a fraction of the metric's seed-to-seed spread (a
# difference well inside what another seed changes is no finding), and never below what float
# rounding alone moves (the attention kernels agree to 1e-5 relative, so two kernels of one function
# differ by about that much, e.g. 7e-8 nats).
SEED_SHARE = 0.25
FLOAT_TOLERANCE = 1e-5
BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "better", "worse", "equivalent", "inconclusive"


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values; NaN entries (no test) stay NaN and do not count as tests.

    Sorted ascending, p_(i) is multiplied by (m - i), made monotone by a running maximum and capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    m = len(tested)
    if m == 0:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = p[order] * (m - np.arange(m))
    out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out


def cohens_dz(differences: Sequence[float]) -> float:
    """mean / std (ddof=1) of paired differences, with the sign of the mean difference.

    NaN with fewer than 2 pairs or when every difference is 0; ±inf when the differences are all
    the same non-zero value (no spread: any number of seeds shows it), counting differences equal up
    to float rounding (e.g. 2.0 - 1.91 and 2.1 - 2.01) as the same."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        return math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd <= ROUNDING * float(np.abs(d).max()):
        return math.nan if mean == 0 else math.copysign(math.inf, mean)
    return mean / sd


def paired_power(dz: float, n: int, alpha: float = ALPHA) -> float:
    """Power of a two-sided paired t-test with ``n`` pairs when the true effect is ``dz``:
    P(|T| > t_crit) with T ~ noncentral t(df=n-1, nc=dz*sqrt(n))."""
    if n < 2:
        return math.nan
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = dz * math.sqrt(n)
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    return power if math.isfinite(power) else _power_by_quadrature(crit, df, nc)


def _power_by_quadrature(crit: float, df: int, nc: float) -> float:
    """The same P(|T| > crit), T = (Z + nc) / sqrt(V / df) with V ~ chi2(df), integrated over V: for
    the large noncentralities where scipy's nct returns NaN (e.g. d_z 20 at 2 seeds)."""
    from scipy import integrate

    def given(v: float) -> float:
        s = crit * math.sqrt(v / df)
        return stats.chi2.pdf(v, df) * (stats.norm.sf(s - nc) + stats.norm.cdf(-s - nc))

    return float(min(1.0, integrate.quad(given, 0, math.inf, limit=200)[0]))


def seeds_needed(dz: float, power: float = POWER, alpha: float = ALPHA, cap: int = MAX_SEEDS) -> float:
    """Fewest seeds (paired) whose two-sided paired t-test reaches ``power`` for effect ``dz``.

    NaN when the effect is undefined or 0 (no number of seeds detects no effect); inf when more
    than ``cap`` are needed; 2 (the least a t-test takes) for an infinite effect."""
    if dz is None or math.isnan(dz) or dz == 0:
        return math.nan
    if math.isinf(dz):
        return 2.0
    dz = abs(dz)
    # the normal approximation undershoots slightly: start a little below it and walk up
    guess = ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / dz) ** 2
    if guess > 2 * cap:
        return math.inf
    n = max(2, int(guess) - 2)
    while paired_power(dz, n - 1, alpha) >= power and n > 2:  # never skip past the smallest n
        n -= 1
    while n <= cap:
        if paired_power(dz, n, alpha) >= power:
            return float(n)
        n += 1
    return math.inf


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95) -> Tuple[float, float]:
    """BCa bootstrap interval of the mean (scipy.stats.bootstrap, fixed seed); NaN below 3 values
    (two values resample to their min and max: an interval that contradicts the t-test); the point
    itself when all values are equal. Falls back to the percentile interval where BCa is undefined
    (e.g. very few distinct values)."""
    x = np.asarray(values, dtype=float)
    if len(x) < MIN_BOOTSTRAP:
        return math.nan, math.nan
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # BCa on tiny samples warns and returns NaN: try the next method
            warnings.simplefilter("ignore")
            res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=RESAMPLES,
                                  method=method, random_state=np.random.default_rng(BOOTSTRAP_SEED))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isnan(low) or math.isnan(high)):
            return low, high
    return math.nan, math.nan


def pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    """The within-group standard deviation pooled over groups of 2 or more values; NaN without any."""
    sums = [(len(g) - 1, float(np.var(g, ddof=1))) for g in (np.asarray(g, dtype=float) for g in groups) if len(g) >= 2]
    df = sum(d for d, _ in sums)
    return math.sqrt(sum(d * v for d, v in sums) / df) if df else math.nan


def smallest_effect(groups: Sequence[Sequence[float]], given: float = None) -> float:
    """The equivalence margin: ``given`` (the user's, in the metric's units) or SEED_SHARE x the pooled
    seed spread of ``groups`` (each a variant's values over seeds), never below FLOAT_TOLERANCE x the
    metric's typical magnitude; NaN when there is nothing to judge by."""
    if given is not None:
        return float(given)
    values = np.concatenate([np.asarray(g, dtype=float) for g in groups]) if len(groups) else np.array([])
    if not len(values):
        return math.nan
    floor = FLOAT_TOLERANCE * max(float(np.median(np.abs(values))), 1e-12)
    sd = pooled_sd(groups)
    return max(floor, SEED_SHARE * sd) if math.isfinite(sd) else floor


def pair_margin(a: Sequence[float], b: Sequence[float], given: float = None) -> float:
    """The equivalence margin of one comparison: ``given``, else SEED_SHARE x the pooled seed spread of
    the two variants compared (``smallest_effect`` of those two groups only): a noisy third variant of
    the same table leaves this pair's margin, and so its verdict, as it was."""
    return smallest_effect([list(a), list(b)], given)


def adjusted_level(p: float, p_holm: float, alpha: float = ALPHA) -> float:
    """The confidence level 1 - alpha x p / p_holm of a comparison's interval (module docstring); the
    unadjusted 1 - alpha where there is no adjustment to read (no test, or p = 0: no spread, a point)."""
    if p is None or p_holm is None or not (p > 0 and p_holm > 0) or math.isnan(p) or math.isnan(p_holm):
        return 1 - alpha
    return 1 - alpha * min(1.0, p / p_holm)


def t_interval(differences: Sequence[float], confidence: float) -> Tuple[float, float]:
    """The two-sided t-interval of the mean at ``confidence``; NaN below 2 values, the point itself
    without spread."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    if se == 0:
        return mean, mean
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, len(d) - 1)) * se
    return mean - half, mean + half


def one_sided(differences: Sequence[float], better_by: float, goal: str, alpha: float) -> Tuple[float, float]:
    """(p, bound) of the claim "the variant beats the baseline by at least ``better_by``" over paired
    differences variant - baseline: H0 mean >= -better_by against mean < -better_by for a metric to
    minimise (mirrored to maximise), a one-sided t-test; ``bound`` is the one-sided 1 - alpha confidence
    bound of the mean (an upper bound to minimise, a lower one to maximise). The claim holds exactly when
    the bound is past -better_by (+better_by), i.e. when p < alpha. NaN below 2 differences."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2:
        return math.nan, math.nan
    sign = 1.0 if goal == "min" else -1.0  # to minimise: a better variant has a negative difference
    mean, se, df = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), len(d) - 1
    if se == 0:
        return (0.0 if sign * mean < -better_by else 1.0), mean
    t = (sign * mean + better_by) / se
    return float(stats.t.cdf(t, df)), mean + sign * float(stats.t.ppf(1 - alpha, df)) * se


def spread_upper(sd: float, n: int, confidence: float) -> float:
    """The one-sided ``confidence`` upper bound of a standard deviation measured as ``sd`` on ``n`` values
    (normal data: (n - 1) s^2 / sigma^2 ~ chi2(n - 1)); NaN below 2 values."""
    if n < 2 or sd is None or math.isnan(sd):
        return math.nan
    return sd * math.sqrt((n - 1) / float(stats.chi2.ppf(1 - confidence, n - 1)))


def tost_p(differences: Sequence[float], margin: float) -> float:
    """The p-value of two one-sided paired t-tests that the mean difference lies inside (-margin, margin):
    the larger of the two one-sided p-values; NaN below 2 differences."""
    d = np.asarray(differences, dtype=float)
    if len(d) < 2 or not margin > 0:
        return math.nan
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d))
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    df = len(d) - 1
    return float(max(stats.t.sf((mean + margin) / se, df), stats.t.cdf((mean - margin) / se, df)))


def judge(delta: float, low: float, high: float, p_holm: float, margin: float, goal: str) -> str:
    """'equivalent' when the interval [low, high] of Δ lies inside (-margin, margin) (two one-sided tests,
    each at half the interval's error rate), else 'better'/'worse' when the Holm-adjusted p is below ALPHA
    and the interval excludes 0, else 'inconclusive'; '' without a Δ. [low, high] is the interval at
    ``adjusted_level``, where the last two conditions are one."""
    if delta is None or math.isnan(delta):
        return ""
    if margin is not None and margin > 0 and -margin < low and high < margin:
        return EQUIVALENT
    if p_holm is not None and not math.isnan(p_holm) and p_holm < ALPHA and (low > 0 or high < 0):
        return BETTER if (delta < 0) == (goal == "min") else WORSE
    return INCONCLUSIVE
