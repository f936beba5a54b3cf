"""The spec's shapes (``SweepSpec``, ``Variant``, ``Distribution``, ``TuneSpec``, ``Halving``) and the
checks of the keys both spec formats share (seeds, baseline, metric, match_params, budget):
``spec.py`` reads the native format, ``wandb_format.py`` the wandb one, and both build on this
module, which imports neither. Nothing here imports torch."""
from __future__ import annotations

import math
import random as _random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, did_you_mean
from ..metrics import SPELLINGS as GOALS, check_claim, goal_of
from ..run_names import yaml_value
from .seed_spec import parse_adaptive

# budget.match: what every variant gets the same amount of -> how the plan gets there
BUDGETS = {"tokens": "train.max_steps set per variant so its training tokens equal the baseline's, within one batch",
           "bytes": "train.max_steps set per variant from its bytes per token so it reads the baseline's bytes of "
                    "text, within one batch",
           "params": "model.d_ff adjusted per variant",
           "flops": "train.max_steps adjusted per variant, to the nearest step",
           "steps": "every variant keeps its train.max_steps; training tokens are not matched"}
SETS_STEPS = ("tokens", "bytes", "flops")  # budgets that set each variant's train.max_steps
# axes that change the tokens an optimizer step holds (the plan measures them; wandb cannot follow)
PER_STEP_KEYS = ("train.batch_size", "train.accumulate_grad_batches", "train.devices", "task.seq_len", "task.min_len",
                 "task.max_len")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Distribution:
    """One random axis: a choice from ``values``, or a draw from [min, max] on a linear or log scale."""

    values: Optional[Tuple[Any, ...]] = None
    low: Optional[float] = None
    high: Optional[float] = None
    scale: str = "linear"  # linear | log
    integer: bool = False

    def sample(self, rng: _random.Random) -> Any:
        if self.values is not None:
            return self.values[rng.randrange(len(self.values))]
        if self.scale == "log":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        if self.integer:
            return int(min(max(round(x), self.low), self.high))
        return float(f"{x:.4g}")  # readable in names and YAML, and exactly reproducible


@dataclass(frozen=True)
class Variant:
    settings: Dict[str, Any]  # dotted key -> value, in axis order
    sources: Dict[str, str]  # dotted key -> the spec key that varies it ("grid", "zip", ...)


@dataclass(frozen=True)
class Halving:
    """``tune.halving``: successive halving of stage 1 (``halving.py``)."""

    eta: int  # keep the best 1/eta of a variant's values at each rung
    min_steps: int  # the first rung


@dataclass(frozen=True)
class TuneSpec:
    """The spec's ``tune`` key (``tune.py`` parses it and plans the two stages)."""

    key: str  # a dotted config key, e.g. train.lr; a grid's keys joined by " x " (its name in tables)
    values: Tuple[Any, ...]  # in the order tried (a range: ascending); a grid's: tuples, one value per key
    seeds: Tuple[int, ...]
    select: str = "val/loss"
    goal: str = "min"
    halving: Optional[Halving] = None  # None: every stage-1 run trains its full budget
    grid: Tuple[Tuple[str, Tuple[Any, ...]], ...] = ()  # ``tune.grid``: (key, its values) per key, crossed

    @property
    def keys(self) -> Tuple[str, ...]:
        """The config keys tuned: one, or a grid's."""
        return tuple(k for k, _ in self.grid) or (self.key,)


@dataclass
class SweepSpec:
    name: str
    path: Optional[Path]
    base: str  # resolved path (or preset:NAME)
    raw: Dict[str, Any]  # the spec as given
    overrides: List[str] = field(default_factory=list)  # dotlist, applied to every run
    grid: Dict[str, List[Any]] = field(default_factory=dict)
    zip: Dict[str, List[Any]] = field(default_factory=dict)
    random: Dict[str, Distribution] = field(default_factory=dict)
    random_n: int = 0
    random_seed: int = 0
    seeds: Optional[List[int]] = None  # None: the base config's seed; adaptive: the first round's
    adaptive: Optional[Any] = None  # ``seeds: {start, max, ...}`` (``seed_spec.AdaptiveSeeds``)
    baseline: Optional[Dict[str, Any]] = None
    metric: Dict[str, str] = field(default_factory=lambda: {"name": "val/loss", "goal": "min"})
    match_params: Optional[float] = None  # relative tolerance, when parameter matching is on
    budget: str = "tokens"  # tokens | bytes | params | flops | steps (params <=> match_params is set)
    source_key: Dict[str, str] = field(default_factory=dict)  # axis key -> "grid" | "zip" | "random.parameters"
    command_line: List[str] = field(default_factory=list)  # the overrides given after SPEC (also in ``overrides``)
    tune: Optional[TuneSpec] = None  # per-variant tuning (stage 1) before the evaluation on ``seeds`` (stage 2)
    scale: Optional[Any] = None  # a size ladder (``scale.ScaleSpec``): its sizes are one more axis
    suite: Optional[Any] = None  # a probe suite (``suite.SuiteSpec``): its entries are one more axis

    @property
    def axes(self) -> List[str]:
        return list(self.grid) + list(self.zip) + list(self.random) + (self.scale.axes if self.scale else []) \
            + (self.suite.axes if self.suite else [])


# ------------------------------------------------------------------------------------------- parsing

def _mapping(value: Any, key: str) -> Dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a mapping, got {value!r}")
    return dict(value)


def _values(value: Any, key: str, unique: bool = True) -> List[Any]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"expected a list of values, got {value!r}")
    if not value:
        raise ConfigError(key, "has no values")
    for i, v in enumerate(value):
        if unique and v in value[:i]:
            raise ConfigError(key, f"lists {v!r} twice (the same variant would run twice)")
    return list(value)


def _axis_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key or key.startswith(".") or key.endswith("."):
        raise ConfigError(f"{where}.{key}", "an axis is a dotted config key, e.g. model.position")
    if key == "seed":
        raise ConfigError(f"{where}.seed", "seeds are not an axis; list them under the sweep key 'seeds'")
    return key


def parse_overrides(value: Any, key: str = "overrides") -> List[str]:
    """A list of ``key=value`` strings or a mapping ``{dotted.key: value}`` -> a dotlist."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [f"{_axis_key(k, key)}={yaml_value(v)}" for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if not isinstance(item, str) or "=" not in item or item.startswith("="):
                raise ConfigError(f"{key}[{i}]", f"expected key=value, got {item!r}")
        return list(value)
    raise ConfigError(key, f"expected a list of key=value or a mapping, got {value!r}")


def _distribution(value: Any, key: str) -> Distribution:
    d = _mapping(value, key)
    if "values" in d:
        extra = set(d) - {"values", "distribution"}
        if extra:
            raise ConfigError(f"{key}.{sorted(extra)[0]}", "a choice from 'values' takes nothing else")
        return Distribution(values=tuple(_values(d["values"], f"{key}.values")))
    unknown = set(d) - {"min", "max", "scale", "distribution"}
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(f"{key}.{name}", f"unknown key{did_you_mean(name, ['values', 'min', 'max', 'scale'])};"
                          " give 'values', or 'min' and 'max' with 'scale: linear|log'")
    if "min" not in d or "max" not in d:
        raise ConfigError(key, "give 'values', or both 'min' and 'max'")
    lo, hi = d["min"], d["max"]
    for k, v in (("min", lo), ("max", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{key}.{k}", f"expected a number, got {v!r}")
    if lo > hi:
        raise ConfigError(key, f"min ({lo}) is above max ({hi})")
    dist = d.get("distribution")
    scale = d.get("scale", "log" if dist in ("log_uniform_values",) else "linear")
    if scale not in ("linear", "log"):
        raise ConfigError(f"{key}.scale", f"expected linear or log, got {scale!r}")
    if scale == "log" and lo <= 0:
        raise ConfigError(f"{key}.min", "a log scale needs min > 0")
    integer = dist == "int_uniform" or (dist is None and isinstance(lo, int) and isinstance(hi, int))
    return Distribution(low=lo, high=hi, scale=scale, integer=integer)


def _check_keys(data: Mapping, allowed: Sequence[str], where: str = "") -> None:
    for k in data:
        if k not in allowed:
            raise ConfigError(f"{where}{k}", f"unknown sweep key{did_you_mean(str(k), allowed)}; "
                              f"allowed: {', '.join(allowed)}")


def _finish(spec: SweepSpec, data: Mapping) -> None:
    """The keys both formats share: sources, seeds, baseline, metric, match_params."""
    for where, axes in (("grid", spec.grid), ("zip", spec.zip), ("random.parameters", spec.random)):
        for k in axes:
            if k in spec.source_key:
                raise ConfigError(f"{where}.{k}", f"is also varied by {spec.source_key[k]}; vary a key in one place")
            spec.source_key[k] = where
    if isinstance(data.get("seeds"), Mapping):
        spec.adaptive = parse_adaptive(data["seeds"])
        spec.seeds = spec.adaptive.seeds[:spec.adaptive.start]
    elif "seeds" in data:
        seeds = data["seeds"]
        seeds = [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds
        spec.seeds = [_int(s, f"seeds[{i}]") for i, s in enumerate(_values(seeds, "seeds"))]
    if data.get("baseline") is not None:
        spec.baseline = _mapping(data["baseline"], "baseline")
        for k in spec.baseline:
            if k not in spec.source_key:
                raise ConfigError(f"baseline.{k}", f"is not a varied key{did_you_mean(str(k), spec.axes)}; "
                                  f"varied keys: {', '.join(spec.axes) or 'none'}")
    if data.get("metric") is not None:
        m = _mapping(data["metric"], "metric")
        _check_keys(m, ("name", "goal", "min_effect", "claim"), "metric.")
        if not isinstance(m.get("name"), str) or not m["name"]:
            raise ConfigError("metric.name", f"expected a metric name such as val/loss, got {m.get('name')!r}")
        goal = m.get("goal", goal_of(m["name"]))
        if goal is None:
            raise ConfigError("metric.goal", f"missing: {m['name']} is not a built-in metric, so say whether "
                              "lower or higher is better (goal: min or max)")
        if goal not in GOALS:
            raise ConfigError("metric.goal", f"expected min or max, got {goal!r}")
        spec.metric = {"name": m["name"], "goal": GOALS[goal]}
        effect = m.get("min_effect")
        if effect is not None:
            if isinstance(effect, bool) or not isinstance(effect, (int, float)) or not 0 < effect < math.inf:
                raise ConfigError("metric.min_effect", f"expected a positive difference in {m['name']}'s units "
                                  f"(the smallest that counts), got {effect!r}")
            spec.metric["min_effect"] = float(effect)
        if m.get("claim") is not None:
            spec.metric["claim"] = check_claim(m["claim"], "metric.claim")
    match = data.get("match_params")
    if match is True:
        spec.match_params = 0.01
    elif isinstance(match, Mapping):
        _check_keys(match, ("tolerance",), "match_params.")
        tol = match.get("tolerance", 0.01)
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
            raise ConfigError("match_params.tolerance", f"expected a fraction in (0, 1), got {tol!r}")
        spec.match_params = float(tol)
    elif match not in (None, False):
        raise ConfigError("match_params", f"expected true, false or {{tolerance: 0.01}}, got {match!r}")
    _budget(spec, data.get("budget"))
    if spec.match_params is not None and "model.d_ff" in spec.source_key:
        raise ConfigError("match_params", f"model.d_ff is varied by {spec.source_key['model.d_ff']}, so it cannot "
                          "also be adjusted to match parameter counts")


def _budget(spec: SweepSpec, value: Any) -> None:
    """``budget: {match: tokens | params | flops}`` (or just ``budget: flops``). ``params`` is
    ``match_params`` under its general name; its ``tolerance`` may sit in either place."""
    if value is None:
        if spec.match_params is not None:
            spec.budget = "params"
        elif "train.max_steps" in spec.source_key:  # steps varied on purpose: the budget is steps, said so
            spec.budget = "steps"
        return
    b = {"match": value} if isinstance(value, str) else _mapping(value, "budget")
    _check_keys(b, ("match", "tolerance"), "budget.")
    match = b.get("match")
    if match not in BUDGETS:
        raise ConfigError("budget.match", f"expected one of {', '.join(BUDGETS)}, got {match!r}"
                          f"{did_you_mean(str(match), BUDGETS)}")
    if "tolerance" in b and match != "params":
        raise ConfigError("budget.tolerance", f"only budget.match: params takes a tolerance, not {match}")
    if spec.match_params is not None and match != "params":
        raise ConfigError("budget", f"match: {match} contradicts match_params: true (that is match: params); "
                          "keep one of them")
    spec.budget = match
    if match == "params":
        tol = b.get("tolerance", spec.match_params if spec.match_params is not None else 0.01)
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
            raise ConfigError("budget.tolerance", f"expected a fraction in (0, 1), got {tol!r}")
        spec.match_params = float(tol)
    if match in SETS_STEPS and "train.max_steps" in spec.source_key:
        raise ConfigError("budget", f"match: {match} sets each variant's train.max_steps, so it cannot also be varied "
                          f"by {spec.source_key['train.max_steps']}; drop that axis or match steps")


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"expected an integer, got {value!r}")
    return value


def _name(data: Mapping, path: Optional[Path]) -> str:
    name = data.get("name", path.stem if path else None)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError("name", f"a sweep name is a directory name (letters, digits, . _ -), got {name!r}")
    return name


def resolve_base(base: Any, here: Path) -> str:
    if not isinstance(base, str) or not base:
        raise ConfigError("base", "name the experiment config the sweep varies (a YAML path, relative to the "
                          "sweep file)")
    if base.startswith("preset:"):
        return base
    path = Path(base).expanduser()
    path = path if path.is_absolute() else here / path
    if not path.is_file():
        raise ConfigError("base", f"file not found: {path}")
    return str(path.resolve())
