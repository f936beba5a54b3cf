"""A ladder by parameter count: ``scale.rule: {params: [...], aspect_ratio, head_dim}``.

Given parameter targets, each rung's width is the multiple of head_dim whose model comes nearest the
target (the smallest relative miss), its depth ``round(width / aspect_ratio)`` and its heads ``width / head_dim``: the
fixed-aspect-ratio, fixed-head-size shape OLMo-core's and Chinchilla's ladders use. Counts are the
rung reference variant's (its baseline, else its first), built as the plan builds it, so the target
is met for the model the budgets are computed on; other variants at the same shape count their own.

Parsing is pure data (``parse_params_rule``); the sizes exist once the plan has counted
(``resolve``, through ``scale.with_sizes``), before anything expands the spec into runs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError

COUNTS = ("non_embedding", "total")
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "d_ff")  # what a rung of this rule sets
DEFAULT_TOLERANCE = 0.1
MAX_WIDTH = 1 << 16  # beyond any model this toolkit builds: a target past it is a typo


@dataclass(frozen=True)
class ParamsRule:
    params: Tuple[float, ...]  # targets, smallest first
    aspect_ratio: float  # d_model / n_layers
    head_dim: int
    ffn_ratio: Optional[float] = None  # None: the FFN's own default, following the width
    count: str = "non_embedding"  # which count meets the target: non_embedding | total
    tolerance: float = DEFAULT_TOLERANCE  # the largest relative miss accepted

    def shape(self, width: int) -> Dict[str, Any]:
        return {"d_model": width, "n_layers": max(1, round(width / self.aspect_ratio)),
                "n_heads": width // self.head_dim,
                "d_ff": None if self.ffn_ratio is None else max(1, round(self.ffn_ratio * width))}


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(where, f"expected a positive number, got {value!r}")
    return float(value)


def parse_params_rule(r: Mapping[str, Any]) -> ParamsRule:
    for k in ("widths", "depths", "d_model"):
        if k in r:
            raise ConfigError(f"scale.rule.{k}", "is for a width or depth rule; a parameter rule sets params, "
                              "aspect_ratio and head_dim and picks the widths")
    for k in ("aspect_ratio", "head_dim"):
        if k not in r:
            raise ConfigError(f"scale.rule.{k}", "missing: a parameter rule needs params, aspect_ratio (d_model / "
                              "n_layers) and head_dim (d_model / n_heads)")
    raw = r["params"]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ConfigError("scale.rule.params", f"expected a list of parameter counts, got {raw!r}")
    params = tuple(_positive(p, f"scale.rule.params[{i}]") for i, p in enumerate(raw))
    if list(params) != sorted(set(params)):
        raise ConfigError("scale.rule.params", "list each target once, from smallest to largest")
    head_dim = r["head_dim"]
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ConfigError("scale.rule.head_dim", f"expected a positive integer, got {head_dim!r}")
    count = r.get("count", "non_embedding")
    if count not in COUNTS:
        raise ConfigError("scale.rule.count", f"expected one of {', '.join(COUNTS)}, got {count!r}")
    tolerance = _positive(r.get("tolerance", DEFAULT_TOLERANCE), "scale.rule.tolerance")
    ratio = _positive(r["ffn_ratio"], "scale.rule.ffn_ratio") if r.get("ffn_ratio") is not None else None
    return ParamsRule(params, _positive(r["aspect_ratio"], "scale.rule.aspect_ratio"), head_dim, ratio, count,
                      tolerance)


def _miss(got: int, target: float) -> float:
    return abs(got / target - 1)


def nearest_width(rule: ParamsRule, target: float, count: Callable[[Dict[str, Any]], int]) -> Tuple[int, int]:
    """(width, its count): the multiple of head_dim nearest ``target`` (the smallest relative miss).
    Counts grow with width (depth follows it), so doubling brackets the target and bisection finds the
    first width past it."""
    def at(k: int) -> int:
        return count(rule.shape(k * rule.head_dim))

    hi = 1
    while at(hi) < target:
        if hi * rule.head_dim >= MAX_WIDTH:
            raise ConfigError("scale.rule.params", f"{target:.3g} parameters need a width above {MAX_WIDTH}")
        hi *= 2
    lo = hi // 2  # 0, or a k whose count is below the target
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid) < target else (lo, mid)
    best = min([k for k in (hi - 1, hi) if k >= 1], key=lambda k: _miss(at(k), target))
    return best * rule.head_dim, at(best)


def resolve(rule: ParamsRule, count: Callable[[Dict[str, Any]], int], label: Callable, size_type) -> List[Any]:
    """Each target's size (``size_type``: scale.Size, with its target), or one line naming the target
    no shape of the rule comes near, or two targets that land on one shape."""
    sizes: List[Any] = []
    for i, target in enumerate(rule.params):
        where = f"scale.rule.params[{i}]"
        width, got = nearest_width(rule, target, count)
        if _miss(got, target) > rule.tolerance:
            near = [(w, count(rule.shape(w))) for w in (width - rule.head_dim, width, width + rule.head_dim) if w > 0]
            shown = ", ".join(f"{label(rule.shape(w))} has {n:,} ({n / target - 1:+.0%})" for w, n in near)
            raise ConfigError(where, f"no shape of the rule comes within {rule.tolerance:.0%} of {target:,.0f} "
                              f"{rule.count.replace('_', '-')} parameters ({shown}); move the target, use a smaller "
                              "head_dim, or raise scale.rule.tolerance")
        keys = rule.shape(width)
        same = next((s for s in sizes if s.keys == keys), None)
        if same is not None:
            raise ConfigError(where, f"{target:,.0f} parameters lands on the shape of {same.where} ({same.label}, "
                              f"{got:,}); spread the targets further apart")
        sizes.append(size_type(label(keys), keys, where, target=target, count=got))
    return sizes
