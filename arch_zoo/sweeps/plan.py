"""From a spec to the list of runs: one validated config per (variant, seed), with its run id,
parameter count, training budget and, under ``budget: params`` (``match_params``), the adjusted
``model.d_ff``, or under ``budget: tokens | bytes | flops``, the adjusted ``train.max_steps`` (tokens and
bytes: where an axis changes what a step holds, or what a token covers). A tuned spec
(``tune``) plans in two stages: ``make_plan`` gives stage 1, ``second_plan`` stage 2 from its choices.

Everything a user can get wrong surfaces here, before any run starts, as a ConfigError naming
the spec key (``grid.model.position: unknown position scheme 'ropee' ...``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import ExperimentConfig
from ..experiment import load
from ..errors import ConfigError
from .halving import check_budgets
from .matching import Reference, matched_config, reference, run_budget
from .sizer import Sizer
from .decay_tokens import check_decay_tokens
from .scale import FLOPS_KEY, SIZE_KEY, size_overrides, transfer_lookup, with_sizes
from .scale_plan import check_increasing, check_transfer, ladder_steps, references, scale_record, size_blame, \
    warmup_override
from .spec import SweepSpec, Variant, expand
from .suite import SUITE_KEY, arch_settings, suite_blame, suite_overrides, suite_record
from .tune import STAGE_EVAL, STAGE_TUNE, Choice, base_settings, known_metric, stage_one_spec, stage_two_spec, \
    stage_two_variants, tuned_value
from ..run_names import plain, recorded, run_id, short_names, tags, variant_name, yaml_value


@dataclass
class RunPlan:
    run_id: str
    variant: str
    seed: int
    settings: Dict[str, Any]
    is_baseline: bool
    params: int
    matched: Dict[str, int]
    config: ExperimentConfig
    budget: Dict[str, Any] = field(default_factory=dict)  # match, steps, tokens, params, flops
    tune: Dict[str, Any] = field(default_factory=dict)  # tuned sweeps: stage, key, value, variant (without key)
    scale: Dict[str, Any] = field(default_factory=dict)  # ladders: rung, size, its keys, parameters, budget
    suite: Dict[str, Any] = field(default_factory=dict)  # probe suites: the entry, its task and options

    def record(self, sweep: str) -> Dict[str, Any]:
        """run.json."""
        out = {"sweep": sweep, "run_id": self.run_id, "variant": self.variant, "seed": self.seed,
               "settings": dict(self.settings), "is_baseline": self.is_baseline, "params": self.params,
               "matched": dict(self.matched), "budget": dict(self.budget)}
        if self.tune:
            out["tune"] = dict(self.tune)
        if self.scale:
            out["scale"] = dict(self.scale)
        if self.suite:
            out["suite"] = dict(self.suite)
        return out


@dataclass
class Plan:
    spec: SweepSpec
    runs: List[RunPlan]
    axes: List[str]
    names: Dict[str, str] = field(default_factory=dict)  # axis key -> short name


class _Configs:
    """Loads one variant's config and turns loader errors into errors on the spec key at fault."""

    def __init__(self, spec: SweepSpec, names: Dict[str, str]):
        self.spec, self.names = spec, names
        try:
            self.base = load(spec.base, spec.overrides)
        except ConfigError as exc:
            raise self.base_error(exc) from None

    def base_error(self, exc: ConfigError) -> ConfigError:
        """An error in the base file or in ``overrides`` (the spec's, or the command line's)."""
        for o in reversed(self.spec.overrides):  # the last one to set a key is the one at fault
            key = o.split("=", 1)[0]
            if _related(exc.key, key):
                return ConfigError(key if o in self.spec.command_line else f"overrides.{key}", exc.message)
        return ConfigError(f"base ({self.spec.base})" + (f": {exc.key}" if exc.key else ""), exc.message)

    def overrides(self, variant: Variant, d_ff: Optional[int] = None, steps: Optional[int] = None) -> List[str]:
        out = list(self.spec.overrides) + size_overrides(self.spec.scale, variant.settings) \
            + suite_overrides(self.spec.suite, variant.settings) \
            + [f"{k}={yaml_value(v)}" for k, v in variant.settings.items() if k not in (SIZE_KEY, FLOPS_KEY, SUITE_KEY)]
        w = self.base.logging.wandb
        if w.enabled:  # dashboards group a sweep's runs and tell its variants apart
            name = variant_name(variant.settings, self.names)
            out += [f"logging.wandb.group={yaml_value(self.spec.name)}",
                    f"logging.wandb.job_type={yaml_value(name[:64])}",
                    f"logging.wandb.tags={yaml_value(list(w.tags) + tags(variant.settings, self.names))}"]
        if d_ff is not None:
            out.append(f"model.d_ff={d_ff}")
        if steps is not None:
            out.append(f"train.max_steps={steps}")
            out += warmup_override(self.spec.scale, steps)
        return out

    def load(self, variant: Variant, d_ff: Optional[int] = None, steps: Optional[int] = None) -> ExperimentConfig:
        try:
            return load(self.spec.base, self.overrides(variant, d_ff, steps))
        except ConfigError as exc:
            raise self.error(exc, variant) from None

    def error(self, exc: ConfigError, variant: Variant) -> ConfigError:
        """Blame the axis that sets the key at fault; a clash between settings blames them all."""
        name = f" (variant {variant_name(variant.settings, self.names)})"
        blamed = suite_blame(self.spec.suite, variant.settings, exc) or \
            size_blame(self.spec.scale, variant.settings, exc, _related)
        if blamed is not None:
            return ConfigError(blamed, exc.message + name)
        for k, source in variant.sources.items():
            if _related(exc.key, k):
                return ConfigError(f"{source}.{k}", exc.message + name)
        spot = ", ".join(f"{variant.sources[k]}.{k}" for k in variant.settings) or "base"
        return ConfigError(spot, (f"{exc.key}: " if exc.key else "") + exc.message + name)


def _related(key: str, axis: str) -> bool:
    return bool(key) and (key == axis or key.startswith(axis + ".") or axis.startswith(key + "."))


def make_plan(spec: SweepSpec, variants: Optional[List[Variant]] = None) -> Plan:
    """Every run of ``variants`` (default: the spec's) x seeds; a tuned spec's stage 1."""
    _resolve_sizes(spec)
    if spec.tune is not None and variants is None:
        seed = _Configs(spec, {}).base.seed if spec.seeds is None else None
        if seed in spec.tune.seeds:
            raise ConfigError("tune.seeds", f"seed {seed} is also the evaluation seed (the base config's seed; the "
                              "spec has no 'seeds'); stage 2 must use seeds the choice never saw")
        first = stage_one_spec(spec)
        plan = _staged(_make_plan(first, expand(first)), spec, STAGE_TUNE)
        if spec.tune.halving is not None:
            check_budgets(spec.tune.halving, [(r.tune["variant"], r.config.train.max_steps, r.config.train.val_every)
                                              for r in plan.runs])
        return plan
    return _make_plan(spec, expand(spec) if variants is None else variants)


def second_plan(spec: SweepSpec, chosen: Dict[str, Choice]) -> Plan:
    """A tuned spec's stage 2: each variant at its chosen value on the evaluation seeds. ``chosen``
    (``tune.choose``) is read from stage 1's finished runs, so this plan is a function of them."""
    _resolve_sizes(spec)
    second = stage_two_spec(spec)
    picks = {label: c.value for label, c in chosen.items() if c.value is not None}
    variants = stage_two_variants(expand(spec), spec.tune, picks, transfer_lookup(spec.scale))
    if not variants:
        return Plan(spec, [], second.axes, short_names(second.axes))
    if spec.baseline is not None and not any(all(v.settings.get(k) == x for k, x in spec.baseline.items())
                                             for v in variants):
        second = dataclasses.replace(second, baseline=None)  # the baseline had no usable value: no reference
    return _staged(_make_plan(second, variants), spec, STAGE_EVAL)


def _resolve_sizes(spec: SweepSpec) -> None:
    """A parameter rule's sizes (``scale_params``), counted on the reference variant: the baseline, else
    the first, as every rung's budget is."""
    if spec.scale is None or spec.scale.params_rule is None or spec.scale.sizes:
        return
    bare = dataclasses.replace(spec, scale=None)
    configs, sizer, variants = _Configs(bare, {}), Sizer(), expand(bare)
    ref = variants[_baseline(bare, variants, {})[0]]

    def count(keys):
        shape = {f"model.{k}": v for k, v in keys.items()}
        variant = Variant({**ref.settings, **shape}, {**ref.sources, **{k: "scale.rule" for k in shape}})
        return sizer.shape_counts(configs.load(variant), lambda exc: configs.error(exc, variant))
    spec.scale = with_sizes(spec.scale, count)


def _rule(tune) -> Dict[str, Any]:
    """How stage 1 chooses, in each run.json: the report recomputes the choice from these (the values
    in the order tried, which break ties), not from a spec it may not have."""
    halving = {"eta": tune.halving.eta, "min_steps": tune.halving.min_steps} if tune.halving else None
    return {"values": list(tune.values), "select": tune.select, "goal": tune.goal, "halving": halving}


def _staged(plan: Plan, spec: SweepSpec, stage: str) -> Plan:
    tune = spec.tune
    for run in plan.runs:
        run.tune = {"stage": stage, "key": tune.key, "value": tuned_value(tune, run.settings),
                    "variant": variant_name(base_settings(run.settings, tune.keys), plan.names), **_rule(tune)}
        if tune.grid:
            run.tune["keys"] = list(tune.keys)
    plan.spec = spec  # sweep.yaml records the spec as written
    return plan


@dataclass
class _Planning:
    """What every run of a plan is built from: the variants, their loaded configs and, for each, the
    index of the variant its budget is matched against (``refs``)."""
    spec: SweepSpec
    configs: _Configs
    names: Dict[str, str]
    sizer: Sizer
    variants: List[Variant]
    loaded: List[ExperimentConfig]
    baseline: List[int]
    refs: List[int]

    def blame(self, variant: Variant):
        return lambda exc: self.configs.error(exc, variant)

    def name(self, variant: Variant) -> str:
        return variant_name(variant.settings, self.names)


def _make_plan(spec: SweepSpec, variants: List[Variant]) -> Plan:
    names = short_names(spec.axes)
    configs = _Configs(spec, names)
    names.mixer = configs.base.model.mixer.name  # what a layer list's name calls the layers it leaves
    seeds = spec.seeds if spec.seeds is not None else [configs.base.seed]
    loaded = [configs.load(v) for v in variants]  # every variant checked before anything is built
    baseline = _baseline(spec, variants, names)
    refs = references(variants, baseline)  # each variant's reference: its rung's baseline variant
    p = _Planning(spec, configs, names, Sizer(), variants, loaded, baseline, refs)
    _check_tasks(p)
    if spec.scale is not None:
        p.loaded = _ladder_configs(p)
    runs = [run for seed in seeds for run in _seed_runs(p, seed)]
    if spec.scale is not None:  # whole rungs (every seed) first: a ladder stopped part way has rungs to compare
        runs.sort(key=lambda r: r.scale["rung"])
    return Plan(spec, runs, spec.axes, names)


def _check_tasks(p: _Planning) -> None:
    """The task's problems (its vocabulary) and, in a tuned sweep, that it measures ``tune.select``."""
    spec, configs, sizer = p.spec, p.configs, p.sizer
    if spec.suite is None:
        sizer.vocab_size(configs.base, configs.base_error)  # the task's own problems are the base's
        if spec.tune is not None:
            known_metric(spec.tune.select, sizer.val_metrics(configs.base, configs.base_error))
        return
    # each entry's task is the suite's: its problems are the entry's, and so is what it measures
    for v, cfg in zip(p.variants, p.loaded):
        blame = p.blame(v)
        sizer.vocab_size(cfg, blame)
        if spec.tune is not None:
            try:
                known_metric(spec.tune.select, sizer.val_metrics(cfg, blame))
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{exc.message} (suite entry {v.settings[SUITE_KEY]})") from None


def _ladder_configs(p: _Planning) -> List[ExperimentConfig]:
    """Each variant's config at the steps its rung trains (the rung's reference sets them)."""
    spec, variants, loaded = p.spec, p.variants, p.loaded
    check_transfer(spec.scale, list(zip(variants, loaded)))
    steps = {j: ladder_steps(spec.scale, variants[j], loaded[j], p.sizer, p.blame(variants[j]))
             for j in sorted(set(p.refs))}
    loaded = [p.configs.load(v, steps=steps[p.refs[i]]) if steps[p.refs[i]] is not None else cfg
              for i, (v, cfg) in enumerate(zip(variants, loaded))]
    check_increasing(spec.scale, variants, loaded, p.sizer, p.configs.error, p.names)
    return loaded


def _seed_runs(p: _Planning, seed: int) -> List[RunPlan]:
    """Every variant's run at ``seed``, each brought to its reference's budget at that seed."""
    refs = {j: reference(p.spec, dataclasses.replace(p.loaded[j], seed=seed), p.sizer, p.blame(p.variants[j]),
                         p.name(p.variants[j])) for j in sorted(set(p.refs))}
    return [_run(p, i, seed, refs[p.refs[i]]) for i in range(len(p.variants))]


def _run(p: _Planning, i: int, seed: int, ref: Reference) -> RunPlan:
    spec, sizer, variant = p.spec, p.sizer, p.variants[i]
    blame, name = p.blame(variant), p.name(variant)
    cfg, matched = dataclasses.replace(p.loaded[i], seed=seed), {}
    if i != p.refs[i]:
        cfg, matched = matched_config(spec, p.configs, variant, cfg, seed, ref, sizer, blame, name)
    run = RunPlan(run_id(variant.settings, p.names, seed), name, seed,
                  {k: recorded(v) for k, v in variant.settings.items()}, i in p.baseline,
                  sizer.count(cfg, blame), matched, cfg, run_budget(spec, cfg, sizer, blame, ref.flops))
    check_decay_tokens(cfg, sizer, blame)
    if spec.scale is not None:
        run.scale = scale_record(spec.scale, variant.settings, cfg, sizer, blame)
    if spec.suite is not None:
        tuned = spec.tune.keys if spec.tune is not None else ()
        run.suite = suite_record(spec.suite, variant.settings, variant_name(arch_settings(variant.settings, tuned),
                                                                            p.names))
    return run


def _baseline(spec: SweepSpec, variants: List[Variant], names: Dict[str, str]) -> List[int]:
    """Indices of the variants that match ``baseline`` (all of its keys); the first is the reference
    for parameter matching. Without a baseline, the first variant is it."""
    if spec.baseline is None:
        return [0]
    hits = [i for i, v in enumerate(variants) if all(v.settings.get(k) == x for k, x in spec.baseline.items())]
    if not hits:
        shown = ", ".join(f"{k}={plain(x)}" for k, x in spec.baseline.items())
        choices = sorted({variant_name({k: v.settings[k] for k in spec.baseline}, names) for v in variants})
        raise ConfigError("baseline", f"{shown} matches no variant; the variants have: {'; '.join(choices)}")
    return hits
