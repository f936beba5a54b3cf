"""What ``arch-zoo sweep --dry-run`` prints about a ladder: one row per rung and variant (its size,
parameters with and without embeddings, steps, tokens, training FLOPs and the estimated wall time of
its runs from ``probe.py``), then what the report will be able to fit."""
from __future__ import annotations

from typing import Dict, List

from ..formatting import si
from ..run_names import plain, variant_name
from .estimate import duration
from .plan import Plan
from .scale import FLOPS_KEY, LR_MODES, SIZE_KEY, arch_settings
from .tables import _table


def ladder_table(plan: Plan, estimates: Dict[str, float]) -> str:
    scale = plan.spec.scale
    groups: Dict[tuple, List] = {}
    for run in plan.runs:
        arch = variant_name(arch_settings(run.settings), plan.names)
        groups.setdefault((run.scale["rung"], run.settings.get(FLOPS_KEY), arch), []).append(run)
    rows = []
    for (rung, flops, arch), runs in groups.items():
        first, keys = runs[0], scale.sizes[rung].keys
        each = [estimates[r.run_id] for r in runs]
        name = arch + (" *" if first.is_baseline else "")
        rows.append([str(rung + 1), first.settings[SIZE_KEY]] + ([f"{flops:.3g}"] if scale.flops else [])
                    + [", ".join(f"{k}={plain(v)}" for k, v in keys.items())]
                    + ([_target(scale.sizes[rung])] if scale.params_rule else []) + [name,
                       f"{first.scale['params']:,}", f"{first.scale['non_embedding_params']:,}",
                       str(first.budget["steps"]), si(first.budget["tokens"]), f"{first.budget['flops']:.3e}",
                       str(len(runs)), duration(sum(each) / len(each)), duration(sum(each))])
    header = ["rung", "size"] + (["FLOPs budget"] if scale.flops else []) + [
        "model keys"] + (["target params"] if scale.params_rule else []) + [
        "variant", "params", "non-emb params", "steps", "tokens", "train FLOPs", "runs", "est. per run", "est. runs"]
    numeric = ("rung", "FLOPs budget", "params", "non-emb params", "steps", "tokens", "train FLOPs", "runs",
               "est. per run", "est. runs")
    text = "\nladder:\n" + _table(header, rows, right=tuple(i for i, h in enumerate(header) if h in numeric))
    if scale.params_rule is not None:
        r = scale.params_rule
        text += (f"sizes: the width (a multiple of head_dim {r.head_dim}, depth width / {r.aspect_ratio:g}) whose "
                 f"{r.count.replace('_', '-')} parameters come nearest each target, counted on "
                 f"{_reference(plan)}; within {r.tolerance:.0%}\n")
    if scale.budget == "tokens_per_param":
        budget = f"{scale.tokens_per_param:g} tokens per {scale.per.replace('_', '-')} parameter of each rung's baseline"
    elif scale.budget == "flops":
        budget = "every size at every FLOPs budget (IsoFLOP), on the tokens that budget buys"
    else:
        budget = "every rung trains train.max_steps"
    text += f"budget: {budget}" + (f"; warmup {scale.warmup_fraction:g} of each rung's steps"
                                   if scale.warmup_fraction is not None else "") + "\n"
    if scale.lr is not None:
        text += (f"{plan.spec.tune.key}: {LR_MODES[scale.lr].split(': ', 1)[1]}; the rows are stage 1's runs (stage 2 "
                 "is planned from their results)\n")
    if not scale.fit:
        text += "scale.fit: false: the report gives per-rung comparisons only, no scaling fits\n"
    elif scale.holdout == "largest":
        text += (f"holdout: rung {scale.rungs} (the largest) is held out: each variant is fitted on rungs 1-"
                 f"{scale.rungs - 1} and the report compares the prediction with what rung {scale.rungs} measured\n")
    if scale.lr is None:
        text += shared_lr_note(plan) + "\n"
    if scale.lr == "transfer" and not _has_parametrization(plan):
        text += ("note: scale.lr: transfer reuses the smallest rung's value at every size, which assumes a "
                 "parametrization under which it transfers (µP); this arch_zoo has no model.parametrization to "
                 "check, so that is yours to ensure\n")
    for (rung, flops, arch), runs in groups.items():
        t = runs[0].config.train
        if scale.budget != "steps" and t.warmup_steps >= t.max_steps:
            text += (f"warning: rung {rung + 1} ({arch}) trains {t.max_steps} steps, no more than train.warmup_steps "
                     f"({t.warmup_steps}); set scale.warmup_fraction\n")
            break
    return text


def _target(size) -> str:
    """A parameter rule's target, and how near the reference variant's count at the chosen shape came."""
    return f"{si(size.target)} ({size.count / size.target - 1:+.1%})"


def shared_lr_note(plan: Plan) -> str:
    """Item 1 of issue 42: a ladder whose rungs share one learning rate says so, naming it."""
    lrs = sorted({r.config.train.lr for r in plan.runs})
    shown = ", ".join(f"{v:g}" for v in lrs)
    return (f"note: every rung trains at train.lr = {shown}, not tuned per size (scale.lr: tune or transfer, with "
            "a tune key, would tune it): compute multipliers between untuned rungs can grow or shrink with the lr "
            "alone")


def _reference(plan: Plan) -> str:
    first = next((r for r in plan.runs if r.is_baseline), plan.runs[0])
    return f"{variant_name(arch_settings(first.settings), plan.names)} (each rung's reference variant)"


def _has_parametrization(plan: Plan) -> bool:
    return bool(plan.runs) and hasattr(plan.runs[0].config.model, "parametrization")
