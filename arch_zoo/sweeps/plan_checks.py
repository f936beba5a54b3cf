"""What a plan holds that its reader must know before the runs start: warnings `sweep --dry-run` prints
and the sweep says again as it starts."""
from __future__ import annotations

from typing import Dict, List

from ..config.layers import pattern_notes
from ..config.validation import stacks
from ..formatting import si
from ..metrics import per_byte_instead
from ..recipes import recipe_warnings, warmup_warning
from .plan import Plan


def comparison_warnings(plan: Plan) -> List[str]:
    """What the plan holds that a reader must know before trusting a comparison: a per-token metric
    over variants whose tokens cover different text, a budget of steps over variants that read
    different tokens, eval lengths a variant cannot run."""
    from ..training.run import unreachable_lengths  # (torch: only when a plan is shown)

    lines = []
    metric = (plan.spec.tune.select if plan.spec.tune is not None else None) or plan.spec.metric["name"]
    measured = {r.variant: r.budget.get("val_bytes_per_token") for r in plan.runs}  # val@L's text is val's
    _, why = per_byte_instead(metric, measured, [f"{metric.rsplit('/', 1)[0]}/bpb"])
    if why:
        lines.append(f"warning: {why.replace('ranked by', 'the report will rank by', 1)}")
    tokens = {r.variant: r.budget.get("tokens") for r in plan.runs if r.budget.get("tokens")}
    if plan.spec.budget == "steps" and len(set(tokens.values())) > 1:
        why = ("train.max_steps is varied on purpose" if "train.max_steps" in plan.spec.source_key
               else "budget.match: steps")
        lines.append(f"budget: steps, not tokens ({why}): the variants train on "
                     + ", ".join(f"{v} {si(t)}" for v, t in tokens.items()) + " tokens")
    short = {r.variant: (r.config.train.warmup_steps, r.config.train.max_steps) for r in plan.runs
             if r.matched.get("train.max_steps") and r.config.train.warmup_steps >= r.config.train.max_steps}
    lines += [f"warning: {v} trains {steps} steps (its budget's) but train.warmup_steps is {warm}: it never reaches "
              "train.lr; set warmup in proportion or match steps" for v, (warm, steps) in short.items()]
    skipped: Dict[str, List[str]] = {}  # why -> the variants it holds for (once, not per seed)
    for run in plan.runs:
        for why in unreachable_lengths(run.config).values():
            names = skipped.setdefault(why, [])
            if run.variant not in names:
                names.append(run.variant)
    every = list(dict.fromkeys(r.variant for r in plan.runs))
    lines += [f"warning: {why}" + ("" if names == every else f" (for {', '.join(names)})")
              for why, names in skipped.items()]
    return lines + pattern_lines(plan)


def pattern_lines(plan: Plan) -> List[str]:
    """Which layers each item of a pattern that does not tile its range reaches, once per variant."""
    notes: Dict[str, List[str]] = {}
    for run in plan.runs:
        m = run.config.model
        notes.setdefault(run.variant, pattern_notes(m, stacks(m)))
    return [f"note: {variant}: {line}" for variant, lines in notes.items() for line in lines]


def run_warnings(plan: Plan) -> List[str]:
    """Each recipe warning the planned runs would print when they start, once, with the runs it is about."""
    runs: Dict[str, List[str]] = {}
    for run in plan.runs:
        said = warmup_warning(run.config.train) if run.matched.get("train.max_steps") else None  # with its budget
        for line in recipe_warnings(run.config.train):
            if line != said:
                runs.setdefault(line, []).append(run.run_id)
    return [f"{ids[0] if len(ids) == 1 else f'{len(ids)} of {len(plan.runs)} runs ({ids[0]}, ...)'}: {line}"
            for line, ids in runs.items()]
