"""One line per variant on whether it holds across the ladder, from the per-rung verdicts of the paired
comparisons against the baseline (``reports.aggregate``: better, worse, equivalent or inconclusive, each
read off its own interval against the smallest effect that counts), with the compute multiplier at the
largest rung when the fits allow one.

A multiplier within the smallest effect (the factors of compute over which the baseline's fitted loss
moves by less than the margin) prints as 1.00x; its words (above 1, below 1, equivalent to 1,
inconclusive) are read off its interval and that band, so no word contradicts the numbers beside it."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from ...formatting import number
from ...stats import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE

UNTESTED = "untested"
ABOVE, BELOW = "above 1", "below 1"
K_EQUIVALENT = "equivalent to 1 (within the smallest effect)"
Band = Optional[Tuple[float, float]]


def _rungs(names: Sequence[str]) -> str:
    return ("rung " if len(names) == 1 else "rungs ") + ", ".join(names)


def verdict(rungs: Sequence[Tuple[str, str]], k_text: Optional[str] = None, k_relation: Optional[str] = None) -> str:
    """``rungs``: (rung name, verdict word) in ladder order. 'better at every size (k = ...)', 'equivalent
    at every size', 'flips between rung 2 and rung 3 (...)', or which rungs are which. When the largest
    rung's word and the multiplier's relation to 1 point opposite ways, the line says they disagree."""
    marks = [(name, word or UNTESTED) for name, word in rungs]
    kinds = [m for _, m in marks]
    tail = f" ({k_text})" if k_text else ""
    if not marks:
        return "no rung with a paired comparison" + tail
    for kind in (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE):
        if all(m == kind for m in kinds):
            return f"{kind} at every size" + tail + _disagree(kinds[-1], k_relation)
    parts = [f"{kind} at {_rungs([n for n, m in marks if m == kind])}"
             for kind in (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE, UNTESTED) if kind in kinds]
    signed = [(n, m) for n, m in marks if m in (BETTER, WORSE)]
    flip = next(((a, b) for (a, ma), (b, mb) in zip(signed, signed[1:]) if ma != mb), None)
    head = f"flips between rung {flip[0]} and rung {flip[1]}: " if flip else ""
    return head + "; ".join(parts) + tail + _disagree(kinds[-1], k_relation)


def _disagree(largest: str, relation: Optional[str]) -> str:
    if (largest, relation) in ((BETTER, BELOW), (WORSE, ABOVE)):
        return ("; the largest rung's comparison and the fitted multiplier point opposite ways: the curves do not "
                "describe that rung")
    return ""


def relation(low: float, high: float, band: Band) -> str:
    """Where k's interval lies against 1 and the band of multipliers within the smallest effect."""
    lo, hi = band if band is not None else (1.0, 1.0)
    if band is not None and lo <= low and high <= hi:
        return K_EQUIVALENT
    if low > hi:
        return ABOVE
    if high < lo:
        return BELOW
    return INCONCLUSIVE


def k_phrase(k: float, low: float, high: float, band: Band = None, where: str = "at the largest rung") -> str:
    """'k = 1.31x [1.12, 1.52] at the largest rung: above 1', or that no finite k exists."""
    if math.isinf(k):
        return f"no finite k {where}: the variant's fitted loss is below the baseline's fitted floor E"
    return f"k = {k_value(k, band)}x [{k_value(low, band)}, {k_value(high, band)}] {where}: {relation(low, high, band)}"


def k_value(v: float, band: Band = None, digits: int = 3) -> str:
    """A multiplier as printed: 1.00 within the smallest effect."""
    if v is None or math.isnan(v):
        return "?"
    if math.isinf(v):
        return "inf"
    if band is not None and band[0] <= v <= band[1]:
        return "1.00"
    return number(v, digits)
