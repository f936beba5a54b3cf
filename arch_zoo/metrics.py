"""Which way each metric improves: the one table training, sweeps and reports all read.

A metric's direction is declared, never guessed from its name: the metrics arch_zoo computes are
listed in ``GOALS`` by name; a sweep spec's ``metric.goal`` names it for the sweep's metric (and
must, for a metric not listed). A run records the goals of the metrics it logged in summary.json
(``goals``), so a report reads them from the run.
``best_metrics`` (a run's best value of each metric, ranked by these goals) sits beside them.
This module is a leaf (no torch, no pandas): reading a report never imports the model library.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional

DIRECTIONS = ("min", "max")
SPELLINGS = {"min": "min", "max": "max", "minimize": "min", "maximize": "max"}  # wandb's words too


def direction(goal: object) -> Optional[str]:
    """'min' or 'max' for a goal as a spec may write it (min, max, minimize, maximize), else None."""
    return SPELLINGS.get(goal) if isinstance(goal, str) else None

# Metrics the training module computes, by their name after the split ("val/loss" -> "loss").
GOALS: Dict[str, str] = {
    "loss": "min",
    "perplexity": "min",
    "bpc": "min",
    "accuracy": "max",
    "token_accuracy": "max",
    "exact_match": "max",
}


# The values a metric can take, where bounded: an interval reaching past them is clipped to them.
RANGES: Dict[str, tuple] = {
    "loss": (0.0, float("inf")),
    "perplexity": (1.0, float("inf")),
    "bpc": (0.0, float("inf")),
    "accuracy": (0.0, 1.0),
    "token_accuracy": (0.0, 1.0),
    "exact_match": (0.0, 1.0),
}


def range_of(metric: str) -> Optional[tuple]:
    """(lowest, highest) value ``metric`` can take, or None when unknown."""
    return RANGES.get(base_name(metric))


def base_name(metric: str) -> str:
    """'val@1024/loss' -> 'loss': the metric without its split."""
    return metric.rsplit("/", 1)[-1]


def goal_of(metric: str, declared: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """'min', 'max', or None when nobody declared the metric. ``declared`` (goals a run recorded,
    keyed by full or base name) comes before the built-in table."""
    base = base_name(metric)
    for table in (declared or {}, GOALS):
        for key in (metric, base):
            if key in table:
                return table[key]
    return None


def best_metrics(history: List[Dict[str, float]], goal: Callable[[str], Optional[str]]
                 ) -> Dict[str, Dict[str, float]]:
    """For every validation metric with a declared goal, its best value over the run and the step
    it was reached at."""
    best: Dict[str, Dict[str, float]] = {}
    for row in history:
        for k, v in row.items():
            if k == "step" or v != v or goal(k) is None:  # skip NaN, and metrics nobody said how to rank
                continue
            pick = max if goal(k) == "max" else min
            if k not in best or pick(v, best[k]["value"]) != best[k]["value"]:
                best[k] = {"value": v, "step": row["step"]}
    return best
