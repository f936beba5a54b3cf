"""The wandb sweep format, both ways.

Reading: ``method: grid|random`` and ``parameters: {key: {values: [...]} | {value: x} |
{min, max, distribution}}``; a ``seed`` parameter gives the seeds; ``run_cap`` is the number of
random samples per seed. ``base`` and ``overrides`` come from the spec's own keys, or else from the
``command`` that ``to_wandb`` writes, so an exported file reads back as the same sweep.

Writing (``arch-zoo sweep SPEC --export-wandb``): a config whose ``command`` runs ``arch-zoo train``
with ``${args_no_hyphens}`` (wandb passes ``key=value``, the form ``train`` takes overrides in), each
run in its own directory of the sweep's store, ``<store>/runs/$WANDB_RUN_ID`` (the layout
``arch-zoo sweep`` uses, so ``arch-zoo report <store>`` reads them). The base config and the store
are absolute paths: an agent may run from any directory (on another machine, the same paths must
exist, e.g. a shared filesystem).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ..errors import ConfigError
from .fields import PER_STEP_KEYS, Distribution, SweepSpec, _check_keys, _distribution, _finish, _mapping, _name, \
    _values, parse_overrides, resolve_base
from ..run_names import yaml_value

DISTRIBUTIONS = ("categorical", "uniform", "int_uniform", "log_uniform_values")
# `sh -c` gives the agent's command a per-run directory: wandb fills its own macros only once per agent.
RUN_SCRIPT = 'exec arch-zoo train "$@" --quiet --out {runs}/"$WANDB_RUN_ID"'
GOAL_NAMES = {"min": "minimize", "max": "maximize"}


def from_wandb(data: Mapping, path: Optional[Path]) -> SweepSpec:
    for k in ("grid", "zip", "random"):
        if k in data:
            raise ConfigError(k, "a spec in the wandb format (method/parameters) varies keys under 'parameters'; "
                              f"do not mix it with '{k}'")
    method = data.get("method")
    if method not in ("grid", "random"):
        raise ConfigError("method", f"expected grid or random (the wandb methods a sweep can replay), got {method!r}")
    here = path.parent if path else Path.cwd()
    base, overrides = data.get("base"), parse_overrides(data.get("overrides"))
    if base is None and data.get("command") is not None:
        base, overrides = _from_command(data["command"])
        here = Path.cwd()  # the command's paths are the agent's, relative to where it runs
    spec = SweepSpec(name=_name(data, path), path=path, base=resolve_base(base, here), raw=dict(data))
    spec.overrides = overrides
    params = _mapping(data.get("parameters"), "parameters")
    if not params:
        raise ConfigError("parameters", "is empty: give at least one parameter with 'values'")
    seeds = None
    for key, p in params.items():
        where = f"parameters.{key}"
        p = _mapping(p, where)
        _check_keys(p, ("values", "value", "distribution", "min", "max"), f"{where}.")
        if p.get("distribution") not in (None,) + DISTRIBUTIONS:
            raise ConfigError(f"{where}.distribution", f"expected one of {', '.join(DISTRIBUTIONS)}, "
                              f"got {p['distribution']!r}")
        if "value" in p:
            spec.overrides.append(f"{key}={yaml_value(p['value'])}")
        elif key == "seed":
            seeds = _values(p.get("values"), f"{where}.values")
        elif method == "grid":
            if "values" not in p:
                raise ConfigError(where, "a grid parameter needs 'values' (or a constant 'value')")
            spec.grid[key] = _values(p["values"], f"{where}.values")
        else:
            spec.random[key] = _distribution(p, where)
    if method == "random":
        cap = data.get("run_cap")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ConfigError("run_cap", "a random wandb sweep needs run_cap (the number of runs) to be replayed here")
        spec.random_n = max(1, cap // len(seeds or [0]))
        if not spec.random:
            raise ConfigError("parameters", "a random sweep needs at least one parameter to sample")
    metric = data.get("metric")
    shared = {k: data[k] for k in ("baseline", "match_params", "budget") if k in data}
    if seeds is not None:
        shared["seeds"] = seeds
    if metric is not None:
        shared["metric"] = metric
    _finish(spec, shared)
    return spec


def _from_command(command: Any) -> tuple:
    """base and overrides back out of a command that ``to_wandb`` wrote."""
    if not isinstance(command, list) or "${args_no_hyphens}" not in command:
        raise ConfigError("command", "give 'base' (the experiment config), or a command written by "
                          "'arch-zoo sweep --export-wandb'")
    args = [str(a) for a in command[:command.index("${args_no_hyphens}")]]
    if "train" in args:  # a plain [arch-zoo, train, BASE, overrides...] command
        args = args[args.index("train") + 1:]
    elif "-c" in args:  # [${env}, sh, -c, SCRIPT, arch-zoo, BASE, overrides...]
        args = args[args.index("-c") + 3:]
    if not args or "=" in args[0]:
        raise ConfigError("command", "cannot find the experiment config in the command")
    return args[0], args[1:]


def to_wandb(spec: SweepSpec, store: Path, entity: Optional[str] = None) -> Dict[str, Any]:
    """The spec as a wandb sweep config whose runs land in ``store``/runs/. Zip axes and parameter
    matching have no wandb equivalent (its parameters vary independently), so such specs are
    refused with the key to blame."""
    if spec.zip:
        raise ConfigError("zip", "wandb sweeps vary every parameter independently, so zip axes cannot be "
                          "exported; write them as separate grid values or run the sweep here")
    if spec.match_params is not None:
        raise ConfigError("match_params", "wandb cannot adjust model.d_ff per variant; run the sweep here, or "
                          "export a spec without match_params")
    if spec.tune is not None:
        raise ConfigError("tune", "a wandb sweep has no second stage that trains each variant at its own best value; "
                          "run the tuned sweep here, or export a spec without tune")
    if spec.budget in ("flops", "bytes"):
        raise ConfigError("budget", "wandb cannot adjust train.max_steps per variant; run the sweep here, or "
                          "export a spec that matches tokens")
    per_step = [k for k in spec.axes if k in PER_STEP_KEYS]
    if spec.budget == "tokens" and per_step:  # each value would need its own steps to keep tokens matched
        raise ConfigError("budget", f"{per_step[0]} changes the tokens a step holds, and wandb cannot adjust "
                          "train.max_steps per variant to keep tokens matched; run the sweep here, or export it "
                          "with budget: steps (tokens not matched)")
    if spec.scale is not None:
        raise ConfigError("scale", "a wandb sweep has no size ladder (a set of model keys per size, each with its own "
                          "budget); run the ladder here, or export a spec without scale")
    params: Dict[str, Any] = {}
    for k, values in spec.grid.items():
        params[k] = {"values": list(values)}
    for k, d in spec.random.items():
        params[k] = _wandb_distribution(d)
    seeds = spec.seeds
    if seeds is not None:
        params["seed"] = {"values": list(seeds)}
    overrides = list(spec.overrides) + ["logging.wandb.enabled=true", f"logging.wandb.group={spec.name}"]
    out: Dict[str, Any] = {
        "name": spec.name,
        "method": "random" if spec.random else "grid",
        "metric": {"name": spec.metric["name"], "goal": GOAL_NAMES[spec.metric["goal"]]},
        "parameters": params,
        "command": ["${env}", "sh", "-c", RUN_SCRIPT.format(runs=shlex.quote(str(Path(store).resolve() / "runs"))),
                    "arch-zoo", spec.base, *overrides, "${args_no_hyphens}"],
    }
    if spec.random:
        out["run_cap"] = spec.random_n * len(seeds or [0])
    if entity:
        out["entity"] = entity
    return out


def _wandb_distribution(d: Distribution) -> Dict[str, Any]:
    if d.values is not None:
        return {"distribution": "categorical", "values": list(d.values)}
    if d.integer:
        return {"distribution": "int_uniform", "min": int(d.low), "max": int(d.high)}
    name = "log_uniform_values" if d.scale == "log" else "uniform"
    return {"distribution": name, "min": d.low, "max": d.high}


def export_wandb(spec: SweepSpec, path: Path) -> Path:
    """Writes the wandb config to ``path``, in the sweep's store (``<out>/<name>/``), where its runs go."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(to_wandb(spec, path.parent), sort_keys=False))
    tmp.replace(path)
    return path

