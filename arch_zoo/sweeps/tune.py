"""Per-variant tuning: ``tune: {key, values | {min, max, n, log}, seeds, select}`` in a sweep spec, or
``tune: {grid: {train.lr: [...], train.weight_decay: [...]}, seeds, select}``: every combination of several
keys' values (MAD's lr x weight-decay grid), one tuned value being a tuple of them.

A tuned sweep runs in two planned stages of one store. Stage 1 trains every variant at every value of
``key`` on the tuning ``seeds``; stage 2 trains each variant at its own best value (by ``select``, a
validation metric, averaged over the tuning seeds) on the spec's ``seeds``, which must differ, and the
report compares stage 2 on held-out metrics. Stage 2's plan is a pure function of stage 1's finished
results (``choose``), so a killed sweep resumes either stage by running the same command again.

``tune.halving`` stops hopeless values early in stage 1 (``halving.py``). This module is pure data
(no torch, no store): the spec's ``tune`` key, the stage-1 spec and the choice. ``plan.py`` turns
them into runs; ``runner.py`` and ``rungs.py`` read stage 1's results from the store.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError, did_you_mean
from ..metrics import PER_BYTE, goal_of, per_byte_instead
from ..run_names import recorded
from .fields import GOALS, SweepSpec, TuneSpec, Variant, _axis_key, _check_keys, _int, _mapping, _values
from .halving import parse_halving
from ..rundir import STAGE_EVAL, STAGE_TUNE  # noqa: F401  (run.json's tune.stage; sweeps name them from here)

TUNE_KEYS = ("key", "values", "grid", "seeds", "select", "halving")
RANGE_KEYS = ("min", "max", "n", "log")


def parse_tune(value: Any, spec: SweepSpec) -> TuneSpec:
    """``tune`` after the spec's axes and seeds are known (the key must not be an axis, the tuning
    seeds must not be evaluation seeds)."""
    t = _mapping(value, "tune")
    _check_keys(t, TUNE_KEYS, "tune.")
    if "grid" in t:
        key, values, grid = _grid(t, spec)
    else:
        key, values, grid = _one_key(t, spec) + ((),)
    if "seeds" not in t:
        raise ConfigError("tune.seeds", "missing: list the tuning seeds (they must differ from the sweep's 'seeds')")
    raw = t["seeds"]
    raw = [raw] if isinstance(raw, int) and not isinstance(raw, bool) else raw
    seeds = tuple(_int(s, f"tune.seeds[{i}]") for i, s in enumerate(_values(raw, "tune.seeds")))
    shared = sorted(set(seeds) & set(spec.adaptive.seeds if spec.adaptive is not None else spec.seeds or []))
    if shared:
        raise ConfigError("tune.seeds", f"seed {shared[0]} is also an evaluation seed (the sweep's 'seeds'); stage 2 "
                          "must be judged on seeds the choice never saw")
    select, goal = _select(t.get("select", "val/loss"))
    halving = parse_halving(t["halving"]) if t.get("halving") is not None else None
    return TuneSpec(key, values, seeds, select, goal, halving, grid)


def _one_key(t: Mapping, spec: SweepSpec) -> Tuple[str, Tuple[Any, ...]]:
    if "key" not in t:
        raise ConfigError("tune.key", "missing: name the config key to tune, e.g. key: train.lr (or give a grid: "
                          "{train.lr: [...], train.weight_decay: [...]})")
    key = _free_key(t["key"], "tune.key", spec)
    if "values" not in t:
        raise ConfigError("tune.values", "missing: give a list, or {min, max, n, log: true}")
    values = _range(t["values"]) if isinstance(t["values"], Mapping) else tuple(_values(t["values"], "tune.values"))
    return key, values


def _free_key(raw: Any, where: str, spec: SweepSpec) -> str:
    key = _axis_key(raw, where)
    if key in spec.source_key:
        raise ConfigError(where, f"{key} is also varied by {spec.source_key[key]}; a key is either compared "
                          "(an axis) or tuned per variant, not both")
    return key


def _grid(t: Mapping, spec: SweepSpec) -> Tuple[str, Tuple[Any, ...], Tuple[Tuple[str, Tuple[Any, ...]], ...]]:
    """``tune.grid``: every combination of the keys' values, the first key's slowest; each value a tuple."""
    for k in ("key", "values"):
        if k in t:
            raise ConfigError(f"tune.{k}", "give either key and values (one key) or grid (several), not both")
    g = _mapping(t["grid"], "tune.grid")
    if len(g) < 2:
        raise ConfigError("tune.grid", "a grid tunes two or more keys together; for one, give key and values")
    grid = []
    for raw, vals in g.items():
        key = _free_key(raw, f"tune.grid.{raw}", spec)
        if isinstance(vals, Mapping):
            raise ConfigError(f"tune.grid.{raw}", "expected a list of values (a grid's keys are lists)")
        grid.append((key, tuple(_values(vals, f"tune.grid.{raw}"))))
    return " x ".join(k for k, _ in grid), tuple(itertools.product(*(v for _, v in grid))), tuple(grid)


def tuned_value(tune: TuneSpec, settings: Mapping[str, Any]) -> Any:
    """A run's tuned value: its setting of the key, or the tuple of a grid's keys."""
    return tuple(settings[k] for k in tune.keys) if tune.grid else settings[tune.key]


def assignment(tune: TuneSpec, value: Any) -> Dict[str, Any]:
    """The settings a tuned value stands for."""
    return dict(zip(tune.keys, value)) if tune.grid else {tune.key: value}


def shown(tune: TuneSpec, value: Any) -> str:
    """train.lr=0.001 (one key) or train.lr=0.001, train.weight_decay=0.1 (a grid)."""
    from ..run_names import plain

    return ", ".join(f"{k}={plain(v)}" for k, v in assignment(tune, value).items())


def _select(value: Any) -> Tuple[str, str]:
    m = {"name": value} if isinstance(value, str) else _mapping(value, "tune.select")
    _check_keys(m, ("name", "goal"), "tune.select.")
    name = m.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("tune.select", f"expected a validation metric such as val/loss, got {name!r}")
    split = name.split("/", 1)[0]
    if "/" not in name or not (split == "val" or split.startswith("val@")):
        raise ConfigError("tune.select", f"{name} is not a validation metric; tune on val/... so that stage 2's "
                          "test metrics stay held out")
    goal = m.get("goal", goal_of(name))
    if goal not in GOALS:
        raise ConfigError("tune.select.goal", f"expected min or max for {name}, got {goal!r}")
    return name, GOALS[goal]


def _range(value: Mapping) -> Tuple[Any, ...]:
    """{min, max, n, log}: n values from min to max, evenly spaced (on a log scale with log: true);
    integers when min and max are integers and the scale is linear."""
    r = dict(value)
    _check_keys(r, RANGE_KEYS, "tune.values.")
    for k in ("min", "max", "n"):
        if k not in r:
            raise ConfigError(f"tune.values.{k}", "missing: a range needs min, max and n (log: true for a log scale)")
    lo, hi, n, log = r["min"], r["max"], r["n"], r.get("log", False)
    for k, v in (("min", lo), ("max", hi)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"tune.values.{k}", f"expected a number, got {v!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("tune.values.n", f"the range is empty: n must be a positive integer, got {n!r}")
    if lo > hi:
        raise ConfigError("tune.values", f"the range is empty: min ({lo}) is above max ({hi})")
    if not isinstance(log, bool):
        raise ConfigError("tune.values.log", f"expected true or false, got {log!r}")
    if log and lo <= 0:
        raise ConfigError("tune.values.min", f"a log range needs min > 0, got {lo}")
    if n == 1 or lo == hi:
        if n > 1:
            raise ConfigError("tune.values", f"min and max are both {lo}, so {n} values would repeat one")
        return (lo,)
    if log:
        xs = [math.exp(math.log(lo) + i * (math.log(hi) - math.log(lo)) / (n - 1)) for i in range(n)]
    else:
        xs = [lo + i * (hi - lo) / (n - 1) for i in range(n)]
    if isinstance(lo, int) and isinstance(hi, int) and not log:
        out = tuple(dict.fromkeys(int(round(x)) for x in xs))
    else:
        out = tuple(dict.fromkeys(float(f"{x:.4g}") for x in xs))  # readable in names, exactly reproducible
    if len(out) < n:
        raise ConfigError("tune.values", f"{n} values between {lo} and {hi} repeat after rounding; lower n")
    return out


# ----------------------------------------------------------------------------------------- the stages

def stage_one_spec(spec: SweepSpec) -> SweepSpec:
    """The spec stage 1 runs: the tuned key as one more grid axis, on the tuning seeds (a ladder with
    ``scale.lr: transfer``: on its smallest rung only)."""
    t = spec.tune
    scale = spec.scale
    if scale is not None and scale.lr == "transfer":
        from .scale import smallest_only

        scale = smallest_only(scale)
    axes = {k: list(v) for k, v in t.grid} if t.grid else {t.key: list(t.values)}
    return dataclasses.replace(spec, grid={**spec.grid, **axes}, seeds=list(t.seeds),
                               source_key={**spec.source_key, **{k: "tune" for k in axes}}, scale=scale)


def stage_two_spec(spec: SweepSpec) -> SweepSpec:
    """Stage 2's spec: stage 1's axes (so names and run ids read alike), on the evaluation seeds."""
    return dataclasses.replace(stage_one_spec(spec), seeds=spec.seeds, scale=spec.scale)


def base_settings(settings: Mapping[str, Any], keys) -> Dict[str, Any]:
    """The settings without the tuned key(s) (``keys``: one key, or a tuple of a grid's)."""
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    return {k: v for k, v in settings.items() if k not in keys}


def stage_two_variants(variants: Sequence[Variant], tune: TuneSpec, chosen: Mapping[Any, Any],
                       lookup: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None) -> List[Variant]:
    """Each variant (by its settings without the tuned keys) at its chosen value; variants with no choice
    (every value failed) are left out. ``lookup``: the settings whose choice a variant takes (a ladder
    transferring its smallest rung's value), if not its own."""
    out = []
    for v in variants:
        label = variant_key(lookup(v.settings) if lookup else v.settings)
        if label in chosen:
            picked = assignment(tune, chosen[label])
            out.append(Variant({**v.settings, **picked}, {**v.sources, **{k: "tune" for k in picked}}))
    return out


def variant_key(settings: Mapping[str, Any]) -> str:
    """A variant's identity across both stages: its settings as run.json records them (a spec expands a
    component axis to mappings, a run records their text), the tuned key left out by the caller."""
    return repr(sorted(((k, recorded(v)) for k, v in settings.items()), key=lambda kv: kv[0]))


@dataclass
class Choice:
    value: Any  # None: no value completed on every tuning seed
    scores: Dict[Any, Optional[float]]  # value -> mean over tuning seeds; None: some seed did not complete
    edge: Optional[str] = None  # "smallest" | "largest": the best value is at that end of the range
    by: Optional[str] = None  # the metric chosen by when not tune.select (bits per byte: see per_byte_rows)
    why: Optional[str] = None  # the one line that says why


def choose(tune: TuneSpec, results: Sequence[Tuple[Dict[str, Any], int, str, Optional[float]]]
           ) -> Dict[str, Choice]:
    """Stage 1's (settings, seed, status, select metric) rows -> each variant's choice, keyed by
    ``_label`` of its settings without the tuned key. A value counts only if it completed on every
    tuning seed (a diverged or failed seed rules it out: it is the instability the range was meant to
    reach); ties go to the value tried first."""
    by_variant: Dict[str, Dict[Any, List[Optional[float]]]] = {}
    for settings, _seed, status, value in results:
        label = variant_key(base_settings(settings, tune.keys))
        ok = status == "completed" and isinstance(value, (int, float)) and math.isfinite(value)
        by_variant.setdefault(label, {}).setdefault(tuned_value(tune, settings), []).append(value if ok else None)
    out = {}
    for label, per_value in by_variant.items():
        scores = {v: (sum(xs) / len(xs) if len(xs) == len(tune.seeds) and None not in xs else None)
                  for v, xs in ((v, per_value.get(v, [])) for v in tune.values)}
        ok = [(s, i, v) for i, (v, s) in enumerate(scores.items()) if s is not None]
        if not ok:
            out[label] = Choice(None, scores)
            continue
        sign = 1 if tune.goal == "min" else -1
        _, _, best = min(ok, key=lambda t: (sign * t[0], t[1]))
        out[label] = Choice(best, scores, edge_of(tune.values, best))
    return out


def per_byte_rows(tune: TuneSpec, rows: List[Tuple[Dict[str, Any], int, str, Optional[float]]],
                  measured: Sequence[Tuple[Optional[float], Optional[float]]]
                  ) -> Tuple[list, Dict[str, Tuple[str, str]]]:
    """Stage 1's rows with, for each variant whose tuned values tokenize the text differently (their
    runs' bytes per token on ``select``'s split differ), ``select`` replaced by that split's bits per
    byte: a per-token loss does not compare them (metrics.per_byte_instead). ``measured``: per row,
    (its bits per byte, its bytes per token). Returns the rows and {variant key: (metric, why)}."""
    per_byte = f"{tune.select.rsplit('/', 1)[0]}/{PER_BYTE}"
    bytes_per_token: Dict[str, Dict[str, float]] = {}
    logged: Dict[str, List[str]] = {}
    for (settings, *_), (bpb, bpt) in zip(rows, measured):
        label = variant_key(base_settings(settings, tune.keys))
        if bpt is not None:
            bytes_per_token.setdefault(label, {}).setdefault(shown(tune, tuned_value(tune, settings)), bpt)
        if bpb is not None:
            logged[label] = [per_byte]
    switched = {}
    for label, per_value in bytes_per_token.items():
        metric, why = per_byte_instead(tune.select, per_value, logged.get(label, []))
        if why:
            switched[label] = (metric, why)
    out = [(*row[:3], bpb) if switched.get(variant_key(base_settings(row[0], tune.keys)), ("",))[0] == per_byte
           else row for row, (bpb, _) in zip(rows, measured)]
    return out, switched


def edge_of(values: Sequence[Any], best: Any) -> Optional[str]:
    """'largest' / 'smallest' when ``best`` is an end of the numeric values tried."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(nums) < 2 or len(nums) != len(values):
        return None
    return "largest" if best == max(nums) else "smallest" if best == min(nums) else None


def edge_warning(key: str, variant: str, edge: Optional[str], value: Any) -> Optional[str]:
    if edge is None:
        return None
    return (f"warning: the best {key} for {variant} is the {edge} tried ({value}); the optimum may lie beyond the "
            "range: widen it")


def known_metric(select: str, produced: Sequence[str]) -> None:
    """``tune.select`` against the validation metrics the task produces."""
    if select not in produced:
        raise ConfigError("tune.select", f"the task produces no {select}{did_you_mean(select, list(produced))}; "
                          f"its validation metrics: {', '.join(produced)}")
