"""A size ladder: the spec's ``scale`` key (pure data: no torch, no store).

    scale:
      sizes: [{d_model: 32, n_layers: 2, n_heads: 2}, {d_model: 64, n_layers: 4, n_heads: 4}, ...]
      # or a rule that makes them: widths at a fixed depth-to-width ratio and head size
      rule: {widths: [32, 64, 128], aspect_ratio: 16, head_dim: 16, ffn_ratio: 4}
      # or depths at a fixed width: rule: {depths: [2, 4, 8], d_model: 64, head_dim: 16}
      budget: {tokens_per_param: 20}      # or {flops: [1.0e12, 3.0e12, 1.0e13]} (IsoFLOP); default: max_steps
      lr: tune                            # with ``tune``: tune | transfer (tune the smallest rung only)
      warmup_fraction: 0.1                # optional, with a budget: train.warmup_steps as a fraction of each rung's steps
      holdout: largest                    # fit the rungs below the largest, predict it (default from 4 rungs); none
      fit: false                          # per-rung tables only: no curve fits (then fewer than 3 rungs are allowed)

A ladder is a sweep: ``expand`` crosses every variant with the sizes (and the FLOPs budgets of an
IsoFLOP ladder) as one more axis, ``scale.size`` (and ``scale.flops``), so names, run ids, the
store, resume, launchers, tuning and the report need nothing new. ``plan.py`` gives each rung its
training steps (``scale_plan.py``) and records the rung in run.json for the report's fits.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError, did_you_mean
from .fields import SweepSpec, Variant, _check_keys, _mapping

SIZE_KEY, FLOPS_KEY = "scale.size", "scale.flops"  # the axes a ladder adds to every variant's settings
SCALE_KEYS = ("sizes", "rule", "budget", "lr", "warmup_fraction", "holdout", "fit")
MIN_RUNGS = 3  # L = E + A C^-alpha has three parameters: fewer rungs fit any curve exactly, and say nothing
HOLDOUTS = ("largest", "none")
HOLDOUT_FROM = 4  # rungs from which the largest is held out by default (3 are left to fit)
RULE_KEYS = ("widths", "aspect_ratio", "depths", "d_model", "head_dim", "ffn_ratio")
LR_MODES = {"tune": "tune: tuned per size (the two-stage tuning at every rung)",
            "transfer": "tune: tuned on the smallest rung only, its value reused at every rung (µP)"}
# short labels for the keys a size usually sets: d64-L4-h4
ABBREVIATIONS = {"d_model": "d", "n_layers": "L", "n_heads": "h", "d_ff": "ff", "head_dim": "hd", "n_kv_heads": "kv"}


@dataclass(frozen=True)
class Size:
    label: str  # the value of the scale.size axis (in names and run ids)
    keys: Dict[str, Any]  # model key (without "model.") -> value
    where: str  # the spec key that made it, for errors: scale.sizes[1] or scale.rule.widths[1]


@dataclass(frozen=True)
class ScaleSpec:
    sizes: Tuple[Size, ...]
    tokens_per_param: Optional[float] = None  # tokens = K x parameters of the rung's baseline
    per: str = "total"  # the parameters tokens_per_param counts: total | non_embedding
    flops: Tuple[float, ...] = ()  # IsoFLOP budgets: every size at every budget
    lr: Optional[str] = None  # with tune: tune | transfer
    warmup_fraction: Optional[float] = None
    holdout: Optional[str] = None  # "largest", or None: every rung fitted
    fit: bool = True  # False: per-rung tables only

    @property
    def rungs(self) -> int:
        return len(self.flops) or len(self.sizes)

    @property
    def budget(self) -> str:
        return "tokens_per_param" if self.tokens_per_param is not None else "flops" if self.flops else "steps"

    @property
    def axes(self) -> List[str]:
        return [SIZE_KEY] + ([FLOPS_KEY] if self.flops else [])

    def size(self, label: str) -> Size:
        return next(s for s in self.sizes if s.label == label)

    def rung(self, label: str) -> int:
        return [s.label for s in self.sizes].index(label)


def model_fields() -> List[str]:
    from ..config.schema import ModelConfig

    return [f.name for f in dataclasses.fields(ModelConfig)]


def _number(value: Any, key: str, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(key, f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(key, f"must be positive, got {value!r}")
    return value


def _size_keys(raw: Any, where: str, fields: List[str]) -> Dict[str, Any]:
    keys = _mapping(raw, where)
    if not keys:
        raise ConfigError(where, "is empty: a size sets model keys, e.g. {d_model: 64, n_layers: 4}")
    out = {}
    for k, v in keys.items():
        if k == "name":
            continue
        key = str(k)[len("model."):] if str(k).startswith("model.") else str(k)
        if not key or key.split(".")[0] not in fields:
            raise ConfigError(f"{where}.{k}", f"is not a model key{did_you_mean(key, fields)}; a size sets model "
                              "keys only (d_model, n_layers, n_heads, d_ff, ...); set other keys in the base or "
                              "an axis")
        out[key] = v
    return out


def _label(keys: Mapping[str, Any]) -> str:
    from ..run_names import plain

    return "-".join(f"{ABBREVIATIONS.get(k, k)}{plain(v)}" for k, v in keys.items() if v is not None) or "base"


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(where, f"expected a positive integer, got {value!r}")
    return value


def _depth_rule(r: Mapping[str, Any]) -> List[Tuple[Dict[str, Any], str]]:
    """Depths at one width (OLMo-core and Chinchilla also ladder by depth): n_layers grows, the rest stays."""
    for k in ("d_model", "head_dim"):
        if k not in r:
            raise ConfigError(f"scale.rule.{k}", "missing: a depth rule needs depths, d_model and head_dim")
    depths = r["depths"]
    if not isinstance(depths, (list, tuple)) or not depths:
        raise ConfigError("scale.rule.depths", f"expected a list of layer counts, got {depths!r}")
    width = _positive_int(r["d_model"], "scale.rule.d_model")
    head_dim = _positive_int(r["head_dim"], "scale.rule.head_dim")
    if width % head_dim:
        raise ConfigError("scale.rule.head_dim", f"{head_dim} does not divide d_model {width}")
    ratio = _number(r["ffn_ratio"], "scale.rule.ffn_ratio") if r.get("ffn_ratio") is not None else None
    return [({"d_model": width, "n_layers": _positive_int(d, f"scale.rule.depths[{i}]"), "n_heads": width // head_dim,
              "d_ff": None if ratio is None else max(1, round(ratio * width))}, f"scale.rule.depths[{i}]")
            for i, d in enumerate(depths)]


def _rule(raw: Any) -> List[Tuple[Dict[str, Any], str]]:
    r = _mapping(raw, "scale.rule")
    _check_keys(r, RULE_KEYS, "scale.rule.")
    if ("depths" in r) == ("widths" in r):
        raise ConfigError("scale.rule", "give widths (at a fixed aspect_ratio) or depths (at a fixed d_model), not "
                          "both or neither")
    if "depths" in r:
        for k in ("widths", "aspect_ratio"):
            if k in r:
                raise ConfigError(f"scale.rule.{k}", "is for a width rule; a depth rule sets depths and d_model")
        return _depth_rule(r)
    if "d_model" in r:
        raise ConfigError("scale.rule.d_model", "is for a depth rule; a width rule sets widths and aspect_ratio")
    for k in ("widths", "aspect_ratio", "head_dim"):
        if k not in r:
            raise ConfigError(f"scale.rule.{k}", "missing: a rule needs widths, aspect_ratio (d_model / n_layers) "
                              "and head_dim (d_model / n_heads)")
    widths = r["widths"]
    if not isinstance(widths, (list, tuple)) or not widths:
        raise ConfigError("scale.rule.widths", f"expected a list of model widths, got {widths!r}")
    aspect = _number(r["aspect_ratio"], "scale.rule.aspect_ratio")
    head_dim = r["head_dim"]
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ConfigError("scale.rule.head_dim", f"expected a positive integer, got {head_dim!r}")
    ratio = _number(r["ffn_ratio"], "scale.rule.ffn_ratio") if r.get("ffn_ratio") is not None else None
    out = []
    for i, w in enumerate(widths):
        where = f"scale.rule.widths[{i}]"
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise ConfigError(where, f"expected a positive integer width, got {w!r}")
        if w % head_dim:
            raise ConfigError("scale.rule.head_dim", f"{head_dim} does not divide width {w} ({where}); pick widths "
                              "that are multiples of the head size")
        layers = max(1, round(w / aspect))
        # d_ff null: the FFN's own default (4 x d_model; 8/3 x for gated ones), so it follows the width
        out.append(({"d_model": w, "n_layers": layers, "n_heads": w // head_dim,
                     "d_ff": None if ratio is None else max(1, round(ratio * w))}, where))
    return out


def _budget(raw: Any) -> Dict[str, Any]:
    if raw is None:
        return {}
    b = _mapping(raw, "scale.budget")
    _check_keys(b, ("tokens_per_param", "params", "flops"), "scale.budget.")
    if "tokens_per_param" in b and "flops" in b:
        raise ConfigError("scale.budget", "give tokens_per_param (a budget that grows with size) or flops (IsoFLOP "
                          "budgets), not both")
    out: Dict[str, Any] = {}
    if "tokens_per_param" in b:
        out["tokens_per_param"] = float(_number(b["tokens_per_param"], "scale.budget.tokens_per_param"))
        per = b.get("params", "total")
        if per not in ("total", "non_embedding"):
            raise ConfigError("scale.budget.params", f"expected total or non_embedding, got {per!r}")
        out["per"] = per
    elif "params" in b:
        raise ConfigError("scale.budget.params", "only tokens_per_param counts parameters")
    if "flops" in b:
        raw_flops = b["flops"]
        if isinstance(raw_flops, (int, float)) and not isinstance(raw_flops, bool):
            raw_flops = [raw_flops]
        if not isinstance(raw_flops, (list, tuple)) or not raw_flops:
            raise ConfigError("scale.budget.flops", f"expected a list of training FLOPs budgets, got {raw_flops!r}")
        flops = tuple(float(_number(c, f"scale.budget.flops[{i}]")) for i, c in enumerate(raw_flops))
        if list(flops) != sorted(set(flops)):
            raise ConfigError("scale.budget.flops", "list each budget once, from smallest to largest")
        out["flops"] = flops
    return out


def parse_scale(value: Any, spec: SweepSpec) -> ScaleSpec:
    """``scale`` once the spec's axes are known (a key a size sets must not also be an axis)."""
    s = _mapping(value, "scale")
    _check_keys(s, SCALE_KEYS, "scale.")
    if ("sizes" in s) == ("rule" in s):
        raise ConfigError("scale", "give either sizes (a list of model settings) or rule (widths at a fixed "
                          "aspect ratio and head size)")
    fields = model_fields()
    if "sizes" in s:
        raw = s["sizes"]
        if not isinstance(raw, (list, tuple)) or not raw:
            raise ConfigError("scale.sizes", f"expected a list of sizes, each a mapping of model keys, got {raw!r}")
        made = [(_size_keys(x, f"scale.sizes[{i}]", fields), f"scale.sizes[{i}]") for i, x in enumerate(raw)]
        names = [x.get("name") if isinstance(x, Mapping) else None for x in raw]
    else:
        made = _rule(s["rule"])
        names = [None] * len(made)
    sizes: List[Size] = []
    for (keys, where), name in zip(made, names):
        for k in keys:
            axis = f"model.{k}"
            clash = next((a for a in spec.source_key if a == axis or a.startswith(axis + ".")
                          or axis.startswith(a + ".")), None)
            if clash:
                raise ConfigError(f"{where}.{k}", f"{clash} is also varied by {spec.source_key[clash]}; a key is set "
                                  "by the sizes or by an axis, not both")
        if any(sz.keys == keys for sz in sizes):
            raise ConfigError(where, "repeats an earlier size (the same runs would train twice)")
        label = str(name) if name is not None else _label(keys)
        while any(sz.label == label for sz in sizes):
            label += "'"
        sizes.append(Size(label, keys, where))
    budget = _budget(s.get("budget"))
    lr = s.get("lr")
    if lr is not None and lr not in LR_MODES:
        raise ConfigError("scale.lr", f"expected one of {', '.join(LR_MODES)}, got {lr!r}"
                          f"{did_you_mean(str(lr), LR_MODES)}")
    warmup = s.get("warmup_fraction")
    if warmup is not None and not (0 <= _number(warmup, "scale.warmup_fraction", positive=False) < 1):
        raise ConfigError("scale.warmup_fraction", f"expected a fraction in [0, 1), got {warmup!r}")
    if warmup is not None and not budget:  # every rung trains train.max_steps: train.warmup_steps says it all
        raise ConfigError("scale.warmup_fraction", "sets warmup from each rung's steps, which only a budget "
                          "(tokens_per_param or flops) gives; without one every rung trains train.max_steps, so "
                          "set train.warmup_steps")
    out = ScaleSpec(tuple(sizes), budget.get("tokens_per_param"), budget.get("per", "total"), budget.get("flops", ()),
                    lr, warmup)
    fit = s.get("fit", True)
    if not isinstance(fit, bool):
        raise ConfigError("scale.fit", f"expected true (fit a curve per variant) or false (per-rung tables only), "
                          f"got {fit!r}")
    return dataclasses.replace(out, fit=fit, holdout=holdout_of(s, out.rungs) if fit else _no_holdout(s))


def _no_holdout(s: Mapping[str, Any]) -> None:
    if s.get("holdout") not in (None, "none"):
        raise ConfigError("scale.holdout", "predicts a rung from the fits, and scale.fit is false: drop one of them")
    return None


def holdout_of(s: Mapping[str, Any], rungs: int) -> Optional[str]:
    """The rung held out of the fits ("largest" or None) for a ``scale`` mapping of ``rungs`` rungs, after
    refusing a ladder too short to fit (or to fit once a rung is held out): one line, before anything trains."""
    what = "budgets (scale.budget.flops)" if (s.get("budget") or {}).get("flops") is not None else "sizes"
    if rungs < MIN_RUNGS:
        raise ConfigError("scale", f"{rungs} rung{'s' * (rungs != 1)} ({what}): a scaling fit L = E + A C^-alpha has "
                          f"3 parameters and needs at least {MIN_RUNGS} rungs; add {what}, or set scale.fit: false "
                          "for per-rung tables only")
    raw = s.get("holdout")
    if raw is not None and raw not in HOLDOUTS:
        raise ConfigError("scale.holdout", f"expected one of {', '.join(HOLDOUTS)}, got {raw!r}"
                          f"{did_you_mean(str(raw), HOLDOUTS)}")
    if raw == "largest" and rungs - 1 < MIN_RUNGS:
        raise ConfigError("scale.holdout", f"holding out the largest of {rungs} rungs leaves {rungs - 1} to fit; a "
                          f"fit needs {MIN_RUNGS}: add {what}, or set scale.holdout: none")
    if raw is None:
        return "largest" if rungs >= HOLDOUT_FROM else None
    return None if raw == "none" else raw


def check_with_tune(spec: SweepSpec) -> None:
    """``scale.lr`` says how the tuned value crosses sizes, so it needs ``tune``; with tune it defaults to
    ``tune`` (each rung tuned on its own). Steps are the ladder's: neither an axis nor tuned."""
    scale = spec.scale
    if scale.lr is not None and spec.tune is None:
        raise ConfigError("scale.lr", f"{scale.lr} is about the tuned value; add a tune key (e.g. tune: {{key: "
                          "train.lr, values: [...], seeds: [...]}})")
    if spec.tune is not None and scale.lr is None:
        spec.scale = dataclasses.replace(scale, lr="tune")
    if scale.budget != "steps":
        for key in ("train.max_steps",) + (("train.warmup_steps",) if scale.warmup_fraction is not None else ()):
            where = spec.source_key.get(key) or ("tune" if spec.tune is not None and key in spec.tune.keys else None)
            if where:
                raise ConfigError("scale.budget", f"sets each rung's {key}, so it cannot also be varied by {where}")


# ----------------------------------------------------------------------------------------- expansion

def cross(variants: List[Variant], scale: ScaleSpec) -> List[Variant]:
    """Every variant at every size (and FLOPs budget), smallest rung first: a partly run ladder has
    whole rungs to compare."""
    budgets: List[Optional[float]] = list(scale.flops) or [None]
    out = []
    for size in scale.sizes:
        for c in budgets:
            extra = {SIZE_KEY: size.label, **({FLOPS_KEY: c} if c is not None else {})}
            for v in variants:
                out.append(Variant({**v.settings, **extra}, {**v.sources, **{k: "scale" for k in extra}}))
    return out


def size_overrides(scale: Optional[ScaleSpec], settings: Mapping[str, Any]) -> List[str]:
    """The model keys a variant's size sets, as dotlist overrides."""
    from ..run_names import yaml_value

    if scale is None or SIZE_KEY not in settings:
        return []
    return [f"model.{k}={yaml_value(v)}" for k, v in scale.size(settings[SIZE_KEY]).keys.items()]


def smallest_only(scale: ScaleSpec) -> ScaleSpec:
    """``lr: transfer``'s stage 1: the smallest rung alone."""
    return dataclasses.replace(scale, sizes=scale.sizes[:1])


def transfer_lookup(scale: Optional[ScaleSpec]) -> Optional[Callable[[Dict[str, Any]], Dict[str, Any]]]:
    """Under ``lr: transfer``, whose stage-1 choice a stage-2 variant takes: its own at the smallest rung."""
    if scale is None or scale.lr != "transfer":
        return None
    first = scale.sizes[0].label
    return lambda settings: {**settings, SIZE_KEY: first}


def arch_settings(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """A ladder variant's settings without its rung: what stays the same along the ladder."""
    return {k: v for k, v in settings.items() if k not in (SIZE_KEY, FLOPS_KEY)}
