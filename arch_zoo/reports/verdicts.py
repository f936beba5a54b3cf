"""Each comparison's verdict and claim, read off the interval the table prints beside it.

A verdict reads the Holm-adjusted p-value of its metric's family (every variant-vs-baseline test of that
metric), so the interval printed beside it is adjusted for the same family: taken at
``stats.adjusted_level``, where "the interval excludes 0" and "p (Holm) < alpha" are one condition. A
one-sided claim (``metric.claim``: B beats A by at least a margin) is read the same way from its own
one-sided tests and bounds.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..formatting import number
from .load import goal_for
from ..stats import INCONCLUSIVE, adjusted_level, bootstrap_ci, holm, judge, one_sided, t_interval

HOLDS, NOT_SHOWN = "holds", "not shown"


def verdict_interval(differences: Optional[Sequence[float]], level: float, ci: str) -> Tuple[float, float]:
    if differences is None or len(differences) < 2:
        return math.nan, math.nan
    return bootstrap_ci(differences, level) if ci == "bootstrap" else t_interval(differences, level)


def judge_rows(rows: List[Dict[str, Any]], metrics: List[str], attrs: Mapping[str, Any], goal: str, ci: str) -> None:
    """Holm-adjusted p-values, one family per metric, the interval at each comparison's adjusted level and
    each non-baseline row's verdict (``row["_diffs"][m]``: its paired differences)."""
    for m in metrics:
        for r, adjusted in zip(rows, holm([r[f"{m} p"] for r in rows])):
            r[f"{m} p_holm"] = float(adjusted)
            level = adjusted_level(r[f"{m} p"], adjusted)
            low, high = (math.nan, math.nan) if r["baseline"] else verdict_interval(r["_diffs"].get(m), level, ci)
            r[f"{m} verdict_ci_low"], r[f"{m} verdict_ci_high"] = low, high
            r[f"{m} verdict_ci_level"] = math.nan if math.isnan(low) else level
            r[f"{m} verdict"] = None if r["baseline"] else judge(
                r[f"{m} delta"], low, high, r[f"{m} p_holm"], r[f"{m} margin"],
                goal_for(attrs, m) or goal) or None  # None, not "": a CSV reads it back the same


def claim_rows(rows: List[Dict[str, Any]], metric: str, claim: Dict[str, float], goal: str) -> None:
    """"The variant beats its baseline by at least better_by" for each non-baseline row: a one-sided paired
    t-test, Holm-adjusted over the table's claims, and the one-sided bound at the matching level."""
    alpha = claim["alpha"]
    tested = [r for r in rows if not r["baseline"] and len(r["_diffs"].get(metric, ())) >= 2]
    p = [one_sided(r["_diffs"][metric], claim["better_by"], goal, alpha)[0] for r in tested]
    for r in rows:
        r.update({f"{metric} {k}": math.nan for k in ("claim_p", "claim_p_holm", "claim_bound", "claim_level")})
        r[f"{metric} claim"] = None
    for r, raw, adjusted in zip(tested, p, holm(p)):
        level = adjusted_level(raw, adjusted, alpha)
        bound = one_sided(r["_diffs"][metric], claim["better_by"], goal, 1 - level)[1]
        r.update({f"{metric} claim_p": raw, f"{metric} claim_p_holm": float(adjusted),
                  f"{metric} claim_bound": bound, f"{metric} claim_level": level,
                  f"{metric} claim": HOLDS if adjusted < alpha else NOT_SHOWN})


def claim_note(metric: str, goal: str, claim: Dict[str, float], claims: int) -> str:
    side = "lower" if goal == "min" else "higher"
    adjusted = f", Holm-adjusted over the {claims} claims" if claims > 1 else ""
    return (f"claim: each variant's {metric} is {side} than its baseline's by at least {claim['better_by']:g} "
            f"(one-sided paired t-test at alpha {claim['alpha']:g}{adjusted}); 'holds' when its p is below alpha, "
            f"which is when the one-sided bound of Δ shown ({'upper' if goal == 'min' else 'lower'}, at the level "
            f"given) lies past {'-' if goal == 'min' else '+'}{claim['better_by']:g}; 'not shown' is no evidence "
            "against the claim, only too little for it.")


def equivalence_hint(rows: List[Dict[str, Any]], metric: str) -> Optional[str]:
    """With the default margin: for each inconclusive pair, the --min-effect that would have called it
    equivalent (the farthest end of its interval, rounded up), so a user states a margin on purpose."""
    needed = [(str(r["variant"]), max(abs(r[f"{metric} verdict_ci_low"]), abs(r[f"{metric} verdict_ci_high"])))
              for r in rows if r.get(f"{metric} verdict") == INCONCLUSIVE
              and np.isfinite([r[f"{metric} verdict_ci_low"], r[f"{metric} verdict_ci_high"]]).all()]
    if not needed:
        return None
    pairs = "; ".join(f"{v} {number(round_up(d), 3)}" for v, d in needed)
    return (f"not equivalent at the default margin: each inconclusive pair would read 'equivalent' from --min-effect "
            f"(metric.min_effect) above: {pairs} (the farthest end of its interval). Stating one says that a "
            f"difference of {metric} smaller than it is no finding; choose it from what would change a decision, "
            "not from these numbers, and more seeds narrow the interval instead.")


def round_up(x: float, digits: int = 3) -> float:
    """``x`` rounded up to ``digits`` significant digits: a margin at least as wide as the interval needs."""
    if not x > 0 or not math.isfinite(x):
        return x
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return math.ceil(x * scale * (1 + 1e-12)) / scale
