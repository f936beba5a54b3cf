"""A sweep with adaptive seeds (``seeds: {start, max}``) is judged as it was run: each comparison's
interval is the repeated confidence interval of its last look (``sequential.py``), so the verdict, the
interval beside it and the rule that stopped adding seeds are one rule. A fixed-sample p-value is not
valid after looking, so the Holm column is left empty for those rows and the note says why."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

from ..errors import ConfigError
from ..sweeps.seed_spec import RULE_NAMES, parse_adaptive
from ..sequential import Design, look
from ..stats import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE


def adaptive_of(spec_seeds: Any):
    """The sweep's adaptive design from its recorded spec (``seeds`` as written), else None."""
    if not isinstance(spec_seeds, Mapping):
        return None
    try:
        return parse_adaptive(spec_seeds)
    except ConfigError:
        return None


def apply(rows: List[Dict[str, Any]], metric: str, goal: str, spec_seeds: Any) -> List[str]:
    """Replace the ranked metric's interval and verdict of each comparison by the sequential ones; the
    notes that name the rule, each pair's looks and seeds, and the runs saved against the fixed design."""
    adaptive = adaptive_of(spec_seeds)
    if adaptive is None:
        return []
    compared = [r for r in rows if not r["baseline"] and r.get("baseline_variant") is not None]
    by_name = {r["variant"]: r for r in rows}
    design = Design(adaptive.looks, adaptive.alpha, adaptive.rule, max(1, len(compared)))
    lines = []
    for r in compared:
        other = by_name[r["baseline_variant"]]
        mine, theirs = r["_values"][metric], other["_values"][metric]
        shared = sorted(set(mine) & set(theirs))
        if len(shared) < 2:
            continue
        seen = look([mine[s] - theirs[s] for s in shared], design, _margin(r, metric))
        r[f"{metric} verdict_ci_low"], r[f"{metric} verdict_ci_high"] = seen.low, seen.high
        r[f"{metric} verdict_ci_level"] = 1 - seen.level
        r[f"{metric} p_holm"] = math.nan
        r[f"{metric} verdict"] = _word(seen.decided, r[f"{metric} delta"], goal)
        looks = [n for n in adaptive.looks if n <= seen.n]
        state = {"differs": "decided at", "equivalent": "equivalent at"}.get(seen.decided, "undecided at")
        lines.append(f"{r['variant']}: looks at {', '.join(map(str, looks))} seeds, {state} {seen.n} "
                     f"(interval at nominal level {seen.level:.2g})")
    ran = sum(r["seeds"] for r in rows)
    fixed = len(rows) * adaptive.max
    head = (f"seeds: adaptive, {RULE_NAMES[adaptive.rule]} alpha spending ({adaptive.alpha:g} two-sided, "
            f"Bonferroni over {design.pairs} comparison{'s' * (design.pairs != 1)}); Δ's interval is each pair's "
            "repeated confidence interval at its last look, which holds its coverage whichever look stopped it, "
            "and the verdict reads it; p (Holm) is left out (a fixed-sample p-value does not hold after looking). "
            f"Runs: {ran} of the fixed design's {fixed} ({fixed - ran} saved).")
    return [head] + ["  " + line for line in lines]


def _margin(r: Dict[str, Any], metric: str) -> Optional[float]:
    m = r.get(f"{metric} margin")
    return m if isinstance(m, float) and math.isfinite(m) and m > 0 else None


def _word(decided: str, delta: float, goal: str) -> str:
    if decided == "equivalent":
        return EQUIVALENT
    if decided == "differs":
        return BETTER if (delta < 0) == (goal == "min") else WORSE
    return INCONCLUSIVE
