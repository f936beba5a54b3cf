"""The sweep spec: parse and check its shape, then expand it into variants.

Native keys: ``name, description, base, overrides, grid, zip, random, seeds, baseline, metric,
match_params, budget, tune, scale, suite`` (per-variant tuning: ``tune.py``; a size ladder: ``scale.py``;
a probe suite: ``suite.py``).
The wandb sweep format (``method: grid|random``, ``parameters: {key: {values: [...]}}``) is read
into the same ``SweepSpec``, so both run through one code path. Nothing here imports torch: a spec
can be read and expanded with the standard library and YAML alone. Turning variants into configs
(and the checks that need the registries) is ``plan.py``'s job.
"""
from __future__ import annotations

import itertools
import random as _random
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import ConfigError, yaml_error
from .fields import (BUDGETS, GOALS, NAME_RE, Distribution, SweepSpec, Variant, _axis_key, _check_keys,  # noqa: F401
                     _distribution, _finish, _int, _mapping, _name, _values, parse_overrides, resolve_base)
from .scale import check_with_tune, cross, parse_scale
from .suite import check_overrides, cross as cross_suite, parse_suite
from .tune import parse_tune
from .wandb_format import from_wandb

NATIVE_KEYS = ("name", "description", "base", "overrides", "grid", "zip", "random", "seeds", "baseline", "metric",
               "match_params", "budget", "tune", "scale", "suite")
WANDB_KEYS = ("method", "parameters", "run_cap", "command", "program", "description", "project", "entity",
              "early_terminate")
RANDOM_KEYS = ("n", "seed", "parameters")


def parse_spec(data: Mapping, path: Optional[Path] = None) -> SweepSpec:
    """Check the spec's shape (every error names the spec key) and normalize it."""
    data = _mapping(data, "sweep")
    wandb = "method" in data or "parameters" in data
    _check_keys(data, NATIVE_KEYS + (WANDB_KEYS if wandb else ()))
    if wandb:
        return from_wandb(data, path)
    if not isinstance(data.get("description", ""), str):
        raise ConfigError("description", f"expected text (shown at the top of the report), got {data['description']!r}")
    here = path.parent if path else Path.cwd()
    spec = SweepSpec(name=_name(data, path), path=path, base=resolve_base(data.get("base"), here), raw=dict(data))
    spec.overrides = parse_overrides(data.get("overrides"))
    if "grid" in data:
        grid = _mapping(data["grid"], "grid")
        if not grid:
            raise ConfigError("grid", "is empty: give at least one axis, e.g. {model.position: [rope, alibi]}")
        spec.grid = {_axis_key(k, "grid"): _values(v, f"grid.{k}") for k, v in grid.items()}
    if "zip" in data:
        z = _mapping(data["zip"], "zip")
        if not z:
            raise ConfigError("zip", "is empty: give axes of equal length that vary together")
        spec.zip = {_axis_key(k, "zip"): _values(v, f"zip.{k}", unique=False) for k, v in z.items()}
        lengths = {k: len(v) for k, v in spec.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError("zip", "axes vary together, so they need equal lengths; got "
                              + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
        rows = list(zip(*spec.zip.values()))
        for i, row in enumerate(rows):
            if row in rows[:i]:
                raise ConfigError("zip", f"row {i + 1} repeats row {rows.index(row) + 1} (the same variant would "
                                  "run twice)")
    if "random" in data:
        r = _mapping(data["random"], "random")
        _check_keys(r, RANDOM_KEYS, "random.")
        n = r.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError("random.n", f"the number of samples must be a positive integer, got {n!r}")
        params = _mapping(r.get("parameters"), "random.parameters")
        if not params:
            raise ConfigError("random.parameters", "is empty: give the axes to sample")
        spec.random = {_axis_key(k, "random.parameters"): _distribution(v, f"random.parameters.{k}")
                       for k, v in params.items()}
        spec.random_n, spec.random_seed = n, _int(r.get("seed", 0), "random.seed")
    _finish(spec, data)
    if data.get("scale") is not None:
        spec.scale = parse_scale(data["scale"], spec)
    if data.get("suite") is not None:
        spec.suite = parse_suite(data["suite"], spec)
        check_overrides(spec.suite, spec.overrides, "overrides")
    if data.get("tune") is not None:
        spec.tune = parse_tune(data["tune"], spec)
    if spec.scale is not None:
        check_with_tune(spec)
    return spec


def _yaml_loader():
    """PyYAML's safe loader, but reading 1e-3 as a number (YAML 1.2, and OmegaConf, do)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))
    return Loader


def add_overrides(spec: SweepSpec, overrides: Sequence[str]) -> SweepSpec:
    """``arch-zoo sweep SPEC key=value ...``: applied to the base after the spec's own ``overrides``.
    They are part of the spec: sweep.yaml records them and every run's config carries them, so a
    rerun into the same store with other overrides is refused as a changed spec, never mixed."""
    items = parse_overrides(list(overrides), "command line")
    check_overrides(spec.suite, items, "command line")
    for item in items:
        key = item.split("=", 1)[0].strip()
        if key in spec.source_key:
            raise ConfigError(key, f"is varied by the spec's {spec.source_key[key]}, so an override cannot set it; "
                                   "change the spec, or override another key")
        if spec.tune is not None and key in spec.tune.keys:
            raise ConfigError(key, "is tuned per variant by the spec's tune, so an override cannot set it")
        if spec.scale is not None and (key in ("model." + k for k in spec.scale.model_keys)
                                       or (key == "train.max_steps" and spec.scale.budget != "steps")):
            raise ConfigError(key, "is set by the spec's scale (its sizes or budget), so an override cannot set it")
        if key == "seed" and spec.seeds is not None:
            raise ConfigError("seed", "the spec's 'seeds' list sets it; change the spec to run other seeds")
    spec.overrides = list(spec.overrides) + items
    spec.command_line = list(spec.command_line) + items
    if spec.command_line:
        spec.raw = {**spec.raw, "command_line_overrides": list(spec.command_line)}
    return spec


def load_spec(path, overrides: Sequence[str] = ()) -> SweepSpec:
    """The spec at ``path``, with command-line ``overrides`` (``key=value``) added to its own."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError("sweep", f"file not found: {path}")
    try:
        data = yaml.load(path.read_text(), Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError, OSError) as exc:  # ValueError: not UTF-8
        raise ConfigError("sweep", yaml_error(path, exc)) from None
    if data is None:
        raise ConfigError("sweep", f"{path} is empty")
    if not isinstance(data, dict):
        raise ConfigError("sweep", f"{path} must hold a mapping, not {type(data).__name__}")
    return add_overrides(parse_spec(data, path), overrides)


# ----------------------------------------------------------------------------------------- expansion

def expand(spec: SweepSpec) -> List[Variant]:
    """grid (cartesian) x zip (rows) x random (seeded samples), at every size of a ladder (``scale``) and
    every entry of a probe suite (``suite``); a spec with no axes is one variant."""
    grid = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())] or [{}]
    rows = [dict(zip(spec.zip, row)) for row in zip(*spec.zip.values())] or [{}]
    samples = _samples(spec) or [{}]
    variants = []
    for g, z, r in itertools.product(grid, rows, samples):
        settings = {**g, **z, **r}
        variants.append(Variant(settings, {k: spec.source_key[k] for k in settings}))
    variants = cross(variants, spec.scale) if spec.scale is not None else variants
    return cross_suite(variants, spec.suite) if spec.suite is not None else variants


def _samples(spec: SweepSpec) -> List[Dict[str, Any]]:
    if not spec.random:
        return []
    rng = _random.Random(spec.random_seed)
    out: List[Dict[str, Any]] = []
    for _ in range(100 * spec.random_n):  # distinct samples: a repeat would be the same run twice
        sample = {k: d.sample(rng) for k, d in spec.random.items()}
        if sample not in out:
            out.append(sample)
        if len(out) == spec.random_n:
            return out
    raise ConfigError("random.n", f"asks for {spec.random_n} distinct samples, but only {len(out)} were drawn; "
                      "lower n or widen the ranges")
