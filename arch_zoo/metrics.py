"""Which way each metric improves: the one table training, sweeps and reports all read.

A metric's direction is declared, never guessed from its name: the metrics arch_zoo computes are
listed in ``GOALS``; a task declares its own in ``TaskData.goals``; a plugin may ``declare`` one;
a sweep spec's ``metric.goal`` names it for the sweep's metric. A run records the goals of the
metrics it logged in summary.json (``goals``), so a report learns them without importing the task.
This module is a leaf (no torch, no pandas): reading a report never imports the model library.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

DIRECTIONS = ("min", "max")

# Metrics the training module computes, by their name after the split ("val/loss" -> "loss").
GOALS: Dict[str, str] = {
    "loss": "min",
    "perplexity": "min",
    "bpc": "min",
    "accuracy": "max",
    "token_accuracy": "max",
    "exact_match": "max",
}


def check_goal(goal: object, what: str) -> str:
    if goal not in DIRECTIONS:
        raise ValueError(f"{what}: goal must be 'min' or 'max', got {goal!r}")
    return str(goal)


def declare(name: str, goal: str) -> None:
    """Declare which way a metric (its name after the split, e.g. ``bleu``) improves."""
    goal = check_goal(goal, name)
    if GOALS.get(name, goal) != goal:
        raise ValueError(f"metric {name!r} is already declared with goal {GOALS[name]!r}")
    GOALS[name] = goal


def base_name(metric: str) -> str:
    """'val@1024/loss' -> 'loss': the metric without its split."""
    return metric.rsplit("/", 1)[-1]


def goal_of(metric: str, declared: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """'min', 'max', or None when nobody declared the metric. ``declared`` (a task's or a run's
    goals, keyed by full or base name) comes before the built-in table."""
    base = base_name(metric)
    for table in (declared or {}, GOALS):
        for key in (metric, base):
            if key in table:
                return table[key]
    return None
