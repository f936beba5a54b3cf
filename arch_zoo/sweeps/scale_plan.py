"""A ladder's part of the plan: each rung's training steps (tokens per parameter, or the tokens a
FLOPs budget buys), the check that sizes grow, the µP check of ``scale.lr: transfer``, and the
rung record every run.json carries for the report (``reports/scaling``).

Budgets are the rung's: the steps come from the rung's reference variant (its baseline, else its
first variant), and every variant of the rung trains them, so ``budget.match`` (tokens, params,
flops) still compares the variants of one rung as it compares those of a plain sweep."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from .costs import training_flops
from .fields import Variant
from .scale import FLOPS_KEY, SIZE_KEY, ScaleSpec, arch_settings
from .suite import SUITE_KEY

_MISSING = object()


def _rung_of(settings: Mapping[str, Any]) -> Tuple[Any, ...]:
    return tuple(settings.get(k) for k in (SIZE_KEY, FLOPS_KEY, SUITE_KEY))  # a suite entry: its own reference


def references(variants: Sequence[Variant], baseline: Sequence[int]) -> List[int]:
    """For each variant, the index of the variant it is matched against: the first baseline variant of
    its rung (every variant when the sweep is no ladder: one rung; a suite's entries are rungs too: budgets
    compare variants on one task), else the rung's first variant."""
    first: Dict[Tuple[Any, ...], int] = {}
    for i in list(baseline) + list(range(len(variants))):
        first.setdefault(_rung_of(variants[i].settings), i)
    return [first[_rung_of(v.settings)] for v in variants]


def ladder_steps(scale: ScaleSpec, variant: Variant, cfg, sizer, blame: Callable) -> Optional[int]:
    """The steps a rung trains (None: the configured train.max_steps, when the ladder sets no budget)."""
    if scale.budget == "steps":
        return None
    tokens = sizer.tokens_per_step(cfg, blame)
    if scale.budget == "tokens_per_param":
        n = sizer.count(cfg, blame) if scale.per == "total" else sizer.non_embedding(cfg, blame)
        return max(1, round(scale.tokens_per_param * n / tokens))
    budget = variant.settings[FLOPS_KEY]
    per_step = training_flops(1, tokens, sizer.flops_per_token(cfg, blame))
    steps = round(budget / per_step)
    if steps < 1:
        size = scale.size(variant.settings[SIZE_KEY])
        raise ConfigError("scale.budget.flops", f"{budget:.3g} FLOPs buy {size.where} ({size.label}) less than one "
                          f"step ({per_step:.3g} FLOPs a step); raise the budget or drop the size")
    return steps


def check_increasing(scale: ScaleSpec, variants: Sequence[Variant], loaded: Sequence[Any], sizer, error: Callable,
                     names: Dict[str, str]) -> None:
    """Each variant's non-embedding parameters grow along the sizes, as listed: a ladder out of order
    (or with two sizes alike) would fit a curve to the wrong x."""
    from ..run_names import variant_name

    seen: Dict[str, Tuple[int, str]] = {}
    for v, cfg in zip(variants, loaded):
        arch = variant_name(arch_settings(v.settings), names)
        key = f"{arch} {v.settings.get(FLOPS_KEY)}"
        n = sizer.non_embedding(cfg, lambda exc, v=v: error(exc, v))
        size = scale.size(v.settings[SIZE_KEY])
        if key in seen and n <= seen[key][0]:
            total = sizer.count(cfg, lambda exc, v=v: error(exc, v))
            raise ConfigError(size.where, f"gives {arch} {n:,} non-embedding parameters ({total:,} in all), no more "
                              f"than the size before it ({seen[key][1]}: {seen[key][0]:,}); list sizes from "
                              "smallest to largest, each larger than the last")
        seen[key] = (n, size.label)


def check_transfer(scale: ScaleSpec, pairs: Sequence[Tuple[Variant, Any]]) -> None:
    """``lr: transfer`` reuses the smallest rung's tuned value at every width, which µP makes sound.
    Where the schema has ``model.parametrization``, every variant must use mup; a schema without it
    cannot say, and the choice stays the user's (documented with the key)."""
    if scale.lr != "transfer":
        return
    for variant, cfg in pairs:
        param = getattr(cfg.model, "parametrization", _MISSING)
        if param is _MISSING:
            return
        name = param if isinstance(param, str) or param is None else \
            param.get("name") if isinstance(param, Mapping) else getattr(param, "name", None)
        if name != "mup":
            raise ConfigError("scale.lr", f"transfer reuses the smallest rung's tuned value at every size, which holds "
                              f"under µP, but model.parametrization is {name}; set model.parametrization: "
                              "{name: mup, base_width: N} or use scale.lr: tune")


def scale_record(scale: ScaleSpec, settings: Mapping[str, Any], cfg, sizer, blame: Callable) -> Dict[str, Any]:
    """run.json's ``scale``: what the report's fits need about the rung, fixed when the run was planned."""
    size = scale.size(settings[SIZE_KEY])
    return {"rung": scale.rung(size.label), "size": size.label, "keys": dict(size.keys), "budget": scale.budget,
            "params": sizer.count(cfg, blame), "non_embedding_params": sizer.non_embedding(cfg, blame),
            "tokens_per_param": scale.tokens_per_param, "flops_budget": settings.get(FLOPS_KEY),
            "lr": scale.lr, "holdout": scale.holdout, "fit": scale.fit}


def size_blame(scale: Optional[ScaleSpec], settings: Mapping[str, Any], exc: ConfigError,
               related: Callable[[str, str], bool]) -> Optional[str]:
    """The spec key of the size that sets the config key at fault: scale.sizes[1].n_heads."""
    if scale is None or SIZE_KEY not in settings:
        return None
    size = scale.size(settings[SIZE_KEY])
    return next((f"{size.where}.{k}" for k in size.keys if related(exc.key, f"model.{k}")), None)


def warmup_override(scale: Optional[ScaleSpec], steps: int) -> List[str]:
    if scale is None or scale.warmup_fraction is None or scale.budget == "steps":
        return []
    return [f"train.warmup_steps={round(scale.warmup_fraction * steps)}"]
