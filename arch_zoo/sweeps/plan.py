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
from ..config.loading import load
from ..errors import ConfigError
from .costs import matched_steps, step_bytes, tokens_per_step, training_flops
from .halving import check_budgets
from .sizer import Sizer
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


def _make_plan(spec: SweepSpec, variants: List[Variant]) -> Plan:
    names = short_names(spec.axes)
    configs = _Configs(spec, names)
    names.mixer = configs.base.model.mixer.name  # what a layer list's name calls the layers it leaves
    seeds = spec.seeds if spec.seeds is not None else [configs.base.seed]
    loaded = [configs.load(v) for v in variants]  # every variant checked before anything is built
    baseline = _baseline(spec, variants, names)
    refs = references(variants, baseline)  # each variant's reference: its rung's baseline variant
    sizer = Sizer()
    if spec.suite is None:
        sizer.vocab_size(configs.base, configs.base_error)  # the task's own problems are the base's
        if spec.tune is not None:
            known_metric(spec.tune.select, sizer.val_metrics(configs.base, configs.base_error))
    else:  # each entry's task is the suite's: its problems are the entry's, and so is what it measures
        for v, cfg in zip(variants, loaded):
            blame = lambda exc, v=v: configs.error(exc, v)  # noqa: E731
            sizer.vocab_size(cfg, blame)
            if spec.tune is not None:
                try:
                    known_metric(spec.tune.select, sizer.val_metrics(cfg, blame))
                except ConfigError as exc:
                    raise ConfigError(exc.key, f"{exc.message} (suite entry {v.settings[SUITE_KEY]})") from None
    if spec.scale is not None:
        check_transfer(spec.scale, list(zip(variants, loaded)))
        steps = {j: ladder_steps(spec.scale, variants[j], loaded[j], sizer, lambda exc, v=variants[j]:
                                 configs.error(exc, v)) for j in sorted(set(refs))}
        loaded = [configs.load(v, steps=steps[refs[i]]) if steps[refs[i]] is not None else cfg
                  for i, (v, cfg) in enumerate(zip(variants, loaded))]
        check_increasing(spec.scale, variants, loaded, sizer, configs.error, names)
    runs: List[RunPlan] = []
    for seed in seeds:
        ref_flops: Dict[int, float] = {}
        ref_spend: Dict[int, float] = {}  # budget tokens / bytes: the reference's training tokens or bytes
        targets: Dict[int, int] = {}
        for j in sorted(set(refs)):
            ref_cfg = dataclasses.replace(loaded[j], seed=seed)
            ref_blame = lambda exc, v=variants[j]: configs.error(exc, v)  # noqa: E731
            if spec.match_params is not None:
                targets[j] = sizer.count(ref_cfg, ref_blame)
            ref_flops[j] = training_flops(ref_cfg.train.max_steps, sizer.tokens_per_step(ref_cfg, ref_blame),
                                          sizer.flops_per_token(ref_cfg, ref_blame))
            if _sets_steps(spec):
                ref_spend[j] = ref_cfg.train.max_steps * _per_step(spec, ref_cfg, sizer, ref_blame,
                                                                   variant_name(variants[j].settings, names))
        for i, (variant, cfg) in enumerate(zip(variants, loaded)):
            blame = lambda exc, v=variant: configs.error(exc, v)  # noqa: E731
            cfg = dataclasses.replace(cfg, seed=seed)
            steps_now = cfg.train.max_steps if spec.scale is not None and spec.scale.budget != "steps" else None
            matched: Dict[str, int] = {}
            if spec.match_params is not None and i != refs[i]:
                key = "budget" if "budget" in spec.raw else "match_params"
                d_ff = _match(cfg, targets[refs[i]], spec.match_params, sizer, blame,
                              variant_name(variant.settings, names), key)
                cfg = dataclasses.replace(configs.load(variant, d_ff, steps_now), seed=seed)
                matched = {"model.d_ff": d_ff}
            if _sets_steps(spec) and i != refs[i]:  # tokens or bytes per step differ: steps make up for it
                steps_now = matched_steps(ref_spend[refs[i]], _per_step(spec, cfg, sizer, blame,
                                                                         variant_name(variant.settings, names)))
                if steps_now != cfg.train.max_steps:
                    cfg = dataclasses.replace(configs.load(variant, matched.get("model.d_ff"), steps_now), seed=seed)
                    matched["train.max_steps"] = steps_now
            if spec.budget == "flops" and i != refs[i]:
                per_step = training_flops(1, sizer.tokens_per_step(cfg, blame), sizer.flops_per_token(cfg, blame))
                steps_now = max(1, round(ref_flops[refs[i]] / per_step))
                cfg = dataclasses.replace(configs.load(variant, steps=steps_now), seed=seed)
                matched = {"train.max_steps": steps_now}
            run = RunPlan(run_id(variant.settings, names, seed), variant_name(variant.settings, names), seed,
                          {k: recorded(v) for k, v in variant.settings.items()}, i in baseline,
                          sizer.count(cfg, blame), matched, cfg, _budget(spec, cfg, sizer, blame, ref_flops[refs[i]]))
            if spec.scale is not None:
                run.scale = scale_record(spec.scale, variant.settings, cfg, sizer, blame)
            if spec.suite is not None:
                tuned = spec.tune.keys if spec.tune is not None else ()
                run.suite = suite_record(spec.suite, variant.settings,
                                         variant_name(arch_settings(variant.settings, tuned), names))
            runs.append(run)
    if spec.scale is not None:  # whole rungs (every seed) first: a ladder stopped part way has rungs to compare
        runs.sort(key=lambda r: r.scale["rung"])
    return Plan(spec, runs, spec.axes, names)


def _sets_steps(spec: SweepSpec) -> bool:
    """Tokens and bytes budgets set each variant's steps, except where a ladder's sizes or a suite's
    entries (each its own task) own them."""
    return spec.budget in ("tokens", "bytes") and spec.scale is None and spec.suite is None


def _per_step(spec: SweepSpec, cfg: ExperimentConfig, sizer: Sizer, blame, name: str) -> float:
    """What one step of ``cfg`` spends in the budget's unit: training tokens, or bytes of text."""
    tokens = sizer.tokens_per_step(cfg, blame)
    return step_bytes(tokens, sizer.bytes_per_token(cfg, blame), name) if spec.budget == "bytes" else tokens


def _budget(spec: SweepSpec, cfg: ExperimentConfig, sizer: Sizer, blame, ref_flops: float) -> Dict[str, Any]:
    """What this run will spend, as recorded in run.json and shown by --dry-run and the report;
    ``flops_vs_baseline`` is the relative mismatch left by whole steps; ``bytes``: the text its
    training tokens cover (text tasks)."""
    steps, tokens = cfg.train.max_steps, tokens_per_step(cfg, sizer.tokens_per_example(cfg, blame))
    flops = training_flops(steps, tokens, sizer.flops_per_token(cfg, blame))
    out = {"match": spec.budget, "steps": steps, "tokens": steps * tokens, "tokens_per_step": tokens,
           "params": sizer.count(cfg, blame), "flops": flops,
           "flops_vs_baseline": flops / ref_flops - 1 if ref_flops else None,
           "flops_counted_at": sizer.lengths(cfg, blame)[1]}
    per_token = sizer.bytes_per_token(cfg, blame)
    if per_token:
        out.update(bytes=steps * tokens * per_token, bytes_per_token=per_token,
                   val_bytes_per_token=sizer.bytes_per_token(cfg, blame, "val"))
    return out


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


def _match(cfg: ExperimentConfig, target: int, tolerance: float, sizer: Sizer, blame, name: str,
           key: str = "match_params") -> int:
    """The d_ff that brings this variant's parameter count nearest to ``target``. Parameters are
    affine in d_ff for every feed-forward kind (gated ones just have a steeper slope), so two
    counts give the line and one more checks the answer."""
    d0 = cfg.model.d_ff
    p0 = sizer.count(cfg, blame)
    p1 = sizer.count(_with_d_ff(cfg, 2 * d0), blame)
    slope = (p1 - p0) / d0
    d_ff = max(1, round(d0 + (target - p0) / slope)) if slope > 0 else d0
    got = sizer.count(_with_d_ff(cfg, d_ff), blame)
    if abs(got - target) > tolerance * target:
        raise ConfigError(key, f"variant {name} cannot be brought "
                          f"within {tolerance:.0%} of the baseline's {target:,} parameters by changing model.d_ff "
                          f"(best: d_ff={d_ff} gives {got:,}); compare smaller differences or a larger model")
    return d_ff


def _with_d_ff(cfg: ExperimentConfig, d_ff: int) -> ExperimentConfig:
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, d_ff=d_ff))
