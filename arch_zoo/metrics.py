"""Which way each metric improves: the one table training, sweeps and reports all read.

A metric's direction is declared, never guessed from its name: the metrics arch_zoo computes are
listed in ``GOALS`` by name; a sweep spec's ``metric.goal`` names it for the sweep's metric (and
must, for a metric not listed). A run records the goals of the metrics it logged in summary.json
(``goals``), so a report reads them from the run.
``best_metrics`` (a run's best value of each metric, ranked by these goals) sits beside them.
Each metric also declares its unit (``UNITS``: per token, character, byte or example), recorded in
summary.json (``units``): a per-token metric does not compare variants whose tokens cover different
text, so ``per_byte_instead`` ranks them by bits per byte (reports, the sweep's table, tuning).
This module is a leaf (no torch, no pandas): reading a report never imports the model library.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from .errors import ConfigError

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
    "bpb": "min",
    "accuracy": "max",
    "token_accuracy": "max",
    "exact_match": "max",
    # A diagnostic (train.attention_diagnostics), not a quality: the mass queries put on the first token,
    # the attention sink of Xiao et al. (2024). min orders it as the sink studies do (less sink first;
    # Qiu et al. 2025: an output gate removes it), so a report can rank and compare by it.
    "attn_first_token": "min",
}

UNITS = ("token", "character", "byte", "example")
# What each metric is an average over, by base name; an objective scoring one label per example
# declares its loss and perplexity per example instead (training/objectives.py).
UNIT_OF: Dict[str, str] = {
    "loss": "token",
    "perplexity": "token",
    "token_accuracy": "token",
    "accuracy": "token",
    "bpc": "character",
    "bpb": "byte",
    "exact_match": "example",
}
PER_BYTE = "bpb"
SAME_TEXT = 1e-6  # relative difference in bytes per token below which two tokenizations cover the same text


def unit_of(metric: str, declared: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """'token', 'character', 'byte', 'example', or None when nobody declared it. ``declared`` (units a
    run recorded, keyed by full or base name) comes before the built-in table."""
    base = base_name(metric)
    for table in (declared or {}, UNIT_OF):
        for key in (metric, base):
            if key in table:
                return table[key]
    return None


def per_byte_instead(metric: str, bytes_per_token: Mapping[str, Optional[float]], available: Iterable[str],
                     units: Optional[Mapping[str, str]] = None) -> Tuple[str, Optional[str]]:
    """The metric to rank by and the one line that says why it is not ``metric``, else None.

    ``bytes_per_token``: each variant's UTF-8 bytes per token on ``metric``'s split (None: unknown).
    A per-token metric ranks variants only when their tokens cover the same text; when the measured
    bytes per token differ, the split's bits per byte ranks instead (when the runs logged it), and
    otherwise the line warns that the ranking compares different units."""
    if unit_of(metric, units) != "token":
        return metric, None
    known = {v: b for v, b in bytes_per_token.items() if isinstance(b, (int, float)) and b > 0}
    if len(known) < 2 or max(known.values()) <= min(known.values()) * (1 + SAME_TEXT):
        return metric, None
    split = metric.rsplit("/", 1)[0] if "/" in metric else ""
    replacement = f"{split}/{PER_BYTE}" if split else PER_BYTE
    shown = ", ".join(f"{v} {b:.3g}" for v, b in known.items())
    why = (f"{metric} is per token and the variants' tokens cover different text ({split or 'eval'} bytes per "
           f"token: {shown})")
    if replacement in set(available):
        return replacement, f"ranked by {replacement}, not {metric}: {why}."
    return metric, f"warning: ranked by {metric}, though {why}; no run logged {replacement} to rank by instead."


# The values a metric can take, where bounded: an interval reaching past them is clipped to them.
RANGES: Dict[str, tuple] = {
    "loss": (0.0, float("inf")),
    "perplexity": (1.0, float("inf")),
    "bpc": (0.0, float("inf")),
    "accuracy": (0.0, 1.0),
    "token_accuracy": (0.0, 1.0),
    "exact_match": (0.0, 1.0),
    "attn_first_token": (0.0, 1.0),
}


def range_of(metric: str) -> Optional[tuple]:
    """(lowest, highest) value ``metric`` can take, or None when unknown."""
    return RANGES.get(base_name(metric))


LAYER = re.compile(r"(?:(?:encoder|decoder)\.)?layer_\d+(?:\.cross)?")  # attention_diagnostics' per-layer names


def per_layer(metric: str) -> bool:
    """Whether ``metric`` is one layer's value ('val/attn_first_token/layer_3')."""
    parts = metric.split("/")
    return len(parts) > 2 and LAYER.fullmatch(parts[-1]) is not None


LAYER_MEANS = ("attn_first_token",)  # per-layer metrics a run also logs as their mean over layers


def layer_means(metrics: Mapping[str, float]) -> Dict[str, float]:
    """The mean over layers of each kind in LAYER_MEANS, as a run since logs it ('val/attn_first_token'
    from 'val/attn_first_token/layer_0', ...): what a report reads for a run trained before it did."""
    layers: Dict[str, List[float]] = {}
    for name, value in metrics.items():
        if per_layer(name) and base_name(name) in LAYER_MEANS:
            layers.setdefault(name.rsplit("/", 1)[0], []).append(value)
    return {name: sum(values) / len(values) for name, values in layers.items()}


def base_name(metric: str) -> str:
    """'val@1024/loss' -> 'loss': the metric without its split; a per-layer metric without its layer too
    ('val/attn_first_token/layer_3' -> 'attn_first_token'), so each layer's value has its mean's goal."""
    parts = metric.split("/")
    return parts[-2] if per_layer(metric) else parts[-1]


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


CLAIM_ALPHA = 0.05


def check_claim(claim: Optional[Mapping], key: str = "--claim") -> Optional[Dict[str, float]]:
    """{"better_by", "alpha"} from a spec's ``metric.claim`` (``key`` "metric.claim") or the command line
    (``--claim`` / ``--claim-alpha``); None without one. ``better_by`` is how much better, in the metric's
    units and in its goal's direction, so never negative."""
    if claim is None:
        return None
    spec = key != "--claim"
    if not isinstance(claim, Mapping):
        raise ConfigError(key, f"expected {{better_by: D, alpha: A}}, got {claim!r}")
    for k in claim:
        if k not in ("better_by", "alpha"):
            raise ConfigError(f"{key}.{k}", "unknown key; allowed: better_by, alpha")
    better_by, alpha = claim.get("better_by"), claim.get("alpha", CLAIM_ALPHA)
    where, where_alpha = (f"{key}.better_by", f"{key}.alpha") if spec else ("--claim", "--claim-alpha")
    if isinstance(better_by, bool) or not isinstance(better_by, (int, float)) or not better_by == better_by \
            or abs(better_by) == float("inf"):
        raise ConfigError(where, f"expected how much better the variant must be (a number in the metric's units), "
                                 f"got {better_by!r}")
    if better_by < 0:
        raise ConfigError(where, f"{better_by:g} is negative: it is how much better the variant must be, in the "
                                 "metric's units and in its goal's direction (a loss: that much lower; an accuracy: "
                                 "that much higher), so 0 or more")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ConfigError(where_alpha, f"expected a one-sided error rate in (0, 1), e.g. 0.01, got {alpha!r}")
    return {"better_by": float(better_by), "alpha": float(alpha)}
