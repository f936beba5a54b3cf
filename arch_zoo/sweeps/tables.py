"""What ``arch-zoo sweep`` prints about a plan (``--dry-run``) and about its runs once trained."""
from __future__ import annotations

from typing import Dict, List, Optional

from ..formatting import plural, si
from ..run_names import plain
from ..rundir import INDEX, SUMMARY
from .halving import ladder_sizes, steps_per_seed
from .plan import Plan
from .plan_checks import comparison_warnings
from .stages import choice_line, stage_one, stage_two_size, stage_variants
from .seed_spec import RULE_NAMES
from .spec import BUDGETS
from .wsds_table import wsds_text
from .store import Store, read_json


def _table(header: List[str], rows: List[List[str]], right: tuple = ()) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = []
    for row in [header] + rows:
        cells = [str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def dry_run_table(plan: Plan, store: Optional[Store] = None) -> str:
    """The runs a spec plans; for a sweep that has run (``store`` holds some of its runs), with each
    run's status and metric, and for a tuned one what stage 1 chose and the stage 2 it planned.
    Reads the store, writes nothing."""
    ran = store is not None and any(store.status(r.run_id)["status"] != "pending" for r in plan.runs)
    text = _plan_table(plan, store if ran else None)
    text += (f"budget: match {plan.spec.budget} ({BUDGETS[plan.spec.budget]}); "
             f"train FLOPs = 3 x forward FLOPs/token x tokens, counted at {_counted_at(plan)}\n")
    text += "".join(line + "\n" for line in comparison_warnings(plan))
    text += adaptive_line(plan)
    text += wsds_text(plan, _table)
    tune = plan.spec.tune
    if tune is None:
        return text + _done(plan, store if ran else None) + \
            f"{plural(len(plan.runs), 'run')}; * marks the baseline; nothing was trained (--dry-run)\n"
    variants = stage_variants(plan)
    seeds = plan.spec.seeds or ["the base config's seed"]
    rows = [[name + (" *" if base else ""), ", ".join(map(str, seeds)), f"{tune.key}=chosen after stage 1"]
            for name, base in variants.items()]
    second, stage_two = None, ""
    if ran:
        from .plan import second_plan

        waiting, chosen, names = stage_one(plan, store)
        if waiting:
            stage_two = f"stage 1 has {plural(len(waiting), 'run')} to finish before stage 2 is planned\n"
        else:
            stage_two = "".join(choice_line(tune, names[k], c, "chose") + "\n" for k, c in chosen.items())
            second = second_plan(plan.spec, chosen)
            store.keep_ids(second)
    n_two = len(second.runs) if second is not None else stage_two_size(plan)
    planned = second is not None and second.runs
    return (f"stage 1 (tuning {tune.key} on seeds {', '.join(map(str, tune.seeds))}):\n" + text
            + (_halving_table(plan) if tune.halving is not None else "")
            + f"\nstage 2 (each variant at its best {tune.key} by {tune.select}, {tune.goal} of the mean over the "
              f"tuning seeds; planned when stage 1 has finished):\n" + stage_two
            + (_plan_table(second, store) if planned else _table(["variant", "seeds", "setting"], rows))
            + _done(plan, store if ran else None, second)
            + f"{plural(len(plan.runs), 'run')} in stage 1, {plural(n_two, 'run')} in stage 2; "
              "* marks the baseline; nothing was trained (--dry-run)\n")


def adaptive_line(plan: Plan) -> str:

    """What adaptive seeds (``seeds: {start, max}``) may add to the runs listed: their first round."""
    a = plan.spec.adaptive
    if a is None:
        return ""
    variants = len(stage_variants(plan)) if plan.spec.tune is not None else len({r.variant for r in plan.runs})
    return (f"seeds: adaptive ({RULE_NAMES[a.rule]} alpha spending, {a.alpha:g} two-sided over the "
            f"comparisons): seeds {a.seeds[0]}-{a.seeds[a.start - 1]} first, then {plural(a.step, 'seed')} a round "
            f"to each comparison still undecided, up to {a.max} (looks at {', '.join(map(str, a.looks))} seeds); "
            f"{variants * a.start} to {variants * a.max} evaluation runs\n")


def _plan_table(plan: Plan, store: Optional[Store]) -> str:
    """One row per run: what it changes, its size and budget; with ``store``, its status and metric."""
    metric = plan.spec.metric["name"]
    text = any(r.budget.get("bytes") for r in plan.runs)  # a text task: the bytes its tokens cover
    rows = []
    for run in plan.runs:
        changes = {**run.settings, **run.matched}
        b = run.budget
        off = b.get("flops_vs_baseline")
        done = [store.status(run.run_id)["status"], _metric(store, run.run_id, metric)] if store is not None else []
        rows.append([run.variant + (" *" if run.is_baseline else ""), str(run.seed), *done,
                     ", ".join(f"{k}={plain(v)}" for k, v in changes.items()) or "-", f"{run.params:,}",
                     str(b.get("steps", "")), si(b.get("tokens")), *([si(b.get("bytes"))] if text else []),
                     f"{b['flops']:.3e}" if "flops" in b else "", f"{off:+.2%}" if off is not None else "",
                     run.run_id])
    extra = ["status", metric] if store is not None else []
    shift = len(extra)
    right = (1, *([3] if shift else []), *(i + shift for i in range(3, 8 + text)))
    return _table(["variant", "seed", *extra, "changed keys", "params", "steps", "tokens",
                   *(["text bytes"] if text else []), "train FLOPs", "vs baseline", "run_id"], rows, right=right)


def _metric(store: Store, run_id: str, metric: str) -> str:
    value = (read_json(store.run_dir(run_id) / SUMMARY) or {}).get("final", {}).get(metric)
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def _done(plan: Plan, store: Optional[Store], second: Optional[Plan] = None) -> str:
    """'done: 3 completed, 1 interrupted, 2 pending (of 6 runs)' for a sweep that has run."""
    if store is None:
        return ""
    runs = plan.runs + (second.runs if second is not None else [])
    counts: Dict[str, int] = {}
    for run in runs:
        status = store.status(run.run_id)["status"]
        counts[status] = counts.get(status, 0) + 1
    shown = ", ".join(f"{n} {k}" for k, n in counts.items())
    return f"done in {store.root}: {shown} (of {plural(len(runs), 'run')})\n"


def _counted_at(plan: Plan) -> str:
    """The lengths the budgets count tokens and FLOPs at (a sweep's variants share the task)."""
    at = next((r.budget.get("flops_counted_at") for r in plan.runs if r.budget.get("flops_counted_at")), None) or {}
    if "split" not in at:
        return at.get("lengths", "model.max_seq_len")
    means = [f"{at[k]:.3g} {k.split('_')[1]}" for k in ("mean_source_tokens", "mean_target_tokens") if k in at]
    mean = " + ".join(means) if means else f"{at['mean_tokens']:.3g}"
    return f"the {at['split']} split's lengths (mean {mean} tokens per example; padding not counted)"


def _halving_table(plan: Plan) -> str:
    """Per variant: its rungs, how many values reach each, and stage 1's steps with and without halving
    (with: at most, when no value diverges or fails)."""
    tune = plan.spec.tune
    h, n = tune.halving, len(tune.values)
    budgets = {run.tune["variant"]: run.config.train.max_steps for run in plan.runs}  # one per variant (plan.py)
    rows, with_, without = [], 0, 0
    for name, base in stage_variants(plan).items():
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
