"""What ``arch-zoo sweep --dry-run`` prints about WSD-S runs (``train.schedule.decays`` or
``decay_tokens``): each variant's budgets (the steps of each decay branch, the step it forks at, and
the tokens each trains), and the steps and training FLOPs the plan spends against training every
budget as a separate run."""
from __future__ import annotations

from typing import List

from ..recipes.wsds import branches, saved_steps
from .plan import Plan


def wsds_text(plan: Plan, table) -> str:
    """'' for a plan without decays; ``table(header, rows, right)`` lays the rows out."""
    per_run = [(r, r.budget.get("tokens_per_step")) for r in plan.runs]
    runs = [(r, t, branches(r.config.train, t)) for r, t in per_run if branches(r.config.train, t)]
    if not runs:
        return ""
    rows: List[List[str]] = []
    seen = set()
    steps = separate = flops = separate_flops = 0.0
    for run, per_step_tokens, points in runs:
        counts = saved_steps(run.config.train, per_step_tokens)
        per_step = run.budget["flops"] / run.budget["steps"] if run.budget.get("steps") else 0.0
        steps, separate = steps + counts["steps"], separate + counts["separate_steps"]
        flops, separate_flops = flops + counts["steps"] * per_step, separate_flops + counts["separate_steps"] * per_step
        if run.variant in seen:
            continue
        seen.add(run.variant)
        shown = [f"{b.steps} (fork {b.fork})" for b in points] + [str(run.config.train.max_steps)]
        tokens = ", ".join(f"{s * per_step_tokens:,.0f}" for s in counts["budgets"]) if per_step_tokens else "?"
        rows.append([run.variant + (" *" if run.is_baseline else ""), ", ".join(shown), tokens, f"{counts['steps']:,}",
                     f"{counts['separate_steps']:,}"])
    saved = 1 - steps / separate
    return ("\nWSD-S (train.schedule.decays / decay_tokens): each run trains its stable phase once and branches a "
            "decay to each budget below max_steps, recorded as a run of that length\n"
            + table(["variant", "budgets in steps (a branch forks where its decay starts)", "budgets in tokens",
                     "steps per seed", "as separate runs"], rows, (3, 4))
            + f"WSD-S: {len(runs)} runs train {steps:,.0f} steps ({flops:.3e} train FLOPs) for "
              f"{sum(len(p) + 1 for _, _, p in runs)} budget points; as separate runs "
              f"{separate:,.0f} steps ({separate_flops:.3e} FLOPs): {saved:.0%} saved\n")
