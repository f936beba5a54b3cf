"""Bringing each variant to its reference's budget (plan.py): the reference's spend, the ``model.d_ff``
(``budget: params``) or ``train.max_steps`` (``tokens | bytes | flops``) that match it, and what the
run will spend as run.json records it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ..config import ExperimentConfig
from ..errors import ConfigError
from .costs import matched_steps, step_bytes, tokens_per_step, training_flops
from .sizer import Sizer
from .spec import SweepSpec, Variant


@dataclass
class Reference:
    """What a rung's reference variant spends at one seed, for the variants matched against it."""
    flops: float  # its training FLOPs
    params: Optional[int] = None  # its parameter count (``budget: params``)
    spend: Optional[float] = None  # its training tokens or bytes (``budget: tokens | bytes``)


def reference(spec: SweepSpec, cfg: ExperimentConfig, sizer: Sizer, blame, name: str) -> Reference:
    """``cfg``: the reference variant's config at the seed."""
    params = sizer.count(cfg, blame) if spec.match_params is not None else None
    flops = training_flops(cfg.train.max_steps, sizer.tokens_per_step(cfg, blame), sizer.flops_per_token(cfg, blame))
    spend = cfg.train.max_steps * per_step(spec, cfg, sizer, blame, name) if sets_steps(spec) else None
    return Reference(flops, params, spend)


def matched_config(spec: SweepSpec, configs, variant: Variant, cfg: ExperimentConfig, seed: int, ref: Reference,
                   sizer: Sizer, blame, name: str) -> Tuple[ExperimentConfig, Dict[str, int]]:
    """The variant's config at ``seed`` brought to ``ref``'s budget, and the keys that were set to do it
    (``configs.load`` reloads it with them). ``cfg``: the variant's config at ``seed`` as loaded."""
    steps_now = cfg.train.max_steps if spec.scale is not None and spec.scale.budget != "steps" else None
    matched: Dict[str, int] = {}
    if spec.match_params is not None:
        key = "budget" if "budget" in spec.raw else "match_params"
        d_ff = match_d_ff(cfg, ref.params, spec.match_params, sizer, blame, name, key)
        cfg = dataclasses.replace(configs.load(variant, d_ff, steps_now), seed=seed)
        matched = {"model.d_ff": d_ff}
    if sets_steps(spec):  # tokens or bytes per step differ: steps make up for it
        steps_now = matched_steps(ref.spend, per_step(spec, cfg, sizer, blame, name))
        if steps_now != cfg.train.max_steps:
            cfg = dataclasses.replace(configs.load(variant, matched.get("model.d_ff"), steps_now), seed=seed)
            matched["train.max_steps"] = steps_now
    if spec.budget == "flops":
        step_flops = training_flops(1, sizer.tokens_per_step(cfg, blame), sizer.flops_per_token(cfg, blame))
        steps_now = max(1, round(ref.flops / step_flops))
        cfg = dataclasses.replace(configs.load(variant, steps=steps_now), seed=seed)
        matched = {"train.max_steps": steps_now}
    return cfg, matched


def sets_steps(spec: SweepSpec) -> bool:
    """Tokens and bytes budgets set each variant's steps, except where a ladder's sizes or a suite's
    entries (each its own task) own them."""
    return spec.budget in ("tokens", "bytes") and spec.scale is None and spec.suite is None


def per_step(spec: SweepSpec, cfg: ExperimentConfig, sizer: Sizer, blame, name: str) -> float:
    """What one step of ``cfg`` spends in the budget's unit: training tokens, or bytes of text."""
    tokens = sizer.tokens_per_step(cfg, blame)
    return step_bytes(tokens, sizer.bytes_per_token(cfg, blame), name) if spec.budget == "bytes" else tokens


def run_budget(spec: SweepSpec, cfg: ExperimentConfig, sizer: Sizer, blame, ref_flops: float) -> Dict[str, Any]:
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


def match_d_ff(cfg: ExperimentConfig, target: int, tolerance: float, sizer: Sizer, blame, name: str,
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
