"""One line per variant on whether it holds across the ladder, from the per-rung paired Δ against the
baseline and their Holm-adjusted p-values (``reports.aggregate``: one family of tests per metric,
every rung's included), with the compute multiplier at the largest rung when the fits allow one.

A rung counts as better or worse when its Holm-adjusted p is below alpha (0.05), in the direction of
its Δ; otherwise as no difference; without a test (fewer than 2 paired seeds) as untested."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from ...formatting import number
from ..stats import ALPHA

BETTER, WORSE, SAME, UNTESTED = "better", "worse", "no difference", "untested"


def classify(delta: float, p_holm: float, goal: str) -> str:
    if p_holm is None or delta is None or math.isnan(p_holm) or math.isnan(delta):
        return UNTESTED
    if p_holm >= ALPHA:
        return SAME
    return BETTER if (delta < 0) == (goal == "min") else WORSE


def _rungs(names: Sequence[str]) -> str:
    return ("rung " if len(names) == 1 else "rungs ") + ", ".join(names)


def verdict(rungs: Sequence[Tuple[str, float, float]], goal: str, k_text: Optional[str] = None) -> str:
    """``rungs``: (rung name, Δ, Holm p) in ladder order. 'better at every size (k = ...)', 'no difference
    at any size', 'flips between rung 2 and rung 3 (...)', or which rungs are which."""
    marks = [(name, classify(d, p, goal)) for name, d, p in rungs]
    kinds = [m for _, m in marks]
    tail = f" ({k_text})" if k_text else ""
    if not marks:
        return "no rung with a paired comparison" + tail
    if all(m == BETTER for m in kinds):
        return "better at every size" + tail
    if all(m == WORSE for m in kinds):
        return "worse at every size" + tail
    if all(m == SAME for m in kinds):
        return "no difference at any size" + tail
    parts = [f"{kind} at {_rungs([n for n, m in marks if m == kind])}" for kind in (BETTER, WORSE, SAME, UNTESTED)
             if kind in kinds]
    signed = [(n, m) for n, m in marks if m in (BETTER, WORSE)]
    flip = next(((a, b) for (a, ma), (b, mb) in zip(signed, signed[1:]) if ma != mb), None)
    head = f"flips between rung {flip[0]} and rung {flip[1]}: " if flip else ""
    return head + "; ".join(parts) + tail


def k_phrase(k: float, low: float, high: float, where: str = "at the largest rung") -> str:
    """'k = 1.31x [1.12, 1.52] at the largest rung', or that no finite k exists."""
    if math.isinf(k):
        return f"no finite k {where}: the variant's fitted loss is below the baseline's fitted floor E"
    return f"k = {_x(k)}x [{_x(low)}, {_x(high)}] {where}"


def _x(v: float) -> str:
    if v is None or math.isnan(v):
        return "?"
    if math.isinf(v):
        return "inf"
    return number(v, 3)
