"""The compute multiplier of a variant against the baseline: k(C) such that the baseline needs k x C
of training compute to reach the loss the variant reaches at C, from the two fitted curves.

With L_b(C) = E_b + A_b C^-alpha_b and the variant's loss L_v(C) at C, the baseline reaches it at
C_b = (A_b / (L_v(C) - E_b))^(1 / alpha_b), so k = C_b / C. When L_v(C) <= E_b the variant is below
the baseline's floor: no compute brings the baseline there, and no finite k exists (k = inf).
k > 1: the variant is worth more compute than it spends; k < 1: less.

Both curves are fitted on x = C / x_ref with the same x_ref, so k is computed in those units; each
bootstrap replicate pairs the variant's and the baseline's fits of the same resampled seeds. ``k_table``
gives a variant's k at each of its rungs (and beyond, when asked), each with its equivalence band."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .bootstrap import Curve, interval
from .fit import predict
from .points import Ladder
from .verdict import relation


def multiplier(theta_v: np.ndarray, theta_b: np.ndarray, x: float) -> np.ndarray:
    """k at x (in x_ref units) for each pair of rows of (P, 3) parameters; inf below the floor."""
    logx = np.full((len(theta_v), 1), math.log(x))
    target = np.exp(predict(theta_v, logx)[:, 0])
    gap = target - theta_b[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_xb = (theta_b[:, 1] - np.log(gap)) / theta_b[:, 2]
        k = np.exp(log_xb - math.log(x))
    return np.where(gap > 0, k, np.inf)


def at(variant: Curve, baseline: Curve, compute: float) -> Tuple[float, float, float, float]:
    """(k, CI low, CI high, the variant's fitted loss) at ``compute`` FLOPs."""
    x = compute / variant.x_ref
    k = float(multiplier(variant.point.theta, baseline.point.theta, x)[0])
    both = variant.usable & baseline.usable
    ks = multiplier(variant.replicates.theta[both], baseline.replicates.theta[both], x)
    low, high = interval(ks)
    loss = float(np.exp(predict(variant.point.theta, np.full((1, 1), math.log(x)))[0, 0]))
    return k, low, high, loss


def equivalence_band(baseline: Curve, compute: float, margin: float) -> Tuple[float, float]:
    """(k low, k high): the multipliers at ``compute`` FLOPs whose loss lies within ``margin`` of the baseline's
    fitted loss there, L_b(k C) = L_b(C) + margin and L_b(C) - margin (k high is inf when L_b(C) - margin is
    at or below the baseline's floor); (nan, nan) without a margin."""
    if margin is None or not margin > 0:
        return math.nan, math.nan
    x = compute / baseline.x_ref
    E, log_a, alpha = (float(v) for v in baseline.point.theta[0])
    loss = float(np.exp(predict(baseline.point.theta, np.full((1, 1), math.log(x)))[0, 0]))

    def k_for(target: float) -> float:
        gap = target - E
        return math.inf if gap <= 0 else math.exp((log_a - math.log(gap)) / alpha - math.log(x))

    return k_for(loss + margin), k_for(loss - margin)


def k_band(row: Dict[str, Any]):
    """A k row's equivalence band (k low, k high), or None without a margin."""
    low, high = row["k_equivalent_low"], row["k_equivalent_high"]
    return None if math.isnan(low) else (low, high)


def k_table(c: Curve, base: Curve, ladder: Ladder, extrapolate_to: Optional[float],
            margin: float = math.nan) -> List[Dict[str, Any]]:
    """Variant ``c``'s k rows against ``base``: one per rung it was fitted on, and one at ``extrapolate_to``
    when given, each with the band of k equivalent within ``margin`` and the relation it implies."""
    rows = []
    sizes = {r.number: (r.best().size if r.best() else r.label) for r in ladder.rungs[c.variant]}
    for number, compute in zip(c.numbers, c.px):
        k, low, high, loss = at(c, base, float(compute))
        rows.append({"variant": c.variant, "baseline": base.variant, "rung": number, "size": sizes[number],
                     "kind": "rung", "compute": float(compute), "loss_fit": loss, "k": k, "k_ci_low": low,
                     "k_ci_high": high, **_equivalence(base, float(compute), margin, low, high),
                     "note": _k_note(k, base)})
    if extrapolate_to is not None:
        k, low, high, loss = at(c, base, extrapolate_to)
        rows.append({"variant": c.variant, "baseline": base.variant, "rung": None, "size": None,
                     "kind": "extrapolated", "compute": extrapolate_to, "loss_fit": loss, "k": k, "k_ci_low": low,
                     "k_ci_high": high, **_equivalence(base, extrapolate_to, margin, low, high),
                     "note": "extrapolated beyond the largest rung: both curves are assumed to "
                             "hold there" + (f"; {_k_note(k, base)}" if math.isinf(k) else "")})
    return rows


def _equivalence(base: Curve, compute: float, margin: float, low: float, high: float) -> Dict[str, Any]:
    band_low, band_high = equivalence_band(base, compute, margin)
    band = None if math.isnan(band_low) else (band_low, band_high)
    return {"k_equivalent_low": band_low, "k_equivalent_high": band_high, "relation": relation(low, high, band)}


def _k_note(k: float, base: Curve) -> Optional[str]:
    if math.isinf(k):
        return f"no finite k: the variant's fitted loss is below the baseline's fitted floor E = {base.point.E[0]:.4g}"
    return None
