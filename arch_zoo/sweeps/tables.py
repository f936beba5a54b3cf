"""What ``arch-zoo sweep`` prints about a plan (``--dry-run``) and about its runs once trained."""
from __future__ import annotations

from typing import Dict, List

from ..formatting import plural, si
from ..run_names import plain, variant_name
from ..rundir import INDEX, SUMMARY
from .halving import ladder_sizes, steps_per_seed
from .plan import Plan
from .scale import transfer_lookup
from .spec import BUDGETS, expand
from .store import read_json


def _table(header: List[str], rows: List[List[str]], right: tuple = ()) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = []
    for row in [header] + rows:
        cells = [str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def dry_run_table(plan: Plan) -> str:
    rows = []
    for run in plan.runs:
        changes = {**run.settings, **run.matched}
        b = run.budget
        off = b.get("flops_vs_baseline")
        rows.append([run.variant + (" *" if run.is_baseline else ""), str(run.seed),
                     ", ".join(f"{k}={plain(v)}" for k, v in changes.items()) or "-", f"{run.params:,}",
                     str(b.get("steps", "")), si(b.get("tokens")), f"{b['flops']:.3e}" if "flops" in b else "",
                     f"{off:+.2%}" if off is not None else "", run.run_id])
    text = _table(["variant", "seed", "changed keys", "params", "steps", "tokens", "train FLOPs", "vs baseline",
                   "run_id"], rows, right=(1, 3, 4, 5, 6, 7))
    text += (f"budget: match {plan.spec.budget} ({BUDGETS[plan.spec.budget]}); "
             f"train FLOPs = 3 x forward FLOPs/token x tokens\n")
    tune = plan.spec.tune
    if tune is None:
        return text + f"{plural(len(plan.runs), 'run')}; * marks the baseline; nothing was trained (--dry-run)\n"
    variants = _variants(plan)
    seeds = plan.spec.seeds or ["the base config's seed"]
    rows = [[name + (" *" if base else ""), ", ".join(map(str, seeds)), f"{tune.key}=chosen after stage 1"]
            for name, base in variants.items()]
    return (f"stage 1 (tuning {tune.key} on seeds {', '.join(map(str, tune.seeds))}):\n" + text
            + (_halving_table(plan) if tune.halving is not None else "")
            + f"\nstage 2 (each variant at its best {tune.key} by {tune.select}, {tune.goal} of the mean over the "
              f"tuning seeds; planned when stage 1 has finished):\n"
            + _table(["variant", "seeds", "setting"], rows)
            + f"{plural(len(plan.runs), 'run')} in stage 1, {plural(len(variants) * len(seeds), 'run')} in stage 2; "
              "* marks the baseline; nothing was trained (--dry-run)\n")


def _variants(plan: Plan) -> Dict[str, bool]:
    """A tuned plan's variants (names without the tuned key) -> whether the baseline is among them
    (without a spec baseline, only the first value's runs are marked, so any of them counts)."""
    out: Dict[str, bool] = {}
    for r in plan.runs:
        out[r.tune["variant"]] = out.get(r.tune["variant"], False) or r.is_baseline
    scale = plan.spec.scale
    if scale is not None and scale.lr == "transfer":  # stage 1 tunes the smallest rung; stage 2 trains them all
        first = transfer_lookup(scale)
        out = {variant_name(v.settings, plan.names): out.get(variant_name(first(v.settings), plan.names), False)
               for v in expand(plan.spec)}
    return out


def _halving_table(plan: Plan) -> str:
    """Per variant: its rungs, how many values reach each, and stage 1's steps with and without halving
    (with: at most, when no value diverges or fails)."""
    tune = plan.spec.tune
    h, n = tune.halving, len(tune.values)
    budgets = {run.tune["variant"]: run.config.train.max_steps for run in plan.runs}  # one per variant (plan.py)
    rows, with_, without = [], 0, 0
    for name, base in _variants(plan).items():
        max_steps = budgets[name]
        spent, full = steps_per_seed(n, h, max_steps) * len(tune.seeds), n * max_steps * len(tune.seeds)
        with_, without = with_ + spent, without + full
        rows.append([name + (" *" if base else ""), ", ".join(f"{s}: {k}" for s, k in ladder_sizes(n, h, max_steps)),
                     f"{spent:,}", f"{full:,}"])
    return (f"\nsuccessive halving (eta {h.eta}, min_steps {h.min_steps}): at each rung a variant keeps its best "
            f"1/{h.eta} of the values still in (at least one) by {tune.select}, the mean over the tuning seeds; a "
            "value that diverges or fails is dropped\n"
            + _table(["variant", "rungs (step: values that reach it)", "stage-1 steps", "without halving"], rows,
                     right=(2, 3))
            + f"stage-1 steps: {with_:,} with halving (at most), {without:,} without ({with_ / without - 1:+.0%})\n")


def results_table(outcome) -> str:
    """The runs of a ``SweepOutcome`` with their status and the spec's metric."""
    metric = outcome.plan.spec.metric["name"]
    rows, statuses = [], outcome.statuses()
    for run in outcome.plan.runs:
        final = (read_json(outcome.store.run_dir(run.run_id) / SUMMARY) or {}).get("final", {})
        value = final.get(metric)
        rows.append([run.variant + (" *" if run.is_baseline else ""), str(run.seed), statuses[run.run_id]["status"],
                     f"{value:.4f}" if isinstance(value, (int, float)) else "-"])
    goal = "lower" if outcome.plan.spec.metric["goal"] == "min" else "higher"
    return (_table(["variant", "seed", "status", metric], rows, right=(1, 3))
            + f"{metric}: {goal} is better; * marks the baseline; index: {outcome.store.root / INDEX}\n")
